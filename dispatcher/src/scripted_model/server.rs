//! The server: a loopback listener, a thread per connection, a handle that stops it on drop.

use std::fs::OpenOptions;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use serde_json::{Value, json};

use super::http::{self, Request};
use super::record::{Recorded, Recorder};
use super::tools::CallInput;
use super::turn;
use super::wire::{Answer, Wire};

#[derive(Debug, thiserror::Error)]
pub enum ScriptedModelError {
    #[error(
        "{0} is not a loopback address: the scripted model listens on 127.0.0.1 or ::1 only \
         (it answers anyone who connects, and runs nothing itself)"
    )]
    NotLoopback(SocketAddr),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot open the record file {path}: {source}")]
    Record {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A running scripted model. Dropping it stops the listener.
pub struct ScriptedModel {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl ScriptedModel {
    /// A scripted model on a free port of 127.0.0.1, recording every request to `record`
    /// (appended to, created if missing).
    pub fn start(record: &Path) -> Result<ScriptedModel, ScriptedModelError> {
        ScriptedModel::bind(SocketAddr::from(([127, 0, 0, 1], 0)), record)
    }

    /// A scripted model on `listen`, which must be a loopback address.
    pub fn bind(listen: SocketAddr, record: &Path) -> Result<ScriptedModel, ScriptedModelError> {
        if !listen.ip().is_loopback() {
            return Err(ScriptedModelError::NotLoopback(listen));
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(record)
            .map_err(|source| ScriptedModelError::Record {
                path: record.to_path_buf(),
                source,
            })?;
        let bind_error = |source| ScriptedModelError::Bind {
            addr: listen,
            source,
        };
        let listener = TcpListener::bind(listen).map_err(bind_error)?;
        let addr = listener.local_addr().map_err(bind_error)?;
        let stop = Arc::new(AtomicBool::new(false));
        let recorder = Arc::new(Recorder::new(file));
        let stopping = Arc::clone(&stop);
        let accept = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let recorder = Arc::clone(&recorder);
                std::thread::spawn(move || serve(&stream, &recorder));
            }
        });
        Ok(ScriptedModel {
            addr,
            stop,
            accept: Some(accept),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, the base URL to give a CLI (most want `/v1` after it).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Serves until the process ends (the `dispatcher scripted-model` command).
    pub fn wait(mut self) {
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

impl Drop for ScriptedModel {
    fn drop(&mut self) {
        let Some(accept) = self.accept.take() else {
            return;
        };
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocked accept so it sees the flag.
        let _ = TcpStream::connect(self.addr);
        let _ = accept.join();
    }
}

/// Answers one connection's request and records it.
fn serve(stream: &TcpStream, recorder: &Recorder) {
    let request = match http::read_request(stream) {
        Ok(Some(request)) => request,
        Ok(None) => return,
        Err(refused) => {
            return error(stream, refused.status, &refused.message);
        }
    };
    let Some(wire) = Wire::for_path(&request.path) else {
        recorder.record(&unserved(&request));
        let message = format!(
            "{} {}: the scripted model serves POST …/messages, …/responses, \
             …/chat/completions and …:streamGenerateContent / …:generateContent",
            request.method, request.path
        );
        return error(stream, 404, &message);
    };
    let body: Value = match serde_json::from_slice(&request.body) {
        Ok(body) => body,
        Err(e) => return error(stream, 400, &format!("the body is not JSON: {e}")),
    };
    let seen = wire.read(&request.path, &body);
    let answer = turn::answer(&body, &seen);
    let step = seen.tool_results.len();
    let reply = wire.reply(&answer, &seen, step);
    let (tool, answered) = match &answer {
        Answer::Call(call) => (
            Some(call.tool.clone()),
            match &call.input {
                CallInput::Json(v) => v.clone(),
                CallInput::Text(t) => json!(t),
            },
        ),
        Answer::Text(text) => (None, json!(text)),
    };
    // Recorded before the answer goes out: once the CLI has it, the line is on disk.
    recorder.record(&Recorded {
        path: request.path,
        wire: Some(wire_name(wire)),
        step,
        tool_results: seen.tool_results,
        tool,
        answer: answered,
    });
    http::respond(stream, 200, reply.content_type, &reply.body);
}

fn wire_name(wire: Wire) -> String {
    serde_json::to_value(wire)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn unserved(request: &Request) -> Recorded {
    Recorded {
        path: request.path.clone(),
        wire: None,
        step: 0,
        tool_results: Vec::new(),
        tool: None,
        answer: Value::Null,
    }
}

fn error(stream: &TcpStream, status: u16, message: &str) {
    let body = json!({"error": {"type": "scripted_model", "message": message}});
    http::respond(
        stream,
        status,
        "application/json",
        body.to_string().as_bytes(),
    );
}
