//! The policy as Seatbelt can say it: a set of regions, each a folder minus folders inside it.
//!
//! SBPL has no "deepest rule wins" and we do not rely on its "last match wins", so the
//! layered policy is cut into disjoint pieces that a union of allow rules can express:
//!
//! - every grant owns its *part*: the grant's folder minus the grants directly inside it,
//!   minus the refused paths and launcher folders that fall in that part. Each path inside
//!   some grant lies in exactly one part, the part of its deepest grant, which is what
//!   [`Policy::decide`] consults. Read-like operations are allowed in every part, writes in
//!   the parts of `rw` grants;
//! - the base: `/` (open) or each closed-base folder, minus protected roots, refused paths,
//!   launcher folders and the outermost grants (whose parts speak for themselves).
//!
//! On top of that, lists of single paths:
//!
//! - `keep`: the strict ancestors of every rule path (protected, grant, refused) that fall
//!   in a writable region. They must not be deleted or renamed, so their write region
//!   leaves them out of `file-write*` and gives back only data and create;
//! - `exec_except`: the launcher binaries that fall in a readable region, refused for
//!   `process-exec` only;
//! - `traverse`: folders above grants that no readable region holds.
//!
//! Paths are handled as the bytes of their canonical spelling (`/a/b`: no `.`, `..`, empty
//! component or trailing `/`), which the renderer checks first. Every step is a hash lookup
//! or a byte-slice cut per path component, so the work grows with the number of rules times
//! the path depth, never with rules squared.

use std::collections::BTreeSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Bound;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::policy::{Access, Base, Grant, Policy};

/// A canonical absolute path, as bytes.
pub(crate) type Key<'p> = &'p [u8];

/// A folder minus folders inside it: `(require-all (subpath root) (require-not (subpath x))…)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Region<'p> {
    pub root: Key<'p>,
    /// Strictly inside `root`, sorted, none inside another.
    pub except: Vec<Key<'p>>,
}

/// What a region stands for, for the profile's comments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    BaseOpen,
    ClosedRead,
    ClosedWrite,
    Grant(Access),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReadTerm<'p> {
    pub region: Region<'p>,
    pub source: Source,
    /// Launcher binaries inside the region: `process-exec` leaves them out.
    pub exec_except: Vec<Key<'p>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct WriteTerm<'p> {
    pub region: Region<'p>,
    pub source: Source,
    /// Ancestors of rule paths inside the region: writable, never deleted or renamed.
    pub keep: Vec<Key<'p>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout<'p> {
    pub read: Vec<ReadTerm<'p>>,
    pub write: Vec<WriteTerm<'p>>,
    /// Every term's `keep`, together, sorted: they may be written and created.
    pub keep: Vec<Key<'p>>,
    /// Strict ancestors of grants that no readable region holds: `file-read-metadata` only,
    /// so `realpath()` can walk down to a grant inside a protected root.
    pub traverse: Vec<Key<'p>>,
    /// Launcher binaries (exact paths), when launchers are blocked.
    pub launcher_exec: Vec<Key<'p>>,
    /// Launcher folders, when launchers are blocked.
    pub launcher_folders: Vec<Key<'p>>,
}

// ---- canonical paths as bytes --------------------------------------------------------------

/// FNV-1a: the maps here are keyed by paths from the policy, hashed a few times per path
/// component, and SipHash's resistance to chosen keys buys nothing against a policy author
/// (who could as well write a large policy); FNV makes the cut markedly faster.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

type HashMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<Fnv>>;
type HashSet<K> = std::collections::HashSet<K, BuildHasherDefault<Fnv>>;

pub(crate) fn key(path: &Path) -> Key<'_> {
    path.as_os_str().as_bytes()
}

/// `path` is `folder` or beneath it, component-wise (`/a` holds `/a/b`, not `/ab`).
pub(crate) fn is_within(path: Key<'_>, folder: Key<'_>) -> bool {
    folder == b"/"
        || path == folder
        || path
            .strip_prefix(folder)
            .is_some_and(|rest| rest.first() == Some(&b'/'))
}

