//! Writing a refused path from outside while sandboxes run: "mask first, then move".
//!
//! A running sandbox (masks shape) hides a refused path by a mount on its dentry, and a
//! refused path missing at launch by a mount on an empty placeholder folder. The product (the
//! unconfined dispatcher) cannot write a file where that folder is, and renaming a new file
//! over the path would detach the sandbox's mask (the kernel detaches the mounts of a replaced
//! dentry in every mount namespace), so the sandbox would read what was written. Instead,
//! [`write`] and [`replace_folder`]:
//!
//! 1. take the registry's lock exclusively (launches register under it shared, so every
//!    sandbox is either listed in the registry, or applies its masks by path afterwards);
//! 2. create the new entry in the staging folder beside the path ([`STAGING`], refused in
//!    every sandbox that refuses the path, so nothing there can open it), empty;
//! 3. ask every running sandbox's mask keeper to mask it (see `enforce/keeper.rs`); a
//!    finished sandbox's socket is removed; a sandbox that is alive but does not answer makes
//!    the write fail, with nothing written and nothing lost;
//! 4. fill it and `fsync` it, then exchange it with the path (`renameat2(RENAME_EXCHANGE)`,
//!    which keeps each dentry's mounts: the new content arrives masked) or, when nothing is
//!    there, move it into place (`RENAME_NOREPLACE`); what was there (the old file, or the
//!    placeholder folder) is now in staging and is removed.
//!
//! Without a registry (no sandbox ever registered) the same steps run with no one to ask.
//! Paths are taken as the policy names them (canonical: no symlinks on the way).

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;

use crate::linux::enforce::keeper::{self, ALIVE_EXT, LOCK, SOCK_EXT};
use crate::linux::plan::STAGING;

/// Why a refused path could not be written. Nothing was written then: the path holds what it
/// held before.
#[derive(Debug, thiserror::Error)]
#[error("writing refused path {path}: {what}: {source}")]
pub struct RefusedError {
    pub path: PathBuf,
    pub what: String,
    #[source]
    pub source: io::Error,
}

/// Creates or atomically replaces the file at `path` with `contents`, masked in every
/// sandbox registered in `registry` before a byte is written.
pub fn write(registry: &Path, path: &Path, contents: &[u8]) -> Result<(), RefusedError> {
    stage(registry, path, Kind::File, &mut |staged| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(staged)?;
        file.write_all(contents)?;
        file.sync_all()
    })
}

/// Creates or atomically replaces the folder at `path` with one `fill` makes (it gets the
/// staged folder's path, already masked in every registered sandbox).
pub fn replace_folder(
    registry: &Path,
    path: &Path,
    fill: &mut dyn FnMut(&Path) -> io::Result<()>,
) -> Result<(), RefusedError> {
    stage(registry, path, Kind::Folder, fill)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Folder,
}

fn stage(
    registry: &Path,
    path: &Path,
    kind: Kind,
    fill: &mut dyn FnMut(&Path) -> io::Result<()>,
) -> Result<(), RefusedError> {
    let fail = |what: &str, source: io::Error| RefusedError {
        path: path.to_path_buf(),
        what: what.to_owned(),
        source,
    };
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(fail(
            "the path",
            io::Error::new(io::ErrorKind::InvalidInput, "no parent folder or no name"),
        ));
    };
    if !path.is_absolute() {
        return Err(fail(
            "the path",
            io::Error::new(io::ErrorKind::InvalidInput, "not absolute"),
        ));
    }
    std::fs::create_dir_all(registry).map_err(|e| fail("creating the mask registry", e))?;
    let reg = open_dir(registry).map_err(|e| fail("opening the mask registry", e))?;
    let lock = openat(&reg, OsStr::new(LOCK), libc::O_RDWR | libc::O_CREAT)
        .map_err(|e| fail("opening the registry lock", e))?;
    keeper::flock(&lock, libc::LOCK_EX).map_err(|e| fail("locking the registry", e.into()))?;

    let dir = open_dir(parent).map_err(|e| fail("opening its folder", e))?;
    let (staging, staging_path) = open_staging(&dir, parent).map_err(|e| fail("staging", e))?;
    let temp = OsStr::new(&format!(
        ".new-{}",
        keeper::random_hex().map_err(|e| fail("random", e))?
    ))
    .to_owned();
    let staged = staging_path.join(&temp);
    let ctemp = c(&temp).map_err(|e| fail("the staged name", e))?;
    let cname = c(name).map_err(|e| fail("the name", e))?;
    match kind {
        Kind::File => {
            let fd = openat(
                &staging,
                &temp,
                libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
            )
            .map_err(|e| fail("creating the staged file", e))?;
            drop(fd);
        }
        // SAFETY: valid descriptor and NUL-terminated name.
        Kind::Folder => {
            Errno::result(unsafe { libc::mkdirat(staging.as_raw_fd(), ctemp.as_ptr(), 0o700) })
                .map(drop)
                .map_err(|e| fail("creating the staged folder", e.into()))?
        }
    }
    let done = mask_everywhere(&reg, &staged)
        .map_err(|e| fail("masking the staged entry in the running sandboxes", e))
        .and_then(|()| fill(&staged).map_err(|e| fail("filling the staged entry", e)))
        .and_then(|()| {
            move_into_place(&staging, &ctemp, &dir, &cname)
                .map_err(|e| fail("moving it into place", e))
        });
    // Whatever is at the staged name now: the new entry (failure) or what the path held.
    remove_entry(&staged);
    if done.is_ok() {
        let _ = File::open(parent).and_then(|d| d.sync_all());
    }
    drop(lock);
    done
}

