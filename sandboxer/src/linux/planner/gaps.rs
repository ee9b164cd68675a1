//! Gap analysis: where the plan's model ([`Plan::decide`]) and the policy's
//! ([`Policy::decide`]) differ, and what the plan leaves open beyond paths.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::PlanError;
use super::fs::EntryKind;
use super::model::{Decider, Masked, MountEffect, MountsIndex, PlanDecision, Sight, governing};
use super::points::{Children, closes, policy_points};
use crate::linux::fs_right::FsRight;
use crate::linux::plan::{Gap, MountStep, Plan};
use crate::paths::{normalize, same, strictly_within, within};
use crate::policy::{Access, Base, Decision, Op, Policy, Reason};

/// A plan whose gaps are not computed yet: see [`super::prepare_with`]. Everything the gaps depend
/// on was read from the filesystem when the plan was made, so computing them later reads
/// nothing (and sees nothing the launch changes meanwhile, such as placeholders).
pub struct Unchecked<'a> {
    pub(super) plan: Plan,
    pub(super) policy: &'a Policy,
    pub(super) sibling_rules: BTreeSet<usize>,
    pub(super) exposure: Exposure,
}

impl Unchecked<'_> {
    /// The plan, its `gaps` still empty.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The plan's gaps: its model ([`Plan::decide`]) compared with the policy's on
    /// representative paths, and the gaps no path operation can show.
    pub fn gaps(&self) -> Vec<Gap> {
        analyze(&self.plan, self.policy, &self.sibling_rules, &self.exposure)
    }

    /// The plan with its gaps.
    pub fn check(self) -> Result<Plan, PlanError> {
        let gaps = self.gaps();
        Ok(Plan { gaps, ..self.plan })
    }
}

/// A class of difference between [`Plan::decide`] and [`Policy::decide`], or a way out the
/// operation model has no word for. Whether it breaks the policy follows from the kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GapKind {
    // -- the plan allows what the policy denies --
    /// Deleting or renaming a folder that holds a rule path: the policy denies it (its rules
    /// are by path); the kernel allows it, but masks and Landlock rules follow the inode, so
    /// the data stays covered wherever it moves.
    AncestorMove,
    /// Connecting to a pathname Unix socket inside a protected root, refused path or launcher
    /// folder that no mask hides: Landlock below ABI 9 does not restrict connect(2).
    PathnameSockets,
    /// Connecting to a pathname socket inside a read-only grant (below ABI 9).
    ReadOnlyGrantSockets,
    /// Connecting to a pathname socket outside a closed base's folders (below ABI 9).
    ClosedBaseSockets,
    /// Inside a ways-out entry that did not exist at launch: nothing to mask yet.
    AbsentWaysOut,
    /// Inside a protected root or refused path that did not exist at launch and that this
    /// user cannot create: only a more privileged process outside could make it.
    AbsentOutOfReach,
    /// A guarded path no mask makes read-only (masks shape): missing at launch where no
    /// placeholder may stand (`missing = "none"`: any new file changes what happens) or can be
    /// made.
    AutorunUnmasked,
    /// A guarded file with other names (hard links): a mask keeps a path read-only, not the
    /// file, and the sandbox could write it through another name.
    AutorunHardLinks,
    /// Landlock-only: guarded paths are not enforced (Landlock could only by narrowing every
    /// folder above them).
    AutorunLandlockOnly,
    /// Anything else the plan allows and the policy denies.
    Unenforced,
    // -- the plan is stricter than the policy --
    /// A mount point (or `/`) cannot be created, deleted or renamed.
    FixedEntries,
    /// A folder that holds a rule path cannot be listed (Landlock only).
    AncestorNoList,
    /// Entries directly in such a folder cannot be created, deleted or renamed.
    AncestorEntriesFixed,
    /// Entries that were not there (or not listable) at plan time, directly in such a folder,
    /// get only the folder's narrowed rights.
    LateEntries,
    /// Inside a rule path that did not exist at plan time.
    AbsentAtLaunch,
    /// Listing a file, or making entries beneath one: the kernel refuses it anyway (a rule
    /// on a file carries only file rights).
    NotAFolder,
    /// Connecting to a pathname Unix socket off the allowlist (`unix_sockets`): the socket
    /// broker refuses it wherever the policy would allow it.
    UnixSocketAllowlist,
    /// Any other place where the plan is stricter.
    Narrower,
    // -- not expressible as an operation on a path --
    /// Abstract Unix sockets (X11's `@/tmp/.X11-unix`, abstract D-Bus addresses): need the
    /// ABI 6 scope.
    AbstractUnixSockets,
    /// Signals to the person's other processes: need the ABI 6 scope or a PID namespace.
    Signals,
    /// ptrace and `/proc/PID` of outside processes: need Landlock or a PID namespace.
    Ptrace,
    /// The person's other terminals under `/dev/pts`: only the masks shape gives the sandbox
    /// its own instance.
    OtherTerminals,
    /// stat, chmod, chown, utimes and xattrs are not Landlock rights: of protected data they
    /// stay possible wherever no mask hides it (e.g. chmod 644 of a token file).
    MetadataUnguarded,
    /// The same outside a closed base's folders.
    ClosedBaseMetadata,
    /// Landlock-only: System V IPC objects of the person's other processes (shared memory,
    /// semaphores, message queues) and POSIX message queues: no IPC namespace.
    SysvIpc,
    /// Landlock-only: `/dev/shm` (POSIX shared memory) is the person's: no mount namespace.
    DevShm,
    /// Landlock-only: the user keyring `@u` belongs to the user namespace, and there is no
    /// new one.
    UserKeyring,
    /// Landlock-only, not root: a cgroup delegated to the person stays writable.
    CgroupTree,
    /// Git repositories the launch's scan did not reach (too deep, out of time, a `.git` file):
    /// their hooks and config are not guarded. New repositories made inside are not either.
    AutorunRepositoriesBeyond,
    /// Landlock-only: a `[network]` mode other than `open` cannot hold without a network
    /// namespace (Landlock closes TCP connect and bind by port, not UDP, and cannot tell the
    /// machine's loopback from the outside).
    NetworkNotIsolated,
    /// `public` or `allowlist` without `[network] proxy`: no way out at all, stricter than the
    /// policy.
    NetworkNoProxy,
}

