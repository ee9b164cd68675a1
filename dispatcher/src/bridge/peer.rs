//! Who is on the other end of an accepted Unix socket, as the kernel says (not as the peer
//! claims): `SO_PEERCRED` on Linux, `getpeereid` + `LOCAL_PEERPID` on macOS.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

use serde::Serialize;

/// The connecting process. The uid is what the bridge checks; the pid is for the log (it is
/// the pid at connect time, as seen from the dispatcher's PID namespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Peer {
    pub uid: u32,
    pub pid: Option<i32>,
}

#[cfg(target_os = "linux")]
pub fn peer_of(stream: &UnixStream) -> io::Result<Peer> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`.
    let ret = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    if len as usize != std::mem::size_of::<libc::ucred>() {
        return Err(io::Error::other("SO_PEERCRED returned a short answer"));
    }
    Ok(Peer {
        uid: cred.uid,
        // 0: the peer is outside our PID namespace; there is no pid to record.
        pid: (cred.pid > 0).then_some(cred.pid),
    })
}

#[cfg(target_os = "macos")]
pub fn peer_of(stream: &UnixStream) -> io::Result<Peer> {
    let fd = stream.as_raw_fd();
    let mut uid: libc::uid_t = 0;
    let mut gid: libc::gid_t = 0;
    // SAFETY: getpeereid writes the two ids.
    if unsafe { libc::getpeereid(fd, &mut uid, &mut gid) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut pid: libc::pid_t = 0;
    let mut len = std::mem::size_of::<libc::pid_t>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `pid`.
    let ret = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_LOCAL,
            libc::LOCAL_PEERPID,
            (&raw mut pid).cast(),
            &mut len,
        )
    };
    Ok(Peer {
        uid,
        pid: (ret == 0 && pid > 0).then_some(pid),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_is_ourselves() {
        let (a, _b) = UnixStream::pair().unwrap();
        let p = peer_of(&a).unwrap();
        assert_eq!(p.uid, unsafe { libc::geteuid() });
        assert_eq!(p.pid, Some(std::process::id() as i32));
    }
}
