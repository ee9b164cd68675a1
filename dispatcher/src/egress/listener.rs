//! What the proxy listens on: a Unix socket (where a sandbox hands its listeners, on Linux,
//! and where clients may connect too) or a TCP port on loopback; and the listeners a sandbox
//! handed. All give streams that read, write, clone and shut down alike.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::Duration;

/// A client's connection to the proxy.
pub trait Stream: Read + Write + AsFd + Send + Sized + 'static {
    fn try_clone(&self) -> io::Result<Self>;
    fn shutdown(&self, how: Shutdown) -> io::Result<()>;
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
}

/// A client accepted on one of the proxy's own listeners.
pub enum Client {
    Tcp(TcpStream),
    /// On Linux, may be a sandbox handing its listeners (`sandboxer::network::handoff`).
    Unix(UnixStream),
}

/// A listening socket the proxy accepts clients on. The proxy waits for clients with
/// `poll(2)` and stops by a wake-up of its own, so a listener needs no way to be woken.
pub trait Listener: AsFd + Send + 'static {
    /// Makes `accept` return `WouldBlock` when no client waits.
    fn set_nonblocking(&self) -> io::Result<()>;
    fn accept(&self) -> io::Result<Client>;
}

macro_rules! stream {
    ($t:ty) => {
        impl Stream for $t {
            fn try_clone(&self) -> io::Result<Self> {
                <$t>::try_clone(self)
            }
            fn shutdown(&self, how: Shutdown) -> io::Result<()> {
                <$t>::shutdown(self, how)
            }
            fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
                <$t>::set_read_timeout(self, timeout)
            }
        }
    };
}
stream!(TcpStream);
stream!(UnixStream);

/// An accepted socket blocks, whatever its listener: Linux does not pass `O_NONBLOCK` on,
/// other systems do.
fn blocking<S>(s: S, set: impl Fn(&S, bool) -> io::Result<()>) -> io::Result<S> {
    if cfg!(not(target_os = "linux")) {
        set(&s, false)?;
    }
    Ok(s)
}

impl Listener for TcpListener {
    fn set_nonblocking(&self) -> io::Result<()> {
        TcpListener::set_nonblocking(self, true)
    }
    fn accept(&self) -> io::Result<Client> {
        let (s, _) = TcpListener::accept(self)?;
        blocking(s, TcpStream::set_nonblocking).map(Client::Tcp)
    }
}

impl Listener for UnixListener {
    fn set_nonblocking(&self) -> io::Result<()> {
        UnixListener::set_nonblocking(self, true)
    }
    fn accept(&self) -> io::Result<Client> {
        let (s, _) = UnixListener::accept(self)?;
        blocking(s, UnixStream::set_nonblocking).map(Client::Unix)
    }
}
