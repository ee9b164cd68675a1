//! The file-descriptor operations the tools are built from, so that every decision is made on
//! the real path of what is actually opened, and nothing is read, written or created before
//! the decision.
//!
//! - The real path of an open descriptor: `/proc/self/fd/N` on Linux, `F_GETPATH` on macOS.
//! - Lookups that follow symlinks without opening the target: `O_PATH` on Linux (no device
//!   open routine runs, no data is read). macOS has no `O_PATH`: the path is `stat`ed first
//!   and only a regular file or a folder is opened (read-only), and the descriptor is checked
//!   to be the very file the `stat` saw.
//! - Entries inside an opened folder by a single name (`*at` calls), never following a
//!   symlink at the last component.
//! - One resolution, [`resolve`], for every path the tools are given (Linux): `openat2` with
//!   `RESOLVE_NO_MAGICLINKS`, so a lookup never jumps through `/proc/<pid>/root`, `…/cwd` or
//!   `…/fd/N` into another process's mount namespace (a same-user container or bwrap shows
//!   other files at the same paths; the decision must be on the file as the dispatcher sees
//!   it). Whatever is opened on procfs (`fstatfs`) or whose real path lies under `/proc` is
//!   refused too: process and kernel state is never the bridge's to hand out.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// What a `stat` says, in the terms the tools need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub kind: Kind,
    pub size: u64,
    pub nlink: u64,
    pub dev: u64,
    pub ino: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

impl Meta {
    pub fn same_file(&self, other: &Meta) -> bool {
        self.dev == other.dev && self.ino == other.ino
    }
}

// `stat` field types differ by OS and architecture (u16/u32/u64); the casts are conversions
// on some targets and identities on others.
#[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
fn meta_of(st: &libc::stat) -> Meta {
    let kind = match (st.st_mode as u32) & (libc::S_IFMT as u32) {
        m if m == libc::S_IFREG as u32 => Kind::File,
        m if m == libc::S_IFDIR as u32 => Kind::Dir,
        m if m == libc::S_IFLNK as u32 => Kind::Symlink,
        _ => Kind::Other,
    };
    Meta {
        kind,
        size: st.st_size.max(0) as u64,
        nlink: st.st_nlink as u64,
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
    }
}

fn cstr(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "the path contains a NUL byte"))
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn open_raw(path: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
    let c = cstr(path.as_os_str().as_bytes())?;
    // SAFETY: `c` is a valid C string; the returned descriptor is owned by nobody else.
    let fd = check(unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) })?;
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Why a path is refused while it is being resolved, before any policy decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(
        "it resolves only through a /proc magic link (another process's root, cwd or open file, \
         which may show another mount namespace's files), or it is a symlink loop; the bridge \
         resolves paths in its own mount namespace only"
    )]
    MagicLink,
    #[error("it is on /proc (process and kernel state), which the bridge never opens")]
    Proc,
}

/// A path that could not be resolved: refused outright, or an ordinary error.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// A path resolved by [`resolve`]: the object held, and its real path as the dispatcher sees
/// it (what every decision is made on).
#[derive(Debug)]
pub struct Resolved {
    pub fd: OwnedFd,
    pub real: PathBuf,
}

/// The one resolution every bridge file tool goes through: opens `path` (symlinks followed,
/// magic links never), then refuses what lies on procfs, by the filesystem of the object held
/// and by its real path.
#[cfg(target_os = "linux")]
pub fn resolve(path: &Path, flags: libc::c_int) -> Result<Resolved, OpenError> {
    let opened = openat2(libc::AT_FDCWD, path, flags, libc::RESOLVE_NO_MAGICLINKS);
    let fd = opened.map_err(|e| -> OpenError {
        match e.raw_os_error() {
            // What RESOLVE_NO_MAGICLINKS answers for a magic link (and a loop answers too).
            Some(libc::ELOOP) => Refused::MagicLink.into(),
            // No openat2 (Linux < 5.6): fail closed rather than resolve without it.
            Some(libc::ENOSYS) => io::Error::other(
                "openat2 is not available (Linux 5.6 or later is needed); the bridge does not \
                 resolve paths without it",
            )
            .into(),
            _ => e.into(),
        }
    })?;
    if on_procfs(fd.as_fd())? {
        return Err(Refused::Proc.into());
    }
    let real = real_path(fd.as_fd())?;
    if real.starts_with("/proc") {
        return Err(Refused::Proc.into());
    }
    Ok(Resolved { fd, real })
}

