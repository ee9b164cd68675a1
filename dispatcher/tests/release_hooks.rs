//! The release build has no test hooks. `cargo build --release` builds the dispatcher without
//! the `test-hooks` feature (the test suite's own binary has it), and that binary refuses
//! every hook with a clear error instead of quietly ignoring it: a server asked to kill itself
//! or to break every launch's policy does not start, and `--break-policy` is refused.
//!
//! The release binary is built here, as `scripts/test.sh`'s machine would ship it; cargo says
//! which features it was built with, and the test checks that too.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The test suite's dispatcher: built with the hooks.
const TEST_BUILD: &str = env!("CARGO_BIN_EXE_dispatcher");

/// Builds the release dispatcher and returns its path; fails the test if that cannot be done.
fn release_dispatcher() -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--locked",
            "-p",
            "dispatcher",
            "--bin",
            "dispatcher",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cannot run cargo");
    assert!(
        out.status.success(),
        "cargo build --release failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let artifact = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|m| {
            m["reason"] == "compiler-artifact"
                && m["target"]["name"] == "dispatcher"
                && m["executable"].is_string()
        })
        .expect("cargo named no dispatcher executable");
    let features: Vec<&str> = artifact["features"]
        .as_array()
        .expect("features")
        .iter()
        .filter_map(|f| f.as_str())
        .collect();
    assert!(
        !features.contains(&"test-hooks"),
        "the release build has the test hooks: {features:?}"
    );
    PathBuf::from(artifact["executable"].as_str().unwrap())
}

fn run(dispatcher: &Path, state_root: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(dispatcher);
    c.arg("--state-root")
        .arg(state_root)
        .args(args)
        .env("HOME", state_root.parent().unwrap())
        .env_remove("AGENTWORKS_STATE_ROOT")
        .env_remove(dispatcher::server::CRASH_AT_ENV)
        .env_remove(dispatcher::server::BREAK_POLICY_ENV)
        .envs(env.iter().copied());
    c.output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn the_release_build_refuses_every_test_hook() {
    let release = release_dispatcher();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("state");
    let init = run(&release, &root, &[], &["init"]);
    assert!(init.status.success(), "{}", stderr(&init));

    // A server asked for a hook does not start: nothing listens, no server.json.
    for (var, value) in [
        (dispatcher::server::BREAK_POLICY_ENV, "widen-grant"),
        (dispatcher::server::CRASH_AT_ENV, "intent"),
    ] {
        let out = run(&release, &root, &[(var, value)], &["serve", "--port", "0"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{var}: {err}");
        assert!(
            err.contains(&format!("{var}={value} is a test hook"))
                && err.contains("built without test hooks"),
            "{var}: {err}"
        );
        assert!(!err.contains("listening"), "{var}: {err}");
        assert!(!root.join("server.json").exists(), "{var}");
    }

    // The hidden flag is refused before anything runs.
    for args in [
        &["contract", "--no-live", "--break-policy", "widen-grant"][..],
        &[
            "test",
            "cli-sandbox-contract",
            "--provider",
            "codex",
            "--break-policy",
            "widen-grant",
        ],
    ] {
        let out = run(&release, &root, &[], args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("--break-policy widen-grant is a test hook"),
            "{args:?}: {err}"
        );
    }
}

/// The control: the test suite's own binary has the hooks, so the same flag is parsed there
/// (an unknown break is named as such, not refused as a missing hook).
#[test]
fn the_test_build_has_the_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("state");
    let out = run(
        Path::new(TEST_BUILD),
        &root,
        &[],
        &["contract", "--no-live", "--break-policy", "nope"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("expected one of widen-grant"),
        "the test build does not know --break-policy: {err}"
    );
    assert!(!err.contains("built without test hooks"), "{err}");
}
