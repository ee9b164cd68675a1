//! The bridge's tools, run by the dispatcher (unconfined) for a confined CLI, each call checked
//! with the chat's own [`Policy::decide`] on the real path of what is actually opened.
//!
//! Paths must be absolute, without NUL and without `..` components (refused, never folded:
//! folding `..` lexically is wrong through symlinks, and resolving it by walking would reveal
//! what exists inside protected folders). Symlinks are followed by the kernel for
//! `read_file` and `list_dir` and the decision is made on where they lead; `write_file` never
//! follows a symlink at the last component. When a path cannot be opened, the refusal is
//! decided first on where it would resolve, so an error message never tells the caller
//! whether something exists inside a folder it may not see.
//!
//! Every path goes through one resolution ([`fsx::resolve`]): no `/proc` magic links (so
//! never into another process's mount namespace) and nothing on `/proc`; such a path is
//! refused before any policy decision, and the decision is always on the real path of the
//! object the dispatcher itself holds.

mod args;
mod call;
mod catalogue;
mod decide;
mod files;
mod opener;
mod url;

use std::path::PathBuf;

use sandboxer::Policy;
use serde_json::{Map, Value, json};

use super::CallVerdict;
use super::mcp::tool_result;
use call::{Call, Done, Policies, Stop};

pub use catalogue::{
    MAX_LIST_ENTRIES, MAX_LIST_TEXT, MAX_PATH, MAX_READ, MAX_URL, MAX_WRITE, TOOL_NAMES, tool_list,
};
pub use decide::case_folded;
pub use opener::{OpenOutcome, Opener, exposed_handler_settings};
pub use url::{UrlRefused, check_url, prefix_allows};

/// The result of one tool call, with what the log records.
#[derive(Debug)]
pub struct Outcome {
    /// The MCP tool result (`content`, `isError`).
    pub result: Value,
    /// The path or URL as asked.
    pub target: Option<String>,
    /// The real path the decision was made on.
    pub resolved: Option<PathBuf>,
    pub verdict: CallVerdict,
    pub reason: String,
}

/// What a tool needs from its chat.
pub struct ToolContext<'a> {
    pub policy: &'a Policy,
    /// The policy compared without case ([`case_folded`]), where file names are
    /// case-insensitive: a call must be allowed by both.
    pub folded: Option<&'a Policy>,
    pub open_url_allow: &'a [String],
    pub opener: &'a Opener,
}

/// Runs tool `name`; `None` when there is no such tool.
pub fn call(cx: &ToolContext<'_>, name: &str, args: &Map<String, Value>) -> Option<Outcome> {
    let mut call = Call::default();
    let policies = Policies {
        exact: cx.policy,
        folded: cx.folded,
    };
    let result = match name {
        "read_file" => call.read_file(&policies, args),
        "write_file" => call.write_file(&policies, args),
        "list_dir" => call.list_dir(&policies, args),
        "open_url" => call.open_url(cx.policy, cx.open_url_allow, cx.opener, args),
        _ => return None,
    };
    let (result, verdict, reason) = match result {
        Ok(Done { text, note, reason }) => {
            let mut result = tool_result(text, false);
            if let Some(note) = note {
                result["content"]
                    .as_array_mut()
                    .expect("tool_result has content")
                    .push(json!({ "type": "text", "text": note }));
            }
            (result, CallVerdict::Allow, reason)
        }
        Err(Stop::Deny { message, reason }) => {
            (tool_result(message, true), CallVerdict::Deny, reason)
        }
        Err(Stop::Fail(message)) => (
            tool_result(message.clone(), true),
            CallVerdict::Error,
            message,
        ),
    };
    Some(Outcome {
        result,
        target: call.target,
        resolved: call.resolved,
        verdict,
        reason,
    })
}