impl GapKind {
    /// The kinds that are not about operations on paths (what the kernel shares beyond the
    /// file system): no path's answer shows them, so `sandboxer explain` names them apart.
    pub const BEYOND_PATHS: [GapKind; 11] = [
        GapKind::AbstractUnixSockets,
        GapKind::Signals,
        GapKind::Ptrace,
        GapKind::OtherTerminals,
        GapKind::SysvIpc,
        GapKind::DevShm,
        GapKind::UserKeyring,
        GapKind::CgroupTree,
        GapKind::AutorunRepositoriesBeyond,
        GapKind::NetworkNotIsolated,
        GapKind::NetworkNoProxy,
    ];

    pub fn id(self) -> &'static str {
        match self {
            GapKind::AncestorMove => "ancestor-move",
            GapKind::PathnameSockets => "pathname-sockets",
            GapKind::ReadOnlyGrantSockets => "read-only-grant-sockets",
            GapKind::ClosedBaseSockets => "closed-base-sockets",
            GapKind::AbsentWaysOut => "absent-ways-out",
            GapKind::AbsentOutOfReach => "absent-out-of-reach",
            GapKind::AutorunUnmasked => "autorun-unmasked",
            GapKind::AutorunHardLinks => "autorun-hard-links",
            GapKind::AutorunLandlockOnly => "autorun-landlock-only",
            GapKind::AutorunRepositoriesBeyond => "autorun-repositories-beyond",
            GapKind::Unenforced => "unenforced",
            GapKind::FixedEntries => "fixed-entries",
            GapKind::AncestorNoList => "ancestor-no-list",
            GapKind::AncestorEntriesFixed => "ancestor-entries-fixed",
            GapKind::LateEntries => "late-entries",
            GapKind::AbsentAtLaunch => "absent-at-launch",
            GapKind::NotAFolder => "not-a-folder",
            GapKind::UnixSocketAllowlist => "unix-socket-allowlist",
            GapKind::Narrower => "narrower",
            GapKind::AbstractUnixSockets => "abstract-unix-sockets",
            GapKind::Signals => "signals",
            GapKind::Ptrace => "ptrace",
            GapKind::OtherTerminals => "other-terminals",
            GapKind::MetadataUnguarded => "metadata-unguarded",
            GapKind::ClosedBaseMetadata => "closed-base-metadata",
            GapKind::SysvIpc => "sysv-ipc",
            GapKind::DevShm => "dev-shm",
            GapKind::UserKeyring => "user-keyring",
            GapKind::CgroupTree => "cgroup-tree",
            GapKind::NetworkNotIsolated => "network-not-isolated",
            GapKind::NetworkNoProxy => "network-no-proxy",
        }
    }

    /// Whether a plan with this gap lets a process reach a protected asset or a way out.
    /// The rule (docs/linux.md, "Gaps"): a stricter plan never breaks; a looser one breaks,
    /// except where the looser operation touches no asset — moving an ancestor (the data
    /// moves along, still covered), connecting to a socket the policy merely does not grant
    /// (a read-only grant, outside a closed base), an absent ways-out entry (no server yet)
    /// or an absent path this user cannot create (nobody inside can make it),
    /// metadata outside a closed base.
    pub fn breaks_policy(self) -> bool {
        matches!(
            self,
            GapKind::PathnameSockets
                | GapKind::Unenforced
                | GapKind::AutorunLandlockOnly
                | GapKind::AutorunHardLinks
                | GapKind::NetworkNotIsolated
                | GapKind::AbstractUnixSockets
                | GapKind::Signals
                | GapKind::Ptrace
                | GapKind::MetadataUnguarded
        )
    }

    fn detail(self, plan: &Plan) -> String {
        let abi = plan.landlock.abi;
        match self {
            GapKind::AncestorMove => "deleting or renaming a folder that holds a rule path is \
                 allowed by the kernel though the policy denies it; masks and Landlock rules \
                 follow the inode, not the path, so what they cover stays covered wherever it \
                 moves"
                .into(),
            GapKind::PathnameSockets => format!(
                "connect(2) to a pathname Unix socket inside a protected root, refused path or \
                 launcher folder is not stopped: no mask hides it and Landlock ABI {abi} has no \
                 resolve-unix (ABI 9); another chat's bridge or a server's socket there is \
                 reachable"
            ),
            GapKind::ReadOnlyGrantSockets => format!(
                "connect(2) to a pathname socket inside a read-only grant is not stopped: a \
                 read-only mount does not stop connect and Landlock ABI {abi} has no \
                 resolve-unix; not counted as breaking, because the folder is granted to the \
                 process and holds none of the product's sockets — grant a folder holding a \
                 live server's socket only if that server may be used"
            ),
            GapKind::ClosedBaseSockets => format!(
                "connect(2) to a pathname socket outside the closed base's folders is not \
                 stopped (Landlock ABI {abi} has no resolve-unix); ways out are masked \
                 separately, so this reaches no asset"
            ),
            GapKind::AbsentWaysOut => "these ways-out entries did not exist at launch, so \
                 nothing masks them; a server started later outside (tmux, a session bus) \
                 creates its socket where this sandbox can reach it. Restart the command after \
                 starting such a server"
                .into(),
            GapKind::AbsentOutOfReach => "these protected or refused paths did not exist at \
                 launch and this user cannot create them (their nearest folder is not \
                 writable): nothing masks them; if a more privileged process creates one later, \
                 its content is not hidden from this sandbox until the next launch"
                .into(),
            GapKind::AutorunHardLinks => format!(
                "these guarded files have other names (hard links): the guard keeps a path \
                 read-only, not the file, so the sandbox could write it through another name, \
                 and a program outside would run what it wrote. The policy asks for the guard, \
                 so this plan is refused. {}",
                crate::policy::HARD_LINKS_FIX
            ),
            GapKind::AutorunUnmasked => "these guarded paths are not read-only in this sandbox: \
                 missing at launch where any new file would change what happens (so no \
                 placeholder stands there, e.g. ~/.xsession, ~/.zcompdump), or missing where \
                 this user cannot create them anyway. Not counted as breaking: the product's \
                 decision for these entries (docs/linux.md, \"The autorun guard\")"
                .into(),
            GapKind::AutorunLandlockOnly => "the autorun guard is not enforced: without a mount \
                 namespace, Landlock could keep these paths read-only only by narrowing every \
                 folder above them (no new files in the home). The policy asks for the guard, \
                 so this plan is refused; `[autorun] guard = false` runs without it"
                .into(),
            GapKind::AutorunRepositoriesBeyond => "git repositories the launch's scan did not \
                 reach keep writable hooks and config (a repository inside another's working \
                 tree, deeper than the scan's depth, past its time or folder budget, or whose \
                 .git is a file naming a git folder elsewhere), and so does a repository made \
                 while the sandbox runs: git runs their hooks and core.fsmonitor for the person \
                 later. Not counted as breaking: the scan's bounds are the product's \
                 (profiles/autorun.toml, [repositories])"
                .into(),
            GapKind::NetworkNotIsolated => format!(
                "the policy's network mode cannot hold without a network namespace (no user \
                 namespaces here): Landlock ABI {abi} {} and cannot tell the machine's loopback \
                 (its local services) from the outside. The policy asks for it, so this plan is \
                 refused; `[network] mode = \"open\"` runs without it",
                if abi >= 4 {
                    "closes TCP connect and bind by port, not UDP,"
                } else {
                    "has no network rights at all"
                }
            ),
            GapKind::NetworkNoProxy => "the policy's network mode goes through an egress proxy, \
                 and it names none ([network] proxy, which the dispatcher sets for its \
                 launches): nothing is reachable at all"
                .into(),
            GapKind::Unenforced => "the plan allows operations the policy denies and no \
                 accepted reason explains it"
                .into(),
            GapKind::FixedEntries => "mount points (bound-back grants, masks), rule paths \
                 whose folder keeps no make/remove rights, and `/` cannot be created, deleted or \
                 renamed, though the policy allows it"
                .into(),
            GapKind::AncestorNoList => "folders that hold a rule path cannot be listed: a \
                 Landlock read-dir right on a folder covers everything beneath it, so granting \
                 it would let protected folders be listed"
                .into(),
            GapKind::AncestorEntriesFixed => "entries directly in folders that hold a rule \
                 path cannot be created, deleted or renamed (the folder's make/remove rights \
                 would reach into the rule path); existing ones keep their other rights"
                .into(),
            GapKind::LateEntries => "entries that were not there when the plan was made (or \
                 could not be listed), directly in a narrowed folder, get only that folder's \
                 rights: new files there cannot be used as the policy allows"
                .into(),
            GapKind::AbsentAtLaunch => "these rule paths did not exist at launch: what lies \
                 beneath them gets the rights of their nearest existing folder, stricter than \
                 the policy"
                .into(),
            GapKind::NotAFolder => "a rule on a file carries only file rights: listing the \
                 file or making entries beneath it is denied, as the kernel would anyway"
                .into(),
            GapKind::UnixSocketAllowlist => "connect(2) to a pathname Unix socket is refused \
                 (EACCES) off the policy's unix_sockets, wherever the rest of the policy would \
                 allow it: the socket broker checks every connect"
                .into(),
            GapKind::Narrower => "the plan is stricter than the policy here (e.g. reading a \
                 narrowed folder as if it were a file, which the kernel refuses anyway)"
                .into(),
            GapKind::AbstractUnixSockets => format!(
                "abstract Unix sockets created outside stay reachable (X11's @/tmp/.X11-unix, \
                 abstract D-Bus addresses): their scope needs Landlock ABI 6, this plan has \
                 ABI {abi}"
            ),
            GapKind::Signals => format!(
                "signals to the person's other processes are not stopped: the signal scope \
                 needs Landlock ABI 6 (this plan has ABI {abi}) and there is no PID namespace"
            ),
            GapKind::Ptrace => "ptrace and /proc/PID of the person's other processes are not \
                 stopped: there is neither Landlock nor a PID namespace"
                .into(),
            GapKind::OtherTerminals => "the person's other terminals (/dev/pts/N, theirs to \
                 open) stay reachable: text and escape sequences can be written to them, and \
                 what is typed there can be read by racing the shell. Without a mount namespace \
                 the sandbox cannot get its own /dev/pts, and refusing /dev/pts to Landlock \
                 would break every pty made inside (terminal tools of the CLIs). Not counted as \
                 breaking: no product data or launcher is reached; a terminal is not a way out \
                 of the ways-out list"
                .into(),
            GapKind::MetadataUnguarded => "stat, chmod, chown, utimes and extended attributes \
                 are not Landlock rights, and no mask hides these protected paths: a process \
                 could chmod a protected file (e.g. make a token readable to other users) or \
                 learn sizes and times"
                .into(),
            GapKind::ClosedBaseMetadata => "stat, chmod, utimes and extended attributes of the \
                 person's files outside the closed base's folders are not stopped (not \
                 Landlock rights)"
                .into(),
            GapKind::SysvIpc => "System V shared memory, semaphores and message queues of the \
                 person's other processes, and POSIX message queues, stay reachable (their \
                 permissions are the only check): without an IPC namespace, which only the \
                 masks shape (or a root caller) gets, they are one set for the whole machine. \
                 Not counted as breaking: no product data or launcher is kept there"
                .into(),
            GapKind::DevShm => "/dev/shm is the person's: POSIX shared memory and semaphores of \
                 their other processes can be opened, and files left there seen. Without a \
                 mount namespace the sandbox cannot get its own tmpfs there, and refusing it to \
                 Landlock would break shm_open inside. Not counted as breaking: no product data \
                 or launcher is kept there"
                .into(),
            GapKind::UserKeyring => "the user keyring (@u, and the user session keyring @us) \
                 is shared with the person's other processes: keys there can be read, replaced \
                 and added. Each user namespace has its own (Linux 5.3 and later), and only the \
                 masks shape makes one; the session keyring is the command's own in both \
                 shapes. Not counted as breaking: the product keeps no key there"
                .into(),
            GapKind::CgroupTree => "a cgroup delegated to the person (systemd's \
                 user@UID.service) stays writable: cgroup.kill and cgroup.freeze reach their \
                 other processes, which the sandbox cannot otherwise signal (ABI 6 scope). \
                 Landlock cannot keep /sys read-only without narrowing / itself; the masks \
                 shape (and a root caller) mounts /sys read-only. Not counted as breaking: no \
                 product data or launcher is reached, only processes stopped"
                .into(),
        }
    }
}

