//! The masks: applied in the sandbox's own mount namespace, in the plan's order.
//!
//! 1. `/` becomes recursively private, so nothing mounted here shows outside (or back)
//!    ([`make_root_private`], right after the namespaces are made).
//! 2. Every bind-back source is captured first, as a detached copy of its mount tree
//!    (`open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)`): once a cover is on, the grant beneath it
//!    can no longer be reached by path.
//! 3. Then, step by step: a `Pin` binds a folder onto itself (a recursive clone of the tree at
//!    its path, so nothing beneath changes) unless it is the root of a mount already: a
//!    mount point of this namespace cannot be renamed, removed or replaced (`EBUSY`); a `Cover` puts an empty tmpfs of mode 0111 over a folder (search
//!    only: listing fails, the way to a bound-back grant still resolves; kept writable until
//!    the end, only so mount points for grants can be made in it) or an empty read-only,
//!    mode-000 file over anything else; a `BindBack` attaches a captured tree on its path
//!    (read-only for `ro`); a `Refuse` puts an empty read-only tmpfs of mode 000 over a
//!    folder, or the empty file over anything else.
//! 4. Every cover becomes read-only.
//!
//! Mounts are made with the descriptor-based mount API and every path is opened with
//! `RESOLVE_NO_SYMLINKS`, so a mount lands exactly on the plan's (canonical) path or not at
//! all. Mount points are only ever created inside the sandbox's own covers, never on a real
//! file system: that is checked by device before each `mkdir`.

use std::ffi::{CStr, CString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{MsFlags, mount};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, mkdirat};

use super::error::{EnforceError, Layer, StepError, fail, fail_plain};
use super::keeper::Kept;
use super::scratch::{HIDDEN, Scratch};
use super::sys::{self, Dir};
use crate::linux::plan::MountStep;
use crate::policy::Access;

/// Applies `steps`. Runs inside the new user and mount namespaces, once `/` is private, before
/// any untrusted code.
/// The staging folders among `keep` are captured ([`Kept`]) right before their own refusal, for
/// the mask keeper (see `keeper.rs`).
pub(super) fn apply(steps: &[MountStep], keep: &[PathBuf]) -> Result<Vec<Kept>, EnforceError> {
    let mut kept = Vec::new();
    let captured = capture_bind_backs(steps)?;
    let mut scratch = Scratch::default();
    let mut covers: Vec<CoverMount> = Vec::new();
    for (step, tree) in steps.iter().zip(captured) {
        let applied = match step {
            MountStep::Cover { path, .. } => cover(path, &mut scratch).map(|c| covers.extend(c)),
            MountStep::BindBack { path, is_dir, .. } => {
                let tree = tree.expect("captured for every bind-back");
                attach(path, *is_dir, &tree, &covers)
            }
            MountStep::Refuse { path, .. } if keep.contains(path) => open(path)
                .map(|fd| kept.push(Kept::new(path, fd)))
                .and_then(|()| refuse(path, &mut scratch)),
            MountStep::Refuse { path, .. } => refuse(path, &mut scratch),
            MountStep::Pin { path, .. } => pin(path),
            MountStep::Guard { path, .. } => guard(path),
        };
        applied.map_err(|e| in_step(step, e))?;
    }
    seal(&covers)?;
    Ok(kept)
}

/// Makes every cover read-only, now that the mount points for grants are in place.
fn seal(covers: &[CoverMount]) -> Result<(), EnforceError> {
    for cover in covers {
        sys::mount_setattr(&cover.mnt, libc::MOUNT_ATTR_RDONLY, false).map_err(|e| {
            EnforceError::os(
                Layer::Masks,
                format_args!("making the cover over {} read-only", cover.path.display()),
                e,
            )
        })?;
    }
    Ok(())
}

fn in_step(step: &MountStep, e: StepError) -> EnforceError {
    let name = match step {
        MountStep::Cover { path, why, .. } => format!("cover {} ({why})", path.display()),
        MountStep::BindBack { path, access, .. } => {
            format!("bind back {} {}", access.as_str(), path.display())
        }
        MountStep::Refuse { path, .. } => format!("refuse {}", path.display()),
        MountStep::Pin { path, of } => {
            format!("pin {} (it holds {})", path.display(), of.display())
        }
        MountStep::Guard { path, .. } => format!("guard {}", path.display()),
    };
    match e.errno {
        Some(errno) => EnforceError::os(Layer::Masks, format_args!("{name}: {}", e.what), errno),
        None => EnforceError::new(Layer::Masks, format!("{name}: {}", e.what)),
    }
}

