//! The builder: the masks (if any) first, then, for every folder on the way to a rule path,
//! the Landlock rights that every path beneath it may have.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::error::PlanError;
use super::fs::{EntryKind, FsView};
use super::gaps::{Unchecked, metadata_exposure};
use super::model::{Masked, MountsIndex, governing, mask_verdict};
use super::points::{Children, closes, policy_points};
use super::rights::{Ops, Rights};
use crate::autorun::Missing;
use crate::linux::facts::Facts;
use crate::linux::fs_right::FsRight;
use crate::linux::plan::{
    Absent, LandlockPlan, LandlockRule, MountStep, NetworkPlan, Plan, RELAY_PORT, Relay, STAGING,
    Shape, SocketBroker,
};
use crate::paths::{clean_ancestors, is_clean, same, strictly_within, within};
use crate::policy::{Access, Base, Op, Policy, Reason};

/// The origin file name the loader gives ways-out entries (`load.rs`).
pub const WAYS_OUT_ORIGIN: &str = "(ways out)";

/// The highest Landlock ABI whose filesystem rights this planner knows (ABI 9 adds
/// `resolve-unix`); a newer kernel is planned for as this one.
pub const MAX_KNOWN_ABI: u32 = 9;

pub(super) struct Planner<'a> {
    policy: &'a Policy,
    /// The policy's rules indexed for the many paths the planner asks about.
    lookup: crate::policy::Lookup<'a>,
    /// `mounts` indexed, once they are all planned (see `build`).
    steps: MountsIndex,
    facts: &'a Facts,
    shape: Shape,
    fs: &'a dyn FsView,
    /// Every path a policy rule is attached to.
    points: BTreeSet<PathBuf>,
    mounts: Vec<MountStep>,
    absent: BTreeMap<PathBuf, Absent>,
    /// Absent paths that are not Landlock's job: ways-out entries (see `absent-ways-out`)
    /// and paths this process cannot create (see `absent-out-of-reach`).
    dont_care: Vec<PathBuf>,
    handled: Rights,
    /// The children of each folder on the way to a point (see [`Children`]).
    children: Children,
    /// What Landlock must allow at each path asked about (see [`Planner::targets`]).
    targets: HashMap<OsString, Ops>,
    /// What the filesystem said is at each path asked about (see [`Planner::kind`]), by the
    /// path's bytes.
    kinds: std::cell::RefCell<HashMap<OsString, Option<EntryKind>>>,
    memo: HashMap<OsString, (Rights, Rights, Rights)>,
    rules: Vec<LandlockRule>,
    /// Indices of rules put on an entry beside a rule path (hole punching).
    sibling_rules: BTreeSet<usize>,
    narrowed: Vec<PathBuf>,
    /// Staging folders planned (see `plan_staging`).
    staging: Vec<PathBuf>,
}

impl<'a> Planner<'a> {
    pub(super) fn new(
        policy: &'a Policy,
        facts: &'a Facts,
        shape: Shape,
        fs: &'a dyn FsView,
    ) -> Self {
        let abi = facts.landlock_abi.min(MAX_KNOWN_ABI);
        let points = policy_points(policy);
        Planner {
            policy,
            lookup: policy.lookup(),
            steps: MountsIndex::default(),
            facts,
            shape,
            fs,
            children: Children::of(&points),
            points,
            mounts: Vec::new(),
            absent: BTreeMap::new(),
            dont_care: Vec::new(),
            handled: if abi == 0 {
                Rights::NONE
            } else {
                Rights::of(&FsRight::known_at(abi))
            },
            targets: HashMap::new(),
            kinds: Default::default(),
            memo: HashMap::new(),
            rules: Vec::new(),
            sibling_rules: BTreeSet::new(),
            narrowed: Vec::new(),
            staging: Vec::new(),
        }
    }

