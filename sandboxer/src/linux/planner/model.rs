//! The plan's own model of what the kernel will do once it is applied: [`Plan::decide`].

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::rights::Rights;
use crate::linux::fs_right::FsRight;
use crate::linux::plan::{MountStep, Plan};
use crate::paths::{clean_ancestors, is_clean, normalize, same, within};
use crate::policy::{Access, Op, Verdict};

/// What a mount does to the path it decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MountEffect {
    /// Under a cover: nothing is there, nothing can be made.
    Covered,
    /// Under a refused-path mask.
    Refused,
    /// The path is a mount point: it cannot be created, deleted or renamed (EBUSY).
    MountPoint,
    /// Under a read-only bind-back, and the operation writes.
    ReadOnly,
    /// Under a guarded path's read-only bind, and the operation writes.
    Guarded,
}

/// The layer and rule that decided [`Plan::decide`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "layer", rename_all = "kebab-case")]
pub enum Decider {
    NotAbsolute,
    /// The root folder cannot be created, deleted or renamed.
    Root,
    /// Mount step `index` decides.
    Mount {
        index: usize,
        path: PathBuf,
        effect: MountEffect,
    },
    /// Landlock rule `index` grants `right`.
    Rule {
        index: usize,
        path: PathBuf,
        right: FsRight,
    },
    /// The plan's Landlock ABI does not handle `right`, so Landlock does not restrict it.
    Unhandled {
        right: FsRight,
        abi: u32,
    },
    /// No Landlock rule grants any of `rights` at `at`.
    NoRule {
        at: PathBuf,
        rights: Vec<FsRight>,
    },
    /// No mask applies and the plan has no Landlock layer.
    Unconfined,
    /// The socket broker refuses a pathname socket off its allowlist.
    SocketBroker,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlanDecision {
    pub verdict: Verdict,
    pub by: Decider,
}

impl PlanDecision {
    pub fn allowed(&self) -> bool {
        self.verdict == Verdict::Allow
    }
}

impl fmt::Display for Decider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |rights: &[FsRight]| {
            rights
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Decider::NotAbsolute => write!(f, "the path is not absolute"),
            Decider::Root => write!(f, "the root folder cannot be created, deleted or renamed"),
            Decider::Mount {
                index,
                path,
                effect,
            } => {
                let what = match effect {
                    MountEffect::Covered => "covers",
                    MountEffect::Refused => "masks refused path",
                    MountEffect::MountPoint => "is mounted on (a mount point stays put)",
                    MountEffect::ReadOnly => "binds read-only",
                    MountEffect::Guarded => "guards (binds read-only onto itself)",
                };
                write!(f, "mount step {index} {what} {}", path.display())
            }
            Decider::Rule { index, path, right } => {
                write!(
                    f,
                    "Landlock rule {index} on {} grants {right}",
                    path.display()
                )
            }
            Decider::Unhandled { right, abi } => write!(
                f,
                "Landlock ABI {abi} does not handle {right}, so it does not restrict it"
            ),
            Decider::NoRule { at, rights } => write!(
                f,
                "no Landlock rule grants {} at {}",
                list(rights),
                at.display()
            ),
            Decider::Unconfined => write!(f, "no mask applies and there is no Landlock layer"),
            Decider::SocketBroker => write!(
                f,
                "the socket broker refuses pathname sockets off the plan's allowlist"
            ),
        }
    }
}

impl fmt::Display for PlanDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.verdict, self.by)
    }
}

/// The mount step that decides for `q`: the deepest one on its path that no later step hides
/// (a later mount on an ancestor hides everything mounted beneath it).
///
/// Only steps on `q`'s own path can hide one another for `q` (a step strictly above one that
/// holds `q` holds `q` too), and on one path "strictly above" is "fewer components"; so the
/// steps holding `q`, usually none or a few, are all that is compared.
pub(super) fn governing<'m>(mounts: &'m [MountStep], q: &Path) -> Option<(usize, &'m MountStep)> {
    governing_among(mounts.iter().enumerate(), q)
}

