//! Operation names: the ones seen in real, working profiles, which operations a rule's name
//! covers, and what kind of object each operation is checked against.

use super::profile::EndpointSide;

/// Operation names seen in real, working Seatbelt profiles (sources in
/// `docs/sbpl-evaluator.md`). macOS refuses a whole profile over one name it does not know,
/// and we cannot try profiles on a Mac here, so a renderer should use only these.
pub const KNOWN_OPERATIONS: &[&str] = &[
    "default",
    // Files.
    "file*",
    "file-read*",
    "file-read-data",
    "file-read-metadata",
    "file-read-xattr",
    "file-write*",
    "file-write-data",
    "file-write-create",
    "file-write-unlink",
    "file-write-mode",
    "file-write-owner",
    "file-write-flags",
    "file-write-times",
    "file-write-setugid",
    "file-write-xattr",
    "file-write-acl",
    "file-write-finderinfo",
    "file-ioctl",
    "file-link",
    "file-map-executable",
    "file-mount",
    "file-unmount",
    // Processes and signals.
    "process*",
    "process-exec",
    "process-fork",
    "process-info*",
    "process-info-pidinfo",
    "process-info-setcontrol",
    "signal",
    // Mach.
    "mach*",
    "mach-lookup",
    "mach-register",
    "mach-host*",
    "mach-priv-task-port",
    // Network.
    "network*",
    "network-outbound",
    "network-inbound",
    "network-bind",
    "system-socket",
    // IPC.
    "ipc-posix*",
    "ipc-posix-sem",
    "ipc-posix-shm",
    "ipc-posix-shm*",
    "ipc-posix-shm-read-data",
    "ipc-sysv-sem",
    "ipc-sysv-shm",
    // System.
    "sysctl-read",
    "sysctl-write",
    "iokit-open",
    "iokit-get-properties",
    "iokit-set-properties",
    "nvram*",
    "pseudo-tty",
    "user-preference-read",
    "distributed-notification-post",
    "syscall-unix",
    "job-creation",
    // Ways out: named so profiles can refuse them.
    "lsopen",
    "appleevent-send",
];

/// `file-read*` as reference.md states it.
pub const FILE_READ_OPERATIONS: [&str; 3] =
    ["file-read-data", "file-read-metadata", "file-read-xattr"];

/// `file-write*` as reference.md states it.
pub const FILE_WRITE_OPERATIONS: [&str; 11] = [
    "file-write-data",
    "file-write-create",
    "file-write-unlink",
    "file-write-mode",
    "file-write-owner",
    "file-write-flags",
    "file-write-times",
    "file-write-setugid",
    "file-write-xattr",
    "file-write-acl",
    "file-write-finderinfo",
];

pub fn is_known(op: &str) -> bool {
    KNOWN_OPERATIONS.contains(&op)
}

/// What an operation is checked against, and so what a query about it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryKind {
    /// A file path: `file-*` operations and `process-exec`.
    Path,
    /// A global Mach service name: `mach-lookup`, `mach-register`.
    MachName,
    /// The path of a Unix socket being connected to: `network-outbound`.
    UnixSocket,
    /// An IP address and port: the one connected to (`network-outbound`), or the one bound or
    /// listened on (`network-bind`, `network-inbound`); see [`ip_side`].
    Ip,
    /// A sysctl name: `sysctl-read`, `sysctl-write`.
    Sysctl,
    /// The process a signal or a process-info request goes to.
    Process,
    /// Nothing the evaluator models: only unfiltered rules decide.
    NoObject,
}

impl QueryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            QueryKind::Path => "a file path",
            QueryKind::MachName => "a Mach service name",
            QueryKind::UnixSocket => "a Unix socket path",
            QueryKind::Ip => "an IP address and port",
            QueryKind::Sysctl => "a sysctl name",
            QueryKind::Process => "a target process",
            QueryKind::NoObject => "no object",
        }
    }
}

/// The kind of object `op` is checked against; `None` when `op` is not a known operation.
pub fn query_kind(op: &str) -> Option<QueryKind> {
    if !is_known(op) {
        return None;
    }
    Some(if op.starts_with("file") || op == "process-exec" {
        QueryKind::Path
    } else if matches!(op, "mach-lookup" | "mach-register") {
        QueryKind::MachName
    } else if op == "network-outbound" {
        QueryKind::UnixSocket
    } else if matches!(op, "sysctl-read" | "sysctl-write") {
        QueryKind::Sysctl
    } else if op == "signal" || op.starts_with("process-info") {
        QueryKind::Process
    } else {
        QueryKind::NoObject
    })
}

/// Which end of a connection an IP query about `op` names, for the operations that take
/// one ([`QueryKind::Ip`]): the address connected to for `network-outbound` (which takes a
/// Unix socket path too), the address bound or listened on for `network-bind` and
/// `network-inbound` (whose primary kind is no object).
pub fn ip_side(op: &str) -> Option<EndpointSide> {
    match op {
        "network-outbound" => Some(EndpointSide::Remote),
        "network-bind" | "network-inbound" => Some(EndpointSide::Local),
        _ => None,
    }
}

