//! A request's host, parsed strictly: one spelling per destination, everything else refused.
//!
//! A name is ASCII letters, digits and `-` in dot-separated labels, compared in lower case.
//! An IPv4 address is the dotted quad of four decimal numbers without leading zeros; an IPv6
//! address is written in brackets, without a zone. Whatever a resolver or a URL parser might
//! read as an address in another way (`2130706433`, `0177.0.0.1`, `0x7f.1`, `127.1`) is
//! refused, as are user info, `#`, `?`, `%`, trailing dots, NUL and non-ASCII (an IDN is
//! written in its punycode, `xn--…`, and matches only as spelled).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A destination host: a lower-case name or an address (IPv4-mapped IPv6 folded to IPv4).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(IpAddr::V4(ip)) => write!(f, "{ip}"),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
        }
    }
}

/// Why a host or authority was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("the host is empty")]
    Empty,
    #[error("the host has a character no host name has: {0:?}")]
    Character(char),
    #[error("the host is not ASCII; write an international name in its punycode (xn--…)")]
    NotAscii,
    #[error("the host has user info ('@')")]
    UserInfo,
    #[error("the host ends with a dot")]
    TrailingDot,
    #[error("the host has an empty label")]
    EmptyLabel,
    #[error("the host has a label longer than 63 characters")]
    LongLabel,
    #[error("the host is longer than 253 characters")]
    LongName,
    #[error("the host has a label that starts or ends with '-'")]
    Hyphen,
    #[error("the host reads as an address in a form other than a dotted quad: {0:?}")]
    NumericName(String),
    #[error("the bracketed address is not an IPv6 address without a zone: {0:?}")]
    BadIpv6(String),
    #[error("the port is missing")]
    NoPort,
    #[error("the port is not a number from 1 to 65535 without leading zeros: {0:?}")]
    BadPort(String),
}

impl Host {
    /// Parses a host as written in an authority (`example.com`, `10.0.0.1`, `[::1]`).
    pub fn parse(text: &str) -> Result<Host, HostError> {
        if text.is_empty() {
            return Err(HostError::Empty);
        }
        if !text.is_ascii() {
            return Err(HostError::NotAscii);
        }
        if text.contains('@') {
            return Err(HostError::UserInfo);
        }
        if let Some(inner) = text.strip_prefix('[') {
            let bad = || HostError::BadIpv6(text.into());
            let inner = inner.strip_suffix(']').ok_or_else(bad)?;
            let ip: Ipv6Addr = inner.parse().map_err(|_| bad())?;
            return Ok(Host::Ip(IpAddr::V6(ip).to_canonical()));
        }
        if let Some(c) = text
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-')))
        {
            return Err(HostError::Character(c));
        }
        if text.ends_with('.') {
            return Err(HostError::TrailingDot);
        }
        // The dotted quad, strictly (std refuses leading zeros and short forms).
        if let Ok(ip) = text.parse::<Ipv4Addr>() {
            return Ok(Host::Ip(IpAddr::V4(ip)));
        }
        if text.len() > 253 {
            return Err(HostError::LongName);
        }
        let labels: Vec<&str> = text.split('.').collect();
        for label in &labels {
            if label.is_empty() {
                return Err(HostError::EmptyLabel);
            }
            if label.len() > 63 {
                return Err(HostError::LongLabel);
            }
            if label.starts_with('-') || label.ends_with('-') {
                return Err(HostError::Hyphen);
            }
        }
        // A URL parser (WHATWG) reads a host whose last label is a number (decimal, or hex
        // with 0x) as an IPv4 address in one of its old forms; so may a resolver.
        let last = labels.last().expect("split yields one");
        if looks_numeric(last) {
            return Err(HostError::NumericName(text.into()));
        }
        Ok(Host::Name(text.to_ascii_lowercase()))
    }

    /// The address, for a literal.
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Host::Ip(ip) => Some(*ip),
            Host::Name(_) => None,
        }
    }
}

/// A decimal number, or `0x` followed by hex digits (or nothing).
fn looks_numeric(label: &str) -> bool {
    let lower = label.to_ascii_lowercase();
    match lower.strip_prefix("0x") {
        Some(hex) => hex.chars().all(|c| c.is_ascii_hexdigit()),
        None => lower.chars().all(|c| c.is_ascii_digit()),
    }
}

/// Parses a port: 1 to 65535, decimal, no sign, no leading zero.
pub fn parse_port(text: &str) -> Result<u16, HostError> {
    let bad = || HostError::BadPort(text.into());
    if text.is_empty() || text.starts_with('0') || !text.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    text.parse::<u16>().map_err(|_| bad())
}

