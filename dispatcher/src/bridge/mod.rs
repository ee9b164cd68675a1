//! The bridge: the one way a confined CLI reaches what lies outside its sandbox.
//!
//! ```text
//! CLI ──stdio, MCP──► shim (`dispatcher bridge --socket S`, inside the sandbox)
//!                      └──<runtime>/bridge.sock, JSON lines──► server (the dispatcher, unconfined)
//!                                                              └── Policy::decide, then the work
//! ```
//!
//! - [`run_shim`] is an MCP server on stdio. It does no file work: it answers the handshake
//!   itself and forwards `tools/list` and `tools/call` to the chat's socket.
//! - [`serve`] binds a chat's socket (mode 0600, inside the chat's runtime), accepts only
//!   processes of the dispatcher's own uid (kernel peer credentials), and runs each call under
//!   that chat's policy, deciding with [`sandboxer::Policy::decide`] on the real path of what
//!   is opened. The socket is the caller's identity: a chat's socket serves that chat's
//!   policy and nothing else, and no other chat's sandbox can reach it (the runtimes of
//!   other chats are protected).
//! - Every message on both channels is one line of JSON of at most [`MAX_MESSAGE`] bytes.
//!
//! `docs/bridge.md` is the full description.

pub(crate) mod fsx;
pub mod mcp;
mod peer;
mod server;
mod shim;
pub mod tools;
mod wire;

use std::io;
use std::path::PathBuf;

use serde::Serialize;

use crate::ids::ChatId;

pub use peer::Peer;
pub use server::{BridgeHandle, ChatContext, MAX_CONNECTIONS, SOCKET_NAME, serve};
pub use shim::{REPLY_TIMEOUT, run_shim};
pub use tools::{MAX_READ, MAX_WRITE, OpenOutcome, Opener};
pub use wire::MAX_MESSAGE;

#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("chat {chat}: cannot load its policy: {source}")]
    Policy {
        chat: ChatId,
        #[source]
        source: sandboxer::PolicyError,
    },
    #[error("chat {chat}: {why}; refusing to serve its bridge")]
    BadPolicy { chat: ChatId, why: String },
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    #[error("the bridge socket {socket} must be directly inside the chat's runtime {runtime}")]
    SocketOutsideRuntime { socket: PathBuf, runtime: PathBuf },
    #[error(
        "the bridge socket path {path} is {len} bytes; a Unix socket path must be shorter than {max} \
         bytes here (use a shorter state root)"
    )]
    SocketPathTooLong {
        path: PathBuf,
        len: usize,
        max: usize,
    },
    #[error("another bridge is already serving {0}")]
    AlreadyServing(PathBuf),
}

pub(crate) fn io_error(what: impl Into<String>) -> impl FnOnce(io::Error) -> BridgeError {
    let what = what.into();
    move |source| BridgeError::Io { what, source }
}

/// How a call ended, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CallVerdict {
    /// Allowed by the policy (or the allow-list) and done.
    Allow,
    /// Refused: the policy, the allow-list, a path rule, or an unknown caller.
    Deny,
    /// Not done for another reason: bad arguments, a missing file, a protocol error.
    Error,
}

/// One entry of the bridge's log: every tool call, every refused connection, every protocol
/// error. `tool` is the tool's name, or `(connect)` / `(protocol)`.
#[derive(Debug, Clone, Serialize)]
pub struct BridgeEvent {
    pub chat: ChatId,
    pub peer: Option<Peer>,
    pub tool: String,
    /// The path or URL as the caller gave it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The real path the decision was made on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved: Option<PathBuf>,
    pub verdict: CallVerdict,
    pub reason: String,
}
