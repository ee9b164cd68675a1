//! Carrying one direction of a connection: the dispatcher's egress proxy copies every byte
//! of a download from one socket to another, so the copy is
//! `splice(2)` through a pipe where the kernel offers it (no copy to user memory, one system
//! call per pipe-full each way), and a read/write loop where it does not. A thread keeps its
//! pipe for its next copy when this one left it empty: the proxy's threads are reused from
//! one connection to the next, and a small request need not make and size two pipes.

use std::io::{self, Read, Write};
#[cfg(not(target_os = "linux"))]
use std::os::fd::AsFd;

#[cfg(target_os = "linux")]
mod splice;

#[cfg(target_os = "linux")]
pub use splice::{copy_stream, relay_both};

/// What one read may take in the fallback loop. Under 128 KiB, so that the allocator does
/// not map and unmap it per connection.
const COPY_BUFFER: usize = 64 * 1024;

/// Copies `from` to `to` until the end of `from` or an error on either side; returns how many
/// bytes went through. Without `splice(2)` (macOS): a read/write loop.
#[cfg(not(target_os = "linux"))]
pub fn copy_stream<R, W>(from: &mut R, to: &mut W) -> u64
where
    R: Read + AsFd,
    W: Write + AsFd,
{
    read_write(from, to)
}

/// Without `splice(2)` (macOS) nothing is carried here: the caller copies each way itself.
#[cfg(not(target_os = "linux"))]
pub fn relay_both(_client: &impl AsFd, _host: &impl AsFd) -> Option<Carried> {
    None
}

/// Bytes carried each way by [`relay_both`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Carried {
    /// Client to host.
    pub up: u64,
    /// Host to client.
    pub down: u64,
}

pub(super) fn read_write(from: &mut impl Read, to: &mut impl Write) -> u64 {
    let mut buf = vec![0u8; COPY_BUFFER];
    let mut total = 0;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return total,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return total,
        };
        if to.write_all(&buf[..n]).is_err() {
            return total;
        }
        total += n as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::os::unix::net::UnixStream;

    /// Socket to socket (TCP to Unix, as for a client of the proxy's Unix socket), every byte in order;
    /// and a file descriptor the kernel cannot splice from falls back to the loop.
    #[test]
    fn carries_every_byte_between_sockets() {
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let sent = data.clone();
        let writer = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&sent).unwrap();
            s.shutdown(Shutdown::Write).unwrap();
        });
        let (mut from, _) = listener.accept().unwrap();
        let (mut to, mut out) = UnixStream::pair().unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            out.read_to_end(&mut got).unwrap();
            got
        });
        let n = copy_stream(&mut from, &mut to);
        drop(to);
        writer.join().unwrap();
        assert_eq!(n, data.len() as u64);
        assert_eq!(reader.join().unwrap(), data);
    }

    /// Both ways on one thread: the client's whole request and its half-close reach the host,
    /// which answers after it; every byte each way, counted; and the client's socket ends.
    #[test]
    #[cfg(target_os = "linux")]
    fn relays_both_ways_on_one_thread() {
        let request: Vec<u8> = (0..2_500_000u32).map(|i| (i % 241) as u8).collect();
        let reply: Vec<u8> = (0..1_700_000u32).map(|i| (i % 239) as u8).collect();
        let host_side = TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy_side = TcpListener::bind("127.0.0.1:0").unwrap();
        let (sent, answer) = (request.clone(), reply.clone());
        let addr = proxy_side.local_addr().unwrap();
        let client = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&sent).unwrap();
            s.shutdown(Shutdown::Write).unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            got
        });
        let host_addr = host_side.local_addr().unwrap();
        let host = std::thread::spawn(move || {
            let (mut s, _) = host_side.accept().unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            s.write_all(&answer).unwrap();
            got
        });
        let (from_client, _) = proxy_side.accept().unwrap();
        let to_host = TcpStream::connect(host_addr).unwrap();
        let carried = relay_both(&from_client, &to_host).unwrap();
        drop(to_host);
        assert_eq!(host.join().unwrap(), request);
        drop(from_client);
        assert_eq!(client.join().unwrap(), reply);
        assert_eq!(
            carried,
            Carried {
                up: request.len() as u64,
                down: reply.len() as u64
            }
        );
    }

    /// The loop used where the kernel cannot splice: every byte, and the count.
    #[test]
    fn the_fallback_loop_carries_every_byte() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
        let mut to = Vec::new();
        let n = read_write(&mut &data[..], &mut to);
        assert_eq!((n, to), (data.len() as u64, data));
    }
}
