//! A proxy request's head, read and parsed strictly: the request line and the header lines,
//! each ending in CRLF, ASCII only, at most 64 KiB. What the client sent after the head (a
//! body, early TLS bytes) is kept for the host.

use std::io::{self, Read};

use sandboxer::network::{Host, HostError, parse_authority};

/// The most a request head may take.
const MAX_HEAD: usize = 64 * 1024;

/// Why a request cannot be served (the client gets 400).
#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    #[error("cannot read the request: {0}")]
    Read(#[from] io::Error),
    #[error("the connection closed before the request's head ended")]
    Closed,
    #[error("the request's head is longer than 64 KiB")]
    TooLong,
    #[error("the request's head is not ASCII text with CRLF line ends")]
    NotText,
    #[error("the request line is not `METHOD target HTTP/1.x`")]
    RequestLine,
    #[error("a header line is not `name: value`")]
    HeaderLine,
    #[error("a plain request's target is not an absolute http:// URI")]
    NotAbsolute,
    #[error("the URI has a fragment ('#')")]
    Fragment,
    #[error("the Host header does not name the URI's host and port")]
    HostHeader,
    #[error("{0}")]
    Host(#[from] HostError),
}

/// A parsed request head.
#[derive(Debug)]
pub struct Head {
    pub method: String,
    /// The request target as sent.
    pub target: String,
    pub version: String,
    pub headers: Vec<(String, String)>,
    /// Bytes read past the head.
    pub rest: Vec<u8>,
}

/// Where a request goes: a CONNECT tunnel, or a plain HTTP request for `path` on the host.
#[derive(Debug, PartialEq, Eq)]
pub enum Destination {
    Tunnel { host: Host, port: u16 },
    Plain { host: Host, port: u16, path: String },
}

impl Destination {
    pub fn host_port(&self) -> (&Host, u16) {
        match self {
            Destination::Tunnel { host, port } | Destination::Plain { host, port, .. } => {
                (host, *port)
            }
        }
    }
}

/// Reads a head from `stream`.
#[cfg(test)]
pub fn read(stream: &mut impl Read) -> Result<Head, HeadError> {
    read_after(stream, Vec::new())
}

/// Reads a head from `stream`, of which `buf` was read already.
pub fn read_after(stream: &mut impl Read, mut buf: Vec<u8>) -> Result<Head, HeadError> {
    let mut chunk = [0u8; 4096];
    let mut searched_from = 0;
    let end = loop {
        if let Some(i) = buf[searched_from..]
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
        {
            break searched_from + i + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err(HeadError::TooLong);
        }
        searched_from = buf.len().saturating_sub(3);
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(HeadError::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let rest = buf.split_off(end);
    parse(&buf, rest)
}

fn parse(head: &[u8], rest: Vec<u8>) -> Result<Head, HeadError> {
    let text = std::str::from_utf8(head).map_err(|_| HeadError::NotText)?;
    let text = text.strip_suffix("\r\n\r\n").ok_or(HeadError::NotText)?;
    // A bare CR or LF, or any other control character, is refused: a line is what CRLF ends.
    let lines: Vec<&str> = text.split("\r\n").collect();
    if lines
        .iter()
        .any(|l| !l.is_ascii() || l.chars().any(|c| c.is_ascii_control() && c != '\t'))
    {
        return Err(HeadError::NotText);
    }
    let mut words = lines[0].split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err(HeadError::RequestLine);
    };
    let token = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c))
    };
    if !token(method) || target.is_empty() || !matches!(version, "HTTP/1.0" | "HTTP/1.1") {
        return Err(HeadError::RequestLine);
    }
    let mut headers = Vec::new();
    for line in &lines[1..] {
        let (name, value) = line.split_once(':').ok_or(HeadError::HeaderLine)?;
        if !token(name) {
            return Err(HeadError::HeaderLine);
        }
        headers.push((
            name.to_string(),
            value.trim_matches([' ', '\t']).to_string(),
        ));
    }
    Ok(Head {
        method: method.into(),
        target: target.into(),
        version: version.into(),
        headers,
        rest,
    })
}

impl Head {
    /// The head `CONNECT host:port` would have: what a loopback port's client asks.
    pub fn tunnel(host: &Host, port: u16) -> Head {
        Head {
            method: "CONNECT".into(),
            target: format!("{host}:{port}"),
            version: "HTTP/1.1".into(),
            headers: Vec::new(),
            rest: Vec::new(),
        }
    }