/// `openat2(2)`: `path` opened from `dir` (a folder's descriptor, or `AT_FDCWD`) with `flags`
/// (and `O_CLOEXEC`) under the lookup restrictions `resolve` (`RESOLVE_*`).
#[cfg(target_os = "linux")]
pub fn openat2(
    dir: libc::c_int,
    path: &Path,
    flags: libc::c_int,
    resolve: u64,
) -> io::Result<OwnedFd> {
    let c = cstr(path.as_os_str().as_bytes())?;
    // SAFETY: `open_how` is plain integers; all-zero is its documented default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.resolve = resolve;
    // SAFETY: `c` is NUL-terminated and `how` lives across the call with its true size.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as libc::c_int) })
}

/// macOS has no procfs and no magic links: a plain `open` names the object in the one view.
#[cfg(target_os = "macos")]
pub fn resolve(path: &Path, flags: libc::c_int) -> Result<Resolved, OpenError> {
    let fd = open_raw(path, flags)?;
    let real = real_path(fd.as_fd())?;
    Ok(Resolved { fd, real })
}

/// Where `path` resolves, by [`resolve`] and without reading anything: Linux opens it
/// `O_PATH`; macOS, which has no `O_PATH`, asks `realpath` (nothing is opened).
#[cfg(target_os = "linux")]
pub fn real_of(path: &Path) -> Result<PathBuf, OpenError> {
    resolve(path, libc::O_PATH).map(|r| r.real)
}

#[cfg(target_os = "macos")]
pub fn real_of(path: &Path) -> Result<PathBuf, OpenError> {
    Ok(std::fs::canonicalize(path)?)
}

#[cfg(target_os = "linux")]
fn on_procfs(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: fstatfs fills `st` on success.
    check(unsafe { libc::fstatfs(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: initialised by the successful fstatfs above.
    let st = unsafe { st.assume_init() };
    // `f_type`'s integer type differs by architecture.
    #[allow(clippy::unnecessary_cast)]
    Ok(st.f_type as i64 == libc::PROC_SUPER_MAGIC as i64)
}

pub(crate) fn openat_raw(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    flags: libc::c_int,
    mode: libc::c_uint,
) -> io::Result<OwnedFd> {
    let c = cstr(name.as_bytes())?;
    // SAFETY: as in `open_raw`; `dir` is a live descriptor for the call's duration.
    let fd =
        check(unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags | libc::O_CLOEXEC, mode) })?;
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub fn meta_fd(fd: BorrowedFd<'_>) -> io::Result<Meta> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat fills `st` on success.
    check(unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: initialised by the successful fstat above.
    let st = unsafe { st.assume_init() };
    Ok(meta_of(&st))
}

/// `stat` of the entry `name` in `dir`, not following a symlink; `None` when there is none.
pub fn stat_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Option<Meta>> {
    let c = cstr(name.as_bytes())?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstatat fills `st` on success.
    let ret = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if ret < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::NotFound {
            Ok(None)
        } else {
            Err(e)
        };
    }
    // SAFETY: initialised by the successful fstatat above.
    let st = unsafe { st.assume_init() };
    Ok(Some(meta_of(&st)))
}

/// The path the kernel has for an open descriptor: symlinks and `..` resolved, as opened.
#[cfg(target_os = "linux")]
pub fn real_path(fd: BorrowedFd<'_>) -> io::Result<PathBuf> {
    // The magic link names the opened object itself; fail closed when /proc is missing
    // rather than guess from the requested path.
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot read the real path from /proc/self/fd: {e}"),
        )
    })
}

#[cfg(target_os = "macos")]
pub fn real_path(fd: BorrowedFd<'_>) -> io::Result<PathBuf> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: F_GETPATH writes a NUL-terminated path of at most MAXPATHLEN bytes into `buf`.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETPATH, buf.as_mut_ptr()) })?;
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    buf.truncate(len);
    Ok(PathBuf::from(OsString::from_vec(buf)))
}