/// Absolute, and every component non-empty and neither `.` nor `..`; `/` itself included.
/// The form the kernel hands to Seatbelt, and the only form a rule can match.
pub(crate) fn is_canonical(path: &Path) -> bool {
    let bytes = key(path);
    bytes == b"/"
        || bytes.strip_prefix(b"/").is_some_and(|rest| {
            rest.split(|b| *b == b'/')
                .all(|c| !c.is_empty() && c != b"." && c != b"..")
        })
}

fn parent(k: Key<'_>) -> Option<Key<'_>> {
    match k.iter().rposition(|b| *b == b'/') {
        _ if k == b"/" => None,
        Some(0) => Some(b"/"),
        Some(i) => Some(&k[..i]),
        None => None,
    }
}

/// `k` itself and each ancestor up to `/`.
fn self_and_ancestors(k: Key<'_>) -> impl Iterator<Item = Key<'_>> {
    std::iter::successors(Some(k), |k| parent(k))
}

fn strict_ancestors(k: Key<'_>) -> impl Iterator<Item = Key<'_>> {
    self_and_ancestors(k).skip(1)
}

fn covered(k: Key<'_>, set: &HashSet<Key<'_>>) -> bool {
    self_and_ancestors(k).any(|a| set.contains(a))
}

/// Keeps the members no other member contains, sorted.
fn outermost<'p>(keys: impl IntoIterator<Item = Key<'p>>) -> Vec<Key<'p>> {
    let set: HashSet<Key> = keys.into_iter().collect();
    let mut out: Vec<Key> = set
        .iter()
        .copied()
        .filter(|k| !strict_ancestors(k).any(|a| set.contains(a)))
        .collect();
    out.sort_unstable();
    out
}

/// The members of `sorted` strictly inside `root`: in byte order they are exactly the run
/// starting with `root/`.
fn strictly_inside<'p>(sorted: &BTreeSet<Key<'p>>, root: Key<'_>) -> Vec<Key<'p>> {
    if root == b"/" {
        return sorted.iter().copied().filter(|k| *k != b"/").collect();
    }
    let mut below = root.to_vec();
    below.push(b'/');
    sorted
        .range::<[u8], _>((Bound::Included(below.as_slice()), Bound::Unbounded))
        .take_while(|k| k.starts_with(&below))
        .copied()
        .collect()
}

// ---- the cut ---------------------------------------------------------------------------------

/// The policy's paths, indexed for the cutting.
struct Paths<'p> {
    /// Refused paths and (when blocked) launcher folders: no region reaches inside them.
    dead: HashSet<Key<'p>>,
    /// The grant that decides at each grant path (the last listed, as `deepest_grant`'s
    /// `max_by_key` picks).
    grant_at: HashMap<Key<'p>, &'p Grant>,
    /// Grant paths, sorted.
    grants: Vec<Key<'p>>,
    /// Per grant: what its part leaves out (grants directly inside it, and the dead paths
    /// whose deepest grant it is).
    part_except: HashMap<Key<'p>, Vec<Key<'p>>>,
    /// Everything the base leaves out: protected roots, dead paths, outermost grants;
    /// none inside another.
    base_except: BTreeSet<Key<'p>>,
    base_except_set: HashSet<Key<'p>>,
    launcher_exec: Vec<Key<'p>>,
    launcher_folders: Vec<Key<'p>>,
}

