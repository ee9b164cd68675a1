//! The listener handoff (Linux): PID 1 of a sandbox binds its listeners inside the sandbox's
//! network namespace (the proxy port, each named loopback port) and hands the listening
//! sockets themselves to the egress proxy over the proxy's Unix socket (`SCM_RIGHTS`). A
//! socket keeps the namespace it was made in, whoever holds it: the proxy then accepts the
//! sandbox's connections directly, with no relay between.
//!
//! The message, one `sendmsg(2)` with every descriptor: [`MAGIC`], then one line per
//! descriptor in their order, `proxy` (clients speak to the proxy) or `loopback PORT` (as if
//! each client had asked `CONNECT 127.0.0.1:PORT` first), then `end`. The proxy answers
//! `ok` once it accepts on them, or `refused WHY`. The first byte is NUL, which no HTTP
//! request starts with: a proxy that does not know the handoff answers `400`, and PID 1 fails
//! closed. PID 1 keeps its end of the connection open for as long as the sandbox lives; the
//! proxy closes the listeners when it ends.

use std::io::{self, Read, Write};
use std::net::TcpListener;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use nix::sys::socket::{
    ControlMessage, ControlMessageOwned, MsgFlags, SockaddrStorage, recvmsg, sendmsg,
};

/// How a handoff starts: a NUL byte, which no HTTP request starts with.
pub const MAGIC: &[u8] = b"\0agentworks listeners 1\n";

/// The most listeners one handoff carries (under the kernel's 253 descriptors a message).
pub const MAX_LISTENERS: usize = 64;

/// The most a handoff's text may take.
const MAX_TEXT: usize = 4096;

/// How long either side waits for the other during a handoff.
pub const HANDOFF_TIMEOUT: Duration = Duration::from_secs(10);

/// What a handed listener's connections are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carry {
    /// The proxy port: its clients speak to the proxy (CONNECT or plain HTTP).
    Proxy,
    /// A named port of the machine's loopback: each connection is the tunnel
    /// `CONNECT 127.0.0.1:PORT` would open, decided and recorded like one.
    Loopback(u16),
}

/// A listener received by the proxy, checked to be a listening TCP socket.
#[derive(Debug)]
pub struct Handed {
    pub listener: TcpListener,
    pub carry: Carry,
}

/// Why a handoff did not happen.
#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("the handoff is malformed: {0}")]
    Malformed(&'static str),
    #[error("a handed descriptor is not a listening TCP socket")]
    NotAListener,
    #[error("the proxy refused the listeners: {0}")]
    Refused(String),
}

/// PID 1's side: sends `listeners` over `proxy` and waits for the proxy's `ok`.
pub fn hand_over(
    proxy: &UnixStream,
    listeners: &[(&TcpListener, Carry)],
) -> Result<(), HandoffError> {
    if listeners.is_empty() || listeners.len() > MAX_LISTENERS {
        return Err(HandoffError::Malformed("between 1 and 64 listeners"));
    }
    let mut text = MAGIC.to_vec();
    for (_, carry) in listeners {
        match carry {
            Carry::Proxy => text.extend_from_slice(b"proxy\n"),
            Carry::Loopback(port) => {
                text.extend_from_slice(format!("loopback {port}\n").as_bytes())
            }
        }
    }
    text.extend_from_slice(b"end\n");
    let fds: Vec<i32> = listeners.iter().map(|(l, _)| l.as_raw_fd()).collect();
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let iov = [io::IoSlice::new(&text)];
    let sent = sendmsg::<()>(proxy.as_raw_fd(), &iov, &cmsg, MsgFlags::MSG_NOSIGNAL, None)
        .map_err(io::Error::from)?;
    if sent < text.len() {
        // The descriptors went with the first byte; the rest is plain text.
        (&*proxy).write_all(&text[sent..])?;
    }
    proxy.set_read_timeout(Some(HANDOFF_TIMEOUT))?;
    let answer = read_line(&mut &*proxy)?;
    proxy.set_read_timeout(None)?;
    match answer.strip_prefix("refused ") {
        _ if answer == "ok" => Ok(()),
        Some(why) => Err(HandoffError::Refused(why.into())),
        None => Err(HandoffError::Refused(format!(
            "it answered {:?}: not a proxy that takes listeners",
            answer.chars().take(80).collect::<String>()
        ))),
    }
}

