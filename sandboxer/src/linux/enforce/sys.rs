//! Raw system calls that neither `nix` nor `libc` wrap: the new mount API (`open_tree`,
//! `move_mount`, `fsopen`/`fsconfig`/`fsmount`, `mount_setattr`), `openat2`, `keyctl` and the
//! Landlock ABI query. Each wrapper returns owned descriptors and an [`Errno`]; callers add
//! context.
//!
//! Every path the enforcer touches is resolved with `RESOLVE_NO_SYMLINKS`: plan paths are
//! canonical, so a symlink on the way means the tree changed since planning (or someone is
//! trying to redirect a mount), and the step must fail rather than land elsewhere.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::socket::{MsgFlags, recv};

fn fd_result(ret: libc::c_long) -> Result<OwnedFd, Errno> {
    if ret < 0 {
        Err(Errno::last())
    } else {
        // SAFETY: the kernel just returned this descriptor to us; nobody else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(ret as RawFd) })
    }
}

fn unit_result(ret: libc::c_long) -> Result<(), Errno> {
    if ret < 0 { Err(Errno::last()) } else { Ok(()) }
}

const EMPTY: &CStr = c"";

/// Where a relative path starts: a directory descriptor or the working directory.
#[derive(Clone, Copy)]
pub(super) enum Dir<'a> {
    Cwd,
    Fd(&'a OwnedFd),
}

impl Dir<'_> {
    fn raw(self) -> RawFd {
        match self {
            Dir::Cwd => libc::AT_FDCWD,
            Dir::Fd(fd) => fd.as_raw_fd(),
        }
    }
}

/// A plain fork by raw system call (no new stack, no TLS, `SIGCHLD` to the parent), for PID 1's
/// helper processes: PID 1 is single-threaded and may itself come from a raw `clone`, where
/// glibc's own `fork` bookkeeping may be stale. `None` in the child, the child's pid in the
/// parent.
///
/// # Safety
/// The caller must be single-threaded, and the child must never return into the caller's
/// frames (it ends with `_exit`).
pub(super) unsafe fn fork_raw() -> Result<Option<libc::pid_t>, Errno> {
    // SAFETY: the caller's contract above.
    let pid = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_ulong, 0, 0, 0, 0) };
    match pid {
        -1 => Err(Errno::last()),
        0 => Ok(None),
        pid => Ok(Some(pid as libc::pid_t)),
    }
}

/// `openat2(dir, path, flags, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`.
pub(super) fn open_no_symlinks(
    dir: Dir,
    path: &CStr,
    flags: libc::c_int,
) -> Result<OwnedFd, Errno> {
    // SAFETY: `open_how` is plain integers; all-zero is its documented default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: `path` is NUL-terminated and `how` lives across the call with its true size.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.raw(),
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    fd_result(ret)
}

/// An `O_PATH` descriptor for `path`, refusing symlinks anywhere on the way.
pub(super) fn open_path(path: &CStr) -> Result<OwnedFd, Errno> {
    open_no_symlinks(Dir::Cwd, path, libc::O_PATH)
}

/// An `O_PATH` descriptor of `path` itself, also when it is a symlink (the link, not what it
/// names); no symlink is followed on the way.
pub(super) fn open_entry(path: &CStr) -> Result<OwnedFd, Errno> {
    open_no_symlinks(Dir::Cwd, path, libc::O_PATH | libc::O_NOFOLLOW)
}

/// A detached copy of the mount tree at `fd` (submounts included), not attached anywhere.
pub(super) fn clone_tree(fd: &OwnedFd) -> Result<OwnedFd, Errno> {
    let flags = libc::OPEN_TREE_CLONE
        | libc::OPEN_TREE_CLOEXEC
        | libc::AT_EMPTY_PATH as libc::c_uint
        | libc::AT_RECURSIVE as libc::c_uint;
    // SAFETY: plain syscall on a descriptor we own and a static empty path.
    let ret = unsafe { libc::syscall(libc::SYS_open_tree, fd.as_raw_fd(), EMPTY.as_ptr(), flags) };
    fd_result(ret)
}

