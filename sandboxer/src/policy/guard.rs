//! Where the autorun guard speaks at a path, for [`Policy::at`].
//!
//! Linux compares guarded paths as bytes (its masks sit on the files themselves). On macOS a
//! guarded path holds every spelling of itself (APFS is case- and normalisation-insensitive,
//! see [`crate::spelling`]), and when [`AutorunKnobs::repositories`] names entries, every git
//! folder under the home has those entries guarded (`hooks`, `config`) outside read-write
//! grants, and the git folder itself is never deleted or renamed there (moving it aside
//! would take its hooks out of the pattern's reach).
//!
//! [`AutorunKnobs::repositories`]: super::AutorunKnobs::repositories

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
    /// A repository's guarded entry holds it: that entry's path (`…/.git/hooks`).
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
        // A `.git` component followed by a guarded name.
        let i = (0..below.len().saturating_sub(1)).find(|&i| {
            is_git(below[i])
                && self
                    .autorun
                    .repositories
                    .iter()
                    .any(|n| spelling::same_name(below[i + 1], n.as_ref()))
        })?;
        Some(GuardHit::Repository(
            p.components().take(at + i + 2).collect(),
        ))
    }

    /// A rule root strictly beneath `p` (`p` normalized, absolute), on macOS also a guarded
    /// path however spelled, and a repository's git folder at `p` itself (then its first
    /// guarded entry); `grant` is `p`'s deepest grant.
    pub(super) fn ancestor_at(&self, p: &Path, grant: Option<&Grant>) -> Option<Cow<'_, Path>> {
        if let Some(root) = self.rule_roots().find(|root| strictly_within(root, p)) {
            return Some(Cow::Borrowed(root));
        }
        if !self.compares_spellings() {
            return None;
        }
        if let Some(g) = self
            .guarded
            .iter()
            .find(|g| spelling::strictly_within(&g.path, p))
        {
            return Some(Cow::Borrowed(&g.path));
        }
        let (below, _) = self.in_repositories(p, grant)?;
        let first = self.autorun.repositories.first()?;
        below
            .last()
            .is_some_and(|last| is_git(last))
            .then(|| Cow::Owned(p.join(first)))
    }

    /// The names of `p` below the home, and how many components the home took, when the
    /// repository pattern applies at `p`: on, `p` strictly in the home (however spelled),
    /// and not inside a read-write grant.
    fn in_repositories<'a>(
        &self,
        p: &'a Path,
        grant: Option<&Grant>,
    ) -> Option<(Vec<&'a std::ffi::OsStr>, usize)> {
        if self.autorun.repositories.is_empty() || grant.is_some_and(|g| g.access == Access::Rw) {
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
