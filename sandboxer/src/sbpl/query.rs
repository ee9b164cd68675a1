//! What the evaluator is asked: one operation on one object.

use std::net::SocketAddr;
use std::path::Path;

use super::ops::QueryKind;
use super::profile::VnodeType;

/// What is asked about. Paths are taken as the kernel hands them to Seatbelt: absolute,
/// resolved (`/tmp` → `/private/tmp`, no symlinks, no `.`/`..`), compared as bytes.
#[derive(Clone, Copy, Debug)]
pub enum Query<'a> {
    /// A file: `file-*` operations and `process-exec`. `vnode` is the file's type where known;
    /// a `vnode-type` filter needs it.
    Path {
        path: &'a Path,
        vnode: Option<VnodeType>,
    },
    /// A file for which the process holds a sandbox extension of class `extension`: what an
    /// `(extension …)` filter asks. A [`Query::Path`] holds none.
    HeldPath { path: &'a Path, extension: &'a str },
    /// A global Mach service name: `mach-lookup`, `mach-register`.
    MachName(&'a str),
    /// A sysctl name (`hw.cachelinesize`): `sysctl-read`, `sysctl-write`.
    Sysctl(&'a str),
    /// The Unix socket being connected to: `network-outbound`.
    UnixSocket(&'a Path),
    /// An IP address and port: connected to (`network-outbound`), bound or listened on
    /// (`network-bind`, `network-inbound`).
    Ip(SocketAddr),
    /// The process a signal or process-info request goes to.
    Process(ProcessTarget),
    /// An operation with no object the evaluator models (`process-fork`, `lsopen`, …).
    NoObject,
}

impl Query<'_> {
    pub fn kind(&self) -> QueryKind {
        match self {
            Query::Path { .. } | Query::HeldPath { .. } => QueryKind::Path,
            Query::MachName(_) => QueryKind::MachName,
            Query::Sysctl(_) => QueryKind::Sysctl,
            Query::UnixSocket(_) => QueryKind::UnixSocket,
            Query::Ip(_) => QueryKind::Ip,
            Query::Process(_) => QueryKind::Process,
            Query::NoObject => QueryKind::NoObject,
        }
    }
}

/// Whom a signal or process-info request targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessTarget {
    /// The process itself.
    Myself,
    /// Another process under the same sandbox.
    SameSandbox,
    /// A process outside this sandbox.
    Outside,
}

impl ProcessTarget {
    /// `self`, `same-sandbox`, `outside`.
    pub fn parse(word: &str) -> Option<ProcessTarget> {
        match word {
            "self" => Some(ProcessTarget::Myself),
            "same-sandbox" => Some(ProcessTarget::SameSandbox),
            "outside" => Some(ProcessTarget::Outside),
            _ => None,
        }
    }
}
