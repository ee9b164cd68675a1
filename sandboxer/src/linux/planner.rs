//! The Linux planner: policy + platform facts → [`Plan`]. Pure: the filesystem is seen through
//! an [`FsView`], so plans are deterministic in tests; [`HostFs`] is this machine's.
//!
//! Two shapes ([`Shape`]):
//!
//! - **masks**: user + mount + PID namespaces; an empty tmpfs over each protected root and
//!   ways-out entry, grants bound back inside, refused paths masked; then Landlock with the
//!   abstract-socket and signal scopes and whatever rules the masks cannot express (in a base
//!   open policy: one rule on `/` with every right).
//! - **landlock-only**: Landlock alone. A right on a folder covers its whole subtree, so a
//!   folder that holds something the policy closes cannot get the rights its other entries
//!   need: instead each of its entries gets a rule of its own ("hole punching"), computed
//!   from the directory listing at plan time.
//!
//! Both are computed by one procedure: the masks (if any) first, then, for every folder on
//! the way to a rule path, the Landlock rights that every path beneath it may have. The plan
//! then models itself ([`Plan::decide`]) and is compared with [`Policy::decide`] on a finite
//! set of representative paths that covers every class of path the rules distinguish: each
//! difference is a [`GapKind`], and which ones break the policy follows from the kind, never
//! from the shape. [`choose`] applies the fallback rule.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::linux::plan::{
    Absent, Facts, FsRight, Gap, LandlockPlan, LandlockRule, MountStep, Plan, STAGING, Shape,
    SocketBroker,
};
use crate::paths::{normalize, same, strictly_within, within};
use crate::policy::{Access, Base, Decision, Enforce, Op, Policy, Reason, Verdict};
use crate::target::Target;

/// The origin file name the loader gives ways-out entries (`load.rs`).
pub const WAYS_OUT_ORIGIN: &str = "(ways out)";

/// The lowest Landlock ABI the masks shape accepts: ABI 6 brings the scopes that close
/// abstract Unix sockets (X11's `@/tmp/.X11-unix`, abstract D-Bus addresses), which no mount
/// can reach. Below it, the computed `abstract-unix-sockets` gap breaks every policy.
pub const MIN_ABI_MASKS: u32 = 6;

/// The highest Landlock ABI whose filesystem rights this planner knows (ABI 9 adds
/// `resolve-unix`); a newer kernel is planned for as this one.
pub const MAX_KNOWN_ABI: u32 = 9;

// ---- the filesystem, as the planner sees it ------------------------------------------------

/// What is at a path, without following a final symlink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EntryKind {
    Dir,
    File,
    Symlink,
    /// A socket, FIFO or device.
    Other,
}

/// The planner's window on the filesystem.
pub trait FsView {
    /// What is at `path`, or `None` when nothing is.
    fn kind(&self, path: &Path) -> io::Result<Option<EntryKind>>;
    /// The entries of the folder `dir`, as full paths, with their kinds.
    fn list(&self, dir: &Path) -> io::Result<Vec<(PathBuf, EntryKind)>>;
    /// Whether this process may create entries in the existing folder `dir`.
    fn writable(&self, dir: &Path) -> bool;
}

/// This machine's filesystem.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostFs;

fn kind_of(ft: std::fs::FileType) -> EntryKind {
    if ft.is_symlink() {
        EntryKind::Symlink
    } else if ft.is_dir() {
        EntryKind::Dir
    } else if ft.is_file() {
        EntryKind::File
    } else {
        EntryKind::Other
    }
}

