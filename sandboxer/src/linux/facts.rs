//! Platform facts for the Linux planner: which Landlock ABI the kernel has, and whether user,
//! mount and PID namespaces really work for this user.
//!
//! The types are pure and compile everywhere. Detection ([`detect`], [`probe`]) is Linux only:
//! it asks the kernel for the Landlock ABI (`landlock_create_ruleset` with
//! `LANDLOCK_CREATE_RULESET_VERSION`) and probes namespaces for real in a forked child — the
//! only trustworthy answer, since AppArmor, Debian's sysctl, `user.max_user_namespaces` and
//! container seccomp profiles each stop them at a different step.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::linux::plan::{Facts, FsRight};

/// What keeps namespaces from working, when the cause is known. Each says how to lift it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Blocker {
    /// Ubuntu 23.10+: `kernel.apparmor_restrict_unprivileged_userns = 1` gives unconfined
    /// programs a user namespace without capabilities, so nothing can be mapped or mounted.
    AppArmorRestriction,
    /// Debian's `kernel.unprivileged_userns_clone = 0`.
    DebianUnprivilegedClone,
    /// `user.max_user_namespaces = 0`.
    MaxUserNamespacesZero,
    /// Mounting a fresh `/proc` in the new PID namespace was refused: typically a container
    /// whose `/proc` has masked (over-mounted) entries, which the kernel will not reveal.
    ProcMountRefused { errno: i32 },
    /// Something else stopped the probe at `step` (a container's seccomp profile, a missing
    /// capability, an LSM).
    Other { step: String, errno: i32 },
    /// The test-only `--assume-facts` file turned them off; the kernel was not asked.
    Assumed,
}

impl Blocker {
    /// What happens, in one sentence.
    pub fn cause(&self) -> String {
        match self {
            Blocker::AppArmorRestriction => "AppArmor restricts unprivileged user namespaces \
                 (kernel.apparmor_restrict_unprivileged_userns = 1)"
                .into(),
            Blocker::DebianUnprivilegedClone => {
                "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)"
                    .into()
            }
            Blocker::MaxUserNamespacesZero => {
                "user namespaces are disabled (user.max_user_namespaces = 0)".into()
            }
            Blocker::ProcMountRefused { errno } => format!(
                "mounting a fresh /proc in a new PID namespace was refused ({})",
                errno_text(*errno)
            ),
            Blocker::Other { step, errno } => {
                format!(
                    "the namespace probe failed at {step} ({})",
                    errno_text(*errno)
                )
            }
            Blocker::Assumed => {
                "the test-only --assume-facts file says namespaces do not work".into()
            }
        }
    }

    /// How to lift it.
    pub fn fix(&self) -> String {
        match self {
            Blocker::AppArmorRestriction => format!(
                "install the AppArmor profile that gives this sandbox (and only it) its user \
                 namespaces: run `{}` (see docs/linux.md); or lift the restriction for every \
                 program: `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`",
                super::apparmor::install_command()
            ),
            Blocker::DebianUnprivilegedClone => {
                "run `sudo sysctl -w kernel.unprivileged_userns_clone=1` (persist it in \
                 /etc/sysctl.d/)"
                    .into()
            }
            Blocker::MaxUserNamespacesZero => {
                "run `sudo sysctl -w user.max_user_namespaces=15000` (persist it in \
                 /etc/sysctl.d/)"
                    .into()
            }
            Blocker::ProcMountRefused { .. } => "in a container, run it without masked /proc \
                 paths (Docker: `--security-opt systempaths=unconfined`) or run the sandbox on \
                 the host"
                .into(),
            Blocker::Other { .. } => "in a container, allow unshare(2) and mount(2) (Docker: a \
                 seccomp profile that permits them, or `--security-opt seccomp=unconfined`); \
                 otherwise check the kernel log for an LSM denial"
                .into(),
            Blocker::Assumed => "drop --assume-facts (it is for tests only)".into(),
        }
    }
}

/// `EPERM (Operation not permitted)` style text for an errno.
pub fn errno_text(errno: i32) -> String {
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    // std renders "Operation not permitted (os error 1)"; the number is the useful part.
    match text.rfind(" (os error") {
        Some(i) => format!("{} (errno {errno})", &text[..i]),
        None => text,
    }
}

