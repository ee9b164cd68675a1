//! Waiting for a child while passing signals on to it: the caller's process, the namespace
//! monitor and PID 1 all do this, one hop each.
//!
//! The forwarded signals and `SIGCHLD` are blocked *before* the first `fork` (the mask is
//! inherited), so none is lost between `fork` and the wait loop: they stay pending and
//! `sigtimedwait` picks them up. The command's own process restores the caller's mask just
//! before `exec`, so it sees signals exactly as it would unconfined.

use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{SigSet, SigmaskHow, Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use super::error::{EnforceError, Layer, Outcome};

/// Signals a terminal, a service manager or a person sends to "the program": each is passed on
/// to the command.
pub(super) const FORWARDED: [Signal; 7] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
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
    /// Every child that exits (PID 1: orphans are re-parented to us).
    All,
}

/// Waits until `child` exits or is killed, forwarding [`FORWARDED`] signals to it. Returns its
/// outcome.
pub(super) fn supervise(child: Pid, reap: Reap) -> Result<Outcome, EnforceError> {
    let set = wait_set();
    loop {
        if let Some(outcome) = reap_ready(child, reap)? {
            return Ok(outcome);
        }
        match wait_signal(&set) {
            Some(Signal::SIGCHLD) | None => {}
            // The child may have just exited (ESRCH); its status is collected above.
            Some(sig) => {
                let _ = kill(child, sig);
            }
        }
    }
}

/// Collects every exited child that is ready; returns `child`'s outcome once it is among them.
fn reap_ready(child: Pid, reap: Reap) -> Result<Option<Outcome>, EnforceError> {
    let target = match reap {
        Reap::Child => Some(child),
        Reap::All => None,
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
