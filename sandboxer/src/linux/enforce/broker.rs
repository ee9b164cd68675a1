//! The socket broker: performs every `connect(2)` of the sandbox on its behalf, and refuses
//! pathname Unix sockets outside the plan's allowlist (see docs/linux.md, "Unix sockets").
//!
//! The command's process installs the seccomp filter (`seccomp.rs`) last, and passes the
//! listener it got back to the broker over a socket pair made before (`SCM_RIGHTS`). The broker
//! runs outside the command's Landlock domain, in an ancestor of every confined process (PID 1
//! in the masks shape, a thread of the caller in landlock-only), so it may read their memory
//! and take their descriptors even where Yama restricts ptrace to descendants, and nothing
//! inside can signal or trace it.
//!
//! For each notification: the address is copied once from the process's memory, the very
//! socket is taken (`pidfd_getfd`: the same open file description), the notification is checked
//! to be still valid (so the pid was not reused meanwhile), and [`route`] decides. The broker
//! then connects the duplicate itself, which connects the process's socket, and answers with
//! the result; it never lets the kernel continue the call, since the process could rewrite the
//! address between the check and the kernel reading it again. A pathname socket is opened
//! (`O_PATH`, relative to the process's working directory), must be a socket that is one of the
//! allowlisted sockets (same device and inode as the allowlisted path opened now by the
//! broker), and is connected through `/proc/self/fd/N`: the inode checked is the inode
//! connected, whatever is renamed meanwhile. A blocking connect runs on a thread of its own,
//! so a slow server does not stall the others.

use std::ffi::CString;
use std::io::IoSlice;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};

use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
    sendmsg, socketpair,
};

use super::error::{EnforceError, Layer};

/// What one `connect` may do, decided from the socket's family and the address alone: the
/// single place where a connect is judged (a network policy would add its rules here).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// Not a Unix socket, or an address that names no Unix socket (the kernel refuses or, for a
    /// datagram socket and `AF_UNSPEC`, disconnects): connect with the copied address.
    Forward,
    /// A pathname Unix socket: allowed only when it is on the allowlist.
    UnixPath(Vec<u8>),
    /// Refused with this errno.
    Refuse(Errno),
}

/// Decides a connect of a socket of `domain` to the address `addr` (as the process gave it).
pub(super) fn route(domain: i32, addr: &[u8]) -> Route {
    if domain != libc::AF_UNIX || addr.len() < 2 {
        return Route::Forward;
    }
    let family = u16::from_ne_bytes([addr[0], addr[1]]);
    let path = &addr[2..];
    if i32::from(family) != libc::AF_UNIX || path.is_empty() {
        return Route::Forward;
    }
    if path[0] == 0 {
        // Abstract: the broker stands outside the command's Landlock domain, so connecting on
        // its behalf would escape the domain's abstract-socket scope.
        return Route::Refuse(Errno::EACCES);
    }
    let end = path.iter().position(|b| *b == 0).unwrap_or(path.len());
    Route::UnixPath(path[..end].to_vec())
}

/// The two ends of the socket pair that carries the listener from the command's process to the
/// broker. Made before the sandbox's process that installs the filter starts.
pub(super) struct Link {
    broker: OwnedFd,
    command: OwnedFd,
}

impl Link {
    pub fn new() -> Result<Link, EnforceError> {
        let (broker, command) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| EnforceError::os(Layer::SocketBroker, "socketpair for the listener", e))?;
        Ok(Link { broker, command })
    }

    /// The command's end, used in its process.
    pub fn command_end(&self) -> BorrowedFd<'_> {
        self.command.as_fd()
    }

    /// The broker's side, once the command's process is started: only the command's process
    /// keeps the other end, so the broker sees end-of-file if it fails before sending.
    pub fn into_broker_end(self) -> OwnedFd {
        drop(self.command);
        self.broker
    }
}

/// In the command's process: hands the filter's listener to the broker.
pub(super) fn send_listener(link: BorrowedFd<'_>, listener: OwnedFd) -> Result<(), EnforceError> {
    let fds = [listener.as_raw_fd()];
    let byte = [0u8];
    sendmsg::<()>(
        link.as_raw_fd(),
        &[IoSlice::new(&byte)],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        None,
    )
    .map(drop)
    .map_err(|e| EnforceError::os(Layer::SocketBroker, "passing the listener to the broker", e))
}

