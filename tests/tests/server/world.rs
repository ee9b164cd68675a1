//! The fixture: a world (state root, home, fake CLI), a server started on a port of its own,
//! and the HTTP, proof and bridge helpers the tests share.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentworks_e2e::{self as common, FakeCli, dispatcher_bin};
use dispatcher::server::auth;
use serde_json::{Value, json};

// ---- fixture -------------------------------------------------------------------------------

pub struct World {
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
    pub home: PathBuf,
    pub profiles: PathBuf,
    pub token: String,
}

impl World {
    pub fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let root = base.join("sr");
        let home = base.join("home");
        let profiles = base.join("prof");
        std::fs::create_dir_all(&home).unwrap();
        FakeCli::Tools.install(&base, &profiles);
        let mut w = World {
            dir,
            root,
            home,
            profiles,
            token: String::new(),
        };
        w.cli(&["init"]).success();
        let config: Value =
            serde_json::from_str(&std::fs::read_to_string(w.root.join("config.json")).unwrap())
                .unwrap();
        w.token = config["server_token"].as_str().unwrap().to_string();
        w
    }

    pub fn base(&self) -> PathBuf {
        std::fs::canonicalize(self.dir.path()).unwrap()
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::new(dispatcher_bin());
        c.arg("--state-root")
            .arg(&self.root)
            .arg("--profiles-dir")
            .arg(&self.profiles)
            .env("HOME", &self.home)
            .env_remove("AGENTWORKS_STATE_ROOT")
            .env_remove(dispatcher::server::CRASH_AT_ENV);
        c
    }

    pub fn cli(&self, args: &[&str]) -> Out {
        let out = self.cmd().args(args).output().unwrap();
        Out(out)
    }

    /// A world with workflow `w1` and chat `c1`.
    pub fn c1_on_w1() -> World {
        let w = World::new();
        w.workflows(&["w1"]);
        w.chats(&["c1"]);
        w
    }

    pub fn chats(&self, ids: &[&str]) {
        for c in ids {
            self.cli(&["chat", "add", c, "--mode", "bridge-only"])
                .success();
        }
    }

    /// Chats `{prefix}0` .. `{prefix}{n-1}`, each with a file `{chat}.txt` in workflow `w1`
    /// that holds "content of {chat}" (its bridge calls read it).
    pub fn chats_reading_w1(&self, prefix: &str, n: usize) -> Vec<String> {
        let chats: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
        for c in &chats {
            self.chats(&[c]);
            let file = self.workflow_dir("w1").join(format!("{c}.txt"));
            std::fs::write(file, format!("content of {c}")).unwrap();
        }
        chats
    }

    pub fn workflows(&self, ids: &[&str]) {
        for w in ids {
            self.cli(&["workflow", "add", w]).success();
        }
    }

    pub fn workflow_dir(&self, w: &str) -> PathBuf {
        self.root.join("workspace-docs").join(w)
    }

    pub fn runtime(&self, c: &str) -> PathBuf {
        self.root.join("state/cli-runtimes/v1").join(c)
    }

    pub fn events(&self, chat: &str) -> Vec<Value> {
        match std::fs::read_to_string(self.root.join(format!("state/events/{chat}.jsonl"))) {
            Ok(t) => t
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    pub fn serve(&self) -> Server {
        self.serve_with(&[])
    }

    pub fn serve_with(&self, env: &[(&str, &str)]) -> Server {
        self.serve_on(0, env)
    }

    pub fn serve_on(&self, port: u16, env: &[(&str, &str)]) -> Server {
        let mut cmd = self.cmd();
        cmd.args(["serve", "--port", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let port: u16 = line
            .split("127.0.0.1:")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| {
                let mut err = String::new();
                child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                panic!("the server did not start: {line:?} {err}")
            });
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push_str(&(l + "\n"));
            }
        });
        Server {
            child: Some(child),
            port,
            token: self.token.clone(),
            log,
        }
    }

    /// Kills what tests left running: chats of records that still run (by their recorded
    /// identity, never by name) and the state root's own tmux server.
    pub fn cleanup(&self) {
        let dir = self.root.join("state/server/chats");
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let ident = if p.extension().is_some_and(|x| x == "json") {
                serde_json::from_str::<Value>(&text)
                    .ok()
                    .and_then(|v| v["ident"].as_str().map(str::to_string))
            } else {
                None
            };
            if let Some(ident) = ident
                && let Some((pid, start)) = ident.split_once(' ')
                && let Ok(pid) = pid.parse::<i32>()
                && proc_start(pid).as_deref() == Some(start)
            {
                unsafe { libc::kill(-pid, libc::SIGKILL) };
            }
        }
        let sock = self.root.join("tmux/default");
        if sock.exists() {
            let _ = Command::new("tmux")
                .arg("-S")
                .arg(&sock)
                .arg("kill-server")
                .output();
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.cleanup();
    }
}