/// Parses `host:port` or `host` (then `default_port`, or [`HostError::NoPort`] if none): the
/// authority of a CONNECT request or an absolute URI. The characters of a path, query,
/// fragment or percent-encoding are refused, not cut off.
pub fn parse_authority(text: &str, default_port: Option<u16>) -> Result<(Host, u16), HostError> {
    if let Some(c) = text
        .chars()
        .find(|c| matches!(c, '/' | '\\' | '?' | '#' | '%') || c.is_control() || *c == ' ')
    {
        return Err(HostError::Character(c));
    }
    if text.contains('@') {
        return Err(HostError::UserInfo);
    }
    // The port follows the last ':' after a closing bracket, or the only ':' of a name.
    let split = match text.rfind(']') {
        Some(close) => text[close..].find(':').map(|i| close + i),
        None => text.find(':'),
    };
    let (host, port) = match split {
        Some(i) => (&text[..i], Some(&text[i + 1..])),
        None => (text, None),
    };
    let host = Host::parse(host)?;
    let port = match (port, default_port) {
        (Some(p), _) => parse_port(p)?,
        (None, Some(p)) => p,
        (None, None) => return Err(HostError::NoPort),
    };
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Host {
        Host::Name(s.into())
    }

    #[test]
    fn good_hosts_parse_to_one_spelling() {
        let v4 = |a, b, c, d| Host::Ip(IpAddr::V4(Ipv4Addr::new(a, b, c, d)));
        for (text, want) in [
            ("example.com", name("example.com")),
            ("API.Anthropic.COM", name("api.anthropic.com")),
            ("xn--bcher-kva.example", name("xn--bcher-kva.example")),
            ("a-b.c0", name("a-b.c0")),
            ("1password.com", name("1password.com")),
            ("123.example.com", name("123.example.com")),
            ("localhost", name("localhost")),
            ("127.0.0.1", v4(127, 0, 0, 1)),
            ("[::1]", Host::Ip("::1".parse().unwrap())),
            ("[::ffff:127.0.0.1]", v4(127, 0, 0, 1)),
            ("[::FFFF:7f00:1]", v4(127, 0, 0, 1)),
        ] {
            assert_eq!(Host::parse(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn every_trick_is_refused() {
        for text in [
            "",
            "example.com.",
            "example.com..",
            ".example.com",
            "a..b",
            "exa\0mple.com",
            "user@example.com",
            "user:pw@example.com",
            "exam ple.com",
            "exa%6dple.com",
            "example.com%00",
            "bücher.example",
            "аpi.anthropic.com", // Cyrillic а
            "api.anthropic.com\u{3002}",
            "example.com#",
            "example.com?",
            "under_score.com",
            "-a.com",
            "a-.com",
            "2130706433",
            "0177.0.0.1",
            "0x7f.0.0.1",
            "0x7f.1",
            "0x7F000001",
            "127.1",
            "127.0.1",
            "127.000.000.001",
            "1.2.3.4.5",
            "256.0.0.1",
            "0x",
            "a.0x10",
            "169.254.43518",
            "[127.0.0.1]",
            "[fe80::1%25eth0]",
            "[fe80::1%eth0]",
            "[::1",
            "::1",
            "[::1]x",
            &"a".repeat(64),
            &["a"; 128].join("."),
        ] {
            assert!(Host::parse(text).is_err(), "{text:?} parsed");
        }
    }

    #[test]
    fn authorities_take_a_port_or_the_default() {
        let ok = |t: &str, d| parse_authority(t, d).unwrap();
        assert_eq!(ok("example.com:443", None), (name("example.com"), 443));
        assert_eq!(ok("Example.com", Some(80)), (name("example.com"), 80));
        assert_eq!(
            ok("[::1]:8080", None),
            (Host::Ip("::1".parse().unwrap()), 8080)
        );
        for text in [
            "example.com",
            "example.com:",
            "example.com:0",
            "example.com:080",
            "example.com:65536",
            "example.com:+1",
            "example.com:443:443",
            "example.com/:443",
            "example.com:443/",
            "example.com?:443",
            "example.com#:443",
            "user@example.com:443",
            "exa%2emple.com:443",
            "[::1]",
            "[::1]:",
            "[fe80::1%25eth0]:80",
            "::1:80",
            "example.com :443",
            "example.com\r\n:443",
        ] {
            assert!(parse_authority(text, None).is_err(), "{text:?} parsed");
        }
    }
}
