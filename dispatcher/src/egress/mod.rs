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
use std::sync::atomic::{AtomicBool, Ordering};
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
    wake: Box<dyn Fn() -> io::Result<()> + Send + Sync>,
    accepting: Option<JoinHandle<()>>,
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
        let shared = Arc::new(Shared {
            rules: self.rules,
            sink: self.sink,
            resolve: self.resolve,
            stop: AtomicBool::new(false),
            open: Mutex::default(),
        });
        let listener = Arc::new(listener);
        let accepting = {
            let (listener, shared) = (listener.clone(), shared.clone());
            thread::Builder::new()
                .name("egress-accept".into())
                .spawn(move || accept_loop(&*listener, &shared))?
        };
        Ok(ProxyHandle {
            shared,
            wake: Box::new(move || listener.wake()),
            accepting: Some(accepting),
        })
    }
}

fn accept_loop<L: Listener>(listener: &L, shared: &Arc<Shared>) {
    let mut ids = 0u64;
    loop {
        let accepted = listener.accept();
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = accepted else { continue };
        ids += 1;
        let id = ids;
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

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let woken = (self.wake)().is_ok();
        let open = self.shared.open.lock().unwrap_or_else(|e| e.into_inner());
        for shut in open.values().flatten() {
            shut();
        }
        drop(open);
        // Without a wake-up the accept thread stays blocked; leave it rather than hang.
        if let Some(t) = self.accepting.take().filter(|_| woken) {
            let _ = t.join();
        }
    }
}

fn system_resolve(name: &str, port: u16) -> io::Result<Vec<IpAddr>> {
    Ok((name, port).to_socket_addrs()?.map(|a| a.ip()).collect())
}
