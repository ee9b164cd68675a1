//! The filesystem as the planner sees it: an [`FsView`], this machine's ([`HostFs`]) or an
//! in-memory tree ([`MemFs`]) for tests and described machines.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::paths::normalize;

/// What is at a path, without following a final symlink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EntryKind {
    Dir,
    File,
    Symlink,
    /// A socket, FIFO or device.
    Other,
}

/// The planner's window on the filesystem.
pub trait FsView {
    /// What is at `path`, or `None` when nothing is.
    fn kind(&self, path: &Path) -> io::Result<Option<EntryKind>>;
    /// The entries of the folder `dir`, as full paths, with their kinds.
    fn list(&self, dir: &Path) -> io::Result<Vec<(PathBuf, EntryKind)>>;
    /// Whether this process may create entries in the existing folder `dir`.
    fn writable(&self, dir: &Path) -> bool;
    /// How many names (hard links) the file at `path` has, itself included, and whether
    /// anyone may execute it (a program).
    fn links(&self, path: &Path) -> io::Result<(u64, bool)>;
}

/// This machine's filesystem.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostFs;

fn kind_of(ft: std::fs::FileType) -> EntryKind {
    if ft.is_symlink() {
        EntryKind::Symlink
    } else if ft.is_dir() {
        EntryKind::Dir
    } else if ft.is_file() {
        EntryKind::File
    } else {
        EntryKind::Other
    }
}

impl FsView for HostFs {
    fn kind(&self, path: &Path) -> io::Result<Option<EntryKind>> {
        match std::fs::symlink_metadata(path) {
            Ok(m) => Ok(Some(kind_of(m.file_type()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            // A component that is not a folder: nothing can be at the path.
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<(PathBuf, EntryKind)>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            out.push((entry.path(), kind_of(entry.file_type()?)));
        }
        out.sort();
        Ok(out)
    }

    #[cfg(unix)]
    fn writable(&self, dir: &Path) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: c is a valid NUL-terminated path.
        unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
    }

    #[cfg(not(unix))]
    fn writable(&self, _dir: &Path) -> bool {
        false
    }

    #[cfg(unix)]
    fn links(&self, path: &Path) -> io::Result<(u64, bool)> {
        use std::os::unix::fs::MetadataExt;
        std::fs::symlink_metadata(path).map(|m| (m.nlink(), m.mode() & 0o111 != 0))
    }

    #[cfg(not(unix))]
    fn links(&self, _path: &Path) -> io::Result<(u64, bool)> {
        Ok((1, false))
    }
}

/// An in-memory tree: for tests, and for planning against a described machine. `/` always
/// exists; adding a path adds its missing parents as folders.
#[derive(Clone, Debug, Default)]
pub struct MemFs {
    entries: BTreeMap<PathBuf, EntryKind>,
    read_only: BTreeSet<PathBuf>,
    /// Files with more than one name, and how many.
    links: BTreeMap<PathBuf, u64>,
}

impl MemFs {
    pub fn new() -> MemFs {
        MemFs::default()
    }

    /// Adds `path` (absolute) as `kind`, and its missing parents as folders.
    pub fn add(&mut self, path: impl AsRef<Path>, kind: EntryKind) -> &mut MemFs {
        let path = normalize(path.as_ref()).expect("MemFs paths are absolute");
        for a in path.ancestors().skip(1) {
            self.entries
                .entry(a.to_path_buf())
                .or_insert(EntryKind::Dir);
        }
        self.entries.insert(path, kind);
        self
    }

    pub fn dir(&mut self, path: impl AsRef<Path>) -> &mut MemFs {
        self.add(path, EntryKind::Dir)
    }

    pub fn file(&mut self, path: impl AsRef<Path>) -> &mut MemFs {
        self.add(path, EntryKind::File)
    }

    /// Gives the file at `path` `names` names in all (hard links), itself included.
    pub fn links(&mut self, path: impl AsRef<Path>, names: u64) -> &mut MemFs {
        self.links.insert(path.as_ref().to_path_buf(), names);
        self
    }

    /// Marks the folder `dir` as not writable by this process.
    pub fn read_only(&mut self, dir: impl AsRef<Path>) -> &mut MemFs {
        self.read_only.insert(dir.as_ref().to_path_buf());
        self
    }
}

impl FsView for MemFs {
    fn kind(&self, path: &Path) -> io::Result<Option<EntryKind>> {
        if path == Path::new("/") {
            return Ok(Some(EntryKind::Dir));
        }
        Ok(self.entries.get(path).copied())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<(PathBuf, EntryKind)>> {
        Ok(self
            .entries
            .iter()
            .filter(|(p, _)| p.parent() == Some(dir))
            .map(|(p, k)| (p.clone(), *k))
            .collect())
    }

    fn writable(&self, dir: &Path) -> bool {
        !self.read_only.contains(dir)
    }

    fn links(&self, path: &Path) -> io::Result<(u64, bool)> {
        Ok((self.links.get(path).copied().unwrap_or(1), false))
    }
}