/// The gap that explains why the plan and the policy disagree on `op` at `path`, or `None`
/// when they agree.
pub fn classify(plan: &Plan, policy: &Policy, op: Op, path: &Path) -> Option<GapKind> {
    classify_decided(
        plan,
        policy,
        op,
        path,
        &plan.decide(op, path),
        &policy.decide(op, path),
    )
}

/// [`classify`], given what the plan (`pd`) and the policy (`qd`) decide for `op` at `path`.
fn classify_decided(
    plan: &Plan,
    policy: &Policy,
    op: Op,
    path: &Path,
    pd: &PlanDecision,
    qd: &Decision,
) -> Option<GapKind> {
    if pd.verdict == qd.verdict {
        return None;
    }
    let q = normalize(path)?;
    let in_absent = plan.absent.iter().any(|a| within(&q, &a.path));
    if pd.allowed() {
        // The planner leaves these to no layer at all (see `Planner::target`).
        if let Some(a) = plan.absent.iter().find(|a| {
            within(&q, &a.path) && (a.ways_out || !a.creatable) && closes(policy, &a.path)
        }) {
            return Some(if a.ways_out {
                GapKind::AbsentWaysOut
            } else {
                GapKind::AbsentOutOfReach
            });
        }
        if let Reason::Ancestor { .. } = qd.reason
            && policy.decide(Op::Write, &q).allowed()
        {
            return Some(GapKind::AncestorMove);
        }
        if let Reason::Guarded { .. } = qd.reason {
            if plan.shape == crate::linux::plan::Shape::LandlockOnly {
                return Some(GapKind::AutorunLandlockOnly);
            }
            if super::model::guarding(&plan.mounts, &q).is_none() {
                return Some(GapKind::AutorunUnmasked);
            }
        }
        if op == Op::ConnectUnix
            && matches!(
                pd.by,
                Decider::Unhandled {
                    right: FsRight::ResolveUnix,
                    ..
                }
            )
        {
            return Some(match qd.reason {
                Reason::ReadOnlyGrant { .. } => GapKind::ReadOnlyGrantSockets,
                Reason::BaseClosed | Reason::ClosedBaseFolder { .. } => GapKind::ClosedBaseSockets,
                _ => GapKind::PathnameSockets,
            });
        }
        return Some(GapKind::Unenforced);
    }
    if in_absent {
        return Some(GapKind::AbsentAtLaunch);
    }
    match &pd.by {
        Decider::Root
        | Decider::Mount {
            effect: MountEffect::MountPoint,
            ..
        } => Some(GapKind::FixedEntries),
        Decider::NoRule { at, .. } => {
            let ll = &plan.landlock;
            let narrowed = |p: &Path| ll.narrowed.iter().any(|n| same(n, p));
            let moves = matches!(op, Op::Create | Op::Delete | Op::Rename);
            let parent = q.parent().unwrap_or(Path::new("/"));
            let rule_path = |p: &Path| {
                ll.rules.iter().any(|r| same(&r.path, p))
                    || plan.mounts.iter().any(|m| same(m.path(), p))
                    || narrowed(p)
            };
            if op == Op::List && narrowed(&q) {
                Some(GapKind::AncestorNoList)
            } else if moves && narrowed(parent) {
                Some(GapKind::AncestorEntriesFixed)
            } else if moves && rule_path(&q) {
                Some(GapKind::FixedEntries)
            } else if ll.rules.iter().any(|r| !r.is_dir && within(at, &r.path)) {
                Some(GapKind::NotAFolder)
            } else if late_entry(plan, &q) {
                Some(GapKind::LateEntries)
            } else {
                Some(GapKind::Narrower)
            }
        }
        Decider::SocketBroker => Some(GapKind::UnixSocketAllowlist),
        _ => Some(GapKind::Narrower),
    }
}