/// Exchanges the staged entry with the path, or moves it there when nothing is there.
fn move_into_place(
    staging: &OwnedFd,
    temp: &CString,
    dir: &OwnedFd,
    name: &CString,
) -> io::Result<()> {
    let rename = |flags: libc::c_uint| {
        // SAFETY: valid descriptors and NUL-terminated names.
        Errno::result(unsafe {
            libc::renameat2(
                staging.as_raw_fd(),
                temp.as_ptr(),
                dir.as_raw_fd(),
                name.as_ptr(),
                flags,
            )
        })
    };
    match rename(libc::RENAME_EXCHANGE) {
        Ok(_) => Ok(()),
        Err(Errno::ENOENT) => rename(libc::RENAME_NOREPLACE).map(drop).map_err(Into::into),
        Err(e) => Err(e.into()),
    }
}

/// Asks every registered keeper to mask `staged`. A keeper whose sandbox ended (its lock file
/// free) is removed from the registry; any other failure is the write's.
fn mask_everywhere(reg: &OwnedFd, staged: &Path) -> io::Result<()> {
    let entries = std::fs::read_dir(format!("/proc/self/fd/{}", reg.as_raw_fd()))?;
    for entry in entries {
        let entry = entry?;
        let file = entry.file_name();
        let file = Path::new(&file);
        if file.extension() != Some(OsStr::new(SOCK_EXT)) {
            continue;
        }
        let sock = file.to_str().unwrap_or_default().to_owned();
        let alive = file.with_extension(ALIVE_EXT);
        match keeper::ask(reg, &sock, staged) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNREFUSED | libc::ENOENT)) => {
                if !finished(reg, alive.as_os_str())? {
                    return Err(io::Error::other(format!(
                        "the sandbox behind {sock} still runs but its mask keeper does not \
                         answer ({e}); nothing was written"
                    )));
                }
                unlinkat(reg, file.as_os_str(), 0)?;
                unlinkat(reg, alive.as_os_str(), 0)?;
            }
            Err(e) => {
                return Err(io::Error::other(format!(
                    "the mask keeper at {sock} failed ({e}); nothing was written"
                )));
            }
        }
    }
    Ok(())
}

/// Whether the sandbox whose lock file is `alive` has ended (no process holds the lock).
fn finished(reg: &OwnedFd, alive: &OsStr) -> io::Result<bool> {
    let fd = match openat(reg, alive, libc::O_RDWR) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
        Err(e) => return Err(e),
    };
    match keeper::flock(&fd, libc::LOCK_EX | libc::LOCK_NB) {
        Ok(()) => Ok(true),
        Err(Errno::EWOULDBLOCK) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The staging folder in `dir`, made if missing, held with a shared `flock` (a launch removes
/// a staging placeholder only when it can lock it exclusively: see `placeholders.rs`).
fn open_staging(dir: &OwnedFd, parent: &Path) -> io::Result<(OwnedFd, PathBuf)> {
    let name = c(OsStr::new(STAGING))?;
    for _ in 0..8 {
        // SAFETY: valid descriptor and NUL-terminated name.
        match Errno::result(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o700) }) {
            Ok(_) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(e.into()),
        }
        let fd = match openat(dir, OsStr::new(STAGING), libc::O_RDONLY | libc::O_DIRECTORY) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        keeper::flock(&fd, libc::LOCK_SH)?;
        let held = nix::sys::stat::fstat(&fd)?;
        let now = nix::sys::stat::fstatat(
            dir,
            name.as_c_str(),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        );
        if now.is_ok_and(|n| (n.st_dev, n.st_ino) == (held.st_dev, held.st_ino)) {
            return Ok((fd, parent.join(STAGING)));
        }
    }
    Err(io::Error::other(
        "the staging folder kept disappearing (something removes it)",
    ))
}

/// Removes `path` (a file or a whole folder), if anything is there; best effort.
fn remove_entry(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            // The product's own staged content; a masked placeholder's mode may be tight.
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700));
            let _ = std::fs::remove_dir_all(path);
        }
        Ok(_) => {
            let _ = std::fs::remove_file(path);
        }
        Err(_) => {}
    }
}

fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    Ok(file.into())
}

fn openat(dir: &OwnedFd, name: &OsStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    let name = c(name)?;
    // SAFETY: valid descriptor and NUL-terminated name; the mode only applies with O_CREAT.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor owned from here on.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn unlinkat(dir: &OwnedFd, name: &OsStr, flags: libc::c_int) -> io::Result<()> {
    let name = c(name)?;
    // SAFETY: valid descriptor and NUL-terminated name.
    match Errno::result(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }) {
        Ok(_) | Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn c(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the name"))
}
