//! The programs the dispatcher runs outside a sandbox — the CLIs, `sandboxer`, tmux, itself —
//! and the check that no chat can have written one before it is run.
//!
//! A chat writes the open home. A program found there (a CLI in `~/.local/bin`, a `sandboxer`
//! from `cargo install`) is code a chat may have replaced; run outside a sandbox it runs the
//! chat's code with the person's rights. So every launch's policy guards the files of the
//! programs the dispatcher runs ([`guard_rules`]: read and run allowed, every write refused),
//! and before the dispatcher runs one outside a sandbox it checks it ([`check_file`]: owner
//! and mode), and for the enforcer of a confined launch also that the launch's own policy
//! refuses to change it ([`check_guarded`]). A program that fails is not run: `full` is
//! refused rather than reported confined while a replaced enforcer runs the CLI unconfined.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sandboxer::{GuardRule, Op, Policy, PolicyDocument, Verdict, written};

/// Why a program is not one the dispatcher may run outside a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Untrusted {
    #[error("{path}: not found ({why})", path = .path.display())]
    Missing { path: PathBuf, why: String },
    #[error(
        "{path} is owned by uid {owner}, neither root nor you (uid {person}): its owner could \
         replace it",
        path = .path.display()
    )]
    Owner {
        path: PathBuf,
        owner: u32,
        person: u32,
    },
    #[error(
        "{path} is group- or world-writable (mode {mode:o}, not a group of its owner alone): another account could replace it",
        path = .path.display()
    )]
    Writable { path: PathBuf, mode: u32 },
    #[error(
        "this launch's policy lets a chat {op} {path} ({reason}): a chat could replace it \
         before a later launch runs it",
        path = .path.display()
    )]
    Unguarded {
        path: PathBuf,
        op: Op,
        reason: String,
    },
}

impl Untrusted {
    /// How the person makes the check pass.
    pub fn fix(&self) -> &'static str {
        match self {
            Untrusted::Missing { .. } => {
                "install it beside the dispatcher binary, or set $SANDBOXER_BIN to its absolute path"
            }
            Untrusted::Owner { .. } | Untrusted::Writable { .. } => {
                "install it into a folder owned by root or by you that no one else can write \
                 (e.g. `sudo install -m 755 sandboxer /usr/local/bin/`), and point \
                 $SANDBOXER_BIN there"
            }
            Untrusted::Unguarded { .. } => {
                "turn the autorun guard on (remove `\"autorun\": {\"guard\": false}` from the \
                 state root's config.json): a confined launch runs only an enforcer its own \
                 policy keeps unwritable"
            }
        }
    }
}

/// The `[[guard]]` entries of a launch's policy for `programs` (absolute paths of the binaries
/// the dispatcher runs outside a sandbox): each program's path, the file it resolves to, and
/// its npm package folder. Relative paths (a program not found) are left out.
pub fn guard_rules(programs: &[PathBuf]) -> Vec<GuardRule> {
    let files: Vec<PathBuf> = programs
        .iter()
        .filter(|p| p.is_absolute())
        .cloned()
        .collect();
    sandboxer::autorun::programs::entries(&[], None, &files)
        .into_iter()
        .map(|e| GuardRule {
            path: written(e.path),
            missing: None,
            content: None,
            why: Some(e.why),
        })
        .collect()
}

/// Sets `doc`'s autorun guard: on, its `[[guard]]` entries are [`guard_rules`] of
/// `programs`; off, it says `[autorun] guard = false` and guards no program.
pub fn apply_guard(doc: &mut PolicyDocument, on: bool, programs: &[PathBuf]) {
    if on {
        doc.guard = guard_rules(programs);
    } else {
        doc.guard.clear();
        doc.autorun.guard = Some(false);
    }
}

