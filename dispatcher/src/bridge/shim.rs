//! The shim: an MCP server on stdio, run inside the sandbox as the CLI's only MCP server
//! (`dispatcher bridge --socket <runtime>/bridge.sock`). It answers the handshake and `ping`
//! itself and forwards `tools/list` and `tools/call` to the chat's socket. It never touches a
//! file: everything it could do by itself, the sandbox already decides; everything beyond
//! that, the dispatcher decides.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::mcp::{
    self, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, Incoming, METHOD_NOT_FOUND, RpcError,
    SERVER_NAME,
};
use super::wire::{Frame, MAX_MESSAGE, read_frame, write_frame};
use super::{BridgeError, io_error};

/// How long the shim waits for the dispatcher's reply to one call before it gives up on
/// the connection (and says so to the client).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(120);

const INSTRUCTIONS: &str = "Tools of the AgentWorks dispatcher. They run outside this CLI's sandbox, \
and every call is checked against the same policy as the sandbox: this chat's runtime and workflows \
are open, other chats, other workflows and the product's own files are refused. Paths must be absolute.";

/// Runs the shim until `stdin` ends. Errors only when stdin or stdout fail; a dispatcher that
/// is not there or misbehaves is reported to the client per request, and the next request
/// connects again.
pub fn run_shim(
    socket: &Path,
    mut stdin: impl BufRead,
    mut stdout: impl Write,
) -> Result<(), BridgeError> {
    let mut shim = Shim {
        socket: socket.to_path_buf(),
        conn: None,
        next_id: 1,
        initialized: false,
    };
    let mut line = Vec::new();
    loop {
        let reply = match read_frame(&mut stdin, &mut line, MAX_MESSAGE)
            .map_err(io_error("cannot read stdin"))?
        {
            Frame::Eof => return Ok(()),
            Frame::TooLong => Some(mcp::error_response(
                Value::Null,
                &RpcError::new(
                    INVALID_REQUEST,
                    format!("message longer than {MAX_MESSAGE} bytes; it was dropped"),
                ),
            )),
            Frame::Line if line.iter().all(u8::is_ascii_whitespace) => None,
            Frame::Line => shim.handle(&line),
        };
        if let Some(reply) = reply {
            write_frame(&mut stdout, &reply).map_err(io_error("cannot write stdout"))?;
        }
    }
}

struct Conn {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

struct Shim {
    socket: PathBuf,
    conn: Option<Conn>,
    next_id: u64,
    initialized: bool,
}

/// Why a forwarded request got no reply.
enum Forward {
    /// Nothing was sent: the dispatcher's socket could not be reached.
    Unreachable(String),
    /// Sent, but no valid reply came back: the call may or may not have been done.
    Broken(String),
}

impl Shim {
    fn handle(&mut self, line: &[u8]) -> Option<Value> {
        let (id, method, params) = match mcp::classify(line) {
            Incoming::Request { id, method, params } => (id, method, params),
            Incoming::Invalid { id, error } => return Some(mcp::error_response(id, &error)),
            // notifications/initialized, notifications/cancelled (calls are answered in
            // order and are short), and replies to requests we never send.
            Incoming::Notification { .. } | Incoming::Response => return None,
        };
        let reply = match method.as_str() {
            "initialize" => self.initialize(&params),
            "ping" => Ok(json!({})),
            "tools/list" | "tools/call" if !self.initialized => Err(RpcError::new(
                INVALID_REQUEST,
                "the session is not initialized: send initialize first",
            )),
            "tools/list" => self.tools_list(),
            "tools/call" => self.tools_call(&params),
            other => Err(RpcError::new(
                METHOD_NOT_FOUND,
                format!("method not found: {other:?}"),
            )),
        };
        Some(match reply {
            Ok(result) => mcp::result_response(id, result),
            Err(e) => mcp::error_response(id, &e),
        })
    }

