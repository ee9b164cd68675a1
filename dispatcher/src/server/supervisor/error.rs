//! The server API's errors: a status, a stable code, a message for people.

use crate::ids::ChatId;
use crate::launch::LaunchError;
use crate::state::StateError;

/// An API error: status, a stable code, a message for people.
#[derive(Debug)]
pub struct ApiError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
}

pub(super) fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(500, "internal", e.to_string())
}

impl From<StateError> for ApiError {
    fn from(e: StateError) -> ApiError {
        match e {
            StateError::UnknownChat(_) => ApiError::new(404, "unknown_chat", e.to_string()),
            StateError::UnknownWorkflow(_) => ApiError::new(404, "unknown_workflow", e.to_string()),
            other => internal(other),
        }
    }
}

impl From<LaunchError> for ApiError {
    fn from(e: LaunchError) -> ApiError {
        match e {
            LaunchError::State(s) => s.into(),
            LaunchError::Io { .. } | LaunchError::Profile(_) => internal(e),
            LaunchError::Adapter(_) => ApiError::new(422, "launch_refused", e.to_string()),
            LaunchError::ModeUnsupported { .. }
            | LaunchError::BridgeOnlyNeedsSandbox { .. }
            | LaunchError::FullRefused(_)
            | LaunchError::EnforcerUntrusted(_)
            | LaunchError::AutoOffHost(_)
            | LaunchError::CliUnprotected { .. } => {
                ApiError::new(422, "mode_refused", e.to_string())
            }
        }
    }
}

pub(super) fn not_running(chat: &ChatId) -> ApiError {
    ApiError::new(409, "not_running", format!("chat {chat} is not running"))
}