/// Whether `fd` is the root of a mount (`STATX_ATTR_MOUNT_ROOT`, Linux 5.8).
pub(super) fn is_mount_root(fd: &OwnedFd) -> Result<bool, Errno> {
    // SAFETY: all-zero is a valid `statx`; the kernel fills it.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `stx` lives across the call; the path is a static empty string.
    let ret = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            libc::AT_EMPTY_PATH,
            0,
            &mut stx,
        )
    };
    unit_result(ret.into())?;
    let mask = libc::STATX_ATTR_MOUNT_ROOT as u64;
    Ok(stx.stx_attributes_mask & mask != 0 && stx.stx_attributes & mask != 0)
}

/// A detached copy of the single file or folder `name` beneath `dir`.
pub(super) fn clone_entry(dir: &OwnedFd, name: &CStr) -> Result<OwnedFd, Errno> {
    let flags = libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC;
    // SAFETY: plain syscall; `name` is NUL-terminated.
    let ret = unsafe { libc::syscall(libc::SYS_open_tree, dir.as_raw_fd(), name.as_ptr(), flags) };
    fd_result(ret)
}

/// Attaches the detached mount `from` on top of whatever `to` refers to.
pub(super) fn move_mount(from: &OwnedFd, to: &OwnedFd) -> Result<(), Errno> {
    let flags = libc::MOVE_MOUNT_F_EMPTY_PATH | libc::MOVE_MOUNT_T_EMPTY_PATH;
    // SAFETY: plain syscall on descriptors we own and static empty paths.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from.as_raw_fd(),
            EMPTY.as_ptr(),
            to.as_raw_fd(),
            EMPTY.as_ptr(),
            flags,
        )
    };
    unit_result(ret)
}

/// Sets mount attributes (`MOUNT_ATTR_*`) on the mount `fd` refers to, and on every mount
/// beneath it when `recursive`.
pub(super) fn mount_setattr(fd: &OwnedFd, attr_set: u64, recursive: bool) -> Result<(), Errno> {
    let attr = libc::mount_attr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let mut flags = libc::AT_EMPTY_PATH as libc::c_uint;
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    // SAFETY: `attr` lives across the call and its size is passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            flags,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    unit_result(ret)
}

/// A new, detached tmpfs with the given root `mode` (octal text) and mount attributes.
pub(super) fn new_tmpfs(mode: &CStr, attrs: u64) -> Result<OwnedFd, Errno> {
    // The folders here only ever hold mount points and one empty file: a small cap keeps a
    // confined process from using a writable moment (there is none after setup) as storage.
    new_fs(
        c"tmpfs",
        &[(c"mode", mode), (c"size", c"64k"), (c"nr_inodes", c"1024")],
        attrs,
    )
}

/// A new, detached instance of the file system `fstype` with the given string options and
/// mount attributes (`fsopen`, `fsconfig`, `fsmount`).
pub(super) fn new_fs(
    fstype: &CStr,
    options: &[(&CStr, &CStr)],
    attrs: u64,
) -> Result<OwnedFd, Errno> {
    // SAFETY: static NUL-terminated name.
    let fs = fd_result(unsafe {
        libc::syscall(libc::SYS_fsopen, fstype.as_ptr(), libc::FSOPEN_CLOEXEC)
    })?;
    for (key, value) in options {
        fsconfig_string(&fs, key, value)?;
    }
    // SAFETY: plain syscall on a descriptor we own.
    unit_result(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            libc::FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    })?;
    // SAFETY: plain syscall on a descriptor we own.
    fd_result(unsafe {
        libc::syscall(
            libc::SYS_fsmount,
            fs.as_raw_fd(),
            libc::FSMOUNT_CLOEXEC,
            attrs,
        )
    })
}

fn fsconfig_string(fs: &OwnedFd, key: &CStr, value: &CStr) -> Result<(), Errno> {
    // SAFETY: both strings are NUL-terminated and outlive the call.
    unit_result(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            libc::FSCONFIG_SET_STRING,
            key.as_ptr(),
            value.as_ptr(),
            0,
        )
    })
}

