//! The policy: four layers, later ones winning, and its one reference meaning, [`Policy::decide`].
//!
//! 1. `base` — `open` (everything the person can use) or `closed` (system read-only + grants);
//! 2. `protected` — roots refused although the base is open;
//! 3. `grant` — folders re-opened inside protected roots, `ro` or `rw` (the deepest decides);
//! 4. `refuse` — paths refused inside grants whatever the grant says, also before they exist;
//! 5. `guard` — paths read-only whatever the grants say, also before they exist: the autorun
//!    guard's list (`profiles/autorun.toml`) and the policy's own `[[guard]]` entries.
//!
//! Plus launchers (blocked by default). A [`Policy`] is always resolved: absolute, canonical
//! paths for one [`Target`]. Build one with [`Policy::load`] or [`Policy::from_toml`].

mod devices;
mod document;
mod guard;
mod launchers;
mod load;
mod lookup;
mod network;
mod reserved;
mod resolve;

use std::borrow::Cow;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use document::{
    AutorunSection, ClosedSection, GrantRule, GuardRule, LaunchersSection, LinuxSection,
    MacosSection, NetworkSection, PathRule, PolicyDocument, Spanned, written,
};
pub use guard::HARD_LINKS_FIX;
pub use launchers::{LauncherPath, LauncherSet, MachName};
pub use load::{PolicyError, default_policy};
pub use lookup::Lookup;
pub use resolve::{ResolveError, ResolveOptions};

use crate::paths::{normalize, strictly_within, within};
use crate::target::Target;
use guard::{GuardHit, REPOSITORIES_ORIGIN};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Base {
    /// Everything the person can use, except protected roots.
    Open,
    /// System folders read-only, plus grants.
    Closed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Ro,
    Rw,
}

impl Access {
    /// The word a policy file uses: `ro` or `rw`.
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Ro => "ro",
            Access::Rw => "rw",
        }
    }
}

/// How the Linux backend should confine (`[linux] enforce`). The `auto` choice is the
/// enforcer's; the policy only states a wish.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Enforce {
    Auto,
    Masks,
    LandlockOnly,
}

/// The operations the reference meaning covers. Every backend maps these to its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    /// Read a file's content.
    Read,
    /// List a folder.
    List,
    /// Modify an existing file's content.
    Write,
    /// Create a new entry (file, folder, link, socket) at the path.
    Create,
    /// Remove the entry at the path.
    Delete,
    /// Move the entry at the path away (the destination is a `Create`).
    Rename,
    /// Execute the file at the path.
    Exec,
    /// Connect to the Unix socket bound at the path.
    ConnectUnix,
}

impl Op {
    pub const ALL: [Op; 8] = [
        Op::Read,
        Op::List,
        Op::Write,
        Op::Create,
        Op::Delete,
        Op::Rename,
        Op::Exec,
        Op::ConnectUnix,
    ];

    pub fn parse(word: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.as_str() == word)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::List => "list",
            Op::Write => "write",
            Op::Create => "create",
            Op::Delete => "delete",
            Op::Rename => "rename",
            Op::Exec => "exec",
            Op::ConnectUnix => "connect-unix",
        }
    }

    /// Operations that only look: a read-only grant allows exactly these.
    pub fn is_read_like(self) -> bool {
        matches!(self, Op::Read | Op::List | Op::Exec)
    }

    /// Operations that change nothing at the path: what a guarded path still allows (the
    /// read-like ones, and connecting to a socket, which writes no file).
    pub fn leaves_files_alone(self) -> bool {
        self.is_read_like() || self == Op::ConnectUnix
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a rule came from, for messages: `policy.toml:12 grant[0].path`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Origin {
    pub file: String,
    pub line: usize,
    pub field: String,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{} {}", self.file, self.field)
        } else {
            write!(f, "{}:{} {}", self.file, self.line, self.field)
        }
    }
}

