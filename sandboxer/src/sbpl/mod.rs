//! SBPL (Seatbelt profile language): a reader and an evaluator, so macOS profiles can be
//! checked on any machine.
//!
//! [`parse`] reads a profile (with `-D` parameters) into a [`Profile`];
//! [`Profile::evaluate`] decides one operation on one object — allow, deny, or unknown — and
//! names the deciding rule. It implements the documented meaning of the constructs it knows
//! and answers "unknown" for everything else, never a guess. The full statement of what is
//! read, how it is evaluated and why is `docs/sbpl-evaluator.md`.
//!
//! Paths are taken as already resolved by the kernel (`/tmp` is `/private/tmp` on macOS) and
//! compared as bytes.

mod build;
mod ere;
mod eval;
mod matching;
mod ops;
mod profile;
mod query;
mod reader;

pub use build::parse;
pub use eval::{Evaluation, Outcome, RuleRef};
pub use ops::{
    FILE_READ_OPERATIONS, FILE_WRITE_OPERATIONS, KNOWN_OPERATIONS, QueryKind, ip_side, query_kind,
};
pub use profile::{
    Action, Construct, EndpointSide, Filter, FilterKind, IpEndpoint, IpFilter, Modifier, Pattern,
    Profile, Rule, SocketFilter, TargetFilter, VnodeType,
};
pub use query::{ProcessTarget, Query};
pub use reader::{
    Datum, DatumKind, MAX_DEPTH, ParseError, Pos, UnquotableString, quote_string, read,
};
