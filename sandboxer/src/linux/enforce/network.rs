//! The command's own network (docs/linux.md, "The network"): PID 1 leaves the machine's
//! network namespace for a new one, before it starts the command, so the command inherits it.
//!
//! The new namespace holds only `lo`, which PID 1 brings up: nothing of the machine (its
//! loopback services, the dispatcher's port, abstract Unix sockets bound outside) and nothing
//! outside is reachable from it. With a relay, PID 1 also listens on the sandbox's loopback —
//! the proxy port the `HTTPS_PROXY` family of variables names, and each port the policy names
//! on the machine's loopback — and carries each connection to the egress proxy's Unix socket:
//! a pathname Unix socket is reached through the file system, whatever the network namespace.
//! The proxy decides; the relay only carries. A loopback port's connection is opened with
//! `CONNECT 127.0.0.1:PORT` first, so it is decided and recorded like any other.
//!
//! The listeners are PID 1's, bound before the command exists: the command can neither bind
//! those ports itself nor reach PID 1's descriptors (PID 1 is outside its Landlock domain and
//! not dumpable).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;
use nix::sched::{CloneFlags, unshare};

use super::error::{EnforceError, Layer};
use crate::linux::plan::NetworkPlan;
use crate::network::copy_stream;

/// What a listener carries its connections to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Carry {
    /// The proxy port: the bytes as they come (the client speaks to the proxy).
    AsIs,
    /// A named port of the machine's loopback: asked of the proxy with `CONNECT` first.
    Loopback(u16),
}

/// The relay's listeners, bound in the sandbox's network, ready to serve.
pub(super) struct Listeners {
    /// The proxy's socket, reached through its folder opened before the command runs
    /// ([`open_socket`]).
    proxy: Arc<Proxy>,
    listeners: Vec<(TcpListener, Carry)>,
}

/// The path PID 1 connects to, and the folder descriptor it goes through: held as long as any
/// relay thread may connect (closed, `/proc/self/fd/N` would name nothing, or another file).
struct Proxy {
    path: PathBuf,
    _folder: Option<OwnedFd>,
}

/// In PID 1, with its capabilities in the sandbox's user namespace: a network namespace of
/// its own with `lo` up, and the relay's listeners. `None` when the plan keeps the machine's
/// network.
pub(super) fn isolate(plan: Option<&NetworkPlan>) -> Result<Option<Listeners>, EnforceError> {
    let Some(net) = plan else { return Ok(None) };
    unshare(CloneFlags::CLONE_NEWNET).map_err(|e| {
        EnforceError::os(
            Layer::Network,
            "unshare(CLONE_NEWNET): a network namespace",
            e,
        )
    })?;
    loopback_up()?;
    let Some(relay) = &net.relay else {
        return Ok(Some(Listeners {
            proxy: Arc::new(Proxy {
                path: PathBuf::new(),
                _folder: None,
            }),
            listeners: Vec::new(),
        }));
    };
    let (fd, via) = open_socket(&relay.proxy)?;
    let mut listeners = Vec::new();
    for (port, carry) in std::iter::once((relay.port, Carry::AsIs))
        .chain(relay.loopback.iter().map(|&p| (p, Carry::Loopback(p))))
    {
        for l in bind(port)? {
            listeners.push((l, carry));
        }
    }
    Ok(Some(Listeners {
        proxy: Arc::new(Proxy {
            path: via,
            _folder: Some(fd),
        }),
        listeners,
    }))
}

/// The folder of the proxy's socket, opened (`O_PATH`), and the path through it that PID 1
/// connects to: `/proc/self/fd/N/NAME`. The folder is the one checked now, whatever is renamed
/// later; the socket is looked up at each connection, so a proxy served anew at that name (a
/// restarted dispatcher) is reached again; and the path stays short, however long the real
/// one (a socket address holds 108 bytes). The socket must be there now.
fn open_socket(path: &Path) -> Result<(OwnedFd, PathBuf), EnforceError> {
    let fail = |what: String| EnforceError::new(Layer::Network, what);
    let (Some(folder), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(fail(format!(
            "the proxy {path:?} names no socket in a folder"
        )));
    };
    let c = std::ffi::CString::new(folder.as_os_str().as_bytes())
        .map_err(|_| fail(format!("the proxy {path:?} contains a NUL byte")))?;
    // SAFETY: a plain open of a NUL-terminated path; the descriptor is owned below.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(fail(format!(
            "opening the folder of the egress proxy's socket {path:?}: {}",
            io::Error::last_os_error()
        )));
    }
    // SAFETY: just opened, owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let meta = nix::sys::stat::fstatat(&fd, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
        .map_err(|e| fail(format!("the egress proxy's socket {path:?}: {e}")))?;
    if meta.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(fail(format!("the egress proxy {path:?} is not a socket")));
    }
    let via = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())).join(name);
    Ok((fd, via))
}