/// A kernel setting read for the report, with what its value means here.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setting {
    /// The sysctl name, e.g. `kernel.apparmor_restrict_unprivileged_userns`.
    pub name: String,
    pub value: String,
    pub meaning: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockProbe {
    /// 0 when absent or disabled.
    pub abi: u32,
    /// Why the ABI is 0, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The bitmask of fixed errata the kernel reports (`LANDLOCK_CREATE_RULESET_ERRATA`), when
    /// it answers the query.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errata: Option<u32>,
    /// The filesystem rights this ABI gives.
    pub rights: Vec<FsRight>,
    /// The scopes this ABI gives (`abstract-unix-socket`, `signal`).
    pub scopes: Vec<String>,
}

impl LandlockProbe {
    /// The rights and scopes an ABI gives, for the report.
    pub fn for_abi(abi: u32, error: Option<String>, errata: Option<u32>) -> LandlockProbe {
        let scopes = if abi >= 6 {
            vec!["abstract-unix-socket".into(), "signal".into()]
        } else {
            Vec::new()
        };
        LandlockProbe {
            abi,
            error,
            errata,
            rights: if abi == 0 {
                Vec::new()
            } else {
                FsRight::known_at(abi)
            },
            scopes,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceProbe {
    /// A user namespace was created and the uid/gid mapped to themselves.
    pub user: bool,
    /// Mount and PID namespaces were created inside it, the tree made private, a fresh
    /// `/proc` and a tmpfs mounted.
    pub mount_pid: bool,
    /// The step that failed, e.g. `write /proc/self/uid_map`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_step: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
}

/// Everything detection found: the [`Facts`] the planner uses, and the evidence behind them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    pub facts: Facts,
    /// `uname -r`.
    pub kernel: Option<String>,
    pub running_as_root: bool,
    pub landlock: LandlockProbe,
    pub namespaces: NamespaceProbe,
    /// Kernel settings that decide namespaces and TIOCSTI, as read from `/proc/sys`.
    pub settings: Vec<Setting>,
    /// `dev.tty.legacy_tiocsti`: true when TIOCSTI can push input into a terminal (the
    /// enforcer's `setsid` closes it either way); None when the setting does not exist (a
    /// kernel before 6.2, where TIOCSTI is always available).
    pub legacy_tiocsti: Option<bool>,
}

/// A test-only lowering of detected facts (`--assume-facts FILE.json`). Each field, when
/// given, can only take a capability away: the ABI is the lower of the two, a boolean is
/// true only if both are. So an assumed file can turn a working sandbox into a refusal,
/// never into weaker enforcement — and the enforcer checks the kernel again anyway.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssumedFacts {
    #[serde(default)]
    pub landlock_abi: Option<u32>,
    #[serde(default)]
    pub user_namespaces: Option<bool>,
    #[serde(default)]
    pub mount_pid_namespaces: Option<bool>,
}

/// An assumed-facts file that cannot be read or parsed.
#[derive(Debug, thiserror::Error)]
pub enum FactsError {
    #[error("{file}: cannot read the assumed facts: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}:{line}:{column}: invalid assumed facts: {message}")]
    Parse {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
}

impl AssumedFacts {
    /// Reads a JSON file such as `{"user_namespaces": false}`.
    pub fn load(path: &Path) -> Result<AssumedFacts, FactsError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| FactsError::Read {
            file: file.clone(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|e| FactsError::Parse {
            file,
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })
    }