impl FsView for HostFs {
    fn kind(&self, path: &Path) -> io::Result<Option<EntryKind>> {
        match std::fs::symlink_metadata(path) {
            Ok(m) => Ok(Some(kind_of(m.file_type()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            // A component that is not a folder: nothing can be at the path.
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<(PathBuf, EntryKind)>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            out.push((entry.path(), kind_of(entry.file_type()?)));
        }
        out.sort();
        Ok(out)
    }

    #[cfg(unix)]
    fn writable(&self, dir: &Path) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: c is a valid NUL-terminated path.
        unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
    }

    #[cfg(not(unix))]
    fn writable(&self, _dir: &Path) -> bool {
        false
    }
}

/// An in-memory tree: for tests, and for planning against a described machine. `/` always
/// exists; adding a path adds its missing parents as folders.
#[derive(Clone, Debug, Default)]
pub struct MemFs {
    entries: BTreeMap<PathBuf, EntryKind>,
    read_only: BTreeSet<PathBuf>,
}

impl MemFs {
    pub fn new() -> MemFs {
        MemFs::default()
    }

    /// Adds `path` (absolute) as `kind`, and its missing parents as folders.
    pub fn add(&mut self, path: impl AsRef<Path>, kind: EntryKind) -> &mut MemFs {
        let path = normalize(path.as_ref()).expect("MemFs paths are absolute");
        for a in path.ancestors().skip(1) {
            self.entries
                .entry(a.to_path_buf())
                .or_insert(EntryKind::Dir);
        }
        self.entries.insert(path, kind);
        self
    }

    pub fn dir(&mut self, path: impl AsRef<Path>) -> &mut MemFs {
        self.add(path, EntryKind::Dir)
    }

    pub fn file(&mut self, path: impl AsRef<Path>) -> &mut MemFs {
        self.add(path, EntryKind::File)
    }

    /// Marks the folder `dir` as not writable by this process.
    pub fn read_only(&mut self, dir: impl AsRef<Path>) -> &mut MemFs {
        self.read_only.insert(dir.as_ref().to_path_buf());
        self
    }
}

impl FsView for MemFs {
    fn kind(&self, path: &Path) -> io::Result<Option<EntryKind>> {
        if path == Path::new("/") {
            return Ok(Some(EntryKind::Dir));
        }
        Ok(self.entries.get(path).copied())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<(PathBuf, EntryKind)>> {
        Ok(self
            .entries
            .iter()
            .filter(|(p, _)| p.parent() == Some(dir))
            .map(|(p, k)| (p.clone(), *k))
            .collect())
    }

    fn writable(&self, dir: &Path) -> bool {
        !self.read_only.contains(dir)
    }
}

// ---- errors ----------------------------------------------------------------------------------

/// A plan that cannot be made at all (as opposed to a [`Refusal`]: a plan made, but not good
/// enough).
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("the policy is resolved for {0}; a Linux plan needs a policy resolved for linux")]
    NotLinux(Target),
    #[error(
        "the masks shape needs user, mount and PID namespaces, and this machine does not \
         provide them: {0}"
    )]
    NamespacesUnavailable(String),
    #[error(
        "{path:?} ({what}) is a symlink; a mount or rule there would follow it, so the policy \
         must name the real path"
    )]
    Symlink { path: PathBuf, what: String },
    #[error("cannot inspect {path:?}: {source}")]
    Fs {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Why no Linux sandbox is good enough here. The caller (the dispatcher) turns it into a
/// bridge-only launch; `id` is stable, the message is for people.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    pub id: RefusalId,
    pub message: String,
    /// Each shape tried, and why it was not enough.
    pub attempts: Vec<Attempt>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RefusalId {
    /// The policy is not resolved for Linux.
    NotLinux,
    /// The kernel has no Landlock (or it is disabled at boot).
    NoLandlock,
    /// Masks were needed (or asked for) and user namespaces do not work.
    NoUserNamespaces,
    /// Landlock is older than the masks shape needs, and Landlock alone is not enough.
    LandlockTooOld,
    /// Every shape tried leaves a gap that breaks the policy.
    GapsBreakPolicy,
    /// A plan could not be made (a symlink where a rule path should be, an unreadable path).
    PlanFailed,
}

impl RefusalId {
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalId::NotLinux => "not-linux",
            RefusalId::NoLandlock => "no-landlock",
            RefusalId::NoUserNamespaces => "no-user-namespaces",
            RefusalId::LandlockTooOld => "landlock-too-old",
            RefusalId::GapsBreakPolicy => "gaps-break-policy",
            RefusalId::PlanFailed => "plan-failed",
        }
    }
}

impl fmt::Display for RefusalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One shape tried by [`choose`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    pub shape: Shape,
    /// Why the shape could not even be planned (a missing layer), if so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// The gaps that break the policy, when it was planned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub breaking: Vec<Gap>,
}

// ---- entry points ----------------------------------------------------------------------------

