//! The confinement decision: whether this machine can enforce a launch's policy, the mode
//! that follows from it (fail closed: an explicit `full` is never downgraded silently), and
//! the wrapper a confined launch runs in (`sandboxer exec` on Linux, `sandbox-exec -f` on
//! macOS).

use std::path::Path;

use sandboxer::Target;

use super::error::LaunchError;
use super::resolve::host_resolve_options;
use crate::adapter::Adapter;
use crate::modes::{Mode, ModeDecision};

/// Who answers whether a launch can be confined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decide {
    /// This machine, for its own OS (on Linux keeping the resolved policy and the probed
    /// facts for the launch, [`Resolved`]); another OS's target is assumed confined there,
    /// which only a launch there can check.
    ThisMachine,
    /// Assumed, with this reason: `dispatcher profile` writes a Mac's profile on any machine.
    Assumed(&'static str),
}

impl Decide {
    /// Answers for `policy_text` of a launch for `target` by the person at `home`, keeping in
    /// `resolved` what a Linux decision worked out.
    pub fn confinement(
        self,
        target: Target,
        policy_text: &str,
        home: &Path,
        resolved: &mut Option<Resolved>,
    ) -> Confinement {
        match self {
            Decide::ThisMachine => confinement_resolving(target, policy_text, home, resolved),
            Decide::Assumed(how) => Ok(how.to_string()),
        }
    }
}

/// What the platform can do for one policy: `Ok(how)` when it can confine, `Err(why not)`.
pub type Confinement = Result<String, String>;

