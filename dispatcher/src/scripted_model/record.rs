//! The record: one JSONL line per request, so a test sees what each request carried (the
//! tool results of the steps before) and what the model answered, without reading the CLI.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One request and its answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recorded {
    /// The request path, without the query.
    pub path: String,
    /// The wire it spoke (`anthropic`, `responses`, `gemini`, `chat`), or `null` for a path
    /// the server does not serve (answered 404).
    pub wire: Option<String>,
    /// The number of tool results the request carried.
    pub step: usize,
    /// Their texts, in order.
    pub tool_results: Vec<String>,
    /// The tool called (`null` for a text answer).
    pub tool: Option<String>,
    /// The call's input (JSON arguments, or a freeform tool's text), or the answer's text.
    pub answer: Value,
}

impl Recorded {
    /// Every line of a record file.
    pub fn read_all(path: &Path) -> std::io::Result<Vec<Recorded>> {
        std::fs::read_to_string(path)?
            .lines()
            .map(|l| serde_json::from_str(l).map_err(std::io::Error::other))
            .collect()
    }
}

/// Appends lines to the record file, one writer at a time.
pub struct Recorder {
    file: Mutex<File>,
}

impl Recorder {
    pub fn new(file: File) -> Recorder {
        Recorder {
            file: Mutex::new(file),
        }
    }

    pub fn record(&self, line: &Recorded) {
        let mut text = serde_json::to_string(line).unwrap_or_default();
        text.push('\n');
        if let Ok(mut f) = self.file.lock() {
            let _ = f.write_all(text.as_bytes()).and_then(|()| f.flush());
        }
    }
}