/// The checks on the file itself: it exists, and it and its folder are owned by root or the
/// person and writable by no one else: not world-writable, and group-writable only for the
/// owner's private group (Debian, Ubuntu and Fedora give each user a group of their own, and
/// their default umask 002 makes `cargo build` output mode 775). Returns its canonical path.
pub fn check_file(path: &Path) -> Result<PathBuf, Untrusted> {
    let missing = |why: String| Untrusted::Missing {
        path: path.to_path_buf(),
        why,
    };
    if !path.is_absolute() {
        return Err(missing("not an absolute path".into()));
    }
    let real = std::fs::canonicalize(path).map_err(|e| missing(e.to_string()))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let person = unsafe { libc::geteuid() };
    let folder = real.parent().unwrap_or(Path::new("/"));
    for p in [real.as_path(), folder] {
        let meta = std::fs::metadata(p).map_err(|e| missing(e.to_string()))?;
        if meta.uid() != 0 && meta.uid() != person {
            return Err(Untrusted::Owner {
                path: p.to_path_buf(),
                owner: meta.uid(),
                person,
            });
        }
        let mode = meta.permissions().mode() & 0o7777;
        let others_write =
            mode & 0o002 != 0 || (mode & 0o020 != 0 && !private_group(meta.uid(), meta.gid()));
        if others_write {
            return Err(Untrusted::Writable {
                path: p.to_path_buf(),
                mode,
            });
        }
    }
    Ok(real)
}

/// Whether `gid` is `uid`'s private group: the user's primary group, named like the user, with
/// no other member listed. Only then does its write bit give no one else the file.
fn private_group(uid: u32, gid: u32) -> bool {
    // gid 0 is root's group, and every account whose primary group it is (none listed as a
    // member) shares it.
    if gid == 0 {
        return false;
    }
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: passwd and group are plain data filled by the *_r calls; buf outlives every read
    // of the pointers they hold, and each pointer is checked for null before it is read.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        if libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr().cast(), buf.len(), &mut out) != 0
            || out.is_null()
            || pwd.pw_gid != gid
            || pwd.pw_name.is_null()
        {
            return false;
        }
        let user = std::ffi::CStr::from_ptr(pwd.pw_name).to_owned();
        let mut gbuf = vec![0u8; 64 * 1024];
        let mut grp: libc::group = std::mem::zeroed();
        let mut gout: *mut libc::group = std::ptr::null_mut();
        if libc::getgrgid_r(
            gid,
            &mut grp,
            gbuf.as_mut_ptr().cast(),
            gbuf.len(),
            &mut gout,
        ) != 0
            || gout.is_null()
            || grp.gr_name.is_null()
            || std::ffi::CStr::from_ptr(grp.gr_name) != user.as_c_str()
        {
            return false;
        }
        let mut member = grp.gr_mem;
        while !member.is_null() && !(*member).is_null() {
            if std::ffi::CStr::from_ptr(*member) != user.as_c_str() {
                return false;
            }
            member = member.add(1);
        }
        true
    }
}

/// The check on the launch's policy: it refuses writing, deleting and renaming `real` (a
/// canonical path, [`check_file`]'s) and renaming each folder above it.
pub fn check_guarded(policy: &Policy, real: &Path) -> Result<(), Untrusted> {
    let at_file = [Op::Write, Op::Delete, Op::Rename].map(|op| (op, real));
    let above = real.ancestors().skip(1).map(|a| (Op::Rename, a));
    for (op, path) in at_file.into_iter().chain(above) {
        let d = policy.decide(op, path);
        if d.verdict == Verdict::Allow {
            return Err(Untrusted::Unguarded {
                path: path.to_path_buf(),
                op,
                reason: d.reason.to_string(),
            });
        }
    }
    Ok(())
}

/// Every shipped adapter's CLI found here (on `$PATH`, or its `AGENTWORKS_CLI_*` variable):
/// programs run outside a sandbox later, by the person or a bridge-only launch, so guarded in
/// every confined run, whichever CLI (or step) it runs.
pub fn installed_clis() -> Vec<PathBuf> {
    crate::adapter::load_all(None)
        .unwrap_or_default()
        .iter()
        .filter_map(crate::adapter::locate_binary)
        .collect()
}

