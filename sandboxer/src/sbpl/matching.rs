//! Matching one rule's filters against the object asked about, in three-valued (Kleene)
//! logic: yes, no, or unknown with a reason.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::ops::QueryKind;
use super::profile::{
    EndpointSide, Filter, FilterKind, IpEndpoint, IpFilter, Pattern, Rule, SocketFilter,
    TargetFilter, VnodeType, is_normal_absolute, not_normal_why, regex_why,
};
use super::query::{ProcessTarget, Query};

/// Three-valued match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Match {
    Yes,
    No,
    Unknown(String),
}

impl Match {
    pub(super) fn of(b: bool) -> Match {
        if b { Match::Yes } else { Match::No }
    }

    /// Kleene and; `other` is not evaluated when `self` is no.
    pub(super) fn and(self, other: impl FnOnce() -> Match) -> Match {
        match self {
            Match::No => Match::No,
            Match::Yes => other(),
            Match::Unknown(why) => match other() {
                Match::No => Match::No,
                _ => Match::Unknown(why),
            },
        }
    }

    pub(super) fn all(items: impl Iterator<Item = Match>) -> Match {
        let mut unknown = None;
        for m in items {
            match m {
                Match::No => return Match::No,
                Match::Unknown(why) => {
                    unknown.get_or_insert(why);
                }
                Match::Yes => {}
            }
        }
        unknown.map_or(Match::Yes, Match::Unknown)
    }

    pub(super) fn any(items: impl Iterator<Item = Match>) -> Match {
        let mut unknown = None;
        for m in items {
            match m {
                Match::Yes => return Match::Yes,
                Match::Unknown(why) => {
                    unknown.get_or_insert(why);
                }
                Match::No => {}
            }
        }
        unknown.map_or(Match::No, Match::Unknown)
    }

    pub(super) fn not(self) -> Match {
        match self {
            Match::Yes => Match::No,
            Match::No => Match::Yes,
            unknown => unknown,
        }
    }
}