pub fn proc_start(pid: i32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    (f.first() != Some(&"Z")).then(|| f.get(19).map(|s| s.to_string()))?
}

pub struct Out(std::process::Output);

impl Out {
    #[track_caller]
    pub fn success(&self) -> String {
        assert!(
            self.0.status.success(),
            "failed: {}\n{}",
            String::from_utf8_lossy(&self.0.stdout),
            String::from_utf8_lossy(&self.0.stderr)
        );
        String::from_utf8_lossy(&self.0.stdout).into_owned()
    }
    #[track_caller]
    pub fn failure(&self) -> String {
        assert!(
            !self.0.status.success(),
            "unexpected success: {}",
            String::from_utf8_lossy(&self.0.stdout)
        );
        String::from_utf8_lossy(&self.0.stderr).into_owned()
    }
}

pub struct Server {
    pub child: Option<Child>,
    pub port: u16,
    pub token: String,
    pub log: Arc<Mutex<String>>,
}

impl Server {
    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let body = body.map(|b| b.to_string());
        let auth = proof(
            self.port,
            &self.token,
            method,
            path,
            body.as_deref().unwrap_or("").as_bytes(),
        );
        let mut headers = vec![("Authorization", auth.as_str())];
        if body.is_some() {
            headers.push(("Content-Type", "application/json"));
        }
        http(
            self.port,
            method,
            path,
            &headers,
            body.as_deref().unwrap_or("").as_bytes(),
        )
    }

    pub fn get(&self, path: &str) -> Value {
        let (s, v) = self.call("GET", path, None);
        assert_eq!(s, 200, "{path}: {v}");
        v
    }

    pub fn chat(&self, chat: &str) -> Value {
        self.get(&format!("/v1/chats/{chat}"))
    }

    pub fn list(&self) -> BTreeMap<String, Value> {
        self.get("/v1/chats")["chats"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["chat"].as_str().unwrap().to_string(), c.clone()))
            .collect()
    }

    #[track_caller]
    pub fn launch(&self, body: Value) -> Value {
        let (s, v) = self.call("POST", "/v1/chats/launch", Some(body));
        assert_eq!(s, 201, "{v}\n{}", self.log.lock().unwrap());
        v
    }

    /// Waits until the chat is no longer running; returns its view.
    pub fn wait_ended(&self, chat: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let v = self.chat(chat);
            if v["state"] != "running" && v["state"] != "launching" {
                return v;
            }
            assert!(Instant::now() < deadline, "chat {chat} still running: {v}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL, by its own pid.
    pub fn kill(mut self) {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Asks it to shut down; waits for it to exit.
    pub fn shutdown(mut self) {
        let (s, v) = self.call("POST", "/v1/shutdown", None);
        assert_eq!(s, 200, "{v}");
        let status = self.child.take().unwrap().wait().unwrap();
        assert!(status.success(), "{status}");
    }

    pub fn alive(&mut self) -> bool {
        self.child.as_mut().unwrap().try_wait().unwrap().is_none()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One raw HTTP/1.1 request; returns the status and the JSON body (Null when none).
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Value) {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    raw(port, &bytes)
}

/// The `Authorization` value for one request: the handshake of `dispatcher::server::auth`
/// (the server's proof checked), then the MAC bound to the request.
pub fn proof(port: u16, token: &str, method: &str, target: &str, body: &[u8]) -> String {
    try_proof(port, token, method, target, body).expect("the handshake failed")
}

/// As [`proof`], or `None` when the server does not answer (it may be dying on purpose).
pub fn try_proof(
    port: u16,
    token: &str,
    method: &str,
    target: &str,
    body: &[u8],
) -> Option<String> {
    let (cn, sn, server_proof) = hello(port)?;
    assert!(
        auth::proof_ok(token, &cn, &sn, port, &server_proof),
        "the server's proof is wrong"
    );
    Some(mac(port, token, &cn, &sn, method, target, body))
}

/// A request MAC made with `token` on a real handshake, whether or not the server holds it.
pub fn forged_proof(port: u16, token: &str, method: &str, target: &str, body: &[u8]) -> String {
    let (cn, sn, server_proof) = hello(port).expect("the server answers the handshake");
    assert!(!auth::proof_ok(token, &cn, &sn, port, &server_proof));
    mac(port, token, &cn, &sn, method, target, body)
}

pub fn mac(
    port: u16,
    token: &str,
    cn: &str,
    sn: &str,
    method: &str,
    target: &str,
    body: &[u8],
) -> String {
    auth::authorization(
        token,
        cn,
        sn,
        &auth::Binding {
            port,
            method,
            target,
            body,
        },
    )
}

/// Step 1 of the handshake: (client nonce, server nonce, server proof).
pub fn hello(port: u16) -> Option<(String, String, String)> {
    let cn = auth::new_nonce().unwrap();
    let hello = json!({ "client_nonce": cn }).to_string();
    let out = try_post_json(port, None, "/v1/hello", &hello)?;
    let v: Value = serde_json::from_str(out.split_once("\r\n\r\n")?.1).ok()?;
    Some((
        cn,
        v["server_nonce"].as_str()?.to_string(),
        v["server_proof"].as_str()?.to_string(),
    ))
}

/// A JSON `POST` of `body` to `path`, with `auth` as its `Authorization` when given; the
/// whole response, or `None` when the server cannot be reached or stops mid-way.
pub fn try_post_json(port: u16, auth: Option<&str>, path: &str, body: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    let auth = auth
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

pub fn raw(port: u16, bytes: &[u8]) -> (u16, Value) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let _ = s.write_all(bytes);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP response: {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| serde_json::from_str(b).unwrap_or(Value::Null))
        .unwrap_or(Value::Null);
    (status, body)
}

pub fn mcp_lines(calls: &[(&str, Value)]) -> String {
    let mut lines = vec![
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"fake","version":"0"}}}).to_string(),
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}).to_string(),
    ];
    for (i, (tool, args)) in calls.iter().enumerate() {
        lines.push(
            json!({"jsonrpc":"2.0","id":i + 1,"method":"tools/call","params":{"name":tool,"arguments":args}})
                .to_string(),
        );
    }
    lines.join("\n") + "\n"
}

