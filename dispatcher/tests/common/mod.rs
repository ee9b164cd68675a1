//! What the dispatcher's live test files share: the unprivileged test user, running a program
//! as that user, and skipping (or, under CI, failing) when a prerequisite is missing. Each
//! test file uses a part of it.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::process::{Command, Output};

/// The unprivileged user `scripts/setup-test-env.sh` creates.
pub const TEST_USER: &str = "sbx-test";

/// Under CI a missing prerequisite fails; elsewhere the test is skipped with a notice.
pub fn unavailable(why: &str) {
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
        panic!("{why}");
    }
    eprintln!("SKIPPED: {why}");
}

pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The test user's uid and gid, if it exists.
pub fn user_ids() -> Option<(u32, u32)> {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, TEST_USER]).output().ok()?;
        String::from_utf8(out.stdout).ok()?.trim().parse().ok()
    };
    Some((id("-u")?, id("-g")?))
}

/// `program` run as the test user (with that user's groups), by `setpriv`.
pub fn as_test_user(program: impl AsRef<OsStr>) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid",
        TEST_USER,
        "--regid",
        TEST_USER,
        "--init-groups",
        "--",
    ]);
    c.arg(program);
    c
}

/// A finished command's status and output, for assertion messages.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs the test `name` of this test binary again as the unprivileged test user, with
/// `marker` set in its environment (so the copy knows not to start another), and asserts that
/// it ran and passed. For live tests that must hold for root and for a normal user alike.
pub fn rerun_as_test_user(name: &str, marker: &str) {
    assert!(
        user_ids().is_some(),
        "user {TEST_USER} is missing: run scripts/setup-test-env.sh"
    );
    let out = as_test_user(std::env::current_exe().unwrap())
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env(marker, "1")
        .current_dir("/")
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .output()
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "as {TEST_USER}: {t}");
    assert!(
        t.contains("1 passed"),
        "as {TEST_USER}: the test did not run: {t}"
    );
}
