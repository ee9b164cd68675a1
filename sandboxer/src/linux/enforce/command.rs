//! What to run inside the sandbox.

use std::ffi::OsString;
use std::path::PathBuf;

/// What to run inside the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// Looked up in `PATH` (of the environment, which passes through) when it has no `/`.
    pub program: OsString,
    /// The arguments after the program name (`argv[0]` is `program`).
    pub args: Vec<OsString>,
    /// The working directory, absolute; entered by path inside the sandbox.
    pub cwd: PathBuf,
}
