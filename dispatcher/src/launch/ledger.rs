//! The guard ledger: what the confined launches so far kept a chat from changing, so that a
//! bridge-only launch (the CLI run outside every sandbox) runs a CLI only from files no earlier
//! chat could have rewritten.
//!
//! Each confined launch records, as its files are written, whether the autorun guard was on
//! and which programs' paths its policy guarded. The ledger keeps only the summary a later
//! decision needs: whether any confined launch ran with the guard off, and the paths guarded
//! in every one of them (the intersection). It lives in the protected state root, out of
//! every chat's reach, and is rewritten only when that summary changes.

use std::collections::BTreeSet;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The summary of every confined launch recorded in one state root.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ledger {
    /// Whether any confined launch ran with the autorun guard off.
    pub ever_unguarded: bool,
    /// The paths guarded in every confined launch; `None` before the first.
    pub always_guarded: Option<BTreeSet<PathBuf>>,
}

/// Why the ledger could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("the guard ledger {}: {why}", path.display())]
pub struct LedgerError {
    pub path: PathBuf,
    pub why: String,
}

/// Why a CLI may not run outside a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unprotected {
    #[error(
        "an earlier confined launch ran with the autorun guard off, so a chat could have rewritten it"
    )]
    GuardWasOff,
    #[error("{} was not guarded in every earlier confined launch, so a chat could have rewritten it", .0.display())]
    NotGuarded(PathBuf),
}

impl Ledger {
    /// The ledger at `path`; none recorded yet is the empty ledger.
    pub fn load(path: &Path) -> Result<Ledger, LedgerError> {
        let err = |why: String| LedgerError {
            path: path.to_path_buf(),
            why,
        };
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| err(e.to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Ledger::default()),
            Err(e) => Err(err(e.to_string())),
        }
    }

    /// This ledger with one more confined launch: `guard` whether its autorun guard was on,
    /// `guarded` the programs' paths its policy guarded.
    pub fn with_launch(&self, guard: bool, guarded: BTreeSet<PathBuf>) -> Ledger {
        let always_guarded = match &self.always_guarded {
            None => guarded,
            Some(before) => before.intersection(&guarded).cloned().collect(),
        };
        Ledger {
            ever_unguarded: self.ever_unguarded || !guard,
            always_guarded: Some(always_guarded),
        }
    }

    /// Records a confined launch in the ledger at `path` (see [`Ledger::with_launch`]),
    /// writing it only when the summary changes. Launches recorded at once are serialised by
    /// a lock beside the ledger, so that none is lost.
    pub fn record(path: &Path, guard: bool, guarded: BTreeSet<PathBuf>) -> Result<(), LedgerError> {
        let err = |why: String| LedgerError {
            path: path.to_path_buf(),
            why,
        };
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path.with_extension("lock"))
            .map_err(|e| err(format!("cannot open its lock: {e}")))?;
        // SAFETY: flock on a descriptor we own; released when `lock` is closed.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(err(format!("cannot lock it: {e}")));
        }
        let before = Ledger::load(path)?;
        let after = before.with_launch(guard, guarded);
        if after != before {
            let text = serde_json::to_string_pretty(&after).expect("the ledger serializes");
            crate::state::write_atomic(path, text.as_bytes(), 0o600)
                .map_err(|e| err(e.to_string()))?;
        }
        Ok(())
    }

    /// Whether a CLI whose files are `files` (its path, the file it resolves to, its package
    /// folder) may run outside a sandbox: each lies inside a path every confined launch
    /// recorded guarded, and none ran with the guard off.
    pub fn allows(&self, files: &[PathBuf]) -> Result<(), Unprotected> {
        if self.ever_unguarded {
            return Err(Unprotected::GuardWasOff);
        }
        let Some(always) = &self.always_guarded else {
            return Ok(()); // no confined launch yet: no chat has run
        };
        match files
            .iter()
            .find(|f| !always.iter().any(|g| f.starts_with(g)))
        {
            Some(f) => Err(Unprotected::NotGuarded(f.clone())),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(paths: &[&str]) -> BTreeSet<PathBuf> {
        paths.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn before_any_confined_launch_every_cli_may_run() {
        assert_eq!(
            Ledger::default().allows(&[PathBuf::from("/x/claude")]),
            Ok(())
        );
    }

    #[test]
    fn a_cli_runs_only_from_files_guarded_in_every_confined_launch() {
        let l = Ledger::default()
            .with_launch(
                true,
                set(&["/h/.local/bin/claude", "/h/lib/node_modules/pkg", "/s"]),
            )
            .with_launch(
                true,
                set(&["/h/.local/bin/claude", "/h/lib/node_modules/pkg"]),
            );
        let files = [
            PathBuf::from("/h/.local/bin/claude"),
            PathBuf::from("/h/lib/node_modules/pkg/cli.js"),
        ];
        assert_eq!(l.allows(&files), Ok(()));
        assert_eq!(
            l.allows(&[PathBuf::from("/s")]),
            Err(Unprotected::NotGuarded("/s".into()))
        );
        let after = l.with_launch(true, set(&["/h/.local/bin/claude"]));
        assert_eq!(
            after.allows(&files),
            Err(Unprotected::NotGuarded(files[1].clone()))
        );
    }

    #[test]
    fn one_confined_launch_with_the_guard_off_refuses_every_cli() {
        let l = Ledger::default()
            .with_launch(false, BTreeSet::new())
            .with_launch(true, set(&["/x"]));
        assert_eq!(
            l.allows(&[PathBuf::from("/x")]),
            Err(Unprotected::GuardWasOff)
        );
    }

    #[test]
    fn record_writes_the_summary_and_load_reads_it_back() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("guard-ledger.json");
        assert_eq!(Ledger::load(&path).unwrap(), Ledger::default());
        Ledger::record(&path, true, set(&["/a", "/b"])).unwrap();
        Ledger::record(&path, true, set(&["/a"])).unwrap();
        let l = Ledger::load(&path).unwrap();
        assert_eq!(l.always_guarded, Some(set(&["/a"])));
        assert!(!l.ever_unguarded);
        std::fs::write(&path, "{\"junk\": 1}").unwrap();
        assert!(Ledger::load(&path).is_err());
    }
}
