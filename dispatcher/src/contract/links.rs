//! Second names of the world's secrets, removed between runs.
//!
//! The unconfined control run makes every probe succeed that can, `hardlink-config-json`
//! among them: it leaves the server token with a second name in the world's home, and every
//! later launch is refused ([`crate::state::StateRoot::check_secrets_unlinked`]). A confined
//! run under a broken policy may do the same. Those names are the probes' own doing, inside
//! the world: they are removed at the end of every run, once judged.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::contract::fixture::Layout;

/// Removes every other name, beneath the world's root, of each secret of its state root.
pub(crate) fn unlink_secret_copies(layout: &Layout) -> Result<(), String> {
    let secrets = layout.state.secrets().map_err(|e| e.to_string())?;
    for secret in secrets {
        let Ok(meta) = fs::symlink_metadata(&secret) else {
            continue;
        };
        if meta.nlink() > 1 {
            remove_same_file(&layout.root, &secret, (meta.dev(), meta.ino()))?;
        }
    }
    Ok(())
}

/// Removes the files beneath `dir` that are `id` (not following symlinks), except `keep`.
fn remove_same_file(dir: &Path, keep: &Path, id: (u64, u64)) -> Result<(), String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            remove_same_file(&path, keep, id)?;
        } else if meta.is_file() && (meta.dev(), meta.ino()) == id && path != keep {
            fs::remove_file(&path)
                .map_err(|e| format!("removing the second name {}: {e}", path.display()))?;
        }
    }
    Ok(())
}
