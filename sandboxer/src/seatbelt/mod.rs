//! macOS Seatbelt: a resolved [`Policy`] → a complete SBPL profile, usable alone with
//! `sandbox-exec -f`.
//!
//! The profile is `(version 1) (deny default)` followed by allow rules, each carrying its
//! exclusions as `require-not`: a union of predicates, whose meaning does not depend on
//! rule order. How the policy's layers become such a union is `layout`'s business (regions:
//! a folder minus folders inside it); `filters` writes each region as SBPL filters from
//! literals escaped by [`escape`]. Last come the autorun guard's denials (`guard`, with
//! regexes for every spelling from [`spelled`]), which no allow may re-open: the only place
//! where order matters. The rest of the text comes from a Tera template
//! (`profiles/seatbelt/profile.sb.tera`, embedded, overridable), which never sees a raw path.
//! `docs/seatbelt.md` explains every rule and where each operation name was seen.

pub mod escape;
mod filters;
mod guard;
mod layout;
pub mod mach;
pub mod spelled;

use std::borrow::Cow;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use serde::Serialize;

use crate::network::{NetworkMode, ProxyEndpoint};
use crate::policy::{Access, Base, Op, Policy};
use crate::target::Target;
use escape::{EscapeError, path_literal, string_literal};
use filters::{Alternatives, Side};
use guard::GuardFilters;
use layout::{Key, Layout, ReadTerm, Source, WriteTerm};

/// The embedded profile template.
pub const PROFILE_TEMPLATE: &str = include_str!("../../../profiles/seatbelt/profile.sb.tera");

/// The template's name, and its file name under `PROFILES_DIR/seatbelt/`.
pub const TEMPLATE_NAME: &str = "profile.sb.tera";

/// The system resolver's Unix socket (mDNSResponder's; `/var/run` is `/private/var/run`): a
/// name looked up through it is a message out that no proxy sees, so it is left out of the
/// Unix sockets a profile allows unless the network is open.
pub const RESOLVER_SOCKET: &str = "/private/var/run/mDNSResponder";

/// What a profile lets the sandbox reach over IP, from the policy's `[network]`
/// (docs/network.md, "Where it is enforced").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IpReach {
    /// `open`, or no `[network]` section: IP as the person's own programs have it, the
    /// resolver included.
    Open,
    /// `public` and `allowlist`: connecting to these ports on loopback only (the egress
    /// proxy's, then the `loopback` ports the policy names); no bind, no inbound, no resolver.
    LoopbackPorts(Vec<u16>),
    /// `none`, or a proxied mode without a proxy: no IP at all, no resolver.
    Nothing,
}

impl IpReach {
    pub fn of(policy: &Policy) -> IpReach {
        let Some(rules) = &policy.network else {
            return IpReach::Open;
        };
        match rules.mode {
            NetworkMode::Open => IpReach::Open,
            NetworkMode::None => IpReach::Nothing,
            NetworkMode::Public | NetworkMode::Allowlist => {
                match policy.network_proxy.as_ref().and_then(ProxyEndpoint::port) {
                    Some(proxy) => {
                        let mut ports = vec![proxy];
                        ports.extend(rules.loopback.iter().filter(|&&p| p != proxy));
                        IpReach::LoopbackPorts(ports)
                    }
                    None => IpReach::Nothing,
                }
            }
        }
    }

    fn is_open(&self) -> bool {
        *self == IpReach::Open
    }
}

/// The SBPL operation each policy operation is checked as. Read and list are both
/// `file-read-data` (listing a folder reads its data); delete and the source of a rename
/// are both `file-write-unlink` (see docs/seatbelt.md for the sources). `decide` answers
/// each pair alike, so one SBPL operation can stand for both.
pub fn operation_for(op: Op) -> &'static str {
    match op {
        Op::Read | Op::List => "file-read-data",
        Op::Write => "file-write-data",
        Op::Create => "file-write-create",
        Op::Delete | Op::Rename => "file-write-unlink",
        Op::Exec => "process-exec",
        Op::ConnectUnix => "network-outbound",
    }
}

