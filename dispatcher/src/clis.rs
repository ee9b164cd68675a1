//! `dispatcher clis`: the CLI adapters, whether each is installed here, its version, and the
//! modes a launch of it gets on this machine.

use std::path::PathBuf;
use std::process::Command;

use sandboxer::Target;
use serde::Serialize;

use crate::adapter::{self, Adapter};
use crate::launch::confinement;
use crate::modes::Mode;
use crate::platform::home;

/// One row of `dispatcher clis`.
#[derive(Debug, Serialize)]
pub struct CliStatus {
    pub name: String,
    pub display_name: String,
    pub installed: bool,
    pub binary: Option<PathBuf>,
    pub version: Option<String>,
    pub checked_version: String,
    pub modes: Vec<Mode>,
    /// The modes a launch can get on this machine.
    pub modes_here: Vec<String>,
}

pub fn cli_status(adapters: &[Adapter]) -> Vec<CliStatus> {
    let host = Target::host();
    let can_confine = host
        .zip(home().ok())
        .map(|(t, h)| confinement(t, default_check_policy(t), &h, None).is_ok())
        .unwrap_or(false);
    adapters
        .iter()
        .map(|a| {
            let binary = adapter::locate_binary(a);
            let version = binary.as_ref().and_then(|b| {
                let out = Command::new(b).args(&a.version_args).output().ok()?;
                let text = String::from_utf8_lossy(&out.stdout);
                text.lines()
                    .next()
                    .map(|l| l.trim().to_string())
                    .filter(|l| !l.is_empty())
            });
            let modes_here = a
                .modes
                .iter()
                .filter(|m| **m != Mode::Full || can_confine)
                .map(|m| m.to_string())
                .collect();
            CliStatus {
                name: a.name.clone(),
                display_name: a.display_name.clone(),
                installed: binary.is_some(),
                binary,
                version,
                checked_version: a.checked_version.clone(),
                modes: a.modes.clone(),
                modes_here,
            }
        })
        .collect()
}

/// The policy `dispatcher clis` checks confinement with: the product's shape, with nothing
/// granted.
fn default_check_policy(target: Target) -> &'static str {
    sandboxer::default_policy(target)
}
