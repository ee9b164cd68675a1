//! Paths and decisions: the path tricks refused outright, where a path that cannot be opened
//! would resolve, and the decision on the real path (exact, and without case where file names
//! are case-insensitive).

use std::ffi::OsStr;
use std::io;
use std::path::{Component, Path, PathBuf};

use sandboxer::{Op, Policy};

use super::call::{Call, Policies, Stop, deny, fail};
use super::catalogue::MAX_PATH;
use crate::bridge::fsx::{self, Looked};

/// The policy with every rule's path lowercased. On a case-insensitive file system (macOS's
/// default) `/Users/me/LIBRARY/...` is the folder `/Users/me/Library/...`, and the real path
/// the kernel reports for an open file may carry the case the caller used; deciding again on
/// the lowercased path with this policy closes that gap (it can only refuse more).
pub fn case_folded(policy: &Policy) -> Policy {
    let mut p = policy.clone();
    p.protected.iter_mut().for_each(|r| r.path = fold(&r.path));
    p.grants.iter_mut().for_each(|g| g.path = fold(&g.path));
    p.refuse.iter_mut().for_each(|r| r.path = fold(&r.path));
    p.closed
        .read
        .iter_mut()
        .for_each(|r| r.path = fold(&r.path));
    p.closed
        .write
        .iter_mut()
        .for_each(|r| r.path = fold(&r.path));
    p.launchers
        .exec
        .iter_mut()
        .for_each(|l| l.path = fold(&l.path));
    p.launchers
        .read
        .iter_mut()
        .for_each(|l| l.path = fold(&l.path));
    p
}

pub(super) fn fold(path: &Path) -> PathBuf {
    PathBuf::from(path.to_string_lossy().to_lowercase())
}

/// A requested path, checked for the tricks that are refused outright.
pub(super) fn checked_path(raw: &str) -> Result<PathBuf, Stop> {
    if raw.contains('\0') {
        return Err(deny(format!("{raw:?} contains a NUL byte")));
    }
    if raw.len() > MAX_PATH {
        return Err(fail(format!("the path is longer than {MAX_PATH} bytes")));
    }
    let path = Path::new(raw);
    if !path.is_absolute() {
        return Err(deny(format!(
            "{raw:?} is not an absolute path; the bridge takes absolute paths only"
        )));
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(deny(format!(
            "{raw:?} contains '..'; give the path it means without '..'"
        )));
    }
    Ok(path.to_path_buf())
}

/// Where `path` would resolve: the longest prefix that resolves (through [`fsx::resolve`],
/// so a prefix through a magic link or on /proc is refused, never followed), plus the rest as
/// written. Used only to decide on a path that could not be opened, so that a refusal is said
/// before any "not found".
fn resolve_prefix(path: &Path) -> Result<PathBuf, fsx::Refused> {
    let mut rest: Vec<&OsStr> = Vec::new();
    let mut cur = path;
    loop {
        match fsx::real_of(cur) {
            Ok(real) => return Ok(rest.iter().rev().fold(real, |p, part| p.join(part))),
            Err(fsx::OpenError::Refused(r)) => return Err(r),
            Err(fsx::OpenError::Io(_)) => {}
        }
        match (cur.file_name(), cur.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                cur = parent;
            }
            // Only "/" has neither, and it always resolves; fall back to the path as written.
            _ => return Ok(path.to_path_buf()),
        }
    }
}

fn shown(requested: &Path, real: &Path) -> String {
    if requested == real {
        requested.display().to_string()
    } else {
        format!("{} (really {})", requested.display(), real.display())
    }
}

impl Call {
    /// Decides `op` on the real path; a refusal names the deciding rule.
    pub(super) fn decide(
        &mut self,
        policy: &Policies<'_>,
        op: Op,
        requested: &Path,
        real: &Path,
    ) -> Result<String, Stop> {
        self.resolved = Some(real.to_path_buf());
        let d = policy.exact.decide(op, real);
        if !d.allowed() {
            return Err(deny(format!(
                "{op} of {}: {}",
                shown(requested, real),
                d.reason
            )));
        }
        if let Some(folded) = policy.folded {
            let f = folded.decide(op, &fold(real));
            if !f.allowed() {
                return Err(deny(format!(
                    "{op} of {}: {} (file names are compared without case here)",
                    shown(requested, real),
                    f.reason
                )));
            }
        }
        Ok(d.reason.to_string())
    }

    /// Looks `path` up (following links) and decides `op` on where it really is: what was
    /// found, and the deciding rule.
    pub(super) fn look(
        &mut self,
        policy: &Policies<'_>,
        op: Op,
        path: &Path,
    ) -> Result<(Looked, String), Stop> {
        let looked =
            Looked::lookup(path).map_err(|e| self.open_failed(policy, op, path, path, e))?;
        let reason = self.decide(policy, op, path, &looked.real)?;
        Ok((looked, reason))
    }