/// The evaluator's question for `op` at `path`: [`operation_for`] on the object there. Read
/// and list are both `file-read-data`; what is opened tells them apart (a file's content, a
/// folder's names).
pub fn query_for(op: Op, path: &Path) -> crate::sbpl::Query<'_> {
    use crate::sbpl::{Query, VnodeType};
    match op {
        Op::ConnectUnix => Query::UnixSocket(path),
        Op::Read => Query::Path {
            path,
            vnode: Some(VnodeType::RegularFile),
        },
        Op::List => Query::Path {
            path,
            vnode: Some(VnodeType::Directory),
        },
        _ => Query::Path { path, vnode: None },
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error(
        "a Seatbelt profile is for macOS, but this policy was resolved for {target}; load it \
         with --target macos"
    )]
    NotMacos { target: Target },
    #[error(
        "{what} {path:?} ({origin}) is not an absolute path without '..'; Seatbelt would never match it"
    )]
    NotPlain {
        what: &'static str,
        origin: String,
        path: PathBuf,
    },
    #[error("{what} ({origin}): {source}")]
    Literal {
        what: &'static str,
        origin: String,
        #[source]
        source: EscapeError,
    },
    #[error("cannot read the Seatbelt template {path}: {source}")]
    TemplateRead {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("Seatbelt template {origin}: {message}")]
    Template { origin: String, message: String },
}

/// Where a template came from, for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TemplateOrigin {
    Embedded,
    File(PathBuf),
}

impl std::fmt::Display for TemplateOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TemplateOrigin::Embedded => f.write_str("(embedded profile.sb.tera)"),
            TemplateOrigin::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// A parsed profile template.
pub struct Templates {
    tera: tera::Tera,
    origin: TemplateOrigin,
}

impl Templates {
    /// The embedded template (parsed once per process).
    pub fn embedded() -> &'static Templates {
        static EMBEDDED: OnceLock<Templates> = OnceLock::new();
        EMBEDDED.get_or_init(|| {
            Templates::parse(PROFILE_TEMPLATE, TemplateOrigin::Embedded)
                .expect("profiles/seatbelt/profile.sb.tera parses (checked by a unit test)")
        })
    }

    /// The template in `file`.
    pub fn from_file(file: &Path) -> Result<Templates, RenderError> {
        let text = std::fs::read_to_string(file).map_err(|source| RenderError::TemplateRead {
            path: file.to_path_buf(),
            source,
        })?;
        Templates::parse(&text, TemplateOrigin::File(file.to_path_buf()))
    }

    /// `DIR/seatbelt/profile.sb.tera` when the profiles folder has one; the embedded template
    /// otherwise (the same rule as `DIR/launchers.toml`). [`Templates::origin`] says which.
    pub fn from_profiles_dir(dir: &Path) -> Result<Templates, RenderError> {
        let file = dir.join("seatbelt").join(TEMPLATE_NAME);
        if file.exists() {
            Templates::from_file(&file)
        } else {
            Templates::parse(PROFILE_TEMPLATE, TemplateOrigin::Embedded)
        }
    }

    pub fn origin(&self) -> &TemplateOrigin {
        &self.origin
    }

    fn parse(text: &str, origin: TemplateOrigin) -> Result<Templates, RenderError> {
        let mut tera = tera::Tera::default();
        // The values are SBPL literals, escaped in Rust; HTML escaping would corrupt them.
        tera.autoescape_on(Vec::new());
        tera.add_raw_template(TEMPLATE_NAME, text)
            .map_err(|e| template_error(&origin, &e))?;
        Ok(Templates { tera, origin })
    }
}

/// Tera nests the useful part of its errors (line, unknown variable) in `source()`.
fn template_error(origin: &TemplateOrigin, e: &tera::Error) -> RenderError {
    let mut message = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        message.push_str(": ");
        message.push_str(&c.to_string());
        cause = c.source();
    }
    RenderError::Template {
        origin: origin.to_string(),
        message,
    }
}

/// Renders `policy` (resolved for macOS) with the embedded template.
pub fn render(policy: &Policy) -> Result<String, RenderError> {
    render_with(policy, Templates::embedded())
}

/// Renders `policy` (resolved for macOS) with `templates`.
pub fn render_with(policy: &Policy, templates: &Templates) -> Result<String, RenderError> {
    if policy.target != Target::Macos {
        return Err(RenderError::NotMacos {
            target: policy.target,
        });
    }
    let policy = canonical(policy)?;
    check_literals(&policy)?;
    let data = ProfileData::new(&policy, &layout::layout(&policy))?;
    let context =
        tera::Context::from_serialize(&data).map_err(|e| template_error(&templates.origin, &e))?;
    templates
        .tera
        .render(TEMPLATE_NAME, &context)
        .map_err(|e| template_error(&templates.origin, &e))
}

