//! The server's API as the served contract calls it: a launch's body, its events.

use serde_json::Value;
use serde_json::json;

use crate::adapter::Adapter;
use crate::contract::Runner;
use crate::server::client::Client;

pub(super) fn launch_body(
    r: &Runner<'_>,
    a: &Adapter,
    supervision: &str,
    cli_args: Vec<String>,
) -> Value {
    json!({
        "cli": a.name,
        "chat": r.layout.chat.to_string(),
        "workflow": r.layout.workflow.to_string(),
        "attach": [r.layout.attached.to_string(), format!("{}:rw", r.layout.attached_rw)],
        "mode": "full",
        "supervision": supervision,
        "cli_args": cli_args,
    })
}

/// Every event of `launch` in the chat's log.
pub(super) fn launch_events(
    client: &Client,
    chat: &str,
    launch: &str,
) -> Result<Vec<Value>, String> {
    let all = client.events(chat, 0).map_err(|e| format!("{e:#}"))?;
    // A launch's events run from its `launching` to the next launch's.
    let start = all
        .iter()
        .position(|e| e["event"] == "launching" && e["launch"] == launch)
        .ok_or_else(|| format!("no `launching` event for launch {launch}"))?;
    let end = all[start + 1..]
        .iter()
        .position(|e| e["event"] == "launching")
        .map_or(all.len(), |i| start + 1 + i);
    Ok(all[start..end].to_vec())
}