/// The broker's side: the listener, or `None` when the command's process ended without
/// sending it (it reported why, or never got that far).
fn receive_listener(link: &OwnedFd) -> Option<OwnedFd> {
    let mut byte = [0u8];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    loop {
        let mut iov = [std::io::IoSliceMut::new(&mut byte)];
        match recvmsg::<()>(
            link.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(Errno::EINTR) => continue,
            Err(_) => return None,
            Ok(msg) => {
                for c in msg.cmsgs().ok()? {
                    if let ControlMessageOwned::ScmRights(fds) = c
                        && let Some(fd) = fds.first()
                    {
                        // SAFETY: a descriptor just received, owned by nobody else.
                        return Some(unsafe { OwnedFd::from_raw_fd(*fd) });
                    }
                }
                return None;
            }
        }
    }
}

/// The pathname sockets the sandbox may connect to.
pub(super) type Allowlist = Arc<[PathBuf]>;

/// At most this many connects wait on threads of their own at once; more wait for a slot (the
/// sandbox only slows itself down).
const MAX_WAITING: usize = 64;

/// Runs [`serve`] on a thread of its own, in a process outside the command's Landlock domain
/// and an ancestor of every confined process (PID 1, or the landlock-only shape's caller).
pub(super) fn spawn(
    link: OwnedFd,
    allowed: Allowlist,
    stop: Option<OwnedFd>,
) -> Result<std::thread::JoinHandle<()>, EnforceError> {
    std::thread::Builder::new()
        .name("socket-broker".into())
        .spawn(move || serve(link, allowed, stop))
        .map_err(|e| EnforceError::new(Layer::SocketBroker, format!("starting the broker: {e}")))
}

/// Receives the listener over `link` and answers every notification until no confined process
/// is left (or `stop` becomes readable or hangs up). Errors end the broker: the sandbox's
/// connects then fail (`ENOSYS`) instead of passing unchecked.
pub(super) fn serve(link: OwnedFd, allowed: Allowlist, stop: Option<OwnedFd>) {
    let Some(listener) = receive_listener(&link) else {
        return;
    };
    drop(link);
    let listener = Arc::new(listener);
    let slots = Arc::new((Mutex::new(0usize), Condvar::new()));
    loop {
        if !wait_readable(&listener, stop.as_ref()) {
            return;
        }
        // SAFETY: a zeroed `seccomp_notif` is a valid value (plain integers), and the kernel
        // requires the buffer to be zeroed.
        let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: RECV fills `notif`, which lives for the call.
        let r = unsafe {
            libc::ioctl(
                listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                &raw mut notif,
            )
        };
        if r < 0 {
            match Errno::last() {
                // The process was interrupted or died before we read it.
                Errno::EINTR | Errno::ENOENT => continue,
                _ => return,
            }
        }
        let prepared = prepare(&listener, &notif, &allowed);
        match prepared {
            Prepared::Answer(result) => answer(&listener, notif.id, result),
            Prepared::Gone => {}
            Prepared::Connect(job) if !job.blocking => {
                let result = job.connect();
                answer(&listener, notif.id, result);
            }
            Prepared::Connect(job) => {
                take_slot(&slots);
                let (l, s, id) = (listener.clone(), slots.clone(), notif.id);
                let spawned = std::thread::Builder::new()
                    .name("socket-broker".into())
                    .stack_size(64 * 1024)
                    .spawn(move || {
                        let result = job.connect();
                        answer(&l, id, result);
                        give_slot(&s);
                    });
                if spawned.is_err() {
                    give_slot(&slots);
                    answer(&listener, notif.id, Err(Errno::EAGAIN));
                }
            }
        }
    }
}

fn take_slot(slots: &(Mutex<usize>, Condvar)) {
    let mut n = slots.0.lock().unwrap_or_else(|e| e.into_inner());
    while *n >= MAX_WAITING {
        n = slots.1.wait(n).unwrap_or_else(|e| e.into_inner());
    }
    *n += 1;
}

fn give_slot(slots: &(Mutex<usize>, Condvar)) {
    let mut n = slots.0.lock().unwrap_or_else(|e| e.into_inner());
    *n -= 1;
    slots.1.notify_one();
}

/// Waits until the listener has a notification; false once no confined process is left or
/// `stop` says so.
fn wait_readable(listener: &OwnedFd, stop: Option<&OwnedFd>) -> bool {
    let mut fds = vec![libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    if let Some(s) = stop {
        fds.push(libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
    }
    loop {
        // SAFETY: `fds` is a valid array of `fds.len()` entries for the call.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if r < 0 {
            if Errno::last() == Errno::EINTR {
                continue;
            }
            return false;
        }
        if fds.len() > 1 && fds[1].revents != 0 {
            return false;
        }
        let rev = fds[0].revents;
        if rev & libc::POLLIN != 0 {
            return true;
        }
        if rev & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            return false;
        }
    }
}