/// Binds `port` on the sandbox's `127.0.0.1`, and on `[::1]` where the kernel has IPv6.
fn bind(port: u16) -> Result<Vec<TcpListener>, EnforceError> {
    let v4 = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).map_err(|e| {
        EnforceError::new(
            Layer::Network,
            format!("listening on the sandbox's 127.0.0.1:{port}: {e}"),
        )
    })?;
    let mut out = vec![v4];
    match TcpListener::bind(SocketAddr::from((Ipv6Addr::LOCALHOST, port))) {
        Ok(v6) => out.push(v6),
        // No IPv6 in this kernel or namespace: `localhost` is 127.0.0.1 only.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EADDRNOTAVAIL | libc::EAFNOSUPPORT)
            ) => {}
        Err(e) => {
            return Err(EnforceError::new(
                Layer::Network,
                format!("listening on the sandbox's [::1]:{port}: {e}"),
            ));
        }
    }
    Ok(out)
}

/// Brings up `lo`, the new namespace's only interface (down when made).
fn loopback_up() -> Result<(), EnforceError> {
    let fail = |e: Errno| EnforceError::os(Layer::Network, "bringing up lo", e);
    // SAFETY: a plain socket for the ioctl, closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(fail(Errno::last()));
    }
    // SAFETY: all-zero is a valid `ifreq`; the name fits with its NUL.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: `req` lives across both calls; the kernel reads and writes only the ifreq.
    let result = unsafe {
        if libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) < 0 {
            Err(Errno::last())
        } else {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            if libc::ioctl(fd, libc::SIOCSIFFLAGS, &req) < 0 {
                Err(Errno::last())
            } else {
                Ok(())
            }
        }
    };
    // SAFETY: the socket made above.
    unsafe { libc::close(fd) };
    result.map_err(fail)
}

impl Listeners {
    /// Serves every listener on threads of PID 1 for as long as it lives.
    pub(super) fn serve(self) -> Result<(), EnforceError> {
        for (listener, carry) in self.listeners {
            let proxy = Arc::clone(&self.proxy);
            std::thread::Builder::new()
                .name("network-relay".into())
                .spawn(move || accept(listener, carry, proxy))
                .map_err(|e| {
                    EnforceError::new(Layer::Network, format!("starting the relay: {e}"))
                })?;
        }
        Ok(())
    }
}

fn accept(listener: TcpListener, carry: Carry, proxy: Arc<Proxy>) {
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        let proxy = Arc::clone(&proxy);
        // A connection that cannot get a thread is dropped: the client sees it closed.
        let _ = std::thread::Builder::new()
            .name("network-relay-conn".into())
            .spawn(move || {
                let _ = carry_one(client, carry, &proxy.path);
            });
    }
}

/// Carries one connection to the proxy and back, until both sides are done.
fn carry_one(client: TcpStream, carry: Carry, proxy: &Path) -> io::Result<()> {
    let mut upstream = UnixStream::connect(proxy)?;
    let mut early = Vec::new();
    if let Carry::Loopback(port) = carry {
        write!(
            upstream,
            "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
        )?;
        early = tunnel_established(&mut upstream)?;
    }
    let mut to_client = client.try_clone()?;
    to_client.write_all(&early)?;
    let mut from_client = client;
    let mut to_proxy = upstream.try_clone()?;
    let mut from_proxy = upstream;
    let up = std::thread::Builder::new()
        .name("network-relay-up".into())
        .spawn(move || {
            copy_stream(&mut from_client, &mut to_proxy);
            let _ = to_proxy.shutdown(Shutdown::Write);
        })?;
    copy_stream(&mut from_proxy, &mut to_client);
    let _ = to_client.shutdown(Shutdown::Write);
    let _ = up.join();
    Ok(())
}

/// Reads the proxy's answer to a `CONNECT`: its head must say 200. Returns what came after
/// the head (the start of the tunnel's bytes).
fn tunnel_established(upstream: &mut UnixStream) -> io::Result<Vec<u8>> {
    let mut reader = BufReader::new(upstream);
    let mut status = String::new();
    reader.by_ref().take(1024).read_line(&mut status)?;
    let ok = status
        .split_whitespace()
        .nth(1)
        .is_some_and(|code| code == "200");
    loop {
        let mut line = String::new();
        if reader.by_ref().take(8192).read_line(&mut line)? == 0 {
            return Err(io::Error::other("the proxy closed before the tunnel"));
        }
        if line == "\r\n" || line == "\n" {
            break;
        }
    }
    if !ok {
        return Err(io::Error::other(format!(
            "the proxy refused: {}",
            status.trim_end()
        )));
    }
    Ok(reader.buffer().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::plan::Relay;

    #[test]
    fn a_tunnel_head_must_say_200_and_keeps_what_follows() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        a.write_all(b"HTTP/1.1 200 Connection established\r\nX: y\r\n\r\nEARLY")
            .unwrap();
        drop(a);
        assert_eq!(tunnel_established(&mut b).unwrap(), b"EARLY");
        let (mut a, mut b) = UnixStream::pair().unwrap();
        a.write_all(b"HTTP/1.1 403 Forbidden\r\n\r\n").unwrap();
        drop(a);
        let e = tunnel_established(&mut b).unwrap_err();
        assert!(e.to_string().contains("403"), "{e}");
    }

    #[test]
    fn the_relay_env_names_the_port_and_exempts_nothing() {
        let r = Relay {
            proxy: "/x".into(),
            port: 3128,
            loopback: vec![],
        };
        let env = r.env();
        assert!(env.contains(&("HTTPS_PROXY".into(), "http://127.0.0.1:3128".into())));
        assert!(env.contains(&("NO_PROXY".into(), String::new())));
    }
}
