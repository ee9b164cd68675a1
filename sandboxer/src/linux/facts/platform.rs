//! What the platform can enforce, as the planner sees it.

use serde::{Deserialize, Serialize};

use super::blocker::Blocker;

/// What the platform can enforce. Detected by [`crate::linux::facts::detect`] (Linux only), or
/// given explicitly by tests to simulate a kernel without Landlock or a machine without user
/// namespaces.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Facts {
    /// Landlock ABI version; 0 when Landlock is absent or disabled.
    pub landlock_abi: u32,
    /// Unprivileged (or, as root, plain) user namespaces can be created and mapped.
    pub user_namespaces: bool,
    /// Mount and PID namespaces can be created inside the user namespace, with a private
    /// mount tree, a tmpfs and a fresh `/proc`.
    pub mount_pid_namespaces: bool,
    /// The uid and gid the confined process keeps (mapped to themselves).
    pub uid: u32,
    pub gid: u32,
    /// What stops the namespaces, when they do not work and the cause is known: refusal
    /// messages name it and say how to lift it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces_blocked_by: Option<Blocker>,
}
