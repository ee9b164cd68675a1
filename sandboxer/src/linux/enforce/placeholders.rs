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
//!
//! Folders are walked down from an existing ancestor with `RESOLVE_NO_SYMLINKS`, so a symlink
//! planted on the way cannot send a `mkdir` elsewhere. While the sandbox runs, a placeholder
//! is visible outside as an empty folder.

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::sys::stat::{Mode, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use super::error::{EnforceError, Layer};
use super::sys::{self, Dir};
use crate::linux::plan::MountStep;

/// The placeholders made for one launch, removed when dropped.
#[derive(Debug, Default)]
pub(super) struct Placeholders {
    /// In creation order (parents first).
    made: Vec<Made>,
}

#[derive(Debug)]
struct Made {
    parent: PathBuf,
    name: CString,
    dev: u64,
    ino: u64,
}

impl Placeholders {
    /// Creates a placeholder for every masked folder that does not exist now.
    pub fn create(steps: &[MountStep]) -> Result<Placeholders, EnforceError> {
        let mut placeholders = Placeholders::default();
        for step in steps {
            let path = step.path();
            if exists(path)? {
                continue;
            }
            let anchor = match step {
                MountStep::BindBack { .. } => continue,
                MountStep::Cover { is_dir: false, .. } => {
                    return Err(EnforceError::new(
                        Layer::Placeholder,
                        format!(
                            "covered path {} no longer exists (it changed since planning; a \
                             file cannot be stood in for)",
                            path.display()
                        ),
                    ));
                }
                MountStep::Cover { .. } => existing_ancestor(path)?,
                MountStep::Refuse { .. } => grant_holding(steps, path)?,
            };
            placeholders.make(&anchor, path)?;
        }
        Ok(placeholders)
    }

    /// Creates every missing folder from `anchor` (an existing folder) down to `path`.
    fn make(&mut self, anchor: &Path, path: &Path) -> Result<(), EnforceError> {
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
        for component in rel.components() {
            let Component::Normal(name) = component else {
                return Err(err("the path is not normal", Errno::EINVAL));
            };
            let name = CString::new(name.as_bytes())
                .map_err(|_| err("the path contains NUL", Errno::EINVAL))?;
            match mkdirat(&dir, name.as_c_str(), Mode::S_IRWXU) {
                Ok(()) => {
                    let st = fstatat(&dir, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                        .map_err(|e| err("stat of the new folder", e))?;
                    self.made.push(Made {
                        parent: parent.clone(),
                        name: name.clone(),
                        dev: st.st_dev,
                        ino: st.st_ino,
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

impl Drop for Placeholders {
    /// Removes each placeholder still in place, deepest first. Failures are left alone on
    /// purpose: a placeholder someone filled or replaced is no longer ours to remove.
    fn drop(&mut self) {
        for made in self.made.iter().rev() {
            let Ok(parent) = CString::new(made.parent.as_os_str().as_bytes()) else {
                continue;
            };
            let Ok(dir) =
                sys::open_no_symlinks(Dir::Cwd, &parent, libc::O_PATH | libc::O_DIRECTORY)
            else {
                continue;
            };
            let same = fstatat(&dir, made.name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                .is_ok_and(|st| st.st_dev == made.dev && st.st_ino == made.ino);
            if same {
                let _ = unlinkat(&dir, made.name.as_c_str(), UnlinkatFlags::RemoveDir);
            }
        }
    }
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
