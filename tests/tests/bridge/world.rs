//! The fixture: a temporary state root with chats and workflows, each chat's policy written
//! by `LaunchGrants::policy_toml` and its socket served, and MCP sessions through the shim.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dispatcher::bridge::{
    self, BridgeEvent, BridgeHandle, ChatContext, OpenOutcome, Opener, SOCKET_NAME,
};
use dispatcher::grants::{Attach, LaunchGrants};
use dispatcher::ids::{ChatId, WorkflowId};
use dispatcher::state::{ChatSettings, StateRoot};
use sandboxer::Target;
use sandboxer::policy::ResolveOptions;
use serde_json::{Value, json};

// ---- fixture -------------------------------------------------------------------------------

pub struct World {
    pub dir: tempfile::TempDir,
    pub state: StateRoot,
    pub home: PathBuf,
}

pub struct Chat {
    pub id: ChatId,
    pub runtime: PathBuf,
    pub workflow: PathBuf,
    pub socket: PathBuf,
    pub events: Arc<Mutex<Vec<BridgeEvent>>>,
    pub opened: Arc<Mutex<Vec<String>>>,
    pub handle: BridgeHandle,
}

impl World {
    /// A state root whose config allows opening only two URL prefixes.
    pub fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap().join("state");
        let (state, _) = StateRoot::init(&root, None).unwrap();
        let mut config: Value =
            serde_json::from_str(&std::fs::read_to_string(state.config_json()).unwrap()).unwrap();
        config["open_url"]["allow"] = json!(["https://docs.example.com/", "http://localhost:8080"]);
        std::fs::write(
            state.config_json(),
            serde_json::to_string_pretty(&config).unwrap(),
        )
        .unwrap();
        let state = StateRoot::open(&root).unwrap();
        let home = std::fs::canonicalize(dir.path()).unwrap().join("home");
        std::fs::create_dir(&home).unwrap();
        World { dir, state, home }
    }

    /// A world with chat `c1` on `w1`, whose workflow holds `f` ("ok"), and the disk as it
    /// is then.
    pub fn with_file_f() -> (World, Chat, BTreeMap<PathBuf, String>) {
        let w = World::new();
        let c = w.chat("c1", "w1", &[]);
        std::fs::write(c.workflow.join("f"), "ok").unwrap();
        let before = w.snapshot();
        (w, c, before)
    }

    pub fn workflow(&self, name: &str) -> PathBuf {
        let wf = WorkflowId::new(name).unwrap();
        match self.state.require_workflow(&wf) {
            Ok(()) => self.state.workflow(&wf),
            Err(_) => self.state.add_workflow(&wf).unwrap(),
        }
    }

    /// A chat on workflow `wf` (plus `attach`), its policy written, its bridge served.
    /// A chat in `mode`, added to the state root; returns its id and runtime folder.
    pub fn add_chat(&self, name: &str, mode: &str) -> (ChatId, PathBuf) {
        let id = ChatId::new(name).unwrap();
        let settings = ChatSettings { mode: mode.into() };
        let runtime = self.state.add_chat(&id, &settings).unwrap();
        (id, runtime)
    }

    /// The policy a launch on workflow `wf` (plus `attach`) writes for the chat at `runtime`.
    pub fn policy_toml(&self, runtime: &Path, wf: &str, attach: &[Attach]) -> String {
        let wf = WorkflowId::new(wf).unwrap();
        LaunchGrants::new(&self.state, runtime.to_path_buf(), &wf, attach).policy_toml()
    }

    /// How policies resolve here: this host, the world's home.
    pub fn opts(&self) -> ResolveOptions {
        ResolveOptions::new(Target::host().unwrap(), self.home.clone(), true).unwrap()
    }

    pub fn chat(&self, name: &str, wf: &str, attach: &[&str]) -> Chat {
        let (id, runtime) = self.add_chat(name, "bridge-only");
        let workflow = self.workflow(wf);
        let attach: Vec<Attach> = attach.iter().map(|a| a.parse().unwrap()).collect();
        for a in &attach {
            self.workflow(a.workflow.as_str());
        }
        let policy = self.policy_toml(&runtime, wf, &attach);
        std::fs::write(runtime.join("policy.toml"), policy).unwrap();
        let opts = self.opts();
        let opened = Arc::new(Mutex::new(Vec::new()));
        let rec = opened.clone();
        let ctx = ChatContext::load(&self.state, &id, &opts)
            .unwrap()
            .with_opener(Opener::Custom(Arc::new(move |url: &str| {
                rec.lock().unwrap().push(url.to_string());
                OpenOutcome::Opened {
                    with: "test-opener".into(),
                }
            })));
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        let socket = runtime.join(SOCKET_NAME);
        let handle = bridge::serve(&socket, ctx, move |e| sink.lock().unwrap().push(e)).unwrap();
        Chat {
            id,
            runtime,
            workflow,
            socket,
            events,
            opened,
            handle,
        }
    }

    /// Every entry under the temporary folder: kind and content (files), target (links).
    pub fn snapshot(&self) -> BTreeMap<PathBuf, String> {
        fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                let m = std::fs::symlink_metadata(&p).unwrap();
                let v = if m.is_symlink() {
                    format!("link {}", std::fs::read_link(&p).unwrap().display())
                } else if m.is_dir() {
                    walk(&p, out);
                    format!("dir {:o}", m.permissions().mode())
                } else if m.is_file() {
                    format!(
                        "file {:o} {:?}",
                        m.permissions().mode(),
                        std::fs::read(&p).unwrap()
                    )
                } else {
                    "other".into()
                };
                out.insert(p, v);
            }
        }
        let mut out = BTreeMap::new();
        walk(self.dir.path(), &mut out);
        out
    }
}

