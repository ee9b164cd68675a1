//! A launch's network: its `[network]` section (the state root's mode, the adapter's hosts,
//! a model endpoint's address), and the egress proxy the dispatcher serves for it while it
//! runs, every decision a chat event (docs/network.md).

use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use sandboxer::network::{Host, NetworkMode, NetworkRules};

use super::LAUNCH_DIR;
use super::endpoint::ModelEndpoint;
use super::error::LaunchError;
use crate::adapter::Adapter;
use crate::egress::{Proxy, ProxyHandle};
use crate::events::{Event, EventKind, EventLog};
use crate::grants::LaunchNetwork;
use crate::ids::ChatId;
use crate::state::StateRoot;

/// The proxy's socket in a chat's runtime: in the launch's folder, which the chat can read
/// but not change (so it cannot put a socket of its own there).
pub const EGRESS_SOCKET: &str = "egress.sock";

pub fn egress_socket(runtime: &Path) -> PathBuf {
    runtime.join(LAUNCH_DIR).join(EGRESS_SOCKET)
}

/// The launch's `[network]`: the state root's mode; in `allowlist`, the adapter's hosts, the
/// state root's own and a model endpoint's; a model endpoint on the machine's loopback by its
/// port (reachable in `public` and `allowlist`). A Mac's launch says `open`: its profile does
/// not confine the network yet (docs/network.md), and the prompt note must not say otherwise.
pub(super) fn launch_network(
    state: &StateRoot,
    adapter: &Adapter,
    endpoint: Option<&ModelEndpoint>,
    runtime: &Path,
    target: sandboxer::Target,
) -> LaunchNetwork {
    let config = &state.config().network;
    let mut allow: Vec<String> = adapter.network_hosts.clone();
    allow.extend(config.allow.iter().cloned());
    let mut loopback = Vec::new();
    if let Some((host, port)) = endpoint.and_then(|e| authority(&e.url)) {
        match Host::parse(&host) {
            Ok(h) if is_loopback(&h) => loopback.push(port),
            Ok(_) => allow.push(format!("{host}:{port}")),
            Err(_) => {}
        }
    }
    allow.sort();
    allow.dedup();
    LaunchNetwork {
        mode: match target {
            sandboxer::Target::Linux => config.mode(),
            sandboxer::Target::Macos => NetworkMode::Open,
        },
        allow,
        loopback,
        proxy: egress_socket(runtime),
    }
}

/// The host and port of an `http(s)://` URL checked by [`ModelEndpoint::new`].
fn authority(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split('/').next()?;
    let default = if scheme == "https" { 443 } else { 80 };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => match p.parse::<u16>() {
            Ok(port) if !h.is_empty() => (h, port),
            _ => (authority, default),
        },
        _ => (authority, default),
    };
    Some((host.to_string(), port))
}

fn is_loopback(h: &Host) -> bool {
    match h {
        Host::Name(n) => n == "localhost" || n.ends_with(".localhost"),
        Host::Ip(IpAddr::V4(a)) => a.is_loopback(),
        Host::Ip(IpAddr::V6(a)) => a.is_loopback(),
    }
}

/// Serves the egress proxy of a launch whose policy names one, until the handle is dropped:
/// the rules from the launch's own policy text (never re-read from the runtime), each
/// connection recorded in the chat's events. `None` when its network has no proxy.
pub fn serve_egress(
    policy_text: &str,
    chat: &ChatId,
    events: &EventLog,
) -> Result<Option<ProxyHandle>, LaunchError> {
    let bad = |why: String| LaunchError::Io {
        what: "the launch's egress proxy".into(),
        why,
    };
    let doc: sandboxer::PolicyDocument =
        toml::from_str(policy_text).map_err(|e| bad(format!("its policy: {e}")))?;
    let Some(section) = doc.network else {
        return Ok(None);
    };
    let Some(proxy) = section.proxy.as_ref().map(|p| p.get_ref().clone()) else {
        return Ok(None);
    };
    // Only a Linux sandbox reaches its proxy so far (docs/network.md, "Where it is
    // enforced"): a Mac's profile leaves the network as it is.
    if !cfg!(target_os = "linux") {
        return Ok(None);
    }
    let mode = NetworkMode::parse(section.mode.get_ref())
        .ok_or_else(|| bad(format!("unknown mode {:?}", section.mode.get_ref())))?;
    let loopback: Vec<u16> = section
        .loopback
        .iter()
        .filter_map(|p| u16::try_from(*p.get_ref()).ok())
        .collect();
    let rules = NetworkRules::with_entries(
        mode,
        section.allow.iter().map(|a| a.get_ref().as_str()),
        &loopback,
    )
    .map_err(|e| bad(e.to_string()))?;
    let listener = bind(&proxy).map_err(|e| bad(format!("{}: {e}", proxy.display())))?;
    let events = events.clone();
    let chat = chat.clone();
    let handle = Proxy::new(rules, move |e| {
        if let Err(err) = events.append_unsynced(&Event::new(&chat, EventKind::Egress(e))) {
            eprintln!("dispatcher: network event not recorded: {err}");
        }
    })
    .serve(listener)
    .map_err(|e| bad(e.to_string()))?;
    Ok(Some(handle))
}

/// Binds the proxy's socket, replacing a stale one, readable and writable by the person only.
/// It is bound through its folder (`/proc/self/fd/N/NAME`): a socket address holds 108 bytes,
/// and a runtime's path may be longer.
fn bind(path: &Path) -> std::io::Result<UnixListener> {
    use std::os::fd::AsRawFd;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            return Err(std::io::Error::other(
                "a folder is in the way of the socket",
            ));
        }
        Ok(_) => std::fs::remove_file(path)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let (Some(folder), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::Error::other(
            "the socket's path names no file in a folder",
        ));
    };
    let folder = std::fs::File::open(folder)?;
    let short = PathBuf::from(format!("/proc/self/fd/{}", folder.as_raw_fd())).join(name);
    let listener = UnixListener::bind(&short)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_authorities() {
        assert_eq!(
            authority("http://127.0.0.1:8080"),
            Some(("127.0.0.1".into(), 8080))
        );
        assert_eq!(
            authority("https://gw.example/v1"),
            Some(("gw.example".into(), 443))
        );
        assert_eq!(authority("http://[::1]:9/x"), Some(("[::1]".into(), 9)));
        assert_eq!(authority("http://[::1]/x"), Some(("[::1]".into(), 80)));
        assert_eq!(
            authority("http://localhost"),
            Some(("localhost".into(), 80))
        );
    }
}
