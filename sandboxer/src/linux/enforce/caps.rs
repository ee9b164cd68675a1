//! Dropping every capability: bounding, ambient, inheritable, effective and permitted, then
//! checking that nothing is left.
//!
//! The bounding set can only shrink with `CAP_SETPCAP`. Inside the sandbox's user namespace
//! every process has it until this step, so there the bounding set always ends empty. A
//! person's process in the Landlock-only shape has no `CAP_SETPCAP` (and no capability at all):
//! its bounding set stays as it is, which is harmless because `no_new_privs`, set right after,
//! stops `exec` from ever adding a capability (set-user-ID bits and file capabilities are
//! ignored) and the permitted set it could add from is empty.

use caps::{CapSet, Capability};
use nix::errno::Errno;

use super::error::{EnforceError, Layer};

pub(super) fn drop_all() -> Result<(), EnforceError> {
    let err = |what: &str, e: caps::errors::CapsError| {
        EnforceError::new(Layer::Capabilities, format!("{what}: {e}"))
    };
    let could_bound = caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP)
        .map_err(|e| err("reading the effective set", e))?;
    if could_bound {
        drop_bounding()?;
    }
    caps::clear(None, CapSet::Ambient).map_err(|e| err("clearing the ambient set", e))?;
    caps::clear(None, CapSet::Inheritable).map_err(|e| err("clearing the inheritable set", e))?;
    caps::clear(None, CapSet::Effective).map_err(|e| err("clearing the effective set", e))?;
    caps::clear(None, CapSet::Permitted).map_err(|e| err("clearing the permitted set", e))?;

    for (set, name) in [
        (CapSet::Effective, "effective"),
        (CapSet::Permitted, "permitted"),
        (CapSet::Inheritable, "inheritable"),
        (CapSet::Ambient, "ambient"),
    ] {
        let left = caps::read(None, set).map_err(|e| err("reading back", e))?;
        if !left.is_empty() {
            return Err(EnforceError::new(
                Layer::Capabilities,
                format!("the {name} set still holds {left:?} after clearing it"),
            ));
        }
    }
    if could_bound && let Some(cap) = first_bounding()? {
        return Err(EnforceError::new(
            Layer::Capabilities,
            format!("capability {cap} is still in the bounding set after dropping it"),
        ));
    }
    Ok(())
}

/// Drops every capability the kernel knows from the bounding set, including numbers newer
/// than the `caps` crate (the loop runs until the kernel says the number is invalid).
fn drop_bounding() -> Result<(), EnforceError> {
    for cap in 0.. {
        // SAFETY: prctl with integer arguments only.
        let held = unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong, 0, 0, 0) };
        match held {
            1 => {
                // SAFETY: as above.
                let ret =
                    unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
                if ret != 0 {
                    return Err(EnforceError::os(
                        Layer::Capabilities,
                        format_args!("dropping capability {cap} from the bounding set"),
                        Errno::last(),
                    ));
                }
            }
            0 => {}
            _ => break,
        }
    }
    Ok(())
}

fn first_bounding() -> Result<Option<u32>, EnforceError> {
    for cap in 0u32.. {
        // SAFETY: prctl with integer arguments only.
        match unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong, 0, 0, 0) } {
            1 => return Ok(Some(cap)),
            0 => {}
            _ => return Ok(None),
        }
    }
    Ok(None)
}