/// A file or folder looked up by path (symlinks followed), with its real path, not yet read.
#[derive(Debug)]
pub struct Looked {
    fd: OwnedFd,
    pub real: PathBuf,
    pub meta: Meta,
}

impl Looked {
    /// Linux: `O_PATH`, so looking up a device or FIFO opens nothing.
    #[cfg(target_os = "linux")]
    pub fn lookup(path: &Path) -> Result<Looked, OpenError> {
        let Resolved { fd, real } = resolve(path, libc::O_PATH)?;
        let meta = meta_fd(fd.as_fd())?;
        Ok(Looked { fd, real, meta })
    }

    /// macOS: only a regular file or a folder is opened (read-only, which has no side
    /// effects for them); the descriptor must be the file the `stat` saw.
    #[cfg(target_os = "macos")]
    pub fn lookup(path: &Path) -> Result<Looked, OpenError> {
        let before = std::fs::metadata(path)?;
        let flags = if before.is_dir() {
            libc::O_RDONLY | libc::O_DIRECTORY
        } else if before.is_file() {
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY
        } else {
            return Err(io::Error::other("not a regular file or a folder").into());
        };
        let Resolved { fd, real } = resolve(path, flags)?;
        let meta = meta_fd(fd.as_fd())?;
        use std::os::unix::fs::MetadataExt;
        if meta.dev != before.dev() || meta.ino != before.ino() {
            return Err(io::Error::other("the path changed while it was being opened").into());
        }
        Ok(Looked { fd, real, meta })
    }

    /// Opens the looked-up regular file for reading: the same file, never a new lookup.
    pub fn into_reader(self) -> io::Result<File> {
        if self.meta.kind != Kind::File {
            return Err(io::Error::other("not a regular file"));
        }
        let file = self.reopen_read()?;
        let now = meta_fd(file.as_fd())?;
        if !now.same_file(&self.meta) {
            return Err(io::Error::other(
                "the file changed while it was being opened",
            ));
        }
        Ok(file)
    }

    #[cfg(target_os = "linux")]
    fn reopen_read(&self) -> io::Result<File> {
        // Opening the magic link reopens the object the O_PATH descriptor holds.
        let fd = open_raw(
            Path::new(&format!("/proc/self/fd/{}", self.fd.as_raw_fd())),
            libc::O_RDONLY | libc::O_NOCTTY | libc::O_NONBLOCK,
        )?;
        Ok(File::from(fd))
    }

    #[cfg(target_os = "macos")]
    fn reopen_read(&self) -> io::Result<File> {
        // Already opened read-only by `lookup`.
        Ok(File::from(self.fd.try_clone()?))
    }

    /// The folder for listing. The descriptor is the one looked up (Linux: reopened from the
    /// `O_PATH` one, so it is the same folder).
    pub fn into_dir(self) -> io::Result<OwnedFd> {
        if self.meta.kind != Kind::Dir {
            return Err(io::Error::other("not a folder"));
        }
        #[cfg(target_os = "linux")]
        let fd = open_raw(
            Path::new(&format!("/proc/self/fd/{}", self.fd.as_raw_fd())),
            libc::O_RDONLY | libc::O_DIRECTORY,
        )?;
        #[cfg(target_os = "macos")]
        let fd = self.fd.try_clone()?;
        if !meta_fd(fd.as_fd())?.same_file(&self.meta) {
            return Err(io::Error::other(
                "the folder changed while it was being opened",
            ));
        }
        Ok(fd)
    }
}

/// Opens a folder by path (symlinks followed, through [`resolve`]) to work inside it by name.
pub fn open_dir(path: &Path) -> Result<Resolved, OpenError> {
    resolve(path, libc::O_RDONLY | libc::O_DIRECTORY)
}

/// Opens the existing entry `name` of `dir` for writing, never through a symlink (`ELOOP`),
/// never blocking on a FIFO, never becoming a controlling terminal.
pub fn open_write_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<File> {
    openat_raw(
        dir,
        name,
        libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
        0,
    )
    .map(File::from)
}

/// Creates `name` in `dir`; fails with `AlreadyExists` if anything (a symlink included) is
/// there. Mode 0666 less the umask, like any program's new file.
pub fn create_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<File> {
    openat_raw(
        dir,
        name,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_NOCTTY,
        0o666,
    )
    .map(File::from)
}

