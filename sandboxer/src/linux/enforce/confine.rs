//! The command's own process: the last steps, in order, then `exec`.
//!
//! `setsid` (a new session has no controlling terminal, so `TIOCSTI` cannot push keystrokes
//! into the caller's), for a root caller in the landlock-only shape a mount and IPC namespace
//! of its own with the kernel's knobs read-only, a new session keyring (`kernel.rs`), the
//! working directory entered by path (so it is resolved through the
//! masks: a working directory inside a protected root is not reachable), every capability
//! dropped, `no_new_privs`, Landlock (a Landlock domain may not mount, so nothing after it
//! could set up anything), the seccomp filter that hands every `connect` to the socket broker
//! (its listener sent to the broker), descriptors above stderr marked close-on-exec, the gate passed
//! (when the plan's gaps are checked during setup: see [`super::run_checking`]), the caller's
//! signal mask and `SIGCHLD` disposition restored, `execvp`.

use std::convert::Infallible;
use std::os::fd::BorrowedFd;

use nix::errno::Errno;
use nix::sys::prctl;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
use nix::unistd::{chdir, execvp, getpid, getsid, setsid};

use super::error::{EnforceError, Layer};
use super::prepared::Prepared;
use super::{broker, caps, kernel, landlock, seccomp, sys};
use crate::linux::plan::{Plan, Shape};

/// How the command's process leaves the caller's terminal.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Session {
    /// A new session (`setsid`): a forked child, never a process-group leader.
    New,
    /// The caller's own process, which becomes the command ([`super::exec_in_place`]): a new
    /// session when it can have one; a process-group leader (a shell's job) cannot, and
    /// instead gives up its controlling terminal (`TIOCNOTTY`), staying in the terminal's
    /// foreground group. Either way no controlling terminal is left, so `TIOCSTI` is refused.
    /// A session leader could do neither without hanging up its whole session: refused
    /// here (the caller then forks).
    Detach,
}

pub(super) fn exec(
    p: &Prepared,
    plan: &Plan,
    session: Session,
    broker_link: Option<BorrowedFd<'_>>,
) -> Result<Infallible, EnforceError> {
    if plan.socket_broker.is_some() != broker_link.is_some() {
        return Err(EnforceError::new(
            Layer::SocketBroker,
            "the plan's socket broker and the process structure disagree",
        ));
    }
    leave_terminal(session)?;
    if plan.shape == Shape::LandlockOnly && p.uid == 0 {
        kernel::private_for_root()?;
    }
    kernel::fresh_session_keyring()?;
    chdir(p.cwd.as_c_str()).map_err(|e| {
        EnforceError::os(
            Layer::WorkingDirectory,
            format_args!("entering {:?} inside the sandbox", p.cwd),
            e,
        )
    })?;
    caps::drop_all()?;
    prctl::set_no_new_privs()
        .map_err(|e| EnforceError::os(Layer::NoNewPrivs, "prctl(PR_SET_NO_NEW_PRIVS)", e))?;
    if !prctl::get_no_new_privs().unwrap_or(false) {
        return Err(EnforceError::new(
            Layer::NoNewPrivs,
            "no_new_privs reads back as unset",
        ));
    }
    if landlock::wanted(&plan.landlock) {
        landlock::restrict(&plan.landlock, plan.mounts_blocked())?;
    }
    if let Some(link) = broker_link {
        broker::send_listener(link, seccomp::install()?)?;
    }
    sys::cloexec_from_3().map_err(|e| {
        EnforceError::os(
            Layer::Process,
            "marking inherited descriptors close-on-exec (close_range)",
            e,
        )
    })?;
    p.pass_gate()?;
    p.own_affinity();
    p.restore_caller_signals()?;
    default_sigpipe()?;
    let Err(errno) = execvp(&p.program, &p.argv);
    Err(EnforceError::os(
        Layer::Exec,
        format_args!("{:?}", p.program),
        errno,
    ))
}

/// The Rust runtime ignores SIGPIPE in its processes, and an ignored signal stays ignored
/// across `exec`: without this, `yes | head -1` inside the sandbox would see `yes` fail with
/// EPIPE instead of ending quietly, unlike outside. `std::process::Command` resets it for its
/// children the same way.
fn default_sigpipe() -> Result<(), EnforceError> {
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    // SAFETY: installs the default action, no handler code.
    unsafe { sigaction(Signal::SIGPIPE, &default) }
        .map(drop)
        .map_err(|e| EnforceError::os(Layer::Process, "restoring SIGPIPE's default action", e))
}

fn leave_terminal(session: Session) -> Result<(), EnforceError> {
    match (setsid(), session) {
        (Ok(_), _) => Ok(()),
        (Err(Errno::EPERM), Session::Detach) if !session_leader() => drop_tty(),
        (Err(e), _) => Err(EnforceError::os(Layer::Session, "setsid", e)),
    }
}

/// Whether this process leads its session (and so cannot leave its terminal alone).
pub(super) fn session_leader() -> bool {
    getsid(None) == Ok(getpid())
}

/// Gives up the controlling terminal, if any, without leaving the process group.
fn drop_tty() -> Result<(), EnforceError> {
    // SAFETY: a plain open of the controlling terminal's alias; `O_NOCTTY` so that nothing is
    // acquired, close-on-exec so that nothing leaks.
    let fd = unsafe {
        libc::open(
            c"/dev/tty".as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return match Errno::last() {
            // No controlling terminal: nothing to give up.
            Errno::ENXIO => Ok(()),
            e => Err(EnforceError::os(Layer::Session, "opening /dev/tty", e)),
        };
    }
    // SAFETY: TIOCNOTTY takes no argument; `fd` is ours and closed right after.
    let done = unsafe { libc::ioctl(fd, libc::TIOCNOTTY) };
    let errno = Errno::last();
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(fd) };
    if done != 0 {
        return Err(EnforceError::os(
            Layer::Session,
            "giving up the controlling terminal (TIOCNOTTY)",
            errno,
        ));
    }
    Ok(())
}
