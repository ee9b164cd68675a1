//! The probe vocabulary: every operation a probe may name, defined once.
//!
//! For each operation this says what its operands are (the `target` and, for some, an `arg`),
//! what the runner prepares before a run ([`Setup`]), what the harness does inside the sandbox
//! (see `harness.rs`), which evidence decides the verdict afterwards ([`Evidence`]), and which
//! Seatbelt operations decide it when a macOS profile is evaluated instead of run
//! ([`ProbeOp::seatbelt_checks`]). `docs/contract.md` renders this table for people.

use std::fmt;

use serde::Serialize;

use crate::sbpl::VnodeType;

/// What an operand names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Operand {
    /// An absolute path (folded lexically before it is compared, resolved by the kernel).
    Path,
    /// A process id (decimal).
    Pid,
    /// A terminal: a path to a tty device, or `fd:N` for an inherited descriptor.
    Tty,
    /// A name: an abstract Unix socket name (without the leading NUL), a Mach service name,
    /// an application bundle id.
    Name,
}

/// What the runner makes true at an operand's path before every run, outside the sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Setup {
    /// Nothing: a fixture of the runner serves (the outside process, the terminal, the
    /// abstract listener, the tmux server), or the operand is not a path.
    None,
    /// A regular file holding a fresh marker (a product file whose secret is already known,
    /// like `config.json`'s server token, keeps its content and that secret is its marker).
    File,
    /// Nothing at the path (removed if a previous run left something).
    Absent,
    /// A folder holding an entry whose name is a fresh marker.
    Dir,
    /// An executable shell script that writes its first argument into the file named by its
    /// second.
    Script,
    /// A Unix socket the runner listens on.
    Listener,
}

/// How the runner decides, after the run, whether the operation happened. Never from what the
/// harness says it did: from the disk, from markers the harness could only have seen by
/// doing the operation, and from the runner's own listeners and outside process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Evidence {
    /// The harness's output holds the marker planted in the target file.
    TargetMarkerInOutput,
    /// The harness's output holds the marker planted in the `arg` file.
    ArgMarkerInOutput,
    /// The harness's listing holds the marker entry planted in the target folder.
    MarkerInListing,
    /// The target file holds the probe's token.
    TokenInTarget,
    /// The target exists and holds the probe's token.
    CreatedWithToken,
    /// The target no longer exists.
    TargetGone,
    /// The target no longer exists, or the `arg` path does.
    Moved,
    /// The `arg` path exists and is the target's inode.
    SameInode,
    /// The `arg` file holds the probe's token (written by what the operation ran).
    TokenInArg,
    /// The runner's listener at the target received the probe's token.
    ListenerGotToken,
    /// The runner's outside process recorded the signal.
    OutsideSignalled,
    /// The runner's outside process saw itself traced (its `TracerPid`).
    OutsideTraced,
    /// The harness's output holds the marker in the outside process's environment.
    OutsideEnvMarkerInOutput,
    /// The harness's output holds the marker of the kernel objects the runner shares with the
    /// outside (a System V segment, a `/dev/shm` file, a session-keyring key, the kernel log).
    SharedMarkerInOutput,
    /// The kernel setting at the target holds another value than the runner read before the
    /// run (the runner writes its value back afterwards).
    KnobChanged,
    /// A character device node stands at the target.
    DeviceNodeMade,
    /// The runner read the probe's token back from the terminal's input queue.
    TokenFromTerminal,
    /// No live evidence here: decided by evaluating the macOS profile (run live on a Mac by
    /// `scripts/mac-selftest.sh`).
    EvaluatedOnly,
}