/// `flock(2)`, tried again when a signal interrupts it.
pub(crate) fn flock(fd: &OwnedFd, how: libc::c_int) -> Result<(), Errno> {
    loop {
        // SAFETY: `fd` is an open descriptor owned by the caller.
        match Errno::result(unsafe { libc::flock(fd.as_raw_fd(), how) }) {
            Ok(_) => return Ok(()),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// `keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL)`: this process gets a new, empty, anonymous
/// session keyring in place of the one it inherited.
pub(super) fn join_new_session_keyring() -> Result<(), Errno> {
    const KEYCTL_JOIN_SESSION_KEYRING: libc::c_int = 1;
    // SAFETY: a null name asks for an anonymous keyring; no memory is passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_JOIN_SESSION_KEYRING,
            std::ptr::null::<libc::c_char>(),
        )
    };
    unit_result(ret)
}

/// The running kernel's Landlock ABI version, or the errno explaining its absence
/// (`ENOSYS`: not built in; `EOPNOTSUPP`: disabled at boot).
pub(super) fn landlock_abi() -> Result<u32, Errno> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: the version query takes no attribute pointer and size 0.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(ret as u32)
    }
}

/// Marks every descriptor from 3 up close-on-exec, so that nothing the caller left open (a
/// folder inside a protected root, say) crosses into the confined program.
pub(super) fn cloexec_from_3() -> Result<(), Errno> {
    // SAFETY: plain syscall; no memory is passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    unit_result(ret)
}

/// How long [`recv_soon`] keeps asking before it sleeps.
const SPIN: std::time::Duration = std::time::Duration::from_micros(150);

/// `recv(2)` of an answer expected within microseconds (the gate's, the plan): with `spin`,
/// asks without blocking for up to [`SPIN`] first, then blocks. A process blocked on an idle
/// CPU is woken by an interrupt from the sender's CPU, which a VM turns into an exit to the
/// hypervisor and back (about 40 µs here, 0.08 ms per launch for the two waits); the CPU it
/// spins on has nothing else to run meanwhile (PID 1 is suspended until the command executes,
/// the caller works on another). Callers spin only when the process may use more than one
/// CPU: on one, spinning would hold up the very process that is to answer. `EINTR` is
/// retried.
pub(super) fn recv_soon(fd: RawFd, buf: &mut [u8], spin: bool) -> Result<usize, Errno> {
    let start = std::time::Instant::now();
    while spin && start.elapsed() < SPIN {
        match recv(fd, buf, MsgFlags::MSG_DONTWAIT) {
            Err(Errno::EAGAIN) => std::hint::spin_loop(),
            Err(Errno::EINTR) => continue,
            other => return other,
        }
    }
    loop {
        match recv(fd, buf, MsgFlags::empty()) {
            Err(Errno::EINTR) => continue,
            other => return other,
        }
    }
}

/// A Unix stream socket pair, close-on-exec, for a word from the caller to a sandbox process
/// (the gate's answer, the plan). The caller keeps the sending end; every sandbox process lets
/// go of its copy as soon as it starts ([`OneWay::leave_to_parent`]), so the reading end sees
/// the end of the stream once the caller has closed its end or died. Sending never raises
/// `SIGPIPE` (`MSG_NOSIGNAL`): the sandbox may have failed and gone meanwhile.
pub(super) struct OneWay {
    /// Read by a sandbox process.
    pub receive: OwnedFd,
    /// Written by the caller; taken (closed) once it has said what it had to say.
    send: std::cell::Cell<Option<OwnedFd>>,
}

impl OneWay {
    /// `what` names it in the error.
    pub fn new(what: &str) -> Result<OneWay, super::error::EnforceError> {
        use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
        let (receive, send) = socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| {
            super::error::EnforceError::os(
                super::error::Layer::Process,
                format_args!("creating {what} (socketpair)"),
                e,
            )
        })?;
        Ok(OneWay {
            receive,
            send: std::cell::Cell::new(Some(send)),
        })
    }

    /// The caller's side: sends all of `bytes` (as far as anyone reads) and closes its end.
    /// Without bytes, only closes it.
    pub fn say(&self, bytes: &[u8]) {
        let Some(fd) = self.send.take() else {
            return;
        };
        let mut rest = bytes;
        while !rest.is_empty() {
            match nix::sys::socket::send(fd.as_raw_fd(), rest, MsgFlags::MSG_NOSIGNAL) {
                Ok(n) => rest = &rest[n..],
                Err(Errno::EINTR) => continue,
                Err(_) => break,
            }
        }
    }

    /// In a sandbox process: closes this process's copy of the sending end, so that the
    /// caller's is the last one.
    pub fn leave_to_parent(&self) {
        drop(self.send.take());
    }
}
