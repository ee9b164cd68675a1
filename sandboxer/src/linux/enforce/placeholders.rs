//! Placeholders: a masked path that does not exist at launch must not be creatable from
//! inside either, but a mount needs something to sit on. So the caller's process creates an
//! empty folder there, mode 0700 (and any missing folders above it), before the sandbox
//! starts, and removes each folder it made once the sandbox has ended — only if it is still
//! the very folder it made and still empty (someone outside may have started using it, e.g. a
//! tmux server creating its socket folder).
//!
//! - A `Cover` for a folder that is missing gets one wherever the plan puts it (the planner
//!   asks only where a placeholder makes sense). A missing non-folder cannot be stood in for:
//!   that step fails.
//! - A `Refuse` that is missing gets one only inside a grant that is bound back (a folder the
//!   person already lets the command write to).
//! - A `Guard` that is missing gets what its entry says stands in for it: an empty folder, or
//!   a file with the entry's content (an empty `~/.zshrc`, a `~/.bash_profile` that reads what
//!   bash reads without one). A file placeholder is removed only if it still holds exactly
//!   that content: someone outside who wrote into it made it theirs.
//!
//! Folders are walked down from an existing ancestor with `RESOLVE_NO_SYMLINKS`, so a symlink
//! planted on the way cannot send a `mkdir` elsewhere. While the sandbox runs, a placeholder
//! is visible outside as an empty folder.
//!
//! Launches running at the same time share placeholders (two chats on one workflow mask the
//! same missing `planning/`). Removing a folder that is a mount point in *another* mount
//! namespace is allowed and detaches that mount there (Linux >= 3.18), so a launch that
//! removed its placeholder while another sandbox still masked it would unmask the path for
//! that sandbox, which could then create it. Hence every launch holds a shared `flock` on
//! each masked folder (made or found) for as long as its sandbox runs; a placeholder is
//! removed only by a launch that can take the lock exclusively, i.e. when no other launch
//! holds it. A launch that finds a folder, then locks it, checks that the path still names
//! that folder (another launch may have removed it in between) and otherwise starts over.
//! Placeholders carry the extended attribute `user.sandboxer.placeholder` (where the
//! filesystem has them), so that the last launch using one removes it even when another
//! launch made it; a folder without the mark that a launch found is never removed.

