//! Making the plan of one shape: now ([`plan`]), or in two steps, its gaps later
//! ([`prepare_with`]).

use super::builder::Planner;
use super::error::PlanError;
use super::fs::{FsView, HostFs};
use super::gaps::Unchecked;
use crate::linux::facts::Facts;
use crate::linux::plan::{Plan, Shape};
use crate::policy::Policy;
use crate::target::Target;

/// The plan of `shape` for `policy` on a machine with `facts`, reading this machine's
/// filesystem.
pub fn plan(policy: &Policy, facts: &Facts, shape: Shape) -> Result<Plan, PlanError> {
    plan_with(policy, facts, shape, &HostFs)
}

/// [`plan`] against any filesystem view.
pub fn plan_with(
    policy: &Policy,
    facts: &Facts,
    shape: Shape,
    fs: &dyn FsView,
) -> Result<Plan, PlanError> {
    prepare_with(policy, facts, shape, fs)?.check()
}

/// [`plan_with`] in two steps: the plan (mounts and Landlock rules) now, its gaps later
/// ([`Unchecked::gaps`]), so that the caller can start applying it meanwhile. The plan may
/// only be run once its gaps are known and none breaks the policy
/// ([`crate::linux::enforce::run_checking`] makes sure of it).
pub fn prepare_with<'a>(
    policy: &'a Policy,
    facts: &'a Facts,
    shape: Shape,
    fs: &'a dyn FsView,
) -> Result<Unchecked<'a>, PlanError> {
    if policy.target != Target::Linux {
        return Err(PlanError::NotLinux(policy.target));
    }
    if shape == Shape::Masks && !(facts.user_namespaces && facts.mount_pid_namespaces) {
        return Err(PlanError::NamespacesUnavailable(namespaces_missing(facts)));
    }
    Planner::new(policy, facts, shape, fs).build()
}

pub(super) fn namespaces_missing(facts: &Facts) -> String {
    match &facts.namespaces_blocked_by {
        Some(b) => format!("{}. Fix: {}", b.cause(), b.fix()),
        None if !facts.user_namespaces => "user namespaces cannot be created here".into(),
        None => "mount or PID namespaces cannot be created here".into(),
    }
}
