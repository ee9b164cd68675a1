//! The confiner: how a policy would be confined on this machine, or why it cannot be, and
//! (Linux) running one command confined in this very process. It is the one way a caller
//! outside this crate asks for confinement; the planner, the facts and the enforcer stay
//! behind it.
//!
//! On Linux the answer follows the fallback rule with this machine's facts. The namespace
//! probe forks twice and waits for the namespaces to be torn down (about 1 ms, mostly
//! waiting), so [`Confiner::for_host`] starts it in a thread while the caller resolves its
//! policy, and [`Confiner::check`] plans as if the namespaces work before it waits for the
//! probe (the probe's child makes only async-signal-safe calls, so forking from a second thread
//! is sound). When the probe then finds the facts planned with, that plan stands; otherwise
//! the policy is planned again with what the probe found. Either way the answer is the one the
//! probed facts give. On macOS the answer is whether Seatbelt can be trusted here.

use std::fmt;

use crate::Policy;
use crate::linux::plan::Shape;
#[cfg(target_os = "linux")]
use crate::linux::{
    enforce::{self, Command},
    exec::{self, Ended},
    facts::{self, Facts},
    planner,
};

/// How a policy would be confined here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Confinement {
    /// Linux: sandboxer's plan of this shape, on the kernel's Landlock ABI.
    Plan { shape: Shape, landlock_abi: u32 },
    /// macOS: `sandbox-exec` with the policy's Seatbelt profile.
    Seatbelt,
}

impl fmt::Display for Confinement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Confinement::Plan {
                shape,
                landlock_abi,
            } => write!(f, "sandboxer {shape} plan (Landlock ABI {landlock_abi})"),
            Confinement::Seatbelt => f.write_str("sandbox-exec with a Seatbelt profile"),
        }
    }
}

/// Why a policy cannot be confined here.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No shape of the fallback rule enforces the policy on this machine (Linux).
    #[error(transparent)]
    Plan(#[from] crate::linux::planner::Refusal),
    /// The namespace probe did not finish (its thread panicked).
    #[error("the namespace probe failed")]
    ProbeFailed,
    /// This machine cannot confine at all: why (macOS: why Seatbelt cannot be trusted here;
    /// another OS has no backend).
    #[error("{0}")]
    Unavailable(String),
}

/// Confines policies on this machine. Dropping it waits for a probe still running, so that
/// the probe's children are reaped whatever happens.
#[derive(Debug)]
pub struct Confiner {
    /// The namespace probe, running until [`Confiner::check`] waits for it.
    #[cfg(target_os = "linux")]
    probe: Option<std::thread::JoinHandle<Facts>>,
    /// What the probe found, once it has.
    #[cfg(target_os = "linux")]
    probed: Option<Facts>,
}

impl Confiner {
    /// The confiner of this machine; on Linux its namespace probe starts now, in a thread.
    pub fn for_host() -> Confiner {
        Confiner {
            #[cfg(target_os = "linux")]
            probe: Some(std::thread::spawn(facts::detect)),
            #[cfg(target_os = "linux")]
            probed: None,
        }
    }

    /// How `policy` (resolved for this machine) would be confined here, or why it cannot be.
    #[cfg(target_os = "linux")]
    pub fn check(&mut self, policy: &Policy) -> Result<Confinement, Refusal> {
        let unprobed = planner::choose(policy, &exec::unprobed_facts());
        let probed = self.probed()?;
        let plan = exec::replan(policy, policy.linux.enforce, probed).unwrap_or(unprobed)?;
        Ok(Confinement::Plan {
            shape: plan.shape,
            landlock_abi: probed.landlock_abi,
        })
    }

    /// How `policy` would be confined here, or why it cannot be.
    #[cfg(not(target_os = "linux"))]
    pub fn check(&mut self, policy: &Policy) -> Result<Confinement, Refusal> {
        if cfg!(target_os = "macos") {
            crate::macos::detect()
                .can_confine()
                .map_err(Refusal::Unavailable)?;
            let linked = policy.guarded_files_with_other_names();
            if !linked.is_empty() {
                let at: Vec<String> = linked.iter().map(|p| p.display().to_string()).collect();
                return Err(Refusal::Unavailable(format!(
                    "autorun-hard-links: these guarded files have other names (hard links), \
                     through which the sandbox could write them: {}. {}",
                    at.join(", "),
                    crate::policy::HARD_LINKS_FIX
                )));
            }
            Ok(Confinement::Seatbelt)
        } else {
            Err(Refusal::Unavailable(
                "this OS has no sandbox backend".into(),
            ))
        }
    }

    /// Confines `command` under `policy` (resolved for this machine) and runs it in this
    /// process: the fallback rule and the fail-closed exits of `sandboxer exec`. It starts from
    /// the probed facts when [`Confiner::check`] has them, else plans as if the namespaces work
    /// and probes only when they do not. The caller's other threads must keep
    /// [`Confiner::with_waited_signals_blocked`]'s signals blocked.
    #[cfg(target_os = "linux")]
    pub fn launch(&self, policy: &Policy, command: &Command) -> Ended {
        let facts = self.probed.clone().unwrap_or_else(exec::unprobed_facts);
        exec::launch(policy, &facts, policy.linux.enforce, command)
    }

    /// Runs `f` with the signals a launch run here waits for blocked on this thread, then
    /// unblocks them: threads `f` starts inherit them blocked, so that a Ctrl-C or the
    /// command's `SIGCHLD` reaches the thread that forwards and waits. Off Linux, just `f`.
    pub fn with_waited_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: sigset_t is plain data, filled by sigemptyset/sigaddset; pthread_sigmask
            // only changes this thread's mask, and the old mask is put back.
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                let mut old: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                for s in enforce::waited_signals() {
                    libc::sigaddset(&mut set, s);
                }
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
                let out = f();
                libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
                out
            }
        }
        #[cfg(not(target_os = "linux"))]
        f()
    }

    /// The running kernel's Landlock ABI version; 0 when Landlock is absent or disabled, and
    /// off Linux.
    pub fn kernel_landlock_abi() -> u32 {
        #[cfg(target_os = "linux")]
        return enforce::kernel_landlock_abi();
        #[cfg(not(target_os = "linux"))]
        0
    }

    /// What the namespace probe found, waiting for it the first time.
    #[cfg(target_os = "linux")]
    fn probed(&mut self) -> Result<&Facts, Refusal> {
        if let Some(probe) = self.probe.take() {
            self.probed = Some(probe.join().map_err(|_| Refusal::ProbeFailed)?);
        }
        self.probed.as_ref().ok_or(Refusal::ProbeFailed)
    }
}

#[cfg(target_os = "linux")]
impl Drop for Confiner {
    fn drop(&mut self) {
        if let Some(probe) = self.probe.take() {
            let _ = probe.join();
        }
    }
}
