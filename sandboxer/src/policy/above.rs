//! Folders above a grant, on macOS: listed, never read into.
//!
//! A grant inside a protected root must be reachable by its path, so the folders above it
//! that nothing else opens are open for their metadata (`stat`, `realpath`). Seatbelt cannot
//! tell opening a folder to list it from opening it to walk on, and Bun's resolver (Claude
//! Code and opencode are Bun binaries) opens every ancestor of its working folder and stops
//! with `CouldntReadCurrentDirectory` when one refuses. So on macOS such a folder may also
//! be read, which for a folder is listing it: the names of the entries in it show (other
//! chats' ids, `config.json`), never an entry's metadata or content. docs/seatbelt.md,
//! "Folders above a grant", has the trade-off; Linux reaches grants through its own mounts
//! and is unchanged.

use std::path::Path;

use super::{Grant, Policy, Target};
use crate::paths::{strictly_within, within};

impl Policy {
    /// A grant strictly beneath `p` (normalized, absolute) that no refused path or blocked
    /// launcher folder holds, on macOS.
    pub(super) fn live_grant_below(&self, p: &Path) -> Option<&Grant> {
        if self.target != Target::Macos {
            return None;
        }
        let dead = |g: &Path| {
            self.refuse.iter().any(|r| within(g, &r.path))
                || (self.launchers.block && self.launchers.read.iter().any(|l| within(g, &l.path)))
        };
        self.grants
            .iter()
            .find(|g| strictly_within(&g.path, p) && !dead(&g.path))
    }
}
