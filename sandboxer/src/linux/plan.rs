//! The Linux plan: what the enforcer will do, as data. Pure: built from a policy and the
//! platform's facts by [`crate::linux::planner`], printable, testable on any OS. The enforcer
//! (Linux only) applies it step by step and refuses to run anything if a step fails.
//!
//! The plan also carries its own model of what the kernel will do once it is applied,
//! [`Plan::decide`] (in `planner/model.rs`), and the [`Gap`]s where that model differs from
//! [`crate::Policy::decide`].

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use crate::linux::facts::Facts;
pub use crate::linux::fs_right::FsRight;
use crate::policy::Access;

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

impl Shape {
    pub fn as_str(self) -> &'static str {
        match self {
            Shape::Masks => "masks",
            Shape::LandlockOnly => "landlock-only",
        }
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One mount-namespace step, applied in order inside the new mount namespace.
///
/// Before the first step the enforcer makes the whole tree recursively **private**
/// (`MS_REC | MS_PRIVATE`): a slave tree (what an unprivileged mount namespace gets by default)
/// would still receive mounts made outside after launch — logind's tmpfs on `/run/user/UID`,
/// say — on top of a cover. Placeholders (`existed: false`) are created on the real tree
/// first, before any mount. Covers come first, then bind-backs (shallowest first, so nested
/// grants work), then the final masks (refused paths and launcher folders): a later mount on a
/// path hides whatever was mounted beneath it, and the planner orders the steps so that this
/// matches the policy (refuse beats grant beats protected). Each [`MountStep::Pin`] comes right
/// after the last step on a folder above it, before any step beneath it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum MountStep {
    /// A protected root, a ways-out entry or a launcher folder made unreachable.
    /// A folder (`is_dir`) gets an empty tmpfs, read-only once any bind-backs inside are in
    /// place, whose root and the folders made in it for bind-backs are mode 0111 (search
    /// only): listing fails as the policy says, the path to a bound-back grant still
    /// resolves. A non-folder (a socket, a file) gets a read-only bind of an empty mode-000
    /// file: reading fails, and connecting finds no socket. When the path did not exist at
    /// plan time (`existed: false`, always a folder), it is created first (`mkdir -p`, mode
    /// 0700) so that it cannot be created from inside.
    Cover {
        path: PathBuf,
        why: String,
        existed: bool,
        is_dir: bool,
    },
    /// A grant inside a covered root, bound back from the original tree (captured before the
    /// cover went on) with its access (`ro` binds read-only). `is_dir` says what mount point
    /// to make inside the cover (a folder or an empty file).
    BindBack {
        path: PathBuf,
        access: Access,
        is_dir: bool,
    },
    /// A refused path inside a grant: hidden by an empty read-only tmpfs of mode 000 (a
    /// folder) or by a read-only bind of an empty mode-000 file (a file). When the path did not
    /// exist at launch, an empty folder is created there first so that it cannot be created
    /// from inside.
    Refuse {
        path: PathBuf,
        existed: bool,
        is_dir: bool,
    },
    /// A folder holding a protected root, a refused path or a mask, bound onto itself (a
    /// recursive clone of its own mount tree, so it hides nothing): the kernel refuses to
    /// rename, remove or replace a mount point of the caller's own mount namespace (`EBUSY`),
    /// so no process inside can move the folder away and make a look-alike at its path, which
    /// the next launch would protect in its place. `of` is the rule path it holds. A folder
    /// that is already the root of a mount when the plan is applied is left as it is.
    Pin { path: PathBuf, of: PathBuf },
    /// A guarded path (the autorun guard, `[[guard]]`), bound onto itself read-only: a
    /// recursive clone of the tree at its path, every mount in it read-only, so writes,
    /// metadata changes and new entries beneath fail (`EROFS`) and the path itself cannot be
    /// deleted, renamed or replaced (`EBUSY`), while reads, exec and connect(2) work. Guards
    /// come after every other step on a path they hold, so what those put on stays in the
    /// clone. When the path did not exist at plan time (`existed: false`), the caller makes a
    /// placeholder first, removed when the last launch using it ends: an empty folder
    /// (`is_dir`) or a file with `content` (an empty `~/.zshrc`, `{}` for a JSON settings
    /// file), made with any missing folders above it. A file guard carries `content` also when
    /// it exists: it may be another launch's placeholder, which the last launch using it
    /// removes only if it still holds exactly that. `irreplaceable`: nothing may stand in for
    /// it once it is gone (its entry says `missing = "none"`, or it is a symlink), which the
    /// guard watcher needs when a program outside removes it while the sandbox runs
    /// (`enforce/guard_watch.rs`).
    Guard {
        path: PathBuf,
        existed: bool,
        is_dir: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        irreplaceable: bool,
        /// A file's other names (hard links) at plan time: the guard keeps this path
        /// read-only, not the file, which the sandbox could write through them. The gap
        /// `autorun-hard-links` refuses such a plan.
        #[serde(default, skip_serializing_if = "is_zero")]
        other_names: u64,
    },
}

