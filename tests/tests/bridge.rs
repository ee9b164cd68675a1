//! The bridge end to end, in-process: a temporary state root with chats and workflows, each
//! chat's policy written by `LaunchGrants::policy_toml`, the chat's socket served, and the shim
//! driven with scripted MCP sessions. Plus a real MCP client (the MCP Inspector CLI) driving
//! the shim as a separate process.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dispatcher::bridge::{
    self, BridgeError, BridgeEvent, BridgeHandle, CallVerdict, ChatContext, MAX_MESSAGE,
    OpenOutcome, Opener, SOCKET_NAME,
};
use dispatcher::grants::{Attach, LaunchGrants};
use dispatcher::ids::{ChatId, WorkflowId};
use dispatcher::state::{ChatSettings, StateRoot};
use sandboxer::Target;
use sandboxer::policy::ResolveOptions;
use serde_json::{Value, json};

use agentworks_e2e::{self as common, inspector_js};

// ---- fixture -------------------------------------------------------------------------------

struct World {
    dir: tempfile::TempDir,
    state: StateRoot,
    home: PathBuf,
}

struct Chat {
    id: ChatId,
    runtime: PathBuf,
    workflow: PathBuf,
    socket: PathBuf,
    events: Arc<Mutex<Vec<BridgeEvent>>>,
    opened: Arc<Mutex<Vec<String>>>,
    handle: BridgeHandle,
}

impl World {
    /// A state root whose config allows opening only two URL prefixes.
    fn new() -> World {
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
    fn with_file_f() -> (World, Chat, BTreeMap<PathBuf, String>) {
        let w = World::new();
        let c = w.chat("c1", "w1", &[]);
        std::fs::write(c.workflow.join("f"), "ok").unwrap();
        let before = w.snapshot();
        (w, c, before)
    }

    fn workflow(&self, name: &str) -> PathBuf {
        let wf = WorkflowId::new(name).unwrap();
        match self.state.require_workflow(&wf) {
            Ok(()) => self.state.workflow(&wf),
            Err(_) => self.state.add_workflow(&wf).unwrap(),
        }
    }

    /// A chat on workflow `wf` (plus `attach`), its policy written, its bridge served.
    /// A chat in `mode`, added to the state root; returns its id and runtime folder.
    fn add_chat(&self, name: &str, mode: &str) -> (ChatId, PathBuf) {
        let id = ChatId::new(name).unwrap();
        let settings = ChatSettings { mode: mode.into() };
        let runtime = self.state.add_chat(&id, &settings).unwrap();
        (id, runtime)
    }

    /// The policy a launch on workflow `wf` (plus `attach`) writes for the chat at `runtime`.
    fn policy_toml(&self, runtime: &Path, wf: &str, attach: &[Attach]) -> String {
        let wf = WorkflowId::new(wf).unwrap();
        LaunchGrants::new(&self.state, runtime.to_path_buf(), &wf, attach).policy_toml()
    }

    /// How policies resolve here: this host, the world's home.
    fn opts(&self) -> ResolveOptions {
        ResolveOptions::new(Target::host().unwrap(), self.home.clone(), true).unwrap()
    }

    fn chat(&self, name: &str, wf: &str, attach: &[&str]) -> Chat {
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
    fn snapshot(&self) -> BTreeMap<PathBuf, String> {
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

fn init_lines() -> Vec<String> {
    vec![
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"test","version":"0"}}}).to_string(),
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}).to_string(),
    ]
}

/// Runs one shim session over `lines` and returns every line it wrote, parsed.
fn session(socket: &Path, lines: &[String]) -> Vec<Value> {
    let mut input = lines.join("\n").into_bytes();
    input.push(b'\n');
    let mut out = Vec::new();
    bridge::run_shim(socket, &input[..], &mut out).unwrap();
    out.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

fn call_line(id: impl Into<Value>, tool: &str, args: Value) -> String {
    json!({"jsonrpc":"2.0","id":id.into(),"method":"tools/call","params":{"name":tool,"arguments":args}}).to_string()
}

/// One tool call in a fresh, initialized session; returns its response.
fn call(socket: &Path, tool: &str, args: Value) -> Value {
    let mut lines = init_lines();
    lines.push(call_line(1, tool, args));
    let out = session(socket, &lines);
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(out[1]["id"], json!(1));
    out[1].clone()
}

/// Tool arguments naming one path.
fn at(path: impl AsRef<Path>) -> Value {
    json!({"path": path.as_ref()})
}

/// `write_file` arguments: overwrite `path` with `content`.
fn put(path: impl AsRef<Path>, content: &str) -> Value {
    json!({"path": path.as_ref(), "content": content})
}

/// `write_file` arguments: create `path` with the content "x".
fn create(path: impl AsRef<Path>) -> Value {
    json!({"path": path.as_ref(), "content": "x", "create": true})
}

impl Chat {
    /// One tool call on this chat's socket, in a fresh session.
    fn call(&self, tool: &str, args: Value) -> Value {
        call(&self.socket, tool, args)
    }
}

fn text(resp: &Value) -> &str {
    resp["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content: {resp}"))
}

/// The message of a JSON-RPC error response.
fn error_message(resp: &Value) -> &str {
    resp["error"]["message"].as_str().unwrap()
}

fn is_error(resp: &Value) -> bool {
    resp["result"]["isError"]
        .as_bool()
        .unwrap_or_else(|| panic!("no isError: {resp}"))
}

#[track_caller]
fn assert_ok(resp: &Value) -> &str {
    assert!(!is_error(resp), "expected success: {resp}");
    text(resp)
}

#[track_caller]
fn assert_refused(resp: &Value, why: &str) {
    assert!(is_error(resp), "expected a refusal: {resp}");
    let t = text(resp);
    assert!(t.starts_with("refused: "), "not a refusal: {t}");
    assert!(t.contains(why), "refusal {t:?} does not say {why:?}");
}

// ---- tests ---------------------------------------------------------------------------------