/// A resolved path rule (`protected`, `refuse`, closed-base folders).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Rule {
    pub path: PathBuf,
    pub origin: Origin,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Grant {
    pub path: PathBuf,
    pub access: Access,
    pub origin: Origin,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// A guarded path: read allowed, every write refused (see [`Policy::guarded`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Guarded {
    pub path: PathBuf,
    pub origin: Origin,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// What the Linux masks put there when it is missing at launch.
    pub missing: crate::autorun::Missing,
    /// A git repository's git folder, found at launch. The Linux masks do not pin its
    /// ancestors: moving the repository moves the guard along, and a repository made at the
    /// old path is one made while the sandbox runs (the gap `autorun-repositories-beyond`).
    pub repository: bool,
}

/// The autorun guard's state for one policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AutorunKnobs {
    /// `[autorun] guard`: whether the autorun list is applied (the policy's own `[[guard]]`
    /// entries always are).
    pub guard: bool,
    /// Whether git repositories under the home were looked for (Linux, on this machine).
    pub repositories_scanned: bool,
    /// What the guard could not cover on this machine (repositories beyond the scan's bounds),
    /// for `doctor` and the plan.
    pub beyond: Vec<String>,
    /// macOS: every git folder under the home is guarded outside read-write grants, by one
    /// pattern (Linux finds repositories at launch and guards their git folders as entries
    /// instead).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub repositories: bool,
    /// macOS: the names of project settings (`.claude`, `.mcp.json`, …) guarded by the same
    /// pattern in every folder below the home, outside read-write grants (Linux guards those
    /// of the repositories it finds, as entries).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub project_settings: Vec<String>,
}

/// Folders a closed base opens: `read` (read, list, exec) and `write` (everything).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClosedBase {
    pub read: Vec<Rule>,
    pub write: Vec<Rule>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MacosKnobs {
    /// Extra Mach services refused besides the launcher list.
    pub deny_mach_services: Vec<String>,
    /// Services refused on purpose that this policy opens (`[macos] allow_mach_services`).
    pub allow_mach_services: Vec<String>,
    /// Refuse the ways-out list (`profiles/macos/ways-out.toml`) as protected roots.
    pub ways_out: bool,
    /// The message every denial carries into the unified log (`[macos] log_tag`).
    pub log_tag: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LinuxKnobs {
    pub enforce: Enforce,
    /// Mask the ways-out list (`profiles/linux/ways-out.toml`) as protected roots.
    pub ways_out: bool,
    /// Let the confined command make user namespaces of its own (masks shape; the default is
    /// no: see docs/linux.md).
    pub nested_user_namespaces: bool,
    /// Masks shape: a folder inside a protected root where each sandbox registers the socket
    /// of its mask keeper (see `sandboxer::linux::refused`). None: no keeper, no staging.
    pub mask_registry: Option<PathBuf>,
}

/// A loaded, resolved, validated policy for one target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Policy {
    pub target: Target,
    pub home: PathBuf,
    pub base: Base,
    pub protected: Vec<Rule>,
    pub grants: Vec<Grant>,
    pub refuse: Vec<Rule>,
    /// Read-only paths, whatever the grants say (see [`Guarded`]).
    pub guarded: Vec<Guarded>,
    pub autorun: AutorunKnobs,
    pub launchers: LauncherSet,
    pub closed: ClosedBase,
    pub macos: MacosKnobs,
    pub linux: LinuxKnobs,
    /// The pathname Unix sockets a confined process may connect to (Linux: every other
    /// `connect` to a pathname socket is refused; see docs/linux.md, "Unix sockets").
    pub unix_sockets: Vec<PathBuf>,
    /// `[network]`, or None when the policy has no such section: the launch then chooses
    /// (`public` by default; see docs/policy.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::network::NetworkRules>,
    /// `[network] proxy`: where the sandbox reaches the egress proxy, its only way out in
    /// `public` and `allowlist` mode (a Unix socket on Linux, a loopback port on macOS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_proxy: Option<crate::network::ProxyEndpoint>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Deny,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Allow => "allow",
            Verdict::Deny => "deny",
        })
    }
}

