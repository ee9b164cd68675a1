//! The Linux planner: policy + platform facts → [`Plan`]. Pure: the filesystem is seen through
//! an [`FsView`], so plans are deterministic in tests; [`HostFs`] is this machine's.
//!
//! Two shapes ([`Shape`]):
//!
//! - **masks**: user + mount + PID namespaces; an empty tmpfs over each protected root and
//!   ways-out entry, grants bound back inside, refused paths masked; then Landlock with the
//!   abstract-socket and signal scopes and whatever rules the masks cannot express (in a base
//!   open policy: one rule on `/` with every right).
//! - **landlock-only**: Landlock alone. A right on a folder covers its whole subtree, so a
//!   folder that holds something the policy closes cannot get the rights its other entries
//!   need: instead each of its entries gets a rule of its own ("hole punching"), computed
//!   from the directory listing at plan time.
//!
//! Both are computed by one procedure: the masks (if any) first, then, for every folder on
//! the way to a rule path, the Landlock rights that every path beneath it may have. The plan
//! then models itself ([`Plan::decide`]) and is compared with [`Policy::decide`] on a finite
//! set of representative paths that covers every class of path the rules distinguish: each
//! difference is a [`GapKind`], and which ones break the policy follows from the kind, never
//! from the shape. [`choose`] applies the fallback rule.
//!
//! One concept per file: the filesystem as the planner sees it (`fs`), rights and operations
//! as bitsets (`rights`), the rule paths (`points`), the builder (`builder`), the plan's model
//! (`model`), gap analysis (`gaps`), making one shape's plan (`prepare`) and the fallback rule
//! (`choose`).

mod builder;
mod choose;
mod error;
mod fs;
mod gaps;
mod model;
mod points;
mod prepare;
mod rights;

#[cfg(doc)]
use crate::Policy;
#[cfg(doc)]
use crate::linux::plan::{Plan, Shape};

pub use builder::{MAX_KNOWN_ABI, WAYS_OUT_ORIGIN};
pub use choose::{Attempt, MIN_ABI_MASKS, Refusal, RefusalId, choose, choose_with};
pub use error::PlanError;
pub use fs::{EntryKind, FsView, HostFs, MemFs};
pub use gaps::{GapKind, Unchecked, classify};
pub use model::{Decider, MountEffect, PlanDecision};
pub use prepare::{plan, plan_with, prepare_with};