/// Whether `q` lies in an entry of a narrowed folder that got no rule of its own: one that
/// was not there (or not listable) when the plan was made.
fn late_entry(plan: &Plan, q: &Path) -> bool {
    let ll = &plan.landlock;
    let Some(n) = ll
        .narrowed
        .iter()
        .filter(|n| strictly_within(q, n))
        .max_by_key(|n| n.components().count())
    else {
        return false;
    };
    let Some(next) = q.strip_prefix(n).ok().and_then(|r| r.components().next()) else {
        return false;
    };
    let entry = n.join(next);
    !ll.rules.iter().any(|r| within(&r.path, &entry))
        && !ll.narrowed.iter().any(|m| within(m, &entry))
        && !plan.mounts.iter().any(|m| within(m.path(), &entry))
}

/// Compares the plan with the policy on representative paths (every class of path the rules
/// distinguish) and adds the gaps no path operation can show.
pub(super) fn analyze(
    plan: &Plan,
    policy: &Policy,
    sibling_rules: &BTreeSet<usize>,
    exposure: &Exposure,
) -> Vec<Gap> {
    let mut points = policy_points(policy);
    points.extend(
        plan.mounts
            .iter()
            .filter(|m| !matches!(m, MountStep::Guard { .. }))
            .map(|m| m.path().to_path_buf()),
    );
    points.extend(plan.absent.iter().map(|a| a.path.clone()));
    // Siblings with the same rights in the same folder behave alike: one stands for all.
    let mut seen_siblings = BTreeSet::new();
    for (i, r) in plan.landlock.rules.iter().enumerate() {
        if sibling_rules.contains(&i) {
            let key = (r.path.parent().map(Path::to_path_buf), r.rights.clone());
            if !seen_siblings.insert(key) {
                continue;
            }
        }
        points.insert(r.path.clone());
    }
    // Each point and ancestor, and beside each a stand-in child and grandchild: the child for
    // operations on an entry of the folder, the grandchild for operations inside a new entry.
    let children = Children::of(&points);
    // (Sets of the paths' bytes: every path here is normal, and the order they are checked in
    // does not matter, the findings are sorted.)
    let mut reps: HashSet<OsString> = HashSet::new();
    // The stand-in grandchildren, for operations inside a new entry of a folder. At a
    // grandchild `x/g/g` every other operation decides exactly as at the stand-in child `x/g`,
    // in the policy and in the plan (no rule, mask or point is at or beneath either, so the
    // same rules contain both), and is classified the same; the child is checked with every
    // operation and stands for both in the examples. So only the operations that move an
    // entry, decided by what `x/g` allows, are checked there.
    let mut inner: HashSet<OsString> = HashSet::new();
    let add_generic =
        |reps: &mut HashSet<OsString>, inner: &mut HashSet<OsString>, folder: &Path| {
            let child = children.fresh_child(folder);
            inner.insert(children.fresh_child(&child).into_os_string());
            reps.insert(child.into_os_string());
        };
    let add = |reps: &mut HashSet<OsString>, inner: &mut HashSet<OsString>, a: &Path| {
        let seen = inner.contains(a.as_os_str()) | !reps.insert(a.as_os_str().to_owned());
        if !seen {
            add_generic(reps, inner, a);
        }
    };
    for x in &points {
        for a in x.ancestors() {
            add(&mut reps, &mut inner, a);
        }
    }
    add(&mut reps, &mut inner, Path::new("/"));
    for x in &points {
        add_generic(&mut reps, &mut inner, x);
    }

    let mut found: BTreeMap<GapKind, BTreeSet<PathBuf>> = BTreeMap::new();
    let lookup = policy.lookup();
    let steps = MountsIndex::new(&plan.mounts);
    let mut check = |q: &Path, ops: &[Op]| {
        let mut sight = Sight::with(Masked::indexed(&plan.mounts, &steps, q), q);
        let at = lookup.at(q);
        let mut kinds: Vec<GapKind> = Vec::new();
        for &op in ops {
            let pd = plan.decide_at(op, &mut sight);
            let qd = at.decide(op);
            if let Some(kind) = classify_decided(plan, policy, op, q, &pd, &qd)
                && !kinds.contains(&kind)
            {
                kinds.push(kind);
            }
        }
        for kind in kinds {
            found.entry(kind).or_default().insert(q.to_path_buf());
        }
    };
    for q in &reps {
        check(Path::new(q), &Op::ALL);
    }
    for q in inner.difference(&reps) {
        check(Path::new(q), &[Op::Create, Op::Delete, Op::Rename]);
    }

    let abi = plan.landlock.abi;
    if abi < 6 {
        found.entry(GapKind::AbstractUnixSockets).or_default();
        if !plan.namespaces {
            found.entry(GapKind::Signals).or_default();
        }
    }
    if abi == 0 && !plan.namespaces {
        found.entry(GapKind::Ptrace).or_default();
    }
    if !plan.namespaces {
        found.entry(GapKind::OtherTerminals).or_default();
        // Root gets a mount and IPC namespace of its own in this shape, or nothing runs
        // (enforce/kernel.rs): only its user keyring stays shared.
        found.entry(GapKind::UserKeyring).or_default();
        if plan.uid != 0 {
            found.entry(GapKind::SysvIpc).or_default();
            found.entry(GapKind::DevShm).or_default();
            found.entry(GapKind::CgroupTree).or_default();
        }
    }
    if !exposure.assets.is_empty() {
        found.insert(GapKind::MetadataUnguarded, exposure.assets.clone());
    }
    for (kind, paths) in guard_gaps(plan, &steps, policy) {
        found.entry(kind).or_default().extend(paths);
    }
    let linked: std::collections::BTreeSet<PathBuf> = plan
        .mounts
        .iter()
        .filter_map(|m| match m {
            MountStep::Guard {
                path, other_names, ..
            } if *other_names > 0 => Some(path.clone()),
            _ => None,
        })
        .collect();
    if !linked.is_empty() {
        found.insert(GapKind::AutorunHardLinks, linked);
    }
    if policy.autorun.repositories_scanned {
        // Whenever repositories were looked for: one made while the sandbox runs is never
        // found at launch.
        found.entry(GapKind::AutorunRepositoriesBeyond).or_default();
    }
    if exposure.closed_outside {
        found.entry(GapKind::ClosedBaseMetadata).or_default();
    }
    if let Some(net) = &plan.network {
        if !plan.namespaces {
            found.entry(GapKind::NetworkNotIsolated).or_default();
        }
        if net.relay.is_none() && net.mode != "none" {
            found.entry(GapKind::NetworkNoProxy).or_default();
        }
    }

    found
        .into_iter()
        .map(|(kind, paths)| Gap {
            id: kind.id().into(),
            detail: kind.detail(plan),
            breaks_policy: kind.breaks_policy(),
            paths: examples(paths),
        })
        .collect()
}