/// [`governing`] among some of a plan's steps, with their indices.
fn governing_among<'m>(
    steps: impl Iterator<Item = (usize, &'m MountStep)>,
    q: &Path,
) -> Option<(usize, &'m MountStep)> {
    let mut on_path: Vec<(usize, &MountStep, usize)> = Vec::new();
    for (i, m) in steps {
        // A pin is a clone of the tree at its path: it hides nothing and changes nothing
        // beneath it (see `pinned`). A guard is a read-only clone: it hides nothing either,
        // and makes what it holds read-only (see `guarding`).
        if within(q, m.path()) && !matches!(m, MountStep::Pin { .. } | MountStep::Guard { .. }) {
            on_path.push((i, m, m.path().components().count()));
        }
    }
    on_path
        .iter()
        .filter(|(i, _, depth)| !on_path.iter().any(|(j, _, d)| j > i && d < depth))
        .max_by_key(|(i, _, depth)| (*depth, *i))
        .map(|(i, m, _)| (*i, *m))
}

/// The pin on `q` itself, if any: `q` is a mount point, so it cannot be deleted, renamed or
/// replaced (`EBUSY`). The planner never puts a pin where a later step hides it.
pub(super) fn pinned(mounts: &[MountStep], q: &Path) -> Option<usize> {
    mounts
        .iter()
        .position(|m| matches!(m, MountStep::Pin { path, .. } if same(path, q)))
}

/// The guard step holding `q`, if any: the shallowest (they come last, after every step on a
/// path they hold, so no later step hides one).
pub(super) fn guarding<'m>(mounts: &'m [MountStep], q: &Path) -> Option<(usize, &'m MountStep)> {
    mounts
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m, MountStep::Guard { .. }) && within(q, m.path()))
        .min_by_key(|(_, m)| m.path().components().count())
}

/// A plan's mount steps split for many lookups: the guard and pin steps by path, and the
/// others (by index into the steps it was made from).
///
/// Only steps whose path is clean ([`is_clean`]) are found by their bytes: for a clean `q`,
/// such a step's path is `q` or an ancestor of `q` exactly when its bytes are `q`'s or those
/// of one of `q`'s ancestors, so the lookups answer as [`guarding`] and [`pinned`] do. Any
/// other step is compared one by one, as there; a `q` that is not clean is looked up as
/// [`Masked::at`] does.
#[derive(Debug, Default)]
pub(super) struct MountsIndex {
    guards: HashMap<OsString, usize>,
    /// The first pin on each clean path.
    pins: HashMap<OsString, usize>,
    /// Guard and pin steps whose path is not clean.
    unclean: Vec<usize>,
    /// The steps that can govern a path: neither pins nor guards (see [`governing`]).
    others: Vec<usize>,
}

impl MountsIndex {
    pub(super) fn new(mounts: &[MountStep]) -> MountsIndex {
        let mut index = MountsIndex::default();
        for (i, m) in mounts.iter().enumerate() {
            match m {
                MountStep::Guard { path, .. } | MountStep::Pin { path, .. } if !is_clean(path) => {
                    index.unclean.push(i);
                }
                MountStep::Guard { path, .. } => {
                    index.guards.entry(path.as_os_str().to_owned()).or_insert(i);
                }
                MountStep::Pin { path, .. } => {
                    index.pins.entry(path.as_os_str().to_owned()).or_insert(i);
                }
                _ => index.others.push(i),
            }
        }
        index
    }
}

