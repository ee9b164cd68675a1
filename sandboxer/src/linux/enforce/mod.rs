//! The Linux enforcer: applies a [`Plan`] around one command and reports how it ended.
//!
//! [`run`] refuses, before starting anything, a plan that is inconsistent, that breaks the
//! policy (a gap), that was made for another uid, or that needs a Landlock ABI the running
//! kernel lacks — the plan's facts are never trusted. Then it starts the sandbox's processes
//! and applies every step the plan lists; if any step fails, the command is never executed
//! and the error names the layer and the cause (errors after `fork` come back over a pipe).
//! [`run_checking`] does the same for a plan whose gaps the caller computes while the sandbox
//! is being set up: the command's process waits at a gate right before `exec` until the
//! caller has found none that breaks the policy (see `gate.rs`).
//!
//! Process structure:
//!
//! ```text
//! Landlock-only:  caller ── command (setsid, cwd, capabilities, no_new_privs, Landlock, exec)
//!   or the caller itself becomes the command ([`exec_in_place`], for `sandboxer exec`)
//! Masks:          caller ── PID 1 (namespaces, /proc, masks) ── command
//!   or, from a multi-threaded caller:
//!                 caller ── monitor (namespaces) ── PID 1 (/proc, masks) ── command
//! ```
//!
//! (see [`masks`] for the masks shape, whose processes start before the plan exists:
//! [`Started`]). The caller waits and forwards SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1,
//! SIGUSR2 and SIGWINCH; so does every process in between. Every sandbox process gets
//! `PR_SET_PDEATHSIG(SIGKILL)`: if the caller dies, the sandbox dies with it.
//!
//! The environment and stdin/stdout/stderr pass through unchanged; other descriptors do not
//! (they are marked close-on-exec, so nothing opened outside leaks in), nor does the CPU
//! affinity change. The caller may be multi-threaded: the sandbox's processes are single-
//! threaded, as Landlock (per thread before ABI 8) and new user namespaces need, and made with
//! `fork` (glibc's, which keeps the allocator consistent in the child). Only a caller with one
//! thread clones PID 1 straight into the new namespaces, saving a process; PID 1 starts the
//! command sharing its memory until `exec`, as `posix_spawn` does. Only signals that reach the
//! calling thread are forwarded.
//!
//! Where time goes (`scripts/bench-exec.sh`, `docs/performance.md`): a new process starts on
//! its parent's CPU, and there waits for the parent to block however idle the others are; so
//! the sandbox's first process is moved to another CPU the caller may use while the caller
//! plans and checks, and gets the caller's affinity back before anything it starts.

mod broker;
mod caps;
mod channel;
mod check;
mod command;
mod confine;
mod detached_close;
mod devices;
mod error;
mod gate;
mod guard_watch;
mod handoff;
pub(crate) mod keeper;
mod kernel;
mod landlock;
mod landlock_only;
mod masks;
mod mounts;
mod network;
mod placeholders;
mod prepared;
mod scratch;
mod seccomp;
mod spawn;
mod started;
mod supervise;
mod sys;
mod userns;

use nix::sys::signal::SigSet;

use crate::linux::plan::{Plan, Shape};
use prepared::Prepared;
use spawn::single_threaded;

pub use check::Check;
pub use command::Command;
pub use error::{EnforceError, Layer, NOT_RUN, Outcome};
pub use started::Started;

/// Applies `plan` and runs `command` inside it; returns how the command ended.
pub fn run(plan: &Plan, command: &Command) -> Result<Outcome, EnforceError> {
    run_inner(plan, command, None)
}

/// [`run`] for a plan whose gaps are not known yet (`plan.gaps` is not looked at): `check`
/// computes them in the caller's process while the sandbox's processes set up the namespaces,
/// masks and Landlock, and the command is executed only once `check` has returned gaps none
/// of which breaks the policy. Otherwise nothing is executed and the error says why (the
/// layer is [`Layer::Plan`]). The check runs whatever happens to the sandbox's processes, so
/// its cost is hidden behind theirs instead of added to it.
pub fn run_checking(
    plan: &Plan,
    command: &Command,
    check: Check<'_>,
) -> Result<Outcome, EnforceError> {
    run_inner(plan, command, Some(check))
}

fn run_inner(
    plan: &Plan,
    command: &Command,
    check: Option<Check<'_>>,
) -> Result<Outcome, EnforceError> {
    check::validate(plan, check.is_some())?;
    match plan.shape {
        Shape::Masks => Started::new(command)?.finish(plan, check),
        Shape::LandlockOnly => {
            landlock_only::run(Prepared::new(command, check.is_some())?, plan, check)
        }
    }
}

/// Confines this very process under the landlock-only `plan` and executes `command` in it: no
/// fork, nothing left to wait, the command's exit status and signals are the process's own.
/// For a caller with nothing left to do (`sandboxer exec`). Returns only when the command
/// could not be started; [`InPlace::NotHere`] when this process cannot take it on (it has
/// other threads, or is a session leader, which cannot leave its terminal without hanging up
/// the session) and nothing was changed: the caller then runs the plan with [`run`].
pub fn exec_in_place(plan: &Plan, command: &Command) -> InPlace {
    if let Err(e) = check::validate(plan, false) {
        return InPlace::Failed(e);
    }
    if plan.shape != Shape::LandlockOnly {
        return InPlace::Failed(EnforceError::new(
            Layer::Plan,
            format!("a {} plan cannot be applied in place", plan.shape),
        ));
    }
    // The socket broker must be an ancestor of the command outside its Landlock domain: this
    // process, which then cannot become the command.
    if plan.socket_broker.is_some() || !single_threaded() || confine::session_leader() {
        return InPlace::NotHere;
    }
    let mut prepared = match Prepared::new(command, false) {
        Ok(p) => p,
        Err(e) => return InPlace::Failed(e),
    };
    // Nothing is blocked for a wait here: the command gets the mask this process has.
    prepared.caller_mask = SigSet::thread_get_mask().unwrap_or_else(|_| SigSet::empty());
    match confine::exec(&prepared, plan, confine::Session::Detach, None) {
        Ok(never) => match never {},
        Err(e) => InPlace::Failed(e),
    }
}

/// How [`exec_in_place`] came back.
#[derive(Debug)]
pub enum InPlace {
    /// This process cannot become the command; nothing was changed.
    NotHere,
    /// A step failed (the process may already be partly confined) or the command could not be
    /// executed.
    Failed(EnforceError),
}

/// The signals [`run`] waits for on the calling thread: those it forwards to the command, and
/// `SIGCHLD`. A caller with other threads keeps them blocked in those (a thread started with
/// them blocked inherits that), so that they reach the waiting thread: a signal another thread
/// takes is not forwarded, and a `SIGCHLD` taken there delays noticing the command's end.
pub(crate) fn waited_signals() -> Vec<libc::c_int> {
    supervise::FORWARDED
        .iter()
        .map(|s| *s as libc::c_int)
        .chain([libc::SIGCHLD])
        .collect()
}

/// The running kernel's Landlock ABI version; 0 when Landlock is absent or disabled. Cheap
/// (one system call): callers may plan with it and leave the rest to [`run`], which checks
/// everything again.
pub fn kernel_landlock_abi() -> u32 {
    sys::landlock_abi().unwrap_or(0)
}
