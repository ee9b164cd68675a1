//! A login a Mac keeps in the person's keychain, copied into a chat's config home.
//!
//! Claude Code keeps its login in the login keychain, as the generic password of service
//! `Claude Code-credentials` and account the person's login name, and falls back to
//! `.credentials.json` in its config folder when that item is missing. A chat's config folder
//! is its own (`CLAUDE_CONFIG_DIR`), and Claude derives the service name from it, so inside a
//! chat the person's item is never found: the dispatcher, outside any sandbox, reads it at
//! launch and writes it as the chat's `.credentials.json` (a copy: the chat's refreshes stay
//! in the chat). `/usr/bin/security` answers without a prompt because Claude made the item
//! with it: the item's access list trusts that program — which is also why any process of the
//! person, a confined chat included, can read it (docs/clis.md, "The keychain").

use std::ffi::OsStr;
use std::process::{Command, Stdio};

/// The program that reads the keychain on a Mac.
const SECURITY: &str = "/usr/bin/security";

/// `security`'s exit status when the item does not exist.
const NOT_FOUND: i32 = 44;

/// The secret of the generic password `service` of the person's login name, on a Mac; `None`
/// when there is none, when it cannot be read (a warning says why: the chat then starts logged
/// out, as it would without the copy), or on any other system.
pub(super) fn login(service: &str) -> Option<Vec<u8>> {
    if !cfg!(target_os = "macos") {
        return None;
    }
    // The account Claude Code names its item with: the login name, as `$USER` gives it.
    let Some(account) = std::env::var("USER").ok().filter(|u| !u.is_empty()) else {
        eprintln!("dispatcher: the keychain login {service:?} is not copied: USER is not set");
        return None;
    };
    match read(SECURITY.as_ref(), service, &account) {
        Ok(found) => found,
        Err(why) => {
            eprintln!("dispatcher: the keychain login {service:?} is not copied: {why}");
            None
        }
    }
}

/// Runs `program find-generic-password -a ACCOUNT -s SERVICE -w`: the secret without its
/// final newline, `None` when the item does not exist.
fn read(program: &OsStr, service: &str, account: &str) -> Result<Option<Vec<u8>>, String> {
    let out = Command::new(program)
        .args(["find-generic-password", "-a", account, "-s", service, "-w"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", program.to_string_lossy()))?;
    match out.status.code() {
        Some(0) => {
            let mut secret = out.stdout;
            if secret.last() == Some(&b'\n') {
                secret.pop();
            }
            Ok(Some(secret))
        }
        Some(NOT_FOUND) => Ok(None),
        _ => Err(format!(
            "{} exited with {}: {}",
            program.to_string_lossy(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in for `security`: prints its arguments' service back as the secret when the
    /// item "exists", exits 44 when not, fails otherwise.
    fn fake(dir: &std::path::Path) -> std::path::PathBuf {
        let p = dir.join("security");
        std::fs::write(
            &p,
            "#!/bin/sh\n[ \"$1 $2 $4 $6\" = 'find-generic-password -a -s -w' ] || exit 2\n\
             case \"$5\" in\n  present) printf '{\"claudeAiOauth\":{}}\\n' ;;\n  \
             missing) exit 44 ;;\n  *) echo 'SecKeychainSearchCopyNext: denied' >&2; exit 51 ;;\nesac\n",
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn present_missing_and_failing_items() {
        let d = tempfile::tempdir().unwrap();
        let program = fake(d.path());
        assert_eq!(
            read(program.as_os_str(), "present", "ada").unwrap(),
            Some(b"{\"claudeAiOauth\":{}}".to_vec())
        );
        assert_eq!(read(program.as_os_str(), "missing", "ada").unwrap(), None);
        let err = read(program.as_os_str(), "other", "ada").unwrap_err();
        assert!(err.contains("51") && err.contains("denied"), "{err}");
        let err = read(d.path().join("absent").as_os_str(), "x", "ada").unwrap_err();
        assert!(err.contains("absent"), "{err}");
    }

    #[test]
    fn elsewhere_than_a_mac_nothing_is_read() {
        if !cfg!(target_os = "macos") {
            assert_eq!(login("Claude Code-credentials"), None);
        }
    }
}
