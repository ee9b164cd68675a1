//! `dispatcher test cli-sandbox-contract`: the sandbox contract through a server the command
//! starts itself. The real CLIs (scripts/install-clis.sh, `.tools/clis/bin`) pass with the
//! real model's part skipped (`--real-model`: nobody is logged in here; the scripted model's
//! part 3 is tests/tests/cli_model_driven.rs's); a policy broken *by the server* fails on
//! exactly the probes that guard it; the logged-in path runs end to end with a fake CLI whose
//! "model" runs the harness script it is asked to (refusing once, to show the retry); bad
//! input exits 2 and leaves nothing behind. Every run gets its own home and `--tmp-dir`; the
//! server is the command's child, and each test checks that it is gone afterwards.
#![cfg(target_os = "linux")]

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use agentworks_e2e::{
    FakeCli, TEST_USER, as_test_user, chown_r, clis_dir, copy_binaries, dispatcher_bin,
    failing_probes, json_of, require_root, test_user_ids, text,
};
use serde_json::Value;

/// A private home and temporary folder for one run.
struct Run {
    dir: tempfile::TempDir,
}

impl Run {
    fn new() -> Run {
        let dir = tempfile::Builder::new()
            .prefix("aw-cs-")
            .tempdir_in("/tmp")
            .unwrap();
        std::fs::create_dir(dir.path().join("home")).unwrap();
        std::fs::create_dir(dir.path().join("tmp")).unwrap();
        Run { dir }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn tmp(&self) -> PathBuf {
        self.dir.path().join("tmp")
    }

    /// The command with a clean environment: PATH (the real CLIs first when given), the
    /// private home; never the person's state root or keys.
    fn command(&self, clis: Option<&Path>) -> Command {
        let path = match clis {
            Some(c) => format!("{}:/usr/local/bin:/usr/bin:/bin", c.display()),
            None => "/usr/local/bin:/usr/bin:/bin".into(),
        };
        let mut c = Command::new(dispatcher_bin());
        c.env_clear()
            .env("PATH", path)
            .env("HOME", self.home())
            .env("USER", "root")
            .current_dir(self.dir.path());
        c
    }

    fn test(&self, clis: Option<&Path>, args: &[&str]) -> Output {
        let mut c = self.command(clis);
        c.args(["test", "cli-sandbox-contract", "--tmp-dir"])
            .arg(self.tmp())
            .args(args);
        c.output().unwrap()
    }

    /// Adds `test cli-sandbox-contract --provider PROVIDER FLAGS --tmp-dir TMP` to `c`.
    fn contract_args(&self, c: &mut Command, provider: &str, flags: &[&str]) {
        c.args(["test", "cli-sandbox-contract", "--provider", provider])
            .args(flags)
            .arg("--tmp-dir")
            .arg(self.tmp());
    }

    /// `test` without the real CLIs, which must exit 2; its stderr.
    fn refused(&self, args: &[&str]) -> String {
        let out = self.test(None, args);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// Nothing of the run is left in its temporary folder.
    fn assert_clean(&self) {
        let left: Vec<_> = std::fs::read_dir(self.tmp())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }
}

fn alive(pid: i64) -> bool {
    // A zombie has ended; /proc/PID/stat's state says so.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .is_some_and(|st| st != "Z"),
        Err(_) => false,
    }
}

/// The checks of part 1 by name, with their pass.
fn checks(v: &Value) -> Vec<(String, bool)> {
    v["server"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["check"].as_str().unwrap().to_string(),
                c["pass"].as_bool().unwrap(),
            )
        })
        .collect()
}

const SERVER_CHECKS: [&str; 9] = [
    "launched",
    "listed",
    "policy-identical",
    "bridge-served",
    "cli-confined",
    "squatter-learns-nothing",
    "bridge-own-namespace",
    "stopped",
    "events",
];

