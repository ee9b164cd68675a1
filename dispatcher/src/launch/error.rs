//! Why a launch was refused or could not be prepared.

use sandboxer::Target;

use crate::modes::Mode;
use crate::state::StateError;

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error("{0}")]
    Adapter(String),
    #[error("{cli} does not support {mode} mode (it supports: {supported})")]
    ModeUnsupported {
        cli: String,
        mode: Mode,
        supported: String,
    },
    #[error(
        "{cli} runs bridge-only only inside a working sandbox ({needs}); no working sandbox here: {why}"
    )]
    BridgeOnlyNeedsSandbox {
        cli: String,
        needs: String,
        why: String,
    },
    #[error("full mode refused: {0}. Use --mode bridge-only, or --mode auto to fall back to it")]
    FullRefused(String),
    /// The sandbox works here but its enforcer cannot be trusted: `auto` does not fall back.
    #[error(
        "the launch is refused: {0}. Until it is fixed, no mode but an explicit --mode bridge-only \
         runs (unconfined), and `dispatcher doctor` reports it"
    )]
    EnforcerUntrusted(String),
    #[error(
        "--mode auto must be decided on the machine that runs the CLI; for --target {0} pass --mode full or --mode bridge-only"
    )]
    AutoOffHost(Target),
    /// Bridge-only without a sandbox would run a CLI from files an earlier chat could have
    /// rewritten ([`super::Ledger::allows`]).
    #[error(
        "{cli} would run outside any sandbox from {}, but {why}. To fix: launch it confined \
         (--mode full); or check or reinstall it, then remove {} to start the record afresh",
        binary.display(),
        ledger.display()
    )]
    CliUnprotected {
        cli: String,
        binary: std::path::PathBuf,
        why: super::Unprotected,
        ledger: std::path::PathBuf,
    },
    /// The launch's Seatbelt profile could not be rendered from its policy.
    #[error("{0}")]
    Profile(String),
    #[error("{what}: {why}")]
    Io { what: String, why: String },
}
