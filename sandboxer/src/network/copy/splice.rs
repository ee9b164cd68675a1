//! The copy by `splice(2)` through a pipe (Linux): see the parent module.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice};
use nix::unistd::pipe2;

use super::{Carried, read_write};

/// One `splice` moves at most this much: the pipe is grown to it when the system allows
/// (`F_SETPIPE_SZ`; else the default 64 KiB pipe is used, and a call moves less).
const PIPE_SIZE: usize = 1 << 20;

/// Copies `from` to `to` until the end of `from` or an error on either side; returns how many
/// bytes went through.
pub fn copy_stream<R, W>(from: &mut R, to: &mut W) -> u64
where
    R: Read + AsFd,
    W: Write + AsFd,
{
    match Pipe::kept() {
        Ok(pipe) => match pipe.carry(from, to) {
            Spliced::All(n) => {
                pipe.keep();
                n
            }
            // Bytes may be left in the pipe: it goes.
            Spliced::Partly(n) => n,
            // Nothing moved yet and the kernel cannot splice these: copy by hand.
            Spliced::Unsupported => {
                pipe.keep();
                read_write(from, to)
            }
        },
        Err(_) => read_write(from, to),
    }
}

thread_local! {
    /// This thread's pipes, empty, from its last copies (two: one each way).
    static KEPT: std::cell::RefCell<Vec<Pipe>> = const { std::cell::RefCell::new(Vec::new()) };
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

    /// One of this thread's kept pipes, or a new one.
    fn kept() -> nix::Result<Pipe> {
        KEPT.with(|k| k.borrow_mut().pop())
            .map_or_else(Pipe::new, Ok)
    }

    /// Keeps this pipe, empty, for the thread's next copy.
    fn keep(self) {
        KEPT.with(|k| {
            let mut kept = k.borrow_mut();
            if kept.len() < 2 {
                kept.push(self);
            }
        });
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

/// Carries a connection both ways on this one thread, by `splice(2)` on non-blocking sockets
/// and `poll(2)`, until both directions are done: when the client ends its side the host is
/// told (a half-close); when the host ends its side the client is told and the exchange ends
/// (a client may keep its side open after the reply). `None` when the kernel cannot splice
/// these sockets and nothing was carried: the caller copies otherwise. A thread per direction
/// would cost a second thread's wake-up for every connection.
pub fn relay_both(client: &impl AsFd, host: &impl AsFd) -> Option<Carried> {
    let (c, h) = (client.as_fd(), host.as_fd());
    let mut up = Way::new(c, h)?;
    let mut down = Way::new(h, c)?;
    let blocking = |nonblocking: bool| {
        [c, h].iter().all(|&fd| {
            let Ok(flags) = fcntl(fd, FcntlArg::F_GETFL) else {
                return false;
            };
            let mut flags = OFlag::from_bits_retain(flags);
            flags.set(OFlag::O_NONBLOCK, nonblocking);
            fcntl(fd, FcntlArg::F_SETFL(flags)).is_ok()
        })
    };
    if !blocking(true) {
        blocking(false);
        return None;
    }
    let mut client_read_shut = false;
    loop {
        // Both sockets splice or neither does: the first call on each tells, before any byte
        // has moved.
        if matches!(up.step(), Step::Unsupported) || matches!(down.step(), Step::Unsupported) {
            blocking(false);
            return None;
        }
        if down.done && !client_read_shut {
            // The host is done: so is the exchange.
            // SAFETY: shutdown(2) on a socket this function borrows.
            unsafe { libc::shutdown(c.as_raw_fd(), libc::SHUT_RD) };
            client_read_shut = true;
            continue;
        }
        if up.done && down.done {
            up.keep();
            down.keep();
            return Some(Carried {
                up: up.carried,
                down: down.carried,
            });
        }
        let mut fds = [c, h].map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: 0,
            revents: 0,
        });
        for (way, from, to) in [(&up, 0, 1), (&down, 1, 0)] {
            if way.done {
            } else if way.in_pipe > 0 {
                fds[to].events |= libc::POLLOUT;
            } else {
                fds[from].events |= libc::POLLIN;
            }
        }
        // SAFETY: `fds` is a live array of its length.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
    }
}

/// One direction of [`relay_both`].
struct Way<'a> {
    from: BorrowedFd<'a>,
    to: BorrowedFd<'a>,
    pipe: Option<Pipe>,
    in_pipe: usize,
    /// `from` has ended (or failed).
    eof: bool,
    /// `to` has been told, or cannot be written: nothing more goes this way.
    done: bool,
    /// The pipe may hold bytes that went nowhere: it is not kept.
    spoiled: bool,
    carried: u64,
}

enum Step {
    /// Nothing more can move now.
    Wait,
    Done,
    Unsupported,
}

impl<'a> Way<'a> {
    fn new(from: BorrowedFd<'a>, to: BorrowedFd<'a>) -> Option<Way<'a>> {
        let pipe = Pipe::kept().ok()?;
        Some(Way {
            from,
            to,
            pipe: Some(pipe),
            in_pipe: 0,
            eof: false,
            done: false,
            spoiled: false,
            carried: 0,
        })
    }

    fn step(&mut self) -> Step {
        let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
        let Some(pipe) = &self.pipe else {
            return Step::Done;
        };
        while !self.done {
            if self.in_pipe > 0 {
                match splice(&pipe.read, None, self.to, None, self.in_pipe, flags) {
                    Ok(n) if n > 0 => {
                        self.in_pipe -= n;
                        self.carried += n as u64;
                    }
                    Err(Errno::EAGAIN) => return Step::Wait,
                    Err(Errno::EINTR) => {}
                    // The other side is gone: nothing more goes this way.
                    _ => {
                        self.spoiled = true;
                        self.eof = true;
                        self.done = true;
                    }
                }
            } else if self.eof {
                // SAFETY: shutdown(2) on a socket the relay borrows.
                unsafe { libc::shutdown(self.to.as_raw_fd(), libc::SHUT_WR) };
                self.done = true;
            } else {
                match splice(self.from, None, &pipe.write, None, PIPE_SIZE, flags) {
                    Ok(0) => self.eof = true,
                    Ok(n) => self.in_pipe = n,
                    Err(Errno::EAGAIN) => return Step::Wait,
                    Err(Errno::EINTR) => {}
                    Err(Errno::EINVAL) if self.carried == 0 => return Step::Unsupported,
                    Err(_) => self.eof = true,
                }
            }
        }
        Step::Done
    }

    /// Gives the pipe back to the thread when it is empty.
    fn keep(&mut self) {
        if let Some(pipe) = self
            .pipe
            .take()
            .filter(|_| !self.spoiled && self.in_pipe == 0)
        {
            pipe.keep();
        }
    }
}
