//! What can go wrong with a state root, and the I/O error helper every state file uses.

use std::io;
use std::path::{Path, PathBuf};

/// Environment variable naming the state root (`--state-root` wins).
pub const ENV_STATE_ROOT: &str = "AGENTWORKS_STATE_ROOT";

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{path}: {what}: {source}")]
    Io {
        path: PathBuf,
        what: &'static str,
        source: io::Error,
    },
    #[error(
        "{path} is not a state root: {why} (create one with `dispatcher init --state-root {path}`)"
    )]
    NotAStateRoot { path: PathBuf, why: String },
    #[error(
        "{path} has no anchor ({anchor}): it was not made by `dispatcher init` at this path, or \
         before state roots were anchored; if it is yours, run `dispatcher init --state-root \
         {path}` outside any chat"
    )]
    NotAnchored { path: PathBuf, anchor: PathBuf },
    #[error(
        "{path} is not the state root `dispatcher init` made here: {why} (anchor {anchor}). It \
         may be a look-alike made after the real one was moved away; refusing to use it. Find \
         the real one; if you moved or restored it yourself, run `dispatcher init --adopt \
         --state-root {path}` outside any chat"
    )]
    Stranger {
        path: PathBuf,
        anchor: PathBuf,
        why: String,
    },
    #[error("{path} exists and is not empty but is not a state root; refusing to write into it")]
    NotEmpty { path: PathBuf },
    #[error("{path} belongs to uid {owner}, not to you (uid {me}); refusing to use it")]
    NotOwner { path: PathBuf, owner: u32, me: u32 },
    #[error("{path}: {field}: {why}")]
    BadConfig {
        path: PathBuf,
        field: String,
        why: String,
    },
    #[error("unknown chat {0:?} (create it with `dispatcher chat add {0}`)")]
    UnknownChat(String),
    #[error("unknown workflow {0:?} (create it with `dispatcher workflow add {0}`)")]
    UnknownWorkflow(String),
    #[error("{kind} {id:?} already exists")]
    Exists { kind: &'static str, id: String },
    /// A second name for a secret lets a chat read it from outside the protected root.
    #[error(
        "{path} has {links} hard links: another name for it outside the protected state root \
         would let a chat read it. Refusing to launch. Find the other names with `find / -xdev \
         -samefile {path}`, remove them, then run `dispatcher init --rotate-token` (outside any \
         chat) in case the secret was read"
    )]
    SecretLinked { path: PathBuf, links: u64 },
    #[error(
        "no state root given: pass --state-root DIR or set {ENV_STATE_ROOT}, or set HOME for the default"
    )]
    NoDefault,
}

pub(crate) fn io_err<'a>(
    path: &'a Path,
    what: &'static str,
) -> impl FnOnce(io::Error) -> StateError + 'a {
    move |source| StateError::Io {
        path: path.to_path_buf(),
        what,
        source,
    }
}
