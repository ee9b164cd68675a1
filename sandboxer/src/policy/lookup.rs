//! [`Policy::at`] for many paths: the rule lists that grow with a person's home (hundreds of
//! guarded paths, the folders above every rule path) indexed once by their bytes, so that
//! each lookup walks the path's own ancestors instead of every rule. The planner asks it for
//! each representative path of its self-check.

use std::collections::HashMap;
use std::path::Path;

use super::guard::GuardHit;
use super::{At, Guarded, Policy};
use crate::paths::{clean_ancestors, normalize};

/// An index of one policy's guarded paths and rule roots' ancestors; [`Lookup::at`] answers
/// as [`Policy::at`].
pub struct Lookup<'p> {
    policy: &'p Policy,
    /// None when paths are not compared by their bytes (a macOS policy: every spelling of a
    /// guarded path is guarded), and [`Policy::at`] answers.
    index: Option<Index<'p>>,
}

struct Index<'p> {
    guarded: HashMap<&'p [u8], &'p Guarded>,
    /// Every strict ancestor of a rule root, to one rule root beneath it.
    ancestors: HashMap<&'p [u8], &'p Path>,
}

impl Policy {
    /// An index for asking [`Policy::at`] about many paths.
    pub fn lookup(&self) -> Lookup<'_> {
        if self.compares_spellings() {
            return Lookup {
                policy: self,
                index: None,
            };
        }
        let guarded = self
            .guarded
            .iter()
            .rev()
            .map(|g| (g.path.as_os_str().as_encoded_bytes(), g))
            .collect();
        let mut ancestors = HashMap::new();
        for root in self.rule_roots() {
            for a in root.ancestors().skip(1) {
                ancestors
                    .entry(a.as_os_str().as_encoded_bytes())
                    .or_insert(root);
            }
        }
        Lookup {
            policy: self,
            index: Some(Index { guarded, ancestors }),
        }
    }
}

impl<'p> Lookup<'p> {
    /// [`Policy::at`].
    pub fn at(&self, path: &Path) -> At<'p> {
        let Some(index) = &self.index else {
            return self.policy.at(path);
        };
        let Some(q) = normalize(path) else {
            return self.policy.at(path);
        };
        // Normal, so clean: its ancestors are prefixes of its bytes.
        let guarded = clean_ancestors(&q)
            .find_map(|a| index.guarded.get(a))
            .map(|g| GuardHit::Entry(g));
        let ancestor = index
            .ancestors
            .get(q.as_os_str().as_encoded_bytes())
            .map(|root| std::borrow::Cow::Borrowed(*root));
        self.policy
            .at_with(&q, self.policy.deepest_grant(&q), ancestor, guarded)
    }
}