    pub(super) fn build(mut self) -> Result<Unchecked<'a>, PlanError> {
        if self.shape == Shape::Masks {
            self.plan_mounts()?;
            self.plan_guards()?;
            self.plan_pins()?;
        } else {
            // Landlock alone could keep a guarded file read-only only by narrowing every
            // folder above it (no new files in the home): it is left to no layer, and the
            // breaking gap `autorun-landlock-only` refuses the plan (docs/linux.md).
            let guarded: Vec<PathBuf> =
                self.policy.guarded.iter().map(|g| g.path.clone()).collect();
            self.dont_care.extend(guarded);
        }
        self.note_remaining_absent()?;
        self.steps = MountsIndex::new(&self.mounts);
        let abi = self.facts.landlock_abi.min(MAX_KNOWN_ABI);
        if abi > 0 {
            let root = PathBuf::from("/");
            self.punch(&root, Rights::NONE, EntryKind::Dir)?;
        }
        let plan = Plan {
            shape: self.shape,
            uid: self.facts.uid,
            gid: self.facts.gid,
            namespaces: self.shape == Shape::Masks,
            nested_user_namespaces: self.shape == Shape::Masks
                && self.policy.linux.nested_user_namespaces,
            mounts: std::mem::take(&mut self.mounts),
            landlock: LandlockPlan {
                abi,
                handled: self.handled.to_vec(),
                rules: std::mem::take(&mut self.rules),
                scope_abstract_unix: abi >= 6,
                scope_signal: abi >= 6,
                narrowed: std::mem::take(&mut self.narrowed),
            },
            absent: self.absent.values().cloned().collect(),
            // On every kernel: Landlock's resolve-unix (ABI 9) follows folder grants, so an
            // open home would grant every socket in it (docs/linux.md, "Unix sockets").
            socket_broker: Some(SocketBroker {
                allowed: self.policy.unix_sockets.clone(),
            }),
            gaps: Vec::new(),
            mask_registry: self
                .policy
                .linux
                .mask_registry
                .clone()
                .filter(|_| self.shape == Shape::Masks),
            staging: std::mem::take(&mut self.staging),
            network: network_plan(self.policy),
        };
        let exposure = metadata_exposure(&plan, self.policy, &|p| self.kind(p))?;
        Ok(Unchecked {
            plan,
            policy: self.policy,
            sibling_rules: std::mem::take(&mut self.sibling_rules),
            exposure,
        })
    }

    /// What is at `path`, asked of the filesystem once per plan: the planner looks at the
    /// same few paths from several steps, and one answer per path keeps the plan consistent.
    fn kind(&self, path: &Path) -> Result<Option<EntryKind>, PlanError> {
        if let Some(kind) = self.kinds.borrow().get(path.as_os_str()) {
            return Ok(*kind);
        }
        let kind = self.fs.kind(path).map_err(|source| PlanError::Fs {
            path: path.into(),
            source,
        })?;
        self.kinds
            .borrow_mut()
            .insert(path.as_os_str().to_owned(), kind);
        Ok(kind)
    }

    /// How many other names (hard links) the guarded file at `path` has: a mount keeps a
    /// name read-only, and the sandbox could write the file through the others. Programs
    /// (executable files) are left out: a build's output (cargo links `target/*/deps/NAME-HASH`
    /// to `target/*/NAME`) and every file pnpm installs (links into its store) have other
    /// names by design (docs/linux.md, "The autorun guard").
    fn other_names(&self, path: &Path, kind: EntryKind) -> Result<u64, PlanError> {
        if kind != EntryKind::File {
            return Ok(0);
        }
        let (links, program) = self.fs.links(path).map_err(|source| PlanError::Fs {
            path: path.into(),
            source,
        })?;
        Ok(if program { 0 } else { links.saturating_sub(1) })
    }

    fn not_symlink(&self, path: &Path, what: &str) -> Result<Option<EntryKind>, PlanError> {
        match self.kind(path)? {
            Some(EntryKind::Symlink) => Err(PlanError::Symlink {
                path: path.into(),
                what: what.into(),
            }),
            k => Ok(k),
        }
    }

    /// Whether a missing `path` could be created by this process: its deepest existing
    /// ancestor is a writable folder.
    fn creatable(&self, path: &Path) -> Result<bool, PlanError> {
        for a in path.ancestors().skip(1) {
            match self.kind(a)? {
                Some(EntryKind::Dir) => return Ok(self.fs.writable(a)),
                Some(_) => return Ok(false),
                None => continue,
            }
        }
        Ok(false)
    }

    fn is_ways_out(&self, path: &Path) -> bool {
        self.policy
            .protected
            .iter()
            .any(|r| same(&r.path, path) && r.origin.file == WAYS_OUT_ORIGIN)
    }

    /// Records a rule path missing at plan time, and whether Landlock must still keep it
    /// from being created.
    fn note_absent(&mut self, path: &Path) -> Result<(), PlanError> {
        if self.absent.contains_key(path) {
            return Ok(());
        }
        let ways_out = self.is_ways_out(path);
        let creatable = self.creatable(path)?;
        if (ways_out || !creatable) && closes(self.policy, path) {
            self.dont_care.push(path.to_path_buf());
        }
        self.absent.insert(
            path.to_path_buf(),
            Absent {
                path: path.to_path_buf(),
                creatable,
                ways_out,
            },
        );
        Ok(())
    }

    /// Every rule path missing now that got no placeholder is absent.
    fn note_remaining_absent(&mut self) -> Result<(), PlanError> {
        for p in self.points.clone() {
            let placeholder = self.mounts.iter().any(|m| same(m.path(), &p));
            if !placeholder && self.kind(&p)?.is_none() {
                self.note_absent(&p)?;
            }
        }
        Ok(())
    }

    /// Covers, then bind-backs shallowest first, then the final masks (refused paths and
    /// launcher folders), so a later mount never hides an earlier one the policy ranks above
    /// it.
    fn plan_mounts(&mut self) -> Result<(), PlanError> {
        let policy = self.policy;
        let by_depth = |a: &PathBuf, b: &PathBuf| {
            (a.components().count(), a).cmp(&(b.components().count(), b))
        };

        // A protected root inside a grant is overridden by the grant (the deepest grant
        // decides before protected), so it is not covered.
        let mut roots: Vec<PathBuf> = policy
            .protected
            .iter()
            .map(|r| r.path.clone())
            .filter(|p| !policy.grants.iter().any(|g| within(p, &g.path)))
            .collect();
        roots.sort_by(by_depth);
        roots.dedup();
        let mut covered: Vec<PathBuf> = Vec::new();
        for root in roots {
            if covered.iter().any(|c| within(&root, c)) {
                continue;
            }
            let why = policy
                .protected
                .iter()
                .find(|r| r.path == root)
                .map(|r| match &r.why {
                    Some(w) => format!("{}: {w}", r.origin),
                    None => r.origin.to_string(),
                })
                .unwrap_or_default();
            match self.not_symlink(&root, "protected root")? {
                Some(kind) => self.mounts.push(MountStep::Cover {
                    path: root.clone(),
                    why,
                    existed: true,
                    is_dir: kind == EntryKind::Dir,
                }),
                None if self.is_ways_out(&root) => {
                    // A placeholder where a daemon later wants its socket or folder would
                    // break the daemon: listed as `absent-ways-out` instead.
                    self.note_absent(&root)?;
                    continue;
                }
                None if self.creatable(&root)? => self.mounts.push(MountStep::Cover {
                    path: root.clone(),
                    why,
                    existed: false,
                    is_dir: true,
                }),
                None => {
                    self.note_absent(&root)?;
                    continue;
                }
            }
            covered.push(root);
        }

        let finals_roots: Vec<PathBuf> = policy
            .refuse
            .iter()
            .map(|r| r.path.clone())
            .chain(self.launcher_folders())
            .collect();
        let mut grants: Vec<&crate::policy::Grant> = policy
            .grants
            .iter()
            .filter(|g| !finals_roots.iter().any(|f| within(&g.path, f)))
            .collect();
        grants.sort_by(|a, b| by_depth(&a.path, &b.path));
        let mut bound: Vec<(PathBuf, Access)> = Vec::new();
        for g in grants {
            if !covered.iter().any(|c| strictly_within(&g.path, c)) {
                // No cover above it: the real tree is there, writable unless an earlier
                // (shallower) grant was bound onto itself read-only. A grant whose access
                // differs from that is bound onto itself: a read-only one stops writes and
                // metadata changes (chmod, utimes: EROFS), which Landlock alone cannot; a
                // read-write one inside it opens its part again.
                let effective = bound
                    .iter()
                    .filter(|(b, _)| strictly_within(&g.path, b))
                    .max_by_key(|(b, _)| b.components().count())
                    .map_or(Access::Rw, |(_, a)| *a);
                if g.access == effective {
                    continue; // Landlock alone decides there
                }
            }
            match self.not_symlink(&g.path, "grant")? {
                Some(kind) => {
                    self.mounts.push(MountStep::BindBack {
                        path: g.path.clone(),
                        access: g.access,
                        is_dir: kind == EntryKind::Dir,
                    });
                    bound.push((g.path.clone(), g.access));
                }
                None => self.note_absent(&g.path)?,
            }
        }

        let launcher_folders: Vec<PathBuf> = self.launcher_folders().collect();
        let mut finals = finals_roots;
        finals.sort_by(by_depth);
        finals.dedup();
        let mut masked: Vec<PathBuf> = Vec::new();
        for path in finals {
            if masked.iter().any(|m| within(&path, m)) {
                continue;
            }
            let is_launcher = launcher_folders.contains(&path);
            match self.not_symlink(
                &path,
                if is_launcher {
                    "launcher folder"
                } else {
                    "refused path"
                },
            )? {
                Some(kind) if is_launcher => self.mounts.push(MountStep::Cover {
                    path: path.clone(),
                    why: "launcher folder: nothing in it may be used".into(),
                    existed: true,
                    is_dir: kind == EntryKind::Dir,
                }),
                Some(kind) => self.mounts.push(MountStep::Refuse {
                    path: path.clone(),
                    existed: true,
                    is_dir: kind == EntryKind::Dir,
                }),
                // The enforcer makes a refused placeholder only inside a bound-back grant (a
                // folder the person already lets the command write to).
                None if !is_launcher
                    && bound.iter().any(|(b, _)| strictly_within(&path, b))
                    && self.creatable(&path)? =>
                {
                    self.mounts.push(MountStep::Refuse {
                        path: path.clone(),
                        existed: false,
                        is_dir: true,
                    })
                }
                None => {
                    self.note_absent(&path)?;
                    continue;
                }
            }
            masked.push(path);
        }
        self.plan_staging()
    }

    /// Guarded paths, shallowest first, after every other step: each bound onto itself
    /// read-only ([`MountStep::Guard`]), with a placeholder where it is missing and its entry
    /// says what stands in for it (`missing`: a folder, or a file whose content means what no
    /// file meant). Not guarded by a mask: paths under a cover or refused path (nothing can be
    /// written there already), paths inside another guard (read-only already), and those
    /// listed by the gap `autorun-unmasked` — missing where no placeholder may stand
    /// (`missing = "none"`) or can be made (this user cannot create it: nobody inside can). A
    /// symlink is guarded as itself (the file it names is a guarded path of its own).
    fn plan_guards(&mut self) -> Result<(), PlanError> {
        let mut guards: Vec<&crate::policy::Guarded> = self.policy.guarded.iter().collect();
        // The key once per guard: a home's hundreds of guards made cloning paths for every
        // comparison the planner's largest cost.
        guards.sort_by_cached_key(|g| (g.path.components().count(), g.path.clone()));
        let mut done = Held::default();
        // The steps before the guards: only these can hide a guarded path.
        let before = self.mounts.len();
        for g in guards {
            let path = &g.path;
            if done.holds(path) {
                continue;
            }
            if let Some((_, MountStep::Cover { .. } | MountStep::Refuse { .. })) =
                governing(&self.mounts[..before], path)
            {
                continue;
            }
            // For a file: what a placeholder of it holds, so that whichever launch ends last
            // knows a placeholder nobody wrote to.
            let placeholder_content = match &g.missing {
                Missing::File { content } => Some(content.clone()),
                _ => Some(String::new()),
            };
            let step = match self.kind(path)? {
                // The link itself, bound onto itself: it cannot be replaced (`EBUSY`).
                Some(EntryKind::Symlink) => Some(MountStep::Guard {
                    path: path.clone(),
                    existed: true,
                    is_dir: false,
                    content: None,
                    irreplaceable: true,
                    other_names: 0,
                }),
                Some(kind) => Some(MountStep::Guard {
                    path: path.clone(),
                    existed: true,
                    is_dir: kind == EntryKind::Dir,
                    content: placeholder_content.filter(|_| kind != EntryKind::Dir),
                    // What stands in when it is gone is what its entry makes when it is
                    // missing at launch, and only of the kind it is now.
                    irreplaceable: !matches!(
                        (&g.missing, kind),
                        (Missing::Folder, EntryKind::Dir) | (Missing::File { .. }, EntryKind::File)
                    ),
                    other_names: self.other_names(path, kind)?,
                }),
                None if !self.creatable(path)? => None,
                None => match &g.missing {
                    Missing::Folder => Some(MountStep::Guard {
                        path: path.clone(),
                        existed: false,
                        is_dir: true,
                        content: None,
                        irreplaceable: false,
                        other_names: 0,
                    }),
                    Missing::File { content } => Some(MountStep::Guard {
                        path: path.clone(),
                        existed: false,
                        is_dir: false,
                        content: Some(content.clone()),
                        irreplaceable: false,
                        other_names: 0,
                    }),
                    Missing::None => None,
                },
            };
            match step {
                Some(step) => {
                    self.mounts.push(step);
                    done.add(path);
                }
                // Left to no layer (see `autorun-unmasked`): Landlock could refuse it only by
                // narrowing the folders above it.
                None => self.dont_care.push(path.clone()),
            }
        }
        Ok(())
    }

    /// With a mask registry: a refused staging folder ([`STAGING`]) beside every refused
    /// path, where the product stages a refused path's new content, masked by the sandbox's
    /// keeper before it is moved into place (see `enforce/keeper.rs`).
    fn plan_staging(&mut self) -> Result<(), PlanError> {
        if self.policy.linux.mask_registry.is_none() {
            return Ok(());
        }
        let mut folders: Vec<PathBuf> = self
            .mounts
            .iter()
            .filter_map(|m| match m {
                MountStep::Refuse { path, .. } => path.parent().map(|p| p.join(STAGING)),
                _ => None,
            })
            .collect();
        folders.sort();
        folders.dedup();
        for staging in folders {
            let existed = match self.not_symlink(&staging, "staging folder")? {
                Some(EntryKind::Dir) => true,
                Some(_) => continue,
                None if self.creatable(&staging)? => false,
                None => continue,
            };
            self.mounts.push(MountStep::Refuse {
                path: staging.clone(),
                existed,
                is_dir: true,
            });
            self.staging.push(staging);
        }
        Ok(())
    }

    /// Pins every folder that holds a protected root, a refused path, a launcher folder or a
    /// mask, up to but not including `/` (which the caller may own: root can rename `/home`):
    /// moving one away and making a look-alike at its path would move the protection with it
    /// (masks follow the mount point, Landlock rules the inode), and the next launch would
    /// protect the look-alike. Not pinned: folders under a cover or a refused path (the
    /// read-only tmpfs refuses any rename already), folders that carry a mask of their own,
    /// and folders missing now that no placeholder will make.
    ///
    /// Each pin goes right after the last step on a folder above it (so no bind-back put on
    /// later hides it: the enforcer captures bind-back sources before any pin) and before every
    /// step beneath it (a pin is a clone of the tree at its path, so a mask under it would be
    /// copied, not covered).
    fn plan_pins(&mut self) -> Result<(), PlanError> {
        let policy = self.policy;
        // A repository's git folder is guarded as a whole (a mount: it cannot be moved); the
        // folders above it are not pinned: moving the repository moves the guard along (see
        // [`crate::policy::Guarded::repository`]).
        let in_repositories: HashSet<&Path> = policy
            .guarded
            .iter()
            .filter(|g| g.repository)
            .map(|g| g.path.as_path())
            .collect();
        let repository_guard = |m: &MountStep| match m {
            MountStep::Guard { path, .. } => in_repositories.contains(path.as_path()),
            _ => false,
        };
        let held: BTreeSet<PathBuf> = policy
            .protected
            .iter()
            .map(|r| r.path.clone())
            .filter(|p| !policy.grants.iter().any(|g| within(p, &g.path)))
            .chain(policy.refuse.iter().map(|r| r.path.clone()))
            .chain(self.launcher_folders())
            .chain(
                self.mounts
                    .iter()
                    .filter(|m| !matches!(m, MountStep::BindBack { .. }))
                    .filter(|m| !repository_guard(m))
                    .map(|m| m.path().to_path_buf()),
            )
            .collect();
        // Folders a placeholder will make (the enforcer creates them before any mount).
        let made: Vec<&Path> = self
            .mounts
            .iter()
            .filter_map(|m| match m {
                MountStep::Cover {
                    path,
                    existed: false,
                    ..
                }
                | MountStep::Refuse {
                    path,
                    existed: false,
                    ..
                }
                | MountStep::Guard {
                    path,
                    existed: false,
                    ..
                } => Some(path.as_path()),
                _ => None,
            })
            .collect();
        let mut pins: BTreeMap<PathBuf, PathBuf> = BTreeMap::new();
        // Held paths share most of their folders (the home, ~/.config): each is decided once.
        let mut seen: HashSet<&Path> = HashSet::new();
        let index = MountsIndex::new(&self.mounts);
        for of in &held {
            for a in of.ancestors().skip(1) {
                if a == Path::new("/") || !seen.insert(a) {
                    continue;
                }
                // Under a guard, a folder is read-only already: it cannot be moved.
                let at = Masked::indexed(&self.mounts, &index, a);
                let masked = match at.governing {
                    Some((_, MountStep::BindBack { path, .. })) => path == a,
                    Some(_) => true,
                    None => false,
                } || at.guard.is_some_and(|(_, g)| g.path() != a);
                if masked {
                    continue;
                }
                let exists = match self.kind(a)? {
                    Some(EntryKind::Dir) => true,
                    Some(_) => false,
                    None => made.iter().any(|m| strictly_within(m, a)),
                };
                if exists {
                    pins.insert(a.to_path_buf(), of.clone());
                }
            }
        }
        // (position among the other steps, depth, path): shallower pins first at one position.
        let mut placed: Vec<(usize, usize, PathBuf, PathBuf)> = pins
            .into_iter()
            .map(|(path, of)| {
                let after = self
                    .mounts
                    .iter()
                    .rposition(|m| strictly_within(&path, m.path()))
                    .map_or(0, |i| i + 1);
                (after, path.components().count(), path, of)
            })
            .collect();
        placed.sort();
        let steps = std::mem::take(&mut self.mounts);
        let mut pins = placed.into_iter().peekable();
        for (i, step) in steps.into_iter().enumerate() {
            while let Some((_, _, path, of)) = pins.next_if(|p| p.0 == i) {
                self.mounts.push(MountStep::Pin { path, of });
            }
            self.mounts.push(step);
        }
        self.mounts
            .extend(pins.map(|(_, _, path, of)| MountStep::Pin { path, of }));
        Ok(())
    }

    fn launcher_folders(&self) -> impl Iterator<Item = PathBuf> + '_ {
        self.policy
            .launchers
            .read
            .iter()
            .filter(|_| self.policy.launchers.block)
            .map(|l| l.path.clone())
    }

    // ---- Landlock: what every path beneath a folder may have ----------------------------

    /// The operations Landlock must allow at `q`: those the policy allows, or that another
    /// layer already stops (a mask), or that are outside Landlock's job (an absent ways-out
    /// entry, an absent path this process cannot create; moving an ancestor of a rule path,
    /// which masks and Landlock follow by inode). Asked for a few paths many times over, so
    /// remembered.
    fn targets(&mut self, q: &Path) -> Ops {
        if let Some(t) = self.targets.get(q.as_os_str()) {
            return *t;
        }
        let t = self.compute_targets(q);
        self.targets.insert(q.as_os_str().to_owned(), t);
        t
    }

    fn compute_targets(&self, q: &Path) -> Ops {
        if self.dont_care.iter().any(|w| within(q, w)) {
            return Ops::ALL;
        }
        let mask = match self.shape {
            Shape::Masks => Masked::indexed(&self.mounts, &self.steps, q),
            Shape::LandlockOnly => Masked::none(),
        };
        let pin = mask.pin;
        let at = self.lookup.at(q);
        let mut out = Ops::NONE;
        for op in Op::ALL {
            let moves_away = matches!(op, Op::Delete | Op::Rename);
            if (moves_away && pin.is_some()) || (mask.any() && !mask_verdict(mask, op, q).0) {
                out = out.with(op);
                continue;
            }
            let d = at.decide(op);
            let ok = match d.reason {
                Reason::Ancestor { .. } => at.decide(Op::Write).allowed(),
                _ => d.allowed(),
            };
            if ok {
                out = out.with(op);
            }
        }
        out
    }

    /// Rights `q` needs as an object (read, list, write, exec, connect).
    fn file_ok(&mut self, q: &Path) -> Rights {
        let t = self.targets(q);
        let mut r = Rights::NONE;
        if t.has(Op::Read) {
            r = r.with(FsRight::ReadFile);
        }
        if t.has(Op::List) {
            r = r.with(FsRight::ReadDir);
        }
        if t.has(Op::Write) {
            r = r
                .with(FsRight::WriteFile)
                .with(FsRight::Truncate)
                .with(FsRight::IoctlDev);
        }
        if t.has(Op::Exec) {
            r = r.with(FsRight::Execute);
        }
        if t.has(Op::ConnectUnix) {
            r = r.with(FsRight::ResolveUnix);
        }
        r.inter(self.handled)
    }

    /// Rights the folder holding `q` needs for `q` as an entry (create, delete, rename).
    fn entry_ok(&mut self, q: &Path) -> Rights {
        let t = self.targets(q);
        let mut r = Rights::NONE;
        let create = t.has(Op::Create);
        if create {
            r = r.union(Rights::of(&FsRight::MAKE));
        }
        if t.has(Op::Delete) {
            r = r.union(Rights::of(&FsRight::REMOVE));
        }
        if create && t.has(Op::Rename) {
            r = r.with(FsRight::Refer);
        }
        r.inter(self.handled)
    }

    /// (A, B, Bs) for the subtree of `n`: A = object rights every path in it allows, B =
    /// entry rights every path in it (`n` included) allows, Bs = the same strictly beneath.
    fn sums(&mut self, n: &Path) -> (Rights, Rights, Rights) {
        if let Some(s) = self.memo.get(n.as_os_str()) {
            return *s;
        }
        let generic = self.children.fresh_child(n);
        let mut a = self.file_ok(n).inter(self.file_ok(&generic));
        let mut bs = self.entry_ok(&generic);
        for c in self.children.of_folder(n).clone() {
            let (ac, bc, _) = self.sums(&c);
            a = a.inter(ac);
            bs = bs.inter(bc);
        }
        let b = self.entry_ok(n).inter(bs);
        self.memo.insert(n.as_os_str().to_owned(), (a, b, bs));
        (a, b, bs)
    }

    fn punch(&mut self, n: &Path, inherited: Rights, kind: EntryKind) -> Result<(), PlanError> {
        let (a, _, bs) = self.sums(n);
        let is_dir = kind == EntryKind::Dir;
        let mut sound = a.union(bs);
        if !is_dir {
            sound = sound.inter(Rights::files());
        }
        let add = sound.minus(inherited);
        if !add.is_empty() {
            let why = self.rule_why(n);
            self.rules.push(LandlockRule {
                path: n.to_path_buf(),
                rights: add.to_vec(),
                is_dir,
                why,
            });
        }
        let eff = inherited.union(sound);
        let kids = self.children.of_folder(n).clone();
        if kids.is_empty() || !is_dir {
            return Ok(());
        }
        let generic = self.children.fresh_child(n);
        let need = self
            .file_ok(&generic)
            .union(self.entry_ok(&generic))
            .minus(eff);
        if !need.is_empty() {
            self.narrowed.push(n.to_path_buf());
            for (child, ck) in self.visible_list(n)? {
                if kids.contains(&child) || ck == EntryKind::Symlink {
                    continue;
                }
                let r = if ck == EntryKind::Dir {
                    need
                } else {
                    need.inter(Rights::files())
                };
                if !r.is_empty() {
                    self.sibling_rules.insert(self.rules.len());
                    self.rules.push(LandlockRule {
                        path: child,
                        rights: r.to_vec(),
                        is_dir: ck == EntryKind::Dir,
                        why: format!(
                            "hole punched in {}: an entry beside a rule path keeps its rights",
                            n.display()
                        ),
                    });
                }
            }
        }
        for c in kids {
            match self.visible_kind(&c)? {
                Some(EntryKind::Symlink) | None => {}
                Some(ck) => self.punch(&c, eff, ck)?,
            }
        }
        Ok(())
    }

    fn rule_why(&self, n: &Path) -> String {
        let p = self.policy;
        if let Some(g) = p.grants.iter().find(|g| g.path == n) {
            return format!("grant ({:?}) {}", g.access, g.origin);
        }
        if p.base == Base::Closed
            && let Some(r) = p
                .closed
                .write
                .iter()
                .chain(&p.closed.read)
                .find(|r| r.path == n)
        {
            return format!("closed base folder {}", r.origin);
        }
        if n == Path::new("/") {
            return match p.base {
                Base::Open => "base open: what every path allows".into(),
                Base::Closed => "base closed: what every path allows".into(),
            };
        }
        "what every path beneath this rule path allows".into()
    }

    /// What a listing of `dir` shows once the masks are on.
    fn visible_list(&self, dir: &Path) -> Result<Vec<(PathBuf, EntryKind)>, PlanError> {
        if self.shape == Shape::Masks
            && let Some((_, step)) = governing(&self.mounts, dir)
            && !matches!(step, MountStep::BindBack { .. })
        {
            // Inside a cover only the way to bind-backs exists; those are rule paths.
            return Ok(Vec::new());
        }
        match self.fs.list(dir) {
            Ok(list) => Ok(list),
            // Unlistable: its entries get no rule of their own (stricter; `late-entries`).
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Ok(Vec::new()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(source) => Err(PlanError::Fs {
                path: dir.into(),
                source,
            }),
        }
    }

    /// What is at `path` once the masks are on.
    fn visible_kind(&self, path: &Path) -> Result<Option<EntryKind>, PlanError> {
        if self.shape == Shape::Masks
            && let Some((_, step)) = governing(&self.mounts, path)
        {
            match step {
                MountStep::BindBack { .. } | MountStep::Pin { .. } | MountStep::Guard { .. } => {}
                MountStep::Cover {
                    path: root, is_dir, ..
                }
                | MountStep::Refuse {
                    path: root, is_dir, ..
                } => {
                    if path == root {
                        return Ok(Some(if *is_dir {
                            EntryKind::Dir
                        } else {
                            EntryKind::File
                        }));
                    }
                    let skeleton = matches!(step, MountStep::Cover { .. })
                        && self.mounts.iter().any(|m| {
                            matches!(m, MountStep::BindBack { .. })
                                && strictly_within(m.path(), path)
                        });
                    return Ok(skeleton.then_some(EntryKind::Dir));
                }
            }
        }
        self.kind(path)
    }
}

