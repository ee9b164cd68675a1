//! The tool a step calls: picked by name from the tools the request declares, its arguments
//! filled from the tool's declared JSON schema.

use serde_json::{Map, Value, json};

use super::script::Action;

/// Each CLI's shell tool, by the name it declares.
const SHELL_TOOLS: &[&str] = &["Bash", "exec_command", "run_shell_command", "bash", "shell"];
/// Each CLI's file-writing tool.
const WRITE_TOOLS: &[&str] = &["Write", "write_file", "write", "apply_patch"];

/// Argument names that take the command, the path, the content.
const COMMAND_ARGS: &[&str] = &["command", "cmd"];
const PATH_ARGS: &[&str] = &["file_path", "path", "filePath", "absolute_path"];
const CONTENT_ARGS: &[&str] = &["content", "contents", "text"];

/// A tool as the request declares it.
#[derive(Debug, Clone, PartialEq)]
pub struct Declared {
    pub name: String,
    /// The JSON schema of its arguments; `None` for a freeform tool (Codex's `apply_patch`),
    /// which takes its input as plain text.
    pub schema: Option<Value>,
}

/// A call of one declared tool.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub tool: String,
    pub input: CallInput,
}

#[derive(Debug, Clone, PartialEq)]
pub enum CallInput {
    /// A JSON object, per the tool's schema.
    Json(Value),
    /// A freeform tool's text.
    Text(String),
}

impl CallInput {
    /// The input as a JSON object (a freeform tool's text as `{"input": …}`), for the wires
    /// whose calls carry an object.
    pub fn as_json(&self) -> Value {
        match self {
            CallInput::Json(v) => v.clone(),
            CallInput::Text(t) => json!({ "input": t }),
        }
    }

    /// The input as the wire's string form (JSON-encoded arguments, or the text itself).
    pub fn as_string(&self) -> String {
        match self {
            CallInput::Json(v) => v.to_string(),
            CallInput::Text(t) => t.clone(),
        }
    }
}

/// The call that performs `action` with one of `declared`, or why none can.
pub fn call_for(action: &Action, declared: &[Declared]) -> Result<Call, String> {
    let wanted = match action {
        Action::Run { .. } => SHELL_TOOLS,
        Action::Write { .. } => WRITE_TOOLS,
    };
    let tool = wanted
        .iter()
        .find_map(|name| declared.iter().find(|d| d.name == *name))
        .ok_or_else(|| {
            let names: Vec<&str> = declared.iter().map(|d| d.name.as_str()).collect();
            format!("none of the tools {wanted:?} is declared (declared: {names:?})")
        })?;
    let input = match (&tool.schema, action) {
        (None, Action::Write { path, content }) => CallInput::Text(add_file_patch(path, content)),
        (None, Action::Run { command }) => CallInput::Text(command.clone()),
        (Some(schema), _) => CallInput::Json(fill(schema, action)),
    };
    Ok(Call {
        tool: tool.name.clone(),
        input,
    })
}

/// The patch that creates `path` holding `content` and a final newline, in the format of
/// Codex's `apply_patch`.
fn add_file_patch(path: &str, content: &str) -> String {
    format!("*** Begin Patch\n*** Add File: {path}\n+{content}\n*** End Patch\n")
}

/// An arguments object for `schema`: the action's values where a property's name says what it
/// takes, a neutral value for every other required property, nothing for the optional rest.
fn fill(schema: &Value, action: &Action) -> Value {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut args = Map::new();
    let Some(properties) = schema["properties"].as_object() else {
        return Value::Object(args);
    };
    for (name, property) in properties {
        let value = match action {
            Action::Run { command } if COMMAND_ARGS.contains(&name.as_str()) => json!(command),
            Action::Write { path, .. } if PATH_ARGS.contains(&name.as_str()) => json!(path),
            Action::Write { content, .. } if CONTENT_ARGS.contains(&name.as_str()) => {
                json!(content)
            }
            _ if required.contains(&name.as_str()) => neutral(property),
            _ => continue,
        };
        args.insert(name.clone(), value);
    }
    Value::Object(args)
}

/// A value of the property's type that asks for nothing: the first of an enum, else empty.
fn neutral(property: &Value) -> Value {
    if let Some(first) = property["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    let kind = match &property["type"] {
        Value::Array(kinds) => kinds.first().and_then(Value::as_str).unwrap_or("string"),
        other => other.as_str().unwrap_or("string"),
    };
    match kind.to_ascii_lowercase().as_str() {
        "boolean" => json!(false),
        "integer" | "number" => json!(0),
        "array" => json!([]),
        "object" => json!({}),
        "null" => Value::Null,
        _ => json!(""),
    }
}

/// A value for a structured-output schema (Gemini's model router asks for one): every
/// property filled, strings with `text`, numbers with 1, so a router picks its simplest model.
pub fn answer_for_schema(schema: &Value, text: &str) -> Value {
    let kind = schema["type"]
        .as_str()
        .unwrap_or("object")
        .to_ascii_lowercase();
    match kind.as_str() {
        "object" => {
            let mut out = Map::new();
            if let Some(properties) = schema["properties"].as_object() {
                for (name, property) in properties {
                    out.insert(name.clone(), answer_for_schema(property, text));
                }
            }
            Value::Object(out)
        }
        _ if schema["enum"].as_array().is_some_and(|e| !e.is_empty()) => schema["enum"][0].clone(),
        "integer" | "number" => json!(1),
        "boolean" => json!(false),
        "array" => json!([]),
        _ => json!(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declared(name: &str, schema: Value) -> Declared {
        Declared {
            name: name.into(),
            schema: Some(schema),
        }
    }

    #[test]
    fn fills_the_command_and_every_required_property() {
        let schema = json!({"type": "object", "required": ["command", "description", "n"],
            "properties": {"command": {"type": "string"}, "description": {"type": "string"},
            "n": {"type": "integer"}, "timeout": {"type": "number"}}});
        let call = call_for(
            &Action::Run {
                command: "echo hi".into(),
            },
            &[declared("Read", json!({})), declared("Bash", schema)],
        )
        .unwrap();
        assert_eq!(call.tool, "Bash");
        assert_eq!(
            call.input,
            CallInput::Json(json!({"command": "echo hi", "description": "", "n": 0}))
        );
    }

    #[test]
    fn writes_through_a_freeform_patch_tool() {
        let call = call_for(
            &Action::Write {
                path: "/w/f.txt".into(),
                content: "hello".into(),
            },
            &[Declared {
                name: "apply_patch".into(),
                schema: None,
            }],
        )
        .unwrap();
        assert_eq!(
            call.input.as_string(),
            "*** Begin Patch\n*** Add File: /w/f.txt\n+hello\n*** End Patch\n"
        );
    }

    #[test]
    fn says_which_tools_were_declared_when_none_fits() {
        let err = call_for(
            &Action::Write {
                path: "/f".into(),
                content: String::new(),
            },
            &[declared("Bash", json!({}))],
        )
        .unwrap_err();
        assert!(err.contains("[\"Bash\"]"), "{err}");
    }

    #[test]
    fn answers_a_router_schema() {
        let schema = json!({"type": "OBJECT", "properties": {
            "complexity_reasoning": {"type": "STRING"}, "complexity_score": {"type": "INTEGER"}}});
        assert_eq!(
            answer_for_schema(&schema, "simple"),
            json!({"complexity_reasoning": "simple", "complexity_score": 1})
        );
    }
}