/// What the masks say at one path: the step that governs it ([`governing`]), the guard
/// holding it ([`guarding`]) and the pin on it ([`pinned`]).
#[derive(Clone, Copy)]
pub(super) struct Masked<'m> {
    pub governing: Option<(usize, &'m MountStep)>,
    pub guard: Option<(usize, &'m MountStep)>,
    pub pin: Option<usize>,
}

impl<'m> Masked<'m> {
    pub(super) fn at(mounts: &'m [MountStep], q: &Path) -> Masked<'m> {
        Masked {
            governing: governing(mounts, q),
            guard: guarding(mounts, q),
            pin: pinned(mounts, q),
        }
    }

    /// No masks (the landlock-only shape).
    pub(super) fn none() -> Masked<'m> {
        Masked {
            governing: None,
            guard: None,
            pin: None,
        }
    }

    /// [`Masked::at`] with the plan's steps split once: a home's hundreds of guard steps are
    /// found by the bytes of `q`'s ancestors, not compared one by one.
    pub(super) fn indexed(mounts: &'m [MountStep], index: &MountsIndex, q: &Path) -> Masked<'m> {
        if !is_clean(q) {
            return Masked::at(mounts, q);
        }
        let unclean = || index.unclean.iter().map(|&i| (i, &mounts[i]));
        // The shallowest guard holding `q`; at one depth, the first (as `guarding`).
        let hashed = clean_ancestors(q)
            .filter_map(|a| index.guards.get(OsStr::from_bytes(a)))
            .last()
            .map(|&i| (i, &mounts[i]));
        let guard = hashed
            .into_iter()
            .chain(
                unclean()
                    .filter(|(_, m)| matches!(m, MountStep::Guard { .. }) && within(q, m.path())),
            )
            .min_by_key(|(i, m)| (m.path().components().count(), *i));
        let pin = index
            .pins
            .get(q.as_os_str())
            .copied()
            .into_iter()
            .chain(
                unclean()
                    .filter(|(_, m)| matches!(m, MountStep::Pin { path, .. } if same(path, q)))
                    .map(|(i, _)| i),
            )
            .min();
        Masked {
            governing: governing_among(index.others.iter().map(|&i| (i, &mounts[i])), q),
            guard,
            pin,
        }
    }

    pub(super) fn any(&self) -> bool {
        self.governing.is_some() || self.guard.is_some()
    }
}

/// The masks' verdict for `op` at `q` (see [`Masked`]): (allowed, the step that decided). A
/// guard makes everything it holds read-only: it denies what writes (but not connect(2), which
/// the kernel checks on the socket inode), and moving the guarded path itself (a mount point).
pub(super) fn mask_verdict(
    masked: Masked<'_>,
    op: Op,
    q: &Path,
) -> (bool, Option<(usize, MountEffect)>) {
    let (ok, by) = hiding_verdict(masked.governing, op, q);
    if !ok {
        return (ok, by);
    }
    if let Some((i, guard)) = masked.guard {
        if matches!(op, Op::Create | Op::Delete | Op::Rename) && guard.path() == q {
            return (false, Some((i, MountEffect::MountPoint)));
        }
        if !op.leaves_files_alone() {
            return (false, Some((i, MountEffect::Guarded)));
        }
    }
    (true, None)
}

fn hiding_verdict(
    governing: Option<(usize, &MountStep)>,
    op: Op,
    q: &Path,
) -> (bool, Option<(usize, MountEffect)>) {
    let Some((i, step)) = governing else {
        return (true, None);
    };
    let moves = matches!(op, Op::Create | Op::Delete | Op::Rename);
    match step {
        MountStep::Cover { .. } => (false, Some((i, MountEffect::Covered))),
        MountStep::Refuse { .. } => (false, Some((i, MountEffect::Refused))),
        // Never govern (see `governing`); the pin on `q` itself is `pinned`'s, a guard is
        // `mask_verdict`'s.
        MountStep::Pin { .. } | MountStep::Guard { .. } => (true, None),
        MountStep::BindBack { path, access, .. } => {
            if moves && path == q {
                return (false, Some((i, MountEffect::MountPoint)));
            }
            // A read-only mount stops writes (EROFS) but not connect(2): the kernel checks
            // write permission on the socket inode, not the mount.
            let ok = *access == Access::Rw || op.is_read_like() || op == Op::ConnectUnix;
            (ok, (!ok).then_some((i, MountEffect::ReadOnly)))
        }
    }
}

impl Plan {
    /// The plan's own model of what the kernel will do: may `op` be done at `path` (absolute,
    /// resolved, like [`crate::Policy::decide`]) once this plan is applied? Masks first, then
    /// Landlock: read needs `read-file`, list `read-dir`, write `write-file` or `truncate`
    /// (truncate(2) changes content too, and below ABI 3 it is not restricted), create a
    /// `make-*` right on the parent, delete a
    /// `remove-*` right on the parent, rename `remove-*` and (`make-*` or `refer`) on the
    /// parent, exec `execute`, connect-unix `resolve-unix` (not restricted below ABI 9).
    pub fn decide(&self, op: Op, path: &Path) -> PlanDecision {
        let Some(q) = normalize(path) else {
            return PlanDecision {
                verdict: Verdict::Deny,
                by: Decider::NotAbsolute,
            };
        };
        self.decide_at(op, &mut Sight::new(self, &q))
    }

    /// [`Plan::decide`], then the socket broker's allowlist for a connect the other layers
    /// allow.
    pub(super) fn decide_at<'p>(&'p self, op: Op, sight: &mut Sight<'p, '_>) -> PlanDecision {
        let d = self.decide_layers(op, sight);
        match &self.socket_broker {
            Some(b)
                if op == Op::ConnectUnix
                    && d.allowed()
                    && !b.allowed.iter().any(|a| a == sight.q) =>
            {
                PlanDecision {
                    verdict: Verdict::Deny,
                    by: Decider::SocketBroker,
                }
            }
            _ => d,
        }
    }

    fn decide_layers<'p>(&'p self, op: Op, sight: &mut Sight<'p, '_>) -> PlanDecision {
        let deny = |by| PlanDecision {
            verdict: Verdict::Deny,
            by,
        };
        let allow = |by| PlanDecision {
            verdict: Verdict::Allow,
            by,
        };
        let q = sight.q;
        let moves = matches!(op, Op::Create | Op::Delete | Op::Rename);
        if moves && q == Path::new("/") {
            return deny(Decider::Root);
        }
        let (ok, step) = match sight.masked.pin {
            // Only moving it away: creating it fails anyway (it exists), and what lies
            // beneath is the same tree.
            Some(i) if matches!(op, Op::Delete | Op::Rename) => {
                (false, Some((i, MountEffect::MountPoint)))
            }
            _ => mask_verdict(sight.masked, op, q),
        };
        if !ok {
            let (index, effect) = step.expect("a denying mask names its step");
            return deny(Decider::Mount {
                index,
                path: self.mounts[index].path().to_path_buf(),
                effect,
            });
        }
        let ll = &self.landlock;
        if ll.abi == 0 {
            return allow(Decider::Unconfined);
        }
        let (at, place) = sight.place(self, moves);
        let first = |rights: &[FsRight]| rights.iter().copied().find(|r| place.has(*r));
        let found = match op {
            Op::Read => first(&[FsRight::ReadFile]),
            Op::List => first(&[FsRight::ReadDir]),
            // Below ABI 3 truncate(2) is not restricted: it changes content without write-file.
            Op::Write => first(&[FsRight::WriteFile, FsRight::Truncate]),
            Op::Exec => first(&[FsRight::Execute]),
            Op::ConnectUnix => first(&[FsRight::ResolveUnix]),
            Op::Create => first(&FsRight::MAKE),
            Op::Delete => first(&FsRight::REMOVE),
            Op::Rename => first(&FsRight::REMOVE)
                .filter(|_| first(&FsRight::MAKE).is_some() || first(&[FsRight::Refer]).is_some()),
        };
        if let Some(right) = found {
            return allow(place.decider(right, ll.abi));
        }
        let needed: &[FsRight] = match op {
            Op::Read => &[FsRight::ReadFile],
            Op::List => &[FsRight::ReadDir],
            Op::Write => &[FsRight::WriteFile],
            Op::Exec => &[FsRight::Execute],
            Op::ConnectUnix => &[FsRight::ResolveUnix],
            Op::Create => &FsRight::MAKE,
            Op::Delete => &FsRight::REMOVE,
            Op::Rename => &FsRight::MOVE,
        };
        let mut rights: Vec<FsRight> = needed
            .iter()
            .copied()
            .filter(|r| ll.handled.contains(r))
            .collect();
        rights.sort();
        deny(Decider::NoRule {
            at: at.to_path_buf(),
            rights,
        })
    }

    /// The Landlock rights at `at`: those no rule is needed for (the ruleset does not handle
    /// them), and those a rule on `at` or an ancestor grants, with the first such rule.
    fn rights_at(&self, at: &Path) -> Place<'_> {
        let ll = &self.landlock;
        let mut place = Place {
            unhandled: Rights::of(&FsRight::ALL).minus(Rights::of(&ll.handled)),
            granted: Rights::NONE,
            by: [None; FsRight::ALL.len()],
        };
        for (index, rule) in ll.rules.iter().enumerate() {
            if !within(at, &rule.path) {
                continue;
            }
            for right in &rule.rights {
                let slot = &mut place.by[Rights::index(*right)];
                if slot.is_none() {
                    *slot = Some((index, rule.path.as_path()));
                }
            }
            place.granted = place.granted.union(Rights::of(&rule.rights));
        }
        place
    }
}