/// Sends the answer for notification `id`: the call's return value or its errno.
fn answer(listener: &OwnedFd, id: u64, result: Result<(), Errno>) {
    let resp = libc::seccomp_notif_resp {
        id,
        val: 0,
        error: match result {
            Ok(()) => 0,
            Err(e) => -(e as i32),
        },
        flags: 0,
    };
    // SAFETY: SEND reads `resp`, which lives for the call. ENOENT (the process was
    // interrupted or died meanwhile) needs nothing more.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND,
            &raw const resp,
        )
    };
}

enum Prepared {
    /// Decided without connecting.
    Answer(Result<(), Errno>),
    /// The notification is no longer valid: nothing to answer.
    Gone,
    Connect(Job),
}

/// A connect to perform on the process's socket.
struct Job {
    socket: OwnedFd,
    target: Target,
    /// The socket is in blocking mode: the connect may take a while.
    blocking: bool,
}

enum Target {
    /// The address as the process gave it.
    Bytes(Vec<u8>),
    /// The allowlisted socket, opened `O_PATH`: connected through `/proc/self/fd/N`.
    Inode(OwnedFd),
}

impl Job {
    fn connect(self) -> Result<(), Errno> {
        let r = match &self.target {
            // SAFETY: `bytes` is a readable buffer of the given length for the call.
            Target::Bytes(bytes) => unsafe {
                libc::connect(
                    self.socket.as_raw_fd(),
                    bytes.as_ptr().cast(),
                    bytes.len() as libc::socklen_t,
                )
            },
            Target::Inode(fd) => {
                let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
                // SAFETY: a zeroed sockaddr_un is valid; the path is far shorter than sun_path.
                let mut sun: libc::sockaddr_un = unsafe { std::mem::zeroed() };
                sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
                for (d, s) in sun.sun_path.iter_mut().zip(path.bytes()) {
                    *d = s as libc::c_char;
                }
                let len = std::mem::size_of::<libc::sa_family_t>() + path.len();
                // SAFETY: `sun` is a valid sockaddr_un for the call, `len` within it.
                unsafe {
                    libc::connect(
                        self.socket.as_raw_fd(),
                        (&raw const sun).cast(),
                        len as libc::socklen_t,
                    )
                }
            }
        };
        if r == 0 { Ok(()) } else { Err(Errno::last()) }
    }
}

/// Everything but the connect itself: reads the address, takes the socket, decides.
fn prepare(listener: &OwnedFd, n: &libc::seccomp_notif, allowed: &[PathBuf]) -> Prepared {
    let fail = |e: Errno| Prepared::Answer(Err(e));
    let tid = n.pid as libc::pid_t;
    let fd = n.data.args[0] as i32;
    let ptr = n.data.args[1];
    let len = n.data.args[2] as u32 as usize;
    if tid <= 0 {
        return fail(Errno::EPERM);
    }
    // The kernel's own limit for a socket address (move_addr_to_kernel).
    if len > std::mem::size_of::<libc::sockaddr_storage>() {
        return fail(Errno::EINVAL);
    }
    let mut addr = vec![0u8; len];
    if len > 0 {
        let local = libc::iovec {
            iov_base: addr.as_mut_ptr().cast(),
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: ptr as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: writes at most `len` bytes into `addr`; the remote side is only read.
        let got = unsafe { libc::process_vm_readv(tid, &local, 1, &remote, 1, 0) };
        if got != len as isize {
            return if valid(listener, n.id) {
                fail(Errno::EFAULT)
            } else {
                Prepared::Gone
            };
        }
    }
    let socket = match take_socket(tid, fd) {
        Ok(s) => s,
        Err(e) => {
            return if valid(listener, n.id) {
                fail(e)
            } else {
                Prepared::Gone
            };
        }
    };
    let route = match socket_domain(&socket) {
        Ok(domain) => route(domain, &addr),
        Err(e) => Route::Refuse(e),
    };
    let target = match route {
        Route::Refuse(e) => return fail(e),
        Route::Forward => Target::Bytes(addr),
        Route::UnixPath(path) => match open_allowed(tid, &path, allowed) {
            Ok(inode) => Target::Inode(inode),
            Err(e) => {
                return if valid(listener, n.id) {
                    fail(e)
                } else {
                    Prepared::Gone
                };
            }
        },
    };
    // Every read above was of this very process (its pid cannot have been reused while the
    // notification is pending).
    if !valid(listener, n.id) {
        return Prepared::Gone;
    }
    let blocking = nix::fcntl::fcntl(&socket, nix::fcntl::FcntlArg::F_GETFL)
        .map(|f| f & libc::O_NONBLOCK == 0)
        .unwrap_or(true);
    Prepared::Connect(Job {
        socket,
        target,
        blocking,
    })
}

fn valid(listener: &OwnedFd, id: u64) -> bool {
    // SAFETY: ID_VALID reads the id, which lives for the call.
    let r = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
            &raw const id,
        )
    };
    r == 0
}

