//! The landlock-only shape's processes: the command is the caller's child, and the socket
//! broker, when the plan has one, runs on a thread of the caller.

use std::os::fd::OwnedFd;

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::waitpid;
use nix::unistd::getpid;

use super::broker;
use super::channel::Channel;
use super::check::Check;
use super::confine;
use super::error::{EnforceError, Layer, Outcome};
use super::prepared::Prepared;
use super::spawn::{Parent, spawn};
use super::supervise::Hop;
use crate::linux::plan::Plan;

/// The landlock-only shape: the command's process is the caller's child.
pub(super) fn run(
    mut prepared: Prepared,
    plan: &Plan,
    check: Option<Check<'_>>,
) -> Result<Outcome, EnforceError> {
    let channel = Channel::new()?;
    let link = plan
        .socket_broker
        .as_ref()
        .map(|_| broker::Link::new())
        .transpose()?;
    prepared.block_caller_signals()?;
    let this: &Prepared = &prepared;
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
                    let _ = prepared.restore_caller_signals();
                    return Err(e);
                }
            }
        }
        _ => None,
    };
    if let (Ok(child), Some(_)) = (&first, &prepared.gate) {
        // It sets itself up while the caller checks; it waits at the gate anyway.
        prepared.run_beside(*child);
    }
    let hop = Hop {
        caller: true,
        parent_of_command: true,
    };
    // No masks, so nothing stands in for a guarded path while it runs.
    let outcome = prepared.conclude(first, reader, check, hop, &mut Vec::new());
    drop(broker);
    outcome
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