/// The target of the symlink `name` in `dir`.
pub fn read_link_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<OsString> {
    let c = cstr(name.as_bytes())?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: readlinkat writes at most buf.len() bytes into buf.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            c.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(OsString::from_vec(buf))
}

#[cfg(target_os = "linux")]
fn clear_errno() {
    // SAFETY: the thread's errno location is always valid.
    unsafe { *libc::__errno_location() = 0 }
}

#[cfg(target_os = "macos")]
fn clear_errno() {
    // SAFETY: the thread's errno location is always valid.
    unsafe { *libc::__error() = 0 }
}

/// The names in an opened folder (without `.` and `..`), at most `max` of them; the flag
/// says whether there were more.
pub fn dir_names(dir: BorrowedFd<'_>, max: usize) -> io::Result<(Vec<OsString>, bool)> {
    // fdopendir takes ownership of the descriptor it is given, so give it a duplicate.
    let dup = dir.try_clone_to_owned()?;
    let raw = dup.as_raw_fd();
    // SAFETY: `raw` is a valid descriptor; on success the DIR owns it (closed by closedir).
    let stream = unsafe { libc::fdopendir(raw) };
    if stream.is_null() {
        // Read before `dup` is dropped (closed), which could change errno.
        return Err(io::Error::last_os_error());
    }
    // The DIR owns the descriptor now; closedir closes it.
    let _ = dup.into_raw_fd();
    let mut names = Vec::new();
    let mut more = false;
    let result = loop {
        clear_errno();
        // SAFETY: `stream` is a live DIR*; the entry is valid until the next readdir.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            let e = io::Error::last_os_error();
            break if e.raw_os_error() == Some(0) {
                Ok(())
            } else {
                Err(e)
            };
        }
        let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) }.to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if names.len() == max {
            more = true;
            break Ok(());
        }
        names.push(OsString::from_vec(name.to_vec()));
    };
    // SAFETY: `stream` came from fdopendir and is closed once.
    unsafe { libc::closedir(stream) };
    result.map(|()| (names, more))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn lookup_reports_the_real_path_through_symlinks() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        std::fs::create_dir(root.join("real")).unwrap();
        std::fs::write(root.join("real/f"), "hello").unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
        let looked = Looked::lookup(&root.join("link/./f")).unwrap();
        assert_eq!(looked.real, root.join("real/f"));
        assert_eq!(looked.meta.kind, Kind::File);
        let mut s = String::new();
        looked
            .into_reader()
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "hello");
        let dir = Looked::lookup(&root.join("link")).unwrap();
        assert_eq!(dir.real, root.join("real"));
        let fd = dir.into_dir().unwrap();
        let (names, more) = dir_names(fd.as_fd(), 10).unwrap();
        assert_eq!(names, vec![OsString::from("f")]);
        assert!(!more);
    }

    #[test]
    fn write_at_never_follows_a_symlink() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        std::fs::write(root.join("target"), "keep").unwrap();
        std::os::unix::fs::symlink(root.join("target"), root.join("link")).unwrap();
        let dir = open_dir(&root).unwrap().fd;
        let e = open_write_at(dir.as_fd(), OsStr::new("link")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
        let e = create_at(dir.as_fd(), OsStr::new("link")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(
            stat_at(dir.as_fd(), OsStr::new("link"))
                .unwrap()
                .unwrap()
                .kind,
            Kind::Symlink
        );
        assert_eq!(stat_at(dir.as_fd(), OsStr::new("none")).unwrap(), None);
        assert_eq!(
            read_link_at(dir.as_fd(), OsStr::new("link")).unwrap(),
            root.join("target").into_os_string()
        );
        assert_eq!(
            std::fs::read_to_string(root.join("target")).unwrap(),
            "keep"
        );
    }

    #[test]
    fn many_names_are_capped() {
        let d = tempfile::tempdir().unwrap();
        for i in 0..5 {
            std::fs::write(d.path().join(format!("f{i}")), "").unwrap();
        }
        let dir = open_dir(d.path()).unwrap().fd;
        let (names, more) = dir_names(dir.as_fd(), 3).unwrap();
        assert_eq!(names.len(), 3);
        assert!(more);
    }
}
