//! The command's own network (docs/linux.md, "The network"): PID 1 leaves the machine's
//! network namespace for a new one, before it starts the command, so the command inherits it.
//!
//! The new namespace holds only `lo`, which PID 1 brings up: nothing of the machine (its
//! loopback services, the dispatcher's port, abstract Unix sockets bound outside) and nothing
//! outside is reachable from it. With a proxy, PID 1 also listens on the sandbox's loopback —
//! the proxy port the `HTTPS_PROXY` family of variables names, and each port the policy names
//! on the machine's loopback — and hands those listening sockets to the egress proxy over its
//! Unix socket (`crate::network::handoff`): a pathname Unix socket is reached through the
//! file system, whatever the network namespace, and a socket keeps the namespace it was made
//! in, whoever holds it. The proxy accepts the sandbox's connections on them itself and
//! decides each; a loopback port's connection is decided and recorded as
//! `CONNECT 127.0.0.1:PORT` would be. Nothing is relayed in PID 1.
//!
//! The listeners are bound, and handed, before the command exists: the command can neither
//! bind those ports itself nor reach the listening sockets (PID 1 keeps no copy; the proxy is
//! outside the sandbox). If the handoff fails the launch fails: no command runs with ports
//! that nothing answers, or that something else could take.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sched::{CloneFlags, unshare};

use super::error::{EnforceError, Layer};
use crate::linux::plan::NetworkPlan;
use crate::network::handoff::{self, Carry};

/// The sandbox's side of the handoff, held by PID 1 for as long as the sandbox lives: when
/// PID 1 ends, the proxy sees the connection close and closes the sandbox's listeners.
pub(super) struct Handoff {
    handed: Option<Handed>,
}

/// Listeners handed, PID 1's copies of them, and the connection they went over (none while
/// the proxy is away).
struct Handed {
    connection: Option<UnixStream>,
    listeners: Vec<(TcpListener, Carry)>,
    /// The proxy's socket, reached through its folder opened before the command runs
    /// ([`open_socket`]): held so that the path names the same folder when the listeners are
    /// handed again.
    via: PathBuf,
    _folder: OwnedFd,
}

/// In PID 1, with its capabilities in the sandbox's user namespace: a network namespace of
/// its own with `lo` up, and the proxy's listeners bound in it and handed to the proxy.
/// `None` when the plan keeps the machine's network.
pub(super) fn isolate(plan: Option<&NetworkPlan>) -> Result<Option<Handoff>, EnforceError> {
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
        return Ok(Some(Handoff { handed: None }));
    };
    let (folder, via) = open_socket(&relay.proxy)?;
    let mut listeners = Vec::new();
    for (port, carry) in std::iter::once((relay.port, Carry::Proxy))
        .chain(relay.loopback.iter().map(|&p| (p, Carry::Loopback(p))))
    {
        for l in bind(port)? {
            listeners.push((l, carry));
        }
    }
    // A socket nobody listens on is a proxy that is away: its server crashed or restarts (a
    // tmux pane may start the launch after its server died). The command starts; every
    // connection is refused until a proxy listens there again and takes the listeners
    // ([`Handoff::watch`]). A proxy that answers but does not take them fails the launch.
    let connection = match hand_over(&via, &listeners) {
        Ok(c) => Some(c),
        Err(HandOver::Away) => None,
        Err(HandOver::Failed(e)) => {
            return Err(EnforceError::new(
                Layer::Network,
                format!(
                    "handing the sandbox's listeners to the egress proxy {:?}: {e}",
                    relay.proxy
                ),
            ));
        }
    };
    Ok(Some(Handoff {
        handed: Some(Handed {
            connection,
            listeners,
            via,
            _folder: folder,
        }),
    }))
}

/// Why a handoff did not happen.
enum HandOver {
    /// Nobody listens on the socket (`ECONNREFUSED`): the proxy is away.
    Away,
    /// The socket could not be reached otherwise, or a proxy answered and did not take the
    /// listeners.
    Failed(String),
}

/// Connects to the proxy and hands it `listeners`; the connection, to be held.
fn hand_over(via: &Path, listeners: &[(TcpListener, Carry)]) -> Result<UnixStream, HandOver> {
    let connection = UnixStream::connect(via).map_err(|e| match e.kind() {
        io::ErrorKind::ConnectionRefused => HandOver::Away,
        _ => HandOver::Failed(format!("connecting to its socket: {e}")),
    })?;
    let handed: Vec<(&TcpListener, Carry)> = listeners.iter().map(|(l, c)| (l, *c)).collect();
    handoff::hand_over(&connection, &handed).map_err(|e| HandOver::Failed(e.to_string()))?;
    Ok(connection)
}

impl Handoff {
    /// After the command has started: one thread of PID 1 that waits for the proxy to go
    /// (a dispatcher that stopped or crashed) and hands the listeners again to the proxy
    /// served anew at the same path (a restarted dispatcher). Meanwhile it accepts and closes
    /// every connection, as a relay with no proxy behind it did: nothing goes anywhere.
    pub(super) fn watch(self) -> Result<(), EnforceError> {
        let Some(handed) = self.handed else {
            return Ok(());
        };
        std::thread::Builder::new()
            .name("network-handoff".into())
            .spawn(move || handed.keep_handed())
            .map(drop)
            .map_err(|e| {
                EnforceError::new(Layer::Network, format!("watching the egress proxy: {e}"))
            })
    }
}

impl Handed {
    fn keep_handed(mut self) {
        loop {
            if let Some(connection) = self.connection.take() {
                wait_for_close(connection);
            }
            self.connection = loop {
                self.refuse_for(std::time::Duration::from_secs(1));
                // No proxy there yet, or one that refuses: tried again in a second.
                if let Ok(c) = hand_over(&self.via, &self.listeners) {
                    break Some(c);
                }
            };
        }
    }

    /// For `period`: accepts every connection on the listeners and closes it at once.
    fn refuse_for(&self, period: std::time::Duration) {
        let end = std::time::Instant::now() + period;
        let mut fds: Vec<libc::pollfd> = self
            .listeners
            .iter()
            .map(|(l, _)| libc::pollfd {
                fd: l.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        while let Some(left) = end.checked_duration_since(std::time::Instant::now()) {
            // SAFETY: `fds` is a live array of its length.
            let n = unsafe {
                libc::poll(
                    fds.as_mut_ptr(),
                    fds.len() as libc::nfds_t,
                    left.as_millis() as i32,
                )
            };
            if n <= 0 {
                continue;
            }
            for (p, (l, _)) in fds.iter_mut().zip(&self.listeners) {
                // Ready, and no one else accepts now: this does not wait (and the socket's
                // flags, shared with the proxy's copy, are left alone).
                if p.revents != 0 {
                    drop(l.accept());
                }
                p.revents = 0;
            }
        }
    }
}

/// Returns when the proxy closes `connection`. It never writes after its `ok`; a signal for
/// PID 1 that lands on this thread interrupts the read and is not the end.
fn wait_for_close(mut connection: UnixStream) {
    let mut buf = [0u8; 64];
    loop {
        match io::Read::read(&mut connection, &mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// The folder of the proxy's socket, opened (`O_PATH`), and the path through it that PID 1
/// connects to: `/proc/self/fd/N/NAME`. The folder is the one checked, and the path stays
/// short, however long the real one (a socket address holds 108 bytes). The socket must be
/// there now.
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

#[cfg(test)]
mod tests {
    use crate::linux::plan::Relay;

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