/// The text of a chat's recorded stdout.
pub fn stdout_of(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["event"] == "output" && e["stream"] == "stdout")
        .map(|e| e["text"].as_str().unwrap())
        .collect()
}

pub fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect()
}

/// The state root's files, for "nothing changed" checks (event logs and journal included).
pub fn snapshot(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    pub fn walk(d: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                walk(&p, out);
            } else if m.is_file() {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            } else {
                out.insert(p.clone(), b"(other)".to_vec());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, &mut out);
    // The server's own lock and address files are the server's, not state it changed.
    out.retain(|p, _| !p.ends_with("server.json") && !p.ends_with("state/server/lock"));
    out
}

pub fn hold_body(chat: &str, hb: &Path, supervision: &str) -> Value {
    json!({"cli":"fake","chat":chat,"workflow":"w1","mode":"bridge-only","supervision":supervision,
           "cli_args":["hold", hb.display().to_string()]})
}

/// Waits until a `hold` chat's heartbeat exists (its TERM trap is set by then).
#[track_caller]
pub fn wait_running(hb: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !hb.exists() {
        assert!(Instant::now() < deadline, "{} never appeared", hb.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether a `hold` chat's heartbeat has stopped: a 400 ms window without growth, tried for
/// up to 10 s. A process killed under load can write one more beat while it dies; one that
/// keeps running fails every window.
pub fn stopped(file: &Path) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if !grows(file) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
    }
}

pub fn grows(file: &Path) -> bool {
    let a = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
    std::thread::sleep(Duration::from_millis(400));
    let b = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
    b > a
}

/// Fails the test when tmux is missing (`scripts/setup-test-env.sh` installs it).
pub fn need_tmux() {
    let there = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !there {
        common::missing("tmux");
    }
}

// ---- auth and input ------------------------------------------------------------------------
