//! Dropping every capability: bounding, ambient, inheritable, effective and permitted, then
//! checking that nothing is left.
//!
//! The bounding set can only shrink with `CAP_SETPCAP`. Inside the sandbox's user namespace
//! every process has it until this step, so there the bounding set always ends empty. A
//! person's process in the Landlock-only shape has no `CAP_SETPCAP` (and no capability at all):
//! its bounding set stays as it is, which is harmless because `no_new_privs`, set right after,
//! stops `exec` from ever adding a capability (set-user-ID bits and file capabilities are
//! ignored) and the permitted set it could add from is empty.
//!
//! This runs in three processes per launch, so it keeps to few system calls: one
//! `PR_CAPBSET_DROP` per capability the kernel knows, one to clear the ambient set, and
//! `capget`/`capset` for the others.

use caps::{CapSet, Capability, CapsHashSet};
use nix::errno::Errno;
use nix::sys::prctl;
use nix::sys::signal::Signal;

use super::error::{EnforceError, Layer};

/// A helper process PID 1 forks (the mask keeper, the guard watcher): dies with PID 1, keeps
/// only `only` of its capabilities in the sandbox's user namespace (none to pass on), and is
/// not dumpable, so that nothing in the sandbox may open its `/proc` entries. `who` names it
/// in errors.
pub(super) fn helper_keeping(who: &str, only: &[Capability]) -> Result<(), EnforceError> {
    let os = |what: &str, e: Errno| {
        EnforceError::os(Layer::Capabilities, format_args!("{who}: {what}"), e)
    };
    let err = |e: caps::errors::CapsError| {
        EnforceError::new(Layer::Capabilities, format!("{who}: capabilities: {e}"))
    };
    prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| os("PR_SET_PDEATHSIG", e))?;
    let only: CapsHashSet = only.iter().copied().collect();
    caps::clear(None, CapSet::Ambient).map_err(err)?;
    caps::clear(None, CapSet::Inheritable).map_err(err)?;
    caps::set(None, CapSet::Effective, &only).map_err(err)?;
    caps::set(None, CapSet::Permitted, &only).map_err(err)?;
    prctl::set_dumpable(false).map_err(|e| os("PR_SET_DUMPABLE", e))
}

pub(super) fn drop_all() -> Result<(), EnforceError> {
    let err = |what: &str, e: caps::errors::CapsError| {
        EnforceError::new(Layer::Capabilities, format!("{what}: {e}"))
    };
    let can_bound = caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP)
        .map_err(|e| err("reading the effective set", e))?;
    if can_bound {
        drop_bounding()?;
    }
    caps::clear(None, CapSet::Ambient).map_err(|e| err("clearing the ambient set", e))?;
    caps::clear(None, CapSet::Inheritable).map_err(|e| err("clearing the inheritable set", e))?;
    // Clearing the permitted set clears the effective one with it.
    caps::clear(None, CapSet::Permitted).map_err(|e| err("clearing the permitted set", e))?;

    // The kernel keeps ambient within permitted and inheritable, so these three being empty
    // means the ambient set is too; each bounding drop above either succeeded or failed.
    for (set, name) in [
        (CapSet::Effective, "effective"),
        (CapSet::Permitted, "permitted"),
        (CapSet::Inheritable, "inheritable"),
    ] {
        let left = caps::read(None, set).map_err(|e| err("reading back", e))?;
        if !left.is_empty() {
            return Err(EnforceError::new(
                Layer::Capabilities,
                format!("the {name} set still holds {left:?} after clearing it"),
            ));
        }
    }
    Ok(())
}

/// Drops every capability the kernel knows from the bounding set, including numbers newer
/// than the `caps` crate: dropping one that is not there succeeds, and the first number past
/// the kernel's last capability fails with `EINVAL`, which ends the loop.
fn drop_bounding() -> Result<(), EnforceError> {
    for cap in 0.. {
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } == 0 {
            continue;
        }
        return match Errno::last() {
            Errno::EINVAL if cap > 0 => Ok(()),
            e => Err(EnforceError::os(
                Layer::Capabilities,
                format_args!("dropping capability {cap} from the bounding set"),
                e,
            )),
        };
    }
    Ok(())
}