#[test]
fn handshake_ping_and_tools_list() {
    let w = World::new();
    let c = w.chat("c1", "w1", &[]);
    let out = session(
        &c.socket,
        &[
            json!({"jsonrpc":"2.0","id":"early","method":"tools/list"}).to_string(),
            json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}).to_string(),
            json!({"jsonrpc":"2.0","method":"notifications/initialized"}).to_string(),
            json!({"jsonrpc":"2.0","id":2,"method":"ping"}).to_string(),
            json!({"jsonrpc":"2.0","id":3,"method":"tools/list","params":{}}).to_string(),
            json!({"jsonrpc":"2.0","id":4,"method":"initialize","params":{"protocolVersion":"2026-07-28"}}).to_string(),
            json!({"jsonrpc":"2.0","id":5,"method":"server/discover"}).to_string(),
            json!({"jsonrpc":"2.0","id":6,"method":"resources/list"}).to_string(),
            json!({"jsonrpc":"2.0","id":7,"method":"initialize","params":{}}).to_string(),
            json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}).to_string(),
        ],
    );
    // Notifications get no reply: 8 requests, 8 replies, in order.
    let ids: Vec<_> = out.iter().map(|r| r["id"].clone()).collect();
    assert_eq!(
        ids,
        vec![
            json!("early"),
            json!(1),
            json!(2),
            json!(3),
            json!(4),
            json!(5),
            json!(6),
            json!(7)
        ]
    );
    assert_eq!(
        out[0]["error"]["code"],
        json!(-32600),
        "tools/list before initialize"
    );
    assert_eq!(out[1]["result"]["protocolVersion"], json!("2025-06-18"));
    assert_eq!(
        out[1]["result"]["capabilities"]["tools"],
        json!({"listChanged": false})
    );
    assert_eq!(
        out[1]["result"]["serverInfo"]["name"],
        json!("agentworks-bridge")
    );
    assert_eq!(out[2]["result"], json!({}));
    let tools = out[3]["result"]["tools"].as_array().unwrap();
    let names: Vec<_> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["read_file", "write_file", "list_dir", "open_url"]);
    for t in tools {
        assert_eq!(t["inputSchema"]["type"], json!("object"), "{t}");
        assert!(t["description"].as_str().unwrap().len() > 20);
    }
    // A revision we do not speak (2026-07-28 has no handshake) is answered with our latest.
    assert_eq!(out[4]["result"]["protocolVersion"], json!("2025-11-25"));
    // The 2026-07-28 probe gets "method not found", the stdio binding's cue to fall back.
    assert_eq!(out[5]["error"]["code"], json!(-32601));
    assert_eq!(out[6]["error"]["code"], json!(-32601));
    assert_eq!(out[7]["error"]["code"], json!(-32602));
    assert!(
        c.events.lock().unwrap().is_empty(),
        "tools/list is not a call"
    );
}

#[test]
fn reads_writes_and_lists_inside_grants() {
    let w = World::new();
    let c = w.chat("c1", "w1", &[]);
    let wf = &c.workflow;
    std::fs::create_dir(wf.join("docs")).unwrap();
    std::fs::write(wf.join("docs/a.md"), "alpha\n").unwrap();

    // Create, then overwrite; the disk has exactly what was written.
    let new = wf.join("docs/new.md");
    let r = c.call(
        "write_file",
        json!({"path": new, "content": "hello ✓\n", "create": true}),
    );
    assert!(assert_ok(&r).contains("created"), "{r}");
    assert_eq!(std::fs::read_to_string(&new).unwrap(), "hello ✓\n");
    let r = c.call("write_file", put(&new, "short"));
    assert_ok(&r);
    assert_eq!(std::fs::read_to_string(&new).unwrap(), "short");

    // Without create, a missing file stays missing.
    let r = c.call("write_file", put(wf.join("docs/absent.md"), "x"));
    assert!(is_error(&r) && text(&r).contains("create: true"), "{r}");
    assert!(!wf.join("docs/absent.md").exists());

    let r = c.call("read_file", at(wf.join("docs/a.md")));
    assert_eq!(assert_ok(&r), "alpha\n");
    // `.` components are fine; offset and length read a window and say what is left.
    let r = c.call(
        "read_file",
        json!({"path": format!("{}/./docs/a.md", wf.display()), "offset": 1, "length": 3}),
    );
    assert_eq!(assert_ok(&r), "lph");
    assert_eq!(
        r["result"]["content"][1]["text"],
        json!("[read_file: bytes 1..4 of 6; call read_file with offset 4 for more]")
    );
    let r = c.call(
        "read_file",
        json!({"path": wf.join("docs/a.md"), "offset": 4}),
    );
    assert_eq!(assert_ok(&r), "a\n");
    assert_eq!(
        r["result"]["content"].as_array().unwrap().len(),
        1,
        "nothing left: {r}"
    );
    let r = c.call("read_file", json!({"path": new, "length": 2}));
    assert_eq!(assert_ok(&r), "sh");
    std::fs::write(wf.join("utf.md"), "é!").unwrap();
    let r = c.call("read_file", json!({"path": wf.join("utf.md"), "length": 1}));
    assert!(is_error(&r), "one byte of a two-byte character: {r}");
    let r = c.call("read_file", json!({"path": wf.join("utf.md"), "length": 2}));
    assert_eq!(assert_ok(&r), "é");
    assert_eq!(
        r["result"]["content"][1]["text"],
        json!("[read_file: bytes 0..2 of 3; call read_file with offset 2 for more]")
    );
    // A window that would cut a character ends before it; an offset inside one is an error.
    std::fs::write(wf.join("cut.md"), "aé").unwrap();
    let r = c.call("read_file", json!({"path": wf.join("cut.md"), "length": 2}));
    assert_eq!(assert_ok(&r), "a");
    assert!(
        text(&r).len() == 1
            && r["result"]["content"][1]["text"]
                .as_str()
                .unwrap()
                .contains("offset 1")
    );
    let r = c.call("read_file", json!({"path": wf.join("utf.md"), "offset": 1}));
    assert!(
        is_error(&r) && text(&r).contains("inside a character"),
        "{r}"
    );
    std::fs::write(wf.join("bin"), [0xff, 0x00, 0x01]).unwrap();
    let r = c.call("read_file", at(wf.join("bin")));
    assert!(is_error(&r) && text(&r).contains("not UTF-8"), "{r}");

    // The runtime is granted too.
    std::fs::write(c.runtime.join("note.txt"), "runtime note").unwrap();
    let r = c.call("read_file", at(c.runtime.join("note.txt")));
    assert_eq!(assert_ok(&r), "runtime note");

    let r = c.call("list_dir", at(wf.join("docs")));
    let listing = assert_ok(&r);
    assert!(
        listing.starts_with(&format!("{}:\n", wf.join("docs").display())),
        "{listing}"
    );
    assert!(listing.contains("file  a.md  (6 bytes)"), "{listing}");
    assert!(listing.contains("file  new.md  (5 bytes)"), "{listing}");
    let r = c.call("list_dir", at(wf));
    assert!(assert_ok(&r).contains("dir   docs/"), "{r}");

    // A symlink inside the grant to a file inside the grant reads through; writing through it
    // is refused (the bridge never writes through a link).
    std::os::unix::fs::symlink(wf.join("docs/a.md"), wf.join("alias.md")).unwrap();
    let r = c.call("read_file", at(wf.join("alias.md")));
    assert_eq!(assert_ok(&r), "alpha\n");
    let r = c.call("write_file", put(wf.join("alias.md"), "x"));
    assert_refused(&r, "symbolic link");
    assert_eq!(
        std::fs::read_to_string(wf.join("docs/a.md")).unwrap(),
        "alpha\n"
    );

    // Misuse that is not a refusal is an error the model can read.
    let r = c.call("read_file", at(wf.join("docs")));
    assert!(is_error(&r) && text(&r).contains("list_dir"), "{r}");
    let r = c.call(
        "read_file",
        json!({"path": wf.join("docs/a.md"), "bogus": 1}),
    );
    assert!(is_error(&r) && text(&r).contains("unknown argument"), "{r}");
    let r = c.call("read_file", json!({}));
    assert!(
        is_error(&r) && text(&r).contains("missing required argument"),
        "{r}"
    );
    let r = c.call("write_file",
        json!({"path": wf.join("big"), "content": "x".repeat(bridge::MAX_WRITE + 1), "create": true}),
    );
    assert!(is_error(&r) && text(&r).contains("at most"), "{r}");
    assert!(!wf.join("big").exists());

    // Every call was logged with the chat, tool, path and verdict.
    let events = c.events.lock().unwrap();
    let first = &events[0];
    assert_eq!(first.chat, c.id);
    assert_eq!(first.tool, "write_file");
    assert_eq!(first.target.as_deref(), Some(new.to_str().unwrap()));
    assert_eq!(first.resolved.as_deref(), Some(new.as_path()));
    assert_eq!(first.verdict, CallVerdict::Allow);
    assert!(first.reason.contains("grant"), "{}", first.reason);
    let peer = first.peer.unwrap();
    assert_eq!(peer.uid, unsafe { libc::geteuid() });
    assert_eq!(peer.pid, Some(std::process::id() as i32));
    assert!(
        events
            .iter()
            .any(|e| e.tool == "write_file" && e.verdict == CallVerdict::Deny)
    );
}

