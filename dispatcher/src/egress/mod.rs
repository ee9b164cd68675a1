//! The egress proxy: the one way out to the network for a confined CLI. HTTP CONNECT and
//! plain HTTP (absolute-form URIs), on any [`Listener`] (a Unix socket, a TCP port on
//! loopback). Every request is decided by the policy's rules ([`NetworkRules::decide`]): the
//! proxy resolves names itself, checks every address, connects to a checked address only,
//! relays both ways and reports each connection as an [`EgressEvent`]. The rules are in
//! docs/network.md.
//!
//! ```no_run
//! # use dispatcher::egress::Proxy;
//! # use sandboxer::network::{NetworkMode, NetworkRules};
//! let listener = std::os::unix::net::UnixListener::bind("/tmp/proxy.sock")?;
//! let proxy = Proxy::new(NetworkRules::new(NetworkMode::Public), |event| println!("{event:?}"))
//!     .serve(listener)?;
//! // … the chat runs …
//! drop(proxy); // stops accepting and ends every open connection
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! Threads and `std::net` only. One thread waits for clients on every listener (`poll(2)`);
//! each connection runs on a thread of a [`pool`] (a second one while relaying), reused from
//! one connection to the next. The machine's own addresses are read again only when they
//! change ([`AddressWatch`]).
//!
//! On Linux a sandbox hands the proxy its listeners over the Unix socket
//! (`sandboxer::network::handoff`): the proxy port and the named loopback ports, bound in the
//! sandbox's network namespace. The proxy accepts on them itself; a loopback port's
//! connection is decided and reported as `CONNECT 127.0.0.1:PORT`. Whoever can connect to the
//! socket can hand listeners, and that gives them nothing a connection to the socket does
//! not: a handed listener's clients get the decisions and events that the same requests sent
//! over the socket get. The proxy takes only listening TCP sockets bound to a loopback address
//! (never one reachable from another machine), at most [`MAX_HANDED`] in all, and closes a
//! sandbox's listeners when the connection they came over closes (its PID 1 ended).

mod connection;
mod event;
mod head;
mod listener;
mod pool;
mod relay;

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, TcpListener, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use sandboxer::network::{AddressWatch, NetworkRules, OwnAddresses};

pub use event::{EgressEvent, EgressVerdict, Sink};
pub use listener::{Client, Listener, Stream};

use connection::Ask;
use pool::Pool;

/// The most listeners handed to one proxy at a time, over every handoff.
pub const MAX_HANDED: usize = 1024;

/// Looks a name up: its addresses for a port.
pub type Resolver = dyn Fn(&str, u16) -> io::Result<Vec<IpAddr>> + Send + Sync;

/// A proxy not yet serving: its rules, where its events go, how it looks names up.
pub struct Proxy {
    rules: NetworkRules,
    sink: Arc<Sink>,
    resolve: Arc<Resolver>,
}

/// What every connection's thread reads.
struct Shared {
    rules: NetworkRules,
    sink: Arc<Sink>,
    resolve: Arc<Resolver>,
    /// The machine's addresses; `None` when they could not be read at the start (each
    /// decision then reads them, and refuses if it cannot).
    own: Option<AddressWatch>,
    /// Set when the handle is dropped.
    stop: AtomicBool,
    /// The last connection's number, over every listener.
    ids: AtomicU64,
    /// How to shut down each open connection's sockets, by connection.
    open: Mutex<HashMap<u64, Vec<Shutter>>>,
    pool: Pool,
    /// Listeners handed and not yet taken by the accepting thread, and how to wake it.
    handed: Mutex<Vec<Sandbox>>,
    /// How many listeners are handed, over every sandbox.
    handed_count: std::sync::atomic::AtomicUsize,
    wake: UnixStream,
}

/// A sandbox's listeners, and the connection they came over (closed when the sandbox ends).
struct Sandbox {
    connection: UnixStream,
    listeners: Vec<(TcpListener, Ask)>,
}

type Shutter = Box<dyn Fn() + Send>;

impl Shared {
    /// Keeps `socket` to be shut down when the proxy stops; shuts it down now if it has.
    fn track(&self, id: u64, socket: impl Stream) {
        let shut = move || {
            let _ = socket.shutdown(Shutdown::Both);
        };
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if self.stop.load(Ordering::SeqCst) {
            shut();
        } else {
            open.entry(id).or_default().push(Box::new(shut));
        }
    }