/// Step 1: nothing mounted in this namespace shows outside, nor anything mounted outside here.
pub(super) fn make_root_private() -> Result<(), EnforceError> {
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| EnforceError::os(Layer::MountNamespace, "making / recursively private", e))
}

/// A captured grant: its detached mount tree and whether its root is a folder.
struct Tree {
    fd: OwnedFd,
    is_dir: bool,
}

fn capture_bind_backs(steps: &[MountStep]) -> Result<Vec<Option<Tree>>, EnforceError> {
    steps
        .iter()
        .map(|step| match step {
            MountStep::BindBack { path, access, .. } => capture(path, *access)
                .map(Some)
                .map_err(|e| in_step(step, e)),
            _ => Ok(None),
        })
        .collect()
}

fn capture(path: &Path, access: Access) -> Result<Tree, StepError> {
    let source = open(path)?;
    let is_dir = is_folder(&stat(&source, path)?);
    let fd = sys::clone_tree(&source).map_err(|e| fail("capturing it (open_tree)", e))?;
    if access == Access::Ro {
        sys::mount_setattr(&fd, libc::MOUNT_ATTR_RDONLY, true)
            .map_err(|e| fail("making it read-only (mount_setattr)", e))?;
    }
    Ok(Tree { fd, is_dir })
}

/// Mode of a cover's root and of the folders made in it for mount points: search only.
const COVER_MODE: &CStr = c"0111";

/// An empty tmpfs over a protected folder, made read-only once every mount point is in it.
struct CoverMount {
    path: PathBuf,
    mnt: OwnedFd,
    dev: u64,
}

fn cover(path: &Path, scratch: &mut Scratch) -> Result<Option<CoverMount>, StepError> {
    let target = open(path)?;
    if !is_folder(&stat(&target, path)?) {
        let empty = scratch.empty_file()?;
        sys::move_mount(&empty, &target).map_err(|e| fail("mounting the empty file", e))?;
        return Ok(None);
    }
    let mnt = sys::new_tmpfs(COVER_MODE, HIDDEN).map_err(|e| fail("creating the tmpfs", e))?;
    let dev = fstat(&mnt)
        .map_err(|e| fail("stat of the new tmpfs", e))?
        .st_dev;
    sys::move_mount(&mnt, &target).map_err(|e| fail("mounting the tmpfs (move_mount)", e))?;
    Ok(Some(CoverMount {
        path: path.to_path_buf(),
        mnt,
        dev,
    }))
}

fn attach(path: &Path, is_dir: bool, tree: &Tree, covers: &[CoverMount]) -> Result<(), StepError> {
    if tree.is_dir != is_dir {
        return Err(fail_plain(
            "it changed between folder and file since planning",
        ));
    }
    let target = match sys::open_path(&cpath(path)?) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => make_mount_point(path, tree.is_dir, covers)?,
        Err(e) => return Err(fail("opening the mount point", e)),
    };
    sys::move_mount(&tree.fd, &target).map_err(|e| fail("attaching the grant (move_mount)", e))
}

