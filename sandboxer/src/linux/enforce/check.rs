//! Checks of a plan before anything starts: consistent, within the policy, for this user.
//! The planner makes plans this way; the enforcer does not rely on it.

use std::path::Path;

use nix::unistd::{getegid, geteuid};

use super::error::{EnforceError, Layer};
use super::landlock;
use crate::linux::plan::{Gap, MountStep, Plan, Shape};
use crate::paths::normalize;
use crate::policy::Access;

/// The planner's self-check, run by [`super::run_checking`] while the sandbox is being set up: the
/// plan's gaps, or why they could not be computed.
pub type Check<'c> = &'c mut dyn FnMut() -> Result<Vec<Gap>, EnforceError>;

/// Everything about `plan` that can be checked before it is applied: see [`plan`]. The gaps
/// only when they are not computed during setup.
pub(super) fn validate(plan: &Plan, checked_later: bool) -> Result<(), EnforceError> {
    if checked_later {
        plan_but_gaps(plan)?;
    } else {
        self::plan(plan)?;
    }
    landlock::check_kernel(&plan.landlock)
}

pub(super) fn plan(plan: &Plan) -> Result<(), EnforceError> {
    no_breaking_gaps(&plan.gaps)?;
    plan_but_gaps(plan)
}

/// Every check but the gaps, for a plan whose gaps are computed while it is being applied
/// (they are checked by [`no_breaking_gaps`] before the command is executed).
pub(super) fn plan_but_gaps(plan: &Plan) -> Result<(), EnforceError> {
    known_shape(plan)?;
    same_user(plan)?;
    normal_paths(plan)?;
    bind_backs_covered(plan)?;
    network_isolable(plan)?;
    rules_handled(plan)
}

/// A network of its own is a network namespace, which only the masks shape makes; and the
/// relay's proxy is a path like every other in a plan.
fn network_isolable(plan: &Plan) -> Result<(), EnforceError> {
    let Some(net) = &plan.network else {
        return Ok(());
    };
    if !plan.namespaces {
        return bad(format!(
            "network mode {:?} needs a network namespace, which only the masks shape has",
            net.mode
        ));
    }
    match &net.relay {
        Some(r) if !crate::paths::is_clean(&r.proxy) => bad(format!(
            "the relay's proxy {:?} is not an absolute, normal path",
            r.proxy
        )),
        Some(r) if r.port == 0 || r.loopback.contains(&r.port) => bad(format!(
            "the relay's port {} is 0 or also a loopback port",
            r.port
        )),
        _ => Ok(()),
    }
}

fn bad(message: String) -> Result<(), EnforceError> {
    Err(EnforceError::new(Layer::Plan, message))
}

pub(super) fn no_breaking_gaps(gaps: &[Gap]) -> Result<(), EnforceError> {
    let breaking: Vec<&str> = gaps
        .iter()
        .filter(|g| g.breaks_policy)
        .map(|g| g.id.as_str())
        .collect();
    if breaking.is_empty() {
        return Ok(());
    }
    bad(format!(
        "the plan has gaps that break the policy ({}); it is not run",
        breaking.join(", ")
    ))
}

fn known_shape(plan: &Plan) -> Result<(), EnforceError> {
    let ok = match plan.shape {
        Shape::Masks => plan.namespaces,
        Shape::LandlockOnly => {
            !plan.namespaces && plan.mounts.is_empty() && landlock::wanted(&plan.landlock)
        }
    };
    if ok {
        return Ok(());
    }
    bad(format!(
        "shape {} with namespaces={}, {} mount steps and Landlock ABI {} is not a plan shape \
         (Landlock-only needs Landlock and no mounts; masks need the namespaces)",
        plan.shape,
        plan.namespaces,
        plan.mounts.len(),
        plan.landlock.abi
    ))
}

/// The uid and gid are mapped to themselves in the user namespace: a plan made for someone
/// else would map another identity (root could) or fail halfway.
fn same_user(plan: &Plan) -> Result<(), EnforceError> {
    let (uid, gid) = (geteuid().as_raw(), getegid().as_raw());
    if (plan.uid, plan.gid) == (uid, gid) {
        return Ok(());
    }
    bad(format!(
        "the plan maps uid {} gid {}, but this process runs as uid {uid} gid {gid}",
        plan.uid, plan.gid
    ))
}

fn normal_paths(plan: &Plan) -> Result<(), EnforceError> {
    let paths = plan
        .mounts
        .iter()
        .map(MountStep::path)
        .chain(plan.landlock.rules.iter().map(|r| r.path.as_path()));
    for path in paths {
        if normalize(path).as_deref() != Some(path) {
            return bad(format!("{path:?} is not an absolute, normal path"));
        }
    }
    Ok(())
}

/// A grant is bound back either into a root covered before it (its mount point is made on
/// the cover), or onto itself where no cover lies above it (a read-only grant in the open
/// tree, or a read-write grant inside such): then it must be bound over an earlier bind of
/// the other access, or be read-only, since a read-write bind onto the real tree would change
/// nothing. `mounts::attach` makes mount points only on covers, never on a real file system.
fn bind_backs_covered(plan: &Plan) -> Result<(), EnforceError> {
    for (i, step) in plan.mounts.iter().enumerate() {
        let MountStep::BindBack { path, access, .. } = step else {
            continue;
        };
        let inside = |c: &Path| path.starts_with(c) && path != c;
        let earlier = &plan.mounts[..i];
        let covered = earlier
            .iter()
            .any(|e| matches!(e, MountStep::Cover { path: c, .. } if inside(c)));
        let over_other_access = earlier.iter().any(|e| {
            matches!(e, MountStep::BindBack { path: b, access: a, .. } if inside(b) && a != access)
        });
        if !covered && *access == Access::Rw && !over_other_access {
            return bad(format!(
                "bind-back rw {} comes under no earlier cover nor read-only bind; it would \
                 change nothing",
                path.display()
            ));
        }
    }
    Ok(())
}

fn rules_handled(plan: &Plan) -> Result<(), EnforceError> {
    let handled = &plan.landlock.handled;
    for rule in &plan.landlock.rules {
        if rule.rights.is_empty() || rule.rights.iter().any(|r| !handled.contains(r)) {
            return bad(format!(
                "Landlock rule for {} ({}) allows no right or a right the ruleset does not \
                 handle",
                rule.path.display(),
                rule.why
            ));
        }
    }
    Ok(())
}
