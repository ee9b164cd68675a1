//! The sandbox contract's probes: the vocabulary ([`ops`]), query files ([`queries`]), the
//! harness that runs probes inside a sandbox and reports raw facts ([`harness`]), and the
//! evaluation of probes against a macOS profile ([`evaluate`]).
//!
//! The harness never decides a verdict. A runner (the dispatcher's `contract`) plants markers
//! and fixtures before a run and decides afterwards from evidence the harness cannot forge:
//! the disk, markers it could only have read by doing the operation, the runner's own
//! listeners and outside process. `docs/contract.md` describes the whole scheme.

pub mod evaluate;
pub mod harness;
pub mod ops;
pub mod queries;

pub use crate::paths::normalize;
pub use crate::template::Template;
pub use evaluate::{CheckAnswer, Evaluated, evaluate, macos_path};
pub use harness::{Claim, HarnessReport, ProbeOutcome, VarsFile, run, supported_live, token};
pub use ops::{Evidence, Operand, ProbeOp, SbplCheck, Setup};
pub use queries::{Expectation, Probe, QueryError, load, load_all};
