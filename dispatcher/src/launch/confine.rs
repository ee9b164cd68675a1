//! The confinement decision: whether this machine can enforce a launch's policy, the mode
//! that follows from it (fail closed: an explicit `full` is never downgraded silently), and
//! the wrapper a confined launch runs in (`sandboxer exec` on Linux, `sandbox-exec -f` on
//! macOS).

use std::path::Path;

use sandboxer::{Confiner, ResolveOptions, Target};

use super::error::LaunchError;
use crate::adapter::Adapter;
use crate::modes::{Mode, ModeDecision};
use crate::programs;

/// Who answers whether a launch can be confined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decide {
    /// This machine, for its own OS (keeping the resolved policy and the confiner that
    /// answered for the launch, [`Resolved`]); another OS's target is assumed confined there,
    /// which only a launch there can check.
    ThisMachine,
    /// Assumed, with this reason: `dispatcher profile` writes a Mac's profile on any machine.
    Assumed(&'static str),
}

impl Decide {
    /// Answers for `policy_text` of a launch for `target` by the person at `home`, run by the
    /// `sandboxer` binary at `enforcer`, keeping in `resolved` what a Linux decision worked out.
    pub fn confinement(
        self,
        target: Target,
        policy_text: &str,
        home: &Path,
        enforcer: &Path,
        resolved: &mut Option<Resolved>,
    ) -> Confinement {
        match self {
            Decide::ThisMachine => {
                confinement_resolving(target, policy_text, home, Some(enforcer), resolved)
            }
            Decide::Assumed(how) => Ok(how.to_string()),
        }
    }
}

/// What the platform can do for one policy: `Ok(how)` when it can confine, `Err(why not)`.
pub type Confinement = Result<String, Unconfined>;

/// Why a launch cannot be confined here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unconfined {
    /// This machine has no working sandbox for the policy (kernel, platform, the policy).
    NoSandbox(String),
    /// The sandbox works, but the `sandboxer` binary that would enforce it is one another
    /// account could have replaced (its file or a folder above it writable by others, or not
    /// owned by root or the person). A chat can bring this about (`chmod` in the open home), and
    /// must not thereby make later launches run unconfined, so `auto` refuses instead of
    /// falling back to bridge-only.
    UntrustedEnforcer(String),
}

impl std::fmt::Display for Unconfined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unconfined::NoSandbox(why) | Unconfined::UntrustedEnforcer(why) => f.write_str(why),
        }
    }
}

/// Picks the mode. Explicit `full` where confinement is impossible is refused (fail
/// closed), never downgraded silently; `auto` falls back to bridge-only and says why, except
/// where the sandbox works and only its enforcer cannot be trusted ([`Unconfined`]): that is
/// refused as `full` is.
pub fn decide_mode(
    requested: Mode,
    adapter: &Adapter,
    confinement: &Confinement,
) -> Result<ModeDecision, LaunchError> {
    let (mode, reason) = match (requested, confinement) {
        (Mode::Full | Mode::Auto, Ok(how)) => {
            (Mode::Full, format!("the platform confines the CLI: {how}"))
        }
        (Mode::Full | Mode::Auto, Err(Unconfined::UntrustedEnforcer(why))) => {
            return Err(LaunchError::EnforcerUntrusted(why.clone()));
        }
        (Mode::Full, Err(why)) => return Err(LaunchError::FullRefused(why.to_string())),
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
            why: why.to_string(),
        });
    }
    Ok(ModeDecision {
        requested,
        mode,
        reason,
    })
}

/// Can this platform enforce `policy_text` (a launch's policy) for the person at `home`, run
/// by the `sandboxer` binary at `enforcer` (`None`: the question is only whether the platform
/// can)? `Ok(how)` or `Err(why not)`. For another OS's target the answer is about that OS's
/// mechanism, which only a launch there can check.
pub fn confinement(
    target: Target,
    policy_text: &str,
    home: &Path,
    enforcer: Option<&Path>,
) -> Confinement {
    confinement_resolving(target, policy_text, home, enforcer, &mut None)
}

/// What the mode decision worked out on this machine, kept for the launch it decided.
#[derive(Debug)]
pub struct Resolved {
    /// The launch's policy text as this machine resolved it.
    pub policy: sandboxer::Policy,
    /// The confiner that answered (on Linux holding the namespace probe's facts).
    pub confiner: Confiner,
}

