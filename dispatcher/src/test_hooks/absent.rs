//! A dispatcher built without test hooks: every hook refuses, and no policy can be broken
//! ([`Mutation`] has no values, so the code that would apply one cannot run).

use serde::Serialize;

use super::{BREAK_POLICY_ENV, CRASH_AT_ENV, NotBuilt, var};
use crate::launch::Launch;

/// No test hooks.
#[derive(Debug, Default)]
pub struct ServerHooks;

impl ServerHooks {
    /// Refuses a hook variable that is set: it would do nothing here.
    pub fn from_env() -> Result<ServerHooks, NotBuilt> {
        match [CRASH_AT_ENV, BREAK_POLICY_ENV]
            .into_iter()
            .find_map(|name| var(name).map(|v| format!("{name}={v}")))
        {
            Some(hook) => Err(NotBuilt { hook }),
            None => Ok(ServerHooks),
        }
    }

    pub fn failpoint(&self, _step: &str) {}

    pub fn break_launch(&self, _launch: &mut Launch) -> Result<(), String> {
        Ok(())
    }
}

/// How to break a policy: nothing, in a build without test hooks (the test build's is
/// `contract/mutate.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Mutation {}

impl Mutation {
    pub fn as_str(self) -> &'static str {
        match self {}
    }

    /// A `--break-policy` flag is refused.
    pub fn from_flag(flag: Option<&str>) -> Result<Option<Mutation>, String> {
        match flag {
            None => Ok(None),
            Some(m) => Err(NotBuilt {
                hook: format!("--break-policy {m}"),
            }
            .to_string()),
        }
    }

    pub fn apply(self, _policy_text: &str) -> Result<String, String> {
        match self {}
    }

    pub fn apply_to_launch(self, _launch: &mut Launch) -> Result<(), String> {
        match self {}
    }
}