/// What bears on one (normal) path in a plan: the mount step that governs it, and Landlock's
/// view of it and of its folder, each looked up when first needed.
pub(super) struct Sight<'p, 'q> {
    q: &'q Path,
    masked: Masked<'p>,
    here: Option<Place<'p>>,
    parent: Option<Place<'p>>,
}

impl<'p, 'q> Sight<'p, 'q> {
    pub(super) fn new(plan: &'p Plan, q: &'q Path) -> Sight<'p, 'q> {
        Sight::with(Masked::at(&plan.mounts, q), q)
    }

    /// A sight whose masks were looked up already ([`Masked::indexed`]).
    pub(super) fn with(masked: Masked<'p>, q: &'q Path) -> Sight<'p, 'q> {
        Sight {
            q,
            masked,
            here: None,
            parent: None,
        }
    }

    /// Where Landlock decides (the path, or its folder for an operation that moves an entry)
    /// and its rights there.
    fn place(&mut self, plan: &'p Plan, moves: bool) -> (&'q Path, &Place<'p>) {
        if moves {
            let at = self.q.parent().unwrap_or(Path::new("/"));
            (at, self.parent.get_or_insert_with(|| plan.rights_at(at)))
        } else {
            (
                self.q,
                self.here.get_or_insert_with(|| plan.rights_at(self.q)),
            )
        }
    }
}

