//! The bridge end to end, in-process: a temporary state root with chats and workflows, each
//! chat's policy written by `LaunchGrants::policy_toml`, the chat's socket served, and the shim
//! driven with scripted MCP sessions. Plus a real MCP client (the MCP Inspector CLI) driving
//! the shim as a separate process.
//!
//! One test binary, one file per concern.

mod concurrency;
mod inspector;
mod namespace;
mod protocol;
mod tools;
mod world;