#[test]
fn refusals_outside_grants_change_nothing() {
    let w = World::new();
    let c = w.chat("c1", "w1", &[]);
    let other = w.chat("c2", "w2", &[]);
    let wf = c.workflow.clone();
    let w2 = other.workflow.clone();
    std::fs::write(w2.join("secret.md"), "other workflow").unwrap();
    std::fs::write(other.runtime.join("token"), "other chat").unwrap();
    std::fs::create_dir(wf.join("planning")).unwrap();
    std::fs::write(wf.join("planning/plan.md"), "refused inside the grant").unwrap();
    std::fs::create_dir(wf.join("sub")).unwrap();
    // Planted inside the grant: links into protected places.
    std::os::unix::fs::symlink(w.state.config_json(), wf.join("config-link")).unwrap();
    std::os::unix::fs::symlink(&w2, wf.join("w2-link")).unwrap();
    std::os::unix::fs::symlink(w.state.path(), wf.join("root-link")).unwrap();
    // A second name, inside the grant, for a file of another workflow.
    std::fs::hard_link(w2.join("secret.md"), wf.join("hard.md")).unwrap();
    let config = w.state.config_json();
    let before = w.snapshot();

    const READ: &str = "read_file";
    const LIST: &str = "list_dir";
    const WRITE: &str = "write_file";
    const ROOT: &str = "protected root";
    const REFUSED: &str = "refused path";
    let up = |rest: &str| format!("{}/{rest}", wf.display());
    let token = wf.join("root-link/state/cli-runtimes/v1/c2/token");
    let cases: Vec<(&str, Value, &str)> = vec![
        (READ, at(&config), ROOT),
        (READ, at(w.state.path().join("no-such-file")), ROOT),
        (READ, at(w2.join("secret.md")), ROOT),
        (READ, at(other.runtime.join("token")), ROOT),
        (READ, at(other.runtime.join("policy.toml")), ROOT),
        (READ, at(up("../w2/secret.md")), "'..'"),
        (READ, at(up("sub/../../../config.json")), "'..'"),
        (READ, at("w1/secret.md"), "not an absolute path"),
        (READ, at(up("a\u{0}b")), "NUL"),
        (READ, at(wf.join("config-link")), ROOT),
        (READ, at(wf.join("w2-link/secret.md")), ROOT),
        (READ, at(wf.join("w2-link/missing.md")), ROOT),
        (READ, at(&token), ROOT),
        (READ, at(wf.join("hard.md")), "hard links"),
        (READ, at(wf.join("planning/plan.md")), REFUSED),
        (LIST, at(wf.join("planning")), REFUSED),
        (LIST, at(&w2), ROOT),
        (LIST, at(w.state.path()), ROOT),
        (LIST, at(wf.join("w2-link")), ROOT),
        (LIST, at(wf.join("root-link")), ROOT),
        (WRITE, put(&config, "{}"), ROOT),
        (WRITE, put(w2.join("secret.md"), "x"), ROOT),
        (WRITE, create(w2.join("new.md")), ROOT),
        (WRITE, create(w2.join("no/such/dir/new.md")), ROOT),
        (WRITE, put(other.runtime.join("token"), "x"), ROOT),
        (WRITE, put(wf.join("config-link"), "{}"), "symbolic link"),
        (WRITE, put(wf.join("w2-link/secret.md"), "x"), ROOT),
        (WRITE, create(wf.join("w2-link/new.md")), ROOT),
        (WRITE, put(wf.join("hard.md"), "x"), "hard links"),
        (WRITE, put(wf.join("planning/plan.md"), "x"), REFUSED),
        (WRITE, create(wf.join("planning/new.md")), REFUSED),
        (WRITE, create(wf.join("workflow.db")), REFUSED),
        (WRITE, create(wf.join("planning")), REFUSED),
        (WRITE, create(up("sub/../new.md")), "'..'"),
        (WRITE, create(up("n\u{0}ul")), "NUL"),
        (WRITE, create("relative.md"), "not an absolute path"),
    ];
    for (tool, args, why) in &cases {
        let r = c.call(tool, args.clone());
        assert_refused(&r, why);
        // A refusal never tells whether the thing exists.
        assert!(!text(&r).contains("does not exist"), "{r}");
    }
    assert_eq!(w.snapshot(), before, "a refused call changed the disk");

    let events = c.events.lock().unwrap();
    assert_eq!(events.len(), cases.len());
    for (e, (tool, _, _)) in events.iter().zip(&cases) {
        assert_eq!(e.tool, *tool);
        assert_eq!(e.verdict, CallVerdict::Deny, "{e:?}");
        assert_eq!(e.chat, c.id);
    }
    // The decision is on the real path: the config link was decided as config.json itself.
    let link = events
        .iter()
        .find(|e| e.target.as_deref() == Some(wf.join("config-link").to_str().unwrap()))
        .unwrap();
    assert_eq!(link.resolved.as_deref(), Some(config.as_path()));
}

