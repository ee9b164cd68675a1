//! `dispatcher doctor`: whether the programs the dispatcher runs outside a sandbox are ones no
//! chat can have written, and how to fix one that is not (see [`crate::programs`]).

use std::path::{Path, PathBuf};

use sandboxer::{Base, PolicyDocument, ResolveOptions};
use serde::Serialize;

use crate::platform;
use crate::programs::{self, Untrusted};
use crate::state::StateRoot;

/// One check and its outcome.
#[derive(Debug, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub path: PathBuf,
    /// `None` when it passes.
    pub problem: Option<String>,
    pub fix: Option<&'static str>,
}

impl Check {
    fn of(name: &'static str, path: &Path, outcome: Result<(), Untrusted>) -> Check {
        let (problem, fix) = match &outcome {
            Ok(()) => (None, None),
            Err(e) => (Some(e.to_string()), Some(e.fix())),
        };
        Check {
            name,
            path: path.to_path_buf(),
            problem,
            fix,
        }
    }
}

/// The checks for launches from `state`: the enforcer a confined Linux launch runs (owner,
/// mode, and guarded by a launch's policy as the state root's config makes it), and tmux.
pub fn checks(state: &StateRoot) -> Vec<Check> {
    let dispatcher = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("dispatcher"));
    let sandboxer = platform::locate_sandboxer(&dispatcher);
    let guard = state.config().autorun.guard;
    let enforcer = programs::check_file(&sandboxer).and_then(|real| {
        match launch_like_policy(guard, &[sandboxer.clone(), dispatcher.clone()]) {
            Ok(policy) => programs::check_guarded(&policy, &real),
            Err(why) => Err(Untrusted::Missing {
                path: sandboxer.clone(),
                why,
            }),
        }
    });
    let tmux = programs::tmux();
    vec![
        Check::of("enforcer (sandboxer)", &sandboxer, enforcer),
        Check::of("tmux", tmux, programs::check_file(tmux).map(|_| ())),
    ]
}

/// A policy guarding `programs` as a launch's does (none when the autorun guard is off),
/// resolved for this machine.
fn launch_like_policy(guard: bool, programs: &[PathBuf]) -> Result<sandboxer::Policy, String> {
    let home = platform::home().map_err(|e| e.to_string())?;
    let mut doc = PolicyDocument::new(Base::Open);
    programs::apply_guard(&mut doc, guard, programs);
    let opts = ResolveOptions::for_host(&home).map_err(|e| e.to_string())?;
    let text = doc.to_toml().map_err(|e| e.to_string())?;
    sandboxer::Policy::from_toml(&text, "doctor", &opts).map_err(|e| e.to_string())
}
