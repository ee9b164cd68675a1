//! The fallback rule: which shape runs here, or a [`Refusal`] naming what is missing.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::error::PlanError;
use super::fs::{FsView, HostFs};
use super::prepare::plan_with;
use crate::linux::facts::Facts;
use crate::linux::plan::{Gap, Plan, Shape};
use crate::policy::{Enforce, Policy};
use crate::target::Target;

/// The lowest Landlock ABI the masks shape accepts: ABI 6 brings the scopes that close
/// abstract Unix sockets (X11's `@/tmp/.X11-unix`, abstract D-Bus addresses), which no mount
/// can reach. Below it, the computed `abstract-unix-sockets` gap breaks every policy.
pub const MIN_ABI_MASKS: u32 = 6;

/// Why no Linux sandbox is good enough here. The caller (the dispatcher) turns it into a
/// bridge-only launch; `id` is stable, the message is for people.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    pub id: RefusalId,
    pub message: String,
    /// Each shape tried, and why it was not enough.
    pub attempts: Vec<Attempt>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RefusalId {
    /// The policy is not resolved for Linux.
    NotLinux,
    /// The kernel has no Landlock (or it is disabled at boot).
    NoLandlock,
    /// Masks were needed (or asked for) and user namespaces do not work.
    NoUserNamespaces,
    /// Landlock is older than the masks shape needs, and Landlock alone is not enough.
    LandlockTooOld,
    /// Every shape tried leaves a gap that breaks the policy.
    GapsBreakPolicy,
    /// A plan could not be made (a symlink where a rule path should be, an unreadable path).
    PlanFailed,
}

impl RefusalId {
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalId::NotLinux => "not-linux",
            RefusalId::NoLandlock => "no-landlock",
            RefusalId::NoUserNamespaces => "no-user-namespaces",
            RefusalId::LandlockTooOld => "landlock-too-old",
            RefusalId::GapsBreakPolicy => "gaps-break-policy",
            RefusalId::PlanFailed => "plan-failed",
        }
    }
}

impl fmt::Display for RefusalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One shape tried by [`choose`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    pub shape: Shape,
    /// Why the shape could not even be planned (a missing layer), if so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// The gaps that break the policy, when it was planned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub breaking: Vec<Gap>,
}

/// The fallback rule, with `policy.linux.enforce`: see [`choose_with`].
pub fn choose(policy: &Policy, facts: &Facts) -> Result<Plan, Refusal> {
    choose_with(policy, facts, &HostFs, policy.linux.enforce)
}

/// The fallback rule. `auto`: the masks shape when the namespaces work and its gaps do not
/// break the policy; else landlock-only when its gaps do not; else a [`Refusal`] naming what
/// is missing, why it matters and how to fix it. `masks` / `landlock-only` try only that
/// shape.
pub fn choose_with(
    policy: &Policy,
    facts: &Facts,
    fs: &dyn FsView,
    enforce: Enforce,
) -> Result<Plan, Refusal> {
    if policy.target != Target::Linux {
        return Err(Refusal {
            id: RefusalId::NotLinux,
            message: format!(
                "the policy is resolved for {}; resolve it for linux to confine on Linux",
                policy.target
            ),
            attempts: Vec::new(),
        });
    }
    let shapes: &[Shape] = match enforce {
        Enforce::Auto => &[Shape::Masks, Shape::LandlockOnly],
        Enforce::Masks => &[Shape::Masks],
        Enforce::LandlockOnly => &[Shape::LandlockOnly],
    };
    let mut attempts = Vec::new();
    let mut failure: Option<String> = None;
    for &shape in shapes {
        match plan_with(policy, facts, shape, fs) {
            Ok(plan) => {
                let breaking: Vec<Gap> = plan.breaking_gaps().cloned().collect();
                if breaking.is_empty() {
                    return Ok(plan);
                }
                attempts.push(Attempt {
                    shape,
                    unavailable: None,
                    breaking,
                });
            }
            Err(PlanError::NamespacesUnavailable(why)) => attempts.push(Attempt {
                shape,
                unavailable: Some(why),
                breaking: Vec::new(),
            }),
            Err(e) => {
                failure.get_or_insert(e.to_string());
                attempts.push(Attempt {
                    shape,
                    unavailable: Some(e.to_string()),
                    breaking: Vec::new(),
                });
            }
        }
    }
    Err(refusal(facts, enforce, attempts, failure))
}

fn refusal(
    facts: &Facts,
    enforce: Enforce,
    attempts: Vec<Attempt>,
    failure: Option<String>,
) -> Refusal {
    let ns_missing = attempts
        .iter()
        .any(|a| a.shape == Shape::Masks && a.unavailable.is_some());
    let id = if failure.is_some() {
        RefusalId::PlanFailed
    } else if facts.landlock_abi == 0 {
        RefusalId::NoLandlock
    } else if ns_missing {
        RefusalId::NoUserNamespaces
    } else if facts.landlock_abi < MIN_ABI_MASKS {
        RefusalId::LandlockTooOld
    } else {
        RefusalId::GapsBreakPolicy
    };
    let mut msg = String::from(
        "no Linux sandbox can enforce this policy on this machine, so the command must not run \
         with its own tools (bridge-only).",
    );
    if facts.landlock_abi == 0 {
        msg.push_str(
            " Landlock is missing: the kernel is older than 5.13, built without it, or boots \
             without `landlock` in its `lsm=` list. It confines the filesystem without masks \
             and, from ABI 6 (Linux 6.12), closes abstract Unix sockets (X11) and signals to \
             outside processes. Fix: boot a kernel with Landlock enabled.",
        );
    } else if facts.landlock_abi < MIN_ABI_MASKS {
        msg.push_str(&format!(
            " Landlock ABI {} is older than {MIN_ABI_MASKS} (Linux 6.12): without its scopes, \
             abstract Unix sockets (X11's @/tmp/.X11-unix) and signals to outside processes \
             stay open. Fix: a kernel of 6.12 or later.",
            facts.landlock_abi
        ));
    }
    if enforce != Enforce::Auto {
        msg.push_str(&format!(
            " The policy (or the command line) asks for `{}` only.",
            match enforce {
                Enforce::Masks => "masks",
                Enforce::LandlockOnly => "landlock-only",
                Enforce::Auto => "auto",
            }
        ));
    }
    for a in &attempts {
        if let Some(why) = &a.unavailable {
            msg.push_str(&format!(" {}: unavailable: {why}.", a.shape));
        }
        for g in &a.breaking {
            msg.push_str(&format!(" {}: gap {}: {}", a.shape, g.id, g.detail));
            if !g.paths.is_empty() {
                let at: Vec<String> = g.paths.iter().map(|p| p.display().to_string()).collect();
                msg.push_str(&format!(" (at {})", at.join(", ")));
            }
            if !g.detail.ends_with('.') {
                msg.push('.');
            }
        }
    }
    Refusal {
        id,
        message: msg,
        attempts,
    }
}
