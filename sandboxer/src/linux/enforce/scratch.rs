//! The refusal masks: what a refused path (in `mounts.rs`) and a staged one (by the mask
//! keeper) get mounted over it.

use std::ffi::CStr;
use std::os::fd::OwnedFd;

use super::error::{StepError, fail};
use super::sys::{self, Dir};

/// The attributes of every mount made from nothing: no set-uid, no devices, no execution.
pub(super) const HIDDEN: u64 =
    libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV | libc::MOUNT_ATTR_NOEXEC;

/// A private, never-attached tmpfs holding one empty mode-000 file, cloned over covered and
/// refused files (here, and by the mask keeper over staged ones).
#[derive(Default)]
pub(super) struct Scratch {
    mnt: Option<OwnedFd>,
}

impl Scratch {
    const NAME: &'static CStr = c"empty";

    /// What a refusal mounts: an empty read-only tmpfs of mode 000 over a folder, a read-only
    /// clone of the empty file over anything else.
    pub(super) fn refusal_mask(&mut self, folder: bool) -> Result<OwnedFd, StepError> {
        if folder {
            sys::new_tmpfs(c"0", HIDDEN | libc::MOUNT_ATTR_RDONLY)
                .map_err(|e| fail("creating the mode-000 tmpfs", e))
        } else {
            self.empty_file()
        }
    }

    /// A read-only clone of the empty file, ready to be mounted over something.
    pub(super) fn empty_file(&mut self) -> Result<OwnedFd, StepError> {
        if self.mnt.is_none() {
            self.mnt = Some(Self::make()?);
        }
        let mnt = self.mnt.as_ref().expect("made above");
        let file =
            sys::clone_entry(mnt, Self::NAME).map_err(|e| fail("cloning the empty file", e))?;
        sys::mount_setattr(&file, libc::MOUNT_ATTR_RDONLY | HIDDEN, false)
            .map_err(|e| fail("making the empty file read-only", e))?;
        Ok(file)
    }

    fn make() -> Result<OwnedFd, StepError> {
        let mnt =
            sys::new_tmpfs(c"0755", HIDDEN).map_err(|e| fail("creating the scratch tmpfs", e))?;
        sys::open_no_symlinks(
            Dir::Fd(&mnt),
            Self::NAME,
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
        )
        .map_err(|e| fail("creating the empty file", e))?;
        Ok(mnt)
    }
}