/// The plan of `shape` for `policy` on a machine with `facts`, reading this machine's
/// filesystem.
pub fn plan(policy: &Policy, facts: &Facts, shape: Shape) -> Result<Plan, PlanError> {
    plan_with(policy, facts, shape, &HostFs)
}

/// [`plan`] against any filesystem view.
pub fn plan_with(
    policy: &Policy,
    facts: &Facts,
    shape: Shape,
    fs: &dyn FsView,
) -> Result<Plan, PlanError> {
    prepare_with(policy, facts, shape, fs)?.check()
}

/// [`plan_with`] in two steps: the plan (mounts and Landlock rules) now, its gaps later
/// ([`Unchecked::gaps`]), so that the caller can start applying it meanwhile. The plan may
/// only be run once its gaps are known and none breaks the policy
/// ([`crate::linux::enforce::run_checking`] makes sure of it).
pub fn prepare_with<'a>(
    policy: &'a Policy,
    facts: &'a Facts,
    shape: Shape,
    fs: &'a dyn FsView,
) -> Result<Unchecked<'a>, PlanError> {
    if policy.target != Target::Linux {
        return Err(PlanError::NotLinux(policy.target));
    }
    if shape == Shape::Masks && !(facts.user_namespaces && facts.mount_pid_namespaces) {
        return Err(PlanError::NamespacesUnavailable(namespaces_missing(facts)));
    }
    Planner::new(policy, facts, shape, fs).build()
}

/// A plan whose gaps are not computed yet: see [`prepare_with`]. Everything the gaps depend
/// on was read from the filesystem when the plan was made, so computing them later reads
/// nothing (and sees nothing the launch changes meanwhile, such as placeholders).
pub struct Unchecked<'a> {
    plan: Plan,
    policy: &'a Policy,
    sibling_rules: BTreeSet<usize>,
    exposure: Exposure,
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

/// The fallback rule, with `policy.linux.enforce`: see [`choose_with`].
pub fn choose(policy: &Policy, facts: &Facts) -> Result<Plan, Refusal> {
    choose_with(policy, facts, &HostFs, policy.linux.enforce)
}

/// The fallback rule. `auto`: the masks shape when the namespaces work and its gaps do not
/// break the policy; else landlock-only when its gaps do not; else a [`Refusal`] naming what
/// is missing, why it matters and how to fix it. `masks` / `landlock-only` try only that
/// shape.
pub fn choose_with(
    policy: &Policy,
    facts: &Facts,
    fs: &dyn FsView,
    enforce: Enforce,
) -> Result<Plan, Refusal> {
    if policy.target != Target::Linux {
        return Err(Refusal {
            id: RefusalId::NotLinux,
            message: format!(
                "the policy is resolved for {}; resolve it for linux to confine on Linux",
                policy.target
            ),
            attempts: Vec::new(),
        });
    }
    let shapes: &[Shape] = match enforce {
        Enforce::Auto => &[Shape::Masks, Shape::LandlockOnly],
        Enforce::Masks => &[Shape::Masks],
        Enforce::LandlockOnly => &[Shape::LandlockOnly],
    };
    let mut attempts = Vec::new();
    let mut failure: Option<String> = None;
    for &shape in shapes {
        match plan_with(policy, facts, shape, fs) {
            Ok(plan) => {
                let breaking: Vec<Gap> = plan.breaking_gaps().cloned().collect();
                if breaking.is_empty() {
                    return Ok(plan);
                }
                attempts.push(Attempt {
                    shape,
                    unavailable: None,
                    breaking,
                });
            }
            Err(PlanError::NamespacesUnavailable(why)) => attempts.push(Attempt {
                shape,
                unavailable: Some(why),
                breaking: Vec::new(),
            }),
            Err(e) => {
                failure.get_or_insert(e.to_string());
                attempts.push(Attempt {
                    shape,
                    unavailable: Some(e.to_string()),
                    breaking: Vec::new(),
                });
            }
        }
    }
    Err(refusal(facts, enforce, attempts, failure))
}

fn namespaces_missing(facts: &Facts) -> String {
    match &facts.namespaces_blocked_by {
        Some(b) => format!("{}. Fix: {}", b.cause(), b.fix()),
        None if !facts.user_namespaces => "user namespaces cannot be created here".into(),
        None => "mount or PID namespaces cannot be created here".into(),
    }
}