#[test]
fn second_chat_socket_is_that_chats_identity() {
    let w = World::new();
    let a = w.chat("a", "wa", &[]);
    let b = w.chat("b", "wb", &["wa"]);
    std::fs::write(a.runtime.join("mine"), "a's").unwrap();
    std::fs::write(a.workflow.join("doc.md"), "wa doc").unwrap();
    std::fs::write(b.workflow.join("doc.md"), "wb doc").unwrap();
    // Both served by this one process; each socket decides with its own chat's policy.
    let r = b.call("read_file", at(a.runtime.join("mine")));
    assert_refused(&r, "protected root");
    let r = a.call("read_file", at(a.runtime.join("mine")));
    assert_eq!(assert_ok(&r), "a's");
    let r = a.call("read_file", at(b.workflow.join("doc.md")));
    assert_refused(&r, "protected root");
    let r = b.call("read_file", at(b.workflow.join("doc.md")));
    assert_eq!(assert_ok(&r), "wb doc");
    // b has wa attached read-only: it may read but not write it.
    let r = b.call("read_file", at(a.workflow.join("doc.md")));
    assert_eq!(assert_ok(&r), "wa doc");
    let r = b.call("write_file", put(a.workflow.join("doc.md"), "x"));
    assert_refused(&r, "read-only grant");
    assert_eq!(
        std::fs::read_to_string(a.workflow.join("doc.md")).unwrap(),
        "wa doc"
    );
    assert!(b.events.lock().unwrap().iter().all(|e| e.chat == b.id));
    assert!(a.events.lock().unwrap().iter().all(|e| e.chat == a.id));
}

#[test]
fn open_url_allow_list() {
    let w = World::new();
    let c = w.chat("c1", "w1", &[]);
    for url in [
        "https://docs.example.com/guide?x=1#top",
        "http://localhost:8080",
        "http://LOCALHOST:8080/app",
    ] {
        let r = c.call("open_url", json!({"url": url}));
        assert_eq!(assert_ok(&r), format!("opened {url} with test-opener"));
    }
    let refused = [
        ("file:///etc/passwd", "only http and https"),
        ("javascript:alert(1)", "only http and https"),
        ("https://evil.example.com/", "not under an allowed prefix"),
        (
            "https://docs.example.com.evil.net/",
            "not under an allowed prefix",
        ),
        ("http://docs.example.com/", "not under an allowed prefix"),
        (
            "http://localhost:8080.evil.net/",
            "not under an allowed prefix",
        ),
        ("http://localhost:80801/", "not under an allowed prefix"),
        ("https://docs.example.com@evil.net/", "user info"),
        ("https://docs.example.com/ x", "printable ASCII"),
        ("https://docs.example.com/\u{202e}", "printable ASCII"),
    ];
    for (url, why) in refused {
        let r = c.call("open_url", json!({"url": url}));
        assert_refused(&r, why);
    }
    assert_eq!(
        *c.opened.lock().unwrap(),
        vec![
            "https://docs.example.com/guide?x=1#top",
            "http://localhost:8080",
            "http://LOCALHOST:8080/app"
        ],
        "only allowed URLs reached the opener"
    );
    let events = c.events.lock().unwrap();
    assert_eq!(
        events
            .iter()
            .filter(|e| e.verdict == CallVerdict::Deny)
            .count(),
        refused.len()
    );
    assert!(
        events[0].reason.contains("https://docs.example.com/"),
        "{}",
        events[0].reason
    );
}

#[test]
fn open_url_without_an_opener_returns_the_url() {
    let w = World::new();
    let (id, runtime) = w.add_chat("c1", "auto");
    w.workflow("w1");
    std::fs::write(
        runtime.join("policy.toml"),
        w.policy_toml(&runtime, "w1", &[]),
    )
    .unwrap();
    let opts = w.opts();
    let ctx = ChatContext::load(&w.state, &id, &opts)
        .unwrap()
        .with_opener(Opener::Custom(Arc::new(|_: &str| OpenOutcome::NotOpened {
            why: "no opener".into(),
        })));
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let _h = bridge::serve(&runtime.join(SOCKET_NAME), ctx, move |e| {
        sink.lock().unwrap().push(e)
    })
    .unwrap();
    let r = call(
        &runtime.join(SOCKET_NAME),
        "open_url",
        json!({"url": "https://docs.example.com/x"}),
    );
    assert_eq!(
        assert_ok(&r),
        "not opened: no opener; URL: https://docs.example.com/x"
    );
    assert!(events.lock().unwrap()[0].reason.contains("not opened"));
}

