//! The Linux plan: what the enforcer will do, as data. Pure: built from a policy and the
//! platform's facts, printable, testable on any OS. The enforcer (Linux only) applies it
//! step by step and refuses to run anything if a step fails.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::policy::Access;

/// What the platform can enforce. Detected by `sandboxer doctor` (see `facts.rs`), or given
/// explicitly by tests to simulate a kernel without Landlock or a machine without user
/// namespaces.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Facts {
    /// Landlock ABI version; 0 when Landlock is absent or disabled.
    pub landlock_abi: u32,
    /// Unprivileged (or, as root, plain) user namespaces can be created and mapped.
    pub user_namespaces: bool,
    /// Mount and PID namespaces can be created inside the user namespace.
    pub mount_pid_namespaces: bool,
    /// The uid and gid the confined process keeps (mapped to themselves).
    pub uid: u32,
    pub gid: u32,
}

/// The two shapes of a Linux plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// user + mount + PID namespaces, masks over protected roots, then Landlock.
    Masks,
    /// No namespaces: Landlock alone, punching holes (each sibling along the path to a
    /// protected root is granted instead of the parent).
    LandlockOnly,
}

/// One mount-namespace step, applied in order inside the new mount namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum MountStep {
    /// An empty, read-only tmpfs over a protected root or a ways-out folder: nothing inside
    /// can be read, listed, created or connected to.
    Cover { path: PathBuf, why: String },
    /// A grant inside a covered root, bound back from the original tree (captured before the
    /// cover went on) with its access (`ro` binds read-only).
    BindBack { path: PathBuf, access: Access },
    /// A refused path inside a grant: hidden by an empty read-only tmpfs of mode 000 (a
    /// folder) or by a read-only bind of an empty mode-000 file (a file). When the path did not
    /// exist at launch, an empty folder is created there first so that it cannot be created
    /// from inside.
    Refuse {
        path: PathBuf,
        existed: bool,
        is_dir: bool,
    },
}

/// Landlock filesystem rights, by name; the enforcer maps them to the kernel's bits and
/// drops the ones the running ABI does not know only where the plan says it may.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FsRight {
    Execute,
    WriteFile,
    ReadFile,
    ReadDir,
    RemoveDir,
    RemoveFile,
    MakeChar,
    MakeDir,
    MakeReg,
    MakeSock,
    MakeFifo,
    MakeBlock,
    MakeSym,
    /// ABI 2.
    Refer,
    /// ABI 3.
    Truncate,
    /// ABI 5.
    IoctlDev,
}

/// One Landlock path-beneath rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockRule {
    pub path: PathBuf,
    pub rights: Vec<FsRight>,
    /// Why this rule exists (the policy rule or hole it comes from).
    pub why: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockPlan {
    /// The ABI the plan was made for; the enforcer refuses a kernel below it.
    pub abi: u32,
    /// Rights the ruleset handles (denied unless a rule allows them).
    pub handled: Vec<FsRight>,
    pub rules: Vec<LandlockRule>,
    /// ABI 6: refuse connecting to abstract Unix sockets created outside the domain.
    pub scope_abstract_unix: bool,
    /// ABI 6: refuse signals to processes outside the domain.
    pub scope_signal: bool,
}

/// Something the plan cannot enforce that the policy asks for. A gap `breaks_policy` when a
/// process could do something `Policy::decide` denies (e.g. connect to a socket in a
/// protected root); such a plan is refused and the caller falls back to bridge-only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gap {
    /// Stable identifier, e.g. `pathname-sockets-reachable`.
    pub id: String,
    pub detail: String,
    pub breaks_policy: bool,
}

/// The plan the enforcer applies, in this order: namespaces, mounts, `setsid`, capabilities
/// dropped, `no_new_privs`, Landlock, `exec`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub shape: Shape,
    pub uid: u32,
    pub gid: u32,
    /// user + mount + PID namespaces with a fresh `/proc` and a small init as PID 1.
    pub namespaces: bool,
    pub mounts: Vec<MountStep>,
    pub landlock: LandlockPlan,
    pub gaps: Vec<Gap>,
}
