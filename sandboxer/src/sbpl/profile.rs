//! A [`Profile`]: rules with their operations, filters and modifiers, as `build.rs` reads
//! them from s-expressions.
//!
//! Syntax errors and missing parameters are [`ParseError`]s (libsandbox would refuse such a
//! profile too). Constructs that are well-formed but whose meaning the evaluator does not
//! model are kept, marked, and make the answers they could affect "unknown":
//! profile-wide ones (an `import`, Scheme code such as `define`/`if`, a missing
//! `(version 1)`, an operation name not in [`KNOWN_OPERATIONS`]) affect every answer;
//! a filter or modifier the evaluator does not model affects only the rules holding it.

use std::collections::BTreeSet;

use super::ere::Ere;
use super::ops::is_known;

/// A profile as read: its rules in file order, and what the evaluator cannot model.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    pub(crate) rules: Vec<Rule>,
    /// Constructs that could change any answer.
    pub(crate) profile_wide: Vec<Construct>,
    /// Constructs read and deliberately ignored (logging only), for `explain` to mention.
    pub(crate) ignored: Vec<Construct>,
}

/// A place in the profile and what is there.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Construct {
    pub line: usize,
    pub column: usize,
    /// The construct's text exactly as in the profile.
    pub text: String,
    pub why: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Allow,
    Deny,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Deny => "deny",
        }
    }
}

/// One `(allow …)` / `(deny …)`.
#[derive(Clone, Debug)]
pub struct Rule {
    pub line: usize,
    pub column: usize,
    /// The rule exactly as written.
    pub text: String,
    pub action: Action,
    /// Operation names in the order written (`default` included).
    pub operations: Vec<String>,
    /// Alternatives: the rule applies when any matches. Empty: an unfiltered rule.
    pub filters: Vec<Filter>,
    pub modifiers: Vec<Modifier>,
}

/// `(with NAME …)`.
#[derive(Clone, Debug)]
pub struct Modifier {
    pub line: usize,
    pub column: usize,
    pub text: String,
    pub name: String,
}

/// Modifiers that only log, report or signal; the decision stays the rule's action.
/// Others (`no-sandbox`, …) change what the decision means, so rules with them are unknown.
const LOGGING_MODIFIERS: &[&str] = &["message", "report", "no-report", "no-log", "send-signal"];

impl Modifier {
    pub fn changes_decision(&self) -> bool {
        !LOGGING_MODIFIERS.contains(&self.name.as_str())
    }
}

#[derive(Clone, Debug)]
pub struct Filter {
    pub line: usize,
    pub column: usize,
    pub text: String,
    pub kind: FilterKind,
}

#[derive(Clone, Debug)]
pub enum FilterKind {
    /// `(literal P)` / `(path P)`: exactly P.
    Literal(String),
    /// `(subpath P)`: P and everything beneath it, component-wise.
    Subpath(String),
    /// `(prefix P)`: any path whose bytes start with P.
    Prefix(String),
    /// `(regex R)` over the path.
    Regex(Pattern),
    /// `(vnode-type T)`.
    VnodeType(VnodeType),
    /// `(extension "CLASS")`: the process holds a sandbox extension of that class for the
    /// file (a pty opened through `/dev/ptmx` holds `com.apple.sandbox.pty`).
    Extension(String),
    /// `(global-name N)` for Mach services.
    GlobalName(String),
    GlobalNamePrefix(String),
    GlobalNameRegex(Pattern),
    /// `(sysctl-name N)`, `(sysctl-name-prefix N)`: the sysctl's name, equal or starting with.
    SysctlName(String),
    SysctlNamePrefix(String),
    /// `(remote unix-socket …)`: the socket connected to.
    RemoteUnixSocket(SocketFilter),
    /// `(local unix-socket …)`: the socket bound. It never matches an IP endpoint.
    LocalUnixSocket(SocketFilter),
    /// `(target self)` / `(target same-sandbox)`.
    Target(TargetFilter),
    /// `(remote ip …)`, `(local tcp …)`, `(remote udp)` …: an IP address and port. It never
    /// matches a Unix socket (see docs/sbpl-evaluator.md).
    IpEndpoint(IpFilter),
    RequireAll(Vec<Filter>),
    RequireAny(Vec<Filter>),
    RequireNot(Box<Filter>),
    /// Well-formed, but not modelled: evaluates to unknown, for the reason given.
    Opaque(String),
}

/// A regex as written and its translation (or why there is none).
#[derive(Clone, Debug)]
pub struct Pattern {
    pub source: String,
    pub(crate) translated: Result<Ere, String>,
}

