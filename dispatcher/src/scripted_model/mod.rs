//! A scripted model on loopback: it speaks the four wire APIs the coding CLIs use (Anthropic
//! Messages, OpenAI Responses, OpenAI Chat Completions, Gemini), so a real CLI runs its own
//! tools offline, with no login, driven by marker lines in its prompt.
//!
//! Stateless: the step is the number of tool results already in the request, the actions are
//! read again from the prompt each time (`script.rs`), the tool is picked by name from the
//! tools the request declares and its arguments filled from their schema (`tools.rs`). Every
//! request is recorded as one JSONL line (`record.rs`), so a test sees each tool's result
//! arrive in the next request without parsing what the CLI prints. `docs/scripted-model.md`
//! describes the markers and the wire shapes.

mod http;
mod record;
mod script;
mod server;
mod tools;
mod turn;
mod wire;

pub use record::Recorded;
pub use script::{Action, DONE_TEXT, RUN_MARKER, WRITE_MARKER, prompt};
pub use server::{ScriptedModel, ScriptedModelError};
