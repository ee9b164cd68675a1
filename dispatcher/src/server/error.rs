//! Why the server could not be found or could not run.

use std::path::PathBuf;

use crate::state::StateError;
use crate::test_hooks::NotBuilt;

/// `server.json` cannot tell where this state root's server is.
#[derive(Debug, thiserror::Error)]
pub enum ServerFileError {
    #[error(
        "no server for this state root ({} cannot be read; start one with `dispatcher serve`): {io}",
        .path.display()
    )]
    Unreadable { path: PathBuf, io: std::io::Error },
    #[error("{} is not valid: {json}", .path.display())]
    Invalid {
        path: PathBuf,
        json: serde_json::Error,
    },
}

/// Why `dispatcher serve` could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Hook(#[from] NotBuilt),
    #[error("--bind {0:?}: the server listens on 127.0.0.1 only (its API launches programs)")]
    Bind(String),
    /// Another server holds this state root's lock; `other` is what its `server.json` says.
    #[error(
        "another dispatcher server already serves {}{other}; stop it with `dispatcher stop --port N`",
        .root.display()
    )]
    AlreadyServed { root: PathBuf, other: String },
    #[error(transparent)]
    State(#[from] StateError),
    /// A file, folder or socket the server needs: what it tried, and the system's answer.
    #[error("{what}: {io}")]
    Io { what: String, io: std::io::Error },
    #[error(transparent)]
    System(#[from] std::io::Error),
}

impl ServeError {
    pub(super) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServeError {
        let what = what.into();
        move |io| ServeError::Io { what, io }
    }
}