impl Pattern {
    pub(super) fn new(source: String) -> Pattern {
        let translated = Ere::translate(&source);
        Pattern { source, translated }
    }
}

#[derive(Clone, Debug)]
pub enum SocketFilter {
    /// `(path-literal P)`
    PathLiteral(String),
    /// `(subpath P)`
    Subpath(String),
    /// `(path-regex R)`
    PathRegex(Pattern),
}

/// `(SIDE PROTOCOL "HOST:PORT")`: an IP endpoint filter.
#[derive(Clone, Debug)]
pub struct IpFilter {
    pub side: EndpointSide,
    /// `ip` (any protocol), or `tcp`/`udp` (not modelled: a query carries no protocol).
    pub protocol: String,
    /// The `"HOST:PORT"` argument as modelled, or why it is not.
    pub endpoint: Result<IpEndpoint, String>,
}

/// Which end of a connection an IP filter or an IP query names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointSide {
    /// `remote`: the address connected to (`network-outbound`).
    Remote,
    /// `local`: the address bound or listened on (`network-bind`, `network-inbound`).
    Local,
}

impl EndpointSide {
    pub fn word(self) -> &'static str {
        match self {
            EndpointSide::Remote => "remote",
            EndpointSide::Local => "local",
        }
    }
}

/// `"HOST:PORT"` with HOST `*` or `localhost` and PORT `*` or a number: the only host words
/// Seatbelt accepts (Anthropic's sandbox-runtime: "Seatbelt only accepts \"localhost\" or
/// \"*\" as the host token").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpEndpoint {
    /// `localhost` (true) or `*`.
    pub localhost: bool,
    /// `None` for `*`.
    pub port: Option<u16>,
}

impl IpEndpoint {
    /// Reads `"HOST:PORT"`; `Err` says why the argument is not modelled.
    pub fn parse(arg: &str) -> Result<IpEndpoint, String> {
        let Some((host, port)) = arg.rsplit_once(':') else {
            return Err(format!("{arg:?} is not HOST:PORT"));
        };
        let localhost = match host {
            "*" => false,
            "localhost" => true,
            _ => {
                return Err(format!(
                    "host {host:?}: only `*` and `localhost` are modelled"
                ));
            }
        };
        let port = match port {
            "*" => None,
            p if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && !p.starts_with('0') => {
                match p.parse::<u16>() {
                    Ok(n) => Some(n),
                    Err(_) => return Err(format!("port {p:?} is not 1 to 65535")),
                }
            }
            p => {
                return Err(format!(
                    "port {p:?}: only `*` and a decimal port are modelled"
                ));
            }
        };
        Ok(IpEndpoint { localhost, port })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetFilter {
    /// `(target self)`: the process itself.
    Myself,
    /// `(target same-sandbox)`: any process under this same sandbox, itself included.
    SameSandbox,
}

/// `vnode-type` values whose meaning is plain (the kind of file system object).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "SCREAMING-KEBAB-CASE")]
pub enum VnodeType {
    RegularFile,
    Directory,
    Symlink,
    Fifo,
    Socket,
    BlockDevice,
    CharacterDevice,
}

impl VnodeType {
    pub const ALL: [VnodeType; 7] = [
        VnodeType::RegularFile,
        VnodeType::Directory,
        VnodeType::Symlink,
        VnodeType::Fifo,
        VnodeType::Socket,
        VnodeType::BlockDevice,
        VnodeType::CharacterDevice,
    ];

    /// The SBPL name: `REGULAR-FILE`, `DIRECTORY`, …
    pub fn as_str(self) -> &'static str {
        match self {
            VnodeType::RegularFile => "REGULAR-FILE",
            VnodeType::Directory => "DIRECTORY",
            VnodeType::Symlink => "SYMLINK",
            VnodeType::Fifo => "FIFO",
            VnodeType::Socket => "SOCKET",
            VnodeType::BlockDevice => "BLOCK-DEVICE",
            VnodeType::CharacterDevice => "CHARACTER-DEVICE",
        }
    }

    /// From the SBPL name, exactly as SBPL spells it.
    pub fn parse(name: &str) -> Option<VnodeType> {
        VnodeType::ALL.into_iter().find(|v| v.as_str() == name)
    }
}

impl Profile {
    /// The rules in file order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Every operation name the rules use, `default` included.
    pub fn operations(&self) -> BTreeSet<&str> {
        self.rules
            .iter()
            .flat_map(|r| r.operations.iter().map(String::as_str))
            .collect()
    }