/// The proxy's first read of a Unix client: like `read`, and the descriptors that came with
/// the bytes (at most [`MAX_LISTENERS`]; a message that carried more is an error, and the
/// kernel has closed the rest).
pub fn first_read(stream: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; MAX_LISTENERS]);
    let mut iov = [io::IoSliceMut::new(buf)];
    let msg = loop {
        match recvmsg::<SockaddrStorage>(
            stream.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other.map_err(io::Error::from)?,
        }
    };
    let mut fds = Vec::new();
    for c in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            // SAFETY: the kernel installed these descriptors for this process just now; each
            // is owned once, here.
            fds.extend(
                raw.into_iter()
                    .map(|fd| unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) }),
            );
        }
    }
    if msg.flags.contains(MsgFlags::MSG_CTRUNC) {
        return Err(io::Error::other(
            "more descriptors than a handoff may carry",
        ));
    }
    Ok((msg.bytes, fds))
}

/// Whether a Unix client's first bytes start a handoff rather than an HTTP request.
pub fn is_handoff(first: &[u8]) -> bool {
    first.first() == Some(&0)
}

/// The proxy's side, after [`first_read`] got `first` and `fds`: reads the rest of the text,
/// checks it names one carry per descriptor and that each is a listening TCP socket. The
/// caller answers with [`answer`].
pub fn receive(
    stream: &UnixStream,
    mut first: Vec<u8>,
    fds: Vec<OwnedFd>,
) -> Result<Vec<Handed>, HandoffError> {
    stream.set_read_timeout(Some(HANDOFF_TIMEOUT))?;
    let mut chunk = [0u8; 512];
    while !first.ends_with(b"\nend\n") {
        if first.len() > MAX_TEXT {
            return Err(HandoffError::Malformed("longer than 4 KiB"));
        }
        let n = (&*stream).read(&mut chunk)?;
        if n == 0 {
            return Err(HandoffError::Malformed("it ended before `end`"));
        }
        first.extend_from_slice(&chunk[..n]);
    }
    let text = first
        .strip_prefix(MAGIC)
        .ok_or(HandoffError::Malformed("not the handoff's first line"))?;
    let text = std::str::from_utf8(text).map_err(|_| HandoffError::Malformed("not text"))?;
    let carries = text
        .strip_suffix("end\n")
        .unwrap_or_default()
        .lines()
        .map(|line| match line.split_once(' ') {
            None if line == "proxy" => Ok(Carry::Proxy),
            Some(("loopback", port)) => port
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0 && port == p.to_string())
                .map(Carry::Loopback)
                .ok_or(HandoffError::Malformed("a loopback port is not a port")),
            _ => Err(HandoffError::Malformed(
                "a line is neither `proxy` nor `loopback PORT`",
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if carries.is_empty() || carries.len() != fds.len() {
        return Err(HandoffError::Malformed("not one line per descriptor"));
    }
    carries
        .into_iter()
        .zip(fds)
        .map(|(carry, fd)| {
            if !is_tcp_listener(fd.as_fd()) {
                return Err(HandoffError::NotAListener);
            }
            let listener = TcpListener::from(fd);
            Ok(Handed { listener, carry })
        })
        .collect()
}

/// The proxy's answer to a handoff: `ok`, or `refused WHY`.
pub fn answer(stream: &UnixStream, outcome: &Result<Vec<Handed>, HandoffError>) -> io::Result<()> {
    let line = match outcome {
        Ok(_) => "ok\n".to_string(),
        Err(e) => format!("refused {}\n", e.to_string().replace('\n', " ")),
    };
    (&*stream).write_all(line.as_bytes())
}

/// A listening (`SO_ACCEPTCONN`) stream socket of the IPv4 or IPv6 family.
fn is_tcp_listener(fd: BorrowedFd<'_>) -> bool {
    let int = |opt: i32| {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `v`.
        let r = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        (r == 0).then_some(v)
    };
    int(libc::SO_ACCEPTCONN) == Some(1)
        && int(libc::SO_TYPE) == Some(libc::SOCK_STREAM)
        && matches!(int(libc::SO_DOMAIN), Some(libc::AF_INET | libc::AF_INET6))
        && int(libc::SO_PROTOCOL) == Some(libc::IPPROTO_TCP)
}

/// One line of at most 1 KiB, without its `\n`.
fn read_line(stream: &mut impl Read) -> io::Result<String> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while line.len() < 1024 {
        if stream.read(&mut byte)? == 0 {
            break;
        }
        if byte[0] == b'\n' {
            break;
        }
        line.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&line)
        .trim_end_matches('\r')
        .to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;

    fn received(client: &UnixStream) -> Result<Vec<Handed>, HandoffError> {
        let mut buf = [0u8; 4096];
        let (n, fds) = first_read(client, &mut buf)?;
        assert!(is_handoff(&buf[..n]));
        let out = receive(client, buf[..n].to_vec(), fds);
        answer(client, &out)?;
        out
    }

    /// Listeners and their carries arrive in order, and accept connections made to them.
    #[test]
    fn listeners_arrive_with_their_carries() {
        let a = TcpListener::bind("127.0.0.1:0").unwrap();
        let b = TcpListener::bind("127.0.0.1:0").unwrap();
        let (pid1, proxy) = UnixStream::pair().unwrap();
        let sender = std::thread::spawn(move || {
            hand_over(&pid1, &[(&a, Carry::Proxy), (&b, Carry::Loopback(8080))])
                .map(|()| (a.local_addr().unwrap(), b.local_addr().unwrap()))
        });
        let handed = received(&proxy).unwrap();
        let (a, b) = sender.join().unwrap().unwrap();
        let got: Vec<_> = handed
            .iter()
            .map(|h| (h.listener.local_addr().unwrap(), h.carry))
            .collect();
        assert_eq!(got, [(a, Carry::Proxy), (b, Carry::Loopback(8080))]);
        let _client = std::net::TcpStream::connect(b).unwrap();
        handed[1].listener.accept().unwrap();
    }

    /// What is not a listening TCP socket is refused, and the sender is told; a listener
    /// (the control) is taken.
    #[test]
    fn only_listening_tcp_sockets_are_taken() {
        let connected = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap()
        };
        let datagram = UnixDatagram::unbound().unwrap();
        for fd in [connected.as_fd(), datagram.as_fd()] {
            let (pid1, proxy) = UnixStream::pair().unwrap();
            send_raw(&pid1, fd.as_raw_fd(), b"proxy\nend\n");
            assert!(matches!(received(&proxy), Err(HandoffError::NotAListener)));
            assert!(read_line(&mut &pid1).unwrap().starts_with("refused "));
        }
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let (pid1, proxy) = UnixStream::pair().unwrap();
        let sender = std::thread::spawn(move || hand_over(&pid1, &[(&l, Carry::Proxy)]));
        assert_eq!(received(&proxy).unwrap().len(), 1);
        sender.join().unwrap().unwrap();
    }

    /// Sends a handoff of one descriptor, `fd`, with `body` after the magic byte: what a
    /// caller that builds the message itself sends.
    fn send_raw(pid1: &UnixStream, fd: std::os::fd::RawFd, body: &[u8]) {
        let raw = [fd];
        let cmsg = [ControlMessage::ScmRights(&raw)];
        let text = [MAGIC, body].concat();
        sendmsg::<()>(
            pid1.as_raw_fd(),
            &[io::IoSlice::new(&text)],
            &cmsg,
            MsgFlags::empty(),
            None,
        )
        .unwrap();
    }

    /// A line count that does not match the descriptors, or a port that is not one, is refused.
    #[test]
    fn a_malformed_handoff_is_refused() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        for body in [
            &b"proxy\nproxy\nend\n"[..],
            b"loopback 0\nend\n",
            b"loopback 08\nend\n",
            b"web\nend\n",
        ] {
            let (pid1, proxy) = UnixStream::pair().unwrap();
            send_raw(&pid1, l.as_raw_fd(), body);
            assert!(
                matches!(received(&proxy), Err(HandoffError::Malformed(_))),
                "{body:?}"
            );
        }
    }

    /// A peer that answers as an HTTP server would fails the handoff.
    #[test]
    fn a_proxy_that_does_not_know_the_handoff_fails_it() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let (pid1, mut proxy) = UnixStream::pair().unwrap();
        proxy
            .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            .unwrap();
        let e = hand_over(&pid1, &[(&l, Carry::Proxy)]).unwrap_err();
        assert!(
            e.to_string().contains("not a proxy that takes listeners"),
            "{e}"
        );
    }
}