/// The policy with every path in canonical spelling (`/a/./b/` is `/a/b`: `Path` compares
/// them equal, so must the profile). Loaded policies are canonical already and are borrowed;
/// a hand-built one is copied. A relative path or one with `..` is refused: the kernel
/// hands Seatbelt resolved paths, so such a rule would match nothing.
fn canonical(policy: &Policy) -> Result<Cow<'_, Policy>, RenderError> {
    let mut all_canonical = true;
    for (what, origin, path) in paths_of(policy) {
        if layout::is_canonical(path) {
            continue;
        }
        if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
            return Err(RenderError::NotPlain {
                what,
                origin: origin.describe(),
                path: path.to_path_buf(),
            });
        }
        all_canonical = false;
    }
    if all_canonical {
        return Ok(Cow::Borrowed(policy));
    }
    let mut p = policy.clone();
    let fix = |path: &mut PathBuf| *path = path.components().collect();
    p.protected.iter_mut().for_each(|r| fix(&mut r.path));
    p.grants.iter_mut().for_each(|g| fix(&mut g.path));
    p.refuse.iter_mut().for_each(|r| fix(&mut r.path));
    p.guarded.iter_mut().for_each(|g| fix(&mut g.path));
    p.closed.read.iter_mut().for_each(|r| fix(&mut r.path));
    p.closed.write.iter_mut().for_each(|r| fix(&mut r.path));
    p.launchers.exec.iter_mut().for_each(|l| fix(&mut l.path));
    p.launchers.read.iter_mut().for_each(|l| fix(&mut l.path));
    fix(&mut p.home);
    Ok(Cow::Owned(p))
}

/// Every path must fit in an SBPL literal. The loader refuses control characters and
/// non-UTF-8 for macOS; this also catches a path too long for Seatbelt's reader, and names
/// the rule.
fn check_literals(policy: &Policy) -> Result<(), RenderError> {
    for (what, origin, path) in paths_of(policy) {
        path_literal(path).map_err(|source| RenderError::Literal {
            what,
            origin: origin.describe(),
            source,
        })?;
    }
    Ok(())
}

/// Where a path came from, formatted only for an error (a policy can hold many thousands).
enum PathOrigin<'p> {
    Rule(&'p crate::policy::Origin),
    Launchers,
    Home,
}

impl PathOrigin<'_> {
    fn describe(&self) -> String {
        match self {
            PathOrigin::Rule(o) => o.to_string(),
            PathOrigin::Launchers => "the launcher list".into(),
            PathOrigin::Home => "the home".into(),
        }
    }
}

/// Every path the profile may name: what it is, where it came from, the path.
fn paths_of(policy: &Policy) -> impl Iterator<Item = (&'static str, PathOrigin<'_>, &Path)> {
    fn rules<'p>(
        what: &'static str,
        rules: &'p [crate::policy::Rule],
    ) -> impl Iterator<Item = (&'static str, PathOrigin<'p>, &'p Path)> {
        rules
            .iter()
            .map(move |r| (what, PathOrigin::Rule(&r.origin), r.path.as_path()))
    }
    rules("protected root", &policy.protected)
        .chain(
            policy
                .grants
                .iter()
                .map(|g| ("grant", PathOrigin::Rule(&g.origin), g.path.as_path())),
        )
        .chain(rules("refused path", &policy.refuse))
        .chain(policy.guarded.iter().map(|g| {
            (
                "guarded path",
                PathOrigin::Rule(&g.origin),
                g.path.as_path(),
            )
        }))
        .chain(rules("closed.read folder", &policy.closed.read))
        .chain(rules("closed.write folder", &policy.closed.write))
        .chain(
            policy
                .launchers
                .exec
                .iter()
                .chain(&policy.launchers.read)
                .map(|l| ("launcher path", PathOrigin::Launchers, l.path.as_path())),
        )
        .chain(std::iter::once((
            "home",
            PathOrigin::Home,
            policy.home.as_path(),
        )))
}

// ---- what the template sees: escaped literals and filters built from them ----------------

