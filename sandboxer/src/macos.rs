//! macOS facts: whether Seatbelt can be used for one person on this Mac. Written for macOS and
//! not run on the Linux machines this project is developed on (`scripts/mac-selftest.sh` is
//! how a Mac checks it).

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct MacosFacts {
    /// `/usr/bin/sandbox-exec` exists.
    pub sandbox_exec: bool,
    /// Real user accounts (uid ≥ 501, not `_`-prefixed), when `dscl` could list them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub real_users: Option<Vec<String>>,
    /// More than one real user: another person's processes share the machine, and the design
    /// runs such Macs bridge-only. `None` when the accounts could not be listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multi_user: Option<bool>,
    pub untested: &'static str,
}

impl MacosFacts {
    /// `Ok(())` when a single person's Seatbelt confinement can be trusted here, else why not.
    /// An unknown account count is a "no": fail closed.
    pub fn can_confine(&self) -> Result<(), String> {
        if !self.sandbox_exec {
            return Err("/usr/bin/sandbox-exec is missing".into());
        }
        match self.multi_user {
            Some(false) => Ok(()),
            Some(true) => Err(format!(
                "this Mac has several user accounts ({}); it runs bridge-only",
                self.real_users.as_deref().unwrap_or_default().join(", ")
            )),
            None => Err("the Mac's user accounts could not be listed (dscl failed)".into()),
        }
    }
}

/// Detects the facts on this Mac.
#[cfg(target_os = "macos")]
pub fn detect() -> MacosFacts {
    let real_users = real_users();
    MacosFacts {
        sandbox_exec: std::path::Path::new("/usr/bin/sandbox-exec").exists(),
        multi_user: real_users.as_ref().map(|u| u.len() > 1),
        real_users,
        untested: "written for macOS; not run on the Linux machines this is developed on",
    }
}

/// Not a Mac: nothing here can run Seatbelt.
#[cfg(not(target_os = "macos"))]
pub fn detect() -> MacosFacts {
    MacosFacts {
        sandbox_exec: false,
        real_users: None,
        multi_user: None,
        untested: "not a Mac",
    }
}

/// Real accounts from `dscl . -list /Users UniqueID`: uid 501 and up, not a `_` service
/// account.
#[cfg(target_os = "macos")]
fn real_users() -> Option<Vec<String>> {
    let out = std::process::Command::new("/usr/bin/dscl")
        .args([".", "-list", "/Users", "UniqueID"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Some(
        text.lines()
            .filter_map(|line| {
                let mut parts = line.split_whitespace();
                let name = parts.next()?;
                let uid: u32 = parts.next()?.parse().ok()?;
                (uid >= 501 && !name.starts_with('_')).then(|| name.to_string())
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(sandbox_exec: bool, users: Option<&[&str]>) -> MacosFacts {
        MacosFacts {
            sandbox_exec,
            real_users: users.map(|u| u.iter().map(|s| s.to_string()).collect()),
            multi_user: users.map(|u| u.len() > 1),
            untested: "test",
        }
    }

    #[test]
    fn only_a_single_user_mac_with_sandbox_exec_confines() {
        assert!(facts(true, Some(&["ada"])).can_confine().is_ok());
        assert!(facts(false, Some(&["ada"])).can_confine().is_err());
        assert!(
            facts(true, Some(&["ada", "bob"]))
                .can_confine()
                .unwrap_err()
                .contains("bob")
        );
        assert!(facts(true, None).can_confine().is_err());
    }
}