/// The process's descriptor `fd`, duplicated into this process (same open file description).
fn take_socket(tid: libc::pid_t, fd: i32) -> Result<OwnedFd, Errno> {
    // A thread's own pidfd (Linux >= 6.9), else its process's (the notification names the
    // thread that called).
    let pidfd =
        pidfd_open(tid, libc::PIDFD_THREAD).or_else(|_| pidfd_open(thread_group(tid)?, 0))?;
    // SAFETY: plain system call; a returned descriptor is new and ours.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if r < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a new descriptor the kernel just returned (close-on-exec, as pidfd_getfd sets).
    Ok(unsafe { OwnedFd::from_raw_fd(r as i32) })
}

fn pidfd_open(pid: libc::pid_t, flags: libc::c_uint) -> Result<OwnedFd, Errno> {
    // SAFETY: plain system call; a returned descriptor is new and ours.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, flags) };
    if r < 0 {
        return Err(Errno::last());
    }
    // SAFETY: as above.
    Ok(unsafe { OwnedFd::from_raw_fd(r as i32) })
}

/// The process a thread belongs to (older kernels open pidfds of processes only).
fn thread_group(tid: libc::pid_t) -> Result<libc::pid_t, Errno> {
    let status =
        std::fs::read_to_string(format!("/proc/{tid}/status")).map_err(|_| Errno::ESRCH)?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or(Errno::ESRCH)
}

fn socket_domain(socket: &OwnedFd) -> Result<i32, Errno> {
    let mut domain: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `domain`.
    let r = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_DOMAIN,
            (&raw mut domain).cast(),
            &mut len,
        )
    };
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(domain)
    }
}

/// Opens the socket `path` names for the process (relative to its working directory) and
/// checks it is one of the allowlisted sockets. The errors are those `connect` would give:
/// `ENOENT` and the like while resolving, `ECONNREFUSED` for what is not a socket, `EACCES`
/// for a socket off the list.
fn open_allowed(tid: libc::pid_t, path: &[u8], allowed: &[PathBuf]) -> Result<OwnedFd, Errno> {
    let path = CString::new(path).map_err(|_| Errno::EINVAL)?;
    let cwd = if path.as_bytes().first() == Some(&b'/') {
        None
    } else {
        let at = CString::new(format!("/proc/{tid}/cwd")).expect("no NUL");
        Some(open_path(None, &at, libc::O_DIRECTORY)?)
    };
    let inode = open_path(cwd.as_ref(), &path, 0)?;
    let st = nix::sys::stat::fstat(&inode)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(Errno::ECONNREFUSED);
    }
    let same = |p: &PathBuf| {
        CString::new(p.as_os_str().as_bytes())
            .ok()
            .and_then(|c| open_path(None, &c, 0).ok())
            .and_then(|fd| nix::sys::stat::fstat(&fd).ok())
            .is_some_and(|a| a.st_dev == st.st_dev && a.st_ino == st.st_ino)
    };
    if allowed.iter().any(same) {
        Ok(inode)
    } else {
        Err(Errno::EACCES)
    }
}

fn open_path(at: Option<&OwnedFd>, path: &CString, extra: i32) -> Result<OwnedFd, Errno> {
    let dir = at.map_or(libc::AT_FDCWD, |f| f.as_raw_fd());
    // SAFETY: `path` is NUL-terminated; a returned descriptor is new and ours.
    let fd = unsafe { libc::openat(dir, path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC | extra) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: as above.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unix(path: &[u8]) -> Vec<u8> {
        let mut a = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
        a.extend_from_slice(path);
        a
    }

    #[test]
    fn routes_each_kind_of_address() {
        let u = libc::AF_UNIX;
        assert_eq!(
            route(u, &unix(b"/tmp/x.sock\0junk")),
            Route::UnixPath(b"/tmp/x.sock".to_vec())
        );
        assert_eq!(
            route(u, &unix(b"rel.sock")),
            Route::UnixPath(b"rel.sock".to_vec())
        );
        assert_eq!(route(u, &unix(b"\0abstract")), Route::Refuse(Errno::EACCES));
        // No path (the kernel says EINVAL), another family: nothing is reached.
        assert_eq!(route(u, &unix(b"")), Route::Forward);
        assert_eq!(route(u, &[]), Route::Forward);
        let unspec = (libc::AF_UNSPEC as u16).to_ne_bytes();
        assert_eq!(route(u, &unspec), Route::Forward);
        // Another socket family: its address is the kernel's to judge.
        assert_eq!(route(libc::AF_INET, &unix(b"/tmp/x.sock")), Route::Forward);
    }
}
