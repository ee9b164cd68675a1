//! The autorun guard: the paths that make a program outside the sandbox run code later (shell
//! start-up files, git hooks and config, LaunchAgents, the coding CLIs' settings, the programs
//! the dispatcher runs), read-only to a confined process. The list is data
//! (`profiles/autorun.toml`, [`list`]); programs are found on `$PATH` ([`programs`]); git
//! repositories under the home are found at launch ([`repos`]).

pub mod list;
pub mod programs;
pub mod repos;

pub use list::{Entry, List, Missing, RepositorySettings};
