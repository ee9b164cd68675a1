//! What detection found beside the facts: the Landlock and namespace probes' answers and the
//! kernel settings that explain them, for `sandboxer doctor` and the refusal messages.

use serde::{Deserialize, Serialize};

use super::blocker::Blocker;
use super::platform::Facts;
use crate::linux::fs_right::FsRight;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