impl MountStep {
    pub fn path(&self) -> &std::path::Path {
        match self {
            MountStep::Cover { path, .. }
            | MountStep::BindBack { path, .. }
            | MountStep::Refuse { path, .. }
            | MountStep::Pin { path, .. }
            | MountStep::Guard { path, .. } => path,
        }
    }
}

/// One Landlock path-beneath rule.
///
/// The enforcer opens each path with `O_PATH | O_NOFOLLOW` and refuses a symlink: the planner
/// never puts a rule on one (a rule on a symlink that someone swapped in would grant its
/// target's whole tree).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockRule {
    pub path: PathBuf,
    pub rights: Vec<FsRight>,
    /// Whether the path was a folder at plan time. A rule on anything else carries only
    /// rights that apply to files (the kernel refuses others); the enforcer refuses a rule
    /// whose path changed kind since.
    #[serde(default = "folder")]
    pub is_dir: bool,
    /// Why this rule exists (the policy rule or hole it comes from).
    pub why: String,
}

fn folder() -> bool {
    true
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockPlan {
    /// The ABI the plan was made for (0: no Landlock layer at all); the enforcer refuses a
    /// kernel below it.
    pub abi: u32,
    /// Rights the ruleset handles (denied unless a rule allows them): every right `abi` knows.
    pub handled: Vec<FsRight>,
    pub rules: Vec<LandlockRule>,
    /// ABI 6: refuse connecting to abstract Unix sockets created outside the domain.
    pub scope_abstract_unix: bool,
    /// ABI 6: refuse signals to processes outside the domain.
    pub scope_signal: bool,
    /// Folders whose own entries get fewer rights than the policy gives them, because a
    /// Landlock right on a folder covers everything beneath it and something beneath needs
    /// less ("hole punching": their existing entries got rules of their own instead).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub narrowed: Vec<PathBuf>,
}

impl LandlockPlan {
    /// The ruleset the kernel is given for this plan: the same enforcement as [`handled`] and
    /// [`rules`] (and so as [`crate::linux::plan::Plan::decide`] says), at less cost.
    ///
    /// A right the rule on `/` grants is allowed on every path; Landlock allows a right the
    /// ruleset does not handle on every path too, and checks nothing for it. So such rights
    /// are left unhandled and taken out of every rule (a rule left with none is dropped).
    /// When that leaves none (a base-open masks plan, where the rule on `/` grants
    /// everything), the domain handles no filesystem right at all, and opening a file costs
    /// Landlock nothing (about 0.1 µs per open otherwise: 2 % of `rg` over 20 000 files) —
    /// provided `mounts_blocked` ([`Plan::mounts_blocked`]): only a domain that handles a
    /// filesystem right is denied `mount`, `umount`, `pivot_root` and remounts, so without
    /// that, two exceptions keep the domain what it was:
    ///
    /// - `refer` stays handled (and granted): Landlock treats it as handled by any ruleset
    ///   that handles a filesystem right, and without a rule granting it, forbids moving or
    ///   linking a file to another folder.
    /// - At least one filesystem right stays handled. `refer` does it from ABI 2; below,
    ///   `make-block`. Neither is ever checked when a file is opened, read, written or
    ///   executed, but the domain is, as said.
    ///
    /// [`handled`]: LandlockPlan::handled
    /// [`rules`]: LandlockPlan::rules
    pub fn kernel_ruleset(&self, mounts_blocked: bool) -> KernelRuleset<'_> {
        let everywhere: Vec<FsRight> = self
            .rules
            .iter()
            .filter(|r| r.is_dir && r.path.as_os_str() == "/")
            .flat_map(|r| r.rights.iter().copied())
            .collect();
        let refused_somewhere = self.handled.iter().any(|r| !everywhere.contains(r));
        let mut handled: Vec<FsRight> = if refused_somewhere || !mounts_blocked {
            self.handled
                .iter()
                .copied()
                .filter(|r| *r == FsRight::Refer || !everywhere.contains(r))
                .collect()
        } else {
            Vec::new()
        };
        if handled.is_empty() && !mounts_blocked {
            // Everything is granted everywhere and the ABI has no `refer`: keep one right.
            handled.extend(
                [FsRight::MakeBlock]
                    .into_iter()
                    .chain(self.handled.iter().copied())
                    .find(|r| self.handled.contains(r)),
            );
        }
        let rules = self
            .rules
            .iter()
            .filter_map(|rule| {
                let rights: Vec<FsRight> = rule
                    .rights
                    .iter()
                    .copied()
                    .filter(|r| handled.contains(r))
                    .collect();
                (!rights.is_empty()).then_some(KernelRule { rule, rights })
            })
            .collect();
        KernelRuleset { handled, rules }
    }
}