/// Why [`Policy::decide`] answered as it did. The paths are the deciding rules' paths.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Reason {
    /// The query path is not absolute: nothing is allowed for it.
    NotAbsolute,
    /// Exec of a launcher binary.
    Launcher { path: PathBuf },
    /// Inside a launcher component folder.
    LauncherFolder { root: PathBuf },
    /// Delete or rename of a folder that holds a protected root, grant or refused path: the
    /// rules are by path, so moving an ancestor would move the data out from under them.
    Ancestor { of: PathBuf },
    /// macOS, listing a folder above a grant: the names in it, never their content. Bun opens
    /// every folder above its working folder and stops when one refuses (docs/seatbelt.md).
    AboveGrant { grant: PathBuf },
    /// Inside a refused path.
    Refused { root: PathBuf },
    /// Inside a guarded path, and the operation writes.
    Guarded { root: PathBuf, origin: String },
    /// Creating another spelling of a protected root or refused path, or something beneath
    /// one (macOS: the volume would take the new name for the rule's own).
    Respelled { root: PathBuf },
    /// Inside a grant that allows the operation.
    Granted { root: PathBuf, access: Access },
    /// Inside a read-only grant, and the operation writes.
    ReadOnlyGrant { root: PathBuf },
    /// Inside a protected root and no grant.
    Protected { root: PathBuf },
    /// Outside every rule, and the base is open.
    BaseOpen,
    /// A closed base's system folder allows it.
    ClosedBaseFolder { root: PathBuf, access: Access },
    /// Outside every rule, and the base is closed.
    BaseClosed,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub verdict: Verdict,
    pub reason: Reason,
}

impl Decision {
    fn allow(reason: Reason) -> Decision {
        Decision {
            verdict: Verdict::Allow,
            reason,
        }
    }
    fn deny(reason: Reason) -> Decision {
        Decision {
            verdict: Verdict::Deny,
            reason,
        }
    }
    pub fn allowed(&self) -> bool {
        self.verdict == Verdict::Allow
    }
}

/// What the policy says at one path: the rules that contain it, found once (see
/// [`Policy::at`]).
pub struct At<'p> {
    /// The path is absolute (a relative one is refused for every operation).
    absolute: bool,
    base: Base,
    /// The launcher executable at exactly this path.
    launcher: Option<&'p LauncherPath>,
    launcher_folder: Option<&'p LauncherPath>,
    /// A rule root strictly beneath the path (see `guard.rs` for macOS's guard).
    ancestor_of: Option<Cow<'p, Path>>,
    /// macOS: a grant strictly beneath the path, whose folders above may be listed.
    above_grant: Option<&'p Grant>,
    refused: Option<&'p Rule>,
    guarded: Option<GuardHit<'p>>,
    /// A protected root or refused path the path spells otherwise (see `reserved.rs`).
    respelled: Option<&'p Rule>,
    grant: Option<&'p Grant>,
    protected: Option<&'p Rule>,
    /// A closed base's folders holding the path (looked up only for a closed base).
    closed_write: Option<&'p Rule>,
    closed_read: Option<&'p Rule>,
}

