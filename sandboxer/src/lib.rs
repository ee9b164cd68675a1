//! `sandboxer`: a policy goes in, a confinement comes out.
//!
//! The data flows one way: [`policy::Policy`] (loaded, resolved, validated) is the reference
//! meaning, [`policy::Policy::decide`]. Backends turn it into something a kernel enforces —
//! a Seatbelt profile for macOS, a namespace + Landlock plan for Linux — and every backend is
//! tested against `decide`. This crate knows nothing of chats, workflows or CLIs.
//!
//! Its public face: the policy ([`Policy`], built from text or a [`PolicyDocument`]), one
//! resolver ([`ResolveOptions::for_target`], [`ResolveOptions::for_host`]: home, symlinks,
//! ways-out list) and the confiner ([`Confiner::check`]: how a policy would be confined here
//! or a typed [`Refusal`]; on Linux [`Confiner::launch`]: a command run confined in this
//! process). The probe harness ([`probe`]), the SBPL evaluator ([`sbpl`]), the Seatbelt
//! renderer and the data files' template syntax are tools the product uses by design. The
//! planner, the facts and the enforcer stay public for the `sandboxer` binary and the
//! integration tests, which are crates of their own.

pub mod autorun;
mod confine;
pub mod linux;
pub mod located;
pub mod macos;
pub mod network;
pub mod paths;
pub mod policy;
pub mod probe;
pub mod sbpl;
pub mod seatbelt;
pub mod spelling;
mod target;
pub mod template;
pub mod ways_out;

pub use confine::{Confinement, Confiner, Refusal};
pub use linux::plan::Shape;
#[cfg(target_os = "linux")]
pub use linux::{enforce::Command, exec::Ended, refused};
pub use policy::{
    Access, Base, Decision, GrantRule, GuardRule, NetworkSection, Op, PathRule, Policy,
    PolicyDocument, PolicyError, Reason, ResolveError, ResolveOptions, Verdict, default_policy,
    written,
};
pub use target::Target;
/// The environment variables the ways-out and autorun lists read (`sandboxer exec
/// --lists-env`).
pub use ways_out::ENV_VARS as LISTS_ENV;