/// One Seatbelt check a probe needs: the SBPL operation and the object it is checked on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SbplCheck {
    /// A file operation (or `process-exec`) on a path, and the kind of object there when the
    /// operation says it (reading a file, listing a folder).
    Path(&'static str, String, Option<VnodeType>),
    /// `network-outbound` to a Unix socket path.
    UnixSocket(String),
    /// `mach-lookup` of a global name.
    MachName(String),
    /// `signal` / `process-info*` to a process outside the sandbox.
    OutsideProcess(&'static str),
    /// An operation on no object (`lsopen`, `appleevent-send`).
    NoObject(&'static str),
}

/// The LaunchServices service a copied `open` still needs.
pub const LAUNCHSERVICES: &str = "com.apple.coreservices.launchservicesd";
/// The Apple Events service `osascript` and friends need.
pub const APPLE_EVENTS: &str = "com.apple.coreservices.appleevents";

macro_rules! ops {
    ($($variant:ident = $name:literal),* $(,)?) => {
        /// A probe's operation.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
        pub enum ProbeOp { $($variant),* }

        impl ProbeOp {
            pub const ALL: &'static [ProbeOp] = &[$(ProbeOp::$variant),*];

            pub fn as_str(self) -> &'static str {
                match self { $(ProbeOp::$variant => $name),* }
            }
        }
    };
}

ops! {
    Read = "read",
    List = "list",
    Write = "write",
    Create = "create",
    Delete = "delete",
    Rename = "rename",
    Link = "link",
    SymlinkFollow = "symlink-follow",
    Exec = "exec",
    ConnectUnix = "connect-unix",
    ConnectAbstract = "connect-abstract",
    Signal = "signal",
    Ptrace = "ptrace",
    ProcRoot = "proc-root",
    ProcEnviron = "proc-environ",
    Tiocsti = "tiocsti",
    TmuxCommand = "tmux-command",
    MachLookup = "mach-lookup",
    AppleEvent = "apple-event",
    Lsopen = "lsopen",
    OpenCopy = "open-copy",
    SysvAttach = "sysv-attach",
    ShmRead = "shm-read",
    KeyRead = "key-read",
    RenameDir = "rename-dir",
    SysctlWrite = "sysctl-write",
    Mknod = "mknod",
    KmsgRead = "kmsg-read",
    ReadLate = "read-late",
}

impl ProbeOp {
    pub fn parse(word: &str) -> Option<ProbeOp> {
        ProbeOp::ALL.iter().copied().find(|op| op.as_str() == word)
    }

    /// What the harness does, in one sentence (for docs and `--help`).
    pub fn doc(self) -> &'static str {
        match self {
            ProbeOp::Read => "open the target file and read it",
            ProbeOp::List => "list the target folder",
            ProbeOp::Write => "append the probe's token to the existing target file (no create)",
            ProbeOp::Create => {
                "create the target (and missing folders above it) as a new file holding the token"
            }
            ProbeOp::Delete => "unlink the target file",
            ProbeOp::Rename => "rename the target to `arg`",
            ProbeOp::Link => "hard-link the target at `arg`",
            ProbeOp::SymlinkFollow => {
                "make a symlink at `arg` pointing to the target, read through it"
            }
            ProbeOp::Exec => "run the target with the token and `arg` as arguments",
            ProbeOp::ConnectUnix => "connect to the Unix socket at the target path, send the token",
            ProbeOp::ConnectAbstract => {
                "connect to the abstract Unix socket named by the target, send the token"
            }
            ProbeOp::Signal => "send SIGUSR1 to the target process",
            ProbeOp::Ptrace => {
                "PTRACE_SEIZE the target process and hold it until it has run traced (at most 2 s)"
            }
            ProbeOp::ProcRoot => "read the `arg` file through /proc/TARGET/root",
            ProbeOp::ProcEnviron => "read /proc/TARGET/environ",
            ProbeOp::Tiocsti => "push the token into the target terminal's input with TIOCSTI",
            ProbeOp::TmuxCommand => {
                "run `tmux -S TARGET run-shell` writing the token into `arg` (the server runs it)"
            }
            ProbeOp::MachLookup => "look up the Mach service named by the target (macOS)",
            ProbeOp::AppleEvent => {
                "send an Apple Event to the application named by the target (macOS)"
            }
            ProbeOp::Lsopen => "ask LaunchServices to open the target (macOS)",
            ProbeOp::OpenCopy => {
                "run a copy of /usr/bin/open placed at `arg` on the target (macOS)"
            }
            ProbeOp::SysvAttach => {
                "attach the System V shared memory segment whose id is the target, read-only, and read it"
            }
            ProbeOp::ShmRead => "open and read the target, a file the runner made in /dev/shm",
            ProbeOp::KeyRead => {
                "find the key described by the target in the session keyring and read it"
            }
            ProbeOp::RenameDir => "rename the target folder to `arg`",
            ProbeOp::SysctlWrite => {
                "write the kernel setting at the target (a file under /proc/sys): its number plus one"
            }
            ProbeOp::Mknod => "make a character device node of the null device at the target",
            ProbeOp::KmsgRead => "read the kernel log device at the target (/dev/kmsg)",
            ProbeOp::ReadLate => {
                "make `arg`, wait until the runner has written the target (it then removes `arg`), read the target"
            }
        }
    }

    /// What the target names.
    pub fn target(self) -> Operand {
        match self {
            ProbeOp::Signal | ProbeOp::Ptrace | ProbeOp::ProcRoot | ProbeOp::ProcEnviron => {
                Operand::Pid
            }
            ProbeOp::Tiocsti => Operand::Tty,
            ProbeOp::ConnectAbstract
            | ProbeOp::MachLookup
            | ProbeOp::AppleEvent
            | ProbeOp::SysvAttach
            | ProbeOp::KeyRead => Operand::Name,
            _ => Operand::Path,
        }
    }

    /// What `arg` names and why, for the operations that take one (it is then required).
    pub fn arg(self) -> Option<(Operand, &'static str)> {
        match self {
            ProbeOp::Rename | ProbeOp::RenameDir => Some((Operand::Path, "the new name")),
            ProbeOp::Link => Some((Operand::Path, "the new link")),
            ProbeOp::SymlinkFollow => Some((Operand::Path, "where the symlink is made")),
            ProbeOp::Exec => Some((Operand::Path, "the file the program writes the token into")),
            ProbeOp::ProcRoot => Some((Operand::Path, "the file read through /proc/PID/root")),
            ProbeOp::TmuxCommand => {
                Some((Operand::Path, "the file the server writes the token into"))
            }
            ProbeOp::OpenCopy => Some((Operand::Path, "where the copy of open is placed")),
            ProbeOp::ReadLate => Some((
                Operand::Path,
                "the file the harness makes when it waits; the runner removes it once it wrote the target",
            )),
            _ => None,
        }
    }

    /// What the runner prepares at the target and at `arg`.
    pub fn setup(self) -> (Setup, Setup) {
        match self {
            ProbeOp::Read | ProbeOp::Write | ProbeOp::Delete => (Setup::File, Setup::None),
            ProbeOp::Rename | ProbeOp::Link | ProbeOp::SymlinkFollow => {
                (Setup::File, Setup::Absent)
            }
            ProbeOp::List => (Setup::Dir, Setup::None),
            ProbeOp::RenameDir => (Setup::Dir, Setup::Absent),
            ProbeOp::Create | ProbeOp::Mknod => (Setup::Absent, Setup::None),
            ProbeOp::ReadLate => (Setup::Absent, Setup::Absent),
            ProbeOp::Exec => (Setup::Script, Setup::Absent),
            ProbeOp::ConnectUnix => (Setup::Listener, Setup::None),
            ProbeOp::ProcRoot => (Setup::None, Setup::File),
            ProbeOp::TmuxCommand => (Setup::None, Setup::Absent),
            ProbeOp::ConnectAbstract
            | ProbeOp::Signal
            | ProbeOp::Ptrace
            | ProbeOp::ProcEnviron
            | ProbeOp::Tiocsti
            | ProbeOp::MachLookup
            | ProbeOp::AppleEvent
            | ProbeOp::Lsopen
            | ProbeOp::OpenCopy
            | ProbeOp::SysvAttach
            | ProbeOp::ShmRead
            | ProbeOp::KeyRead
            | ProbeOp::SysctlWrite
            | ProbeOp::KmsgRead => (Setup::None, Setup::None),
        }
    }

    /// How the runner decides the verdict.
    pub fn evidence(self) -> Evidence {
        match self {
            ProbeOp::Read | ProbeOp::SymlinkFollow | ProbeOp::ReadLate => {
                Evidence::TargetMarkerInOutput
            }
            ProbeOp::ProcRoot => Evidence::ArgMarkerInOutput,
            ProbeOp::List => Evidence::MarkerInListing,
            ProbeOp::Write => Evidence::TokenInTarget,
            ProbeOp::Create => Evidence::CreatedWithToken,
            ProbeOp::Delete => Evidence::TargetGone,
            ProbeOp::Rename | ProbeOp::RenameDir => Evidence::Moved,
            ProbeOp::SysctlWrite => Evidence::KnobChanged,
            ProbeOp::Mknod => Evidence::DeviceNodeMade,
            ProbeOp::Link => Evidence::SameInode,
            ProbeOp::Exec | ProbeOp::TmuxCommand => Evidence::TokenInArg,
            ProbeOp::ConnectUnix | ProbeOp::ConnectAbstract => Evidence::ListenerGotToken,
            ProbeOp::Signal => Evidence::OutsideSignalled,
            ProbeOp::Ptrace => Evidence::OutsideTraced,
            ProbeOp::ProcEnviron => Evidence::OutsideEnvMarkerInOutput,
            ProbeOp::SysvAttach | ProbeOp::ShmRead | ProbeOp::KeyRead | ProbeOp::KmsgRead => {
                Evidence::SharedMarkerInOutput
            }
            ProbeOp::Tiocsti => Evidence::TokenFromTerminal,
            ProbeOp::MachLookup | ProbeOp::AppleEvent | ProbeOp::Lsopen | ProbeOp::OpenCopy => {
                Evidence::EvaluatedOnly
            }
        }
    }

    /// Whether the operation changes something outside the harness (a file, a listener, a
    /// process, a terminal). For these the harness's claim of success is checked against the
    /// evidence: "done" without the effect is a lying or broken harness. Observations (read,
    /// list, …) are decided by the marker alone: a masked folder legitimately lists empty.
    pub fn has_side_effect(self) -> bool {
        !matches!(
            self.evidence(),
            Evidence::TargetMarkerInOutput
                | Evidence::ArgMarkerInOutput
                | Evidence::MarkerInListing
                | Evidence::OutsideEnvMarkerInOutput
                | Evidence::SharedMarkerInOutput
                | Evidence::EvaluatedOnly
        )
    }

    /// Whether only a caller with root's powers can do the operation at all, so that run by
    /// anyone else even the unconfined control fails: these probe the sandbox of a root
    /// caller (docs/linux.md, "A root caller"), and are vacuous for a person.
    pub fn needs_root(self) -> bool {
        matches!(
            self,
            ProbeOp::SysctlWrite | ProbeOp::Mknod | ProbeOp::KmsgRead
        )
    }

    /// Whether a probe with this operation can be decided live on Linux.
    pub fn live_on_linux(self) -> bool {
        self.evidence() != Evidence::EvaluatedOnly
    }

    /// The Seatbelt checks that decide the probe on macOS: allowed only if every one is.
    /// `None` when the operation has no Seatbelt meaning (Linux mechanisms).
    pub fn seatbelt_checks(self, target: &str, arg: Option<&str>) -> Option<Vec<SbplCheck>> {
        use SbplCheck::*;
        let t = || target.to_string();
        let a = || arg.unwrap_or_default().to_string();
        Some(match self {
            ProbeOp::Read | ProbeOp::ReadLate => {
                vec![Path("file-read-data", t(), Some(VnodeType::RegularFile))]
            }
            ProbeOp::List => vec![Path("file-read-data", t(), Some(VnodeType::Directory))],
            ProbeOp::Write => vec![Path("file-write-data", t(), None)],
            ProbeOp::Create => vec![Path("file-write-create", t(), None)],
            ProbeOp::Delete => vec![Path("file-write-unlink", t(), None)],
            ProbeOp::Rename | ProbeOp::RenameDir => vec![
                Path("file-write-unlink", t(), None),
                Path("file-write-create", a(), None),
            ],
            // file-link is checked on the file being linked, file-write-create on the new name.
            ProbeOp::Link => vec![
                Path("file-link", t(), None),
                Path("file-write-create", a(), None),
            ],
            // Seatbelt checks the resolved path: reading through the link is reading the target.
            ProbeOp::SymlinkFollow => {
                vec![
                    Path("file-write-create", a(), None),
                    Path("file-read-data", t(), Some(VnodeType::RegularFile)),
                ]
            }
            ProbeOp::Exec => vec![Path("process-exec", t(), None)],
            ProbeOp::ConnectUnix => vec![UnixSocket(t())],
            ProbeOp::Signal => vec![OutsideProcess("signal")],
            ProbeOp::MachLookup => vec![MachName(t())],
            ProbeOp::AppleEvent => vec![
                NoObject("appleevent-send"),
                MachName(APPLE_EVENTS.to_string()),
            ],
            ProbeOp::Lsopen => vec![NoObject("lsopen"), MachName(LAUNCHSERVICES.to_string())],
            // A copy is not a launcher by path, but it still needs LaunchServices.
            ProbeOp::OpenCopy => vec![
                Path("file-write-create", a(), None),
                Path("process-exec", a(), None),
                NoObject("lsopen"),
                MachName(LAUNCHSERVICES.to_string()),
            ],
            ProbeOp::ConnectAbstract
            | ProbeOp::Ptrace
            | ProbeOp::ProcRoot
            | ProbeOp::ProcEnviron
            | ProbeOp::Tiocsti
            | ProbeOp::TmuxCommand
            | ProbeOp::SysvAttach
            | ProbeOp::ShmRead
            | ProbeOp::KeyRead
            | ProbeOp::SysctlWrite
            | ProbeOp::Mknod
            | ProbeOp::KmsgRead => return None,
        })
    }
}