/// Landlock's view of one path: see [`Plan::rights_at`].
struct Place<'p> {
    unhandled: Rights,
    granted: Rights,
    by: [Option<(usize, &'p Path)>; FsRight::ALL.len()],
}

impl Place<'_> {
    fn has(&self, right: FsRight) -> bool {
        self.unhandled.has(right) || self.granted.has(right)
    }

    fn decider(&self, right: FsRight, abi: u32) -> Decider {
        match self.by[Rights::index(right)] {
            Some((index, path)) if !self.unhandled.has(right) => Decider::Rule {
                index,
                path: path.to_path_buf(),
                right,
            },
            _ => Decider::Unhandled { right, abi },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The index answers as the plain scans, for clean and unclean paths alike, also where
    /// steps repeat a path or are not spelled cleanly (those are compared one by one).
    #[test]
    fn indexed_masks_agree_with_the_scans() {
        let p = |s: &str| PathBuf::from(s);
        let guard = |path: &str| MountStep::Guard {
            path: p(path),
            existed: true,
            is_dir: true,
            content: None,
            irreplaceable: false,
            other_names: 0,
        };
        let pin = |path: &str| MountStep::Pin {
            path: p(path),
            of: p("/a/b/c"),
        };
        let mounts = vec![
            pin("/a"),
            MountStep::Cover {
                path: p("/a/b"),
                why: String::new(),
                existed: true,
                is_dir: true,
            },
            MountStep::BindBack {
                path: p("/a/b/c"),
                access: Access::Ro,
                is_dir: true,
            },
            pin("/a/b/c"),
            pin("/a/b/c"),
            pin("/x//y"),
            MountStep::Refuse {
                path: p("/a/b/c/r"),
                existed: true,
                is_dir: true,
            },
            guard("/h/g"),
            guard("/h/g/deeper"),
            guard("/h/g"),
            guard("/h/./u/"),
            guard("/a/b/c"),
        ];
        let index = MountsIndex::new(&mounts);
        let key = |m: Masked<'_>| (m.governing.map(|g| g.0), m.guard.map(|g| g.0), m.pin);
        let names = [
            "a", "b", "c", "r", "h", "g", "u", "x", "y", "deeper", ".", "",
        ];
        let mut paths = vec![p("/")];
        for depth in 0..3 {
            let next: Vec<PathBuf> = paths
                .iter()
                .filter(|q| q.components().count() == depth + 1)
                .flat_map(|q| names.iter().map(move |n| q.join(n)))
                .collect();
            paths.extend(next);
        }
        for extra in [
            "/h/u",
            "/h/u/v",
            "/x/y",
            "/x//y",
            "/a/b/c/r/s",
            "/h/g/deeper/z",
        ] {
            paths.push(p(extra));
        }
        for q in &paths {
            assert_eq!(
                key(Masked::indexed(&mounts, &index, q)),
                key(Masked::at(&mounts, q)),
                "{q:?}"
            );
        }
    }
}
