//! Facts about this machine: the person's home, whether the dispatcher runs as root, where
//! `sandboxer` is.

use std::path::{Path, PathBuf};

/// Why the person's home is not known.
#[derive(Debug, thiserror::Error)]
pub enum HomeError {
    #[error("HOME is not set")]
    Unset,
    #[error("HOME={} is not an absolute path", .0.display())]
    Relative(PathBuf),
}

/// The person's home, from `$HOME`.
pub fn home() -> Result<PathBuf, HomeError> {
    let home = PathBuf::from(std::env::var_os("HOME").ok_or(HomeError::Unset)?);
    if !home.is_absolute() {
        return Err(HomeError::Relative(home));
    }
    Ok(home)
}

pub fn as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// `$SANDBOXER_BIN`, else `sandboxer` beside the dispatcher binary, else on `PATH`, else the
/// bare name (the launch then fails with a clear error when it runs).
pub fn locate_sandboxer(dispatcher: &Path) -> PathBuf {
    if let Some(p) = std::env::var_os("SANDBOXER_BIN").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    if let Some(dir) = dispatcher.parent() {
        let sibling = dir.join("sandboxer");
        if sibling.is_file() {
            return sibling;
        }
        // Test binaries live in target/<profile>/deps; the tools one level up.
        if let Some(up) = dir.parent().map(|d| d.join("sandboxer"))
            && up.is_file()
        {
            return up;
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&path) {
            let p = d.join("sandboxer");
            if p.is_file() {
                return p;
            }
        }
    }
    PathBuf::from("sandboxer")
}
