//! The contract's model-driven part (part 3 of `dispatcher test cli-sandbox-contract`) for the
//! five real CLIs that speak a public wire API, with no login: each is pointed at the scripted
//! model on loopback, its own shell tool runs the harness script and its own write tool writes,
//! inside the sandbox the command's own server set up. As root and as the unprivileged
//! `sbx-test`; the five run in parallel (each command has its own world, server and model), and
//! the time for all five together is printed (docs/contract.md keeps the figure).
//!
//! Also: a policy broken by the server fails exactly the model-driven probes that guard it,
//! and a CLI whose endpoint setting is broken (it asks somewhere else) fails saying it never
//! asked the model endpoint.
#![cfg(target_os = "linux")]

use std::collections::BTreeSet;
use std::time::Duration;

use agentworks_e2e::{
    CliWorld, Runner, Who, as_root_and_user, failing_probes, five_at_once, json_of, repo, text,
};
use serde_json::Value;

/// Part 3 ran with the scripted model and every fact of it holds.
fn assert_model_ran(cli: &str, v: &Value) {
    let m = &v["model"];
    assert_eq!(m["status"], "ran", "{cli}: {m}");
    assert!(
        m["detail"].as_str().unwrap().contains("the scripted model"),
        "{cli}: {m}"
    );
    let checks: Vec<(&str, bool)> = m["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["check"].as_str().unwrap(), c["pass"] == true))
        .collect();
    assert_eq!(
        checks,
        [
            ("endpoint-asked", true),
            ("shell-result-returned", true),
            ("write-tool-wrote", true),
            ("write-result-returned", true),
            ("through-the-proxy", true)
        ],
        "{cli}: {m}"
    );
    let col = &m["column"];
    assert!(col["results"].as_array().unwrap().len() > 40, "{cli}");
    assert!(failing_probes(col).is_empty(), "{cli}: {col}");
}

/// The five at once; each one's time and the total are printed.
fn all_five_pass_part_3(who: Who) {
    // Far above the figure in docs/contract.md: a CLI stuck until its timeout shows here.
    five_at_once(
        &Runner::new(who),
        "aw-md-",
        "cli-sandbox-contract",
        Duration::from_secs(300),
        |cli, out| {
            assert_eq!(out.status.code(), Some(0), "{cli}: {}", text(out));
            assert_model_ran(cli, &json_of(out));
        },
    );
}

as_root_and_user!(all_five_pass_part_3 => five_pass_part_3_as_root, five_pass_part_3_as_user);

/// A server that widens the workflow grant fails the same probes in part 3 as in part 2:
/// the CLI's own shell tool ran under the broken policy.
#[test]
fn a_broken_policy_fails_exactly_the_model_driven_probes_that_guard_it() {
    let runner = Runner::new(Who::Root);
    let cases: [(&str, &[&str]); 2] = [
        (
            "widen-workflow-grant",
            &[
                "other-workflow-read",
                "other-workflow-write",
                "other-workflow-list",
                "other-workflow-create",
                "other-workflow-exec",
            ],
        ),
        ("empty-refuse", &["plan-json-read"]),
    ];
    let runs: Vec<_> = cases
        .iter()
        .map(|(how, _)| {
            let world = CliWorld::new(&runner, "aw-md-");
            let mut c = world.dispatcher(
                &runner,
                &[
                    "test",
                    "cli-sandbox-contract",
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
        let model = &v["model"];
        assert_eq!(model["status"], "ran", "{how}: {model}");
        let failed = failing_probes(&model["column"]);
        assert_eq!(failed, failing_probes(&v["harness"]), "{how}");
        for p in *must_fail {
            assert!(failed.contains(*p), "{how}: {p} passed: {failed:?}");
        }
        if *how == "widen-workflow-grant" {
            let expected: BTreeSet<String> = must_fail.iter().map(|s| s.to_string()).collect();
            assert_eq!(failed, expected, "{how}");
        }
    }
}

/// pi's endpoint setting pointed elsewhere (a profiles override): it never asks the scripted
/// model, and the part fails saying so, once (asking again would not change it).
#[test]
fn a_cli_that_ignores_its_endpoint_fails_clearly() {
    let runner = Runner::new(Who::Root);
    let world = CliWorld::new(&runner, "aw-md-");
    let profiles = world.dir.path().join("profiles");
    std::fs::create_dir_all(profiles.join("clis")).unwrap();
    let pi = std::fs::read_to_string(repo().join("profiles/clis/pi.toml")).unwrap();
    let broken = pi.replace(
        "baseUrl = \"{model_url}/v1\"",
        "baseUrl = \"http://127.0.0.1:9/v1\"",
    );
    assert_ne!(
        broken, pi,
        "profiles/clis/pi.toml no longer sets baseUrl that way"
    );
    std::fs::write(profiles.join("clis/pi.toml"), broken).unwrap();
    let profiles_arg = profiles.display().to_string();
    let out = world
        .dispatcher(
            &runner,
            &[
                "--profiles-dir",
                &profiles_arg,
                "test",
                "cli-sandbox-contract",
                "--provider",
                "pi",
                "--json",
            ],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let v = json_of(&out);
    let m = &v["model"];
    assert_eq!(m["status"], "failed", "{m}");
    let attempts = m["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{m}");
    assert!(
        attempts[0]
            .as_str()
            .unwrap()
            .contains("the CLI never asked the model endpoint"),
        "{m}"
    );
    // Parts 1 and 2 do not depend on the model: they still pass.
    assert!(failing_probes(&v["harness"]).is_empty());
}