/// The guarded paths no guard step makes read-only, checked one by one instead of among the
/// representative paths (see `points::policy_points`): what a guard step holds is read-only
/// by construction (`model::mask_verdict`), and the folders above a guard are pinned like
/// those above any mask.
fn guard_gaps(plan: &Plan, steps: &MountsIndex, policy: &Policy) -> Vec<(GapKind, Vec<PathBuf>)> {
    let kind = match plan.shape {
        crate::linux::plan::Shape::LandlockOnly => GapKind::AutorunLandlockOnly,
        crate::linux::plan::Shape::Masks => GapKind::AutorunUnmasked,
    };
    let unmasked: Vec<PathBuf> = policy
        .guarded
        .iter()
        .filter(|g| {
            let masked = Masked::indexed(&plan.mounts, steps, &g.path);
            // Under a cover or refused path nothing can be written anyway.
            let hidden = matches!(
                masked.governing,
                Some((_, MountStep::Cover { .. } | MountStep::Refuse { .. }))
            );
            !hidden && masked.guard.is_none()
        })
        .map(|g| g.path.clone())
        .collect();
    if unmasked.is_empty() {
        Vec::new()
    } else {
        vec![(kind, unmasked)]
    }
}

/// Up to eight example paths, leaving out a stand-in name (`sbx-generic`) when its folder is
/// already an example.
fn examples(paths: BTreeSet<PathBuf>) -> Vec<PathBuf> {
    paths
        .iter()
        .filter(|p| {
            let generic = p
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("sbx-generic"));
            !(generic && p.parent().is_some_and(|parent| paths.contains(parent)))
        })
        .take(8)
        .cloned()
        .collect()
}