    /// `detected`, lowered by what this file assumes; never raised.
    pub fn apply(&self, detected: &Facts) -> Facts {
        let mut out = detected.clone();
        if let Some(abi) = self.landlock_abi {
            out.landlock_abi = out.landlock_abi.min(abi);
        }
        if let Some(user) = self.user_namespaces {
            out.user_namespaces &= user;
        }
        if let Some(mp) = self.mount_pid_namespaces {
            out.mount_pid_namespaces &= mp;
        }
        // Without a user namespace there is nothing to create mount or PID namespaces in.
        out.mount_pid_namespaces &= out.user_namespaces;
        if out.user_namespaces != detected.user_namespaces
            || out.mount_pid_namespaces != detected.mount_pid_namespaces
        {
            out.namespaces_blocked_by.get_or_insert(Blocker::Assumed);
        }
        out
    }
}

/// Which cause the probe's failure points to, from the settings read beside it. `None` when
/// the namespaces work.
pub fn blocker_for(ns: &NamespaceProbe, settings: &[Setting], root: bool) -> Option<Blocker> {
    if ns.user && ns.mount_pid {
        return None;
    }
    let value = |name: &str| {
        settings
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.value.as_str())
    };
    let errno = ns.errno.unwrap_or(0);
    if value("user.max_user_namespaces") == Some("0") {
        return Some(Blocker::MaxUserNamespacesZero);
    }
    // Both restrictions exempt a process with CAP_SYS_ADMIN, so they explain nothing for root.
    if !root && value("kernel.unprivileged_userns_clone") == Some("0") {
        return Some(Blocker::DebianUnprivilegedClone);
    }
    if !root && value("kernel.apparmor_restrict_unprivileged_userns") == Some("1") {
        return Some(Blocker::AppArmorRestriction);
    }
    let step = ns
        .failed_step
        .clone()
        .unwrap_or_else(|| "(unknown step)".into());
    if step.starts_with("mount proc") {
        return Some(Blocker::ProcMountRefused { errno });
    }
    Some(Blocker::Other { step, errno })
}

/// The settings the report and [`blocker_for`] read, with their meaning for this value.
pub fn describe_setting(name: &str, value: &str) -> String {
    match (name, value) {
        ("kernel.apparmor_restrict_unprivileged_userns", "1") => {
            "AppArmor gives unconfined programs capability-less user namespaces (blocks masks \
             for normal users)"
                .into()
        }
        ("kernel.apparmor_restrict_unprivileged_userns", _) => {
            "AppArmor does not restrict user namespaces".into()
        }
        ("kernel.unprivileged_userns_clone", "0") => {
            "unprivileged user namespaces are off (blocks masks for normal users)".into()
        }
        ("kernel.unprivileged_userns_clone", _) => "unprivileged user namespaces are on".into(),
        ("user.max_user_namespaces", "0") => "user namespaces are off for everyone".into(),
        ("user.max_user_namespaces", _) => "user namespaces are allowed".into(),
        ("dev.tty.legacy_tiocsti", "1") => {
            "TIOCSTI can push input into a terminal; the sandbox's setsid keeps it from \
             the caller's terminal"
                .into()
        }
        ("dev.tty.legacy_tiocsti", _) => "TIOCSTI is disabled for unprivileged processes".into(),
        _ => String::new(),
    }
}

/// The sysctls worth reading, with their `/proc/sys` paths.
pub const SETTINGS: [(&str, &str); 4] = [
    (
        "kernel.apparmor_restrict_unprivileged_userns",
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
    ),
    (
        "kernel.unprivileged_userns_clone",
        "/proc/sys/kernel/unprivileged_userns_clone",
    ),
    (
        "user.max_user_namespaces",
        "/proc/sys/user/max_user_namespaces",
    ),
    ("dev.tty.legacy_tiocsti", "/proc/sys/dev/tty/legacy_tiocsti"),
];

#[cfg(target_os = "linux")]
pub use host::{detect, probe};

#[cfg(target_os = "linux")]
mod host {
    use std::ffi::CStr;

    use super::*;

    /// `LANDLOCK_CREATE_RULESET_VERSION`: ask for the ABI instead of creating a ruleset.
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1 << 0;
    /// `LANDLOCK_CREATE_RULESET_ERRATA`: ask for the fixed errata (newer kernels only).
    const LANDLOCK_CREATE_RULESET_ERRATA: libc::c_uint = 1 << 1;

    /// The facts for this machine and this user. Forks once (the namespace probe).
    pub fn detect() -> Facts {
        probe().facts
    }

    /// Facts and the evidence behind them, for `sandboxer doctor`.
    pub fn probe() -> Probe {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let root = uid == 0;
        let landlock = probe_landlock();
        let namespaces = probe_namespaces(uid, gid);
        let settings: Vec<Setting> = SETTINGS
            .iter()
            .filter_map(|(name, path)| {
                let value = std::fs::read_to_string(path).ok()?.trim().to_string();
                Some(Setting {
                    name: (*name).into(),
                    meaning: describe_setting(name, &value),
                    value,
                })
            })
            .collect();
        let legacy_tiocsti = settings
            .iter()
            .find(|s| s.name == "dev.tty.legacy_tiocsti")
            .map(|s| s.value != "0");
        let facts = Facts {
            landlock_abi: landlock.abi,
            user_namespaces: namespaces.user,
            mount_pid_namespaces: namespaces.mount_pid,
            uid,
            gid,
            namespaces_blocked_by: blocker_for(&namespaces, &settings, root),
        };
        Probe {
            facts,
            kernel: kernel_release(),
            running_as_root: root,
            landlock,
            namespaces,
            settings,
            legacy_tiocsti,
        }
    }

