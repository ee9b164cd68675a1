//! The sandbox's own `/dev`: a small tmpfs holding only the devices a program needs, as
//! bubblewrap's `--dev` makes, instead of the host's.
//!
//! The host's `/dev` holds every device the caller's uid may open, and for root that is every
//! disk (`root:disk 0660`: the owner's bits, no capability needed): a raw read of the disk
//! reaches every file beneath the masks, the state root's token included. Besides the disks:
//! the kernel log (`/dev/kmsg`), the person's other terminals (`/dev/pts/N`), `/dev/shm`
//! and `/dev/mqueue` shared with every other process.
//!
//! So the sandbox gets a read-only tmpfs with `null`, `zero`, `full`, `random`, `urandom` and
//! `tty` bound in from the host (the same device nodes, nothing else reachable), the usual
//! symlinks (`fd`, `stdin`, `stdout`, `stderr`, `ptmx`), and fresh instances of `devpts`
//! (the sandbox's own ptys; the caller's terminal keeps working through the descriptors the
//! command inherits), `tmpfs` on `/dev/shm` and `mqueue` on `/dev/mqueue` (where the host has
//! one). The devices are captured from the host's `/dev` before the tmpfs covers it: a mount
//! on a detached tree is not possible on every kernel we support.

use std::ffi::CStr;
use std::os::fd::OwnedFd;

use nix::errno::Errno;
use nix::sys::stat::{FileStat, Mode, SFlag, fstatat, mkdirat};
use nix::unistd::symlinkat;

use super::error::{EnforceError, Layer};
use super::sys::{self, Dir};

/// The device nodes a program needs, bound in from the host when it has them.
const DEVICES: [&CStr; 6] = [c"null", c"zero", c"full", c"random", c"urandom", c"tty"];

/// `(name, target)` of the symlinks every Linux `/dev` has.
const LINKS: [(&CStr, &CStr); 5] = [
    (c"fd", c"/proc/self/fd"),
    (c"stdin", c"/proc/self/fd/0"),
    (c"stdout", c"/proc/self/fd/1"),
    (c"stderr", c"/proc/self/fd/2"),
    (c"ptmx", c"pts/ptmx"),
];

/// Replaces `/dev` with the sandbox's own (see the module's comment). Runs in the sandbox's
/// mount namespace once `/` is private and `/proc` is the sandbox's (the symlinks point there).
pub(super) fn fresh() -> Result<(), EnforceError> {
    let fail = |what: &str, e: Errno| EnforceError::os(Layer::Devices, what.to_string(), e);
    let host = match sys::open_no_symlinks(Dir::Cwd, c"/dev", libc::O_PATH | libc::O_DIRECTORY) {
        Ok(fd) => fd,
        // No /dev at all (a bare chroot): nothing to replace, nothing to reach.
        Err(Errno::ENOENT) => return Ok(()),
        Err(e) => return Err(fail("opening the host's /dev", e)),
    };
    let captured = capture_devices(&host)?;
    let had_mqueue = is_dir_at(&host, c"mqueue");

    let dev = sys::new_fs(
        c"tmpfs",
        &[(c"mode", c"0755"), (c"size", c"64k"), (c"nr_inodes", c"64")],
        libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NOEXEC,
    )
    .map_err(|e| fail("creating the tmpfs for /dev", e))?;
    sys::move_mount(&dev, &host).map_err(|e| fail("mounting the tmpfs over /dev", e))?;
    let root = sys::open_no_symlinks(Dir::Cwd, c"/dev", libc::O_PATH | libc::O_DIRECTORY)
        .map_err(|e| fail("opening the new /dev", e))?;

    for (name, device) in &captured {
        bind_device(&root, name, device)?;
    }
    for (name, target) in LINKS {
        symlinkat(target, &root, name).map_err(|e| {
            EnforceError::os(Layer::Devices, format_args!("symlink /dev/{name:?}"), e)
        })?;
    }
    let mut folders = vec![c"pts", c"shm"];
    if had_mqueue {
        folders.push(c"mqueue");
    }
    for name in &folders {
        mkdirat(&root, *name, Mode::from_bits_truncate(0o755)).map_err(|e| {
            EnforceError::os(Layer::Devices, format_args!("mkdir /dev/{name:?}"), e)
        })?;
    }
    // Every devpts mount is a new instance since Linux 4.7 (`newinstance` is implied).
    mount_in(
        &root,
        c"pts",
        c"devpts",
        &[(c"ptmxmode", c"0666"), (c"mode", c"0620")],
    )?;
    mount_in(&root, c"shm", c"tmpfs", &[(c"mode", c"1777")])?;
    if had_mqueue {
        mount_in(&root, c"mqueue", c"mqueue", &[])?;
    }
    // Nothing is made in /dev from now on; what is mounted in it keeps its own flags.
    sys::mount_setattr(&dev, libc::MOUNT_ATTR_RDONLY, false)
        .map_err(|e| fail("making the new /dev read-only", e))
}

/// A detached copy of each host device node in [`DEVICES`] that exists and is a character
/// device (a regular file or a symlink by that name is no device to hand on).
fn capture_devices(host: &OwnedFd) -> Result<Vec<(&'static CStr, OwnedFd)>, EnforceError> {
    let mut out = Vec::new();
    for name in DEVICES {
        match stat_at(host, name) {
            Some(st) if kind(&st) == SFlag::S_IFCHR => {}
            _ => continue,
        }
        let copy = sys::clone_entry(host, name).map_err(|e| {
            EnforceError::os(Layer::Devices, format_args!("capturing /dev/{name:?}"), e)
        })?;
        out.push((name, copy));
    }
    Ok(out)
}

fn bind_device(root: &OwnedFd, name: &CStr, device: &OwnedFd) -> Result<(), EnforceError> {
    let fail = |what: &str, e: Errno| {
        EnforceError::os(Layer::Devices, format_args!("/dev/{name:?}: {what}"), e)
    };
    // An empty file to mount the device node on.
    drop(
        sys::open_no_symlinks(
            Dir::Fd(root),
            name,
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
        )
        .map_err(|e| fail("creating its mount point", e))?,
    );
    let target = sys::open_no_symlinks(Dir::Fd(root), name, libc::O_PATH)
        .map_err(|e| fail("opening its mount point", e))?;
    sys::move_mount(device, &target).map_err(|e| fail("binding the host's node", e))
}

/// A new instance of `fstype` on the folder `name` of the new `/dev`.
fn mount_in(
    root: &OwnedFd,
    name: &CStr,
    fstype: &CStr,
    options: &[(&CStr, &CStr)],
) -> Result<(), EnforceError> {
    let fail = |what: &str, e: Errno| {
        EnforceError::os(
            Layer::Devices,
            format_args!("a fresh {fstype:?} on /dev/{name:?}: {what}"),
            e,
        )
    };
    let target = sys::open_no_symlinks(Dir::Fd(root), name, libc::O_PATH | libc::O_DIRECTORY)
        .map_err(|e| fail("opening it", e))?;
    let mnt = sys::new_fs(
        fstype,
        options,
        libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NOEXEC,
    )
    .map_err(|e| fail("creating it", e))?;
    sys::move_mount(&mnt, &target).map_err(|e| fail("move_mount", e))
}

fn stat_at(dir: &OwnedFd, name: &CStr) -> Option<FileStat> {
    fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).ok()
}

fn is_dir_at(dir: &OwnedFd, name: &CStr) -> bool {
    stat_at(dir, name).is_some_and(|st| kind(&st) == SFlag::S_IFDIR)
}

fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT
}
