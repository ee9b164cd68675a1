//! Waiting for a child while passing signals on to it: the caller's process, the namespace
//! monitor and PID 1 all do this, one hop each.
//!
//! The forwarded signals and `SIGCHLD` are blocked *before* the first `fork` (the mask is
//! inherited), so none is lost between `fork` and the wait loop: they stay pending and
//! `sigtimedwait` picks them up. The command's own process restores the caller's mask just
//! before `exec`, so it sees signals exactly as it would unconfined.
//!
//! Job control: a terminal's Ctrl-Z stops the caller's process group (the caller; the
//! sandbox's processes left it), and the person's shell then waits for `fg` (SIGCONT). The
//! command, in a session of its own, would keep running unseen. So `SIGTSTP` is passed down
//! like the other signals and the caller then stops itself; the `SIGCONT` that resumes the
//! caller is passed down too. The last hop delivers both to the command's process group:
//! `SIGTSTP` where the command catches it (a shell or an editor restores the terminal, then
//! stops itself), else `SIGSTOP` — the kernel discards a default-action `SIGTSTP` sent to an
//! orphaned process group, which a session of its own is.

use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{SigSet, SigmaskHow, Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use super::error::{EnforceError, Layer, Outcome};

/// Signals a terminal, a service manager or a person sends to "the program": each is passed on
/// to the command.
pub(super) const FORWARDED: [Signal; 9] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
    Signal::SIGTSTP,
    Signal::SIGCONT,
];

/// How long one wait lasts before the child's state is checked again. Only matters when
/// another thread of the caller's process consumed the `SIGCHLD` meant for us.
const RECHECK: Duration = Duration::from_millis(200);

/// The forwarded signals plus `SIGCHLD`.
pub(super) fn wait_set() -> SigSet {
    let mut set = SigSet::empty();
    for s in FORWARDED {
        set.add(s);
    }
    set.add(Signal::SIGCHLD);
    set
}

/// Blocks [`wait_set`] on the calling thread; returns the previous mask to restore.
pub(super) fn block() -> Result<SigSet, EnforceError> {
    wait_set()
        .thread_swap_mask(SigmaskHow::SIG_BLOCK)
        .map_err(|e| EnforceError::os(Layer::Process, "blocking signals", e))
}

/// Whom the wait loop reaps.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Reap {
    /// Only `child` (an ordinary parent must not steal other children's statuses).
    Child,
    /// Every child that exits (PID 1: orphans are re-parented to us). `sentinel`: a helper
    /// that must outlive the child (the guard watcher, `guard_watch.rs`); its end, whatever
    /// caused it, is an error and ends the wait.
    All { sentinel: Option<Pid> },
}

/// Where a supervising process sits in the chain from the caller to the command.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Hop {
    /// The caller's process: it stops itself after passing a `SIGTSTP` on, so that the shell
    /// that started it sees the job stopped.
    pub caller: bool,
    /// Its child is the command (in a session and process group of its own).
    pub parent_of_command: bool,
}

/// Waits until `child` exits or is killed, forwarding [`FORWARDED`] signals to it. Returns its
/// outcome.
pub(super) fn supervise(child: Pid, reap: Reap, hop: Hop) -> Result<Outcome, EnforceError> {
    let set = wait_set();
    loop {
        if let Some(outcome) = reap_ready(child, reap)? {
            return Ok(outcome);
        }
        match wait_signal(&set) {
            Some(Signal::SIGCHLD) | None => {}
            // The child may have just exited (ESRCH); its status is collected above.
            Some(sig) => {
                if hop.parent_of_command {
                    deliver_to_command(child, sig);
                } else {
                    let _ = kill(child, sig);
                }
                if sig == Signal::SIGTSTP && hop.caller {
                    let _ = kill(nix::unistd::getpid(), Signal::SIGSTOP);
                }
            }
        }
    }
}

/// Passes `sig` on to the command (see the module's comment for the stop signals).
fn deliver_to_command(command: Pid, sig: Signal) {
    match sig {
        Signal::SIGTSTP => {
            let stop = if catches(command, Signal::SIGTSTP) {
                Signal::SIGTSTP
            } else {
                Signal::SIGSTOP
            };
            let _ = killpg(command, stop);
        }
        Signal::SIGCONT => {
            let _ = killpg(command, Signal::SIGCONT);
        }
        other => {
            let _ = kill(command, other);
        }
    }
}

/// Whether `pid` has a handler for `sig` (`SigCgt` in its `/proc` status).
fn catches(pid: Pid, sig: Signal) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (sig as u32 - 1)) != 0)
}

/// Collects every exited child that is ready; returns `child`'s outcome once it is among them.
fn reap_ready(child: Pid, reap: Reap) -> Result<Option<Outcome>, EnforceError> {
    let (target, sentinel) = match reap {
        Reap::Child => (Some(child), None),
        Reap::All { sentinel } => (None, sentinel),
    };
    loop {
        match waitpid(target, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return Ok(None),
            Ok(WaitStatus::Exited(pid, code)) if pid == child => {
                return Ok(Some(Outcome::Exited(code)));
            }
            Ok(WaitStatus::Signaled(pid, sig, _)) if pid == child => {
                return Ok(Some(Outcome::Signaled(sig as i32)));
            }
            Ok(status @ (WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, _, _)))
                if Some(pid) == sentinel =>
            {
                return Err(EnforceError::new(
                    Layer::Masks,
                    format!(
                        "the autorun guard's watcher (process {pid}) ended while the command \
                         ran ({status:?}): a guarded file a program outside replaces would \
                         no longer be guarded again, so the sandbox is stopped"
                    ),
                )
                .stopping());
            }
            // Another child (PID 1 reaping an orphan), or a state change we did not ask for.
            Ok(_) => continue,
            Err(Errno::EINTR) => continue,
            Err(e) => {
                return Err(EnforceError::os(
                    Layer::Process,
                    format!("waiting for process {child}"),
                    e,
                ));
            }
        }
    }
}

/// Waits for one signal of `set` (blocked), or for [`RECHECK`] to pass.
fn wait_signal(set: &SigSet) -> Option<Signal> {
    let timeout = libc::timespec {
        tv_sec: RECHECK.as_secs() as libc::time_t,
        tv_nsec: RECHECK.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `set` and `timeout` outlive the call; no siginfo is requested.
    let sig = unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &timeout) };
    if sig < 0 {
        None
    } else {
        Signal::try_from(sig).ok()
    }
}
