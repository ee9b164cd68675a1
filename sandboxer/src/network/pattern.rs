//! An `allow` entry of a policy's `[network]` section: a host, a wildcard over a domain's
//! subdomains, or an address, each with an optional port.
//!
//! - `api.example.com` matches that name only (any case; parsed like a request's host).
//! - `*.example.com` matches every name that ends in `.example.com` with at least one label
//!   before it (`a.example.com`, `a.b.example.com`), never `example.com` itself. The `*` is a
//!   whole first label; what follows it has at least two labels (`*.com` is refused).
//! - `203.0.113.5`, `[2001:db8::5]` match that address only, written as a literal.
//! - `:port` after any of them restricts it to that port; without, every port.
//!
//! The machine itself is never an `allow` entry: loopback and `localhost` are named by port
//! (`loopback = [8080]`), and link-local, unspecified, multicast and metadata addresses are
//! never reachable.

use std::fmt;

use super::address::{AddressClass, OwnAddresses, classify};
use super::host::{Host, HostError, parse_port};

/// One parsed `allow` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPattern {
    host: PatternHost,
    port: Option<u16>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum PatternHost {
    Exact(Host),
    /// `*.suffix`: stored as `.suffix`, lower case.
    Subdomains(String),
}

/// Why an `allow` entry was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("{0}")]
    Host(#[from] HostError),
    #[error("'*' may only be a whole first label, as in \"*.example.com\"")]
    Wildcard,
    #[error("\"*.{0}\" would match a whole top-level domain; name a domain under it")]
    WideWildcard(String),
    #[error("the machine itself is named by port: write loopback = [port] instead")]
    Loopback,
    #[error("{0} addresses are never reachable")]
    Unreachable(AddressClass),
}

impl HostPattern {
    /// Parses an entry as written in a policy.
    pub fn parse(text: &str) -> Result<HostPattern, PatternError> {
        let (host, port) = split_port(text)?;
        let host = match host.strip_prefix("*.") {
            Some(suffix) => {
                if suffix.contains('*') {
                    return Err(PatternError::Wildcard);
                }
                match Host::parse(suffix)? {
                    Host::Name(name) if name.contains('.') => {
                        PatternHost::Subdomains(format!(".{name}"))
                    }
                    Host::Name(name) => return Err(PatternError::WideWildcard(name)),
                    Host::Ip(_) => return Err(PatternError::Wildcard),
                }
            }
            None if host.contains('*') => return Err(PatternError::Wildcard),
            None => {
                let host = Host::parse(host)?;
                match &host {
                    Host::Name(name) if is_localhost(name) => return Err(PatternError::Loopback),
                    Host::Name(_) => {}
                    Host::Ip(ip) => match classify(*ip, &OwnAddresses::default()) {
                        AddressClass::Outside => {}
                        AddressClass::Loopback => return Err(PatternError::Loopback),
                        other => return Err(PatternError::Unreachable(other)),
                    },
                }
                PatternHost::Exact(host)
            }
        };
        Ok(HostPattern { host, port })
    }

    /// Whether a request for `host` on `port` is one this entry allows.
    pub fn matches(&self, host: &Host, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        match (&self.host, host) {
            (PatternHost::Exact(want), host) => want == host,
            (PatternHost::Subdomains(suffix), Host::Name(name)) => {
                name.len() > suffix.len() && name.ends_with(suffix.as_str())
            }
            (PatternHost::Subdomains(_), Host::Ip(_)) => false,
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            PatternHost::Exact(host) => write!(f, "{host}")?,
            PatternHost::Subdomains(suffix) => write!(f, "*{suffix}")?,
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

/// `localhost` and its subdomains, which resolvers answer with loopback themselves.
pub fn is_localhost(name: &str) -> bool {
    name == "localhost" || name.ends_with(".localhost")
}

/// The host part and the port of an entry (a port after the last ':' of a name or after `]`).
fn split_port(text: &str) -> Result<(&str, Option<u16>), PatternError> {
    let split = match text.rfind(']') {
        Some(close) => text[close..].find(':').map(|i| close + i),
        None => text.rfind(':'),
    };
    Ok(match split {
        Some(i) => (&text[..i], Some(parse_port(&text[i + 1..])?)),
        None => (text, None),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(s: &str) -> Host {
        Host::parse(s).unwrap()
    }

    #[test]
    fn entries_match_as_documented() {
        let p = |s: &str| HostPattern::parse(s).unwrap();
        let cases = [
            ("api.example.com", "api.example.com", 443, true),
            ("api.example.com", "API.EXAMPLE.COM", 80, true),
            ("api.example.com", "example.com", 443, false),
            ("api.example.com", "x.api.example.com", 443, false),
            ("api.example.com", "api.example.com.evil.com", 443, false),
            ("api.example.com:443", "api.example.com", 443, true),
            ("api.example.com:443", "api.example.com", 80, false),
            ("*.example.com", "a.example.com", 443, true),
            ("*.example.com", "a.b.example.com", 443, true),
            ("*.example.com", "example.com", 443, false),
            ("*.example.com", "aexample.com", 443, false),
            ("*.example.com", "example.com.evil.com", 443, false),
            ("*.example.com:8443", "a.example.com", 8443, true),
            ("*.example.com:8443", "a.example.com", 443, false),
            ("203.0.113.5", "203.0.113.5", 1, true),
            ("203.0.113.5", "[::ffff:203.0.113.5]", 1, true),
            ("203.0.113.5:80", "203.0.113.5", 81, false),
            ("[2001:db8::5]:443", "[2001:db8::5]", 443, true),
            ("*.example.com", "[2001:db8::5]", 443, false),
        ];
        for (entry, h, port, want) in cases {
            assert_eq!(
                p(entry).matches(&host(h), port),
                want,
                "{entry} vs {h}:{port}"
            );
        }
        assert_eq!(p("*.Example.COM:443").to_string(), "*.example.com:443");
        assert_eq!(p("[2001:DB8::5]").to_string(), "[2001:db8::5]");
    }

    #[test]
    fn bad_entries_are_refused() {
        for entry in [
            "",
            "*",
            "*.com",
            "*.*.example.com",
            "a.*.example.com",
            "*example.com",
            "ex*ample.com",
            "*.203.0.113.5",
            "example.com.",
            "example.com:0",
            "example.com:",
            "example.com:http",
            "user@example.com",
            "https://example.com",
            "example.com/path",
            "bücher.example",
            "127.0.0.1",
            "127.0.0.1:8080",
            "[::1]:8080",
            "localhost:8080",
            "a.localhost",
            "169.254.169.254",
            "[fe80::1]",
            "0.0.0.0:80",
            "224.0.0.1",
            "2130706433",
            "0x7f.1",
        ] {
            assert!(HostPattern::parse(entry).is_err(), "{entry:?} parsed");
        }
    }
}