/// The filter lists are [`Alternatives`]: one filter per line, or empty (then the template
/// writes no rule).
#[derive(Serialize)]
struct ProfileData {
    base: &'static str,
    home: String,
    launchers_blocked: bool,
    /// Readable regions, for file-read* and file-ioctl.
    read_files: String,
    /// The same regions minus the launcher binaries, for process-exec.
    read_exec: String,
    /// Writable regions minus the kept ancestors, for file-write* and file-link.
    write_files: String,
    /// Kept ancestors (may be written and created, never deleted or renamed).
    write_keep: String,
    /// Writable regions as Unix-socket filters, for network-outbound and network-bind.
    write_remote: String,
    write_local: String,
    /// Folders above grants, for file-read-metadata.
    traverse: String,
    /// The same folders, indented to sit inside `(require-all (vnode-type DIRECTORY) …)`.
    traverse_nested: String,
    /// The autorun guard: guarded paths, denied file-write* and file-link after every allow.
    guard_writes: String,
    /// Their folders and the repositories' git folders, denied file-write-unlink.
    guard_unlink: String,
    /// Other spellings of protected roots and refused paths, denied file-write-create.
    respelled: String,
    /// ` (with message "TAG")` on every deny rule, or nothing (`[macos] log_tag`).
    deny_message: String,
    launcher_exec: Vec<String>,
    launcher_folders: Vec<String>,
    /// Mach services looked up by name (`global-name`): the allowlist minus what the policy
    /// refuses, plus the launcher services when launchers are allowed.
    mach_names: Vec<String>,
    /// Mach name prefixes (`global-name-prefix`): the launcher prefixes when allowed.
    mach_prefixes: Vec<String>,
    /// Names the policy refuses, which a prefix above could otherwise match.
    mach_denied: Vec<String>,
    /// `[network] mode`, for the profile's comment: `open`, `public`, `allowlist`, `none`.
    network_mode: &'static str,
    /// IP as the person's own programs have it ([`IpReach::Open`]).
    network_open: bool,
    /// Otherwise the loopback ports that may be connected to (empty: no IP at all).
    network_ports: Vec<u16>,
}

/// The literal for a path already checked by [`check_literals`].
fn lit(key: Key<'_>) -> Result<String, RenderError> {
    let path = Path::new(std::ffi::OsStr::from_bytes(key));
    path_literal(path).map_err(|source| RenderError::Literal {
        what: "path",
        origin: path.to_string_lossy().into_owned(),
        source,
    })
}

fn lits(keys: &[Key<'_>]) -> Result<Vec<String>, RenderError> {
    keys.iter().map(|k| lit(k)).collect()
}

fn describe(source: Source) -> &'static str {
    match source {
        Source::BaseOpen => "open base",
        Source::ClosedRead => "closed base, read-only folder",
        Source::ClosedWrite => "closed base, writable folder",
        Source::Grant(Access::Ro) => "grant (ro)",
        Source::Grant(Access::Rw) => "grant (rw)",
    }
}

fn name_literal(what: &'static str, name: &str) -> Result<String, RenderError> {
    string_literal(name).map_err(|source| RenderError::Literal {
        what,
        origin: name.to_string(),
        source,
    })
}

/// The Mach names and prefixes the profile allows, as literals, sorted: the allowlist (and
/// what `[macos] allow_mach_services` opens of the services refused on purpose) minus
/// the names the policy refuses (`[macos] deny_mach_services`) and, when blocked, the
/// launcher services; when launchers are allowed, the launcher services and prefixes too.
/// Unless the network is open, the resolver's services are refused too, prefixes included.
fn mach_lookups(
    policy: &Policy,
    list: &mach::MachServices,
    network_open: bool,
) -> Result<MachLookups, RenderError> {
    let launchers = &policy.launchers;
    let resolver = |name: &str| !network_open && list.resolvers.iter().any(|r| r == name);
    let refused = |name: &str| {
        policy.macos.deny_mach_services.iter().any(|d| d == name)
            || (launchers.block && launchers.mach_services.iter().any(|m| m.name == name))
            || resolver(name)
    };
    let mut names = Vec::new();
    for s in list.services.iter().filter(|s| !refused(&s.name)) {
        names.push(name_literal("profiles/macos/mach-services.toml", &s.name)?);
    }
    // Refused on purpose, opened by the policy (checked against that list when loaded).
    for a in policy
        .macos
        .allow_mach_services
        .iter()
        .filter(|a| !refused(a))
    {
        names.push(name_literal("macos.allow_mach_services", a)?);
    }
    let mut prefixes = Vec::new();
    if !launchers.block {
        for m in launchers.mach_services.iter().filter(|m| !refused(&m.name)) {
            names.push(name_literal("launcher Mach service", &m.name)?);
        }
        for m in &launchers.mach_prefixes {
            prefixes.push(name_literal("launcher Mach service prefix", &m.name)?);
        }
    }
    let mut denied = Vec::new();
    for d in &policy.macos.deny_mach_services {
        denied.push(name_literal("macos.deny_mach_services", d)?);
    }
    if !prefixes.is_empty() {
        for r in list.resolvers.iter().filter(|r| resolver(r)) {
            denied.push(name_literal(
                "profiles/macos/mach-services.toml resolvers",
                r,
            )?);
        }
    }
    for list in [&mut names, &mut prefixes, &mut denied] {
        list.sort();
        list.dedup();
    }
    Ok(MachLookups {
        names,
        prefixes,
        denied,
    })
}