/// Whether a rule naming `rule_op` applies to the single operation `leaf`, and how specific
/// that naming is (larger is more specific; the exact name is the most specific).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Coverage {
    Yes {
        specificity: usize,
    },
    /// `rule_op` is a plain name that prefixes `leaf` (`ipc-posix-shm` for
    /// `ipc-posix-shm-read-data`): whether it is an alias of the family is not documented.
    Maybe {
        specificity: usize,
        why: String,
    },
    No,
}

/// `P*` covers `P` and every `P-…`; a plain name covers itself. `default` is handled apart.
pub fn coverage(rule_op: &str, leaf: &str) -> Coverage {
    if rule_op == leaf {
        return Coverage::Yes {
            specificity: usize::MAX,
        };
    }
    if let Some(prefix) = rule_op.strip_suffix('*') {
        return if is_in_family(prefix, leaf) {
            Coverage::Yes {
                specificity: prefix.len(),
            }
        } else {
            Coverage::No
        };
    }
    if rule_op != "default" && is_in_family(rule_op, leaf) {
        return Coverage::Maybe {
            specificity: rule_op.len(),
            why: format!(
                "whether `{rule_op}` also names `{leaf}` (as `{rule_op}*` would) is not documented"
            ),
        };
    }
    Coverage::No
}

fn is_in_family(prefix: &str, leaf: &str) -> bool {
    leaf == prefix
        || leaf
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('-'))
}

/// The single operations a query about `op` stands for: `op` itself, or the members of
/// `file-read*` / `file-write*`. `None` for other families, whose full membership no source
/// states (asking about `file*` would need every file operation macOS has).
pub fn leaves(op: &str) -> Option<Vec<&'static str>> {
    match op {
        "file-read*" => Some(FILE_READ_OPERATIONS.to_vec()),
        "file-write*" => Some(FILE_WRITE_OPERATIONS.to_vec()),
        "default" => None,
        _ if op.ends_with('*') => None,
        _ => KNOWN_OPERATIONS
            .iter()
            .find(|k| **k == op)
            .map(|k| vec![*k]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_cover_their_members_only() {
        assert!(matches!(
            coverage("file-read*", "file-read-data"),
            Coverage::Yes { .. }
        ));
        assert!(matches!(
            coverage("file*", "file-write-create"),
            Coverage::Yes { .. }
        ));
        assert_eq!(coverage("file-read*", "file-write-data"), Coverage::No);
        assert_eq!(
            coverage("file-read-data", "file-read-metadata"),
            Coverage::No
        );
        assert!(matches!(
            coverage("ipc-posix-shm", "ipc-posix-shm-read-data"),
            Coverage::Maybe { .. }
        ));
        let Coverage::Yes { specificity: wide } = coverage("file*", "file-read-data") else {
            panic!()
        };
        let Coverage::Yes {
            specificity: narrow,
        } = coverage("file-read*", "file-read-data")
        else {
            panic!()
        };
        assert!(narrow > wide);
    }

    #[test]
    fn family_members_are_known_and_covered_by_their_family() {
        for leaf in FILE_READ_OPERATIONS {
            assert!(is_known(leaf));
            assert!(matches!(coverage("file-read*", leaf), Coverage::Yes { .. }));
        }
        for leaf in FILE_WRITE_OPERATIONS {
            assert!(is_known(leaf));
            assert!(matches!(
                coverage("file-write*", leaf),
                Coverage::Yes { .. }
            ));
        }
    }

    #[test]
    fn query_kinds() {
        assert_eq!(query_kind("file-write-create"), Some(QueryKind::Path));
        assert_eq!(query_kind("process-exec"), Some(QueryKind::Path));
        assert_eq!(query_kind("mach-lookup"), Some(QueryKind::MachName));
        assert_eq!(query_kind("network-outbound"), Some(QueryKind::UnixSocket));
        assert_eq!(query_kind("signal"), Some(QueryKind::Process));
        assert_eq!(query_kind("sysctl-read"), Some(QueryKind::Sysctl));
        assert_eq!(query_kind("process-fork"), Some(QueryKind::NoObject));
        assert_eq!(query_kind("file-frobnicate"), None);
        assert_eq!(ip_side("network-outbound"), Some(EndpointSide::Remote));
        assert_eq!(ip_side("network-bind"), Some(EndpointSide::Local));
        assert_eq!(ip_side("network-inbound"), Some(EndpointSide::Local));
        assert_eq!(ip_side("network*"), None);
        assert_eq!(ip_side("file-read-data"), None);
        assert_eq!(leaves("file*"), None);
        assert_eq!(leaves("lsopen"), Some(vec!["lsopen"]));
    }

    #[test]
    fn known_operations_have_no_duplicates() {
        let mut seen = std::collections::BTreeSet::new();
        for op in KNOWN_OPERATIONS {
            assert!(seen.insert(op), "{op} listed twice");
        }
    }
}