/// Existing protected data (protected roots outside grants, refused paths, read-only grants,
/// launcher folders) that no mask hides, so its metadata can be changed; and whether a closed
/// base leaves the person's other files' metadata open (it always does without masks over
/// them: Landlock has no right for it).
pub(super) fn metadata_exposure(
    plan: &Plan,
    policy: &Policy,
    kind: &dyn Fn(&Path) -> Result<Option<EntryKind>, PlanError>,
) -> Result<Exposure, PlanError> {
    let masked = |p: &Path| {
        matches!(
            governing(&plan.mounts, p),
            Some((_, MountStep::Cover { .. } | MountStep::Refuse { .. }))
                | Some((
                    _,
                    MountStep::BindBack {
                        access: Access::Ro,
                        ..
                    }
                ))
        )
    };
    let mut candidates: Vec<&Path> = Vec::new();
    candidates.extend(
        policy
            .protected
            .iter()
            .filter(|r| !policy.grants.iter().any(|g| within(&r.path, &g.path)))
            .map(|r| r.path.as_path()),
    );
    candidates.extend(policy.refuse.iter().map(|r| r.path.as_path()));
    candidates.extend(
        policy
            .grants
            .iter()
            .filter(|g| g.access == Access::Ro)
            .map(|g| g.path.as_path()),
    );
    if policy.launchers.block {
        candidates.extend(policy.launchers.read.iter().map(|l| l.path.as_path()));
    }
    let mut out = BTreeSet::new();
    for p in candidates {
        // A rw grant inside re-opens its part anyway; what matters is the root itself.
        if masked(p) {
            continue;
        }
        let exists = kind(p)?;
        if exists.is_some() {
            out.insert(p.to_path_buf());
        }
    }
    Ok(Exposure {
        assets: out,
        closed_outside: policy.base == Base::Closed,
    })
}

/// What [`metadata_exposure`] found.
pub(super) struct Exposure {
    /// Existing protected data no mask hides.
    assets: BTreeSet<PathBuf>,
    /// A closed base leaves the metadata of the person's other files open.
    closed_outside: bool,
}
