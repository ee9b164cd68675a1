//! The script: the actions the prompt's marker lines ask for, and the answer due at a step.
//!
//! A marker is a line of the prompt (leading spaces allowed):
//! - `AGENTWORKS-RUN: <command>`: run `<command>` with the CLI's shell tool;
//! - `AGENTWORKS-WRITE: <path> <content>`: write `<content>` (the rest of the line) to
//!   `<path>` (no spaces; absolute, as Claude's `Write` and Gemini's `write_file` want) with
//!   the CLI's write tool.
//!
//! The actions run in the order of their lines, one per model turn; after the last the model
//! answers with a final text.

use serde_json::Value;

pub const RUN_MARKER: &str = "AGENTWORKS-RUN:";
pub const WRITE_MARKER: &str = "AGENTWORKS-WRITE:";

/// The text of the final answer once every action ran.
pub const DONE_TEXT: &str = "AGENTWORKS-DONE";

/// One step of a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// The shell tool runs `command` (one line).
    Run { command: String },
    /// The write tool writes `content` (one line) to `path` (no spaces).
    Write { path: String, content: String },
}

/// A prompt that asks for `actions`: their marker lines between a first and a last line of
/// plain text (`opencode run` wraps a message with spaces in quotes, which would glue a quote
/// onto a marker on either end).
pub fn prompt(actions: &[Action]) -> String {
    let mut text = String::from("Run the scripted steps.\n");
    for action in actions {
        let line = match action {
            Action::Run { command } => format!("{RUN_MARKER} {command}"),
            Action::Write { path, content } => format!("{WRITE_MARKER} {path} {content}"),
        };
        text.push_str(&line);
        text.push('\n');
    }
    text.push_str("Then stop.");
    text
}

/// The actions of the first string in the request that holds a marker line: the prompt. Every
/// CLI sends the person's prompt once per request, and the later occurrences of a marker (a
/// title request's copy, a tool's echo) come after it or repeat it.
pub fn actions(request: &Value) -> Vec<Action> {
    let mut found = Vec::new();
    first_with_markers(request, &mut found);
    found
}

fn first_with_markers(v: &Value, found: &mut Vec<Action>) {
    if !found.is_empty() {
        return;
    }
    match v {
        Value::String(s) => *found = parse(s),
        Value::Array(items) => items.iter().for_each(|x| first_with_markers(x, found)),
        Value::Object(map) => map.values().for_each(|x| first_with_markers(x, found)),
        _ => {}
    }
}

/// The marker lines of one text, in order.
pub fn parse(text: &str) -> Vec<Action> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim_start();
            if let Some(command) = line.strip_prefix(RUN_MARKER) {
                return Some(Action::Run {
                    command: command.trim().to_string(),
                });
            }
            let rest = line.strip_prefix(WRITE_MARKER)?.trim_start();
            let (path, content) = rest.split_once(' ').unwrap_or((rest, ""));
            Some(Action::Write {
                path: path.to_string(),
                content: content.to_string(),
            })
        })
        .collect()
}

/// The action due once `step` tool results came back, or `None` when the script is done.
pub fn due(actions: &[Action], step: usize) -> Option<&Action> {
    actions.get(step)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_markers_in_order_from_the_first_text_that_has_them() {
        let request = json!({"messages": [
            {"content": "no markers here"},
            {"content": "do this:\n  AGENTWORKS-RUN: echo hi > /tmp/m\nAGENTWORKS-WRITE: /tmp/f two words"},
            {"content": "AGENTWORKS-RUN: ignored, a later copy"},
        ]});
        assert_eq!(
            actions(&request),
            vec![
                Action::Run {
                    command: "echo hi > /tmp/m".into()
                },
                Action::Write {
                    path: "/tmp/f".into(),
                    content: "two words".into()
                },
            ]
        );
        assert_eq!(due(&actions(&request), 2), None);
    }

    #[test]
    fn a_prompt_reads_back_as_its_actions() {
        let steps = vec![
            Action::Run {
                command: "echo a > /tmp/a".into(),
            },
            Action::Write {
                path: "/tmp/b".into(),
                content: "b c".into(),
            },
        ];
        // Quoted the way `opencode run` quotes it.
        let quoted = format!("\"{}\"", prompt(&steps));
        assert_eq!(parse(&quoted), steps);
    }
}