    /// A path that could not be opened: refused at resolution, or refused if where it leads
    /// is refused, else say why. `opened` is what failed to open: the path itself, or its
    /// folder for a write.
    pub(super) fn open_failed(
        &mut self,
        policy: &Policies<'_>,
        op: Op,
        requested: &Path,
        opened: &Path,
        e: fsx::OpenError,
    ) -> Stop {
        let e = match e {
            fsx::OpenError::Refused(r) => return refused(op, requested, r),
            fsx::OpenError::Io(e) => e,
        };
        let resolved = match resolve_prefix(requested) {
            Ok(p) => p,
            Err(r) => return refused(op, requested, r),
        };
        match self.decide(policy, op, requested, &resolved) {
            Err(refusal) => refusal,
            Ok(_) => fail(format!(
                "cannot open {}: {}",
                opened.display(),
                describe(&e)
            )),
        }
    }
}

fn refused(op: Op, requested: &Path, r: fsx::Refused) -> Stop {
    deny(format!("{op} of {}: {r}", requested.display()))
}

pub(super) fn describe(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "it does not exist".into(),
        io::ErrorKind::PermissionDenied => "permission denied by the system".into(),
        _ if e.raw_os_error() == Some(libc::ENOTDIR) => "a part of the path is not a folder".into(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_tricks_are_refused_before_any_lookup() {
        for raw in ["rel/path", "", "/a/../b", "/a/b/..", "/a\0b", "~/x"] {
            assert!(checked_path(raw).is_err(), "{raw:?}");
        }
        assert_eq!(checked_path("/a/./b").unwrap(), Path::new("/a/./b"));
    }

    #[test]
    fn case_folding_refuses_a_protected_root_spelled_in_another_case() {
        let opts =
            sandboxer::ResolveOptions::new(sandboxer::Target::Macos, "/Users/me".into(), false)
                .unwrap();
        let text = r#"
            version = 1
            base = "open"
            [[protected]]
            path = "~/Library/Application Support/AgentWorks"
            [[grant]]
            path = "~/Library/Application Support/AgentWorks/state/cli-runtimes/v1/c1"
            access = "rw"
            [[refuse]]
            path = "~/Library/Application Support/AgentWorks/state/cli-runtimes/v1/c1/Secret"
        "#;
        let exact = Policy::from_toml(text, "policy.toml", &opts).unwrap();
        let folded = case_folded(&exact);
        let both = Policies {
            exact: &exact,
            folded: Some(&folded),
        };
        let only_exact = Policies {
            exact: &exact,
            folded: None,
        };
        let mut call = Call {
            target: None,
            resolved: None,
        };
        let sneaky = Path::new("/Users/me/library/APPLICATION SUPPORT/agentworks/config.json");
        // Compared by case alone the path is outside every rule (and the base is open).
        assert!(call.decide(&only_exact, Op::Read, sneaky, sneaky).is_ok());
        match call.decide(&both, Op::Read, sneaky, sneaky) {
            Err(Stop::Deny { message, .. }) => {
                assert!(message.contains("without case"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        let runtime_file = Path::new(
            "/Users/me/Library/Application Support/AgentWorks/state/cli-runtimes/v1/C1/notes",
        );
        assert!(
            call.decide(&both, Op::Write, runtime_file, runtime_file)
                .is_err(),
            "grant in another case: protected"
        );
        let ok = Path::new(
            "/Users/me/Library/Application Support/AgentWorks/state/cli-runtimes/v1/c1/notes",
        );
        assert!(call.decide(&both, Op::Write, ok, ok).is_ok());
        let refused = Path::new(
            "/Users/me/Library/Application Support/AgentWorks/state/cli-runtimes/v1/c1/SECRET/x",
        );
        assert!(call.decide(&both, Op::Read, refused, refused).is_err());
    }

    #[test]
    fn resolve_prefix_keeps_the_missing_tail() {
        let d = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(d.path()).unwrap();
        std::os::unix::fs::symlink(&real, real.join("link")).unwrap();
        assert_eq!(
            resolve_prefix(&real.join("link/no/such")),
            Ok(real.join("no/such"))
        );
        std::fs::write(real.join("file"), "").unwrap();
        // Through a file (ENOTDIR), still resolved as far as it goes.
        assert_eq!(
            resolve_prefix(&real.join("link/file/x")),
            Ok(real.join("file/x"))
        );
        // Never through a magic link, never onto /proc, even for a path that does not exist.
        #[cfg(target_os = "linux")]
        assert_eq!(
            resolve_prefix(Path::new("/proc/self/no/such")),
            Err(fsx::Refused::Proc)
        );
        #[cfg(target_os = "linux")]
        assert_eq!(
            resolve_prefix(Path::new("/proc/self/root/no/such")),
            Err(fsx::Refused::MagicLink)
        );
    }
}
