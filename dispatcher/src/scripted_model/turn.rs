//! The answer to one request: a model router's structured answer, a title for a request
//! without tools, the tool call of the step's action, or the final text.

use serde_json::Value;

use super::script::{self, DONE_TEXT};
use super::tools::{answer_for_schema, call_for};
use super::wire::{Answer, Seen};

/// The text a request without tools gets (opencode's title request comes first).
pub const TITLE_TEXT: &str = "Scripted run";

pub fn answer(request: &Value, seen: &Seen) -> Answer {
    if let Some(schema) = &seen.answer_schema {
        return Answer::Text(answer_for_schema(schema, TITLE_TEXT).to_string());
    }
    if seen.tools.is_empty() {
        return Answer::Text(TITLE_TEXT.to_string());
    }
    let actions = script::actions(request);
    match script::due(&actions, seen.tool_results.len()) {
        None => Answer::Text(DONE_TEXT.to_string()),
        Some(action) => match call_for(action, &seen.tools) {
            Ok(call) => Answer::Call(call),
            // Said as the final text, and recorded: the test reads why from the record.
            Err(why) => Answer::Text(format!("AGENTWORKS-ERROR: {why}")),
        },
    }
}
