//! A launch's network: its `[network]` section (the state root's mode, the adapter's hosts,
//! a model endpoint's address), and the egress proxy the dispatcher serves for it while it
//! runs, every decision a chat event (docs/network.md).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use sandboxer::network::{Host, NetworkMode, NetworkRules, ProxyEndpoint};

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

/// Where a launch's sandbox reaches its proxy: on Linux the socket in its launch folder
/// (the relay inside carries connections there); on macOS a port on loopback, free on
/// 127.0.0.1 and ::1 now ([`free_loopback_port`]), which [`serve_egress`] binds on both when
/// the chat starts. The only difference between the platforms' launches.
pub(super) fn proxy_for(
    target: sandboxer::Target,
    runtime: &Path,
) -> Result<ProxyEndpoint, LaunchError> {
    match target {
        sandboxer::Target::Linux => Ok(ProxyEndpoint::Socket(egress_socket(runtime))),
        sandboxer::Target::Macos => {
            free_loopback_port()
                .map(ProxyEndpoint::Loopback)
                .map_err(|e| LaunchError::Io {
                    what: "a loopback port for the launch's egress proxy".into(),
                    why: e.to_string(),
                })
        }
    }
}

/// The launch's `[network]`: the state root's mode; in `allowlist`, the adapter's hosts, the
/// state root's own and a model endpoint's; a model endpoint on the machine's loopback by its
/// port (reachable in `public` and `allowlist`); `proxy` where the sandbox reaches the proxy.
/// The same on both platforms.
pub(super) fn launch_network(
    state: &StateRoot,
    adapter: &Adapter,
    endpoint: Option<&ModelEndpoint>,
    proxy: ProxyEndpoint,
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
        mode: config.mode(),
        allow,
        loopback,
        proxy,
    }
}

/// The proxy variables the dispatcher sets for a confined launch's command: on macOS, where the
/// CLI runs straight under `sandbox-exec`, those naming the proxy's own port; on Linux none,
/// since `sandboxer exec` sets the same variables inside the sandbox for its relay's port
/// (both from [`sandboxer::network::proxy_env`]). Nothing when the network is not proxied.
pub(super) fn command_env(
    network: Option<&LaunchNetwork>,
    confined: bool,
) -> Vec<(String, String)> {
    let proxied = |n: &&LaunchNetwork| {
        confined && matches!(n.mode, NetworkMode::Public | NetworkMode::Allowlist)
    };
    match network.filter(proxied).and_then(|n| n.proxy.port()) {
        Some(port) => sandboxer::network::proxy_env(port),
        None => Vec::new(),
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
    // The form says the platform: a socket path (Linux), or 127.0.0.1:PORT (macOS).
    let target = match proxy.starts_with('/') {
        true => sandboxer::Target::Linux,
        false => sandboxer::Target::Macos,
    };
    let proxy = ProxyEndpoint::parse(&proxy, target).map_err(|e| bad(e.to_string()))?;
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
    let events = events.clone();
    let chat = chat.clone();
    let proxy_server = Proxy::new(rules, move |e| {
        if let Err(err) = events.append_unsynced(&Event::new(&chat, EventKind::Egress(e))) {
            eprintln!("dispatcher: network event not recorded: {err}");
        }
    });
    let handle = match &proxy {
        ProxyEndpoint::Socket(path) => {
            let listener = bind(path).map_err(|e| bad(format!("{}: {e}", path.display())))?;
            proxy_server.serve(listener)
        }
        ProxyEndpoint::Loopback(port) => {
            let held = hold_loopback_port(*port).map_err(|e| bad(format!("{proxy}: {e}")))?;
            proxy_server.serve_all(held.tcp).map(|mut h| {
                h.keep(held.udp);
                h
            })
        }
    }
    .map_err(|e| bad(e.to_string()))?;
    Ok(Some(handle))
}

/// A port on loopback held by the proxy: TCP listeners on 127.0.0.1 and (where the machine
/// has IPv6) ::1, and UDP sockets on both, so that nothing else of the person's can listen
/// where the sandbox may connect (Seatbelt's `localhost` is both addresses, and its `ip`
/// filter any protocol).
struct HeldPort {
    tcp: Vec<TcpListener>,
    udp: Vec<UdpSocket>,
}

/// Binds every socket of [`HeldPort`] on `port`. Any address already taken is an error: the
/// sandbox would reach whatever holds it.
fn hold_loopback_port(port: u16) -> io::Result<HeldPort> {
    let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
    let mut held = HeldPort {
        tcp: vec![TcpListener::bind(v4)?],
        udp: vec![UdpSocket::bind(v4)?],
    };
    match TcpListener::bind(v6) {
        Ok(l) => {
            held.tcp.push(l);
            held.udp.push(UdpSocket::bind(v6)?);
        }
        // No IPv6 loopback here: nothing can listen on ::1 either.
        Err(e) if no_ipv6(&e) => {}
        Err(e) => return Err(e),
    }
    Ok(held)
}

fn no_ipv6(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EADDRNOTAVAIL | libc::EAFNOSUPPORT)
    )
}