    fn initialize(&mut self, params: &Value) -> Result<Value, RpcError> {
        let Some(requested) = params.get("protocolVersion").and_then(Value::as_str) else {
            return Err(RpcError::new(
                INVALID_PARAMS,
                "initialize needs params.protocolVersion, a string",
            ));
        };
        self.initialized = true;
        Ok(json!({
            "protocolVersion": mcp::negotiate(requested),
            "capabilities": { "tools": { "listChanged": false } },
            "serverInfo": { "name": SERVER_NAME, "version": env!("CARGO_PKG_VERSION") },
            "instructions": INSTRUCTIONS,
        }))
    }

    fn tools_list(&mut self) -> Result<Value, RpcError> {
        match self.forward("tools/list", json!({})) {
            Ok(reply) => reply,
            Err(Forward::Unreachable(why) | Forward::Broken(why)) => Err(RpcError::new(
                INTERNAL_ERROR,
                format!("the dispatcher's bridge: {why}"),
            )),
        }
    }

    fn tools_call(&mut self, params: &Value) -> Result<Value, RpcError> {
        let Some(name) = params.get("name").and_then(Value::as_str) else {
            return Err(RpcError::new(
                INVALID_PARAMS,
                "tools/call needs params.name, a string",
            ));
        };
        let arguments = match params.get("arguments") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(a @ Value::Object(_)) => a.clone(),
            Some(_) => {
                return Err(RpcError::new(
                    INVALID_PARAMS,
                    "tools/call params.arguments must be an object",
                ));
            }
        };
        match self.forward(
            "tools/call",
            json!({ "name": name, "arguments": arguments }),
        ) {
            Ok(reply) => reply,
            // A tool result, so the model reads it (a protocol error may never reach it).
            Err(Forward::Unreachable(why)) => Ok(mcp::tool_result(
                format!("the dispatcher's bridge is not reachable, nothing was done: {why}"),
                true,
            )),
            Err(Forward::Broken(why)) => Ok(mcp::tool_result(
                format!(
                    "the dispatcher's bridge did not answer properly; the call may or may not have been done: {why}"
                ),
                true,
            )),
        }
    }

    /// Sends one request on the chat's socket and waits for the reply with the same id. Any
    /// failure drops the connection, so a reply can never be matched to a later request.
    fn forward(&mut self, method: &str, params: Value) -> Result<Result<Value, RpcError>, Forward> {
        if self.conn.is_none() {
            self.conn = Some(self.connect().map_err(Forward::Unreachable)?);
        }
        let id = self.next_id;
        self.next_id += 1;
        let result = self.exchange(id, method, params);
        if result.is_err() {
            self.conn = None;
        }
        result.map_err(Forward::Broken)
    }

    fn connect(&self) -> Result<Conn, String> {
        let stream = UnixStream::connect(&self.socket)
            .map_err(|e| format!("cannot connect to {}: {e}", self.socket.display()))?;
        stream
            .set_read_timeout(Some(REPLY_TIMEOUT))
            .and_then(|()| stream.set_write_timeout(Some(REPLY_TIMEOUT)))
            .map_err(|e| format!("cannot set timeouts: {e}"))?;
        let reader = stream
            .try_clone()
            .map_err(|e| format!("cannot clone the socket: {e}"))?;
        Ok(Conn {
            reader: BufReader::new(reader),
            writer: stream,
        })
    }

