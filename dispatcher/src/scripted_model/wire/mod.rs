//! The four wire shapes, routed by the request path's suffix. Each reads a request into the
//! wire-neutral [`Seen`] and writes an [`Answer`] back in its own format.

mod anthropic;
mod chat;
mod gemini;
mod responses;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::tools::{Call, Declared};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Wire {
    /// Anthropic Messages (`…/messages`): Claude Code.
    Anthropic,
    /// OpenAI Responses (`…/responses`): Codex.
    Responses,
    /// Gemini (`…:streamGenerateContent`, `…:generateContent`): Gemini CLI.
    Gemini,
    /// OpenAI Chat Completions (`…/chat/completions`): opencode, pi.
    Chat,
}

/// What a request says, whatever its wire.
#[derive(Debug, Default)]
pub struct Seen {
    /// The tools it declares.
    pub tools: Vec<Declared>,
    /// The text of every tool result it carries, in order: their number is the step.
    pub tool_results: Vec<String>,
    /// A structured-output schema it asks the answer to follow (a model router's question).
    pub answer_schema: Option<Value>,
    /// Whether it wants server-sent events rather than one JSON body.
    pub stream: bool,
    /// The model it names (echoed back).
    pub model: String,
}

/// The model's turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Call(Call),
    Text(String),
}

/// A response body and its type.
#[derive(Debug)]
pub struct Reply {
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Wire {
    /// The wire a request path speaks (the query already removed), by its suffix.
    pub fn for_path(path: &str) -> Option<Wire> {
        if path.ends_with("/messages") {
            Some(Wire::Anthropic)
        } else if path.ends_with("/responses") {
            Some(Wire::Responses)
        } else if path.ends_with(":streamGenerateContent") || path.ends_with(":generateContent") {
            Some(Wire::Gemini)
        } else if path.ends_with("/chat/completions") {
            Some(Wire::Chat)
        } else {
            None
        }
    }

    pub fn read(self, path: &str, body: &Value) -> Seen {
        match self {
            Wire::Anthropic => anthropic::read(body),
            Wire::Responses => responses::read(body),
            Wire::Gemini => gemini::read(path, body),
            Wire::Chat => chat::read(body),
        }
    }

    /// The answer in this wire's format; `step` makes call ids unique within a conversation.
    pub fn reply(self, answer: &Answer, seen: &Seen, step: usize) -> Reply {
        match self {
            Wire::Anthropic => anthropic::reply(answer, seen, step),
            Wire::Responses => responses::reply(answer, seen, step),
            Wire::Gemini => gemini::reply(answer, seen),
            Wire::Chat => chat::reply(answer, seen, step),
        }
    }
}

/// The text of a tool result or message content: a string, the texts of an array of parts,
/// an object's `text` or `output`, else the JSON itself.
pub(crate) fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().map(text_of).collect::<Vec<_>>().join(""),
        Value::Object(o) => match o.get("text").or_else(|| o.get("output")) {
            Some(inner) => text_of(inner),
            None => v.to_string(),
        },
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Server-sent events: `event:` (when named) and `data:` lines, a blank line after each.
fn sse<'a>(events: impl IntoIterator<Item = (Option<&'a str>, Value)>) -> Reply {
    let mut body = String::new();
    for (name, data) in events {
        if let Some(name) = name {
            body.push_str(&format!("event: {name}\n"));
        }
        body.push_str(&format!("data: {data}\n\n"));
    }
    Reply {
        content_type: "text/event-stream",
        body: body.into_bytes(),
    }
}

fn json_reply(v: &Value) -> Reply {
    Reply {
        content_type: "application/json",
        body: v.to_string().into_bytes(),
    }
}

impl Seen {
    /// A JSON API's request (`stream` and `model` in its body), no answer schema.
    fn of_body(body: &Value, tools: Vec<Declared>, tool_results: Vec<String>) -> Seen {
        Seen {
            tools,
            tool_results,
            answer_schema: None,
            stream: body["stream"].as_bool().unwrap_or(false),
            model: str_of(&body["model"]),
        }
    }
}

/// The items of an array field; none when it is missing or not an array.
fn items(v: &Value) -> impl Iterator<Item = &Value> {
    v.as_array().into_iter().flatten()
}

/// A string field, or "".
fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

#[cfg(test)]
pub(crate) mod fixture {
    //! The captured requests of `testdata/` (real CLI requests, long strings shortened).

    use serde_json::Value;

    /// The request line's path (no query) and the body of `testdata/NAME.json`.
    pub fn load(name: &str) -> (String, Value) {
        let file = format!(
            "{}/src/scripted_model/testdata/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
        let v: Value = serde_json::from_str(&text).unwrap();
        let line = v["request_line"].as_str().unwrap();
        let target = line.split(' ').nth(1).unwrap();
        let path = target.split('?').next().unwrap().to_string();
        (path, v["body"].clone())
    }

    /// The `data:` payloads of an SSE body.
    pub fn events(body: &[u8]) -> Vec<Value> {
        std::str::from_utf8(body)
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripted_model::script::DONE_TEXT;
    use crate::scripted_model::turn::answer;

    /// Each CLI's last request carries the shell's and the write's results, in its own shape.
    #[test]
    fn reads_both_tool_results_from_each_cli_s_last_request() {
        let cases = [
            (
                "claude-done",
                Wire::Anthropic,
                "Bash completed",
                "File created",
            ),
            (
                "codex-done",
                Wire::Responses,
                "Process exited with code 0",
                "Success.",
            ),
            (
                "gemini-done",
                Wire::Gemini,
                "Output: (empty)",
                "Successfully created",
            ),
            ("pi-done", Wire::Chat, "(no output)", "Successfully wrote"),
            (
                "opencode-done",
                Wire::Chat,
                "(no output)",
                "Wrote file successfully",
            ),
        ];
        for (name, wire, shell, write) in cases {
            let (path, body) = fixture::load(name);
            assert_eq!(Wire::for_path(&path), Some(wire), "{name}");
            let seen = wire.read(&path, &body);
            assert!(!seen.tools.is_empty() && seen.stream, "{name}");
            let [first, second] = seen.tool_results.as_slice() else {
                panic!("{name}: {:?}", seen.tool_results)
            };
            assert!(
                first.contains(shell) && second.contains(write),
                "{name}: {first:?} {second:?}"
            );
            assert_eq!(
                answer(&body, &seen),
                Answer::Text(DONE_TEXT.into()),
                "{name}"
            );
        }
    }
}
