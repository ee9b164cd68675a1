//! The test hooks of a test build (cargo feature `test-hooks`).

use super::{BREAK_POLICY_ENV, CRASH_AT_ENV, NotBuilt, var};
use crate::contract::mutate::Mutation;
use crate::launch::Launch;

/// The server's test hooks, read once from its environment at start.
#[derive(Debug, Default)]
pub struct ServerHooks {
    /// [`CRASH_AT_ENV`]: the step at which this server kills itself.
    crash_at: Option<String>,
    /// [`BREAK_POLICY_ENV`]: every launch's policy broken this way.
    break_policy: Option<Mutation>,
}

impl ServerHooks {
    /// Reads the hook variables. An unknown break is ignored with a warning (a test hook must
    /// not stop a server); a known one is announced. Never fails in a test build.
    pub fn from_env() -> Result<ServerHooks, NotBuilt> {
        let break_policy = var(BREAK_POLICY_ENV).and_then(|v| match Mutation::parse(&v) {
            Some(m) => {
                warn(format!(
                    "TEST ONLY: {BREAK_POLICY_ENV}={v}: every launch's policy is deliberately broken"
                ));
                Some(m)
            }
            None => {
                warn(format!(
                    "{BREAK_POLICY_ENV}={v:?} is not a known break; ignored"
                ));
                None
            }
        });
        Ok(ServerHooks {
            crash_at: var(CRASH_AT_ENV),
            break_policy,
        })
    }

    /// Kills this server when [`CRASH_AT_ENV`] names `step`. It can only make the server die,
    /// which any process of the person's can do to it anyway.
    pub fn failpoint(&self, step: &str) {
        if self.crash_at.as_deref() == Some(step) {
            warn(format!("{CRASH_AT_ENV}={step}: killing myself"));
            // SAFETY: kill has no memory preconditions.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
    }

    /// Breaks a computed launch's policy as [`BREAK_POLICY_ENV`] says, and says so in its
    /// mode reason.
    pub fn break_launch(&self, launch: &mut Launch) -> Result<(), String> {
        let Some(m) = self.break_policy else {
            return Ok(());
        };
        m.apply_to_launch(launch)
            .map_err(|e| format!("{BREAK_POLICY_ENV}: {e}"))?;
        launch.mode.reason = format!(
            "{} [TEST ONLY: policy broken by {BREAK_POLICY_ENV}={}]",
            launch.mode.reason,
            m.as_str()
        );
        Ok(())
    }
}

fn warn(msg: impl std::fmt::Display) {
    eprintln!("dispatcher serve: {msg}");
}