impl At<'_> {
    /// [`Policy::decide`] for `op` at this path.
    pub fn decide(&self, op: Op) -> Decision {
        let decision = self.decide_by_rules(op);
        match self.above_grant {
            Some(g) if op == Op::List && !decision.allowed() => {
                Decision::allow(Reason::AboveGrant {
                    grant: g.path.clone(),
                })
            }
            _ => decision,
        }
    }

    /// The rules' answer, before a folder above a grant is opened for its names.
    fn decide_by_rules(&self, op: Op) -> Decision {
        if !self.absolute {
            return Decision::deny(Reason::NotAbsolute);
        }
        if op == Op::Exec
            && let Some(l) = self.launcher
        {
            return Decision::deny(Reason::Launcher {
                path: l.path.clone(),
            });
        }
        if let Some(l) = self.launcher_folder {
            return Decision::deny(Reason::LauncherFolder {
                root: l.path.clone(),
            });
        }
        if matches!(op, Op::Delete | Op::Rename)
            && let Some(of) = &self.ancestor_of
        {
            return Decision::deny(Reason::Ancestor {
                of: of.to_path_buf(),
            });
        }
        if let Some(r) = self.refused {
            return Decision::deny(Reason::Refused {
                root: r.path.clone(),
            });
        }
        if let Some(hit) = &self.guarded
            && !op.leaves_files_alone()
        {
            return Decision::deny(match hit {
                GuardHit::Entry(g) => Reason::Guarded {
                    root: g.path.clone(),
                    origin: g.origin.to_string(),
                },
                GuardHit::Repository(root) => Reason::Guarded {
                    root: root.clone(),
                    origin: REPOSITORIES_ORIGIN.into(),
                },
            });
        }
        if op == Op::Create
            && let Some(r) = self.respelled
        {
            return Decision::deny(Reason::Respelled {
                root: r.path.clone(),
            });
        }

        if let Some(g) = self.grant {
            let root = g.path.clone();
            return match (g.access, op.is_read_like()) {
                (Access::Rw, _) | (Access::Ro, true) => Decision::allow(Reason::Granted {
                    root,
                    access: g.access,
                }),
                (Access::Ro, false) => Decision::deny(Reason::ReadOnlyGrant { root }),
            };
        }
        if let Some(p) = self.protected {
            return Decision::deny(Reason::Protected {
                root: p.path.clone(),
            });
        }
        if self.base == Base::Open {
            return Decision::allow(Reason::BaseOpen);
        }
        if let Some(w) = self.closed_write {
            return Decision::allow(Reason::ClosedBaseFolder {
                root: w.path.clone(),
                access: Access::Rw,
            });
        }
        if op.is_read_like()
            && let Some(r) = self.closed_read
        {
            return Decision::allow(Reason::ClosedBaseFolder {
                root: r.path.clone(),
                access: Access::Ro,
            });
        }
        Decision::deny(Reason::BaseClosed)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NotAbsolute => write!(f, "the path is not absolute"),
            Reason::Launcher { path } => write!(f, "launcher {} is blocked", path.display()),
            Reason::LauncherFolder { root } => {
                write!(f, "inside launcher component {}", root.display())
            }
            Reason::Ancestor { of } => write!(
                f,
                "holds {}: an ancestor of a rule's path is never deleted or renamed",
                of.display()
            ),
            Reason::AboveGrant { grant } => write!(
                f,
                "a folder above grant {}: its names may be listed (macOS), never read",
                grant.display()
            ),
            Reason::Refused { root } => write!(f, "inside refused path {}", root.display()),
            Reason::Guarded { root, origin } => write!(
                f,
                "inside guarded path {} ({origin}): read-only, it makes a program outside the \
                 sandbox run code later",
                root.display()
            ),
            Reason::Respelled { root } => write!(
                f,
                "another spelling of {}: reserved in every case and Unicode form, since the \
                 volume would take a new entry here for it",
                root.display()
            ),
            Reason::Granted { root, access } => {
                write!(f, "inside {:?} grant {}", access, root.display())
            }
            Reason::ReadOnlyGrant { root } => {
                write!(f, "inside read-only grant {}", root.display())
            }
            Reason::Protected { root } => write!(f, "inside protected root {}", root.display()),
            Reason::BaseOpen => write!(f, "no rule matches and the base is open"),
            Reason::ClosedBaseFolder { root, access } => {
                write!(f, "closed base opens {} ({:?})", root.display(), access)
            }
            Reason::BaseClosed => write!(f, "no rule matches and the base is closed"),
        }
    }
}