    /// Where the request goes. A plain request's Host header, when present, must name the
    /// URI's host and port (one Host header at most): a host that routes by the header must
    /// not be told another name than the one checked.
    pub fn destination(&self) -> Result<Destination, HeadError> {
        if self.method == "CONNECT" {
            let (host, port) = parse_authority(&self.target, None)?;
            return Ok(Destination::Tunnel { host, port });
        }
        let scheme = self
            .target
            .get(..7)
            .filter(|s| s.eq_ignore_ascii_case("http://"));
        let after = scheme
            .map(|_| &self.target[7..])
            .ok_or(HeadError::NotAbsolute)?;
        if after.contains('#') {
            return Err(HeadError::Fragment);
        }
        let end = after.find(['/', '?']).unwrap_or(after.len());
        let (authority, path) = after.split_at(end);
        let (host, port) = parse_authority(authority, Some(80))?;
        let path = match path {
            "" => "/".to_string(),
            p if p.starts_with('?') => format!("/{p}"),
            p => p.to_string(),
        };
        let mut named = self
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("host"));
        match (named.next(), named.next()) {
            (None, _) => {}
            (Some((_, value)), None) => {
                if parse_authority(value, Some(80)).ok() != Some((host.clone(), port)) {
                    return Err(HeadError::HostHeader);
                }
            }
            (Some(_), Some(_)) => return Err(HeadError::HostHeader),
        }
        Ok(Destination::Plain { host, port, path })
    }

    /// The head to send the host for a plain request: the path in origin form, the proxy's
    /// own headers dropped, a Host header, and `Connection: close`: one request per
    /// connection, so that a second request on it cannot name another host unchecked.
    pub fn forwarded(&self, host: &Host, port: u16, path: &str) -> Vec<u8> {
        const DROPPED: [&str; 4] = [
            "proxy-connection",
            "proxy-authorization",
            "connection",
            "keep-alive",
        ];
        let mut out = format!("{} {} {}\r\n", self.method, path, self.version);
        let mut has_host = false;
        for (name, value) in &self.headers {
            let lower = name.to_ascii_lowercase();
            has_host |= lower == "host";
            if !DROPPED.contains(&lower.as_str()) {
                out.push_str(&format!("{name}: {value}\r\n"));
            }
        }
        if !has_host {
            match port {
                80 => out.push_str(&format!("Host: {host}\r\n")),
                _ => out.push_str(&format!("Host: {host}:{port}\r\n")),
            }
        }
        out.push_str("Connection: close\r\n\r\n");
        out.into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Result<Head, HeadError> {
        read(&mut text.as_bytes())
    }

    fn dest(text: &str) -> Result<Destination, HeadError> {
        head(text)?.destination()
    }

    #[test]
    fn requests_name_their_destination() {
        let name = |s: &str| Host::Name(s.into());
        assert_eq!(
            dest("CONNECT api.example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap(),
            Destination::Tunnel {
                host: name("api.example.com"),
                port: 443
            }
        );
        assert_eq!(
            dest("GET http://Example.com/a?b HTTP/1.1\r\nHost: example.COM:80\r\n\r\n").unwrap(),
            Destination::Plain {
                host: name("example.com"),
                port: 80,
                path: "/a?b".into()
            }
        );
        assert_eq!(
            dest("GET HTTP://example.com:8080?q HTTP/1.0\r\n\r\n").unwrap(),
            Destination::Plain {
                host: name("example.com"),
                port: 8080,
                path: "/?q".into()
            }
        );
        let h = head("POST http://example.com/x HTTP/1.1\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi").unwrap();
        assert_eq!(h.rest, b"hi");
        assert_eq!(
            String::from_utf8(h.forwarded(&name("example.com"), 80, "/x")).unwrap(),
            "POST /x HTTP/1.1\r\nContent-Length: 2\r\nHost: example.com\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn malformed_requests_are_refused() {
        for text in [
            "CONNECT api.example.com HTTP/1.1\r\n\r\n",
            "CONNECT api.example.com:443 HTTP/2\r\n\r\n",
            "CONNECT  api.example.com:443 HTTP/1.1\r\n\r\n",
            "CONNECT api.example.com:443 HTTP/1.1\nHost: x\r\n\r\n",
            "CONNECT api.example.com:443\0 HTTP/1.1\r\n\r\n",
            "CONNECT user@api.example.com:443 HTTP/1.1\r\n\r\n",
            "CONNECT api.example.com.:443 HTTP/1.1\r\n\r\n",
            "CONNECT api%2eexample.com:443 HTTP/1.1\r\n\r\n",
            "CONNECT bücher.example:443 HTTP/1.1\r\n\r\n",
            "GET /relative HTTP/1.1\r\nHost: example.com\r\n\r\n",
            "GET https://example.com/ HTTP/1.1\r\n\r\n",
            "GET http://example.com#frag HTTP/1.1\r\n\r\n",
            "GET http://example.com/#frag HTTP/1.1\r\n\r\n",
            "GET http://user@example.com/ HTTP/1.1\r\n\r\n",
            "GET http://example.com/ HTTP/1.1\r\nHost: other.com\r\n\r\n",
            "GET http://example.com/ HTTP/1.1\r\nHost: example.com:81\r\n\r\n",
            "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nHost: example.com\r\n\r\n",
            "GET http://example.com/ HTTP/1.1\r\n folded\r\n\r\n",
            "GET http://example.com/ HTTP/1.1\r\nbad header\r\n\r\n",
            "GET http://2130706433/ HTTP/1.1\r\n\r\n",
            "GET http://example.com",
        ] {
            assert!(dest(text).is_err(), "{text:?}");
        }
        let long = format!(
            "GET http://example.com/{} HTTP/1.1\r\n\r\n",
            "a".repeat(70_000)
        );
        assert!(matches!(head(&long), Err(HeadError::TooLong)));
    }
}
