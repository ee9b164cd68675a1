//! The masks shape's processes, started before the plan is known.

use std::os::fd::OwnedFd;

use nix::errno::Errno;
use nix::sys::inotify::{InitFlags, Inotify};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::waitpid;
use nix::unistd::{Pid, getpid};

use super::channel::Channel;
use super::check::{self, Check};
use super::command::Command;
use super::error::{EnforceError, Layer, Outcome};
use super::handoff::Handoff;
use super::masks;
use super::placeholders::Placeholders;
use super::prepared::Prepared;
use super::spawn::{Parent, single_threaded, spawn, spawn_in_namespaces};
use super::supervise::Hop;
use crate::linux::plan::{MountStep, Plan, Shape};

/// The masks shape's processes, started before the plan is known.
///
/// Making the namespaces (a fork, new user, mount and PID namespaces, the uid and gid maps,
/// PID 1 with its fresh `/proc` and `/dev/pts`) costs about as much as loading a policy and
/// planning. [`Started::new`] starts the first, the caller does the second meanwhile, and PID 1
/// waits for the plan (see `handoff.rs`). [`Started::run_checking`] checks the plan as
/// [`super::run_checking`] does, makes the placeholders, hands the plan over, and from there on it is
/// [`super::run_checking`]: PID 1 applies the masks and starts the command, which waits at the gate.
/// Dropped without a plan, the processes end without running anything.
///
/// [`super::run`] and [`super::run_checking`] go through this too, for one code path.
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
        // Made before PID 1, which inherits it (close-on-exec: the command never has it). A
        // failure here leaves the watcher to make its own, and to report a limit reached.
        prepared.guard_events = Inotify::init(InitFlags::IN_CLOEXEC).ok().map(OwnedFd::from);
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

    /// [`super::run_checking`], in these processes: `plan` must be a masks plan.
    pub fn run_checking(self, plan: &Plan, check: Check<'_>) -> Result<Outcome, EnforceError> {
        check::validate(plan, true)?;
        self.finish(plan, Some(check))
    }

    /// For a validated plan: the placeholders, the handover, then as [`super::run`].
    pub(super) fn finish(
        mut self,
        plan: &Plan,
        check: Option<Check<'_>>,
    ) -> Result<Outcome, EnforceError> {
        if plan.shape != Shape::Masks {
            return Err(EnforceError::new(
                Layer::Plan,
                format!(
                    "a {} plan cannot run in the masks shape's processes",
                    plan.shape
                ),
            ));
        }
        let mut placeholders = Placeholders::create(&plan.mounts)?;
        self.handoff.send(plan)?;
        self.handed_over = true;
        let hop = Hop {
            caller: true,
            parent_of_command: false,
        };
        let reader = self.reader.take().expect("read once");
        let mut made_later = Vec::new();
        let outcome = self
            .prepared
            .conclude(Ok(self.monitor), reader, check, hop, &mut made_later);
        placeholders.adopt(made_later);
        if let Some(events) = self.prepared.guard_events.take() {
            let watched = plan
                .mounts
                .iter()
                .any(|m| matches!(m, MountStep::Guard { .. }));
            if watched {
                placeholders.close_later(events);
            }
        }
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