impl fmt::Display for ProbeOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for op in ProbeOp::ALL {
            assert_eq!(ProbeOp::parse(op.as_str()), Some(*op));
            assert!(seen.insert(op.as_str()), "{op} twice");
        }
        assert_eq!(ProbeOp::parse("unlink"), None);
    }

    #[test]
    fn operands_setups_and_evidence_agree() {
        for op in ProbeOp::ALL {
            let (target_setup, arg_setup) = op.setup();
            if op.arg().is_none() {
                assert_eq!(arg_setup, Setup::None, "{op}: setup for an arg it has not");
            }
            if op.target() != Operand::Path {
                assert_eq!(
                    target_setup,
                    Setup::None,
                    "{op}: a path setup on a non-path"
                );
            }
            match op.evidence() {
                Evidence::ArgMarkerInOutput => assert_eq!(arg_setup, Setup::File, "{op}"),
                // A late read's target is written by the runner during the run.
                Evidence::TargetMarkerInOutput if *op == ProbeOp::ReadLate => {
                    assert_eq!(target_setup, Setup::Absent, "{op}")
                }
                Evidence::TargetMarkerInOutput | Evidence::TokenInTarget => {
                    assert_eq!(target_setup, Setup::File, "{op}")
                }
                Evidence::MarkerInListing => assert_eq!(target_setup, Setup::Dir, "{op}"),
                Evidence::TokenInArg => assert_eq!(arg_setup, Setup::Absent, "{op}"),
                Evidence::ListenerGotToken if *op == ProbeOp::ConnectUnix => {
                    assert_eq!(target_setup, Setup::Listener)
                }
                _ => {}
            }
            // Every operation is decidable somewhere: live on Linux or through Seatbelt.
            assert!(
                op.live_on_linux() || op.seatbelt_checks("/x", Some("/y")).is_some(),
                "{op}"
            );
        }
    }

    #[test]
    fn seatbelt_checks_name_known_operations() {
        for op in ProbeOp::ALL {
            for check in op.seatbelt_checks("/x", Some("/y")).unwrap_or_default() {
                let name = match check {
                    SbplCheck::Path(o, _, _)
                    | SbplCheck::OutsideProcess(o)
                    | SbplCheck::NoObject(o) => o,
                    SbplCheck::UnixSocket(_) => "network-outbound",
                    SbplCheck::MachName(_) => "mach-lookup",
                };
                assert!(
                    crate::sbpl::KNOWN_OPERATIONS.contains(&name),
                    "{op}: {name}"
                );
            }
        }
    }
}