    fn exchange(
        &mut self,
        id: u64,
        method: &str,
        params: Value,
    ) -> Result<Result<Value, RpcError>, String> {
        let conn = self.conn.as_mut().expect("connected");
        let request = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        write_frame(&mut conn.writer, &request).map_err(|e| format!("cannot send: {e}"))?;
        let mut line = Vec::new();
        match read_frame(&mut conn.reader, &mut line, MAX_MESSAGE) {
            Ok(Frame::Line) => {}
            Ok(Frame::TooLong) => {
                return Err(format!("its reply is longer than {MAX_MESSAGE} bytes"));
            }
            Ok(Frame::Eof) => return Err("it closed the connection".into()),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(format!("no reply within {} s", REPLY_TIMEOUT.as_secs()));
            }
            Err(e) => return Err(format!("cannot read its reply: {e}")),
        }
        let reply: Value =
            serde_json::from_slice(&line).map_err(|e| format!("its reply is not JSON: {e}"))?;
        if reply.get("id").and_then(Value::as_u64) != Some(id) {
            return Err(format!(
                "its reply has id {} for request {id}",
                reply.get("id").unwrap_or(&Value::Null)
            ));
        }
        match (reply.get("result"), reply.get("error")) {
            (Some(result @ Value::Object(_)), None) => Ok(Ok(result.clone())),
            (None, Some(error)) => {
                let code = error.get("code").and_then(Value::as_i64);
                let message = error.get("message").and_then(Value::as_str);
                match (code, message) {
                    (Some(code), Some(message)) => Ok(Err(RpcError::new(code, message))),
                    _ => Err("its error reply has no code or message".into()),
                }
            }
            _ => Err("its reply has neither a result object nor an error".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixListener;

    use super::*;

    /// A misbehaving dispatcher: each request's tool name says how to answer it.
    fn fake_dispatcher(socket: &Path) -> std::thread::JoinHandle<()> {
        let listener = UnixListener::bind(socket).unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let mut stream = stream.unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap() > 0 {
                    let req: Value = serde_json::from_str(&line).unwrap();
                    line.clear();
                    let id = req["id"].as_u64().unwrap();
                    let reply = match req["params"]["name"].as_str().unwrap_or("list") {
                        "wrong_id" => json!({"jsonrpc":"2.0","id": id + 1,"result":{"content":[],"isError":false}}).to_string(),
                        "garbage" => "not json".to_string(),
                        "no_result" => json!({"jsonrpc":"2.0","id": id}).to_string(),
                        "huge" => "x".repeat(MAX_MESSAGE + 1),
                        "close" => break,
                        "stop" => return,
                        _ => json!({"jsonrpc":"2.0","id": id,"result":{"content":[{"type":"text","text":"fine"}],"isError":false}}).to_string(),
                    };
                    stream.write_all(format!("{reply}\n").as_bytes()).unwrap();
                }
            }
        })
    }

    fn run(socket: &Path, calls: &[&str]) -> Vec<Value> {
        let mut input = String::from(
            "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\"}}\n",
        );
        for (i, name) in calls.iter().enumerate() {
            input.push_str(&format!(
                "{}\n",
                json!({"jsonrpc":"2.0","id": i + 1,"method":"tools/call","params":{"name": name}})
            ));
        }
        let mut out = Vec::new();
        run_shim(socket, input.as_bytes(), &mut out).unwrap();
        out.split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .skip(1)
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect()
    }

    fn text(v: &Value) -> &str {
        assert_eq!(v["result"]["isError"], json!(true), "{v}");
        v["result"]["content"][0]["text"].as_str().unwrap()
    }

    #[test]
    fn replies_that_do_not_match_are_never_taken() {
        let d = tempfile::tempdir().unwrap();
        let socket = d.path().join("s");
        let server = fake_dispatcher(&socket);
        let out = run(
            &socket,
            &[
                "ok",
                "wrong_id",
                "ok",
                "garbage",
                "no_result",
                "huge",
                "close",
                "ok",
                "stop",
            ],
        );
        assert_eq!(out[0]["result"]["content"][0]["text"], json!("fine"));
        assert!(text(&out[1]).contains("has id"), "{}", out[1]);
        // After a mismatch the connection is dropped and a fresh one serves the next call.
        assert_eq!(out[2]["result"]["content"][0]["text"], json!("fine"));
        assert!(text(&out[3]).contains("not JSON"));
        assert!(text(&out[4]).contains("neither"));
        assert!(text(&out[5]).contains("longer than"));
        assert!(text(&out[6]).contains("closed the connection"));
        assert!(text(&out[6]).contains("may or may not"));
        assert_eq!(out[7]["result"]["content"][0]["text"], json!("fine"));
        // Every reply carries the client's own id.
        for (i, r) in out.iter().enumerate() {
            assert_eq!(r["id"], json!(i + 1));
        }
        server.join().unwrap();
        // Nobody listening: said plainly, and nothing was done.
        let out = run(&socket, &["ok"]);
        assert!(text(&out[0]).contains("not reachable, nothing was done"));
    }
}