/// tmux, resolved once on `$PATH` to an absolute path: the dispatcher's tmux server and every
/// command to it run this file, never a name looked up again later.
pub fn tmux() -> &'static Path {
    static TMUX: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    TMUX.get_or_init(|| {
        std::env::var_os("PATH")
            .and_then(|p| {
                std::env::split_paths(&p)
                    .filter(|d| d.is_absolute())
                    .map(|d| d.join("tmux"))
                    .find(|p| p.is_file())
            })
            .unwrap_or_else(|| PathBuf::from("tmux"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxer::{ResolveOptions, Target};

    fn tool(dir: &Path, mode: u32) -> PathBuf {
        let p = dir.join("sandboxer");
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    fn folder() -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let real = t.path().canonicalize().unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o755)).unwrap();
        (t, real)
    }

    fn policy(guard: bool, programs: &[PathBuf]) -> Policy {
        let mut doc = PolicyDocument::new(sandboxer::Base::Open);
        apply_guard(&mut doc, guard, programs);
        let opts = ResolveOptions::new(Target::Linux, PathBuf::from("/home/ada"), false).unwrap();
        Policy::from_toml(&doc.to_toml().unwrap(), "test", &opts).unwrap()
    }

    #[test]
    fn a_private_binary_passes_and_a_group_writable_one_or_folder_fails() {
        let (_t, dir) = folder();
        let p = tool(&dir, 0o755);
        assert_eq!(check_file(&p), Ok(p.clone()));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o775)).unwrap();
        assert_eq!(
            check_file(&p),
            Err(Untrusted::Writable {
                path: p.clone(),
                mode: 0o775
            })
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = check_file(&p).unwrap_err();
        assert_eq!(
            e,
            Untrusted::Writable {
                path: dir.clone(),
                mode: 0o777
            }
        );
        assert!(
            e.to_string()
                .contains("group- or world-writable (mode 777,")
        );
    }

    /// A group of the owner's own (Debian's user private groups) gives no one else the file;
    /// root's group, another user's, or a shared one does.
    #[test]
    fn only_a_private_group_may_have_the_write_bit() {
        let (uid, gid) = agentworks_test_user::test_user_ids();
        assert!(private_group(uid, gid), "sbx-test's own group is private");
        assert!(
            !private_group(0, 0),
            "root's group is shared by every gid-0 account"
        );
        assert!(!private_group(uid, 0), "not the user's primary group");
        assert!(!private_group(0, gid), "another user's group");
    }

    #[test]
    fn a_binary_of_another_account_fails() {
        let (_t, dir) = folder();
        let p = tool(&dir, 0o755);
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return; // only root can give a file away
        }
        std::os::unix::fs::chown(&p, Some(4242), None).unwrap();
        assert!(matches!(
            check_file(&p),
            Err(Untrusted::Owner { owner: 4242, .. })
        ));
    }

    #[test]
    fn a_bare_name_or_a_missing_file_fails() {
        for p in ["sandboxer", "/nonexistent/sandboxer"] {
            let e = check_file(Path::new(p)).unwrap_err();
            assert!(matches!(e, Untrusted::Missing { .. }), "{e}");
            assert!(e.fix().contains("$SANDBOXER_BIN"));
        }
    }

    #[test]
    fn the_policy_must_refuse_changing_the_enforcer_and_renaming_its_folders() {
        let (_t, dir) = folder();
        let p = tool(&dir, 0o755);
        assert_eq!(
            check_guarded(&policy(true, std::slice::from_ref(&p)), &p),
            Ok(())
        );
        let e = check_guarded(&policy(false, std::slice::from_ref(&p)), &p).unwrap_err();
        assert!(
            matches!(&e, Untrusted::Unguarded { path, op: Op::Write, .. } if *path == p),
            "{e}"
        );
        assert!(e.to_string().contains("lets a chat write"), "{e}");
        assert!(e.fix().contains("autorun guard on"));
        // Guarding another file leaves this one and its folders open.
        let other = dir.join("other");
        let e = check_guarded(&policy(true, &[other]), &p).unwrap_err();
        assert!(matches!(e, Untrusted::Unguarded { .. }), "{e}");
    }

    #[test]
    fn guard_rules_name_the_program_and_skip_what_was_not_found() {
        let (_t, dir) = folder();
        let p = tool(&dir, 0o755);
        let rules = guard_rules(&[p.clone(), PathBuf::from("claude")]);
        let paths: Vec<&Path> = rules.iter().map(|r| r.path.get_ref().as_path()).collect();
        assert_eq!(paths, [p.as_path()]);
    }
}
