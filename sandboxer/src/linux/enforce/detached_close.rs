//! Closing descriptors in a process of their own, after the caller has gone on.
//!
//! Removing a placeholder takes its name away at once, but the file system frees what the
//! file or folder held only when the last descriptor of it is closed. On a file system mounted
//! with `discard` (ext4 on many virtual disks) that free waits for the disk to discard the
//! blocks: 2–4 ms for each placeholder folder (a folder's block) or `{}` file, one after
//! another, on the way out of every launch in a fresh home (docs/performance.md). Nothing is
//! reachable by then; only the freeing is left, so it is handed to a grandchild: a child
//! closes every other descriptor, starts the grandchild and exits; the grandchild holds the
//! descriptors until the caller has closed its own copies (the end of a pipe only the caller
//! writes to: so that the last close is always the grandchild's), then exits, and init reaps
//! it. The caller waits only for the child. The same holds for the guard watcher's inotify
//! instance, whose last close waits for an RCU grace period.

use std::os::fd::{AsRawFd, OwnedFd};

/// Closes `fds` without waiting for what closing them frees; falls back to closing them here
/// when no process can be started.
pub(super) fn close_detached(fds: Vec<OwnedFd>) {
    if fds.is_empty() {
        return;
    }
    // The grandchild waits for the end of this pipe, which comes once the caller has closed
    // its copies (only the caller holds the writing end).
    let Ok((caller_done, writer)) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) else {
        drop(fds);
        return;
    };
    let mut keep: Vec<libc::c_uint> = fds
        .iter()
        .chain([&caller_done])
        .map(|fd| fd.as_raw_fd() as libc::c_uint)
        .collect();
    keep.sort_unstable();
    // SAFETY: a plain fork by raw system call with no exit signal (the caller may be waiting
    // for SIGCHLD of its sandbox), in a caller that may have other threads: the child makes
    // only system calls and never returns into the caller's frames.
    let pid = unsafe { libc::syscall(libc::SYS_clone, 0 as libc::c_ulong, 0, 0, 0, 0) };
    match pid {
        0 => child(&keep, caller_done.as_raw_fd()),
        -1 => drop(fds),
        pid => {
            // The grandchild holds copies until the writer is closed: these closes are never
            // the last.
            drop(fds);
            drop(writer);
            drop(caller_done);
            let mut status = 0;
            // SAFETY: waits for the child just made; `__WALL` because it sends no signal.
            while unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::__WALL) } == -1
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
            {}
        }
    }
}

/// The child: keeps only `keep` (sorted), starts the grandchild, exits. The grandchild waits
/// for the end of `caller_done`.
fn child(keep: &[libc::c_uint], caller_done: libc::c_int) -> ! {
    // SAFETY: raw system calls on descriptors this process owns; it ends with `_exit`.
    unsafe {
        let mut from = 0;
        for &fd in keep {
            if fd > from {
                libc::close_range(from, fd - 1, 0);
            }
            from = fd + 1;
        }
        libc::close_range(from, libc::c_uint::MAX, 0);
        if libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_ulong, 0, 0, 0, 0) == 0 {
            let mut byte = 0u8;
            while libc::read(caller_done, (&raw mut byte).cast(), 1) == -1
                && *libc::__errno_location() == libc::EINTR
            {}
        }
        libc::_exit(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// The names are gone at once; the inodes are freed by the grandchild, which the caller
    /// does not wait for, and no descriptor of the caller's goes to the grandchild.
    #[test]
    fn closes_elsewhere_and_keeps_nothing_else_open() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "{}").unwrap();
        let fd: OwnedFd = std::fs::File::open(&file).unwrap().into();
        std::fs::remove_file(&file).unwrap();
        // A pipe whose read end must see EOF once this process closes its write end: the
        // grandchild must not hold a copy of it.
        let (reader, writer) = std::io::pipe().unwrap();
        close_detached(vec![fd]);
        drop(writer);
        let mut rest = Vec::new();
        let mut reader = reader;
        reader.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
        assert!(!file.exists());
    }

    #[test]
    fn nothing_to_close_starts_nothing() {
        close_detached(Vec::new());
    }
}
