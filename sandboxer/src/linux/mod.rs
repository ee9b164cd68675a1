//! Linux: a pure planner (policy + platform facts → [`plan::Plan`]) and, on Linux only, the
//! enforcer that applies a plan just before `exec`.

pub mod plan;