struct MachLookups {
    names: Vec<String>,
    prefixes: Vec<String>,
    denied: Vec<String>,
}

#[derive(Default)]
struct Lists {
    read_files: Alternatives,
    read_exec: Alternatives,
    write_files: Alternatives,
    write_remote: Alternatives,
    write_local: Alternatives,
}

impl Lists {
    fn add_read(&mut self, t: &ReadTerm<'_>) -> Result<(), RenderError> {
        let root = lit(t.region.root)?;
        let except = lits(&t.region.except)?;
        let what = Some(describe(t.source));
        self.read_files.files(what, &root, &except, &[]);
        self.read_exec
            .files(what, &root, &except, &lits(&t.exec_except)?);
        Ok(())
    }

    /// `closed_sockets`: single sockets never connected to (the resolver's, unless the
    /// network is open), left out of the regions that would hold them.
    fn add_write(&mut self, t: &WriteTerm<'_>, closed_sockets: &[&str]) -> Result<(), RenderError> {
        let root = lit(t.region.root)?;
        let except = lits(&t.region.except)?;
        let what = Some(describe(t.source));
        self.write_files
            .files(what, &root, &except, &lits(&t.keep)?);
        let mut also = Vec::new();
        for s in closed_sockets {
            let held = |folder: &[u8]| layout::is_within(s.as_bytes(), folder);
            if held(t.region.root) && !t.region.except.iter().any(|x| held(x)) {
                also.push(lit(s.as_bytes())?);
            }
        }
        self.write_remote
            .sockets(Side::Remote, &root, &except, &also);
        self.write_local.sockets(Side::Local, &root, &except, &[]);
        Ok(())
    }
}

impl ProfileData {
    fn new(policy: &Policy, layout: &Layout<'_>) -> Result<ProfileData, RenderError> {
        let blocked = policy.launchers.block;
        let reach = IpReach::of(policy);
        let closed_sockets: &[&str] = match reach.is_open() {
            true => &[],
            false => &[RESOLVER_SOCKET],
        };
        let mut lists = Lists::default();
        for t in &layout.read {
            lists.add_read(t)?;
        }
        for t in &layout.write {
            lists.add_write(t, closed_sockets)?;
        }
        let mut write_keep = Alternatives::default();
        write_keep.literals(&lits(&layout.keep)?);
        let mut traverse = Alternatives::default();
        traverse.literals(&lits(&layout.traverse)?);
        let guard = GuardFilters::new(policy)?;
        let mach = mach_lookups(policy, mach::embedded(), reach.is_open())?;
        Ok(ProfileData {
            base: match policy.base {
                Base::Open => "open",
                Base::Closed => "closed",
            },
            home: lit(layout::key(&policy.home))?,
            launchers_blocked: blocked,
            read_files: lists.read_files.into_string(),
            read_exec: lists.read_exec.into_string(),
            write_files: lists.write_files.into_string(),
            write_keep: write_keep.into_string(),
            write_remote: lists.write_remote.into_string(),
            write_local: lists.write_local.into_string(),
            traverse_nested: traverse.nested(2),
            traverse: traverse.into_string(),
            guard_writes: guard.writes,
            guard_unlink: guard.unlink,
            respelled: guard.respelled,
            deny_message: match &policy.macos.log_tag {
                Some(tag) => format!(" (with message {})", name_literal("macos.log_tag", tag)?),
                None => String::new(),
            },
            launcher_exec: lits(&layout.launcher_exec)?,
            launcher_folders: lits(&layout.launcher_folders)?,
            mach_names: mach.names,
            mach_prefixes: mach.prefixes,
            mach_denied: mach.denied,
            network_mode: policy.network.as_ref().map_or("open", |r| r.mode.as_str()),
            network_open: reach.is_open(),
            network_ports: match reach {
                IpReach::LoopbackPorts(ports) => ports,
                IpReach::Open | IpReach::Nothing => Vec::new(),
            },
        })
    }
}

#[cfg(test)]
mod tests;