    /// Operation names not in [`KNOWN_OPERATIONS`]: macOS may refuse the whole profile.
    pub fn unknown_operations(&self) -> BTreeSet<&str> {
        self.operations()
            .into_iter()
            .filter(|op| !is_known(op))
            .collect()
    }

    /// Everything that keeps some answer from being decided: profile-wide constructs, then
    /// per rule the filters, regexes, paths and modifiers the evaluator does not model. For a
    /// profile where this is empty, every query of a modelled kind is decided (given the file
    /// type where a `vnode-type` filter asks for it, and paths the regexes can judge);
    /// operations with no modelled object are still decided by unfiltered rules only.
    pub fn unknown_constructs(&self) -> Vec<Construct> {
        let mut out = self.profile_wide.clone();
        for rule in &self.rules {
            for m in rule.modifiers.iter().filter(|m| m.changes_decision()) {
                out.push(Construct {
                    line: m.line,
                    column: m.column,
                    text: m.text.clone(),
                    why: modifier_why(&m.name),
                });
            }
            for f in &rule.filters {
                f.collect_unknowns(&mut out);
            }
        }
        out
    }

    /// Constructs read and ignored because they only affect logging (`(debug deny)`).
    pub fn ignored(&self) -> &[Construct] {
        &self.ignored
    }
}

pub(crate) fn modifier_why(name: &str) -> String {
    format!(
        "modifier `(with {name} …)` is not modelled: it may change what the rule's decision means"
    )
}

impl Filter {
    fn collect_unknowns(&self, out: &mut Vec<Construct>) {
        let why = match &self.kind {
            FilterKind::RequireAll(fs) | FilterKind::RequireAny(fs) => {
                fs.iter().for_each(|f| f.collect_unknowns(out));
                None
            }
            FilterKind::RequireNot(f) => {
                f.collect_unknowns(out);
                None
            }
            FilterKind::Opaque(why) => Some(why.clone()),
            FilterKind::Regex(p)
            | FilterKind::GlobalNameRegex(p)
            | FilterKind::RemoteUnixSocket(SocketFilter::PathRegex(p))
            | FilterKind::LocalUnixSocket(SocketFilter::PathRegex(p)) => {
                p.translated.as_ref().err().map(|e| regex_why(&p.source, e))
            }
            FilterKind::Literal(p)
            | FilterKind::Subpath(p)
            | FilterKind::RemoteUnixSocket(SocketFilter::PathLiteral(p))
            | FilterKind::RemoteUnixSocket(SocketFilter::Subpath(p))
            | FilterKind::LocalUnixSocket(SocketFilter::PathLiteral(p))
            | FilterKind::LocalUnixSocket(SocketFilter::Subpath(p)) => {
                (!is_normal_absolute(p.as_bytes())).then(|| not_normal_why(p))
            }
            FilterKind::Prefix(_)
            | FilterKind::VnodeType(_)
            | FilterKind::Extension(_)
            | FilterKind::GlobalName(_)
            | FilterKind::GlobalNamePrefix(_)
            | FilterKind::SysctlName(_)
            | FilterKind::SysctlNamePrefix(_)
            | FilterKind::Target(_) => None,
            FilterKind::IpEndpoint(ip) => match (&ip.endpoint, ip.protocol.as_str()) {
                (Err(why), _) => Some(why.clone()),
                (Ok(_), "ip") => None,
                (Ok(_), other) => Some(format!(
                    "`({} {other} …)`: an IP query carries no protocol",
                    ip.side.word()
                )),
            },
        };
        if let Some(why) = why {
            out.push(Construct {
                line: self.line,
                column: self.column,
                text: self.text.clone(),
                why,
            });
        }
    }
}

pub(crate) fn regex_why(source: &str, error: &str) -> String {
    format!("regex {source:?} has no certain translation: {error}")
}

pub(crate) fn not_normal_why(path: &str) -> String {
    format!(
        "{path:?} is not a normalized absolute path; how Seatbelt treats such an argument is \
         not documented"
    )
}

/// Absolute, no empty, `.` or `..` component, no trailing `/` (except `/` itself), no NUL:
/// the form the kernel hands to Seatbelt after resolving a path.
pub(crate) fn is_normal_absolute(path: &[u8]) -> bool {
    if path == b"/" {
        return true;
    }
    let Some(rest) = path.strip_prefix(b"/") else {
        return false;
    };
    !path.contains(&0)
        && rest
            .split(|b| *b == b'/')
            .all(|c| !c.is_empty() && c != b"." && c != b"..")
}
