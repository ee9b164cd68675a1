//! Starting the sandbox's processes: each dies with its parent, and reports the error that
//! stopped it to the caller before it exits with 125.

use std::convert::Infallible;
use std::panic::{AssertUnwindSafe, catch_unwind};

use nix::errno::Errno;
use nix::sys::prctl;
use nix::sys::signal::Signal;
use nix::unistd::{ForkResult, Pid, fork, getppid};

use super::channel::{Message, Reporter};
use super::error::{EnforceError, Layer, Outcome};
use super::userns;

/// Who a new sandbox process expects as its parent, to notice the parent dying before
/// `PR_SET_PDEATHSIG` was set.
#[derive(Clone, Copy)]
pub(super) enum Parent {
    Pid(Pid),
    /// The parent is outside the child's PID namespace (`getppid` reads 0).
    OutsideNamespace,
}

/// Forks; the child runs `body`, which either never returns (it executes or exits) or returns
/// the error that stopped it, sent to the caller before the child exits with 125.
pub(super) fn spawn(
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
/// the caller and the command than `fork` and `unshare` (see `masks.rs`).
///
/// Only for a single-threaded caller. The raw system call skips what glibc's `fork` does
/// around it, which matters only for locks held by other threads (the allocator's, stdio's):
/// with no other thread, none is held, and the child is a plain copy of the caller.
pub(super) fn spawn_in_namespaces(
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
pub(super) fn spawn_for_exec<F: FnOnce() -> Result<Infallible, EnforceError>>(
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
pub(super) fn single_threaded() -> bool {
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
pub(super) fn exit_with(outcome: Outcome) -> ! {
    // SAFETY: see `spawn`.
    unsafe { libc::_exit(outcome.exit_code() as i32) }
}