/// [`confinement`], keeping in `resolved` the policy as this machine resolved it to decide and
/// the confiner that answered, so that the launch need not work them out again.
///
/// The confiner starts the namespace probe (Linux) before the policy is resolved, so that the
/// two overlap ([`Confiner::for_host`]).
///
/// On Linux a confined launch run by the server or tmux is enforced by the `sandboxer` binary
/// at `enforcer`, a program run outside the sandbox: it must be one no chat can have written
/// ([`programs::check_file`]) and that this launch's own policy keeps unwritable
/// ([`programs::check_guarded`]), or the launch is not confined: a replaced enforcer would
/// run the CLI unconfined while the launch reports it confined.
pub fn confinement_resolving(
    target: Target,
    policy_text: &str,
    home: &Path,
    enforcer: Option<&Path>,
    resolved: &mut Option<Resolved>,
) -> Confinement {
    if !target.is_host() {
        return Ok(format!("computed for {target}; enforced there"));
    }
    let mut confiner = Confiner::for_host();
    let opts = ResolveOptions::for_host(home)
        .map_err(|e| Unconfined::NoSandbox(format!("cannot resolve the policy: {e}")))?;
    let policy = sandboxer::Policy::from_toml(policy_text, "launch policy", &opts)
        .map_err(|e| Unconfined::NoSandbox(format!("the launch policy is invalid: {e}")))?;
    let how = confiner.check(&policy);
    let trusted = match (target, enforcer) {
        (Target::Linux, Some(path)) => trusted_enforcer(&policy, path),
        _ => Ok(()),
    };
    *resolved = Some(Resolved { policy, confiner });
    let how = how
        .map(describe)
        .map_err(|why| Unconfined::NoSandbox(why.to_string()))?;
    trusted.map(|()| how)
}

/// [`programs::check_file`] and [`programs::check_guarded`] for the enforcer at `path`, as the
/// reason a launch is not confined. The file's own state (its owner, its and its folders'
/// modes) is something a chat may have brought about — `chmod 777` on the folder of a
/// `sandboxer` built in the home — so it is [`Unconfined::UntrustedEnforcer`], which `auto`
/// refuses; a missing binary, or a policy that does not keep it unwritable (the person's
/// `[autorun] guard = false`, which no chat can change), is not, and `auto` falls back as where
/// no sandbox works.
fn trusted_enforcer(policy: &sandboxer::Policy, path: &Path) -> Result<(), Unconfined> {
    let why = |e: programs::Untrusted| {
        format!(
            "the sandboxer binary that would confine it cannot be trusted: {e}; to fix: {}",
            e.fix()
        )
    };
    let real = programs::check_file(path).map_err(|e| match e {
        programs::Untrusted::Owner { .. } | programs::Untrusted::Writable { .. } => {
            Unconfined::UntrustedEnforcer(why(e))
        }
        _ => Unconfined::NoSandbox(why(e)),
    })?;
    programs::check_guarded(policy, &real).map_err(|e| Unconfined::NoSandbox(why(e)))
}

/// How the mode reason names a confinement.
fn describe(how: sandboxer::Confinement) -> String {
    match how {
        sandboxer::Confinement::Seatbelt => "sandbox-exec with this chat's Seatbelt profile".into(),
        plan => plan.to_string(),
    }
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
    lists_env: &[(String, String)],
) -> Vec<String> {
    let mut argv = match target {
        Target::Linux => {
            let mut argv = vec![
                sandboxer.display().to_string(),
                "exec".into(),
                "--policy".into(),
                policy_path.display().to_string(),
                "--cwd".into(),
                cwd.display().to_string(),
            ];
            // The lists are the person's, whatever the CLI's own environment says (an adapter
            // may move XDG_CONFIG_HOME into the chat's runtime).
            for (name, value) in lists_env {
                argv.push("--lists-env".into());
                argv.push(format!("{name}={value}"));
            }
            argv.push("--".into());
            argv
        }
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

/// The process of a confined launch's wrapper ([`wrapper_argv`]): its program and arguments,
/// started without the person's terminal as its controlling terminal (`terminal.rs`: else
/// the sandbox could type into it). Every confined process the dispatcher starts is started
/// from this.
pub fn wrapper_command(argv: &[String]) -> std::process::Command {
    let mut cmd = std::process::Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    super::terminal::leave_controlling_terminal(&mut cmd);
    cmd
}

/// The person's values of the variables the ways-out and autorun lists read, from this
/// process (the dispatcher runs with the person's environment), an unset one as empty: what
/// `sandboxer exec --lists-env` resolves the lists with in every launch.
pub fn person_lists_env() -> Vec<(String, String)> {
    sandboxer::LISTS_ENV
        .iter()
        .map(|k| (k.to_string(), std::env::var(k).unwrap_or_default()))
        .collect()
}
