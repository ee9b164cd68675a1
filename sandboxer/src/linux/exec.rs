//! Confining one command under a loaded policy: what `sandboxer exec` does after reading its
//! arguments, for every caller that launches through the library (the dispatcher runs its
//! foreground launches with it instead of starting `sandboxer exec`), so the fallback rule and
//! the fail-closed exits are the same code everywhere.
//!
//! The shape the fallback rule tries first is planned and set up at once, while its gaps are
//! computed ([`enforce::run_checking`]): the command runs only if none breaks the policy. If
//! one does, or the shape cannot be planned, the fallback rule runs in full. When the
//! namespaces turn out not to work, the namespace probe says what this machine can do and the
//! fallback rule runs again with what it found. When that first shape is masks, its
//! namespaces are made while the plan is made ([`enforce::Started`]); a caller that has not
//! loaded its policy yet can start them even earlier ([`start_ahead`]).

use crate::Policy;
use crate::linux::enforce::{self, Command, EnforceError, InPlace, Layer, Outcome, Started};
use crate::linux::facts::{self, Facts};
use crate::linux::plan::{Plan, Shape};
use crate::linux::planner::{self, HostFs, Refusal};
use crate::policy::Enforce;

pub use crate::linux::enforce::NOT_RUN;

/// How a confined launch ended.
#[derive(Debug)]
pub enum Ended {
    /// The command ran and ended so.
    Ran(Outcome),
    /// No shape can enforce the policy here; nothing was run.
    Refused(Refusal),
    /// The enforcer stopped: a layer of `shape` could not be applied (nothing was run), or
    /// the command could not be executed inside the sandbox.
    Failed { shape: Shape, error: EnforceError },
}

impl Ended {
    /// The exit status to end with: the command's own (128+N for signal N), 125 when nothing
    /// was run, 126/127 when the command could not be executed or found (as `env(1)`).
    pub fn exit_code(&self) -> u8 {
        match self {
            Ended::Ran(outcome) => outcome.exit_code(),
            Ended::Refused(_) => NOT_RUN,
            Ended::Failed { error, .. } => error.exit_code(),
        }
    }

    /// What to tell the person (stderr), when the command did not simply run.
    pub fn message(&self) -> Option<String> {
        match self {
            Ended::Ran(_) => None,
            Ended::Refused(refusal) => Some(format!(
                "sandboxer: refused ({}): {}\nsandboxer: nothing was run",
                refusal.id, refusal.message
            )),
            Ended::Failed { shape, error } if error.exit_code() == NOT_RUN => Some(format!(
                "sandboxer: cannot confine ({shape} shape): {error}\nsandboxer: nothing was run"
            )),
            Ended::Failed { error, .. } if error.stopped => Some(format!(
                "sandboxer: the sandbox was stopped while the command ran: {error}"
            )),
            Ended::Failed { error, .. } => Some(format!("sandboxer: {error}")),
        }
    }
}

/// Facts without the namespace probe: namespaces are assumed to work (the enforcer checks by
/// creating them, and [`launch`] probes when they do not). Landlock's ABI is asked of the
/// kernel; it is cheap.
pub fn unprobed_facts() -> Facts {
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    Facts {
        landlock_abi: enforce::kernel_landlock_abi(),
        user_namespaces: true,
        mount_pid_namespaces: true,
        uid,
        gid,
        namespaces_blocked_by: None,
    }
}

/// The rule "plan as if the namespaces work, probe, re-plan", once the namespace probe has
/// found `probed`: `None` when it confirms that they work, so what was planned with
/// [`unprobed_facts`] stands; else the fallback rule `how` again, with what the probe found.
pub(crate) fn replan(
    policy: &Policy,
    how: Enforce,
    probed: &Facts,
) -> Option<Result<Plan, Refusal>> {
    if probed.user_namespaces && probed.mount_pid_namespaces {
        return None;
    }
    Some(planner::choose_with(policy, probed, &HostFs, how))
}

/// The masks shape's processes for `command`, started before the policy is loaded, for
/// [`launch_started`]: `how` is the fallback rule asked for on the command line, `None` when
/// the policy's own decides. `None` when the first shape tried will not be masks, or when
/// they could not be started (the launch then tries again, and reports what fails).
pub fn start_ahead(how: Option<Enforce>, command: &Command) -> Option<Started> {
    match how {
        Some(Enforce::LandlockOnly) => None,
        Some(Enforce::Auto | Enforce::Masks) | None => Started::new(command).ok(),
    }
}

/// Confines `command` under `policy` with the fallback rule `how`, starting from `facts`
/// ([`unprobed_facts`], or the probe's when the caller has them), and runs it.
pub fn launch(policy: &Policy, facts: &Facts, how: Enforce, command: &Command) -> Ended {
    launch_started(None, policy, facts, how, command)
}