#[test]
fn protocol_errors_through_the_shim() {
    let (w, c, before) = World::with_file_f();
    let mut lines = init_lines();
    lines.push("{not json".into());
    lines.push("[1,2,3]".into());
    lines.push(format!("\"{}\"", "x".repeat(MAX_MESSAGE)));
    lines.push(json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_everything","arguments":{"path":"/"}}}).to_string());
    lines.push(
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"arguments":{}}}).to_string(),
    );
    lines.push(json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read_file","arguments":"path"}}).to_string());
    lines.push(json!({"jsonrpc":"2.0","id":4,"method":"no/such/method"}).to_string());
    lines.push(call_line(5, "read_file", at(c.workflow.join("f"))));
    let out = session(&c.socket, &lines);
    assert_eq!(out.len(), 9, "{out:#?}");
    assert_eq!(out[1]["error"]["code"], json!(-32700));
    assert_eq!(out[1]["id"], Value::Null);
    assert_eq!(out[2]["error"]["code"], json!(-32600));
    assert_eq!(out[3]["error"]["code"], json!(-32600));
    assert!(error_message(&out[3]).contains("longer than"));
    assert_eq!(out[4]["id"], json!(1));
    assert_eq!(out[4]["error"]["code"], json!(-32602));
    assert!(error_message(&out[4]).contains("Unknown tool"));
    assert_eq!(out[5]["error"]["code"], json!(-32602));
    assert_eq!(out[6]["error"]["code"], json!(-32602));
    assert_eq!(out[7]["error"]["code"], json!(-32601));
    // The session is still sane after all that.
    assert_eq!(out[8]["id"], json!(5));
    assert_eq!(assert_ok(&out[8]), "ok");
    assert_eq!(w.snapshot(), before);
    let events = c.events.lock().unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.tool == "delete_everything" && e.verdict == CallVerdict::Error)
    );
}

