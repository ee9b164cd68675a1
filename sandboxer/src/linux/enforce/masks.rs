//! The masks shape's processes, below the caller's:
//!
//! ```text
//! caller (sandboxer)      plans meanwhile; hands PID 1 the plan; waits, forwards signals,
//! │                       reads reports
//! └─ monitor              own process group; new user, mount, PID, IPC namespaces; uid/gid map;
//!    │                    `/` private; then drops its capabilities, waits, forwards signals
//!    └─ init (PID 1)      fresh /proc, /dev/pts, /dev/shm, /dev/mqueue; kernel knobs
//!       │                 read-only (`kernel.rs`); waits for the plan; masks; sysctls
//!       │                 read-only; drops its capabilities; reaps every child, forwards
//!       │                 signals, reports how the command ended, exits with its status
//!       └─ command        setsid, cwd, capabilities, no_new_privs, Landlock, gate, exec
//! ```
//!
//! Everything above the plan's arrival is the same for every plan, so it starts before the
//! caller has one (see [`super::Started`]): the namespaces are made while the policy is read
//! and planned. The masks need the placeholders the caller makes once it has the plan, so they
//! wait for it.
//!
//! The monitor exists only for a multi-threaded caller (the dispatcher), which cannot make a
//! new user namespace itself, and must not clone past glibc's `fork` (another thread may hold
//! the allocator's lock); a PID namespace only applies to children, hence a process more. A
//! single-threaded caller (`sandboxer exec`) clones PID 1 straight into the new namespaces,
//! and PID 1 does the monitor's share first ([`first_pid1`]). Either leaves the terminal's
//! foreground process group, so a key the terminal turns into a signal reaches the command
//! once, through the caller, instead of several times. Neither the monitor nor init can be
//! reached from inside: the monitor is not in the sandbox's PID namespace, and init is
//! outside the command's Landlock domain (no ptrace, no signals from inside) and holds no
//! capability once the command starts.
//!
//! The command's process shares PID 1's memory until it executes (`spawn_for_exec`): a `fork`
//! of PID 1, itself a copy of the caller, cost page tables and copy-on-write faults for memory
//! thrown away at `exec` a moment later.

use std::convert::Infallible;

use nix::mount::{MsFlags, mount};
use nix::sys::prctl;
use nix::unistd::{Pid, setpgid};

use super::broker::{self, Link};
use super::channel::{Message, Reporter};
use super::error::{EnforceError, Layer, NOT_RUN, Outcome};
use super::handoff::Handoff;
use super::prepared::Prepared;
use super::spawn::{Parent, exit_with, spawn, spawn_for_exec};
use super::supervise::{Hop, Reap, supervise};
use super::{caps, confine, devices, guard_watch, keeper, kernel, mounts, network, userns};

/// The monitor's body: from a plain child of the caller to a running sandbox.
pub(super) fn monitor(
    p: &Prepared,
    plan: &Handoff,
    reporter: Reporter,
) -> Result<Infallible, EnforceError> {
    own_process_group()?;
    userns::enter(p.uid, p.gid)?;
    mounts::make_root_private()?;
    // PID 1's parent lives outside its PID namespace, so it cannot check its parent by pid.
    let init = spawn(reporter, Parent::OutsideNamespace, || {
        pid1(p, plan, reporter)
    })?;
    harden()?;
    let hop = Hop {
        caller: false,
        parent_of_command: false,
    };
    let outcome = supervise(init, Reap::Child, hop)?;
    exit_with(outcome)
}

/// PID 1's body when the caller made it directly in the new namespaces (a single-threaded
/// caller; see `spawn_in_namespaces`): the monitor's share first, then PID 1's.
pub(super) fn first_pid1(
    p: &Prepared,
    handoff: &Handoff,
    reporter: Reporter,
) -> Result<Infallible, EnforceError> {
    own_process_group()?;
    userns::map(p.uid, p.gid)?;
    mounts::make_root_private()?;
    pid1(p, handoff, reporter)
}

/// Leaves the caller's process group (and so the terminal's foreground group: see above).
fn own_process_group() -> Result<(), EnforceError> {
    setpgid(Pid::from_raw(0), Pid::from_raw(0))
        .map_err(|e| EnforceError::os(Layer::Process, "leaving the caller's process group", e))
}

fn pid1(p: &Prepared, handoff: &Handoff, reporter: Reporter) -> Result<Infallible, EnforceError> {
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
    devices::fresh()?;
    kernel::confine()?;
    // While PID 1 waits for the plan anyway.
    let watcher = guard_watch::fork(p, reporter, p.guard_events.as_ref())?;
    let Some(plan) = handoff.receive(p.spare_cpu())? else {
        // The caller gave up before it had a plan; it reports why, if anything.
        // SAFETY: see `spawn`.
        unsafe { libc::_exit(i32::from(NOT_RUN)) }
    };
    p.own_affinity();
    let registration = keeper::register(&plan)?;
    let kept = mounts::apply(&plan.mounts, &plan.staging)?;
    let watcher = watcher.keep(&plan)?;
    // Held open until PID 1 ends: tells the product this sandbox still runs (see keeper.rs).
    let _alive = registration
        .map(|r| keeper::start(r, kept, &plan))
        .transpose()?;
    if !plan.nested_user_namespaces {
        userns::forbid_nested()?;
    }
    let network = network::isolate(plan.network.as_ref())?;
    if let Some(env) = plan
        .network
        .as_ref()
        .and_then(|n| n.relay.as_ref())
        .map(|r| r.env())
    {
        for (k, v) in env {
            // SAFETY: PID 1 runs one thread until the command is started below (the broker starts
            // after it); the command inherits this environment.
            unsafe { std::env::set_var(k, v) };
        }
    }
    kernel::seal_sysctls()?;
    harden()?;
    let link = plan
        .socket_broker
        .as_ref()
        .map(|_| Link::new())
        .transpose()?;
    let command = spawn_for_exec(reporter, Parent::Pid(Pid::from_raw(1)), || {
        confine::exec(
            p,
            &plan,
            confine::Session::New,
            link.as_ref().map(Link::command_end),
        )
    })?;
    if let (Some(link), Some(b)) = (link, &plan.socket_broker) {
        // The broker lives as long as PID 1, which is as long as the sandbox.
        broker::spawn(link.into_broker_end(), b.allowed.clone().into(), None)?;
    }
    if let Some(network) = network {
        network.watch()?;
    }
    let hop = Hop {
        caller: false,
        parent_of_command: true,
    };
    let outcome: Outcome = supervise(command, Reap::All { sentinel: watcher }, hop)?;
    reporter.send(&Message::Finished(outcome));
    exit_with(outcome)
}

/// A sandbox process that only waits from now on gives up every capability it had in the
/// user namespace, and becomes non-dumpable so that its `/proc` entries are not the
/// command's to open.
fn harden() -> Result<(), EnforceError> {
    caps::drop_all()?;
    prctl::set_dumpable(false)
        .map_err(|e| EnforceError::os(Layer::Process, "prctl(PR_SET_DUMPABLE, 0)", e))
}