/// A port free now on 127.0.0.1 and ::1 for TCP and UDP: the kernel's pick on 127.0.0.1,
/// checked by holding it everywhere ([`hold_loopback_port`]) and let go. Between this and
/// [`serve_egress`] another program could take it; then the launch fails, it does not run
/// with someone else on the port.
pub fn free_loopback_port() -> io::Result<u16> {
    let mut last = None;
    for _ in 0..16 {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        match hold_loopback_port(port) {
            Ok(_) => return Ok(port),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free loopback port")))
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
    use std::io::{Read, Write};
    use std::net::TcpStream;

    use crate::state::ChatSettings;

    /// A Linux launch's proxy is its socket; a Mac's a loopback port free on both addresses.
    #[test]
    fn each_platform_reaches_its_proxy_its_own_way() {
        let runtime = Path::new("/s/runtime/c1");
        assert_eq!(
            proxy_for(sandboxer::Target::Linux, runtime).unwrap(),
            ProxyEndpoint::Socket(egress_socket(runtime))
        );
        let ProxyEndpoint::Loopback(port) = proxy_for(sandboxer::Target::Macos, runtime).unwrap()
        else {
            panic!("a Mac's proxy is a port");
        };
        // Free: the proxy can hold it.
        drop(hold_loopback_port(port).unwrap());
    }

    /// The command's variables: on a Mac the proxy's own port when proxied and confined;
    /// never on Linux (set inside the sandbox), in `open` or `none`, or unconfined.
    #[test]
    fn the_command_env_names_the_macos_proxy() {
        let net = |mode, proxy| LaunchNetwork {
            mode,
            allow: Vec::new(),
            loopback: Vec::new(),
            proxy,
        };
        let mac = net(NetworkMode::Public, ProxyEndpoint::Loopback(49152));
        let env = command_env(Some(&mac), true);
        assert_eq!(env, sandboxer::network::proxy_env(49152));
        assert!(env.contains(&("HTTPS_PROXY".into(), "http://127.0.0.1:49152".into())));
        assert!(command_env(Some(&mac), false).is_empty());
        let allow = net(NetworkMode::Allowlist, ProxyEndpoint::Loopback(49152));
        assert!(!command_env(Some(&allow), true).is_empty());
        for mode in [NetworkMode::Open, NetworkMode::None] {
            assert!(command_env(Some(&net(mode, ProxyEndpoint::Loopback(1))), true).is_empty());
        }
        let linux = net(
            NetworkMode::Public,
            ProxyEndpoint::Socket("/s/e.sock".into()),
        );
        assert!(command_env(Some(&linux), true).is_empty());
        assert!(command_env(None, true).is_empty());
    }

    /// A Mac's proxy, served on Linux (TCP works alike): both loopback addresses answer,
    /// decide by the policy's rules and record each connection; nothing else can bind the
    /// port (TCP or UDP) while it serves, and it is free again once stopped.
    #[test]
    fn a_loopback_proxy_holds_its_port_on_both_addresses() {
        let dir = tempfile::tempdir().unwrap();
        let (state, _) = StateRoot::init(&dir.path().join("state-root"), None).unwrap();
        let chat = ChatId::new("c1").unwrap();
        state
            .add_chat(
                &chat,
                &ChatSettings {
                    mode: "auto".into(),
                },
            )
            .unwrap();
        let events = EventLog::open(&state, &chat).unwrap();
        let port = free_loopback_port().unwrap();
        let policy = format!(
            "version = 1\nbase = \"open\"\n\n[network]\nmode = \"allowlist\"\n\
             allow = [\"allowed.example\"]\nproxy = \"127.0.0.1:{port}\"\n"
        );
        let handle = serve_egress(&policy, &chat, &events).unwrap().unwrap();
        let v6 = TcpListener::bind((Ipv6Addr::LOCALHOST, 0)).is_ok();
        let mut addrs = vec![SocketAddr::from((Ipv4Addr::LOCALHOST, port))];
        if v6 {
            addrs.push(SocketAddr::from((Ipv6Addr::LOCALHOST, port)));
        }
        for addr in &addrs {
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(b"CONNECT refused.example:443 HTTP/1.1\r\n\r\n")
                .unwrap();
            let mut reply = String::new();
            c.read_to_string(&mut reply).unwrap();
            assert!(reply.starts_with("HTTP/1.1 403"), "{addr}: {reply}");
            assert!(TcpListener::bind(addr).is_err(), "{addr} is held (TCP)");
            assert!(UdpSocket::bind(addr).is_err(), "{addr} is held (UDP)");
        }
        drop(handle);
        let egress: Vec<_> = EventLog::read(&state, &chat)
            .unwrap()
            .into_iter()
            .filter(|e| matches!(e.kind, EventKind::Egress(_)))
            .collect();
        assert_eq!(egress.len(), addrs.len());
        // Control: once stopped, the port is anyone's again.
        drop(hold_loopback_port(port).unwrap());
        // A Mac's proxy named on another address is refused, not served.
        let other = policy.replace("127.0.0.1:", "127.0.0.2:");
        assert!(serve_egress(&other, &chat, &events).is_err());
    }

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
