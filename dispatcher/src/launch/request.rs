//! What to launch: the caller's request, and the tools on this machine that run it.

use std::path::PathBuf;

use sandboxer::Target;
use serde::Serialize;

use super::error::LaunchError;
use crate::adapter::{self, Adapter};
use crate::grants::Attach;
use crate::ids::{ChatId, WorkflowId};
use crate::modes::Mode;
use crate::platform;

/// What the caller asks for.
#[derive(Debug, Clone)]
pub struct LaunchRequest {
    pub cli: String,
    pub chat: ChatId,
    pub workflow: WorkflowId,
    pub attach: Vec<Attach>,
    /// `None`: the chat's saved mode.
    pub mode: Option<Mode>,
    pub headless: bool,
    pub cwd: Option<PathBuf>,
    pub target: Target,
    /// The person's home (`{home}`, the login files).
    pub home: PathBuf,
    pub cli_args: Vec<String>,
    /// Where the CLI sends its model requests, when not its own default.
    pub model_endpoint: Option<super::ModelEndpoint>,
}

/// Where the launch's tools live on this machine.
#[derive(Debug, Clone, Serialize)]
pub struct Tools {
    /// The CLI binary (as found, or the adapter's name when it is not installed).
    pub cli_binary: PathBuf,
    /// `sandboxer` (Linux) — the enforcer the launch is wrapped in.
    pub sandboxer: PathBuf,
    /// The dispatcher itself, run as the MCP bridge inside the sandbox.
    pub dispatcher: PathBuf,
    /// tmux, as the dispatcher's tmux server runs it ([`crate::programs::tmux`]).
    pub tmux: PathBuf,
    /// Every shipped adapter's CLI found here: run outside a sandbox later (by the person,
    /// a bridge-only launch), so guarded in every launch, whichever CLI it runs.
    pub clis: Vec<PathBuf>,
    pub as_root: bool,
    /// The person's values of the lists' variables ([`super::person_lists_env`]).
    pub lists_env: Vec<(String, String)>,
}

/// Finds the tools a launch needs. The CLI binary may be missing for a dry run (its name is
/// shown then); a real launch checks it.
pub fn tools(adapter: &Adapter, target: Target) -> Result<Tools, LaunchError> {
    let dispatcher = std::env::current_exe().map_err(|e| LaunchError::Io {
        what: "cannot find the dispatcher's own binary".into(),
        why: e.to_string(),
    })?;
    let cli_binary = match adapter::locate_binary(adapter) {
        Some(p) if target.is_host() => p,
        _ => PathBuf::from(&adapter.binary),
    };
    Ok(Tools {
        cli_binary,
        sandboxer: platform::locate_sandboxer(&dispatcher),
        dispatcher,
        tmux: crate::programs::tmux().to_path_buf(),
        clis: crate::programs::installed_clis(),
        as_root: platform::as_root(),
        lists_env: super::person_lists_env(),
    })
}
