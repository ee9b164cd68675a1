//! Names reserved in every spelling, on a target whose file names ignore case and Unicode
//! form (macOS: APFS and HFS+, see [`crate::spelling`]).
//!
//! A protected root or a refused path may not exist yet: the dispatcher makes a workflow's
//! `planning` folder later, tmux makes `/private/tmp/tmux-501` when the person next starts
//! it. Creating another spelling of such a name first (`Planning`, `TMUX-501`, `planning` in
//! NFD) makes the entry the later user opens, owned and filled by the sandbox. The rules
//! are by bytes, so that spelling lies outside them; this layer refuses creating it, and
//! anything beneath it, whatever the grants or the base say. The rule's own spelling is left
//! to the ordinary layers (a grant inside a protected root still creates there).
//!
//! Only creation: an entry that exists is one file however it is spelled, and reading or
//! writing it through another spelling is the kernel's path resolution, which hands
//! Seatbelt the name on disk (docs/seatbelt.md, "Squatting").

use std::path::Path;

use super::{Policy, Rule};
use crate::paths::within;
use crate::spelling;

impl Policy {
    /// The protected root or refused path that `p` (normalized, absolute) spells otherwise
    /// than its bytes, at or beneath it; None where names are compared as bytes (Linux).
    pub(super) fn reserved_at(&self, p: &Path) -> Option<&Rule> {
        if !self.compares_spellings() {
            return None;
        }
        self.protected
            .iter()
            .chain(&self.refuse)
            .find(|r| !within(p, &r.path) && spelling::within(p, &r.path))
    }
}
