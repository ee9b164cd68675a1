//! Linux: a pure planner (policy + platform facts → [`plan::Plan`]) and, on Linux only, the
//! enforcer that applies a plan just before `exec`.

pub mod apparmor;
#[cfg(target_os = "linux")]
pub mod enforce;
#[cfg(target_os = "linux")]
pub mod exec;
pub mod facts;
pub(crate) mod fs_right;
pub mod plan;
pub mod planner;
#[cfg(target_os = "linux")]
pub mod refused;