impl Policy {
    /// The reference meaning of the policy: may `op` be done at `path`?
    ///
    /// `path` must be absolute and is taken as already resolved (the kernel resolves
    /// symlinks before any backend's rule sees a path); `.` and `..` are folded lexically.
    /// Checks run from the strongest layer down, so the first that speaks decides:
    /// launchers, ancestors of rules (delete/rename), refuse, guard (what writes), another
    /// spelling of a protected or refused path (create, macOS), the deepest grant, protected,
    /// then the base.
    pub fn decide(&self, op: Op, path: &Path) -> Decision {
        self.at(path).decide(op)
    }

    /// The rules that speak at `path`, looked up once, for deciding several operations there
    /// ([`At::decide`] is [`Policy::decide`] at that path).
    pub fn at(&self, path: &Path) -> At<'_> {
        let Some(path) = normalize(path) else {
            return At {
                absolute: false,
                base: self.base,
                launcher: None,
                launcher_folder: None,
                ancestor_of: None,
                above_grant: None,
                refused: None,
                guarded: None,
                respelled: None,
                grant: None,
                protected: None,
                closed_write: None,
                closed_read: None,
            };
        };
        let p = path.as_path();
        let grant = self.deepest_grant(p);
        self.at_with(p, grant, self.ancestor_at(p), self.guard_at(p, grant))
    }

    /// [`Policy::at`] at the normal, absolute `p`, given its deepest grant, the rule root
    /// beneath it and the guard holding it (looked up linearly by [`Policy::at`], by hash by
    /// [`Lookup::at`]).
    fn at_with<'p>(
        &'p self,
        p: &Path,
        grant: Option<&'p Grant>,
        ancestor_of: Option<std::borrow::Cow<'p, Path>>,
        guarded: Option<guard::GuardHit<'p>>,
    ) -> At<'p> {
        let launchers = self.launchers.block.then_some(&self.launchers);
        let closed = (self.base == Base::Closed).then_some(&self.closed);
        At {
            absolute: true,
            base: self.base,
            launcher: launchers.and_then(|l| l.exec.iter().find(|l| l.path == p)),
            launcher_folder: launchers.and_then(|l| l.read.iter().find(|l| within(p, &l.path))),
            ancestor_of,
            above_grant: (self.target == Target::Macos)
                .then(|| {
                    self.grants
                        .iter()
                        .find(|g| strictly_within(&g.path, p) && self.is_live(g))
                })
                .flatten(),
            refused: self.refuse.iter().find(|r| within(p, &r.path)),
            guarded,
            respelled: self.reserved_at(p),
            grant,
            protected: self.protected.iter().find(|r| within(p, &r.path)),
            closed_write: closed.and_then(|c| c.write.iter().find(|w| within(p, &w.path))),
            closed_read: closed.and_then(|c| c.read.iter().find(|r| within(p, &r.path))),
        }
    }

    /// A grant that opens something: not inside a refused path or a blocked launcher's folder.
    fn is_live(&self, g: &Grant) -> bool {
        let launchers = self.launchers.block.then_some(&self.launchers);
        !self.refuse.iter().any(|r| within(&g.path, &r.path))
            && !launchers.is_some_and(|l| l.read.iter().any(|f| within(&g.path, &f.path)))
    }

    /// The grant that decides for `path`: the deepest one containing it.
    pub fn deepest_grant(&self, path: &Path) -> Option<&Grant> {
        self.grants
            .iter()
            .filter(|g| within(path, &g.path))
            .max_by_key(|g| g.path.components().count())
    }

    /// Every path a rule is attached to: protected roots, grants, refused and guarded paths.
    /// Their ancestors may not be deleted or renamed.
    pub fn rule_roots(&self) -> impl Iterator<Item = &Path> {
        self.protected
            .iter()
            .map(|r| r.path.as_path())
            .chain(self.grants.iter().map(|g| g.path.as_path()))
            .chain(self.refuse.iter().map(|r| r.path.as_path()))
            .chain(self.guarded.iter().map(|g| g.path.as_path()))
    }
}

#[cfg(test)]
mod tests;