    fn forget(&self, id: u64) {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    /// The machine's addresses now.
    fn own_addresses(&self) -> io::Result<Arc<OwnAddresses>> {
        match &self.own {
            Some(watch) => watch.current(),
            None => OwnAddresses::read().map(Arc::new),
        }
    }

    /// Wakes the accepting thread (a byte already waiting does as well).
    fn wake(&self) -> io::Result<()> {
        match (&self.wake).write(&[1]) {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            _ => Ok(()),
        }
    }
}

/// A serving proxy. Dropping it stops it: no new connection is accepted, every listener a
/// sandbox handed is closed, and every open connection is shut down (each still reports its
/// event).
pub struct ProxyHandle {
    shared: Arc<Shared>,
    accepting: Option<JoinHandle<()>>,
    /// Sockets held for as long as the proxy serves, so that no one else binds their
    /// address ([`ProxyHandle::keep`]).
    held: Vec<std::net::UdpSocket>,
}

impl Proxy {
    /// A proxy deciding by `rules` and reporting each connection to `sink`. Names are looked
    /// up by the system's resolver (`ToSocketAddrs`).
    pub fn new(rules: NetworkRules, sink: impl Fn(EgressEvent) + Send + Sync + 'static) -> Proxy {
        Proxy {
            rules,
            sink: Arc::new(sink),
            resolve: Arc::new(system_resolve),
        }
    }

    /// Looks names up with `resolve` instead of the system's resolver (the answers are
    /// checked all the same).
    pub fn with_resolver(
        mut self,
        resolve: impl Fn(&str, u16) -> io::Result<Vec<IpAddr>> + Send + Sync + 'static,
    ) -> Proxy {
        self.resolve = Arc::new(resolve);
        self
    }

    /// Serves clients on `listener` until the returned handle is dropped.
    pub fn serve<L: Listener>(self, listener: L) -> io::Result<ProxyHandle> {
        self.serve_all(vec![listener])
    }

    /// Serves clients on every one of `listeners` (a port on 127.0.0.1 and the same on ::1),
    /// one proxy with one set of rules and events, until the returned handle is dropped.
    pub fn serve_all<L: Listener>(self, listeners: Vec<L>) -> io::Result<ProxyHandle> {
        for l in &listeners {
            l.set_nonblocking()?;
        }
        let (wake, woken) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        woken.set_nonblocking(true)?;
        let shared = Arc::new(Shared {
            rules: self.rules,
            sink: self.sink,
            resolve: self.resolve,
            own: AddressWatch::new().ok(),
            stop: AtomicBool::new(false),
            ids: AtomicU64::new(0),
            open: Mutex::default(),
            pool: Pool::default(),
            handed: Mutex::default(),
            handed_count: Default::default(),
            wake,
        });
        let accepting = {
            let shared = shared.clone();
            thread::Builder::new()
                .name("egress-accept".into())
                .spawn(move || Acceptor::new(listeners, woken).run(&shared))?
        };
        Ok(ProxyHandle {
            shared,
            accepting: Some(accepting),
            held: Vec::new(),
        })
    }
}

/// The thread that waits for clients on every listener, the proxy's own and the handed ones.
struct Acceptor<L> {
    own: Vec<L>,
    woken: UnixStream,
    sandboxes: Vec<Sandbox>,
}

/// Where a ready descriptor is in the acceptor's lists.
#[derive(Clone, Copy)]
enum Slot {
    Woken,
    Own(usize),
    Connection(usize),
    Handed(usize, usize),
}

impl<L: Listener> Acceptor<L> {
    fn new(own: Vec<L>, woken: UnixStream) -> Self {
        Acceptor {
            own,
            woken,
            sandboxes: Vec::new(),
        }
    }

    fn run(mut self, shared: &Arc<Shared>) {
        loop {
            let (mut fds, slots) = self.poll_set();
            // SAFETY: `fds` is a live array of its length.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
            if shared.stop.load(Ordering::SeqCst) {
                return;
            }
            if n <= 0 {
                continue;
            }
            let mut ended = Vec::new();
            for (fd, slot) in fds.iter().zip(slots) {
                if fd.revents == 0 {
                    continue;
                }
                match slot {
                    Slot::Woken => {
                        while (&self.woken).read(&mut [0u8; 64]).is_ok_and(|n| n > 0) {}
                        let mut handed = shared.handed.lock().unwrap_or_else(|e| e.into_inner());
                        self.sandboxes.append(&mut handed);
                    }
                    Slot::Own(i) => {
                        while let Ok(client) = self.own[i].accept() {
                            dispatch(shared, client, Ask::Http);
                        }
                    }
                    // The sandbox's PID 1 ended (it never writes): its listeners go.
                    Slot::Connection(i) => ended.push(i),
                    Slot::Handed(i, j) => {
                        let (listener, ask) = &self.sandboxes[i].listeners[j];
                        while let Ok((client, _)) = listener.accept() {
                            dispatch(shared, Client::Tcp(client), *ask);
                        }
                    }
                }
            }
            for i in ended.into_iter().rev() {
                let gone = self.sandboxes.remove(i);
                shared
                    .handed_count
                    .fetch_sub(gone.listeners.len(), Ordering::SeqCst);
            }
        }
    }

