//! What the enforcer reports: which layer failed and why. Errors raised in a child process
//! travel to the caller over a pipe, so they are plain data (serde).

use std::fmt;

use nix::errno::Errno;
use serde::{Deserialize, Serialize};

/// The layer of the sandbox a step belongs to, named in every error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layer {
    /// The plan itself is inconsistent or asks for something this enforcer will not do.
    Plan,
    /// Creating, waiting for or signalling the sandbox's processes.
    Process,
    UserNamespace,
    MountNamespace,
    /// Covers, bind-backs and refusals.
    Masks,
    /// Placeholders for refused paths that did not exist at launch.
    Placeholder,
    /// The PID namespace's fresh `/proc`.
    Proc,
    /// The sandbox's own `/dev`: a few devices, its own ptys, `/dev/shm` and `/dev/mqueue`.
    Devices,
    /// The kernel's global knobs made read-only.
    Kernel,
    /// The command's own session keyring.
    Keyring,
    Session,
    WorkingDirectory,
    Capabilities,
    NoNewPrivs,
    Landlock,
    /// The seccomp filter on `connect(2)` and the broker that answers it.
    SocketBroker,
    /// The sandbox's own network namespace and its relay to the egress proxy.
    Network,
    /// Executing the command itself, after every layer was in place.
    Exec,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Plan => "plan",
            Layer::Process => "process",
            Layer::UserNamespace => "user namespace",
            Layer::MountNamespace => "mount namespace",
            Layer::Masks => "masks",
            Layer::Placeholder => "placeholder",
            Layer::Proc => "fresh /proc",
            Layer::Devices => "fresh /dev",
            Layer::Kernel => "kernel interfaces",
            Layer::Keyring => "session keyring",
            Layer::Session => "setsid",
            Layer::WorkingDirectory => "working directory",
            Layer::Capabilities => "capabilities",
            Layer::NoNewPrivs => "no_new_privs",
            Layer::Landlock => "Landlock",
            Layer::SocketBroker => "socket broker",
            Layer::Network => "network",
            Layer::Exec => "exec",
        })
    }
}

/// A step of the plan could not be applied; nothing was run (except for [`Layer::Exec`],
/// where every layer was in place and the command itself could not be executed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{layer}: {detail}")]
pub struct EnforceError {
    pub layer: Layer,
    pub detail: String,
    /// The system error behind it, when there is one.
    pub errno: Option<i32>,
    /// The command had run, and the sandbox was stopped because a layer could no longer
    /// hold (the autorun guard's watcher): every process in it was killed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopped: bool,
}

impl EnforceError {
    pub fn new(layer: Layer, detail: impl Into<String>) -> EnforceError {
        EnforceError {
            layer,
            detail: detail.into(),
            errno: None,
            stopped: false,
        }
    }

    /// The sandbox is being stopped while the command runs (see [`EnforceError::stopped`]).
    pub fn stopping(mut self) -> EnforceError {
        self.stopped = true;
        self
    }

    /// `what` failed with `errno`.
    pub fn os(layer: Layer, what: impl fmt::Display, errno: Errno) -> EnforceError {
        EnforceError {
            layer,
            detail: format!("{what}: {}", errno.desc()),
            errno: Some(errno as i32),
            stopped: false,
        }
    }

    /// The exit status `sandboxer exec` uses for this error, following `env(1)`: 127 when the
    /// command does not exist, 126 when it cannot be executed, 125 when the sandbox could not
    /// be set up (nothing was run), 137 (killed by `SIGKILL`) when it was stopped while the
    /// command ran.
    pub fn exit_code(&self) -> u8 {
        if self.stopped {
            return STOPPED;
        }
        match (self.layer, self.errno) {
            (Layer::Exec, Some(e)) if e == Errno::ENOENT as i32 => 127,
            (Layer::Exec, _) => 126,
            _ => NOT_RUN,
        }
    }
}

/// Exit status when the sandbox could not be set up as planned: nothing was run.
pub const NOT_RUN: u8 = 125;

/// Exit status when the sandbox was stopped while the command ran: its processes were killed
/// (`SIGKILL`, as the shell reports it).
pub const STOPPED: u8 = 128 + 9;

/// How the confined command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// It exited with this status.
    Exited(i32),
    /// It was killed by this signal number.
    Signaled(i32),
}

impl Outcome {
    /// The shell's convention: the status itself, or 128+N for signal N.
    pub fn exit_code(self) -> u8 {
        match self {
            Outcome::Exited(code) => (code & 0xff) as u8,
            Outcome::Signaled(sig) => (128 + sig).clamp(0, 255) as u8,
        }
    }
}

/// A failure inside one mount step, before the step is named (`mounts.rs` names it).
pub(super) struct StepError {
    pub(super) what: String,
    pub(super) errno: Option<Errno>,
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.errno {
            Some(errno) => write!(f, "{}: {}", self.what, errno.desc()),
            None => f.write_str(&self.what),
        }
    }
}

pub(super) fn fail(what: impl Into<String>, errno: Errno) -> StepError {
    StepError {
        what: what.into(),
        errno: Some(errno),
    }
}

pub(super) fn fail_plain(what: impl Into<String>) -> StepError {
    StepError {
        what: what.into(),
        errno: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell_and_env() {
        assert_eq!(Outcome::Exited(0).exit_code(), 0);
        assert_eq!(Outcome::Exited(7).exit_code(), 7);
        assert_eq!(Outcome::Exited(256 + 3).exit_code(), 3);
        assert_eq!(Outcome::Signaled(15).exit_code(), 143);
        assert_eq!(Outcome::Signaled(9).exit_code(), 137);
        let exec = |errno| EnforceError::os(Layer::Exec, "x", errno);
        assert_eq!(exec(Errno::ENOENT).exit_code(), 127);
        assert_eq!(exec(Errno::EACCES).exit_code(), 126);
        assert_eq!(
            EnforceError::new(Layer::Exec, "NUL in argv").exit_code(),
            126
        );
        for layer in [
            Layer::Plan,
            Layer::UserNamespace,
            Layer::Masks,
            Layer::Landlock,
        ] {
            assert_eq!(EnforceError::os(layer, "x", Errno::ENOENT).exit_code(), 125);
        }
    }

    #[test]
    fn errors_name_their_layer() {
        let e = EnforceError::os(Layer::Landlock, "the plan needs ABI 99", Errno::EINVAL);
        assert!(
            e.to_string()
                .starts_with("Landlock: the plan needs ABI 99: "),
            "{e}"
        );
        assert_eq!(e.errno, Some(Errno::EINVAL as i32));
    }
}
