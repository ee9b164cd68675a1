//! The paths a policy's rules are attached to, and the folders on the way to them.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::paths::same;
use crate::policy::{Base, Policy};

/// Whether a rule that closes things (protected, refused, launcher) is attached at `path`,
/// as opposed to one that opens (grants, closed-base folders).
pub(super) fn closes(p: &Policy, path: &Path) -> bool {
    p.protected.iter().any(|r| same(&r.path, path))
        || p.refuse.iter().any(|r| same(&r.path, path))
        || (p.launchers.block
            && p.launchers
                .exec
                .iter()
                .chain(&p.launchers.read)
                .any(|l| same(&l.path, path)))
}

/// Every path a policy rule is attached to, but guarded paths: those are the masks' alone
/// (a [`crate::linux::plan::MountStep::Guard`] each, never a Landlock rule), and the gap
/// analysis checks them one by one (`gaps::guard_gaps`), so the Landlock walk and the
/// comparison on representative paths need not visit the hundreds a home can have.
pub(super) fn policy_points(p: &Policy) -> BTreeSet<PathBuf> {
    let mut out: BTreeSet<PathBuf> = p
        .protected
        .iter()
        .map(|r| r.path.clone())
        .chain(p.grants.iter().map(|g| g.path.clone()))
        .chain(p.refuse.iter().map(|r| r.path.clone()))
        .collect();
    if p.base == Base::Closed {
        out.extend(
            p.closed
                .read
                .iter()
                .chain(&p.closed.write)
                .map(|r| r.path.clone()),
        );
    }
    if p.launchers.block {
        out.extend(
            p.launchers
                .exec
                .iter()
                .chain(&p.launchers.read)
                .map(|l| l.path.clone()),
        );
    }
    out
}

/// For every folder on the way to a set of points, its children on the way to points
/// strictly beneath it: built once, so that asking costs a lookup instead of a scan of every
/// point. (A point's ancestors are its lexical parents: points are normal paths.)
#[derive(Debug, Default)]
pub(super) struct Children {
    of: HashMap<OsString, BTreeSet<PathBuf>>,
    none: BTreeSet<PathBuf>,
}

impl Children {
    pub(super) fn of<'p>(points: impl IntoIterator<Item = &'p PathBuf>) -> Children {
        let mut of: HashMap<OsString, BTreeSet<PathBuf>> = HashMap::new();
        for x in points {
            let mut child = x.as_path();
            for folder in x.ancestors().skip(1) {
                if !of
                    .entry(folder.as_os_str().to_owned())
                    .or_default()
                    .insert(child.to_path_buf())
                {
                    break; // the rest of the way is known from another point
                }
                child = folder;
            }
        }
        Children {
            of,
            none: BTreeSet::new(),
        }
    }

    /// The children of `n` on the way to points strictly beneath it.
    pub(super) fn of_folder(&self, n: &Path) -> &BTreeSet<PathBuf> {
        self.of.get(n.as_os_str()).unwrap_or(&self.none)
    }

    /// A child of `n` that no point names: it stands for every such child.
    pub(super) fn fresh_child(&self, n: &Path) -> PathBuf {
        let taken = self.of_folder(n);
        (0..)
            .map(|i| {
                let mut name = OsString::from("sbx-generic");
                if i > 0 {
                    name.push(i.to_string());
                }
                n.join(name)
            })
            .find(|c| !taken.contains(c))
            .expect("an unused name exists")
    }
}