/// What the kernel is given for a [`LandlockPlan`]: see [`LandlockPlan::kernel_ruleset`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelRuleset<'p> {
    /// The rights the ruleset handles.
    pub handled: Vec<FsRight>,
    /// The plan's rules that still grant a handled right, with those rights.
    pub rules: Vec<KernelRule<'p>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelRule<'p> {
    pub rule: &'p LandlockRule,
    pub rights: Vec<FsRight>,
}

/// Something the plan cannot enforce exactly as the policy says. A gap `breaks_policy` when a
/// process could do something `Policy::decide` denies to a protected asset or a way out (see
/// `docs/linux.md`, "Gaps"); such a plan is refused and the caller falls back to bridge-only.
/// Gaps that only make the plan stricter than the policy never break it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gap {
    /// Stable identifier, e.g. `pathname-sockets` (see `planner::GapKind`).
    pub id: String,
    pub detail: String,
    pub breaks_policy: bool,
    /// Example paths where the gap shows (the first few found, sorted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<PathBuf>,
}

/// The plan the enforcer applies, in this order: namespaces, mounts, `setsid`, capabilities
/// dropped, `no_new_privs`, Landlock, `exec`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub shape: Shape,
    pub uid: u32,
    pub gid: u32,
    /// user + mount + PID namespaces with a fresh `/proc`, the sandbox's own `/dev/pts` and a
    /// small init as PID 1.
    pub namespaces: bool,
    /// With `namespaces`: the command may make user namespaces of its own. When it may not
    /// (the sandbox's user namespace allows none beneath it), it can hold no capability
    /// anywhere, so it can never mount: see [`LandlockPlan::kernel_ruleset`].
    #[serde(default, skip_serializing_if = "is_false")]
    pub nested_user_namespaces: bool,
    pub mounts: Vec<MountStep>,
    pub landlock: LandlockPlan,
    /// Rule paths (protected, grants, refused, ways out) that did not exist at plan time and
    /// got no placeholder: no mask sits on them; the Landlock rules around them are computed
    /// for what was there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub absent: Vec<Absent>,
    /// Every `connect(2)` goes through the socket broker, which refuses pathname Unix sockets
    /// off its allowlist (docs/linux.md, "Unix sockets"). `None`: connects are not brokered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_broker: Option<SocketBroker>,
    pub gaps: Vec<Gap>,
    /// Masks shape, when the policy names one (`[linux] mask_registry`): the folder, inside a
    /// protected root, where the sandbox's mask keeper registers its socket, so that the
    /// product can create and replace refused paths while the sandbox runs (see
    /// `enforce/keeper.rs` and [`crate::linux::refused`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mask_registry: Option<PathBuf>,
    /// With `mask_registry`: the staging folders ([`STAGING`] beside refused paths), each also
    /// refused by a [`MountStep::Refuse`], in which the keeper masks what the product stages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub staging: Vec<PathBuf>,
    /// The command's network, when not the machine's own (`[network]` other than `open`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkPlan>,
}

