//! How the state root's files are written: atomically and flushed (its own files), or
//! atomically and left to the kernel (the files every launch regenerates).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use super::error::{StateError, io_err};

/// Writes `data` to `path` atomically: a temporary file in the same folder with `mode`,
/// flushed to disk, renamed over the target, and the folder synced. A crash leaves either
/// the old file or the new one, never a mix.
pub fn write_atomic(path: &Path, data: &[u8], mode: u32) -> Result<(), StateError> {
    replace_file(path, data, mode, Durability::Flushed)
}

/// Whether [`replace_file`] waits for the disk.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Durability {
    /// The new file and the folder's entry are on disk when it returns.
    Flushed,
    /// Atomic for readers, but left to the kernel to write back.
    Unflushed,
}

/// Writes `data` to a temporary file with `mode` beside `path` and renames it over `path`
/// (replacing whatever is there, a symlink included, never following it).
fn replace_file(
    path: &Path,
    data: &[u8],
    mode: u32,
    durability: Durability,
) -> Result<(), StateError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(data)?;
        if durability == Durability::Flushed {
            f.sync_all()?;
        }
        fs::rename(&tmp, path)?;
        if durability == Durability::Flushed {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(io_err(path, "cannot write"))
}

/// Writes a file that every launch regenerates from the state root (a launch's policy, prompt
/// note, the CLI's prepared config files, login copies, the launch record).
///
/// When `path` already is a regular file of ours with `mode`, a single link and exactly these
/// bytes, nothing is written: launching the same chat again rewrites nothing. Otherwise the
/// file is replaced as [`write_atomic`] does (a temporary file renamed over it, so a reader
/// sees the old file or the new one, and a symlink or anything else planted at `path` is
/// replaced, never followed), but without waiting for the disk: flushing these files is what
/// made a launch slow on a busy disk (one journal commit per file, up to ~4 ms each), and it
/// buys nothing, since a crash can only lose a file that the next launch compares and rewrites
/// before anything reads it. The state root's own files (`config.json`, chat settings) and
/// the event logs keep their flushes.
pub fn write_regenerated(path: &Path, data: &[u8], mode: u32) -> Result<(), StateError> {
    if holds_exactly(path, data, mode) {
        return Ok(());
    }
    replace_file(path, data, mode, Durability::Unflushed)
}

/// Whether `path` is already exactly what [`write_regenerated`] would leave there. It is
/// opened without following a symlink and without blocking on a FIFO (a confined CLI may have
/// planted either in its runtime); anything but a regular file of ours, with `mode` and one
/// link, reads as different.
fn holds_exactly(path: &Path, data: &[u8], mode: u32) -> bool {
    let Ok(mut f) = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    else {
        return false;
    };
    let Ok(meta) = f.metadata() else {
        return false;
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !meta.is_file()
        || meta.uid() != me
        || meta.mode() & 0o7777 != mode
        || meta.nlink() != 1
        || meta.len() != data.len() as u64
    {
        return false;
    }
    let mut current = Vec::with_capacity(data.len() + 1);
    // One byte more than expected: a file that grew since the `fstat` reads as different.
    match (&mut f)
        .take(data.len() as u64 + 1)
        .read_to_end(&mut current)
    {
        Ok(_) => current == data,
        Err(_) => false,
    }
}
