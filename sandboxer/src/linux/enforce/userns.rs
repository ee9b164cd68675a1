//! The sandbox's user namespace: the person's uid and gid mapped to themselves, so files the
//! command creates keep their owner and permission checks read as they do outside.

use nix::errno::Errno;
use nix::sched::{CloneFlags, unshare};

use super::error::{EnforceError, Layer};

/// Enters new user, mount, PID and IPC namespaces (the PID namespace applies to the children
/// made after this) and maps `uid`/`gid` to themselves. Must run in a single-threaded process.
pub(super) fn enter(uid: u32, gid: u32) -> Result<(), EnforceError> {
    let flags = CloneFlags::CLONE_NEWUSER
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWIPC;
    unshare(flags).map_err(|e| refused("unshare(user, mount, pid, ipc)", e))?;
    map(uid, gid)
}

/// The error for new namespaces the kernel would not make (`what` names the system call).
pub(super) fn refused(what: &str, e: Errno) -> EnforceError {
    let hint = match e {
        Errno::EPERM | Errno::ENOSPC | Errno::EACCES => {
            "; unprivileged user namespaces may be forbidden here (sysctl \
             kernel.unprivileged_userns_clone, user.max_user_namespaces, Ubuntu's AppArmor \
             restriction, or a container's seccomp profile): run `sandboxer doctor`"
        }
        _ => "",
    };
    EnforceError::os(Layer::UserNamespace, format_args!("{what}{hint}"), e)
}

/// In a new user namespace: maps `uid`/`gid` to themselves.
pub(super) fn map(uid: u32, gid: u32) -> Result<(), EnforceError> {
    // Without CAP_SETGID in the parent namespace the kernel accepts a gid map only once
    // setgroups(2) is disabled; disabling it always keeps one code path for root and others,
    // and the command has no business changing its groups anyway.
    write_proc("/proc/self/setgroups", "deny")?;
    write_proc("/proc/self/uid_map", &format!("{uid} {uid} 1\n"))?;
    write_proc("/proc/self/gid_map", &format!("{gid} {gid} 1\n"))?;
    Ok(())
}

/// In the sandbox's user namespace, with its capabilities: no user namespace may be made
/// beneath it. The command then holds no capability anywhere (it has none in this one), so
/// it can never mount, and the kernel code that only a namespace's owner can reach (most of
/// the unprivileged attack surface: netfilter, new mount trees, ...) is out of its reach.
pub(super) fn forbid_nested() -> Result<(), EnforceError> {
    write_proc("/proc/sys/user/max_user_namespaces", "0")
}

fn write_proc(file: &str, text: &str) -> Result<(), EnforceError> {
    std::fs::write(file, text).map_err(|e| {
        let errno = Errno::from_raw(e.raw_os_error().unwrap_or(0));
        EnforceError::os(
            Layer::UserNamespace,
            format_args!("writing {:?} to {file}", text.trim_end()),
            errno,
        )
    })
}
