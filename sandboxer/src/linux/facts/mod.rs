//! Platform facts for the Linux planner: which Landlock ABI the kernel has, and whether user,
//! mount and PID namespaces really work for this user.
//!
//! The types are pure and compile everywhere. Detection ([`detect`], [`probe`]) is Linux only:
//! it asks the kernel for the Landlock ABI (`landlock_create_ruleset` with
//! `LANDLOCK_CREATE_RULESET_VERSION`) and probes namespaces for real in a forked child — the
//! only trustworthy answer, since AppArmor, Debian's sysctl, `user.max_user_namespaces` and
//! container seccomp profiles each stop them at a different step.

mod assumed;
mod blocker;
mod evidence;
#[cfg(target_os = "linux")]
mod host;
mod platform;

pub use assumed::{AssumedFacts, FactsError};
pub use blocker::{Blocker, errno_text};
pub use evidence::{
    LandlockProbe, NamespaceProbe, Probe, SETTINGS, Setting, blocker_for, describe_setting,
};
#[cfg(target_os = "linux")]
pub use host::{detect, probe};
pub use platform::Facts;
