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
//! Threads and `std::net` only: one thread accepts, one serves each connection (two while
//! relaying).

mod connection;
mod event;
mod head;
mod listener;
mod relay;

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Shutdown, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use sandboxer::network::NetworkRules;

pub use event::{EgressEvent, EgressVerdict, Sink};
pub use listener::{Listener, Stream};

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
    /// Set when the handle is dropped.
    stop: AtomicBool,
    /// The last connection's number, over every listener.
    ids: AtomicU64,
    /// How to shut down each open connection's sockets, by connection.
    open: Mutex<HashMap<u64, Vec<Shutter>>>,
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
}

/// A serving proxy. Dropping it stops it: no new connection is accepted and every open one
/// is shut down (each still reports its event).
pub struct ProxyHandle {
    shared: Arc<Shared>,
    /// Per listener: how to wake its accept thread, and the thread.
    accepting: Vec<(Waker, JoinHandle<()>)>,
    /// Sockets held for as long as the proxy serves, so that no one else binds their
    /// address ([`ProxyHandle::keep`]).
    held: Vec<std::net::UdpSocket>,
}

type Waker = Box<dyn Fn() -> io::Result<()> + Send + Sync>;

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
        let shared = Arc::new(Shared {
            rules: self.rules,
            sink: self.sink,
            resolve: self.resolve,
            stop: AtomicBool::new(false),
            ids: AtomicU64::new(0),
            open: Mutex::default(),
        });
        // A handle made now stops what has started if a later spawn fails.
        let mut handle = ProxyHandle {
            shared: shared.clone(),
            accepting: Vec::new(),
            held: Vec::new(),
        };
        for listener in listeners {
            let listener = Arc::new(listener);
            let thread = {
                let (listener, shared) = (listener.clone(), shared.clone());
                thread::Builder::new()
                    .name("egress-accept".into())
                    .spawn(move || accept_loop(&*listener, &shared))?
            };
            handle
                .accepting
                .push((Box::new(move || listener.wake()), thread));
        }
        Ok(handle)
    }
}

fn accept_loop<L: Listener>(listener: &L, shared: &Arc<Shared>) {
    loop {
        let accepted = listener.accept();
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = accepted else { continue };
        let id = shared.ids.fetch_add(1, Ordering::SeqCst) + 1;
        match client.try_clone() {
            Ok(handle) => shared.track(id, handle),
            Err(_) => continue, // cannot be stopped later: not served
        }
        let shared = shared.clone();
        let spawned = thread::Builder::new()
            .name("egress-conn".into())
            .spawn(move || {
                connection::serve(client, id, &shared);
                shared.forget(id);
            });
        if spawned.is_err() {
            // No thread for it: the client was dropped with the closure, which closes it.
            continue;
        }
    }
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
        let woken: Vec<bool> = self
            .accepting
            .iter()
            .map(|(wake, _)| wake().is_ok())
            .collect();
        let open = self.shared.open.lock().unwrap_or_else(|e| e.into_inner());
        for shut in open.values().flatten() {
            shut();
        }
        drop(open);
        // Without a wake-up an accept thread stays blocked; leave it rather than hang.
        for ((_, t), woken) in self.accepting.drain(..).zip(woken) {
            if woken {
                let _ = t.join();
            }
        }
    }
}

fn system_resolve(name: &str, port: u16) -> io::Result<Vec<IpAddr>> {
    Ok((name, port).to_socket_addrs()?.map(|a| a.ip()).collect())
}