// ---- MCP sessions through the in-process shim ----------------------------------------------

pub fn init_lines() -> Vec<String> {
    vec![
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"test","version":"0"}}}).to_string(),
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}).to_string(),
    ]
}

/// Runs one shim session over `lines` and returns every line it wrote, parsed.
pub fn session(socket: &Path, lines: &[String]) -> Vec<Value> {
    let mut input = lines.join("\n").into_bytes();
    input.push(b'\n');
    let mut out = Vec::new();
    bridge::run_shim(socket, &input[..], &mut out).unwrap();
    out.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

pub fn call_line(id: impl Into<Value>, tool: &str, args: Value) -> String {
    json!({"jsonrpc":"2.0","id":id.into(),"method":"tools/call","params":{"name":tool,"arguments":args}}).to_string()
}

/// One tool call in a fresh, initialized session; returns its response.
pub fn call(socket: &Path, tool: &str, args: Value) -> Value {
    let mut lines = init_lines();
    lines.push(call_line(1, tool, args));
    let out = session(socket, &lines);
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(out[1]["id"], json!(1));
    out[1].clone()
}

/// Tool arguments naming one path.
pub fn at(path: impl AsRef<Path>) -> Value {
    json!({"path": path.as_ref()})
}

/// `write_file` arguments: overwrite `path` with `content`.
pub fn put(path: impl AsRef<Path>, content: &str) -> Value {
    json!({"path": path.as_ref(), "content": content})
}

/// `write_file` arguments: create `path` with the content "x".
pub fn create(path: impl AsRef<Path>) -> Value {
    json!({"path": path.as_ref(), "content": "x", "create": true})
}

impl Chat {
    /// One tool call on this chat's socket, in a fresh session.
    pub fn call(&self, tool: &str, args: Value) -> Value {
        call(&self.socket, tool, args)
    }
}

pub fn text(resp: &Value) -> &str {
    resp["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content: {resp}"))
}

/// The message of a JSON-RPC error response.
pub fn error_message(resp: &Value) -> &str {
    resp["error"]["message"].as_str().unwrap()
}

pub fn is_error(resp: &Value) -> bool {
    resp["result"]["isError"]
        .as_bool()
        .unwrap_or_else(|| panic!("no isError: {resp}"))
}

#[track_caller]
pub fn assert_ok(resp: &Value) -> &str {
    assert!(!is_error(resp), "expected success: {resp}");
    text(resp)
}

#[track_caller]
pub fn assert_refused(resp: &Value, why: &str) {
    assert!(is_error(resp), "expected a refusal: {resp}");
    let t = text(resp);
    assert!(t.starts_with("refused: "), "not a refusal: {t}");
    assert!(t.contains(why), "refusal {t:?} does not say {why:?}");
}
