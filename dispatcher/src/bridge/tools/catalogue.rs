//! The tool catalogue: the four tools' names, limits and `tools/list` schemas.

use serde_json::{Value, json};

/// Most bytes `read_file` returns per call (its `length` limit and default). Even if every
/// byte needed a six-byte JSON escape the reply stays under [`super::MAX_MESSAGE`].
pub const MAX_READ: u64 = 128 * 1024;
/// Most bytes of `content` one `write_file` takes.
pub const MAX_WRITE: usize = 512 * 1024;
/// Most entries `list_dir` returns.
pub const MAX_LIST_ENTRIES: usize = 2000;
/// Most bytes of text `list_dir` returns.
pub const MAX_LIST_TEXT: usize = 256 * 1024;
/// Longest path accepted, in bytes.
pub const MAX_PATH: usize = 4096;
/// Longest URL accepted, in bytes.
pub const MAX_URL: usize = 2048;

/// The tool names, as `tools/list` gives them.
pub const TOOL_NAMES: [&str; 4] = ["read_file", "write_file", "list_dir", "open_url"];

/// `tools/list`'s `tools`.
pub fn tool_list() -> Value {
    let path = json!({
        "type": "string",
        "description": "Absolute path. No '..' components; relative paths are refused."
    });
    json!([
        {
            "name": "read_file",
            "title": "Read a file",
            "description": format!(
                "Read a UTF-8 text file through the dispatcher, checked against this chat's \
                 sandbox policy. Returns at most {MAX_READ} bytes per call; use offset to read on."
            ),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "path": path,
                    "offset": { "type": "integer", "minimum": 0, "description": "Byte offset to start at (default 0)." },
                    "length": { "type": "integer", "minimum": 1, "maximum": MAX_READ, "description": format!("Most bytes to return (default and limit {MAX_READ}).") }
                },
                "required": ["path"],
                "additionalProperties": false
            },
            "annotations": { "readOnlyHint": true, "openWorldHint": false }
        },
        {
            "name": "write_file",
            "title": "Write a file",
            "description": format!(
                "Replace a file's content with UTF-8 text through the dispatcher, checked against \
                 this chat's sandbox policy. The file must exist unless create is true; its folder \
                 must exist. Never writes through a symbolic link. At most {MAX_WRITE} bytes."
            ),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "path": path,
                    "content": { "type": "string", "description": "The whole new content." },
                    "create": { "type": "boolean", "description": "Create the file if it does not exist (default false)." }
                },
                "required": ["path", "content"],
                "additionalProperties": false
            },
            "annotations": { "readOnlyHint": false, "destructiveHint": true, "idempotentHint": true, "openWorldHint": false }
        },
        {
            "name": "list_dir",
            "title": "List a folder",
            "description": "List a folder's entries through the dispatcher, checked against this chat's sandbox policy.",
            "inputSchema": {
                "type": "object",
                "properties": { "path": path },
                "required": ["path"],
                "additionalProperties": false
            },
            "annotations": { "readOnlyHint": true, "openWorldHint": false }
        },
        {
            "name": "open_url",
            "title": "Open a URL",
            "description": "Ask the dispatcher to open an http(s) URL in the person's browser, outside the sandbox. Only URLs under the configured allowed prefixes are opened.",
            "inputSchema": {
                "type": "object",
                "properties": { "url": { "type": "string", "description": "An http:// or https:// URL." } },
                "required": ["url"],
                "additionalProperties": false
            },
            "annotations": { "readOnlyHint": true, "openWorldHint": true }
        }
    ])
}
