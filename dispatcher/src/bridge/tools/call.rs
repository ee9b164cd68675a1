//! What every tool call shares: its result ([`Done`] or [`Stop`]), the record of what it
//! touched ([`Call`]), and the policies it is decided with ([`Policies`]).

use std::path::PathBuf;

use sandboxer::Policy;

pub(super) struct Done {
    pub text: String,
    /// A second text block about the result (e.g. where to read on), kept apart from content.
    pub note: Option<String>,
    pub reason: String,
}

impl Done {
    pub fn new(text: String, reason: String) -> Done {
        Done {
            text,
            note: None,
            reason,
        }
    }
}

#[derive(Debug)]
pub(super) enum Stop {
    /// Refused: by the policy, by the allow-list, or by a path rule. `reason` is the log's.
    Deny { message: String, reason: String },
    /// Allowed (or not decidable) but failed: bad arguments, missing file, not text, I/O.
    Fail(String),
}

pub(super) fn deny(message: impl Into<String>) -> Stop {
    let message = message.into();
    Stop::Deny {
        reason: message.clone(),
        message: format!("refused: {message}"),
    }
}

pub(super) fn fail(message: impl Into<String>) -> Stop {
    Stop::Fail(message.into())
}

/// What one call touched, for the log.
#[derive(Default)]
pub(super) struct Call {
    /// The path or URL as asked.
    pub target: Option<String>,
    /// The real path the decision was made on.
    pub resolved: Option<PathBuf>,
}

impl Call {
    pub fn set_target(&mut self, raw: &str) {
        self.target = Some(raw.to_string());
    }
}

/// The chat's policy, and its case-folded copy where file names are case-insensitive.
pub(super) struct Policies<'a> {
    pub exact: &'a Policy,
    pub folded: Option<&'a Policy>,
}