fn refusal(
    facts: &Facts,
    enforce: Enforce,
    attempts: Vec<Attempt>,
    failure: Option<String>,
) -> Refusal {
    let ns_missing = attempts
        .iter()
        .any(|a| a.shape == Shape::Masks && a.unavailable.is_some());
    let id = if failure.is_some() {
        RefusalId::PlanFailed
    } else if facts.landlock_abi == 0 {
        RefusalId::NoLandlock
    } else if ns_missing {
        RefusalId::NoUserNamespaces
    } else if facts.landlock_abi < MIN_ABI_MASKS {
        RefusalId::LandlockTooOld
    } else {
        RefusalId::GapsBreakPolicy
    };
    let mut msg = String::from(
        "no Linux sandbox can enforce this policy on this machine, so the command must not run \
         with its own tools (bridge-only).",
    );
    if facts.landlock_abi == 0 {
        msg.push_str(
            " Landlock is missing: the kernel is older than 5.13, built without it, or boots \
             without `landlock` in its `lsm=` list. It confines the filesystem without masks \
             and, from ABI 6 (Linux 6.12), closes abstract Unix sockets (X11) and signals to \
             outside processes. Fix: boot a kernel with Landlock enabled.",
        );
    } else if facts.landlock_abi < MIN_ABI_MASKS {
        msg.push_str(&format!(
            " Landlock ABI {} is older than {MIN_ABI_MASKS} (Linux 6.12): without its scopes, \
             abstract Unix sockets (X11's @/tmp/.X11-unix) and signals to outside processes \
             stay open. Fix: a kernel of 6.12 or later.",
            facts.landlock_abi
        ));
    }
    if enforce != Enforce::Auto {
        msg.push_str(&format!(
            " The policy (or the command line) asks for `{}` only.",
            match enforce {
                Enforce::Masks => "masks",
                Enforce::LandlockOnly => "landlock-only",
                Enforce::Auto => "auto",
            }
        ));
    }
    for a in &attempts {
        if let Some(why) = &a.unavailable {
            msg.push_str(&format!(" {}: unavailable: {why}.", a.shape));
        }
        for g in &a.breaking {
            msg.push_str(&format!(" {}: gap {}: {}", a.shape, g.id, g.detail));
            if !g.detail.ends_with('.') {
                msg.push('.');
            }
        }
    }
    Refusal {
        id,
        message: msg,
        attempts,
    }
}

// ---- rights as a small set -------------------------------------------------------------------

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
struct Rights(u32);

impl Rights {
    const NONE: Rights = Rights(0);

    /// `FsRight::ALL` lists the rights in declaration order (checked by a test), so the
    /// discriminant is the index.
    fn index(r: FsRight) -> usize {
        r as usize
    }
    fn bit(r: FsRight) -> u32 {
        1 << Rights::index(r)
    }
    fn of(rights: &[FsRight]) -> Rights {
        Rights(rights.iter().fold(0, |acc, r| acc | Rights::bit(*r)))
    }
    fn has(self, r: FsRight) -> bool {
        self.0 & Rights::bit(r) != 0
    }
    fn with(self, r: FsRight) -> Rights {
        Rights(self.0 | Rights::bit(r))
    }
    fn union(self, o: Rights) -> Rights {
        Rights(self.0 | o.0)
    }
    fn inter(self, o: Rights) -> Rights {
        Rights(self.0 & o.0)
    }
    fn minus(self, o: Rights) -> Rights {
        Rights(self.0 & !o.0)
    }
    fn is_empty(self) -> bool {
        self.0 == 0
    }
    fn files() -> Rights {
        Rights::of(
            &FsRight::ALL
                .into_iter()
                .filter(|r| r.applies_to_files())
                .collect::<Vec<_>>(),
        )
    }
    fn to_vec(self) -> Vec<FsRight> {
        FsRight::ALL.into_iter().filter(|r| self.has(*r)).collect()
    }
}

// ---- operations as a small set ---------------------------------------------------------------

/// A set of operations, one bit per [`Op`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Ops(u8);

impl Ops {
    const NONE: Ops = Ops(0);
    const ALL: Ops = Ops(u8::MAX);

