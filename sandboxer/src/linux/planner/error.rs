//! Why a plan cannot be made at all.

use std::io;
use std::path::PathBuf;

use crate::target::Target;

/// A plan that cannot be made at all (as opposed to a [`super::Refusal`]: a plan made, but not good
/// enough).
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("the policy is resolved for {0}; a Linux plan needs a policy resolved for linux")]
    NotLinux(Target),
    #[error(
        "the masks shape needs user, mount and PID namespaces, and this machine does not \
         provide them: {0}"
    )]
    NamespacesUnavailable(String),
    #[error(
        "{path:?} ({what}) is a symlink; a mount or rule there would follow it, so the policy \
         must name the real path"
    )]
    Symlink { path: PathBuf, what: String },
    #[error("cannot inspect {path:?}: {source}")]
    Fs {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}
