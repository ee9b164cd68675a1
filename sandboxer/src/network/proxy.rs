//! `[network] proxy`: where a sandbox reaches the dispatcher's egress proxy, which differs by
//! platform. On Linux the sandbox has a network of its own, and its relay carries each
//! connection to the proxy's Unix socket outside it; on macOS the sandbox shares the machine's
//! network, and its Seatbelt profile lets it connect to one TCP port on loopback only, where
//! the proxy listens (docs/network.md, "Where it is enforced").

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

use crate::target::Target;

/// Where the egress proxy is reached.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProxyEndpoint {
    /// Linux: the proxy's Unix socket, an absolute path.
    Socket(PathBuf),
    /// macOS: the proxy's TCP port on the machine's loopback, written `127.0.0.1:PORT`. The
    /// profile allows it on 127.0.0.1 and ::1 alike (Seatbelt's `localhost`), so the
    /// dispatcher holds the port on both.
    Loopback(u16),
}

/// Why a `proxy` value does not fit its target.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    #[error("{0:?}: on Linux the proxy is the egress proxy's Unix socket, an absolute path")]
    NotASocketPath(String),
    #[error(
        "{0:?}: on macOS the proxy is a TCP port on the machine's loopback, written \
         \"127.0.0.1:PORT\" (PORT 1 to 65535, decimal, no leading zeros)"
    )]
    NotALoopbackPort(String),
}

impl ProxyEndpoint {
    /// Reads a `proxy` value for `target`. A Linux path is only checked to be absolute here;
    /// the policy loader checks it as it checks every rule path.
    pub fn parse(text: &str, target: Target) -> Result<ProxyEndpoint, ProxyError> {
        match target {
            Target::Linux if text.starts_with('/') => Ok(ProxyEndpoint::Socket(text.into())),
            Target::Linux => Err(ProxyError::NotASocketPath(text.into())),
            Target::Macos => text
                .strip_prefix("127.0.0.1:")
                .and_then(|p| super::parse_port(p).ok())
                .map(ProxyEndpoint::Loopback)
                .ok_or_else(|| ProxyError::NotALoopbackPort(text.into())),
        }
    }

    /// The Unix socket, on Linux.
    pub fn socket(&self) -> Option<&PathBuf> {
        match self {
            ProxyEndpoint::Socket(p) => Some(p),
            ProxyEndpoint::Loopback(_) => None,
        }
    }

    /// The loopback port, on macOS.
    pub fn port(&self) -> Option<u16> {
        match self {
            ProxyEndpoint::Loopback(p) => Some(*p),
            ProxyEndpoint::Socket(_) => None,
        }
    }
}

/// As the policy writes it: the path, or `127.0.0.1:PORT`.
impl fmt::Display for ProxyEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyEndpoint::Socket(p) => write!(f, "{}", p.display()),
            ProxyEndpoint::Loopback(port) => write!(f, "127.0.0.1:{port}"),
        }
    }
}

/// The environment that points a confined program at the proxy on `127.0.0.1:port`: every
/// common spelling of the proxy variables, and nothing exempt from them (`NO_PROXY` empty).
/// A program that ignores them has no other way out: it fails, it does not leak. The same on
/// both platforms (Linux: the relay's port inside the sandbox; macOS: the proxy's own).
pub fn proxy_env(port: u16) -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{port}");
    let mut env: Vec<(String, String)> = [
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "ALL_PROXY",
        "https_proxy",
        "http_proxy",
        "all_proxy",
    ]
    .iter()
    .map(|k| (k.to_string(), url.clone()))
    .collect();
    env.push(("NO_PROXY".into(), String::new()));
    env.push(("no_proxy".into(), String::new()));
    // Node 24 and later: its own fetch follows the variables only when told to.
    env.push(("NODE_USE_ENV_PROXY".into(), "1".into()));
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_target_takes_its_own_form() {
        assert_eq!(
            ProxyEndpoint::parse("/run/e.sock", Target::Linux),
            Ok(ProxyEndpoint::Socket("/run/e.sock".into()))
        );
        assert_eq!(
            ProxyEndpoint::parse("127.0.0.1:49152", Target::Macos),
            Ok(ProxyEndpoint::Loopback(49152))
        );
        assert_eq!(
            ProxyEndpoint::Loopback(49152).to_string(),
            "127.0.0.1:49152"
        );
        assert_eq!(ProxyEndpoint::Loopback(8).port(), Some(8));
        assert_eq!(ProxyEndpoint::Loopback(8).socket(), None);
        for bad in ["127.0.0.1:49152", "e.sock", ""] {
            assert_eq!(
                ProxyEndpoint::parse(bad, Target::Linux),
                Err(ProxyError::NotASocketPath(bad.into()))
            );
        }
        for bad in [
            "/run/e.sock",
            "127.0.0.1",
            "127.0.0.1:0",
            "127.0.0.1:65536",
            "127.0.0.1:080",
            "127.0.0.1:+80",
            "127.0.0.1: 80",
            "localhost:80",
            "[::1]:80",
            "0.0.0.0:80",
            "127.0.0.2:80",
            "10.0.0.1:80",
            "80",
        ] {
            assert_eq!(
                ProxyEndpoint::parse(bad, Target::Macos),
                Err(ProxyError::NotALoopbackPort(bad.into())),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_environment_names_the_port_and_exempts_nothing() {
        let env = proxy_env(3128);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        for k in [
            "HTTPS_PROXY",
            "HTTP_PROXY",
            "ALL_PROXY",
            "https_proxy",
            "all_proxy",
        ] {
            assert_eq!(get(k), Some("http://127.0.0.1:3128"), "{k}");
        }
        assert_eq!(get("NO_PROXY"), Some(""));
        assert_eq!(get("no_proxy"), Some(""));
        assert_eq!(get("NODE_USE_ENV_PROXY"), Some("1"));
    }
}
