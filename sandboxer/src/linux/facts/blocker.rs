//! What keeps namespaces from working, and how to lift it.

use serde::{Deserialize, Serialize};

use crate::linux::apparmor;

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
                apparmor::install_command()
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