    /// The position of `op` in [`Op::ALL`].
    fn index(op: Op) -> usize {
        match op {
            Op::Read => 0,
            Op::List => 1,
            Op::Write => 2,
            Op::Create => 3,
            Op::Delete => 4,
            Op::Rename => 5,
            Op::Exec => 6,
            Op::ConnectUnix => 7,
        }
    }
    fn bit(op: Op) -> u8 {
        1 << Ops::index(op)
    }
    fn has(self, op: Op) -> bool {
        self.0 & Ops::bit(op) != 0
    }
    fn with(self, op: Op) -> Ops {
        Ops(self.0 | Ops::bit(op))
    }
}

// ---- the planner -----------------------------------------------------------------------------

struct Planner<'a> {
    policy: &'a Policy,
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
    fn new(policy: &'a Policy, facts: &'a Facts, shape: Shape, fs: &'a dyn FsView) -> Self {
        let abi = facts.landlock_abi.min(MAX_KNOWN_ABI);
        let points = policy_points(policy);
        Planner {
            policy,
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

    fn build(mut self) -> Result<Unchecked<'a>, PlanError> {
        if self.shape == Shape::Masks {
            self.plan_mounts()?;
            self.plan_pins()?;
        }
        self.note_remaining_absent()?;
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
                } => Some(path.as_path()),
                _ => None,
            })
            .collect();
        let mut pins: BTreeMap<PathBuf, PathBuf> = BTreeMap::new();
        for of in &held {
            for a in of.ancestors().skip(1) {
                if a == Path::new("/") || pins.contains_key(a) {
                    continue;
                }
                let masked = match governing(&self.mounts, a) {
                    Some((_, MountStep::BindBack { path, .. })) => path == a,
                    Some(_) => true,
                    None => false,
                };
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
            Shape::Masks => governing(&self.mounts, q),
            Shape::LandlockOnly => None,
        };
        let pin = match self.shape {
            Shape::Masks => pinned(&self.mounts, q),
            Shape::LandlockOnly => None,
        };
        let at = self.policy.at(q);
        let mut out = Ops::NONE;
        for op in Op::ALL {
            let moves_away = matches!(op, Op::Delete | Op::Rename);
            if (moves_away && pin.is_some()) || (mask.is_some() && !mask_verdict(mask, op, q).0) {
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
                MountStep::BindBack { .. } | MountStep::Pin { .. } => {}
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

/// Whether a rule that closes things (protected, refused, launcher) is attached at `path`,
/// as opposed to one that opens (grants, closed-base folders).
fn closes(p: &Policy, path: &Path) -> bool {
    p.protected.iter().any(|r| same(&r.path, path))
        || p.refuse.iter().any(|r| same(&r.path, path))
        || (p.launchers.block
            && p.launchers
                .exec
                .iter()
                .chain(&p.launchers.read)
                .any(|l| same(&l.path, path)))
}

/// Every path a policy rule is attached to.
fn policy_points(p: &Policy) -> BTreeSet<PathBuf> {
    let mut out: BTreeSet<PathBuf> = p.rule_roots().map(Path::to_path_buf).collect();
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
struct Children {
    of: HashMap<OsString, BTreeSet<PathBuf>>,
    none: BTreeSet<PathBuf>,
}

impl Children {
    fn of<'p>(points: impl IntoIterator<Item = &'p PathBuf>) -> Children {
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
    fn of_folder(&self, n: &Path) -> &BTreeSet<PathBuf> {
        self.of.get(n.as_os_str()).unwrap_or(&self.none)
    }

    /// A child of `n` that no point names: it stands for every such child.
    fn fresh_child(&self, n: &Path) -> PathBuf {
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

// ---- the plan's own model --------------------------------------------------------------------

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
fn governing<'m>(mounts: &'m [MountStep], q: &Path) -> Option<(usize, &'m MountStep)> {
    let mut on_path: Vec<(usize, &MountStep, usize)> = Vec::new();
    for (i, m) in mounts.iter().enumerate() {
        // A pin is a clone of the tree at its path: it hides nothing and changes nothing
        // beneath it (see `pinned`).
        if within(q, m.path()) && !matches!(m, MountStep::Pin { .. }) {
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
fn pinned(mounts: &[MountStep], q: &Path) -> Option<usize> {
    mounts
        .iter()
        .position(|m| matches!(m, MountStep::Pin { path, .. } if path == q))
}

/// The masks' verdict for `op` at `q`, given the step that governs `q` (see [`governing`]):
/// (allowed, the step that decided).
fn mask_verdict(
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
        // Never governs (see `governing`); the pin on `q` itself is `pinned`'s.
        MountStep::Pin { .. } => (true, None),
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
    /// resolved, like [`Policy::decide`]) once this plan is applied? Masks first, then
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
    fn decide_at<'p>(&'p self, op: Op, sight: &mut Sight<'p, '_>) -> PlanDecision {
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
        let (ok, step) = match pinned(&self.mounts, q) {
            // Only moving it away: creating it fails anyway (it exists), and what lies
            // beneath is the same tree.
            Some(i) if matches!(op, Op::Delete | Op::Rename) => {
                (false, Some((i, MountEffect::MountPoint)))
            }
            _ => mask_verdict(sight.governing, op, q),
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
            Op::Rename => &[
                FsRight::RemoveDir,
                FsRight::RemoveFile,
                FsRight::MakeChar,
                FsRight::MakeDir,
                FsRight::MakeReg,
                FsRight::MakeSock,
                FsRight::MakeFifo,
                FsRight::MakeBlock,
                FsRight::MakeSym,
                FsRight::Refer,
            ],
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
struct Sight<'p, 'q> {
    q: &'q Path,
    governing: Option<(usize, &'p MountStep)>,
    here: Option<Place<'p>>,
    parent: Option<Place<'p>>,
}

impl<'p, 'q> Sight<'p, 'q> {
    fn new(plan: &'p Plan, q: &'q Path) -> Sight<'p, 'q> {
        Sight {
            q,
            governing: governing(&plan.mounts, q),
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

// ---- gaps ------------------------------------------------------------------------------------

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
}

impl GapKind {
    /// The kinds that are not about operations on paths (what the kernel shares beyond the
    /// file system): no path's answer shows them, so `sandboxer explain` names them apart.
    pub const BEYOND_PATHS: [GapKind; 8] = [
        GapKind::AbstractUnixSockets,
        GapKind::Signals,
        GapKind::Ptrace,
        GapKind::OtherTerminals,
        GapKind::SysvIpc,
        GapKind::DevShm,
        GapKind::UserKeyring,
        GapKind::CgroupTree,
    ];

    pub fn id(self) -> &'static str {
        match self {
            GapKind::AncestorMove => "ancestor-move",
            GapKind::PathnameSockets => "pathname-sockets",
            GapKind::ReadOnlyGrantSockets => "read-only-grant-sockets",
            GapKind::ClosedBaseSockets => "closed-base-sockets",
            GapKind::AbsentWaysOut => "absent-ways-out",
            GapKind::AbsentOutOfReach => "absent-out-of-reach",
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
fn analyze(
    plan: &Plan,
    policy: &Policy,
    sibling_rules: &BTreeSet<usize>,
    exposure: &Exposure,
) -> Vec<Gap> {
    let mut points = policy_points(policy);
    points.extend(plan.mounts.iter().map(|m| m.path().to_path_buf()));
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
    let mut check = |q: &Path, ops: &[Op]| {
        let mut sight = Sight::new(plan, q);
        let at = policy.at(q);
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
    if exposure.closed_outside {
        found.entry(GapKind::ClosedBaseMetadata).or_default();
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
fn metadata_exposure(
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
struct Exposure {
    /// Existing protected data no mask hides.
    assets: BTreeSet<PathBuf>,
    /// A closed base leaves the metadata of the person's other files open.
    closed_outside: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rights_index_is_the_position_in_all() {
        for (i, r) in FsRight::ALL.into_iter().enumerate() {
            assert_eq!(Rights::index(r), i, "{r}");
        }
        assert_eq!(Rights::of(&FsRight::ALL).to_vec(), FsRight::ALL.to_vec());
    }

    #[test]
    fn ops_have_a_bit_each() {
        let all = Op::ALL.into_iter().fold(Ops::NONE, Ops::with);
        assert_eq!(all, Ops::ALL);
        for (i, op) in Op::ALL.into_iter().enumerate() {
            assert_eq!(Ops::index(op), i, "{op}");
            assert!(Ops::NONE.with(op).has(op));
            assert_eq!(Ops::NONE.with(op).0.count_ones(), 1, "{op}");
        }
    }
}
