//! `sandboxer`: a policy goes in, a confinement comes out.
//!
//! The data flows one way: [`policy::Policy`] (loaded, resolved, validated) is the reference
//! meaning, [`policy::Policy::decide`]. Backends turn it into something a kernel enforces —
//! a Seatbelt profile for macOS, a namespace + Landlock plan for Linux — and every backend is
//! tested against `decide`. This crate knows nothing of chats, workflows or CLIs.

mod confine;
pub mod linux;
pub mod located;
pub mod macos;
pub mod paths;
pub mod policy;
pub mod probe;
pub mod sbpl;
pub mod seatbelt;
mod target;
pub mod template;
pub mod ways_out;

pub use confine::{Confinement, Confiner, Refusal};
pub use linux::plan::Shape;
#[cfg(target_os = "linux")]
pub use linux::{enforce::Command, exec::Ended, refused};
pub use policy::{
    Access, Base, Decision, GrantRule, Op, PathRule, Policy, PolicyDocument, PolicyError, Reason,
    ResolveError, ResolveOptions, Verdict, default_policy, written,
};
pub use target::Target;
