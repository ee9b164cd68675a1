//! The plan's Landlock ruleset, applied to the calling thread just before `exec`.
//!
//! Everything the plan lists is a hard requirement (`CompatLevel::HardRequirement`): a right,
//! scope or ABI the running kernel lacks is an error, never silently dropped. The kernel's ABI
//! is also checked up front against the one the plan was made for, so a plan built from
//! wrong or overridden facts is refused before anything is started.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;

use landlock::{
    AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope,
};
use nix::errno::Errno;
use nix::sys::stat::fstat;

use super::error::{EnforceError, Layer};
use super::sys;
use crate::linux::fs_right::FsRight;
#[cfg(doc)]
use crate::linux::plan::Plan;
use crate::linux::plan::{KernelRule, LandlockPlan};

/// The first ABI with scopes (abstract Unix sockets, signals).
const SCOPES_ABI: u32 = 6;

/// Whether the plan has a Landlock layer at all. A plan for ABI 0 has none (the masks
/// shape alone); anything else must handle at least one right.
pub(super) fn wanted(plan: &LandlockPlan) -> bool {
    plan.abi > 0
}

/// Refuses a plan this kernel cannot enforce in full. Runs in the caller's process.
pub(super) fn check_kernel(plan: &LandlockPlan) -> Result<(), EnforceError> {
    if !wanted(plan) {
        if !plan.handled.is_empty()
            || !plan.rules.is_empty()
            || plan.scope_abstract_unix
            || plan.scope_signal
        {
            return Err(EnforceError::new(
                Layer::Plan,
                "the plan says ABI 0 (no Landlock) but lists Landlock rights, rules or scopes",
            ));
        }
        return Ok(());
    }
    if plan.handled.is_empty() {
        return Err(EnforceError::new(
            Layer::Plan,
            format!(
                "the plan says Landlock ABI {} but handles no right",
                plan.abi
            ),
        ));
    }
    let kernel = sys::landlock_abi().map_err(|e| {
        let why = match e {
            Errno::ENOSYS => "not built into this kernel",
            Errno::EOPNOTSUPP => "built in but not enabled at boot (lsm=)",
            _ => "unavailable",
        };
        EnforceError::os(
            Layer::Landlock,
            format_args!("the plan needs ABI {}, but Landlock is {why}", plan.abi),
            e,
        )
    })?;
    if kernel < plan.abi {
        return Err(EnforceError::new(
            Layer::Landlock,
            format!(
                "the plan needs ABI {}, but this kernel provides ABI {kernel}",
                plan.abi
            ),
        ));
    }
    let needed = plan
        .handled
        .iter()
        .map(|r| r.since_abi())
        .chain((plan.scope_abstract_unix || plan.scope_signal).then_some(SCOPES_ABI))
        .max()
        .unwrap_or(1);
    if needed > plan.abi {
        return Err(EnforceError::new(
            Layer::Landlock,
            format!(
                "the plan says ABI {} but asks for a feature of ABI {needed}",
                plan.abi
            ),
        ));
    }
    Ok(())
}

/// Builds the plan's ruleset (as given to the kernel: [`LandlockPlan::kernel_ruleset`], with
/// [`Plan::mounts_blocked`]) and restricts the calling thread (and its future children).
/// `no_new_privs` must already be set. A ruleset that would handle nothing and scope nothing
/// (everything allowed, no scopes below ABI 6) is not made: there is nothing for it to do.
pub(super) fn restrict(plan: &LandlockPlan, mounts_blocked: bool) -> Result<(), EnforceError> {
    let err = |what: String| EnforceError::new(Layer::Landlock, what);
    let kernel = plan.kernel_ruleset(mounts_blocked);
    if kernel.handled.is_empty() && !plan.scope_abstract_unix && !plan.scope_signal {
        return Ok(());
    }
    let handled = access(&kernel.handled);
    let mut ruleset = Ruleset::default().set_compatibility(CompatLevel::HardRequirement);
    if !handled.is_empty() {
        ruleset = ruleset
            .handle_access(handled)
            .map_err(|e| err(format!("handling {handled:?}: {e}")))?;
    }
    let mut scopes = BitFlags::<Scope>::empty();
    if plan.scope_abstract_unix {
        scopes |= Scope::AbstractUnixSocket;
    }
    if plan.scope_signal {
        scopes |= Scope::Signal;
    }
    if !scopes.is_empty() {
        ruleset = ruleset
            .scope(scopes)
            .map_err(|e| err(format!("scoping {scopes:?}: {e}")))?;
    }
    let mut created = ruleset
        .create()
        .map_err(|e| err(format!("creating the ruleset: {e}")))?
        // Set explicitly (and checked) by the caller's own step, just before this one.
        .no_new_privs(false);
    for KernelRule { rule, rights } in &kernel.rules {
        let rule_err = |what: &str, e: Errno| {
            EnforceError::os(
                Layer::Landlock,
                format_args!("rule for {} ({}): {what}", rule.path.display(), rule.why),
                e,
            )
        };
        // Opened without following symlinks: a rule on a symlink would grant its target's
        // subtree (which may be a protected root), never the link itself.
        let path = CString::new(rule.path.as_os_str().as_bytes())
            .map_err(|_| rule_err("the path contains NUL", Errno::EINVAL))?;
        let fd = sys::open_path(&path).map_err(|e| match e {
            Errno::ELOOP => rule_err("a symlink is on the way (plan paths are canonical)", e),
            _ => rule_err("opening it", e),
        })?;
        let st = fstat(&fd).map_err(|e| rule_err("stat", e))?;
        let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
        if is_dir != rule.is_dir {
            return Err(EnforceError::new(
                Layer::Landlock,
                format!(
                    "rule for {} ({}): it changed between folder and file since planning",
                    rule.path.display(),
                    rule.why
                ),
            ));
        }
        let rights = access(rights);
        created = created
            .add_rule(PathBeneath::new(fd, rights))
            .map_err(|e| {
                err(format!(
                    "rule for {} ({}): {e}",
                    rule.path.display(),
                    rule.why
                ))
            })?;
    }
    let status = created
        .restrict_self()
        .map_err(|e| err(format!("restricting the process: {e}")))?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(err(format!(
            "the kernel enforced the ruleset only as {:?}",
            status.ruleset
        )));
    }
    Ok(())
}

fn access(rights: &[FsRight]) -> BitFlags<AccessFs> {
    rights.iter().fold(BitFlags::empty(), |acc, r| {
        acc | match r {
            FsRight::Execute => AccessFs::Execute,
            FsRight::WriteFile => AccessFs::WriteFile,
            FsRight::ReadFile => AccessFs::ReadFile,
            FsRight::ReadDir => AccessFs::ReadDir,
            FsRight::RemoveDir => AccessFs::RemoveDir,
            FsRight::RemoveFile => AccessFs::RemoveFile,
            FsRight::MakeChar => AccessFs::MakeChar,
            FsRight::MakeDir => AccessFs::MakeDir,
            FsRight::MakeReg => AccessFs::MakeReg,
            FsRight::MakeSock => AccessFs::MakeSock,
            FsRight::MakeFifo => AccessFs::MakeFifo,
            FsRight::MakeBlock => AccessFs::MakeBlock,
            FsRight::MakeSym => AccessFs::MakeSym,
            FsRight::Refer => AccessFs::Refer,
            FsRight::Truncate => AccessFs::Truncate,
            FsRight::IoctlDev => AccessFs::IoctlDev,
            FsRight::ResolveUnix => AccessFs::ResolveUnix,
        }
    })
}
