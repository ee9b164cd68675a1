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
//! Masks:          caller ── monitor (namespaces, masks) ── init, PID 1 (/proc) ── command
//! ```
//!
//! (see [`masks`] for the masks shape). The caller waits and forwards SIGTERM, SIGINT, SIGHUP,
//! SIGQUIT, SIGUSR1, SIGUSR2 and SIGWINCH; so does every process in between. Every sandbox
//! process gets `PR_SET_PDEATHSIG(SIGKILL)`: if the caller dies, the sandbox dies with it.
//!
//! The environment and stdin/stdout/stderr pass through unchanged; other descriptors do not
//! (they are marked close-on-exec, so nothing opened outside leaks in). The caller may be
//! multi-threaded: the sandbox's processes are made with `fork` and are single-threaded, as
//! Landlock (per thread before ABI 8) and `unshare(CLONE_NEWUSER)` need. Only signals that
//! reach the calling thread are forwarded.

mod caps;
mod channel;
mod check;
mod confine;
mod error;
mod gate;
mod landlock;
mod masks;
mod mounts;
mod placeholders;
mod supervise;
mod sys;
mod userns;

use std::convert::Infallible;
use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use nix::sys::prctl;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
use nix::unistd::{ForkResult, Pid, fork, getpid, getppid};

use crate::linux::plan::{Gap, Plan, Shape};
use channel::{Channel, Message, Reporter};
use gate::Gate;
use placeholders::Placeholders;
use supervise::{Hop, Reap, supervise};

pub use error::{EnforceError, Layer, Outcome};

/// What to run inside the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// Looked up in `PATH` (of the environment, which passes through) when it has no `/`.
    pub program: OsString,
    /// The arguments after the program name (`argv[0]` is `program`).
    pub args: Vec<OsString>,
    /// The working directory, absolute; entered by path inside the sandbox.
    pub cwd: PathBuf,
}

/// Applies `plan` and runs `command` inside it; returns how the command ended.
pub fn run(plan: &Plan, command: &Command) -> Result<Outcome, EnforceError> {
    run_inner(plan, command, None)
}

/// The planner's self-check, run by [`run_checking`] while the sandbox is being set up: the
/// plan's gaps, or why they could not be computed.
pub type Check<'c> = &'c mut dyn FnMut() -> Result<Vec<Gap>, EnforceError>;

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
    let mut prepared = Prepared::new(plan, command, check.is_some())?;
    let placeholders = match plan.shape {
        Shape::Masks => Placeholders::create(&plan.mounts)?,
        Shape::LandlockOnly => Placeholders::default(),
    };
    let outcome = prepared.launch(check);
    drop(placeholders);
    outcome
}

/// The signals [`run`] waits for on the calling thread: those it forwards to the command, and
/// `SIGCHLD`. A caller with other threads keeps them blocked in those (a thread started with
/// them blocked inherits that), so that they reach the waiting thread: a signal another thread
/// takes is not forwarded, and a `SIGCHLD` taken there delays noticing the command's end.
pub fn waited_signals() -> Vec<libc::c_int> {
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

/// A validated plan and command, turned into what the children need, before any `fork`.
struct Prepared<'a> {
    plan: &'a Plan,
    program: CString,
    argv: Vec<CString>,
    cwd: CString,
    /// The caller's signal mask and `SIGCHLD` action, restored for the command.
    caller_mask: SigSet,
    caller_sigchld: Option<SigAction>,
    /// When the plan's gaps are checked during setup: the command waits on it before `exec`.
    gate: Option<Gate>,
}

