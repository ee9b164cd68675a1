//! The launch lifecycle, the one every launch goes through — `dispatcher launch`, the
//! server's launches, the contract's, and (its planning and confinement) `dispatcher step run`:
//!
//! ```text
//! request.rs   what to launch (LaunchRequest) and the tools on this machine that run it
//! confine.rs   the confinement decision: can this machine enforce the policy, which mode,
//!              the wrapper a confined launch runs in
//! endpoint.rs  a model endpoint of the launch's choosing, applied from the adapter's data
//! network.rs   its [network] section, and the egress proxy served while it runs
//! plan.rs      the launch as data: policy, mode, argv, environment, files (nothing written)
//! resolve.rs   a Mac's profile, its policy resolved for the Mac user
//! files.rs     its files (and a Mac's profile) written into the runtime, symlinks refused
//! keychain.rs  a login a Mac keeps in the keychain, copied into the chat's config home
//! ledger.rs    what every confined launch guarded, recorded as its files are written; a
//!              bridge-only launch runs a CLI only from files guarded in every one
//! bridge.rs    the chat's bridge, served from the launch's own policy text
//! start.rs     its command started: foreground (on Linux in this process) or spawned
//! terminal.rs  the wrapper started without the person's terminal as its controlling one
//! attached.rs  `dispatcher launch`: bridge, events and the CLI in the foreground
//! ending.rs    how it ended, as one exit status (128+N for signal N)
//! ```
//!
//! The order is fixed: validate the request against the state root; build the policy; decide
//! the mode (full only where the platform can enforce the policy); compose the CLI's argv and
//! environment from its adapter; wrap it in the platform's confinement (`sandboxer exec` on
//! Linux, `sandbox-exec -f` on macOS). Nothing is written until the whole launch is known
//! ([`prepare`], then [`Planned::files`] and [`LaunchFiles::write`]). The events and the
//! start are the caller's: a foreground launch, the server's supervision, the contract's
//! harness each start it their own way.

mod attached;
mod bridge;
mod confine;
mod ending;
mod endpoint;
mod error;
mod files;
mod keychain;
mod ledger;
mod network;
mod plan;
mod request;
mod resolve;
mod start;
mod terminal;

use std::path::Path;

pub use attached::run_attached;
pub use bridge::serve_bridge;
pub use confine::{
    Confinement, Decide, Resolved, Unconfined, confinement, decide_mode, person_lists_env,
    wrapper_argv, wrapper_command,
};
pub use ending::{exit_code, of_status};
pub use endpoint::{DUMMY_KEY, ModelEndpoint};
pub use error::LaunchError;
pub use files::{LaunchFiles, ensure_real_dir, seatbelt_profile};
pub use ledger::{Ledger, LedgerError, Unprotected};
pub use network::{EGRESS_SOCKET, egress_socket, serve_egress};
pub use plan::{ENV_REMOVED, FileSource, LAUNCH_DIR, Launch, PROMPT_NOTE, PlannedFile, plan};
pub use request::{LaunchRequest, Tools, tools};
pub use resolve::render_seatbelt;
pub use start::command;

use crate::adapter::Adapter;
use crate::state::StateRoot;

/// A launch planned with this machine's tools, before anything is written.
#[derive(Debug)]
pub struct Planned {
    launch: Launch,
    /// What a decision on this machine worked out (the policy as resolved here, the confiner
    /// with the probed facts): reused to run the launch in this process and to serve its bridge.
    resolved: Option<Resolved>,
    /// The state root's guard ledger, where a confined launch is recorded as it is written.
    ledger: std::path::PathBuf,
}

impl Planned {
    pub fn launch(&self) -> &Launch {
        &self.launch
    }

    /// The launch, to change before it is written (the contract's policy mutations). The
    /// decision's resolution is dropped: it may no longer be the launch's policy.
    pub fn launch_mut(&mut self) -> &mut Launch {
        self.resolved = None;
        &mut self.launch
    }

    pub fn into_launch(self) -> Launch {
        self.launch
    }

    /// The decision's resolution of the launch's policy, when it still stands.
    pub fn resolved(&self) -> Option<&Resolved> {
        self.resolved.as_ref()
    }

    /// The launch's files for the person at `home`, ready to write.
    pub fn files(&self, home: &Path) -> Result<LaunchFiles<'_>, LaunchError> {
        LaunchFiles::prepare(&self.launch, home, &self.ledger)
    }
}

/// Plans `req` with this machine's tools, `decide` answering whether it can be confined.
pub fn prepare(
    state: &StateRoot,
    adapter: &Adapter,
    req: &LaunchRequest,
    decide: Decide,
) -> Result<Planned, LaunchError> {
    state.check_secrets_unlinked()?;
    let tools = tools(adapter, req.target)?;
    let mut resolved = None;
    let launch = plan(state, adapter, req, &tools, |policy| {
        decide.confinement(
            req.target,
            policy,
            &req.home,
            &tools.sandboxer,
            &mut resolved,
        )
    })?;
    Ok(Planned {
        launch,
        resolved,
        ledger: state.guard_ledger(),
    })
}