    fn poll_set(&self) -> (Vec<libc::pollfd>, Vec<Slot>) {
        let mut fds = Vec::new();
        let mut slots = Vec::new();
        let mut add = |fd: BorrowedFd<'_>, slot| {
            fds.push(libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            slots.push(slot);
        };
        add(self.woken.as_fd(), Slot::Woken);
        for (i, l) in self.own.iter().enumerate() {
            add(l.as_fd(), Slot::Own(i));
        }
        for (i, s) in self.sandboxes.iter().enumerate() {
            add(s.connection.as_fd(), Slot::Connection(i));
            for (j, (l, _)) in s.listeners.iter().enumerate() {
                add(l.as_fd(), Slot::Handed(i, j));
            }
        }
        (fds, slots)
    }
}

/// Serves `client` on a thread of the pool, stoppable by the handle.
fn dispatch(shared: &Arc<Shared>, client: Client, ask: Ask) {
    let id = shared.ids.fetch_add(1, Ordering::SeqCst) + 1;
    let cloned = match &client {
        Client::Tcp(s) => s.try_clone().map(|c| shared.track(id, c)),
        Client::Unix(s) => s.try_clone().map(|c| shared.track(id, c)),
    };
    if cloned.is_err() {
        return; // cannot be stopped later: not served
    }
    let served = shared.clone();
    // No thread for it: the client was dropped with the job, which closes it.
    let _ = shared.pool.run(move || {
        match client {
            Client::Tcp(s) => connection::serve(s, id, &served, ask, Vec::new()),
            Client::Unix(s) => unix_client(s, id, &served),
        }
        served.forget(id);
    });
}

/// A client of the Unix socket: a sandbox handing its listeners (Linux), or a client of the
/// proxy like any other.
fn unix_client(stream: UnixStream, id: u64, shared: &Shared) {
    #[cfg(target_os = "linux")]
    {
        use sandboxer::network::handoff;
        let mut first = vec![0u8; 4096];
        let (n, fds) = match handoff::first_read(&stream, &mut first) {
            Ok(read) => read,
            Err(e) => return connection::unread(stream, shared, &e),
        };
        first.truncate(n);
        if !handoff::is_handoff(&first) {
            // Descriptors sent with a request are closed here, unused.
            drop(fds);
            return connection::serve(stream, id, shared, Ask::Http, first);
        }
        shared.forget(id); // a handoff, not a client connection: not shut down with them
        let mut outcome = handoff::receive(&stream, first, fds);
        if let Ok(handed) = &outcome {
            if let Err(e) = check_handed(handed, shared) {
                outcome = Err(e);
            }
        }
        let _ = stream.set_read_timeout(None);
        if handoff::answer(&stream, &outcome).is_err() {
            return;
        }
        let Ok(handed) = outcome else { return };
        let sandbox = Sandbox {
            connection: stream,
            listeners: handed
                .into_iter()
                .map(|h| {
                    let ask = match h.carry {
                        handoff::Carry::Proxy => Ask::Http,
                        handoff::Carry::Loopback(port) => Ask::Loopback(port),
                    };
                    (h.listener, ask)
                })
                .collect(),
        };
        shared
            .handed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(sandbox);
        let _ = shared.wake();
    }
    #[cfg(not(target_os = "linux"))]
    connection::serve(stream, id, shared, Ask::Http, Vec::new())
}

/// Handed listeners the proxy takes: bound to loopback (a sandbox's are; a listener anyone
/// else could reach is not served), no more than [`MAX_HANDED`] in all; made non-blocking
/// for the accepting thread.
#[cfg(target_os = "linux")]
fn check_handed(
    handed: &[sandboxer::network::handoff::Handed],
    shared: &Shared,
) -> Result<(), sandboxer::network::handoff::HandoffError> {
    use sandboxer::network::handoff::HandoffError;
    for h in handed {
        let local = h.listener.local_addr()?;
        if !local.ip().to_canonical().is_loopback() {
            return Err(HandoffError::Refused(format!(
                "a listener is bound to {local}, not to loopback"
            )));
        }
        h.listener.set_nonblocking(true)?;
    }
    let before = shared
        .handed_count
        .fetch_add(handed.len(), Ordering::SeqCst);
    if before + handed.len() > MAX_HANDED {
        shared
            .handed_count
            .fetch_sub(handed.len(), Ordering::SeqCst);
        return Err(HandoffError::Refused(format!(
            "more than {MAX_HANDED} listeners handed to this proxy"
        )));
    }
    Ok(())
}

impl ProxyHandle {
    /// Holds `sockets` until the proxy stops: the UDP side of its loopback port, which no
    /// other program may then bind.
    pub fn keep(&mut self, sockets: Vec<std::net::UdpSocket>) {
        self.held.extend(sockets);
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let woken = self.shared.wake().is_ok();
        let open = self.shared.open.lock().unwrap_or_else(|e| e.into_inner());
        for shut in open.values().flatten() {
            shut();
        }
        drop(open);
        self.shared.pool.close();
        // Listeners handed but not yet taken by the accepting thread close here; the ones it
        // took close when it returns.
        self.shared
            .handed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        // Without a wake-up the accepting thread stays blocked; leave it rather than hang.
        if let Some(t) = self.accepting.take().filter(|_| woken) {
            let _ = t.join();
        }
    }
}

fn system_resolve(name: &str, port: u16) -> io::Result<Vec<IpAddr>> {
    Ok((name, port).to_socket_addrs()?.map(|a| a.ip()).collect())
}
