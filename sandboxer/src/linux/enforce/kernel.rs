//! What a confined process may not change of the kernel, and which of the kernel's shared
//! objects it does not share, whoever launched it.
//!
//! Root outside stays kuid 0 inside the masks shape's user namespace (every uid is mapped to
//! itself), and the kernel's global knobs check little more than that: a sysctl under
//! `/proc/sys` (`kernel.core_pattern` set to a pipe makes the kernel run a program as real
//! root in the init namespaces at the next crash), `/proc/sysrq-trigger`, `/proc/irq`,
//! `/proc/bus`, and the files under `/sys`. They are permission bits, not capabilities, so
//! dropping every capability leaves them open. In the sandbox's own mount namespace each
//! becomes a read-only mount, with everything mounted beneath it, as bubblewrap's `--proc`
//! does for the first four. `/sys` holds the cgroup tree: a cgroup delegated to the person
//! (systemd's `user@UID.service`) would otherwise let `cgroup.kill` and `cgroup.freeze` reach
//! processes the sandbox cannot even see.
//!
//! The kernel's shared objects: the sandbox gets a new IPC namespace with the others (System V
//! shared memory, semaphores and message queues of outside processes are out of reach, and so
//! are POSIX message queues, whose file system on `/dev/mqueue` is mounted afresh for it), its
//! own `/dev` with a fresh tmpfs on `/dev/shm` (POSIX shared memory and semaphores are files
//! there; `devices.rs`), and the command a new session keyring (in both shapes). The user keyring (`@u`) belongs to the user
//! namespace (Linux ≥ 5.3), so the masks shape's is its own too.
//!
//! Landlock-only has no namespaces for a person, whose processes cannot write the kernel's
//! knobs anyway (root's files): the planner names what stays shared (gaps `sysv-ipc`,
//! `dev-shm`, `user-keyring`, `cgroup-tree`). Root needs no user namespace for a mount or IPC
//! namespace, so a root caller's landlock-only command gets both with all of the above
//! ([`private_for_root`]), or is not run.

use std::ffi::CStr;
use std::os::fd::OwnedFd;

use nix::errno::Errno;
use nix::sched::{CloneFlags, unshare};

use super::error::{EnforceError, Layer};
use super::{mounts, sys};

/// The kernel's global knobs but the sysctls, made read-only with every mount beneath them.
/// Missing ones (a kernel without magic SysRq, without `/proc/bus`) have nothing to protect.
const READ_ONLY: [&CStr; 4] = [c"/proc/sysrq-trigger", c"/proc/irq", c"/proc/bus", c"/sys"];

/// In the sandbox's own mount and IPC namespaces, once `/` is private and `/proc` is the one
/// the command will see: the knobs read-only but the sysctls ([`seal_sysctls`]). (`/dev/shm`
/// and `/dev/mqueue` are the sandbox's own with the rest of its `/dev`: `devices.rs`.)
pub(super) fn confine() -> Result<(), EnforceError> {
    for path in READ_ONLY {
        read_only(path)?;
    }
    Ok(())
}

/// `/proc/sys` read-only, with everything mounted beneath it (`binfmt_misc`). Last, once the
/// sandbox has set its own user namespace's limits there (`userns::forbid_nested`).
pub(super) fn seal_sysctls() -> Result<(), EnforceError> {
    read_only(c"/proc/sys")
}

/// The landlock-only shape for a root caller (before its capabilities are dropped): a private
/// mount namespace and a new IPC namespace, its own `/dev` (no disk to read raw), then
/// [`confine`]. Where the kernel refuses them
/// (a container without `CAP_SYS_ADMIN`), nothing is run: Landlock alone cannot keep root
/// from the kernel's knobs.
pub(super) fn private_for_root() -> Result<(), EnforceError> {
    unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWIPC).map_err(|e| {
        EnforceError::os(
            Layer::Kernel,
            "root is confined by Landlock alone only in a mount and IPC namespace of its own, \
             where /proc/sys, /sys and the other kernel knobs are read-only (file permissions \
             let root write them, capabilities or not); the kernel refused unshare(mount, ipc)",
            e,
        )
    })?;
    mounts::make_root_private()?;
    super::devices::fresh()?;
    confine()?;
    seal_sysctls()
}

/// The command's process: a new, empty session keyring instead of the caller's, whose keys
/// (and the keys other processes of the session add later) it would otherwise possess: read,
/// replace, link elsewhere.
pub(super) fn fresh_session_keyring() -> Result<(), EnforceError> {
    match sys::join_new_session_keyring() {
        // A kernel without keys has no keyring to share.
        Ok(()) | Err(Errno::ENOSYS) => Ok(()),
        Err(e) => Err(EnforceError::os(
            Layer::Keyring,
            "joining a new session keyring (keyctl JOIN_SESSION_KEYRING)",
            e,
        )),
    }
}

fn read_only(path: &CStr) -> Result<(), EnforceError> {
    let fail = |what: &str, e: Errno| {
        EnforceError::os(Layer::Kernel, format_args!("{path:?} read-only: {what}"), e)
    };
    let Some(target) = open(path).map_err(|e| fail("opening it", e))? else {
        return Ok(());
    };
    // A mount of its own (`/sys`, with its cgroup, debugfs... mounts beneath) is made
    // read-only where it is, submounts included: copying that tree to put it back over
    // itself cost a new mount per submount, at every launch. What lies inside another mount
    // (`/proc/sys` in the fresh procfs) is cloned and put back over itself, read-only.
    if sys::is_mount_root(&target).map_err(|e| fail("statx", e))? {
        return sys::mount_setattr(&target, libc::MOUNT_ATTR_RDONLY, true)
            .map_err(|e| fail("mount_setattr in place", e));
    }
    let tree = sys::clone_tree(&target).map_err(|e| fail("open_tree", e))?;
    sys::mount_setattr(&tree, libc::MOUNT_ATTR_RDONLY, true)
        .map_err(|e| fail("mount_setattr", e))?;
    sys::move_mount(&tree, &target).map_err(|e| fail("move_mount", e))
}

/// An `O_PATH` descriptor for `path`, `None` when it does not exist. A symlink on the way
/// (`/dev/shm -> /run/shm` on older systems) is followed: nothing untrusted has run yet in
/// this namespace, and the mount must land where the name leads.
fn open(path: &CStr) -> Result<Option<OwnedFd>, Errno> {
    let opened = match sys::open_path(path) {
        Err(Errno::ELOOP) => {
            let real = std::fs::canonicalize(path.to_str().map_err(|_| Errno::EINVAL)?)
                .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
            let real = std::ffi::CString::new(real.into_os_string().into_encoded_bytes())
                .map_err(|_| Errno::EINVAL)?;
            sys::open_path(&real)
        }
        other => other,
    };
    match opened {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}
