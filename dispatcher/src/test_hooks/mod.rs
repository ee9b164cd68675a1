//! Test hooks: switches that make a dispatcher misbehave on purpose, so that tests can show
//! what a broken policy or a crashed server does.
//!
//! - [`CRASH_AT_ENV`] makes a server SIGKILL itself at one step of a launch (crash tests);
//! - [`BREAK_POLICY_ENV`] makes a server break every launch's policy, and the hidden
//!   `--break-policy` flag of `dispatcher contract` and `dispatcher test` does the same to
//!   their own launches ([`crate::contract::mutate`]).
//!
//! They exist only in a dispatcher built with the cargo feature `test-hooks`, which the test
//! suite enables (the crate's dev-dependency on itself) and a release build lacks. A build
//! without them fails closed: asked for a hook, it refuses to run with [`NotBuilt`] instead of
//! quietly doing nothing, so nobody believes a hook is in effect when it is not.

#[cfg(not(feature = "test-hooks"))]
pub mod absent;
#[cfg(feature = "test-hooks")]
mod built;

#[cfg(not(feature = "test-hooks"))]
pub use absent::ServerHooks;
#[cfg(feature = "test-hooks")]
pub use built::ServerHooks;

/// `AGENTWORKS_SERVER_CRASH_AT=intent|spawned|started|ended` makes the server SIGKILL itself
/// at that step of a launch (`intent`: after the `launching` event; `spawned`: after the
/// process started, before `started`; `started`: after the `started` event, before the record
/// says running; `ended`: after a chat's end event, before its record is updated). It can
/// only make the server die, which any process of the person's can do to it anyway.
pub const CRASH_AT_ENV: &str = "AGENTWORKS_SERVER_CRASH_AT";

/// `AGENTWORKS_TEST_BREAK_POLICY=widen-grant|widen-workflow-grant|empty-refuse|…` makes the
/// server break every launch's policy (as `dispatcher contract --break-policy` does) before
/// anything is journaled or written, so `dispatcher test cli-sandbox-contract` can show that
/// it tests the grants the *server* wrote. The server says so at start and in every launch's
/// mode reason (view, `started` event). Setting it needs the server's own environment, i.e.
/// the person who starts the server; no confined chat can.
pub const BREAK_POLICY_ENV: &str = "AGENTWORKS_TEST_BREAK_POLICY";

/// Whether this dispatcher was built with the test hooks.
pub const BUILT: bool = cfg!(feature = "test-hooks");

/// A test hook asked of a dispatcher built without them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{hook} is a test hook, and this dispatcher was built without test hooks (cargo feature \
     `test-hooks`): it would do nothing, so the dispatcher refuses to run; unset it, or use a \
     test build"
)]
pub struct NotBuilt {
    /// The variable or flag, as the person gave it.
    pub hook: String,
}

/// The value of a hook variable, when it is set and not empty (empty means off).
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}
