//! The masks shape's processes, below the caller's:
//!
//! ```text
//! caller (sandboxer)      waits, forwards signals, reads reports
//! └─ monitor              own process group; new user + mount + PID namespaces; uid/gid map;
//!    │                    masks; then drops its capabilities, waits, forwards signals
//!    └─ init (PID 1)      fresh /proc and /dev/pts; drops its capabilities; reaps every child, forwards
//!       │                 signals, reports how the command ended, exits with its status
//!       └─ command        setsid, cwd, capabilities, no_new_privs, Landlock, exec
//! ```
//!
//! The monitor exists because the caller must stay in its own namespaces (it may be a
//! multi-threaded program, which cannot `unshare` a user namespace) and a PID namespace only
//! applies to children. It leaves the terminal's foreground process group, so a key the
//! terminal turns into a signal reaches the command once, through the caller, instead of
//! three times. Neither the monitor nor init can be reached from inside: the monitor is not in
//! the sandbox's PID namespace, and init is outside the command's Landlock domain (no ptrace,
//! no signals from inside) and holds no capability once the command starts.

use std::convert::Infallible;

use nix::mount::{MsFlags, mount};
use nix::sys::prctl;
use nix::unistd::{Pid, setpgid};

use super::channel::{Message, Reporter};
use super::error::{EnforceError, Layer, Outcome};
use super::supervise::{Hop, Reap, supervise};
use super::{Parent, Prepared, caps, confine, exit_with, mounts, spawn, userns};

/// The monitor's body: from a plain child of the caller to a running sandbox.
pub(super) fn monitor(p: &Prepared, reporter: Reporter) -> Result<Infallible, EnforceError> {
    setpgid(Pid::from_raw(0), Pid::from_raw(0))
        .map_err(|e| EnforceError::os(Layer::Process, "leaving the caller's process group", e))?;
    userns::enter(p.plan.uid, p.plan.gid)?;
    mounts::apply(&p.plan.mounts)?;
    // PID 1's parent lives outside its PID namespace, so it cannot check its parent by pid.
    let init = spawn(reporter, Parent::OutsideNamespace, || pid1(p, reporter))?;
    harden()?;
    let hop = Hop {
        caller: false,
        parent_of_command: false,
    };
    let outcome = supervise(init, Reap::Child, hop)?;
    exit_with(outcome)
}

fn pid1(p: &Prepared, reporter: Reporter) -> Result<Infallible, EnforceError> {
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| {
        EnforceError::os(
            Layer::Proc,
            "mounting a fresh /proc for the PID namespace (the kernel refuses it when the \
             current /proc is partly hidden, as in some containers)",
            e,
        )
    })?;
    fresh_terminals()?;
    harden()?;
    let command = spawn(reporter, Parent::Pid(Pid::from_raw(1)), || confine::exec(p))?;
    let hop = Hop {
        caller: false,
        parent_of_command: true,
    };
    let outcome: Outcome = supervise(command, Reap::All, hop)?;
    reporter.send(&Message::Finished(outcome));
    exit_with(outcome)
}

/// The sandbox's own instance of `/dev/pts`, over the host's. The host's holds every terminal
/// the person has open (same owner, so openable): from there a process could read what is
/// typed into another terminal, or write text and escape sequences to it. The caller's own
/// terminal keeps working through the descriptors the command inherits; only its name under
/// `/dev/pts` is gone. Ptys made inside (`/dev/ptmx` opens the instance mounted at its
/// sibling `pts`, Linux >= 4.7) work as before. A system without `/dev/pts` has nothing to
/// hide.
fn fresh_terminals() -> Result<(), EnforceError> {
    if !std::path::Path::new("/dev/pts").is_dir() {
        return Ok(());
    }
    mount(
        Some("devpts"),
        "/dev/pts",
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    )
    .map_err(|e| {
        EnforceError::os(
            Layer::Terminals,
            "mounting a fresh devpts instance over /dev/pts (the person's other terminals \
             would stay reachable)",
            e,
        )
    })
}

/// A sandbox process that only waits from now on gives up every capability it had in the
/// user namespace, and becomes non-dumpable so that its `/proc` entries are not the
/// command's to open.
fn harden() -> Result<(), EnforceError> {
    caps::drop_all()?;
    prctl::set_dumpable(false)
        .map_err(|e| EnforceError::os(Layer::Process, "prctl(PR_SET_DUMPABLE, 0)", e))
}
