//! JSON-RPC 2.0 and MCP pieces shared by the shim and the server: message classification,
//! responses, error codes, protocol versions, tool results.
//!
//! MCP revisions: the shim speaks the handshake ("legacy") era — `initialize`,
//! `notifications/initialized`, `ping`, `tools/list`, `tools/call` — in the revisions listed
//! in [`SUPPORTED_VERSIONS`]. 2026-07-28 (stateless, no handshake) is not implemented: a
//! dual-era client probing with `server/discover` gets "method not found", which the
//! 2026-07-28 stdio binding defines as the signal to fall back to `initialize`.

use serde_json::{Map, Value, json};

/// Handshake revisions the shim speaks, newest first. An `initialize` asking for one of these
/// gets it back; any other (older, unknown, or 2026-07-28, which has no handshake) gets the
/// first, as the lifecycle's version negotiation prescribes.
pub const SUPPORTED_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// The name the shim gives itself in `initialize`.
pub const SERVER_NAME: &str = "agentworks-bridge";

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;

/// The version to answer an `initialize` asking for `requested` with.
pub fn negotiate(requested: &str) -> &'static str {
    SUPPORTED_VERSIONS
        .iter()
        .find(|v| **v == requested)
        .copied()
        .unwrap_or(SUPPORTED_VERSIONS[0])
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
        }
    }

    pub fn to_value(&self) -> Value {
        json!({ "code": self.code, "message": self.message })
    }
}

/// What one incoming line is.
#[derive(Debug)]
pub enum Incoming {
    /// A request: answer it with `id`.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// A notification: never answered.
    Notification { method: String },
    /// A response (we never send requests that expect one): ignored.
    Response,
    /// Not a valid message. `id` is the request's id when it could be read, else null.
    Invalid { id: Value, error: RpcError },
}

/// Classifies one line: JSON-RPC 2.0, a single object (MCP has no batches since
/// 2025-06-18), string or integer ids (MCP forbids null).
pub fn classify(line: &[u8]) -> Incoming {
    let value: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => {
            return Incoming::Invalid {
                id: Value::Null,
                error: RpcError::new(PARSE_ERROR, format!("parse error: {e}")),
            };
        }
    };
    let Value::Object(mut obj) = value else {
        return Incoming::Invalid {
            id: Value::Null,
            error: RpcError::new(
                INVALID_REQUEST,
                "invalid request: a message must be one JSON object (batches are not supported)",
            ),
        };
    };
    let id = match obj.remove("id") {
        None => None,
        Some(id @ (Value::String(_) | Value::Number(_))) => Some(id),
        Some(_) => {
            return Incoming::Invalid {
                id: Value::Null,
                error: RpcError::new(
                    INVALID_REQUEST,
                    "invalid request: id must be a string or a number",
                ),
            };
        }
    };
    let invalid = |id: Option<Value>, message: &str| Incoming::Invalid {
        id: id.unwrap_or(Value::Null),
        error: RpcError::new(INVALID_REQUEST, format!("invalid request: {message}")),
    };
    if obj.get("jsonrpc") != Some(&Value::String("2.0".into())) {
        return invalid(id, "\"jsonrpc\" must be \"2.0\"");
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        Some(_) => return invalid(id, "\"method\" must be a string"),
        None if obj.contains_key("result") || obj.contains_key("error") => {
            return Incoming::Response;
        }
        None => return invalid(id, "no \"method\""),
    };
    let params = match obj.remove("params") {
        None => Value::Object(Map::new()),
        Some(p @ Value::Object(_)) => p,
        Some(_) => return invalid(id, "\"params\" must be an object"),
    };
    match id {
        Some(id) => Incoming::Request { id, method, params },
        None => Incoming::Notification { method },
    }
}

pub fn result_response(id: Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

pub fn error_response(id: Value, error: &RpcError) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": error.to_value() })
}

/// An MCP tool result: one text block; `isError` marks a refusal or a failure the model
/// should read and act on (as opposed to a protocol error).
pub fn tool_result(text: impl Into<String>, is_error: bool) -> Value {
    json!({
        "content": [{ "type": "text", "text": text.into() }],
        "isError": is_error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_echoes_known_versions_only() {
        assert_eq!(negotiate("2025-06-18"), "2025-06-18");
        assert_eq!(negotiate("2024-11-05"), "2024-11-05");
        assert_eq!(negotiate("2026-07-28"), "2025-11-25");
        assert_eq!(negotiate("1900-01-01"), "2025-11-25");
    }

    #[test]
    fn classification() {
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Incoming::Request { method, .. } if method == "ping"
        ));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Incoming::Notification { .. }
        ));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            Incoming::Response
        ));
        for (line, code) in [
            (&b"{nope"[..], PARSE_ERROR),
            (b"[1,2]", INVALID_REQUEST),
            (
                br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                INVALID_REQUEST,
            ),
            (
                br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
                INVALID_REQUEST,
            ),
            (
                br#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#,
                INVALID_REQUEST,
            ),
            (br#"{"jsonrpc":"2.0","id":1}"#, INVALID_REQUEST),
            (b"\xff\xfe", PARSE_ERROR),
        ] {
            match classify(line) {
                Incoming::Invalid { error, .. } => assert_eq!(error.code, code, "{line:?}"),
                other => panic!("{line:?}: {other:?}"),
            }
        }
        // The id survives an invalid request, so the client can match the error to it.
        match classify(br#"{"jsonrpc":"2.0","id":"a","method":7}"#) {
            Incoming::Invalid { id, .. } => assert_eq!(id, json!("a")),
            other => panic!("{other:?}"),
        }
    }
}
