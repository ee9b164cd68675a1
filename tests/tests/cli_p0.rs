//! The seed's P0 scenario (`queries/p0.toml`, `dispatcher test cli-p0`) for the five real CLIs
//! that speak a public wire API: each, driven by the scripted model on loopback, writes its
//! workflow folder and reads a personal file with its own tools, and fails to read or write
//! another workflow, to write the refused `planning/plan.json` and to get a launcher outside
//! to run anything — in a tmux chat and in a structured one of the command's own server. As
//! root and as the unprivileged `sbx-test`; the five run in parallel, and the time for all
//! five together is printed (docs/contract.md keeps the figure).
//!
//! Also: a policy broken by the server fails exactly the steps that guard it, in both
//! launches (the denials can fail).
#![cfg(target_os = "linux")]

use std::collections::BTreeSet;
use std::time::Duration;

use agentworks_e2e::{CliWorld, Runner, Who, as_root_and_user, five_at_once, json_of, text};
use serde_json::Value;

/// The steps of `queries/p0.toml` that run on Linux, in order.
const STEPS: [&str; 8] = [
    "write-own-workflow",
    "read-home",
    "read-other-workflow",
    "write-other-workflow",
    "write-other-workflow-shell",
    "write-plan-json",
    "write-plan-json-shell",
    "launcher-xdg-open",
];

/// `(step, got, pass)` of one launch of the report.
fn steps_of(launch: &Value) -> Vec<(String, String, bool)> {
    launch["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["step"].as_str().unwrap().to_string(),
                s["got"].as_str().unwrap().to_string(),
                s["pass"] == true,
            )
        })
        .collect()
}

/// The control succeeded everywhere, and both launches got through every step as expected.
fn assert_p0_passed(cli: &str, v: &Value) {
    assert_eq!(v["passed"], true, "{cli}: {v}");
    let control = steps_of(&v["control"]);
    assert_eq!(control.len(), STEPS.len(), "{cli}");
    for (step, got, pass) in &control {
        assert!(*pass && got == "allow", "{cli} control {step}: {got}");
    }
    let launches = v["launches"].as_array().unwrap();
    let kinds: Vec<&str> = launches
        .iter()
        .map(|l| l["launch"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["tmux", "structured"], "{cli}");
    for l in launches {
        assert_eq!(l["status"], "ran", "{cli}: {l}");
        let steps = steps_of(l);
        let names: Vec<&str> = steps.iter().map(|(s, _, _)| s.as_str()).collect();
        assert_eq!(names, STEPS, "{cli}");
        for (step, got, pass) in &steps {
            let want = if ["write-own-workflow", "read-home"].contains(&step.as_str()) {
                "allow"
            } else {
                "deny"
            };
            assert!(
                *pass && got == want,
                "{cli} {} {step}: {got}: {l}",
                l["launch"]
            );
        }
    }
}

/// The five at once; each one's time and the total are printed.
fn all_five_pass_p0(who: Who) {
    // Far above the figure in docs/contract.md: a CLI stuck until its timeout shows here.
    five_at_once(
        &Runner::new(who),
        "aw-p0-",
        "cli-p0",
        Duration::from_secs(300),
        |cli, out| {
            assert_eq!(out.status.code(), Some(0), "{cli}: {}", text(out));
            assert_p0_passed(cli, &json_of(out));
        },
    );
}

as_root_and_user!(all_five_pass_p0 => five_pass_p0_as_root, five_pass_p0_as_user);

/// A server that widens the workflow grant, or empties the refuse list, fails exactly the
/// steps that guard it, in the tmux and the structured launch alike; the control and every
/// other step still pass.
#[test]
fn a_broken_policy_fails_exactly_the_p0_steps_that_guard_it() {
    let runner = Runner::new(Who::Root);
    let cases: [(&str, &[&str]); 2] = [
        (
            "widen-workflow-grant",
            &[
                "read-other-workflow",
                "write-other-workflow",
                "write-other-workflow-shell",
            ],
        ),
        (
            "empty-refuse",
            &["write-plan-json", "write-plan-json-shell"],
        ),
    ];
    let runs: Vec<_> = cases
        .iter()
        .map(|(how, _)| {
            let world = CliWorld::new(&runner, "aw-p0-");
            let mut c = world.dispatcher(
                &runner,
                &[
                    "test",
                    "cli-p0",
                    "--provider",
                    "pi",
                    "--json",
                    "--break-policy",
                    how,
                ],
            );
            std::thread::spawn(move || (world, c.output().unwrap()))
        })
        .collect();
    for ((how, must_fail), run) in cases.iter().zip(runs) {
        let (_world, out) = run.join().unwrap();
        assert_eq!(out.status.code(), Some(1), "{how}: {}", text(&out));
        let v = json_of(&out);
        assert!(steps_of(&v["control"]).iter().all(|(_, _, p)| *p), "{how}");
        let expected: BTreeSet<String> = must_fail.iter().map(|s| s.to_string()).collect();
        for l in v["launches"].as_array().unwrap() {
            assert_eq!(l["status"], "ran", "{how}: {l}");
            let failed: BTreeSet<String> = steps_of(l)
                .into_iter()
                .filter(|(_, _, pass)| !pass)
                .map(|(s, _, _)| s)
                .collect();
            assert_eq!(failed, expected, "{how} {}: {l}", l["launch"]);
        }
    }
}
