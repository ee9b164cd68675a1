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

/// The `sandboxer` a confined launch runs: `$SANDBOXER_BIN`, else `sandboxer` beside the
/// dispatcher binary (or one folder up, where test binaries live), else the bare name, which
/// the enforcer check refuses (`programs::check_file`: not an absolute path).
///
/// There is no search of `$PATH`. The enforcer runs outside every sandbox, and `$PATH`
/// usually names folders of the open home first (`~/.local/bin`, `~/.cargo/bin`): a chat can
/// create a `sandboxer` in one that comes before the real one, which the guard does not cover
/// (it guards the program a launch resolves, not every name that could shadow it). The next
/// launch would find the planted one, guard it, pass the check, and run the CLI under the
/// chat's code while reporting it confined. The two places left are the person's choice: an
/// environment variable no chat can set for a later launch, and the folder the dispatcher
/// itself was installed into, whose binaries every launch guards.
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
    PathBuf::from("sandboxer")
}