#[test]
fn real_clis_pass_through_the_server() {
    let clis = clis_dir();
    require_root();
    for cli in ["claude", "codex"] {
        let run = Run::new();
        let out = run.test(Some(&clis), &["--provider", cli, "--json", "--real-model"]);
        let v = json_of(&out);
        assert_eq!(out.status.code(), Some(0), "{cli}: {}", text(&out));
        assert_eq!(v["passed"], true, "{cli}");
        assert_eq!(v["provider"], cli);
        // Part 1 ran, every check of it.
        let names: Vec<String> = checks(&v).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, SERVER_CHECKS, "{cli}");
        assert!(
            checks(&v).iter().all(|(_, p)| *p),
            "{cli}: {:?}",
            checks(&v)
        );
        // Part 2 ran the contract's probes, under the server's own wrapper and policy file.
        let harness = &v["harness"];
        let probes = harness["results"].as_array().unwrap();
        assert!(probes.len() > 40, "{cli}: only {} probes", probes.len());
        assert!(failing_probes(harness).is_empty(), "{cli}");
        let how = harness["confinement"].as_str().unwrap();
        assert!(
            how.contains("the server's wrapper")
                && how.contains("sandboxer exec --policy")
                && how.contains("/state/cli-runtimes/v1/chat-1/.agentworks/policy.toml"),
            "{cli}: {how}"
        );
        for must in ["other-workflow-read", "attached-write", "config-json-read"] {
            assert!(
                probes.iter().any(|p| p["probe"] == must),
                "{cli}: {must} not run"
            );
        }
        // Part 3 with --real-model: nobody is logged in here (the scripted model, the
        // default, is tests/tests/cli_model_driven.rs's).
        assert_eq!(v["model"]["status"], "skipped: not logged in", "{cli}");
        assert!(v["model"]["column"].is_null());
        // The server it started is gone, and so is its world.
        let pid = v["server"]["pid"].as_i64().unwrap();
        assert!(!alive(pid), "{cli}: the server (pid {pid}) still runs");
        run.assert_clean();
    }
    // The table says the same, and says the model part was skipped.
    let run = Run::new();
    let out = run.test(Some(&clis), &["--provider", "codex", "--real-model"]);
    let t = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(t.contains("== part 1 · server"), "{t}");
    assert!(
        t.contains("== part 2 · harness under the server's policy"),
        "{t}"
    );
    assert!(
        t.contains("== part 3 · model-driven · skipped: not logged in"),
        "{t}"
    );
    assert!(t.contains(": PASS"), "{t}");
    run.assert_clean();
}

