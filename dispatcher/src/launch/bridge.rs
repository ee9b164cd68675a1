//! The chat's bridge for a launch: its socket in the runtime, its context built from the
//! launch's own policy text (never re-read from the runtime, where the CLI could have
//! touched it).

use std::path::Path;

use anyhow::Result;
use sandboxer::ResolveOptions;

use super::confine::Resolved;
use crate::bridge::{self, BridgeEvent, BridgeHandle, ChatContext};
use crate::ids::ChatId;
use crate::state::StateRoot;

/// Serves `chat`'s bridge socket under `policy_text` (the launch's, named `policy_file` in
/// messages), resolved for the person at `home`, and hands every call to `log`.
///
/// `resolved` is the mode decision's resolution of this very text, reused when given: it was
/// resolved with [`ResolveOptions::for_host`] before the launch's files were written; writing them
/// only creates real folders below the runtime (symlinks there are refused), which resolve to
/// the same paths, so resolving it again would give the same policy.
pub fn serve_bridge(
    state: &StateRoot,
    chat: &ChatId,
    policy_text: &str,
    policy_file: &Path,
    home: &Path,
    resolved: Option<&Resolved>,
    log: impl Fn(BridgeEvent) + Send + Sync + 'static,
) -> Result<BridgeHandle> {
    let file = policy_file.display().to_string();
    let ctx = match resolved {
        Some(r) => ChatContext::from_policy(state, chat, r.policy.clone(), &file)?,
        None => ChatContext::from_toml(
            state,
            chat,
            policy_text,
            &file,
            &ResolveOptions::for_host(home)?,
        )?,
    };
    let socket = state.runtime(chat).join(bridge::SOCKET_NAME);
    Ok(bridge::serve(&socket, ctx, log)?)
}
