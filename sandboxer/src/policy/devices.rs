//! The devices a macOS policy opens: `/dev` is a protected root of every macOS policy, and
//! only the devices every program expects are granted in it. Without this an open base would
//! read and write every `/dev/ttys*` of the person, other Terminal tabs included.
//!
//! Terminals are not in the list: the CLI's own terminal is inherited as open descriptors
//! and `/dev/tty`, and the ptys it opens through `/dev/ptmx` carry Seatbelt's
//! `com.apple.sandbox.pty` extension, which the profile template allows (docs/seatbelt.md,
//! "Devices"). Linux confines devices its own way (`linux/enforce/devices.rs`).

use std::path::PathBuf;

use super::{Access, Grant, Origin, Rule};
use crate::target::Target;

/// The folder every other device lies in.
const DEV: &str = "/dev";

/// The devices granted, with the access each needs, as the peers' working profiles grant
/// them (Chromium's `common.sb`, Codex's base policy, Gemini CLI's `sandbox-macos-*.sb`).
const DEVICES: &[(&str, Access, &str)] = &[
    ("/dev/null", Access::Rw, "the null device"),
    ("/dev/zero", Access::Rw, "zeroes"),
    ("/dev/random", Access::Ro, "randomness"),
    ("/dev/urandom", Access::Ro, "randomness"),
    (
        "/dev/tty",
        Access::Rw,
        "the process's own controlling terminal",
    ),
    (
        "/dev/ptmx",
        Access::Rw,
        "opening a pty (openpty, script, expect)",
    ),
    ("/dev/fd", Access::Rw, "the process's own open descriptors"),
    ("/dev/stdin", Access::Ro, "a link into /dev/fd"),
    ("/dev/stdout", Access::Ro, "a link into /dev/fd"),
    ("/dev/stderr", Access::Ro, "a link into /dev/fd"),
    (
        "/dev/dtracehelper",
        Access::Rw,
        "dyld registers DTrace probes here",
    ),
];

fn origin() -> Origin {
    Origin {
        file: "(devices)".into(),
        line: 0,
        field: "grant".into(),
    }
}

/// Adds `/dev` to a macOS policy's protected roots (before its grants are read, so that a
/// policy may grant a device of its own).
pub(super) fn protect(target: Target, protected: &mut Vec<Rule>) {
    if target != Target::Macos {
        return;
    }
    protected.push(Rule {
        path: PathBuf::from(DEV),
        origin: Origin {
            field: "protected".into(),
            ..origin()
        },
        why: Some("devices: only those listed in sandboxer/src/policy/devices.rs".into()),
    });
}

/// Adds the device grants to a macOS policy's `grants`, leaving a device the policy grants
/// itself as the policy says.
pub(super) fn grant(target: Target, grants: &mut Vec<Grant>) {
    if target != Target::Macos {
        return;
    }
    for &(path, access, why) in DEVICES {
        if grants.iter().any(|g| g.path.as_os_str() == path) {
            continue;
        }
        grants.push(Grant {
            path: PathBuf::from(path),
            access,
            origin: origin(),
            why: Some(why.into()),
        });
    }
}
