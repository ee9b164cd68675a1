//! Where the autorun guard speaks at a path, for [`Policy::at`].
//!
//! Linux compares guarded paths as bytes (its masks sit on the files themselves). On macOS a
//! guarded path holds every spelling of itself (APFS is case- and normalisation-insensitive,
//! see [`crate::spelling`]), and when [`AutorunKnobs::repositories`] is on, every git folder
//! under the home is guarded outside read-write grants, itself and everything in it, and so
//! are the project settings named by [`AutorunKnobs::project_settings`] in every folder below
//! the home (`~/p/.claude`, not `~/.claude`).
//!
//! [`AutorunKnobs::repositories`]: super::AutorunKnobs::repositories
//! [`AutorunKnobs::project_settings`]: super::AutorunKnobs::project_settings

use std::borrow::Cow;
use std::path::{Component, Path, PathBuf};

use super::{Access, Grant, Guarded, Policy};
use crate::paths::{strictly_within, within};
use crate::spelling;
use crate::target::Target;

/// What guards a path.
pub(super) enum GuardHit<'p> {
    /// A guarded entry holds it.
    Entry(&'p Guarded),
    /// A repository's git folder holds it: that folder's path (`…/.git`).
    Repository(PathBuf),
}

/// Where the repository pattern comes from, for messages.
pub(super) const REPOSITORIES_ORIGIN: &str = "(autorun) [repositories]";

impl Policy {
    pub(super) fn compares_spellings(&self) -> bool {
        self.target == Target::Macos
    }

    /// The guard holding `p` (normalized, absolute); `grant` is its deepest grant.
    pub(super) fn guard_at(&self, p: &Path, grant: Option<&Grant>) -> Option<GuardHit<'_>> {
        let entry = if self.compares_spellings() {
            self.guarded.iter().find(|g| spelling::within(p, &g.path))
        } else {
            self.guarded.iter().find(|g| within(p, &g.path))
        };
        if let Some(g) = entry {
            return Some(GuardHit::Entry(g));
        }
        let (below, at) = self.in_repositories(p, grant)?;
        // A git folder anywhere below the home; project settings in a folder below it.
        let i = below.iter().enumerate().position(|(i, n)| {
            is_git(n)
                || (i > 0
                    && self
                        .autorun
                        .project_settings
                        .iter()
                        .any(|s| spelling::same_name(n, s.as_ref())))
        })?;
        Some(GuardHit::Repository(
            p.components().take(at + i + 1).collect(),
        ))
    }

    /// A rule root strictly beneath `p` (`p` normalized, absolute), on macOS also a guarded
    /// path however spelled.
    pub(super) fn ancestor_at(&self, p: &Path) -> Option<Cow<'_, Path>> {
        if let Some(root) = self.rule_roots().find(|root| strictly_within(root, p)) {
            return Some(Cow::Borrowed(root));
        }
        if !self.compares_spellings() {
            return None;
        }
        self.guarded
            .iter()
            .find(|g| spelling::strictly_within(&g.path, p))
            .map(|g| Cow::Borrowed(g.path.as_path()))
    }

    /// The names of `p` below the home, and how many components the home took, when the
    /// repository pattern applies at `p`: on, `p` strictly in the home (however spelled),
    /// and not inside a read-write grant.
    fn in_repositories<'a>(
        &self,
        p: &'a Path,
        grant: Option<&Grant>,
    ) -> Option<(Vec<&'a std::ffi::OsStr>, usize)> {
        if !self.autorun.repositories || grant.is_some_and(|g| g.access == Access::Rw) {
            return None;
        }
        let at = spelling::within_at(p, &self.home)?;
        let below: Vec<&std::ffi::OsStr> = p
            .components()
            .skip(at)
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n),
                _ => None,
            })
            .collect();
        (!below.is_empty()).then_some((below, at))
    }
}

fn is_git(name: &std::ffi::OsStr) -> bool {
    spelling::same_name(name, ".git".as_ref())
}

/// What to do about a guarded file with another name (`autorun-hard-links`), on either
/// platform.
pub const HARD_LINKS_FIX: &str = "Make each other name a symlink or a copy (`find ~ -samefile \
     FILE` lists them), or turn the guard off for this policy ([autorun] guard = false)";

impl Policy {
    /// The guarded files that have another name (a hard link) and are not programs: the guard
    /// keeps a path, not the file, so the sandbox could write them through the other name. The
    /// Linux planner finds the same through its view of the file system (the breaking gap
    /// `autorun-hard-links`); the macOS launch refuses on these. Programs (executable files)
    /// are left out on both: a build's output and pnpm's installs have other names by design.
    pub fn guarded_files_with_other_names(&self) -> Vec<PathBuf> {
        other_names(self.guarded.iter().map(|g| g.path.as_path()))
    }
}

#[cfg(unix)]
fn other_names<'p>(paths: impl Iterator<Item = &'p Path>) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    paths
        .filter(|p| {
            std::fs::symlink_metadata(p)
                .is_ok_and(|m| m.file_type().is_file() && m.nlink() > 1 && m.mode() & 0o111 == 0)
        })
        .map(Path::to_path_buf)
        .collect()
}

#[cfg(not(unix))]
fn other_names<'p>(_paths: impl Iterator<Item = &'p Path>) -> Vec<PathBuf> {
    Vec::new()
}

#[cfg(all(test, unix))]
mod other_names_tests {
    use super::*;

    /// A file with a second name counts, with its control (the same file alone does not); a
    /// program, a folder, a symlink and a missing path never do.
    #[test]
    fn only_files_with_another_name_count() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let alone = d.join("alone");
        let linked = d.join("linked");
        let program = d.join("program");
        std::fs::write(&alone, "x").unwrap();
        std::fs::write(&linked, "x").unwrap();
        std::fs::hard_link(&linked, d.join("other-name")).unwrap();
        std::fs::write(&program, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(
            &program,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        std::fs::hard_link(&program, d.join("program-other")).unwrap();
        std::os::unix::fs::symlink(&linked, d.join("link")).unwrap();
        let paths = [
            alone.clone(),
            linked.clone(),
            program,
            d.to_path_buf(),
            d.join("link"),
            d.join("missing"),
        ];
        assert_eq!(other_names(paths.iter().map(PathBuf::as_path)), [linked]);
        assert!(other_names([alone.as_path()].into_iter()).is_empty());
    }
}