impl<'a> Prepared<'a> {
    fn new(
        plan: &'a Plan,
        command: &Command,
        checked_later: bool,
    ) -> Result<Prepared<'a>, EnforceError> {
        if checked_later {
            check::plan_but_gaps(plan)?;
        } else {
            check::plan(plan)?;
        }
        landlock::check_kernel(&plan.landlock)?;
        let program = c_string(Layer::Exec, command.program.as_bytes(), "the program name")?;
        if program.is_empty() {
            return Err(EnforceError::new(Layer::Exec, "the program name is empty"));
        }
        let mut argv = vec![program.clone()];
        for arg in &command.args {
            argv.push(c_string(Layer::Exec, arg.as_bytes(), "an argument")?);
        }
        if !command.cwd.is_absolute() {
            return Err(EnforceError::new(
                Layer::WorkingDirectory,
                format!("{:?} is not an absolute path", command.cwd),
            ));
        }
        let cwd = c_string(
            Layer::WorkingDirectory,
            command.cwd.as_os_str().as_bytes(),
            "the working directory",
        )?;
        Ok(Prepared {
            plan,
            program,
            argv,
            cwd,
            caller_mask: SigSet::empty(),
            caller_sigchld: None,
            gate: if checked_later {
                Some(Gate::new()?)
            } else {
                None
            },
        })
    }

    /// Starts the sandbox's first process, runs `check` (if any) meanwhile and opens or
    /// closes the gate, supervises the process, and reads what the sandbox reported.
    fn launch(&mut self, check: Option<Check<'_>>) -> Result<Outcome, EnforceError> {
        let channel = Channel::new()?;
        self.caller_mask = supervise::block()?;
        // A caller that ignores SIGCHLD would have its children reaped by the kernel, and the
        // status lost: the default action is in force while we wait.
        let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
        // SAFETY: installs the default action, no handler code.
        self.caller_sigchld = unsafe { sigaction(Signal::SIGCHLD, &default) }.ok();

        let this: &Prepared = self;
        let this_shape = this.plan.shape;
        let reporter = channel.reporter();
        let first = match this.plan.shape {
            Shape::LandlockOnly => spawn(reporter, Parent::Pid(getpid()), || {
                this.leave_gate_to_parent();
                confine::exec(this)
            }),
            Shape::Masks => spawn(reporter, Parent::Pid(getpid()), || {
                this.leave_gate_to_parent();
                masks::monitor(this, reporter)
            }),
        };
        let reader = channel.into_reader();
        let refused = match (&self.gate, check) {
            (Some(gate), Some(check)) => {
                let verdict = check().and_then(|gaps| check::no_breaking_gaps(&gaps));
                gate.open(verdict.is_ok());
                verdict.err()
            }
            _ => None,
        };
        let hop = Hop {
            caller: true,
            parent_of_command: this_shape == Shape::LandlockOnly,
        };
        let status = first.and_then(|child| supervise(child, Reap::Child, hop));
        let restored = self.restore_caller_signals();
        let reports = channel::read_reports(reader);
        if let Some(refusal) = refused {
            return Err(refusal);
        }
        if let Some(failure) = reports.failure {
            return Err(failure);
        }
        let status = status?;
        restored?;
        Ok(reports.finished.unwrap_or(status))
    }

    /// In the sandbox's first process: only the caller may open the gate, so this process
    /// (and every one it starts) lets go of the sending end; if the caller dies, the gate then
    /// reads as closed.
    fn leave_gate_to_parent(&self) {
        if let Some(gate) = &self.gate {
            gate.leave_to_parent();
        }
    }

    /// In the command's process, just before `exec`: waits until the caller's check says the
    /// plan may run. Anything but a yes (a no, the caller gone) ends it here.
    fn pass_gate(&self) -> Result<(), EnforceError> {
        match &self.gate {
            Some(gate) => gate.pass(),
            None => Ok(()),
        }
    }

    /// Puts back the signal mask and `SIGCHLD` action the caller had.
    fn restore_caller_signals(&self) -> Result<(), EnforceError> {
        if let Some(action) = &self.caller_sigchld {
            // SAFETY: reinstates the caller's own action.
            unsafe { sigaction(Signal::SIGCHLD, action) }
                .map_err(|e| EnforceError::os(Layer::Process, "restoring SIGCHLD", e))?;
        }
        self.caller_mask
            .thread_set_mask()
            .map_err(|e| EnforceError::os(Layer::Process, "restoring the signal mask", e))
    }
}

fn c_string(layer: Layer, bytes: &[u8], what: &str) -> Result<CString, EnforceError> {
    CString::new(bytes).map_err(|_| EnforceError::new(layer, format!("{what} contains a NUL byte")))
}

/// Who a new sandbox process expects as its parent, to notice the parent dying before
/// `PR_SET_PDEATHSIG` was set.
#[derive(Clone, Copy)]
enum Parent {
    Pid(Pid),
    /// The parent is outside the child's PID namespace (`getppid` reads 0).
    OutsideNamespace,
}

/// Forks; the child runs `body`, which either never returns (it executes or exits) or returns
/// the error that stopped it, sent to the caller before the child exits with 125.
fn spawn(
    reporter: Reporter,
    parent: Parent,
    body: impl FnOnce() -> Result<Infallible, EnforceError>,
) -> Result<Pid, EnforceError> {
    // SAFETY: the child only runs `body` and then `_exit`s; it never returns into the caller's
    // frames. Allocation in the child is safe: glibc's `fork` resets the allocator's locks.
    match unsafe { fork() } {
        Err(e) => Err(EnforceError::os(Layer::Process, "fork", e)),
        Ok(ForkResult::Parent { child }) => Ok(child),
        Ok(ForkResult::Child) => {
            let failure = match catch_unwind(AssertUnwindSafe(|| {
                die_with_parent(parent)?;
                body()
            })) {
                Ok(Err(e)) => e,
                Ok(Ok(never)) => match never {},
                Err(_) => EnforceError::new(Layer::Process, "a sandbox process panicked"),
            };
            reporter.send(&Message::Failed(failure));
            // SAFETY: ends this process without running the caller's exit handlers or
            // flushing its inherited stdio buffers twice.
            unsafe { libc::_exit(125) }
        }
    }
}

fn die_with_parent(parent: Parent) -> Result<(), EnforceError> {
    prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(|e| EnforceError::os(Layer::Process, "prctl(PR_SET_PDEATHSIG)", e))?;
    let alive = match parent {
        Parent::Pid(pid) => getppid() == pid,
        Parent::OutsideNamespace => true,
    };
    if alive {
        Ok(())
    } else {
        Err(EnforceError::new(
            Layer::Process,
            "the parent process died during start-up",
        ))
    }
}

/// Ends a sandbox process with `outcome` as its status (128+N for a signal: a process that
/// waits cannot die of its child's signal, and PID 1 cannot die of a signal it sends itself).
fn exit_with(outcome: Outcome) -> ! {
    // SAFETY: see `spawn`.
    unsafe { libc::_exit(outcome.exit_code() as i32) }
}
