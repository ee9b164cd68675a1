//! What every live test shares: the unprivileged test user `sbx-test`, running a program as
//! root or as that user, running a test again as that user, and failing a test whose machine
//! is not set up. A live test that cannot run is a failure that says what is missing and how to
//! get it, never a pass: `bash scripts/test.sh` sets the machine up (as root) and runs them all.

use std::ffi::OsStr;
use std::process::{Command, Output};

/// The unprivileged user `scripts/setup-test-env.sh` creates.
pub const TEST_USER: &str = "sbx-test";

/// The PATH live tests give the programs they run.
pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The command that sets this machine up for the live tests, and runs them.
pub const SETUP: &str = "bash scripts/test.sh";

/// Fails the running test: `what` (a root shell, the test user, a tool, a kernel feature) is
/// missing here. A live test that cannot run must never pass.
#[track_caller]
pub fn missing(what: &str) -> ! {
    panic!(
        "NOT RUN: this live test needs {what}, and does not have it here. `{SETUP}` (as root) \
         sets the machine up and runs the tests."
    )
}

pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Fails the test unless it runs as root (it switches to the test user, or needs root's
/// privileges itself).
#[track_caller]
pub fn require_root() {
    if !is_root() {
        missing("root (it runs the sandbox as root and as the test user sbx-test)");
    }
}

/// The test user's uid and gid, if it exists.
pub fn user_ids() -> Option<(u32, u32)> {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, TEST_USER]).output().ok()?;
        if !out.status.success() {
            return None;
        }
        String::from_utf8(out.stdout).ok()?.trim().parse().ok()
    };
    Some((id("-u")?, id("-g")?))
}

/// The test user's uid and gid; fails the test when the user does not exist.
#[track_caller]
pub fn test_user_ids() -> (u32, u32) {
    user_ids().unwrap_or_else(|| missing("the unprivileged user sbx-test"))
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

/// Whom a live scenario runs the sandbox (and its controls) as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    Root,
    User,
}

/// Two tests of one live scenario: `$as_root` runs `$scenario(Who::Root)`, `$as_user` runs
/// `$scenario(Who::User)`.
#[macro_export]
macro_rules! as_root_and_user {
    ($scenario:path => $as_root:ident, $as_user:ident) => {
        #[test]
        fn $as_root() {
            $scenario($crate::Who::Root);
        }

        #[test]
        fn $as_user() {
            $scenario($crate::Who::User);
        }
    };
}

/// For each `scenario(&Runner)` named, a module of that name with two tests, `as_root` and
/// `as_user`, that run it as root and as the unprivileged test user.
#[macro_export]
macro_rules! live_scenarios {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            #[test]
            fn as_root() {
                super::$scenario(&$crate::Runner::new($crate::Who::Root));
            }
            #[test]
            fn as_user() {
                super::$scenario(&$crate::Runner::new($crate::Who::User));
            }
        }
    )*};
}

/// The identity a live scenario runs as: root, the test user (switched to from root), or,
/// in a test process that is not root (a copy run again as the test user), this process's own
/// unprivileged user.
#[derive(Clone, Debug)]
pub struct Runner {
    pub uid: u32,
    pub gid: u32,
    /// Switch to this user with `setpriv` (the test process is root).
    pub switch_to: Option<&'static str>,
}

impl Runner {
    /// The runner for `who`; fails the test when it cannot be had here.
    #[track_caller]
    pub fn new(who: Who) -> Runner {
        match who {
            Who::Root => {
                require_root();
                Runner {
                    uid: 0,
                    gid: 0,
                    switch_to: None,
                }
            }
            Who::User if is_root() => {
                let (uid, gid) = test_user_ids();
                Runner {
                    uid,
                    gid,
                    switch_to: Some(TEST_USER),
                }
            }
            // SAFETY: getuid/getgid cannot fail.
            Who::User => Runner {
                uid: unsafe { libc::geteuid() },
                gid: unsafe { libc::getegid() },
                switch_to: None,
            },
        }
    }

    /// `program` run as this runner, with an empty environment.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = match self.switch_to {
            Some(_) => as_test_user(program),
            None => Command::new(program),
        };
        c.env_clear();
        c
    }

    /// [`Runner::command`] with [`PATH`] and a UTF-8 locale.
    pub fn command_with_path(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = self.command(program);
        c.env("PATH", PATH).env("LANG", "C.UTF-8");
        c
    }
}

impl Runner {
    /// `bin` itself when this runner can execute it, else a copy in a world-readable folder
    /// under /tmp (a CI checkout under /root is not reachable by the unprivileged user),
    /// made once per binary version.
    pub fn reachable(&self, bin: &std::path::Path) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        static CHECKED: std::sync::Mutex<Vec<(std::path::PathBuf, std::path::PathBuf)>> =
            std::sync::Mutex::new(Vec::new());
        if self.switch_to.is_none() {
            return bin.to_path_buf();
        }
        let mut checked = CHECKED.lock().unwrap();
        if let Some((_, usable)) = checked.iter().find(|(b, _)| b == bin) {
            return usable.clone();
        }
        let ok = self
            .command("/usr/bin/test")
            .arg("-x")
            .arg(bin)
            .status()
            .expect("running setpriv (util-linux)")
            .success();
        let usable = if ok {
            bin.to_path_buf()
        } else {
            let meta = std::fs::metadata(bin).expect("binary metadata");
            let stamp = meta
                .modified()
                .expect("mtime")
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            let dir = std::path::PathBuf::from(format!("/tmp/sbx-live-bin-{}", stamp.as_nanos()));
            let copy = dir.join(bin.file_name().unwrap());
            if !copy.exists() {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
                // Parallel tests may copy at once: each copies to its own name, then renames.
                let tmp = dir.join(format!(
                    ".{}.{}",
                    bin.file_name().unwrap().to_string_lossy(),
                    std::process::id()
                ));
                std::fs::copy(bin, &tmp).unwrap();
                std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
                std::fs::rename(&tmp, &copy).unwrap();
            }
            copy
        };
        checked.push((bin.to_path_buf(), usable.clone()));
        usable
    }
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

/// Whether this process is the copy of a test that [`rerun_as_test_user`] started (it finds
/// `marker` in its environment).
pub fn is_rerun(marker: &str) -> bool {
    std::env::var_os(marker).is_some()
}

/// Runs the test `name` of this test binary again as the unprivileged test user, with
/// `marker` set in its environment (so the copy knows not to start another), and asserts that
/// it ran and passed. For live tests that must hold for root and for a normal user alike, and
/// for those that run in the test process itself. Fails the test when not root.
#[track_caller]
pub fn rerun_as_test_user(name: &str, marker: &str) {
    require_root();
    test_user_ids();
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