/// [`launch`], in processes from [`start_ahead`] when they fit (they are stopped otherwise).
pub fn launch_started(
    ahead: Option<Started>,
    policy: &Policy,
    facts: &Facts,
    how: Enforce,
    command: &Command,
) -> Ended {
    if let Some(ended) = launch_first_shape(ahead, policy, facts, how, command) {
        return ended;
    }
    match planner::choose_with(policy, facts, &HostFs, how) {
        Ok(plan) => {
            let result = enforce::run(&plan, command);
            after_run(policy, how, command, &plan, result)
        }
        Err(refusal) => Ended::Refused(refusal),
    }
}

/// [`launch_started`] for a caller with nothing left to do once the command runs
/// (`sandboxer exec`): when `how` asks for the landlock-only shape, this process becomes the
/// command ([`enforce::exec_in_place`]: no fork, no waiting) instead of starting it and
/// waiting; where it cannot (another thread, a session leader), it starts it as
/// [`launch_started`] does. Returns only when the command was not run in place.
pub fn launch_or_become(
    ahead: Option<Started>,
    policy: &Policy,
    facts: &Facts,
    how: Enforce,
    command: &Command,
) -> Ended {
    if how != Enforce::LandlockOnly {
        return launch_started(ahead, policy, facts, how, command);
    }
    drop(ahead);
    match planner::choose_with(policy, facts, &HostFs, how) {
        Ok(plan) => match enforce::exec_in_place(&plan, command) {
            InPlace::NotHere => ended(&plan, enforce::run(&plan, command)),
            InPlace::Failed(error) => Ended::Failed {
                shape: plan.shape,
                error,
            },
        },
        Err(refusal) => Ended::Refused(refusal),
    }
}

/// Runs a plan as it is (a plan printed or made from lowered facts): no fallback.
pub fn run_plan(plan: &Plan, command: &Command) -> Ended {
    ended(plan, enforce::run(plan, command))
}

/// Plans the first shape the fallback rule tries (`landlock-only` when asked for alone, else
/// `masks`, whose processes start first) and runs it while its gaps are computed. `None` when
/// the rest of the fallback rule must decide: the shape cannot be planned here, or its gaps
/// break the policy (then nothing was run).
fn launch_first_shape(
    ahead: Option<Started>,
    policy: &Policy,
    facts: &Facts,
    how: Enforce,
    command: &Command,
) -> Option<Ended> {
    let shape = match how {
        Enforce::LandlockOnly => Shape::LandlockOnly,
        Enforce::Auto | Enforce::Masks => Shape::Masks,
    };
    // When the processes cannot be started (no user namespaces here), that error is the
    // launch's: the fallback rule below probes and plans again, without a second attempt.
    let started = match ahead.filter(|s| s.command() == command) {
        _ if shape != Shape::Masks => None,
        Some(started) => Some(Ok(started)),
        None => Some(Started::new(command)),
    };
    let unchecked = planner::prepare_with(policy, facts, shape, &HostFs).ok()?;
    let mut refused = false;
    let mut check = || {
        let gaps = unchecked.gaps();
        refused = gaps.iter().any(|g| g.breaks_policy);
        Ok(gaps)
    };
    let result = match started {
        Some(Ok(started)) => started.run_checking(unchecked.plan(), &mut check),
        Some(Err(e)) => Err(e),
        None => enforce::run_checking(unchecked.plan(), command, &mut check),
    };
    if refused {
        return None;
    }
    Some(after_run(policy, how, command, unchecked.plan(), result))
}

/// How the launch ended once `plan` was run; when the namespaces could not be made, the probe
/// says what this machine can do, and the fallback rule runs again with what it found.
fn after_run(
    policy: &Policy,
    how: Enforce,
    command: &Command,
    plan: &Plan,
    result: Result<Outcome, EnforceError>,
) -> Ended {
    match result {
        Err(e) if namespaces_failed(&e) => match replan(policy, how, &facts::detect()) {
            // The probe sees them work: the failure was something else; report it.
            None => ended(plan, Err(e)),
            Some(Ok(plan)) => ended(&plan, enforce::run(&plan, command)),
            Some(Err(refusal)) => Ended::Refused(refusal),
        },
        result => ended(plan, result),
    }
}

/// Whether the enforcer failed because the namespaces could not be made.
fn namespaces_failed(e: &EnforceError) -> bool {
    matches!(
        e.layer,
        Layer::UserNamespace | Layer::MountNamespace | Layer::Proc
    )
}

fn ended(plan: &Plan, result: Result<Outcome, EnforceError>) -> Ended {
    match result {
        Ok(outcome) => Ended::Ran(outcome),
        Err(error) => Ended::Failed {
            shape: plan.shape,
            error,
        },
    }
}
