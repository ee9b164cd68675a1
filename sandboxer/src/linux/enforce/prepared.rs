//! The command and the caller's state, turned into what the sandbox's processes need before
//! any `fork`, and the caller's side of a launch once they run: the gate, the CPU the
//! sandbox starts on, the caller's signals, and how it ended.

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
use nix::unistd::{Pid, getegid, geteuid};

use super::channel;
use super::check::{self, Check};
use super::command::Command;
use super::error::{EnforceError, Layer, Outcome};
use super::gate::Gate;
use super::placeholders::MadeLater;
use super::supervise::{self, Hop, Reap, supervise};

/// The command and the caller's state, turned into what the children need, before any `fork`.
pub(super) struct Prepared {
    pub(super) program: CString,
    pub(super) argv: Vec<CString>,
    pub(super) cwd: CString,
    /// The caller's effective uid and gid, mapped to themselves in the user namespace.
    pub(super) uid: u32,
    pub(super) gid: u32,
    /// The caller's signal mask and `SIGCHLD` action, restored for the command.
    pub(super) caller_mask: SigSet,
    pub(super) caller_sigchld: Option<SigAction>,
    /// When the plan's gaps are checked during setup: the command waits on it before `exec`.
    pub(super) gate: Option<Gate>,
    /// The caller's CPU affinity, which the command gets (see [`Prepared::run_beside`]).
    pub(super) affinity: Option<CpuSet>,
    /// Masks shape: the inotify instance the guard watcher uses (`guard_watch.rs`), made by
    /// the caller, whose copy is closed in the background once the sandbox has ended: the
    /// last close of an instance with watches waits for an RCU grace period (milliseconds).
    pub(super) guard_events: Option<OwnedFd>,
}

impl Prepared {
    pub(super) fn new(command: &Command, gated: bool) -> Result<Prepared, EnforceError> {
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
            guard_events: None,
        })
    }

    /// The caller's side, right after forking the sandbox's first process while it goes on
    /// working (loading and planning, checking the plan): moves that process to another CPU
    /// the caller may use. The kernel starts a new process on its parent's CPU, where it
    /// would wait until the caller blocks, however idle the other CPUs are; so the sandbox's
    /// setup and the caller's work would take turns instead of running side by side.
    /// The sandbox gets the caller's own affinity back once the caller has spoken to it again
    /// ([`Prepared::own_affinity`]), which is necessarily after this call.
    pub(super) fn run_beside(&self, child: Pid) {
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
    pub(super) fn spare_cpu(&self) -> bool {
        self.affinity.as_ref().is_some_and(|allowed| {
            (0..CpuSet::count())
                .filter(|&c| allowed.is_set(c) == Ok(true))
                .nth(1)
                .is_some()
        })
    }

    /// In the sandbox, once the caller has handed something over (the plan, the gate's
    /// answer): the caller's affinity again, for everything started from here on.
    pub(super) fn own_affinity(&self) {
        if let Some(allowed) = &self.affinity {
            let _ = sched_setaffinity(Pid::from_raw(0), allowed);
        }
    }

    /// Blocks the signals the caller waits for (before the first `fork`, so that none is lost)
    /// and puts `SIGCHLD`'s default action in force.
    pub(super) fn block_caller_signals(&mut self) -> Result<(), EnforceError> {
        self.caller_mask = supervise::block()?;
        // A caller that ignores SIGCHLD would have its children reaped by the kernel, and the
        // status lost: the default action is in force while we wait.
        let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
        // SAFETY: installs the default action, no handler code.
        self.caller_sigchld = unsafe { sigaction(Signal::SIGCHLD, &default) }.ok();
        Ok(())
    }

    /// Once the sandbox's first process is started: runs `check` (if any) meanwhile and opens
    /// or closes the gate, supervises the process, and reads what the sandbox reported
    /// (placeholders made while it ran go to `made_later`, whatever the outcome).
    pub(super) fn conclude(
        &self,
        first: Result<Pid, EnforceError>,
        reader: OwnedFd,
        check: Option<Check<'_>>,
        hop: Hop,
        made_later: &mut Vec<MadeLater>,
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
        let mut reports = channel::read_reports(reader);
        made_later.append(&mut reports.placeholders);
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
    pub(super) fn gate_answer(&self, yes: bool) {
        if let Some(gate) = &self.gate {
            gate.open(yes);
        }
    }

    /// In the sandbox's first process: only the caller may open the gate, so this process
    /// (and every one it starts) lets go of the sending end; if the caller dies, the gate then
    /// reads as closed.
    pub(super) fn leave_gate_to_parent(&self) {
        if let Some(gate) = &self.gate {
            gate.leave_to_parent();
        }
    }

    /// In the command's process, just before `exec`: waits until the caller's check says the
    /// plan may run. Anything but a yes (a no, the caller gone) ends it here.
    pub(super) fn pass_gate(&self) -> Result<(), EnforceError> {
        match &self.gate {
            Some(gate) => gate.pass(self.spare_cpu()),
            None => Ok(()),
        }
    }

    /// Puts back the signal mask and `SIGCHLD` action the caller had.
    pub(super) fn restore_caller_signals(&self) -> Result<(), EnforceError> {
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