/// Creates the missing folders (and the final file, for a file grant) from the deepest cover
/// holding `path` down to `path`, checking at each level that it is still on that cover.
fn make_mount_point(
    path: &Path,
    is_dir: bool,
    covers: &[CoverMount],
) -> Result<OwnedFd, StepError> {
    let Some(cover) = covers
        .iter()
        .filter(|c| path.starts_with(&c.path) && path != c.path)
        .max_by_key(|c| c.path.components().count())
    else {
        return Err(fail_plain(
            "the path does not exist and lies under no cover, so no mount point is made for it",
        ));
    };
    let rel = path.strip_prefix(&cover.path).expect("checked above");
    let names: Vec<CString> =
        rel.components()
            .map(|c| match c {
                Component::Normal(n) => CString::new(n.as_bytes())
                    .map_err(|_| fail("the path contains NUL", Errno::EINVAL)),
                _ => Err(fail("the path is not normal", Errno::EINVAL)),
            })
            .collect::<Result<_, _>>()?;
    let mut dir = open(&cover.path)?;
    for (i, name) in names.iter().enumerate() {
        let here = stat(&dir, path)?;
        if here.st_dev != cover.dev {
            return Err(fail_plain(format!(
                "a mount point would be made outside the cover over {}",
                cover.path.display()
            )));
        }
        let last = i + 1 == names.len();
        dir = if last && !is_dir {
            sys::open_no_symlinks(
                Dir::Fd(&dir),
                name,
                libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
            )
            .map_err(|e| fail("creating the file mount point", e))?
        } else {
            // Mode 0111 like the cover's root; the monitor may still write here (it holds
            // CAP_DAC_OVERRIDE over the files of its own user namespace).
            let search_only = Mode::S_IXUSR | Mode::S_IXGRP | Mode::S_IXOTH;
            match mkdirat(&dir, name.as_c_str(), search_only) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err(fail("creating the mount point folder", e)),
            }
            sys::open_no_symlinks(Dir::Fd(&dir), name, libc::O_PATH | libc::O_DIRECTORY)
                .map_err(|e| fail("opening the mount point folder", e))?
        };
    }
    Ok(dir)
}

/// Binds the folder at `path` onto itself, submounts included, unless it is the root of a
/// mount already (then the kernel refuses to move it as it is).
pub(super) fn pin(path: &Path) -> Result<(), StepError> {
    let target = open(path)?;
    if !is_folder(&stat(&target, path)?) {
        return Err(fail_plain("it is no longer a folder"));
    }
    if sys::is_mount_root(&target).map_err(|e| fail("statx", e))? {
        return Ok(());
    }
    let tree = sys::clone_tree(&target).map_err(|e| fail("cloning it (open_tree)", e))?;
    sys::move_mount(&tree, &target).map_err(|e| fail("binding it onto itself (move_mount)", e))
}

/// Binds the tree at `path` onto itself with every mount in it read-only: writes, metadata
/// changes and new entries beneath fail (`EROFS`), and the path is a mount point (`EBUSY`).
/// A symlink is bound as itself (the file it names is a guarded path of its own).
pub(super) fn guard(path: &Path) -> Result<(), StepError> {
    // The entry itself, a symlink included: a link bound onto itself cannot be removed,
    // renamed or replaced (`EBUSY`), and still names what it named.
    let target = sys::open_entry(&cpath(path)?).map_err(|e| fail("opening it", e))?;
    let tree = sys::clone_tree(&target).map_err(|e| fail("cloning it (open_tree)", e))?;
    sys::mount_setattr(&tree, libc::MOUNT_ATTR_RDONLY, true)
        .map_err(|e| fail("making it read-only (mount_setattr)", e))?;
    sys::move_mount(&tree, &target)
        .map_err(|e| fail("binding it onto itself read-only (move_mount)", e))
}

fn refuse(path: &Path, scratch: &mut Scratch) -> Result<(), StepError> {
    let target = match sys::open_path(&cpath(path)?) {
        Ok(fd) => fd,
        // The caller creates a placeholder for every refused path missing at launch; gone now
        // means it was removed in between, and a refusal that cannot be put on is a failure.
        Err(Errno::ENOENT) => {
            return Err(fail(
                "the path (or its placeholder) vanished",
                Errno::ENOENT,
            ));
        }
        Err(e) => return Err(fail("opening it", e)),
    };
    let mask = scratch.refusal_mask(is_folder(&stat(&target, path)?))?;
    sys::move_mount(&mask, &target).map_err(|e| fail("mounting over it (move_mount)", e))
}

fn cpath(path: &Path) -> Result<CString, StepError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| fail_plain("the path contains a NUL byte"))
}

fn open(path: &Path) -> Result<OwnedFd, StepError> {
    sys::open_path(&cpath(path)?).map_err(|e| {
        let what = match e {
            Errno::ELOOP => "opening it: a symlink is on the way (plan paths are canonical)",
            Errno::ENOENT => "opening it: it does not exist",
            _ => "opening it",
        };
        fail(what, e)
    })
}

fn is_folder(st: &FileStat) -> bool {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR
}

fn stat(fd: &OwnedFd, path: &Path) -> Result<FileStat, StepError> {
    fstat(fd).map_err(|e| fail(format!("stat of {}", path.display()), e))
}