/// The hook makes the *server* widen the workflow grant: only the server's policy is broken
/// (this command plans nothing it runs under), and exactly the probes guarding other
/// workflows fail — so the grants under test are the server's.
#[test]
fn a_policy_broken_by_the_server_fails_on_the_probes_that_guard_it() {
    let clis = clis_dir();
    require_root();
    let run = Run::new();
    let out = run.test(
        Some(&clis),
        &[
            "--provider",
            "codex",
            "--json",
            "--break-policy",
            "widen-workflow-grant",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let v = json_of(&out);
    assert_eq!(v["passed"], false);
    assert!(!v["test_hooks"].as_array().unwrap().is_empty());
    let expected: BTreeSet<String> = [
        "other-workflow-read",
        "other-workflow-write",
        "other-workflow-list",
        "other-workflow-create",
        "other-workflow-exec",
    ]
    .map(String::from)
    .into();
    assert_eq!(failing_probes(&v["harness"]), expected);
    // The server said it broke the policy, and its journal and file still agree.
    let launched = &v["server"]["checks"][0];
    assert!(
        launched["detail"].as_str().unwrap().contains(
            "TEST ONLY: policy broken by AGENTWORKS_TEST_BREAK_POLICY=widen-workflow-grant"
        ),
        "{launched}"
    );
    assert!(checks(&v).iter().all(|(_, p)| *p), "{:?}", checks(&v));
    // Without --json the failing probe is named in the table.
    let run2 = Run::new();
    let out = run2.test(
        Some(&clis),
        &["--provider", "codex", "--break-policy", "empty-refuse"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = String::from_utf8_lossy(&out.stdout);
    let line = t
        .lines()
        .find(|l| l.trim_start().starts_with("plan-json-read "))
        .unwrap_or_else(|| panic!("{t}"));
    assert!(line.contains("FAIL"), "{line}");
    assert!(t.contains(": FAIL"), "{t}");
    run.assert_clean();
    run2.assert_clean();
}

#[test]
fn bad_input_exits_2_and_leaves_nothing() {
    let run = Run::new();
    let err = run.refused(&["--provider", "nosuch"]);
    assert!(
        err.contains("unknown CLI \"nosuch\"") && err.contains("known: agy, claude"),
        "{err}"
    );
    run.assert_clean();

    // A known CLI that is not installed: the binary and the installer are named.
    let err = run.refused(&["--provider", "cursor"]);
    assert!(
        err.contains("`cursor-agent` is not on PATH") && err.contains("scripts/install-clis.sh"),
        "{err}"
    );
    run.assert_clean();

    // An unknown break, and a state root that is not a new or empty folder.
    run.refused(&["--provider", "codex", "--break-policy", "nope"]);
    let busy = run.dir.path().join("busy");
    std::fs::create_dir(&busy).unwrap();
    std::fs::write(busy.join("x"), "").unwrap();
    let mut c = run.command(Some(&clis_dir()));
    c.arg("--state-root").arg(&busy);
    run.contract_args(&mut c, "codex", &[]);
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not empty"),
        "{}",
        text(&out)
    );
    assert_eq!(std::fs::read_dir(&busy).unwrap().count(), 1);
    run.assert_clean();
}

fn fake_profiles(dir: &Path) -> PathBuf {
    let profiles = dir.join("profiles");
    FakeCli::Model.install(dir, &profiles);
    profiles
}

/// Runs the contract with the fake model CLI, logged in with `key`, through `c`; checks it
/// passes and returns its output and JSON report.
fn fake_model_passes(run: &Run, mut c: Command, key: &str, profiles: &Path) -> (Output, Value) {
    c.env("FAKE_MODEL_KEY", key)
        .arg("--profiles-dir")
        .arg(profiles);
    run.contract_args(&mut c, "fake", &["--json"]);
    let out = c.output().unwrap();
    let v = json_of(&out);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    (out, v)
}

#[test]
fn the_model_part_runs_the_harness_through_the_server_when_logged_in() {
    require_root();
    let run = Run::new();
    let profiles = fake_profiles(run.dir.path());
    let (out, v) = fake_model_passes(&run, run.command(None), "not-a-real-key", &profiles);
    let m = &v["model"];
    assert_eq!(m["status"], "ran", "{m}");
    assert_eq!(m["detail"], "logged in: $FAKE_MODEL_KEY is set");
    // The first attempt was refused; the second ran the harness.
    let attempts = m["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{m}");
    assert!(
        attempts[0]
            .as_str()
            .unwrap()
            .contains("the CLI did not run the harness"),
        "{m}"
    );
    let col = &m["column"];
    assert!(
        col["confinement"].as_str().unwrap().contains("attempt 2"),
        "{col}"
    );
    assert!(col["results"].as_array().unwrap().len() > 40);
    assert!(failing_probes(col).is_empty(), "{col}");
    // The key was handed to the server, never printed.
    assert!(!String::from_utf8_lossy(&out.stdout).contains("not-a-real-key"));
    run.assert_clean();
}

/// The same path as the unprivileged `sbx-test` (with the fake CLI: the real ones live in
/// the checkout, which that user may not reach).
#[test]
fn an_unprivileged_user_runs_it_too() {
    require_root();
    let ids = test_user_ids();
    let run = Run::new();
    std::fs::set_permissions(run.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (dispatcher, _) = copy_binaries(&run.dir.path().join("bin"));
    let profiles = fake_profiles(run.dir.path());
    chown_r(run.dir.path(), ids);
    let mut c = as_test_user(&dispatcher);
    c.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", run.home())
        .env("USER", TEST_USER)
        .current_dir(run.dir.path());
    let (_, v) = fake_model_passes(&run, c, "x", &profiles);
    assert_eq!(v["machine"]["uid"], ids.0);
    assert!(checks(&v).iter().all(|(_, p)| *p), "{:?}", checks(&v));
    assert!(v["harness"]["results"].as_array().unwrap().len() > 40);
    assert_eq!(v["model"]["status"], "ran");
    assert!(!alive(v["server"]["pid"].as_i64().unwrap()));
    run.assert_clean();
}