/// The query, checked and as bytes.
pub(super) enum Subject<'a> {
    Path {
        bytes: &'a [u8],
        vnode: Option<VnodeType>,
        /// The sandbox extension class held for the file, if any.
        extension: Option<&'a str>,
    },
    Mach(&'a str),
    Sysctl(&'a str),
    Socket(&'a [u8]),
    /// An IP address and port, and which end of the connection it is.
    Ip(SocketAddr, EndpointSide),
    Process(ProcessTarget),
    NoObject,
}

impl<'a> Subject<'a> {
    /// `side`: which end an IP query names for the operation asked ([`super::ops::ip_side`]).
    pub(super) fn of(query: &Query<'a>, side: Option<EndpointSide>) -> Result<Subject<'a>, String> {
        let checked_path = |path: &'a Path| {
            let bytes = path.as_os_str().as_bytes();
            if is_normal_absolute(bytes) {
                Ok(bytes)
            } else {
                Err(format!(
                    "the query path {} is not absolute and normalized; pass it as the kernel \
                     resolves it (no symlinks, `.`, `..`, `//` or trailing `/`)",
                    path.display()
                ))
            }
        };
        Ok(match *query {
            Query::Path { path, vnode } => Subject::Path {
                bytes: checked_path(path)?,
                vnode,
                extension: None,
            },
            Query::HeldPath { path, extension } => Subject::Path {
                bytes: checked_path(path)?,
                vnode: None,
                extension: Some(extension),
            },
            Query::UnixSocket(path) => Subject::Socket(checked_path(path)?),
            Query::Ip(addr) => match side {
                Some(side) => Subject::Ip(addr, side),
                None => return Err("the operation takes no IP address".into()),
            },
            Query::MachName(name) if name.is_empty() || name.contains('\0') => {
                return Err("the Mach service name is empty or has a NUL".into());
            }
            Query::MachName(name) => Subject::Mach(name),
            Query::Sysctl(name) if name.is_empty() || name.contains('\0') => {
                return Err("the sysctl name is empty or has a NUL".into());
            }
            Query::Sysctl(name) => Subject::Sysctl(name),
            Query::Process(target) => Subject::Process(target),
            Query::NoObject => Subject::NoObject,
        })
    }

    pub(super) fn describe(&self) -> &'static str {
        match self {
            Subject::Path { .. } => QueryKind::Path.as_str(),
            Subject::Mach(_) => QueryKind::MachName.as_str(),
            Subject::Sysctl(_) => QueryKind::Sysctl.as_str(),
            Subject::Socket(_) => QueryKind::UnixSocket.as_str(),
            Subject::Ip(..) => QueryKind::Ip.as_str(),
            Subject::Process(_) => QueryKind::Process.as_str(),
            Subject::NoObject => QueryKind::NoObject.as_str(),
        }
    }
}

pub(super) fn filter_matches(filter: &Filter, subject: &Subject) -> Match {
    let unknown =
        |why: String| Match::Unknown(format!("line {}: {}: {why}", filter.line, filter.text));
    match (&filter.kind, subject) {
        (FilterKind::RequireAll(fs), _) => {
            Match::all(fs.iter().map(|f| filter_matches(f, subject)))
        }
        (FilterKind::RequireAny(fs), _) => {
            Match::any(fs.iter().map(|f| filter_matches(f, subject)))
        }
        (FilterKind::RequireNot(f), _) => filter_matches(f, subject).not(),
        (FilterKind::Opaque(why), _) => unknown(why.clone()),
        // A bare path filter on network-outbound names the socket (Chromium's common.sb).
        (FilterKind::Literal(p), Subject::Path { bytes, .. } | Subject::Socket(bytes)) => {
            path_argument(p, |p| *bytes == p).unwrap_or_else(unknown)
        }
        (FilterKind::Subpath(p), Subject::Path { bytes, .. }) => {
            path_argument(p, |p| is_subpath(bytes, p)).unwrap_or_else(unknown)
        }
        (FilterKind::Prefix(p), Subject::Path { bytes, .. }) => {
            Match::of(bytes.starts_with(p.as_bytes()))
        }
        (FilterKind::Regex(p), Subject::Path { bytes, .. }) => {
            regex_matches(p, bytes).unwrap_or_else(unknown)
        }
        (FilterKind::VnodeType(t), Subject::Path { vnode, .. }) => match vnode {
            Some(v) => Match::of(v == t),
            None => unknown("the query does not say the file's type (vnode type)".into()),
        },
        (FilterKind::Extension(class), Subject::Path { extension, .. }) => {
            Match::of(*extension == Some(class.as_str()))
        }
        (FilterKind::GlobalName(n), Subject::Mach(name)) => Match::of(name == n),
        (FilterKind::GlobalNamePrefix(n), Subject::Mach(name)) => {
            Match::of(name.starts_with(n.as_str()))
        }
        (FilterKind::GlobalNameRegex(p), Subject::Mach(name)) => {
            regex_matches(p, name.as_bytes()).unwrap_or_else(unknown)
        }
        (FilterKind::SysctlName(n), Subject::Sysctl(name)) => Match::of(name == n),
        (FilterKind::SysctlNamePrefix(n), Subject::Sysctl(name)) => {
            Match::of(name.starts_with(n.as_str()))
        }
        (FilterKind::RemoteUnixSocket(sf), Subject::Socket(bytes)) => match sf {
            SocketFilter::PathLiteral(p) => path_argument(p, |p| *bytes == p),
            SocketFilter::Subpath(p) => path_argument(p, |p| is_subpath(bytes, p)),
            SocketFilter::PathRegex(p) => regex_matches(p, bytes),
        }
        .unwrap_or_else(unknown),
        (FilterKind::LocalUnixSocket(_), Subject::Socket(_)) => unknown(
            "a connect is asked about the socket connected to; the local end is not modelled"
                .into(),
        ),
        // An IP address and port is never a Unix socket's, and the other way round.
        (FilterKind::IpEndpoint(_), Subject::Socket(_))
        | (FilterKind::RemoteUnixSocket(_) | FilterKind::LocalUnixSocket(_), Subject::Ip(..)) => {
            Match::No
        }
        (FilterKind::IpEndpoint(f), Subject::Ip(addr, side)) => {
            ip_matches(f, *addr, *side).unwrap_or_else(unknown)
        }
        (FilterKind::Target(t), Subject::Process(target)) => Match::of(match t {
            TargetFilter::Myself => *target == ProcessTarget::Myself,
            TargetFilter::SameSandbox => *target != ProcessTarget::Outside,
        }),
        _ => unknown(format!(
            "this filter is not modelled for {} (what Seatbelt does with it there is not known)",
            subject.describe()
        )),
    }
}

/// An IP filter against an address on the `side` the operation names. Only `ip` filters on
/// the same side are decided: `tcp`/`udp` need the protocol, which a query does not carry,
/// and a `local` filter on `network-outbound` is checked against the socket's source address
/// (the any-address before a bind, which Seatbelt's `localhost` matches: Anthropic's
/// sandbox-runtime), which the query does not carry either.
fn ip_matches(f: &IpFilter, addr: SocketAddr, side: EndpointSide) -> Result<Match, String> {
    let endpoint = f.endpoint.as_ref().map_err(Clone::clone)?;
    if f.protocol != "ip" {
        return Err(format!(
            "`{}`: the query does not say the protocol",
            f.protocol
        ));
    }
    if f.side != side {
        return Err(format!(
            "a `{}` address filter, asked about the {} address",
            f.side.word(),
            side.word()
        ));
    }
    let IpEndpoint { localhost, port } = *endpoint;
    let port = Match::of(port.is_none_or(|p| p == addr.port()));
    Ok(port.and(|| {
        if localhost {
            is_localhost(addr.ip())
        } else {
            Match::Yes
        }
    }))
}

/// Seatbelt's `localhost`: 127.0.0.1 and ::1, not the IPv4-mapped ::ffff:127.0.0.1
/// (Anthropic's sandbox-runtime, from Macs: Java's dual-stack sockets are refused there), never
/// an outside address. The rest of 127/8 and the any-address are not documented: unknown.
fn is_localhost(ip: IpAddr) -> Match {
    let unknown = |ip: IpAddr| {
        Match::Unknown(format!(
            "whether Seatbelt's `localhost` covers {ip} is not documented"
        ))
    };
    match ip {
        IpAddr::V4(a) if a == Ipv4Addr::LOCALHOST => Match::Yes,
        IpAddr::V6(a) if a == Ipv6Addr::LOCALHOST => Match::Yes,
        IpAddr::V4(a) if a.is_loopback() || a.is_unspecified() => unknown(ip),
        IpAddr::V6(a) if a.is_unspecified() => unknown(ip),
        _ => Match::No,
    }
}

/// Applies `test` to a path argument that is in the form the kernel's paths are in.
pub(super) fn path_argument(arg: &str, test: impl FnOnce(&[u8]) -> bool) -> Result<Match, String> {
    let arg = arg.as_bytes();
    if is_normal_absolute(arg) {
        Ok(Match::of(test(arg)))
    } else {
        Err(not_normal_why(&String::from_utf8_lossy(arg)))
    }
}

/// `root` itself or beneath it, component-wise: `/a` holds `/a/b`, not `/ab`.
pub(super) fn is_subpath(path: &[u8], root: &[u8]) -> bool {
    root == b"/"
        || path == root
        || path
            .strip_prefix(root)
            .is_some_and(|rest| rest.first() == Some(&b'/'))
}

pub(super) fn regex_matches(pattern: &Pattern, input: &[u8]) -> Result<Match, String> {
    let ere = pattern
        .translated
        .as_ref()
        .map_err(|e| regex_why(&pattern.source, e))?;
    ere.matches(input).map(Match::of).map_err(str::to_string)
}

/// A rule's filters are alternatives.
pub(super) fn rule_matches(rule: &Rule, subject: &Subject) -> Match {
    Match::any(rule.filters.iter().map(|f| filter_matches(f, subject)))
}
