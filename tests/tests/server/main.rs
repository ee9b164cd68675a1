//! `dispatcher serve` end to end: the real binary on a port of its own, a temporary state root,
//! a fake CLI adapter (`--profiles-dir`) whose binary is a shell script that speaks MCP to
//! `dispatcher bridge`. Servers are stopped by their own pid; chats by their own process
//! group; tmux by the state root's own socket.
//!
//! One test binary, one file per concern.

mod api;
mod chats;
mod crash;
mod load;
mod squatter;
mod world;
