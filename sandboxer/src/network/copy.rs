//! Carrying one direction of a connection: the dispatcher's egress proxy copies every byte
//! of a download from one socket to another, so the copy is
//! `splice(2)` through a pipe where the kernel offers it (no copy to user memory, one system
//! call per pipe-full each way), and a read/write loop where it does not. A thread keeps its
//! pipe for its next copy when this one left it empty: the proxy's threads are reused from
//! one connection to the next, and a small request need not make and size two pipes.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice};
use nix::unistd::pipe2;

/// One `splice` moves at most this much: the pipe is grown to it when the system allows
/// (`F_SETPIPE_SZ`; else the default 64 KiB pipe is used, and a call moves less).
const PIPE_SIZE: usize = 1 << 20;

/// What one read may take in the fallback loop. Under 128 KiB, so that the allocator does
/// not map and unmap it per connection.
const COPY_BUFFER: usize = 64 * 1024;

/// Copies `from` to `to` until the end of `from` or an error on either side; returns how many
/// bytes went through.
pub fn copy_stream<R, W>(from: &mut R, to: &mut W) -> u64
where
    R: Read + AsFd,
    W: Write + AsFd,
{
    let kept = KEPT.with(|k| k.take());
    match kept.map_or_else(Pipe::new, Ok) {
        Ok(pipe) => match pipe.carry(from, to) {
            Spliced::All(n) => {
                KEPT.with(|k| k.set(Some(pipe)));
                n
            }
            // Bytes may be left in the pipe: it goes.
            Spliced::Partly(n) => n,
            // Nothing moved yet and the kernel cannot splice these: copy by hand.
            Spliced::Unsupported => {
                KEPT.with(|k| k.set(Some(pipe)));
                read_write(from, to)
            }
        },
        Err(_) => read_write(from, to),
    }
}

thread_local! {
    /// This thread's pipe, empty, from its last copy.
    static KEPT: std::cell::Cell<Option<Pipe>> = const { std::cell::Cell::new(None) };
}

enum Spliced {
    /// To the end of `from`; the pipe is empty.
    All(u64),
    /// Until an error on either side; the pipe may hold bytes.
    Partly(u64),
    Unsupported,
}

struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    fn new() -> nix::Result<Pipe> {
        let (read, write) = pipe2(OFlag::O_CLOEXEC)?;
        let _ = fcntl(&write, FcntlArg::F_SETPIPE_SZ(PIPE_SIZE as i32));
        Ok(Pipe { read, write })
    }

    fn carry(&self, from: &impl AsFd, to: &impl AsFd) -> Spliced {
        // Not SPLICE_F_MORE: on a TCP socket it holds a short write back for more (a cork),
        // and a request's head would wait for bytes that never come.
        let flags = SpliceFFlags::SPLICE_F_MOVE;
        let mut total = 0u64;
        loop {
            let n = match splice(from, None, &self.write, None, PIPE_SIZE, flags) {
                Ok(0) => return Spliced::All(total),
                Ok(n) => n,
                Err(Errno::EINTR) => continue,
                Err(Errno::EINVAL) if total == 0 => return Spliced::Unsupported,
                Err(_) => return Spliced::Partly(total),
            };
            let mut left = n;
            while left > 0 {
                match splice(&self.read, None, to, None, left, flags) {
                    Ok(0) => return Spliced::Partly(total),
                    Ok(m) => left -= m,
                    Err(Errno::EINTR) => {}
                    Err(_) => return Spliced::Partly(total),
                }
            }
            total += n as u64;
        }
    }
}

fn read_write(from: &mut impl Read, to: &mut impl Write) -> u64 {
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

    /// The loop used where the kernel cannot splice: every byte, and the count.
    #[test]
    fn the_fallback_loop_carries_every_byte() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
        let mut to = Vec::new();
        let n = read_write(&mut &data[..], &mut to);
        assert_eq!((n, to), (data.len() as u64, data));
    }
}