use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::sys::stat::{Mode, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use super::detached_close::close_detached;
use super::error::{EnforceError, Layer};
use super::sys::{self, Dir};
use crate::linux::plan::{MountStep, STAGING};

/// The placeholders made for one launch, removed when dropped.
#[derive(Debug, Default)]
pub(super) struct Placeholders {
    /// In creation order (parents first).
    made: Vec<Made>,
    /// A shared lock on each masked folder, held until the launch is over.
    held: Vec<Held>,
    /// Other descriptors to close with the removed placeholders' (see [`Self::close_later`]).
    close_later: Vec<OwnedFd>,
}

/// A masked folder (or guarded file) this launch holds a shared `flock` on (see the module's
/// comment).
#[derive(Debug)]
struct Held {
    path: PathBuf,
    fd: OwnedFd,
    dev: u64,
    ino: u64,
    /// For a file: the content a placeholder of it holds (see [`Made::content`]).
    content: Option<String>,
}

/// The mark a placeholder carries, so that whichever launch uses it last may remove it.
const MARK: &CStr = c"user.sandboxer.placeholder";

/// How often a launch starts over when the folder it found was removed before it locked it
/// (each time, another launch removed its placeholder in that instant).
const ATTEMPTS: usize = 8;

#[derive(Debug)]
struct Made {
    parent: PathBuf,
    name: CString,
    dev: u64,
    ino: u64,
    /// None for a folder; for a file, the content it was made with.
    content: Option<String>,
}

impl Placeholders {
    /// Creates a placeholder for every masked folder that does not exist now, and locks every
    /// masked folder (see the module's comment).
    pub fn create(steps: &[MountStep]) -> Result<Placeholders, EnforceError> {
        let mut placeholders = Placeholders::default();
        for step in steps {
            let path = step.path();
            if let MountStep::BindBack { .. } | MountStep::Pin { .. } = step {
                continue;
            }
            let file = match step {
                MountStep::Guard {
                    is_dir: false,
                    content,
                    ..
                } => Some(content.clone().unwrap_or_default()),
                _ => None,
            };
            let guard_existing = matches!(step, MountStep::Guard { existed: true, .. });
            let mut held = false;
            for _ in 0..ATTEMPTS {
                if placeholders.hold(path, file.as_deref(), guard_existing)? {
                    held = true;
                    break;
                }
                // Gone (or replaced) before it was locked: made anew if missing, then locked.
                if !exists(path)? {
                    let anchor = match step {
                        MountStep::Cover { is_dir: false, .. } => {
                            return Err(EnforceError::new(
                                Layer::Placeholder,
                                format!(
                                    "covered path {} no longer exists (it changed since \
                                     planning; a file cannot be stood in for)",
                                    path.display()
                                ),
                            ));
                        }
                        // A staging folder (see keeper.rs) wherever the planner found it
                        // creatable: the product may write beside any refused path.
                        MountStep::Refuse { .. }
                            if path.file_name() == Some(std::ffi::OsStr::new(STAGING)) =>
                        {
                            existing_ancestor(path)?
                        }
                        MountStep::Refuse { .. } => grant_holding(steps, path)?,
                        _ => existing_ancestor(path)?,
                    };
                    placeholders.make(&anchor, path, file.as_deref())?;
                }
            }
            if !held {
                return Err(EnforceError::new(
                    Layer::Placeholder,
                    format!(
                        "{} kept disappearing while it was being locked ({ATTEMPTS} attempts); \
                         something outside is removing it",
                        path.display()
                    ),
                ));
            }
        }
        Ok(placeholders)
    }

    /// Takes a shared lock on the folder at `path` for this launch. `Ok(false)` when the
    /// path no longer names the folder that was locked (removed or replaced meanwhile): the
    /// caller starts over. A path that is not a folder this process may open (a file, a
    /// symlink, another person's folder) is not locked: it is no placeholder of a launch
    /// that could remove it from under this one.
    /// `file`: the path is a guarded file (a placeholder of it holds this content), not a
    /// folder.
    /// `guard_existing`: a guard step on a path that existed at plan time.
    fn hold(
        &mut self,
        path: &Path,
        file: Option<&str>,
        guard_existing: bool,
    ) -> Result<bool, EnforceError> {
        let err = |what: &str, e: Errno| {
            EnforceError::os(
                Layer::Placeholder,
                format_args!("locking {}: {what}", path.display()),
                e,
            )
        };
        let fd = match open_to_lock(path, file.is_some()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(false),
            Err(
                Errno::ENOTDIR
                | Errno::ELOOP
                | Errno::EACCES
                | Errno::EPERM
                | Errno::ENXIO
                | Errno::EISDIR,
            ) => return Ok(true),
            Err(e) => return Err(err("opening it", e)),
        };
        // A guarded path that is no placeholder (the person's own ~/.bashrc) is never removed
        // by any launch: it needs no lock, and a home holds hundreds of guarded paths (a lock
        // held on each while the sandbox runs cost a dispatcher launch milliseconds at its
        // end). But a placeholder another launch is making right now exists before its mark
        // does, and skipping it would let its maker remove it from under this launch's guard:
        // so what could be one (a file no longer than a placeholder's content, an empty
        // folder) is locked, marked or not.
        if guard_existing && !has_mark(&fd) && !may_be_placeholder(&fd, file) {
            return Ok(true);
        }
        sys::flock(&fd, libc::LOCK_SH).map_err(|e| err("flock", e))?;
        let locked = nix::sys::stat::fstat(&fd).map_err(|e| err("fstat", e))?;
        match nix::sys::stat::lstat(path) {
            Ok(now) if (now.st_dev, now.st_ino) == (locked.st_dev, locked.st_ino) => {}
            Ok(_) | Err(Errno::ENOENT) => return Ok(false),
            Err(e) => return Err(err("lstat", e)),
        }
        self.held.push(Held {
            path: path.to_path_buf(),
            fd,
            dev: locked.st_dev,
            ino: locked.st_ino,
            content: file.map(str::to_string),
        });
        Ok(true)
    }

    /// Creates every missing folder from `anchor` (an existing folder) down to `path`; with
    /// `file`, `path` itself is a file with that content.
    fn make(&mut self, anchor: &Path, path: &Path, file: Option<&str>) -> Result<(), EnforceError> {
        let err = |what: &str, e: Errno| {
            EnforceError::os(
                Layer::Placeholder,
                format_args!("placeholder for {}: {what}", path.display()),
                e,
            )
        };
        let anchor_c = CString::new(anchor.as_os_str().as_bytes())
            .map_err(|_| err("the path contains NUL", Errno::EINVAL))?;
        let mut dir: OwnedFd =
            sys::open_no_symlinks(Dir::Cwd, &anchor_c, libc::O_PATH | libc::O_DIRECTORY)
                .map_err(|e| err(&format!("opening {}", anchor.display()), e))?;
        let mut parent = anchor.to_path_buf();
        let rel = path.strip_prefix(anchor).expect("anchor is an ancestor");
        let count = rel.components().count();
        for (i, component) in rel.components().enumerate() {
            let Component::Normal(name) = component else {
                return Err(err("the path is not normal", Errno::EINVAL));
            };
            let name = CString::new(name.as_bytes())
                .map_err(|_| err("the path contains NUL", Errno::EINVAL))?;
            if let Some(content) = file.filter(|_| i + 1 == count) {
                return self.make_file(&dir, &parent, &name, content, path);
            }
            match mkdirat(&dir, name.as_c_str(), Mode::S_IRWXU) {
                Ok(()) => {
                    let st = fstatat(&dir, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                        .map_err(|e| err("stat of the new folder", e))?;
                    mark(&dir, &name);
                    self.made.push(Made {
                        parent: parent.clone(),
                        name: name.clone(),
                        dev: st.st_dev,
                        ino: st.st_ino,
                        content: None,
                    });
                }
                Err(Errno::EEXIST) => {}
                Err(e) => {
                    return Err(err(
                        &format!("creating a folder in {}", parent.display()),
                        e,
                    ));
                }
            }
            dir = sys::open_no_symlinks(Dir::Fd(&dir), &name, libc::O_PATH | libc::O_DIRECTORY)
                .map_err(|e| err("opening the new folder without following symlinks", e))?;
            parent.push(component);
        }
        Ok(())
    }
}

/// A placeholder the guard watcher made while the sandbox ran (see `guard_watch.rs`), as it
/// tells the caller, who removes it with the launch's own once the sandbox has ended. Paths
/// are bytes: a path need not be UTF-8.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct MadeLater {
    parent: Vec<u8>,
    name: Vec<u8>,
    dev: u64,
    ino: u64,
    content: Option<String>,
}

/// For the guard watcher: makes what stands in for the guarded `path`, gone while the sandbox
/// runs (an empty folder, or a file holding `content`), and any folders missing above it, as
/// [`Placeholders::create`] does at launch. Returns what it made, and a shared lock on each
/// that the watcher holds for as long as the sandbox runs.
pub(super) fn stand_in(
    path: &Path,
    content: Option<&str>,
) -> Result<(Vec<MadeLater>, Vec<OwnedFd>), EnforceError> {
    let mut made = Placeholders::default();
    made.make(&existing_ancestor(path)?, path, content)?;
    // Taken out, so that dropping `made` removes nothing.
    let made = std::mem::take(&mut made.made);
    let mut locks = Vec::with_capacity(made.len());
    for m in &made {
        let at = m
            .parent
            .join(std::ffi::OsStr::from_bytes(m.name.as_bytes()));
        if let Ok(fd) = open_to_lock(&at, m.content.is_some()) {
            let _ = sys::flock(&fd, libc::LOCK_SH);
            locks.push(fd);
        }
    }
    let reports = made
        .into_iter()
        .map(|m| MadeLater {
            parent: m.parent.as_os_str().as_bytes().to_vec(),
            name: m.name.into_bytes(),
            dev: m.dev,
            ino: m.ino,
            content: m.content,
        })
        .collect();
    Ok((reports, locks))
}

/// Opens a masked path to lock it: a file read-only, a folder as a folder; no symlinks.
fn open_to_lock(path: &Path, file: bool) -> Result<OwnedFd, Errno> {
    let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
    let flags = if file {
        libc::O_RDONLY | libc::O_NOCTTY | libc::O_NONBLOCK
    } else {
        libc::O_RDONLY | libc::O_DIRECTORY
    };
    sys::open_no_symlinks(Dir::Cwd, &c_path, flags)
}

impl Placeholders {
    /// Closes `fd` with the removed placeholders' descriptors, in the background
    /// (`detached_close.rs`): the guard watcher's inotify instance, whose last close waits for
    /// an RCU grace period.
    pub(super) fn close_later(&mut self, fd: OwnedFd) {
        self.close_later.push(fd);
    }

    /// Takes over what the guard watcher made while the sandbox ran, so that it is removed
    /// with the rest; only what is still there as it was made (same inode), locked shared
    /// like the launch's own.
    pub(super) fn adopt(&mut self, later: Vec<MadeLater>) {
        for m in later {
            let parent = PathBuf::from(std::ffi::OsStr::from_bytes(&m.parent));
            let Ok(name) = CString::new(m.name) else {
                continue;
            };
            let path = parent.join(std::ffi::OsStr::from_bytes(name.as_bytes()));
            let Ok(fd) = open_to_lock(&path, m.content.is_some()) else {
                continue;
            };
            let same =
                nix::sys::stat::fstat(&fd).is_ok_and(|st| (st.st_dev, st.st_ino) == (m.dev, m.ino));
            if !same || sys::flock(&fd, libc::LOCK_SH).is_err() {
                continue;
            }
            self.held.push(Held {
                path,
                fd,
                dev: m.dev,
                ino: m.ino,
                content: m.content.clone(),
            });
            self.made.push(Made {
                parent,
                name,
                dev: m.dev,
                ino: m.ino,
                content: m.content,
            });
        }
    }

    /// Creates the file `name` in `dir` (`parent`) with `content`, mode 0600, marked. Another
    /// launch that made it first wins (`EEXIST`): the caller locks whatever is there.
    fn make_file(
        &mut self,
        dir: &OwnedFd,
        parent: &Path,
        name: &CStr,
        content: &str,
        path: &Path,
    ) -> Result<(), EnforceError> {
        let err = |what: &str, e: Errno| {
            EnforceError::os(
                Layer::Placeholder,
                format_args!("placeholder for {}: {what}", path.display()),
                e,
            )
        };
        let fd = match sys::open_no_symlinks(
            Dir::Fd(dir),
            name,
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_NOCTTY,
        ) {
            Ok(fd) => fd,
            Err(Errno::EEXIST) => return Ok(()),
            Err(e) => return Err(err("creating the file", e)),
        };
        // openat2 gives a new file mode 0; a start-up file is readable like any other.
        nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(0o644))
            .map_err(|e| err("chmod 644 of the new file", e))?;
        let mut f = std::fs::File::from(fd);
        std::io::Write::write_all(&mut f, content.as_bytes()).map_err(|e| {
            err(
                "writing it",
                Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
            )
        })?;
        let st = nix::sys::stat::fstat(&f).map_err(|e| err("stat of the new file", e))?;
        // SAFETY: valid descriptor, NUL-terminated name, a one-byte value that outlives the call.
        unsafe { libc::fsetxattr(f.as_raw_fd(), MARK.as_ptr(), b"1".as_ptr().cast(), 1, 0) };
        self.made.push(Made {
            parent: parent.to_path_buf(),
            name: name.to_owned(),
            dev: st.st_dev,
            ino: st.st_ino,
            content: Some(content.to_string()),
        });
        Ok(())
    }
}

