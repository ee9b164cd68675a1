//! What the proxy listens on: a Unix socket (the sandbox's relay reaches it) or a TCP port on
//! loopback. Both give streams that read, write, clone and shut down alike.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::Duration;

/// A client's connection to the proxy.
pub trait Stream: Read + Write + std::os::fd::AsFd + Send + Sized + 'static {
    fn try_clone(&self) -> io::Result<Self>;
    fn shutdown(&self, how: Shutdown) -> io::Result<()>;
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
}

/// A listening socket the proxy accepts clients on.
pub trait Listener: Send + Sync + 'static {
    type Stream: Stream;
    fn accept(&self) -> io::Result<Self::Stream>;
    /// Unblocks an `accept` in progress by connecting to the listener itself, so that the
    /// proxy can stop without polling.
    fn wake(&self) -> io::Result<()>;
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

impl Listener for TcpListener {
    type Stream = TcpStream;
    fn accept(&self) -> io::Result<TcpStream> {
        TcpListener::accept(self).map(|(s, _)| s)
    }
    fn wake(&self) -> io::Result<()> {
        TcpStream::connect(self.local_addr()?).map(drop)
    }
}

impl Listener for UnixListener {
    type Stream = UnixStream;
    fn accept(&self) -> io::Result<UnixStream> {
        UnixListener::accept(self).map(|(s, _)| s)
    }
    fn wake(&self) -> io::Result<()> {
        let addr = self.local_addr()?;
        let path = addr
            .as_pathname()
            .ok_or_else(|| io::Error::new(io::ErrorKind::Unsupported, "the socket has no path"))?;
        UnixStream::connect(path).map(drop)
    }
}