/// The command's own network (docs/linux.md, "The network"): in the masks shape, a network
/// namespace of its own holding only `lo`, so nothing of the machine or the outside is
/// reachable, its loopback included; with a relay, listeners on that `lo` that PID 1 binds and
/// hands to the egress proxy over its socket, which accepts their connections itself (the
/// name is older than the handoff: nothing is relayed in the sandbox).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkPlan {
    /// `none`, `public` or `allowlist`, for messages.
    pub mode: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay: Option<Relay>,
}

/// The way out of a sandbox's network: the egress proxy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Relay {
    /// The egress proxy's Unix socket (`[network] proxy`), outside the sandbox's network.
    pub proxy: PathBuf,
    /// The port on the sandbox's `127.0.0.1` (and `[::1]`) where the proxy is reached:
    /// `HTTPS_PROXY` and the other variables name it.
    pub port: u16,
    /// Ports of the machine's loopback the policy names (`[network] loopback`): listened on at
    /// the same port inside, each connection decided by the proxy as `CONNECT 127.0.0.1:PORT`,
    /// so a client that does not use the proxy for `localhost` reaches them too, through it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loopback: Vec<u16>,
}

/// The port of the sandbox's own loopback where the proxy is reached.
pub const RELAY_PORT: u16 = 3128;

impl Relay {
    /// The environment that points programs at the proxy port: every common spelling of the proxy
    /// variables, and nothing exempt from them (`NO_PROXY` empty). A program that ignores
    /// them has no other way out: it fails, it does not leak.
    pub fn env(&self) -> Vec<(String, String)> {
        crate::network::proxy_env(self.port)
    }
}

/// The name of the staging folder beside refused paths: the product writes a refused path's
/// new content there, masked in every running sandbox, before moving it into place.
pub const STAGING: &str = ".sandboxer-staging";

/// The socket broker's part of a plan.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketBroker {
    /// The pathname sockets that may be connected to (the policy's `unix_sockets`); every
    /// other pathname socket is refused with `EACCES`, and so is every abstract address.
    pub allowed: Vec<PathBuf>,
}

/// A rule path missing at plan time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Absent {
    pub path: PathBuf,
    /// This process could create it (its nearest existing folder is writable). When it
    /// cannot, neither can the confined process (same uid, fewer capabilities): only a more
    /// privileged process outside could, so the plan leaves it to the `absent-out-of-reach`
    /// gap instead of narrowing Landlock around it.
    pub creatable: bool,
    /// It comes from the ways-out list (never placeholdered: a daemon may want the path).
    pub ways_out: bool,
}

impl Plan {
    /// Whether the command can never mount, whatever its Landlock domain: in the masks shape
    /// without `nested_user_namespaces`, it holds no capability in the sandbox's user
    /// namespace and may make none of its own (the enforcer sets the sandbox's
    /// `user.max_user_namespaces` to 0).
    pub fn mounts_blocked(&self) -> bool {
        self.namespaces && !self.nested_user_namespaces
    }

    /// The gaps that let a process do what the policy denies to an asset or a way out.
    pub fn breaking_gaps(&self) -> impl Iterator<Item = &Gap> {
        self.gaps.iter().filter(|g| g.breaks_policy)
    }
}
