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
mod confine;
mod devices;
mod error;
mod gate;
mod handoff;
pub(crate) mod keeper;
mod kernel;
mod landlock;
mod masks;
mod mounts;
mod placeholders;
mod seccomp;
mod supervise;
mod sys;
mod userns;

use std::convert::Infallible;
use std::ffi::{CString, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use nix::errno::Errno;
use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::sys::prctl;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, kill, sigaction};
use nix::sys::wait::waitpid;
use nix::unistd::{ForkResult, Pid, fork, getegid, geteuid, getpid, getppid};

use crate::linux::plan::{Gap, Plan, Shape};
use channel::{Channel, Message, Reporter};
use gate::Gate;
use handoff::Handoff;
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
    validate(plan, check.is_some())?;
    match plan.shape {
        Shape::Masks => Started::new(command)?.finish(plan, check),
        Shape::LandlockOnly => Prepared::new(command, check.is_some())?.landlock_only(plan, check),
    }
}

/// Confines this very process under the landlock-only `plan` and executes `command` in it: no
/// fork, nothing left to wait, the command's exit status and signals are the process's own.
/// For a caller with nothing left to do (`sandboxer exec`). Returns only when the command
/// could not be started; [`InPlace::NotHere`] when this process cannot take it on (it has
/// other threads, or is a session leader, which cannot leave its terminal without hanging up
/// the session) and nothing was changed: the caller then runs the plan with [`run`].
pub fn exec_in_place(plan: &Plan, command: &Command) -> InPlace {
    if let Err(e) = validate(plan, false) {
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

/// Everything about `plan` that can be checked before it is applied: see [`check`]. The gaps
/// only when they are not computed during setup.
fn validate(plan: &Plan, checked_later: bool) -> Result<(), EnforceError> {
    if checked_later {
        check::plan_but_gaps(plan)?;
    } else {
        check::plan(plan)?;
    }
    landlock::check_kernel(&plan.landlock)
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

/// The masks shape's processes, started before the plan is known.
///
/// Making the namespaces (a fork, new user, mount and PID namespaces, the uid and gid maps,
/// PID 1 with its fresh `/proc` and `/dev/pts`) costs about as much as loading a policy and
/// planning. [`Started::new`] starts the first, the caller does the second meanwhile, and PID 1
/// waits for the plan (see `handoff.rs`). [`Started::run_checking`] checks the plan as
/// [`run_checking`] does, makes the placeholders, hands the plan over, and from there on it is
/// [`run_checking`]: PID 1 applies the masks and starts the command, which waits at the gate.
/// Dropped without a plan, the processes end without running anything.
///
/// [`run`] and [`run_checking`] go through this too, for one code path.
pub struct Started {
    prepared: Prepared,
    /// The command it was started for.
    command: Command,
    /// The caller's child: the monitor, or PID 1 itself (see [`masks`]).
    monitor: Pid,
    reader: Option<OwnedFd>,
    handoff: Handoff,
    /// Set once the plan is handed over: from then on the launch owns the processes.
    handed_over: bool,
}

impl Started {
    /// Starts the sandbox's first process (PID 1 itself from a single-threaded caller, else the
    /// monitor, which makes PID 1) and returns at once.
    pub fn new(command: &Command) -> Result<Started, EnforceError> {
        let mut prepared = Prepared::new(command, true)?;
        let channel = Channel::new()?;
        let handoff = Handoff::new()?;
        prepared.block_caller_signals()?;
        let reporter = channel.reporter();
        let (this, plan) = (&prepared, &handoff);
        let monitor = if single_threaded() {
            spawn_in_namespaces(reporter, || {
                this.leave_gate_to_parent();
                plan.leave_to_parent();
                masks::first_pid1(this, plan, reporter)
            })
        } else {
            spawn(reporter, Parent::Pid(getpid()), || {
                this.leave_gate_to_parent();
                plan.leave_to_parent();
                masks::monitor(this, plan, reporter)
            })
        };
        let reader = channel.into_reader();
        match monitor {
            Ok(monitor) => {
                prepared.run_beside(monitor);
                Ok(Started {
                    prepared,
                    command: command.clone(),
                    monitor,
                    reader: Some(reader),
                    handoff,
                    handed_over: false,
                })
            }
            Err(e) => {
                let _ = prepared.restore_caller_signals();
                Err(e)
            }
        }
    }

    /// The command these processes will run.
    pub fn command(&self) -> &Command {
        &self.command
    }

    /// [`run_checking`], in these processes: `plan` must be a masks plan.
    pub fn run_checking(self, plan: &Plan, check: Check<'_>) -> Result<Outcome, EnforceError> {
        validate(plan, true)?;
        self.finish(plan, Some(check))
    }

    /// For a validated plan: the placeholders, the handover, then as [`run`].
    fn finish(mut self, plan: &Plan, check: Option<Check<'_>>) -> Result<Outcome, EnforceError> {
        if plan.shape != Shape::Masks {
            return Err(EnforceError::new(
                Layer::Plan,
                format!(
                    "a {} plan cannot run in the masks shape's processes",
                    plan.shape
                ),
            ));
        }
        let placeholders = Placeholders::create(&plan.mounts)?;
        self.handoff.send(plan)?;
        self.handed_over = true;
        let hop = Hop {
            caller: true,
            parent_of_command: false,
        };
        let reader = self.reader.take().expect("read once");
        let outcome = self.prepared.conclude(Ok(self.monitor), reader, check, hop);
        drop(placeholders);
        outcome
    }
}

impl Drop for Started {
    /// Not handed a plan: the processes are stopped and reaped (nothing ran), and the caller's
    /// signal handling is put back.
    fn drop(&mut self) {
        if self.handed_over {
            return;
        }
        self.handoff.abandon();
        self.prepared.gate_answer(false);
        let _ = kill(self.monitor, Signal::SIGKILL);
        while let Err(Errno::EINTR) = waitpid(self.monitor, None) {}
        let _ = self.prepared.restore_caller_signals();
    }
}

/// The command and the caller's state, turned into what the children need, before any `fork`.
struct Prepared {
    program: CString,
    argv: Vec<CString>,
    cwd: CString,
    /// The caller's effective uid and gid, mapped to themselves in the user namespace.
    uid: u32,
    gid: u32,
    /// The caller's signal mask and `SIGCHLD` action, restored for the command.
    caller_mask: SigSet,
    caller_sigchld: Option<SigAction>,
    /// When the plan's gaps are checked during setup: the command waits on it before `exec`.
    gate: Option<Gate>,
    /// The caller's CPU affinity, which the command gets (see [`Prepared::run_beside`]).
    affinity: Option<CpuSet>,
}

impl Prepared {
    fn new(command: &Command, gated: bool) -> Result<Prepared, EnforceError> {
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
            program,
            argv,
            cwd,
            uid: geteuid().as_raw(),
            gid: getegid().as_raw(),
            caller_mask: SigSet::empty(),
            caller_sigchld: None,
            gate: if gated { Some(Gate::new()?) } else { None },
            affinity: sched_getaffinity(Pid::from_raw(0)).ok(),
        })
    }

    /// The caller's side, right after forking the sandbox's first process while it goes on
    /// working (loading and planning, checking the plan): moves that process to another CPU
    /// the caller may use. The kernel starts a new process on its parent's CPU, where it
    /// would wait until the caller blocks, however idle the other CPUs are; so the sandbox's
    /// setup and the caller's work would take turns instead of running side by side.
    /// The sandbox gets the caller's own affinity back once the caller has spoken to it again
    /// ([`Prepared::own_affinity`]), which is necessarily after this call.
    fn run_beside(&self, child: Pid) {
        let (Some(allowed), Ok(here)) = (&self.affinity, nix::sched::sched_getcpu()) else {
            return;
        };
        let Some(other) =
            (0..CpuSet::count()).find(|&c| c != here && allowed.is_set(c) == Ok(true))
        else {
            return;
        };
        let mut there = CpuSet::new();
        if there.set(other).is_ok() {
            // Best effort: where it fails, the process only starts later.
            let _ = sched_setaffinity(child, &there);
        }
    }

    /// Whether the caller may use more than one CPU (so a sandbox process may wait by spinning
    /// on one while the caller works on another).
    fn spare_cpu(&self) -> bool {
        self.affinity.as_ref().is_some_and(|allowed| {
            (0..CpuSet::count())
                .filter(|&c| allowed.is_set(c) == Ok(true))
                .nth(1)
                .is_some()
        })
    }

    /// In the sandbox, once the caller has handed something over (the plan, the gate's
    /// answer): the caller's affinity again, for everything started from here on.
    fn own_affinity(&self) {
        if let Some(allowed) = &self.affinity {
            let _ = sched_setaffinity(Pid::from_raw(0), allowed);
        }
    }

    /// Blocks the signals the caller waits for (before the first `fork`, so that none is lost)
    /// and puts `SIGCHLD`'s default action in force.
    fn block_caller_signals(&mut self) -> Result<(), EnforceError> {
        self.caller_mask = supervise::block()?;
        // A caller that ignores SIGCHLD would have its children reaped by the kernel, and the
        // status lost: the default action is in force while we wait.
        let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
        // SAFETY: installs the default action, no handler code.
        self.caller_sigchld = unsafe { sigaction(Signal::SIGCHLD, &default) }.ok();
        Ok(())
    }

    /// The landlock-only shape: the command's process is the caller's child.
    fn landlock_only(
        mut self,
        plan: &Plan,
        check: Option<Check<'_>>,
    ) -> Result<Outcome, EnforceError> {
        let channel = Channel::new()?;
        let link = plan
            .socket_broker
            .as_ref()
            .map(|_| broker::Link::new())
            .transpose()?;
        self.block_caller_signals()?;
        let this: &Prepared = &self;
        let reporter = channel.reporter();
        let first = spawn(reporter, Parent::Pid(getpid()), || {
            this.leave_gate_to_parent();
            confine::exec(
                this,
                plan,
                confine::Session::New,
                link.as_ref().map(broker::Link::command_end),
            )
        });
        let reader = channel.into_reader();
        // The caller is outside the command's Landlock domain and its parent: it runs the
        // broker on a thread until the command ends.
        let broker = match (link, &plan.socket_broker, &first) {
            (Some(link), Some(b), Ok(child)) => {
                match BrokerThread::start(link.into_broker_end(), b.allowed.clone().into()) {
                    Ok(t) => Some(t),
                    Err(e) => {
                        // Nothing may run unbrokered: the command's process goes.
                        let _ = kill(*child, Signal::SIGKILL);
                        let _ = waitpid(*child, None);
                        let _ = self.restore_caller_signals();
                        return Err(e);
                    }
                }
            }
            _ => None,
        };
        if let (Ok(child), Some(_)) = (&first, &self.gate) {
            // It sets itself up while the caller checks; it waits at the gate anyway.
            self.run_beside(*child);
        }
        let hop = Hop {
            caller: true,
            parent_of_command: true,
        };
        let outcome = self.conclude(first, reader, check, hop);
        drop(broker);
        outcome
    }

    /// Once the sandbox's first process is started: runs `check` (if any) meanwhile and opens
    /// or closes the gate, supervises the process, and reads what the sandbox reported.
    fn conclude(
        &self,
        first: Result<Pid, EnforceError>,
        reader: OwnedFd,
        check: Option<Check<'_>>,
        hop: Hop,
    ) -> Result<Outcome, EnforceError> {
        let refused = match check {
            Some(check) => {
                let verdict = check().and_then(|gaps| check::no_breaking_gaps(&gaps));
                self.gate_answer(verdict.is_ok());
                verdict.err()
            }
            None => {
                self.gate_answer(true);
                None
            }
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

    /// The caller's answer at the gate, if there is one.
    fn gate_answer(&self, yes: bool) {
        if let Some(gate) = &self.gate {
            gate.open(yes);
        }
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
            Some(gate) => gate.pass(self.spare_cpu()),
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

/// The landlock-only shape's broker, on a thread of the caller. Dropped once the command has
/// ended: the thread stops and closes the listener, and whatever the command left running
/// then fails to connect (`ENOSYS`) instead of connecting unchecked.
struct BrokerThread {
    stop: Option<OwnedFd>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BrokerThread {
    fn start(link: OwnedFd, allowed: broker::Allowlist) -> Result<BrokerThread, EnforceError> {
        let (stop_read, stop) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| EnforceError::os(Layer::SocketBroker, "creating the stop pipe", e))?;
        let thread = broker::spawn(link, allowed, Some(stop_read))?;
        Ok(BrokerThread {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for BrokerThread {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
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
        Ok(ForkResult::Child) => child_runs(reporter, parent, body),
    }
}

/// [`spawn`], but the child starts in new user, mount, PID and IPC namespaces, as their PID 1
/// (`clone(2)` with `CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC`): one process fewer between
/// the caller and the command than `fork` and `unshare` (see [`masks`]).
///
/// Only for a single-threaded caller. The raw system call skips what glibc's `fork` does
/// around it, which matters only for locks held by other threads (the allocator's, stdio's):
/// with no other thread, none is held, and the child is a plain copy of the caller.
fn spawn_in_namespaces(
    reporter: Reporter,
    body: impl FnOnce() -> Result<Infallible, EnforceError>,
) -> Result<Pid, EnforceError> {
    let flags = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWIPC
        | libc::SIGCHLD;
    // SAFETY: no new stack (the child continues on a copy of this one, as after `fork`), no
    // thread-id or TLS pointers; see above for why a single-threaded caller may do this. The
    // child never returns into the caller's frames.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    match pid {
        -1 => Err(userns::refused(
            "clone(user, mount, pid, ipc)",
            Errno::last(),
        )),
        0 => child_runs(reporter, Parent::OutsideNamespace, body),
        child => Ok(Pid::from_raw(child as libc::pid_t)),
    }
}

/// [`spawn`] for the command's own process in the masks shape, started by PID 1: it shares
/// PID 1's memory until it executes the command (`CLONE_VM | CLONE_VFORK`, as `posix_spawn`
/// does), on a stack of its own, and PID 1 is suspended until then. So no page tables are
/// copied, nothing is copied on write, and nothing is torn down at `exec`, which a `fork` of a
/// process this size costs. Its credentials, descriptors, working directory, session and
/// Landlock domain are its own as after `fork` (none of `CLONE_THREAD`, `CLONE_FILES`,
/// `CLONE_FS`); only memory is shared, and PID 1 does nothing with it until the command runs.
///
/// Not for a parent that must act before the child executes (the caller opening the gate).
fn spawn_for_exec<F: FnOnce() -> Result<Infallible, EnforceError>>(
    reporter: Reporter,
    parent: Parent,
    body: F,
) -> Result<Pid, EnforceError> {
    struct Start<'r, F> {
        reporter: Reporter<'r>,
        parent: Parent,
        body: Option<F>,
    }
    extern "C" fn child_start<F: FnOnce() -> Result<Infallible, EnforceError>>(
        arg: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `arg` is the `Start` below, alive (its owner is suspended) until this
        // process executes or exits, which it does before returning.
        let start = unsafe { &mut *(arg as *mut Start<'_, F>) };
        let body = start.body.take().expect("started once");
        child_runs(start.reporter, start.parent, body)
    }
    let stack = ChildStack::new()?;
    let mut start = Start {
        reporter,
        parent,
        body: Some(body),
    };
    let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
    // SAFETY: the child runs `start` on its own stack and never returns from it; this process
    // is suspended (CLONE_VFORK) until the child has executed or exited, so nothing else uses
    // the shared memory meanwhile, and `start` and `stack` outlive the child's use of them.
    let pid = unsafe {
        libc::clone(
            child_start::<F>,
            stack.top(),
            flags,
            (&raw mut start).cast::<libc::c_void>(),
        )
    };
    drop(stack);
    match pid {
        -1 => Err(EnforceError::os(
            Layer::Process,
            "clone(vm, vfork)",
            Errno::last(),
        )),
        child => Ok(Pid::from_raw(child)),
    }
}

/// The stack the command's process starts on (see [`spawn_for_exec`]): mapped on demand, with
/// an inaccessible page below it, so that an overflow faults instead of writing over memory
/// the parent owns.
struct ChildStack {
    base: *mut libc::c_void,
    len: usize,
}

impl ChildStack {
    /// Room for the command's last steps (Landlock's ruleset, error messages) many times over.
    const LEN: usize = 1 << 20;
    const GUARD: usize = 4096;

    fn new() -> Result<ChildStack, EnforceError> {
        let len = Self::LEN + Self::GUARD;
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(EnforceError::os(
                Layer::Process,
                "mapping the command's start-up stack",
                Errno::last(),
            ));
        }
        let stack = ChildStack { base, len };
        // SAFETY: the lowest page of the mapping made above.
        if unsafe { libc::mprotect(base, Self::GUARD, libc::PROT_NONE) } != 0 {
            return Err(EnforceError::os(
                Layer::Process,
                "guarding the command's start-up stack",
                Errno::last(),
            ));
        }
        Ok(stack)
    }

    /// Where the stack starts (it grows down), 16-byte aligned as the ABI wants.
    fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of the mapping, which is page aligned.
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used (the child executed or exited).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Whether this process has one thread and shares its memory with no other process. Asked of
/// the kernel in one system call: `unshare(CLONE_VM)` fails with `EINVAL` unless that holds,
/// and otherwise changes nothing.
fn single_threaded() -> bool {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_VM).is_ok()
}

/// A new sandbox process: runs `body`, which either never returns (it executes or exits) or
/// returns the error that stopped it, sent to the caller before the process exits with 125.
fn child_runs(
    reporter: Reporter,
    parent: Parent,
    body: impl FnOnce() -> Result<Infallible, EnforceError>,
) -> ! {
    let failure = match catch_unwind(AssertUnwindSafe(|| {
        die_with_parent(parent)?;
        body()
    })) {
        Ok(Err(e)) => e,
        Ok(Ok(never)) => match never {},
        Err(_) => EnforceError::new(Layer::Process, "a sandbox process panicked"),
    };
    reporter.send(&Message::Failed(failure));
    // SAFETY: ends this process without running the caller's exit handlers or flushing its
    // inherited stdio buffers twice.
    unsafe { libc::_exit(125) }
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