    fn kernel_release() -> Option<String> {
        // SAFETY: utsname is plain data; uname fills it or fails.
        let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
        if unsafe { libc::uname(&mut uts) } != 0 {
            return None;
        }
        // SAFETY: the kernel NUL-terminates release.
        let release = unsafe { CStr::from_ptr(uts.release.as_ptr()) };
        Some(release.to_string_lossy().into_owned())
    }

    fn landlock_query(flag: libc::c_uint) -> Result<i64, i32> {
        // SAFETY: with a NULL attribute and size 0 this syscall only answers a question.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<libc::c_void>(),
                0usize,
                flag,
            )
        };
        if ret < 0 {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
        } else {
            Ok(ret)
        }
    }

    fn probe_landlock() -> LandlockProbe {
        match landlock_query(LANDLOCK_CREATE_RULESET_VERSION) {
            Ok(abi) => {
                let errata = landlock_query(LANDLOCK_CREATE_RULESET_ERRATA)
                    .ok()
                    .map(|e| e as u32);
                LandlockProbe::for_abi(abi as u32, None, errata)
            }
            Err(errno) => {
                let why = match errno {
                    libc::ENOSYS => "the kernel is built without Landlock (ENOSYS)".to_string(),
                    libc::EOPNOTSUPP => "Landlock is built in but not enabled at boot \
                         (EOPNOTSUPP): add `landlock` to the `lsm=` kernel parameter"
                        .to_string(),
                    other => format!("landlock_create_ruleset failed: {}", errno_text(other)),
                };
                LandlockProbe::for_abi(0, Some(why), None)
            }
        }
    }

    /// Steps of the namespace probe, reported by number through a pipe.
    const STEPS: [&str; 10] = [
        "fork",
        "unshare(CLONE_NEWUSER)",
        "write /proc/self/setgroups",
        "write /proc/self/uid_map",
        "write /proc/self/gid_map",
        "unshare(CLONE_NEWNS | CLONE_NEWPID)",
        "make / recursively private",
        "fork PID 1 of the new PID namespace",
        "mount proc on /proc",
        "mount tmpfs",
    ];
    const FIRST_MOUNT_PID_STEP: u32 = 5;

    /// Creates the namespaces the enforcer will need, in a forked child, and reports the first
    /// step that fails. The child only makes async-signal-safe calls (the test harness and the
    /// CLI may have other threads): everything it writes is prepared before the fork.
    fn probe_namespaces(uid: u32, gid: u32) -> NamespaceProbe {
        let uid_map = format!("{uid} {uid} 1\n").into_bytes();
        let gid_map = format!("{gid} {gid} 1\n").into_bytes();
        let mut fds = [0; 2];
        // SAFETY: fds is a valid two-int array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            return failed(0, errno);
        }
        let (read_fd, write_fd) = (fds[0], fds[1]);
        // SAFETY: the child runs only async-signal-safe code and always _exits.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            // SAFETY: closing our own pipe.
            unsafe {
                libc::close(read_fd);
                libc::close(write_fd);
            }
            return failed(0, errno);
        }
        if pid == 0 {
            // SAFETY: in the child; see child_probe.
            unsafe {
                libc::close(read_fd);
                child_probe(write_fd, &uid_map, &gid_map)
            }
        }
        // SAFETY: parent side: close the write end so read sees EOF when the child is gone.
        unsafe { libc::close(write_fd) };
        let mut report = [0u8; 8];
        let mut got = 0usize;
        while got < report.len() {
            // SAFETY: reading into our buffer.
            let n = unsafe {
                libc::read(
                    read_fd,
                    report[got..].as_mut_ptr().cast(),
                    report.len() - got,
                )
            };
            if n > 0 {
                got += n as usize;
            } else if n == 0
                || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
            {
                break;
            }
        }
        // SAFETY: closing our pipe end; reaping our own child.
        let mut status = 0;
        unsafe {
            libc::close(read_fd);
            while libc::waitpid(pid, &mut status, 0) < 0
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
            {
            }
        }
        if got == report.len() {
            let step = u32::from_ne_bytes(report[..4].try_into().expect("4 bytes"));
            let errno = i32::from_ne_bytes(report[4..].try_into().expect("4 bytes"));
            return failed(step, errno);
        }
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            return NamespaceProbe {
                user: true,
                mount_pid: true,
                failed_step: None,
                errno: None,
            };
        }
        // The child died without a report (a signal, a seccomp kill): nothing is known to work.
        NamespaceProbe {
            user: false,
            mount_pid: false,
            failed_step: Some("the probe child was killed before it could report".into()),
            errno: None,
        }
    }

    /// A probe that stopped at `step`. The user namespace works when the failure came after
    /// its maps were written.
    fn failed(step: u32, errno: i32) -> NamespaceProbe {
        NamespaceProbe {
            user: step >= FIRST_MOUNT_PID_STEP,
            mount_pid: false,
            failed_step: Some(
                STEPS
                    .get(step as usize)
                    .copied()
                    .unwrap_or("(unknown step)")
                    .to_string(),
            ),
            errno: Some(errno),
        }
    }

    /// The forked child: only async-signal-safe calls from here on.
    unsafe fn child_probe(report_fd: i32, uid_map: &[u8], gid_map: &[u8]) -> ! {
        unsafe {
            let fail = |step: u32| -> ! {
                let errno = *libc::__errno_location();
                let mut buf = [0u8; 8];
                buf[..4].copy_from_slice(&step.to_ne_bytes());
                buf[4..].copy_from_slice(&errno.to_ne_bytes());
                libc::write(report_fd, buf.as_ptr().cast(), buf.len());
                libc::_exit(1)
            };
            if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                fail(1);
            }
            if !write_file(c"/proc/self/setgroups", b"deny") {
                fail(2);
            }
            if !write_file(c"/proc/self/uid_map", uid_map) {
                fail(3);
            }
            if !write_file(c"/proc/self/gid_map", gid_map) {
                fail(4);
            }
            if libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWPID) != 0 {
                fail(5);
            }
            let private = libc::MS_REC | libc::MS_PRIVATE;
            if libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                private,
                std::ptr::null(),
            ) != 0
            {
                fail(6);
            }
            let init = libc::fork();
            if init < 0 {
                fail(7);
            }
            if init == 0 {
                // PID 1 of the new namespace; its mounts die with the namespace.
                let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
                if libc::mount(
                    c"proc".as_ptr(),
                    c"/proc".as_ptr(),
                    c"proc".as_ptr(),
                    flags,
                    std::ptr::null(),
                ) != 0
                {
                    fail(8);
                }
                if libc::mount(
                    c"tmpfs".as_ptr(),
                    c"/proc".as_ptr(),
                    c"tmpfs".as_ptr(),
                    flags,
                    c"mode=0111,size=4k".as_ptr().cast(),
                ) != 0
                {
                    fail(9);
                }
                libc::_exit(0);
            }
            let mut status = 0;
            while libc::waitpid(init, &mut status, 0) < 0
                && *libc::__errno_location() == libc::EINTR
            {}
            // PID 1 reported its own failure through the shared pipe.
            libc::_exit(
                if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
                    0
                } else {
                    1
                },
            )
        }
    }

    /// open + write + close, all async-signal-safe.
    unsafe fn write_file(path: &CStr, data: &[u8]) -> bool {
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return false;
            }
            let n = libc::write(fd, data.as_ptr().cast(), data.len());
            // Keep errno from the write: close would overwrite it on failure.
            let ok = n == data.len() as isize;
            if ok {
                libc::close(fd);
            }
            ok
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(abi: u32, userns: bool) -> Facts {
        Facts {
            landlock_abi: abi,
            user_namespaces: userns,
            mount_pid_namespaces: userns,
            uid: 1000,
            gid: 1000,
            namespaces_blocked_by: None,
        }
    }

    #[test]
    fn assumed_facts_only_lower() {
        let lower = AssumedFacts {
            landlock_abi: Some(9),
            user_namespaces: Some(true),
            mount_pid_namespaces: None,
        };
        // ABI 9 cannot raise 7; true cannot raise false.
        let got = lower.apply(&facts(7, false));
        assert_eq!(got.landlock_abi, 7);
        assert!(!got.user_namespaces && !got.mount_pid_namespaces);

        let off = AssumedFacts {
            landlock_abi: Some(0),
            user_namespaces: Some(false),
            mount_pid_namespaces: None,
        };
        let got = off.apply(&facts(7, true));
        assert_eq!(got.landlock_abi, 0);
        assert!(!got.user_namespaces);
        assert!(
            !got.mount_pid_namespaces,
            "no mount/PID namespaces without a user namespace"
        );
        assert_eq!(got.namespaces_blocked_by, Some(Blocker::Assumed));
    }

    #[test]
    fn assumed_facts_file_errors_name_the_place() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f.json");
        std::fs::write(&file, "{\n  \"landlock_abi\": 3,\n  \"userns\": false\n}").unwrap();
        let err = AssumedFacts::load(&file).unwrap_err().to_string();
        assert!(err.contains("f.json:3:"), "{err}");
        assert!(err.contains("userns"), "{err}");
        std::fs::write(&file, r#"{"user_namespaces": false}"#).unwrap();
        assert_eq!(
            AssumedFacts::load(&file).unwrap().user_namespaces,
            Some(false)
        );
    }

    fn setting(name: &str, value: &str) -> Setting {
        Setting {
            name: name.into(),
            value: value.into(),
            meaning: String::new(),
        }
    }

    #[test]
    fn blockers_are_named_from_settings() {
        let failed = NamespaceProbe {
            user: false,
            mount_pid: false,
            failed_step: Some("write /proc/self/uid_map".into()),
            errno: Some(libc::EPERM),
        };
        let aa = [setting("kernel.apparmor_restrict_unprivileged_userns", "1")];
        assert_eq!(
            blocker_for(&failed, &aa, false),
            Some(Blocker::AppArmorRestriction)
        );
        // Root is exempt from the AppArmor restriction: it explains nothing there.
        assert!(matches!(
            blocker_for(&failed, &aa, true),
            Some(Blocker::Other { .. })
        ));
        let deb = [setting("kernel.unprivileged_userns_clone", "0")];
        assert_eq!(
            blocker_for(&failed, &deb, false),
            Some(Blocker::DebianUnprivilegedClone)
        );
        let max = [setting("user.max_user_namespaces", "0")];
        assert_eq!(
            blocker_for(&failed, &max, true),
            Some(Blocker::MaxUserNamespacesZero)
        );
        let proc_failed = NamespaceProbe {
            user: true,
            mount_pid: false,
            failed_step: Some("mount proc on /proc".into()),
            errno: Some(libc::EPERM),
        };
        assert_eq!(
            blocker_for(&proc_failed, &[], false),
            Some(Blocker::ProcMountRefused { errno: libc::EPERM })
        );
        let ok = NamespaceProbe {
            user: true,
            mount_pid: true,
            failed_step: None,
            errno: None,
        };
        assert_eq!(blocker_for(&ok, &aa, false), None);
        assert!(
            Blocker::AppArmorRestriction
                .fix()
                .contains("apparmor_restrict_unprivileged_userns=0")
        );
    }

    #[test]
    fn abi_report_lists_rights_and_scopes() {
        let p = LandlockProbe::for_abi(7, None, None);
        assert!(p.rights.contains(&FsRight::IoctlDev));
        assert!(!p.rights.contains(&FsRight::ResolveUnix));
        assert_eq!(p.scopes.len(), 2);
        let p = LandlockProbe::for_abi(5, None, None);
        assert!(p.scopes.is_empty());
        assert!(LandlockProbe::for_abi(0, None, None).rights.is_empty());
    }

    /// Live: this machine (CI runs as root on a 6.18 kernel) has Landlock with scopes and
    /// working namespaces.
    #[cfg(target_os = "linux")]
    #[test]
    fn detect_finds_landlock_and_namespaces_here() {
        let p = probe();
        assert!(
            p.facts.landlock_abi >= 6,
            "Landlock ABI {} ({:?})",
            p.facts.landlock_abi,
            p.landlock.error
        );
        assert!(
            p.facts.user_namespaces && p.facts.mount_pid_namespaces,
            "namespaces: {:?}",
            p.namespaces
        );
        assert_eq!(p.facts.namespaces_blocked_by, None);
        assert!(p.kernel.is_some());
    }
}