impl Drop for Placeholders {
    /// Removes each placeholder no other launch holds, deepest first: those this launch made,
    /// and those it found bearing the placeholder mark. Failures are left alone on purpose: a
    /// placeholder someone filled or replaced is no longer ours to remove, and one another
    /// launch still masks is removed by the last launch using it.
    fn drop(&mut self) {
        type Candidate = (PathBuf, CString, u64, u64, Option<String>);
        let mut candidates: Vec<Candidate> = self
            .made
            .iter()
            .map(|m| {
                (
                    m.parent.clone(),
                    m.name.clone(),
                    m.dev,
                    m.ino,
                    m.content.clone(),
                )
            })
            .collect();
        for h in &self.held {
            let made = candidates.iter().any(|c| (c.2, c.3) == (h.dev, h.ino));
            if !made
                && has_mark(&h.fd)
                && let (Some(parent), Some(name)) = (h.path.parent(), h.path.file_name())
                && let Ok(name) = CString::new(name.as_bytes())
            {
                candidates.push((parent.to_path_buf(), name, h.dev, h.ino, h.content.clone()));
            }
        }
        // Deepest first, so that a folder made above a placeholder can go after it.
        candidates.sort_by_key(|c| std::cmp::Reverse(c.0.components().count()));
        // A descriptor of each placeholder removed: the last close frees its blocks, which on
        // a file system mounted with `discard` waits for the disk, so it is left to another
        // process (detached_close.rs).
        let mut removed = Vec::new();
        for (parent, name, dev, ino, content) in candidates {
            if let Some(h) = self.held.iter().find(|h| (h.dev, h.ino) == (dev, ino)) {
                // Exclusive only if no other launch holds it; held until this process is done.
                if sys::flock(&h.fd, libc::LOCK_EX | libc::LOCK_NB).is_err() {
                    continue;
                }
            }
            let Ok(parent) = CString::new(parent.as_os_str().as_bytes()) else {
                continue;
            };
            let Ok(dir) =
                sys::open_no_symlinks(Dir::Cwd, &parent, libc::O_PATH | libc::O_DIRECTORY)
            else {
                continue;
            };
            let same = fstatat(&dir, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                .is_ok_and(|st| st.st_dev == dev && st.st_ino == ino);
            if !same {
                continue;
            }
            let Ok(entry) = sys::open_no_symlinks(Dir::Fd(&dir), &name, libc::O_PATH) else {
                continue;
            };
            let gone = match content {
                // A folder goes only when empty (rmdir refuses otherwise).
                None => unlinkat(&dir, name.as_c_str(), UnlinkatFlags::RemoveDir).is_ok(),
                Some(content) if holds_exactly(&dir, &name, &content) => {
                    unlinkat(&dir, name.as_c_str(), UnlinkatFlags::NoRemoveDir).is_ok()
                }
                Some(_) => false,
            };
            if gone {
                removed.push(((dev, ino), entry));
            }
        }
        // The locks on what stays are let go here; what was removed is closed elsewhere, its
        // locks with it (nobody can find it by name any more).
        let removed_ids: HashSet<(u64, u64)> = removed.iter().map(|(id, _)| *id).collect();
        let (gone, stays): (Vec<Held>, Vec<Held>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| removed_ids.contains(&(h.dev, h.ino)));
        drop(stays);
        let fds = removed.into_iter().map(|(_, fd)| fd);
        let gone = gone.into_iter().map(|h| h.fd);
        close_detached(fds.chain(gone).chain(self.close_later.drain(..)).collect());
    }
}

/// Whether the open file or folder `fd` could be a placeholder a launch is making (its mark
/// comes last): a file no longer than a placeholder of it holds, or an empty folder.
fn may_be_placeholder(fd: &OwnedFd, file: Option<&str>) -> bool {
    match file {
        Some(content) => {
            nix::sys::stat::fstat(fd).is_ok_and(|st| st.st_size as u64 <= content.len() as u64)
        }
        None => std::fs::read_dir(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .is_ok_and(|mut entries| entries.next().is_none()),
    }
}

/// Whether the file `name` in `dir` holds exactly `content`: a placeholder nobody wrote to.
fn holds_exactly(dir: &OwnedFd, name: &CStr, content: &str) -> bool {
    let Ok(fd) = sys::open_no_symlinks(
        Dir::Fd(dir),
        name,
        libc::O_RDONLY | libc::O_NOCTTY | libc::O_NONBLOCK,
    ) else {
        return false;
    };
    let mut now = Vec::with_capacity(content.len() + 1);
    let read = std::io::Read::take(std::fs::File::from(fd), content.len() as u64 + 1)
        .read_to_end(&mut now);
    read.is_ok() && now == content.as_bytes()
}

/// Marks the new folder `name` in `dir` as a placeholder; best effort (a filesystem without
/// user extended attributes leaves the folder to the launch that made it).
fn mark(dir: &OwnedFd, name: &CStr) {
    let Ok(fd) = sys::open_no_symlinks(Dir::Fd(dir), name, libc::O_RDONLY | libc::O_DIRECTORY)
    else {
        return;
    };
    // SAFETY: valid descriptor, NUL-terminated name, a one-byte value that outlives the call.
    unsafe { libc::fsetxattr(fd.as_raw_fd(), MARK.as_ptr(), b"1".as_ptr().cast(), 1, 0) };
}

fn has_mark(fd: &OwnedFd) -> bool {
    let mut value = [0u8; 1];
    // SAFETY: valid descriptor, NUL-terminated name, a buffer of the length given.
    let n = unsafe {
        libc::fgetxattr(
            fd.as_raw_fd(),
            MARK.as_ptr(),
            value.as_mut_ptr().cast(),
            value.len(),
        )
    };
    n == 1 && value[0] == b'1'
}

fn exists(path: &Path) -> Result<bool, EnforceError> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(EnforceError::new(
            Layer::Placeholder,
            format!("{}: {e}", path.display()),
        )),
    }
}

fn existing_ancestor(path: &Path) -> Result<PathBuf, EnforceError> {
    for ancestor in path.ancestors().skip(1) {
        if exists(ancestor)? {
            return Ok(ancestor.to_path_buf());
        }
    }
    Err(EnforceError::new(
        Layer::Placeholder,
        format!("{}: no ancestor exists", path.display()),
    ))
}

/// The deepest bound-back grant strictly holding `path`.
fn grant_holding(steps: &[MountStep], path: &Path) -> Result<PathBuf, EnforceError> {
    steps
        .iter()
        .filter_map(|s| match s {
            MountStep::BindBack { path: g, .. } if path.starts_with(g) && path != g => Some(g),
            _ => None,
        })
        .max_by_key(|g| g.components().count())
        .cloned()
        .ok_or_else(|| {
            EnforceError::new(
                Layer::Placeholder,
                format!(
                    "refused path {} does not exist and lies inside no bound-back grant; \
                     placeholders for refused paths are only ever created inside grants",
                    path.display()
                ),
            )
        })
}