/// The command's network from the policy's `[network]`: nothing to do for `open` (or no
/// section); a network of its own otherwise, relayed to the proxy in `public` and `allowlist`.
fn network_plan(policy: &Policy) -> Option<NetworkPlan> {
    use crate::network::NetworkMode;
    let rules = policy.network.as_ref()?;
    let relay = match rules.mode {
        NetworkMode::Open => return None,
        NetworkMode::None => None,
        NetworkMode::Public | NetworkMode::Allowlist => policy
            .network_proxy
            .as_ref()
            .and_then(|p| p.socket())
            .map(|proxy| Relay {
                proxy: proxy.clone(),
                port: RELAY_PORT,
                loopback: rules.loopback.clone(),
            }),
    };
    Some(NetworkPlan {
        mode: rules.mode.as_str().into(),
        relay,
    })
}

/// Paths already guarded, for asking whether one holds a path ([`within`]): clean ones by the
/// bytes of the path's ancestors, any other one by comparing.
#[derive(Default)]
struct Held {
    clean: HashSet<OsString>,
    unclean: Vec<PathBuf>,
}

impl Held {
    fn add(&mut self, path: &Path) {
        match is_clean(path) {
            true => {
                self.clean.insert(path.as_os_str().to_owned());
            }
            false => self.unclean.push(path.to_path_buf()),
        }
    }

    fn holds(&self, path: &Path) -> bool {
        let by_bytes = match is_clean(path) {
            true => clean_ancestors(path).any(|a| self.clean.contains(OsStr::from_bytes(a))),
            false => self.clean.iter().any(|d| within(path, Path::new(d))),
        };
        by_bytes || self.unclean.iter().any(|d| within(path, d))
    }
}