/// Picks the mode. Explicit `full` where confinement is impossible is refused (fail
/// closed), never downgraded silently; `auto` falls back to bridge-only and says why.
pub fn decide_mode(
    requested: Mode,
    adapter: &Adapter,
    confinement: &Confinement,
) -> Result<ModeDecision, LaunchError> {
    let (mode, reason) = match (requested, confinement) {
        (Mode::Full | Mode::Auto, Ok(how)) => {
            (Mode::Full, format!("the platform confines the CLI: {how}"))
        }
        (Mode::Full, Err(why)) => return Err(LaunchError::FullRefused(why.clone())),
        (Mode::Auto, Err(why)) => (Mode::BridgeOnly, format!("no working sandbox here: {why}")),
        (Mode::BridgeOnly, Ok(how)) => (
            Mode::BridgeOnly,
            format!("requested; still confined: {how}"),
        ),
        (Mode::BridgeOnly, Err(why)) => (
            Mode::BridgeOnly,
            format!("requested; no working sandbox here: {why}"),
        ),
    };
    if !adapter.supports(mode) {
        return Err(LaunchError::ModeUnsupported {
            cli: adapter.name.clone(),
            mode,
            supported: adapter
                .modes
                .iter()
                .map(|m| m.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    if let (Mode::BridgeOnly, Err(why), Some(needs)) =
        (mode, confinement, &adapter.bridge_only_needs_sandbox)
    {
        return Err(LaunchError::BridgeOnlyNeedsSandbox {
            cli: adapter.name.clone(),
            needs: needs.clone(),
            why: why.clone(),
        });
    }
    Ok(ModeDecision {
        requested,
        mode,
        reason,
    })
}

/// Can this platform enforce `policy_text` (a launch's policy) for the person at `home`?
/// `Ok(how)` or `Err(why not)`. For another OS's target the answer is about that OS's
/// mechanism, which only a launch there can check.
pub fn confinement(target: Target, policy_text: &str, home: &Path) -> Confinement {
    confinement_resolving(target, policy_text, home, &mut None)
}

/// What the mode decision worked out on Linux, kept for the launch it decided.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The launch's policy text as this machine resolved it.
    pub policy: sandboxer::Policy,
    /// The facts it was planned with (the namespace probe's).
    pub facts: sandboxer::linux::plan::Facts,
}

/// [`confinement`], keeping in `resolved` the policy as this machine resolved it to decide and
/// the facts it planned with (Linux), so that the launch need not work them out again.
pub fn confinement_resolving(
    target: Target,
    policy_text: &str,
    home: &Path,
    resolved: &mut Option<Resolved>,
) -> Confinement {
    if !target.is_host() {
        return Ok(format!("computed for {target}; enforced there"));
    }
    match target {
        Target::Linux => linux_confinement(policy_text, home, resolved),
        Target::Macos => macos_confinement(),
    }
}

/// Plans the policy under the fallback rule, with this machine's facts.
///
/// The namespace probe forks twice and waits for the namespaces to be torn down (about 1 ms
/// here, mostly waiting), so it runs in a thread while the policy is resolved and planned as
/// if the namespaces work (the probe's child makes only async-signal-safe calls, so forking
/// from a second thread is sound). When the probe then finds the facts planned with, that plan
/// stands; otherwise the policy is planned again with what the probe found. Either way the
/// answer is the one the probed facts give.
#[cfg(target_os = "linux")]
fn linux_confinement(
    policy_text: &str,
    home: &Path,
    resolved: &mut Option<Resolved>,
) -> Confinement {
    use sandboxer::linux::{exec, facts, planner};
    let probe = std::thread::spawn(facts::detect);
    let planned = (|| -> Result<_, String> {
        let opts =
            host_resolve_options(home).map_err(|e| format!("cannot resolve the policy: {e}"))?;
        let policy = sandboxer::Policy::from_toml(policy_text, "launch policy", &opts)
            .map_err(|e| format!("the launch policy is invalid: {e}"))?;
        let plan = planner::choose(&policy, &exec::unprobed_facts());
        Ok((policy, plan))
    })();
    // Joined before any answer, so the probe's children are reaped whatever happens.
    let probed = probe.join();
    let (policy, plan) = planned?;
    let facts = probed.map_err(|_| "the namespace probe failed".to_string())?;
    let plan = exec::replan(&policy, policy.linux.enforce, &facts).unwrap_or(plan);
    *resolved = Some(Resolved {
        policy,
        facts: facts.clone(),
    });
    match plan {
        Ok(plan) => Ok(format!(
            "sandboxer {} plan (Landlock ABI {})",
            match plan.shape {
                sandboxer::linux::plan::Shape::Masks => "masks",
                sandboxer::linux::plan::Shape::LandlockOnly => "landlock-only",
            },
            facts.landlock_abi
        )),
        Err(refusal) => Err(refusal.to_string()),
    }
}

#[cfg(not(target_os = "linux"))]
fn linux_confinement(_: &str, _: &Path, _: &mut Option<Resolved>) -> Confinement {
    Err("not running on Linux".into())
}

fn macos_confinement() -> Confinement {
    sandboxer::macos::detect().can_confine()?;
    Ok("sandbox-exec with this chat's Seatbelt profile".into())
}

/// The command a confined launch runs: the platform's wrapper around `program_argv`. Linux:
/// `sandboxer exec --policy POLICY --cwd CWD -- PROGRAM…`; macOS: `sandbox-exec -f PROFILE
/// PROGRAM…` (its working folder is the process's).
pub fn wrapper_argv(
    target: Target,
    sandboxer: &Path,
    policy_path: &Path,
    profile_path: Option<&Path>,
    cwd: &Path,
    program_argv: &[String],
) -> Vec<String> {
    let mut argv = match target {
        Target::Linux => vec![
            sandboxer.display().to_string(),
            "exec".into(),
            "--policy".into(),
            policy_path.display().to_string(),
            "--cwd".into(),
            cwd.display().to_string(),
            "--".into(),
        ],
        Target::Macos => vec![
            "/usr/bin/sandbox-exec".to_string(),
            "-f".into(),
            profile_path
                .expect("a macOS launch has a profile")
                .display()
                .to_string(),
        ],
    };
    argv.extend(program_argv.iter().cloned());
    argv
}