impl<'p> Paths<'p> {
    fn of(policy: &'p Policy) -> Paths<'p> {
        let blocked = policy.launchers.block;
        let launcher_folders: BTreeSet<Key> = policy
            .launchers
            .read
            .iter()
            .filter(|_| blocked)
            .map(|l| key(&l.path))
            .collect();
        let launcher_exec: BTreeSet<Key> = policy
            .launchers
            .exec
            .iter()
            .filter(|_| blocked)
            .map(|l| key(&l.path))
            .collect();
        let dead: HashSet<Key> = policy
            .refuse
            .iter()
            .map(|r| key(&r.path))
            .chain(launcher_folders.iter().copied())
            .collect();

        let mut grant_at: HashMap<Key, &Grant> = HashMap::default();
        grant_at.reserve(policy.grants.len());
        for g in &policy.grants {
            grant_at.insert(key(&g.path), g);
        }
        let mut grants: Vec<Key> = grant_at.keys().copied().collect();
        grants.sort_unstable();

        let mut part_except: HashMap<Key, Vec<Key>> = HashMap::default();
        let mut outermost_grants = Vec::new();
        for &g in &grants {
            match strict_ancestors(g).find(|a| grant_at.contains_key(a)) {
                Some(parent) => part_except.entry(parent).or_default().push(g),
                None => outermost_grants.push(g),
            }
        }
        for &d in &dead {
            // A dead path at a grant's own path kills that grant instead (its parent's part
            // already leaves the grant out).
            if let Some(owner) = self_and_ancestors(d).find(|a| grant_at.contains_key(a))
                && owner != d
            {
                part_except.entry(owner).or_default().push(d);
            }
        }

        let base_except: BTreeSet<Key> = outermost(
            policy
                .protected
                .iter()
                .map(|p| key(&p.path))
                .chain(dead.iter().copied())
                .chain(outermost_grants),
        )
        .into_iter()
        .collect();
        Paths {
            base_except_set: base_except.iter().copied().collect(),
            base_except,
            dead,
            grant_at,
            grants,
            part_except,
            launcher_exec: launcher_exec.into_iter().collect(),
            launcher_folders: launcher_folders.into_iter().collect(),
        }
    }

    fn is_dead(&self, k: Key<'_>) -> bool {
        covered(k, &self.dead)
    }

    /// The base folder `root` minus what the base leaves out; `None` when it leaves out
    /// all of it.
    fn base_region(&self, root: Key<'p>) -> Option<Region<'p>> {
        (!covered(root, &self.base_except_set)).then(|| Region {
            root,
            except: strictly_inside(&self.base_except, root),
        })
    }

    /// The part of grant `g`; `None` when a refused path or launcher folder holds it all.
    fn grant_region(&mut self, g: Key<'p>) -> Option<Region<'p>> {
        (!self.is_dead(g)).then(|| Region {
            root: g,
            except: outermost(self.part_except.remove(g).unwrap_or_default()),
        })
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Read,
    Write,
}

/// The terms being built, with where each region's root landed, so single paths can be
/// placed in the terms holding them.
#[derive(Default)]
struct Terms<'p> {
    read: Vec<ReadTerm<'p>>,
    write: Vec<WriteTerm<'p>>,
    read_of_grant: HashMap<Key<'p>, usize>,
    write_of_grant: HashMap<Key<'p>, usize>,
    read_of_folder: HashMap<Key<'p>, usize>,
    write_of_folder: HashMap<Key<'p>, usize>,
}

impl<'p> Terms<'p> {
    /// The base's folders: `/` when open; the closed base's folders otherwise, read-like
    /// operations in both of its lists and everything in `write`. A folder inside another
    /// of the same list adds nothing (the base leaves out the same paths in both).
    fn add_base(&mut self, policy: &'p Policy, paths: &Paths<'p>) {
        let (read_folders, write_folders, sources) = match policy.base {
            Base::Open => (
                vec![b"/".as_slice()],
                vec![b"/".as_slice()],
                (Source::BaseOpen, Source::BaseOpen),
            ),
            Base::Closed => {
                let write = policy.closed.write.iter().map(|r| key(&r.path));
                let read = policy
                    .closed
                    .read
                    .iter()
                    .map(|r| key(&r.path))
                    .chain(write.clone());
                (
                    outermost(read),
                    outermost(write),
                    (Source::ClosedRead, Source::ClosedWrite),
                )
            }
        };
        for folder in read_folders {
            if let Some(region) = paths.base_region(folder) {
                self.read_of_folder.insert(folder, self.read.len());
                self.read.push(ReadTerm {
                    region,
                    source: sources.0,
                    exec_except: Vec::new(),
                });
            }
        }
        for folder in write_folders {
            if let Some(region) = paths.base_region(folder) {
                self.write_of_folder.insert(folder, self.write.len());
                self.write.push(WriteTerm {
                    region,
                    source: sources.1,
                    keep: Vec::new(),
                });
            }
        }
    }

    /// Every live grant's part: read-like operations, and everything for `rw`.
    fn add_grants(&mut self, paths: &mut Paths<'p>) {
        for g in std::mem::take(&mut paths.grants) {
            let Some(region) = paths.grant_region(g) else {
                continue;
            };
            let access = paths.grant_at[g].access;
            self.read_of_grant.insert(g, self.read.len());
            self.read.push(ReadTerm {
                region: region.clone(),
                source: Source::Grant(access),
                exec_except: Vec::new(),
            });
            if access == Access::Rw {
                self.write_of_grant.insert(g, self.write.len());
                self.write.push(WriteTerm {
                    region,
                    source: Source::Grant(access),
                    keep: Vec::new(),
                });
            }
        }
    }

    /// The terms of `kind` whose region holds `k`, following how the regions were cut: a
    /// dead path is in none; inside a grant, only in its deepest grant's part; otherwise in
    /// the base folder of that kind holding it, unless the base leaves it out.
    fn holding(&self, paths: &Paths<'p>, k: Key<'_>, kind: Kind) -> Vec<usize> {
        if paths.is_dead(k) {
            return Vec::new();
        }
        let (of_grant, of_folder) = match kind {
            Kind::Read => (&self.read_of_grant, &self.read_of_folder),
            Kind::Write => (&self.write_of_grant, &self.write_of_folder),
        };
        if let Some(g) = self_and_ancestors(k).find(|a| paths.grant_at.contains_key(a)) {
            return of_grant.get(g).copied().into_iter().collect();
        }
        if covered(k, &paths.base_except_set) {
            return Vec::new();
        }
        self_and_ancestors(k)
            .filter_map(|a| of_folder.get(a).copied())
            .collect()
    }
}

/// Cuts `policy` into regions. Every path must be canonical ([`is_canonical`]).
pub(crate) fn layout(policy: &Policy) -> Layout<'_> {
    let mut paths = Paths::of(policy);
    let live_grants: Vec<Key> = paths
        .grants
        .iter()
        .copied()
        .filter(|g| !paths.is_dead(g))
        .collect();
    let mut terms = Terms::default();
    terms.add_base(policy, &paths);
    terms.add_grants(&mut paths);

    // Ancestors of rule paths must not be deleted or renamed: every writable region holding
    // one leaves it out of unlink.
    let ancestors: HashSet<Key> = policy
        .rule_roots()
        .flat_map(|r| strict_ancestors(key(r)))
        .collect();
    let mut keep = Vec::new();
    for a in ancestors {
        let holding = terms.holding(&paths, a, Kind::Write);
        if !holding.is_empty() {
            keep.push(a);
        }
        for t in holding {
            terms.write[t].keep.push(a);
        }
    }
    keep.sort_unstable();
    for term in &mut terms.write {
        term.keep.sort_unstable();
    }
    for &e in &paths.launcher_exec {
        for t in terms.holding(&paths, e, Kind::Read) {
            terms.read[t].exec_except.push(e);
        }
    }
    let grant_ancestors: HashSet<Key> = live_grants
        .iter()
        .flat_map(|g| strict_ancestors(g))
        .collect();
    let mut traverse: Vec<Key> = grant_ancestors
        .into_iter()
        .filter(|a| terms.holding(&paths, a, Kind::Read).is_empty())
        .collect();
    traverse.sort_unstable();

    Layout {
        read: terms.read,
        write: terms.write,
        keep,
        traverse,
        launcher_exec: paths.launcher_exec,
        launcher_folders: paths.launcher_folders,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_paths() {
        for ok in ["/", "/a", "/a b/c", "/.x/..y"] {
            assert!(is_canonical(Path::new(ok)), "{ok}");
        }
        for bad in ["", "a", "/a/", "//a", "/a//b", "/a/./b", "/a/..", "/."] {
            assert!(!is_canonical(Path::new(bad)), "{bad}");
        }
    }

    #[test]
    fn ancestors_and_inside() {
        let a: Vec<Key> = self_and_ancestors(b"/a/b c/d").collect();
        assert_eq!(a, [b"/a/b c/d".as_slice(), b"/a/b c", b"/a", b"/"]);
        assert_eq!(self_and_ancestors(b"/").count(), 1);
        let set: BTreeSet<Key> = [b"/a".as_slice(), b"/a b", b"/a/b", b"/a/b/c", b"/a0", b"/b"]
            .into_iter()
            .collect();
        assert_eq!(
            strictly_inside(&set, b"/a"),
            [b"/a/b".as_slice(), b"/a/b/c"]
        );
        assert_eq!(strictly_inside(&set, b"/").len(), 6);
        assert_eq!(
            outermost(set.iter().copied()),
            [b"/a".as_slice(), b"/a b", b"/a0", b"/b"]
        );
    }
}