/// A raw client on a chat's socket: the server's side of the protocol, without the shim.
struct Raw {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Raw {
    fn connect(socket: &Path) -> Raw {
        let s = UnixStream::connect(socket).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        Raw {
            reader: BufReader::new(s.try_clone().unwrap()),
            writer: s,
        }
    }
    fn send(&mut self, line: &[u8]) {
        self.writer.write_all(line).unwrap();
        self.writer.write_all(b"\n").unwrap();
    }
    fn recv(&mut self) -> Option<Value> {
        let mut l = String::new();
        match self.reader.read_line(&mut l).unwrap() {
            0 => None,
            _ => Some(serde_json::from_str(&l).unwrap()),
        }
    }
}

#[test]
fn protocol_errors_on_the_socket() {
    let (w, c, before) = World::with_file_f();
    let mut raw = Raw::connect(&c.socket);
    raw.send(b"{oops");
    assert_eq!(raw.recv().unwrap()["error"]["code"], json!(-32700));
    raw.send(&vec![b'x'; MAX_MESSAGE + 10]);
    let r = raw.recv().unwrap();
    assert_eq!(r["error"]["code"], json!(-32600));
    assert_eq!(r["id"], Value::Null);
    raw.send(br#"{"jsonrpc":"2.0","method":"tools/list"}"#);
    assert_eq!(
        raw.recv().unwrap()["error"]["code"],
        json!(-32600),
        "a notification is not a request here"
    );
    raw.send(br#"{"jsonrpc":"2.0","id":9,"method":"initialize","params":{}}"#);
    assert_eq!(raw.recv().unwrap()["error"]["code"], json!(-32601));
    raw.send(br#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"nope"}}"#);
    let r = raw.recv().unwrap();
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].clone()),
        (json!(10), json!(-32602))
    );
    // Still in step: a good request gets its own answer.
    raw.send(format!("{}", json!({"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"read_file","arguments":{"path":c.workflow.join("f")}}})).as_bytes());
    let r = raw.recv().unwrap();
    assert_eq!(r["id"], json!(11));
    assert_eq!(assert_ok(&r), "ok");
    assert_eq!(w.snapshot(), before);
}

#[test]
fn socket_is_private_single_and_cleaned_up() {
    let w = World::new();
    let c = w.chat("c1", "w1", &[]);
    let mode = std::fs::metadata(&c.socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    let opts = w.opts();
    let ctx = || ChatContext::load(&w.state, &c.id, &opts).unwrap();
    // A live socket is never taken over.
    match bridge::serve(&c.socket, ctx(), |_| {}) {
        Err(BridgeError::AlreadyServing(p)) => assert_eq!(p, c.socket),
        other => panic!("{other:?}"),
    }
    // The socket must sit in the chat's own runtime.
    let elsewhere = w.workflow("w1").join(SOCKET_NAME);
    assert!(matches!(
        bridge::serve(&elsewhere, ctx(), |_| {}),
        Err(BridgeError::SocketOutsideRuntime { .. })
    ));
    assert!(!elsewhere.exists());

    // A connection open at shutdown is closed; the socket file goes away.
    let mut raw = Raw::connect(&c.socket);
    let socket = c.socket.clone();
    c.handle.shutdown();
    // The write itself may fail (EPIPE): the server's end is gone.
    let _ = raw
        .writer
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\n");
    let mut rest = String::new();
    let closed = matches!(raw.reader.read_line(&mut rest), Ok(0) | Err(_));
    assert!(closed, "the connection was closed, not answered: {rest}");
    assert!(!socket.exists());
    // A stale socket or a planted file at the path is replaced.
    std::fs::write(&socket, "planted").unwrap();
    let h = bridge::serve(&socket, ctx(), |_| {}).unwrap();
    let r = call(&socket, "list_dir", at(w.workflow("w1")));
    assert_ok(&r);
    drop(h);
    assert!(!socket.exists());
}

#[test]
fn the_policy_file_is_checked_before_serving() {
    let w = World::new();
    let (id, runtime) = w.add_chat("c1", "auto");
    let opts = w.opts();
    assert!(
        matches!(
            ChatContext::load(&w.state, &id, &opts),
            Err(BridgeError::Io { .. })
        ),
        "no policy yet"
    );
    // A policy that does not protect the state root is not served.
    std::fs::write(
        runtime.join("policy.toml"),
        "version = 1\nbase = \"open\"\n",
    )
    .unwrap();
    let e = ChatContext::load(&w.state, &id, &opts).unwrap_err();
    assert!(e.to_string().contains("config.json"), "{e}");
    // The same checks on policy text given directly.
    let e = ChatContext::from_toml(
        &w.state,
        &id,
        "version = 1\nbase = \"open\"\n",
        "(launch)",
        &opts,
    )
    .unwrap_err();
    assert!(matches!(e, BridgeError::BadPolicy { .. }), "{e}");
    let other = match Target::host().unwrap() {
        Target::Linux => Target::Macos,
        Target::Macos => Target::Linux,
    };
    let off_host = ResolveOptions::new(other, w.home.clone(), false).unwrap();
    w.workflow("w1");
    let good = w.policy_toml(&runtime, "w1", &[]);
    assert!(ChatContext::from_toml(&w.state, &id, &good, "(launch)", &opts).is_ok());
    assert!(matches!(
        ChatContext::from_toml(&w.state, &id, &good, "(launch)", &off_host),
        Err(BridgeError::BadPolicy { .. })
    ));
    // Nor a policy file that is a symlink.
    std::fs::remove_file(runtime.join("policy.toml")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", runtime.join("policy.toml")).unwrap();
    assert!(matches!(
        ChatContext::load(&w.state, &id, &opts),
        Err(BridgeError::BadPolicy { .. })
    ));
}

#[test]
fn callers_of_another_uid_are_turned_away() {
    // Root connects as another uid.
    common::require_root();
    let w = World::new();
    let c = w.chat("c1", "w1", &[]);
    // Let uid 65534 reach the socket at all, so that only the peer check stands in its way.
    let top = std::fs::canonicalize(w.dir.path()).unwrap();
    let mut p = c.socket.clone();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
    while p.pop() && p.starts_with(&top) {
        let m = std::fs::metadata(&p).unwrap().permissions().mode();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m | 0o011)).unwrap();
    }
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr
        .sun_path
        .iter_mut()
        .zip(c.socket.as_os_str().as_encoded_bytes())
    {
        *d = *s as libc::c_char;
    }
    let request = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\n";
    // The child only makes async-signal-safe calls before _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        unsafe {
            if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                libc::_exit(10);
            }
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
            if libc::connect(fd, (&raw const addr).cast(), len) != 0 {
                libc::_exit(11);
            }
            libc::write(fd, request.as_ptr().cast(), request.len());
            let mut buf = [0u8; 64];
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            // Closed without a word, as it should be: EOF, or a reset because our request
            // was never read.
            libc::_exit(if n <= 0 { 0 } else { 12 });
        }
    }
    let mut status = 0;
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "child status {status}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "10: setuid, 11: connect, 12: got a reply"
    );
    let events = c.events.lock().unwrap();
    let e = events
        .iter()
        .find(|e| e.tool == "(connect)")
        .expect("the refusal is logged");
    assert_eq!(e.verdict, CallVerdict::Deny);
    assert_eq!(e.peer.unwrap().uid, 65534);
    assert!(e.reason.contains("65534"), "{}", e.reason);
}

// ---- concurrency ---------------------------------------------------------------------------

/// One thread's scripted session: 100 writes of fresh content to its own file, each followed by
/// a read that must return exactly that content; ids are unique strings.
fn hammer(socket: &Path, dir: &Path, thread: usize) {
    let file = dir.join(format!("t{thread}.txt"));
    let mut lines = init_lines();
    let mut expect = Vec::new();
    for j in 0..100 {
        let content = format!("thread {thread} round {j} {}", "x".repeat(j));
        let create = j == 0;
        lines.push(call_line(
            format!("w{thread}-{j}"),
            "write_file",
            json!({"path": file, "content": content, "create": create}),
        ));
        lines.push(call_line(format!("r{thread}-{j}"), "read_file", at(&file)));
        expect.push(content);
    }
    let out = session(socket, &lines);
    assert_eq!(out.len(), 201);
    for (j, content) in expect.iter().enumerate() {
        let w = &out[1 + 2 * j];
        let r = &out[2 + 2 * j];
        assert_eq!(w["id"], json!(format!("w{thread}-{j}")));
        assert_eq!(r["id"], json!(format!("r{thread}-{j}")));
        assert_ok(w);
        assert_eq!(assert_ok(r), content, "thread {thread} round {j}");
    }
}

#[test]
fn concurrent_sessions_on_one_socket() {
    let w = World::new();
    let c = w.chat("c1", "w1", &[]);
    std::thread::scope(|s| {
        for t in 0..8 {
            let (socket, dir) = (&c.socket, &c.workflow);
            s.spawn(move || hammer(socket, dir, t));
        }
    });
    assert_eq!(c.events.lock().unwrap().len(), 8 * 200);
}

#[test]
fn concurrent_sessions_on_several_sockets() {
    let w = World::new();
    let chats: Vec<Chat> = (0..4)
        .map(|i| w.chat(&format!("c{i}"), &format!("w{i}"), &[]))
        .collect();
    std::thread::scope(|s| {
        for t in 0..8 {
            let chat = &chats[t % 4];
            s.spawn(move || hammer(&chat.socket, &chat.workflow, t));
        }
    });
    for chat in &chats {
        let events = chat.events.lock().unwrap();
        assert_eq!(events.len(), 2 * 200);
        assert!(
            events
                .iter()
                .all(|e| e.chat == chat.id && e.verdict == CallVerdict::Allow)
        );
    }
}

#[test]
fn pipelined_requests_on_one_connection_keep_their_order() {
    let w = World::new();
    let c = w.chat("c1", "w1", &[]);
    for i in 0..200 {
        std::fs::write(c.workflow.join(format!("f{i}")), format!("content {i}")).unwrap();
    }
    let mut raw = Raw::connect(&c.socket);
    let mut writer = raw.writer.try_clone().unwrap();
    let wf = c.workflow.clone();
    // Everything is sent before anything is read.
    let sender = std::thread::spawn(move || {
        for i in 0..200 {
            let line = json!({"jsonrpc":"2.0","id":i,"method":"tools/call","params":{"name":"read_file","arguments":{"path": wf.join(format!("f{i}"))}}});
            writer.write_all(format!("{line}\n").as_bytes()).unwrap();
        }
    });
    for i in 0..200 {
        let r = raw.recv().unwrap();
        assert_eq!(r["id"], json!(i));
        assert_eq!(assert_ok(&r), format!("content {i}"));
    }
    sender.join().unwrap();
}

// ---- a real MCP client -----------------------------------------------------------------------

/// The shim as a program: the `bridge_shim` example (the same `run_shim` that
/// `dispatcher bridge` runs), built with the cargo that builds this test.
fn shim_program() -> PathBuf {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "-p",
            "dispatcher",
            "--example",
            "bridge_shim",
            "--message-format=json",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "cargo build --example bridge_shim: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "bridge_shim")
        .and_then(|m| m["executable"].as_str().map(PathBuf::from))
        .expect("cargo names the example's executable")
}

/// Runs the inspector's CLI against the shim; returns its exit code and the JSON `result`.
/// (It exits 0 for a result, 5 for a tool result with `isError: true`.)
fn run_inspector(w: &World, shim: &Path, socket: &Path, args: &[&str]) -> (i32, Value) {
    let scratch = w.dir.path().join("inspector-home");
    std::fs::create_dir_all(&scratch).unwrap();
    let out = std::process::Command::new("node")
        .arg(inspector_js())
        .args(["--cli", "--format", "json"])
        .args(args)
        .arg("--")
        .arg(shim)
        .arg("--socket")
        .arg(socket)
        // Its own files go to the scratch folder, never to the person's home.
        .env("HOME", &scratch)
        .env("MCP_CATALOG_PATH", scratch.join("catalog.json"))
        .env("MCP_CLIENT_CONFIG_PATH", scratch.join("client.json"))
        .current_dir(&scratch)
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "inspector {args:?} ({}): output is not JSON ({e}): {stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let result = v
        .get("result")
        .cloned()
        .unwrap_or_else(|| panic!("inspector {args:?}: no result: {v}"));
    (out.status.code().unwrap_or(-1), result)
}

/// One `tools/call` of `tool` through the inspector; `arg` is how its arguments are given
/// (`--tool-arg` with `name=value`, or `--tool-args-json` with an object).
fn call_inspector(
    w: &World,
    shim: &Path,
    socket: &Path,
    tool: &str,
    arg: [&str; 2],
) -> (i32, Value) {
    let call = ["--method", "tools/call", "--tool-name", tool];
    run_inspector(w, shim, socket, &[&call[..], &arg[..]].concat())
}

#[test]
fn the_mcp_inspector_drives_the_shim() {
    let inspector_present = inspector_js();
    assert!(inspector_present.is_file());
    let shim = shim_program();
    let w = World::new();
    let c = w.chat("c1", "w1", &[]);
    std::fs::write(c.workflow.join("doc.md"), "from the workflow").unwrap();

    for era in ["legacy", "auto"] {
        let (code, list) = run_inspector(
            &w,
            &shim,
            &c.socket,
            &["--protocol-era", era, "--method", "tools/list"],
        );
        assert_eq!(code, 0, "{era}: {list}");
        let names: Vec<_> = list["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{era}: {list}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["read_file", "write_file", "list_dir", "open_url"],
            "{era}: {list}"
        );
    }

    let inspect = |tool: &str, arg: [&str; 2]| call_inspector(&w, &shim, &c.socket, tool, arg);
    let read = |p: &Path| {
        inspect(
            "read_file",
            ["--tool-arg", &format!("path={}", p.display())],
        )
    };
    let doc = c.workflow.join("doc.md");
    let (code, read_doc) = read(&doc);
    assert_eq!(
        (code, &read_doc["content"][0]["text"]),
        (0, &json!("from the workflow")),
        "{read_doc}"
    );

    let new = c.workflow.join("by-inspector.md");
    let args =
        json!({"path": new, "content": "written by a real client", "create": true}).to_string();
    let (code, wrote) = inspect("write_file", ["--tool-args-json", &args]);
    assert_eq!((code, &wrote["isError"]), (0, &json!(false)), "{wrote}");
    assert_eq!(
        std::fs::read_to_string(&new).unwrap(),
        "written by a real client"
    );

    let config = w.state.config_json();
    let (code, refused) = read(&config);
    assert_eq!((code, &refused["isError"]), (5, &json!(true)), "{refused}");
    assert!(
        refused["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("refused: "),
        "{refused}"
    );

    let events = c.events.lock().unwrap();
    assert_eq!(
        events
            .iter()
            .map(|e| (e.tool.as_str(), e.verdict))
            .collect::<Vec<_>>(),
        [
            ("read_file", CallVerdict::Allow),
            ("write_file", CallVerdict::Allow),
            ("read_file", CallVerdict::Deny)
        ]
    );
    // The calls came from the shim process, not from this one.
    assert!(
        events
            .iter()
            .all(|e| e.peer.unwrap().pid != Some(std::process::id() as i32))
    );
}

// ---- another mount namespace ---------------------------------------------------------------

/// Set in the copy of this test that runs as the unprivileged test user.
const AS_USER_ENV: &str = "BRIDGE_NAMESPACE_TEST_AS_USER";

/// A same-user process in its own mount namespace (`unshare -Urm`, as a rootless container
/// or bwrap would make), where the state root is bound onto `<workflow>/mnt` and
/// `config.json` onto `<workflow>/notes.txt`, its cwd in `mnt`: through `/proc/<pid>/root`
/// and `/proc/<pid>/cwd` the protected files appear at granted paths. The bridge refuses
/// every such path (every `/proc/self/…` one, and symlinks planted in the grant that lead
/// there), reads, lists and writes alike, and
/// nothing is created; the controls show that the paths do lead to the protected files for
/// a plain process, and that the bridge still serves the granted paths.
fn bridge_stays_in_its_own_mount_namespace() {
    let w = World::new();
    let c = w.chat("c1", "w1", &[]);
    let wf = c.workflow.clone();
    std::fs::write(wf.join("ok.txt"), "granted").unwrap();
    std::fs::write(wf.join("notes.txt"), "notes").unwrap();
    std::fs::create_dir(wf.join("mnt")).unwrap();
    let config = w.state.config_json();
    let secret = std::fs::read_to_string(&config).unwrap();
    let token = w.state.config().server_token.clone();
    assert!(secret.contains(&token));
    let script = format!(
        "mount --bind '{root}' '{wf}/mnt' && mount --bind '{config}' '{wf}/notes.txt' \
         && cd '{wf}/mnt' && exec sleep 600",
        root = w.state.path().display(),
        wf = wf.display(),
        config = config.display(),
    );
    let mut ns = std::process::Command::new("unshare")
        .args(["-Urm", "sh", "-c", &script])
        .spawn()
        .expect("unshare must be installed (util-linux)");
    let pid = ns.id();
    let other_root = PathBuf::from(format!("/proc/{pid}/root"));
    let other_cwd = PathBuf::from(format!("/proc/{pid}/cwd"));
    let view = other_root.join(wf.strip_prefix("/").unwrap());
    // Control: a plain process sees the protected file through the other namespace's view,
    // once both mounts are made and the process has entered `mnt` (its last step).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let ready = || {
        std::fs::read_to_string(view.join("notes.txt"))
            .ok()
            .as_ref()
            == Some(&secret)
            && std::fs::read_to_string(other_cwd.join("config.json"))
                .is_ok_and(|c| c.contains(&token))
    };
    while !ready() {
        if let Ok(Some(status)) = ns.try_wait() {
            panic!("the namespace process ended early ({status}): unshare -Urm must work here");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the bind mounts did not appear in {} (or the process is not in mnt)",
            view.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        std::fs::read_to_string(other_cwd.join("config.json"))
            .unwrap()
            .contains(&token)
    );
    assert!(
        std::fs::read_dir(view.join("mnt"))
            .unwrap()
            .any(|e| e.unwrap().file_name() == "config.json")
    );
    // Control: the bridge serves the granted paths, and the same file through its own path
    // is what the chat may not read.
    assert_eq!(
        assert_ok(&c.call("read_file", at(wf.join("ok.txt")))),
        "granted"
    );
    assert_refused(&c.call("read_file", at(&config)), "protected root");
    // Links planted inside the grant that lead there are no way around it.
    std::os::unix::fs::symlink(view.join("notes.txt"), wf.join("via-link")).unwrap();
    std::os::unix::fs::symlink(&other_cwd, wf.join("cwd-link")).unwrap();
    let before = w.snapshot();

    let self_root = Path::new("/proc/self/root");
    let under_self = |p: &Path| self_root.join(p.strip_prefix("/").unwrap());
    let reads = [
        view.join("notes.txt"),
        view.join("mnt/config.json"),
        other_cwd.join("config.json"),
        under_self(&config),
        under_self(&wf.join("ok.txt")),
        PathBuf::from(format!("/proc/{pid}/fd/0")),
        PathBuf::from("/proc/self/environ"),
        PathBuf::from(format!("/proc/{pid}/environ")),
        wf.join("via-link"),
        wf.join("cwd-link/config.json"),
    ];
    let lists = [
        view.join("mnt"),
        view.join("mnt/state"),
        other_cwd.clone(),
        under_self(w.state.path()),
        under_self(&wf),
        PathBuf::from("/proc"),
        PathBuf::from(format!("/proc/{pid}")),
        wf.join("cwd-link"),
    ];
    let writes = [
        view.join("mnt/planted"),
        view.join("mnt/state/auth/planted"),
        view.join("notes.txt"),
        other_cwd.join("planted"),
        under_self(&wf.join("planted")),
        under_self(&wf.join("ok.txt")),
        PathBuf::from("/proc/self/comm"),
        wf.join("cwd-link/planted"),
    ];
    let mut seen = Vec::new();
    for p in &reads {
        seen.push(("read_file", c.call("read_file", at(p))));
    }
    for p in &lists {
        seen.push(("list_dir", c.call("list_dir", at(p))));
    }
    for p in &writes {
        for create in [false, true] {
            seen.push((
                "write_file",
                c.call(
                    "write_file",
                    json!({"path": p, "content": "planted", "create": create}),
                ),
            ));
        }
    }
    let _ = ns.kill();
    let _ = ns.wait();
    for (tool, r) in &seen {
        assert!(is_error(r), "{tool} succeeded: {r}");
        let t = text(r);
        assert!(t.starts_with("refused: "), "{tool} not refused: {t}");
        assert!(
            t.contains("magic link") || t.contains("on /proc"),
            "{tool} refused for another reason: {t}"
        );
        assert!(!t.contains(&token), "{tool} leaked the token: {t}");
    }
    assert_eq!(w.snapshot(), before, "a refused call changed the disk");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), secret);
    let events = c.events.lock().unwrap();
    let denied = events
        .iter()
        .filter(|e| e.verdict == CallVerdict::Deny)
        .count();
    assert!(denied > seen.len(), "every refusal is logged ({denied})");
}

#[test]
fn the_bridge_never_resolves_through_another_mount_namespace() {
    if common::is_rerun(AS_USER_ENV) {
        // The copy run as the test user.
        bridge_stays_in_its_own_mount_namespace();
        return;
    }
    common::require_root();
    bridge_stays_in_its_own_mount_namespace();
    // The same as the unprivileged test user: its own rootless namespace, its own files.
    common::rerun_as_test_user(
        "the_bridge_never_resolves_through_another_mount_namespace",
        AS_USER_ENV,
    );
}
