//! `dispatcher serve` end to end: the real binary on a port of its own, a temporary state root,
//! a fake CLI adapter (`--profiles-dir`) whose binary is a shell script that speaks MCP to
//! `dispatcher bridge`. Servers are stopped by their own pid; chats by their own process
//! group; tmux by the state root's own socket.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentworks_e2e::{self as common, FakeCli, dispatcher_bin};
use dispatcher::server::auth;
use serde_json::{Value, json};

// ---- fixture -------------------------------------------------------------------------------

struct World {
    dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    profiles: PathBuf,
    token: String,
}

impl World {
    fn new() -> World {
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

    fn base(&self) -> PathBuf {
        std::fs::canonicalize(self.dir.path()).unwrap()
    }

    fn cmd(&self) -> Command {
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

    fn cli(&self, args: &[&str]) -> Out {
        let out = self.cmd().args(args).output().unwrap();
        Out(out)
    }

    /// A world with workflow `w1` and chat `c1`.
    fn c1_on_w1() -> World {
        let w = World::new();
        w.workflows(&["w1"]);
        w.chats(&["c1"]);
        w
    }

    fn chats(&self, ids: &[&str]) {
        for c in ids {
            self.cli(&["chat", "add", c, "--mode", "bridge-only"])
                .success();
        }
    }

    /// Chats `{prefix}0` .. `{prefix}{n-1}`, each with a file `{chat}.txt` in workflow `w1`
    /// that holds "content of {chat}" (its bridge calls read it).
    fn chats_reading_w1(&self, prefix: &str, n: usize) -> Vec<String> {
        let chats: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
        for c in &chats {
            self.chats(&[c]);
            let file = self.workflow_dir("w1").join(format!("{c}.txt"));
            std::fs::write(file, format!("content of {c}")).unwrap();
        }
        chats
    }

    fn workflows(&self, ids: &[&str]) {
        for w in ids {
            self.cli(&["workflow", "add", w]).success();
        }
    }

    fn workflow_dir(&self, w: &str) -> PathBuf {
        self.root.join("workspace-docs").join(w)
    }

    fn runtime(&self, c: &str) -> PathBuf {
        self.root.join("state/cli-runtimes/v1").join(c)
    }

    fn events(&self, chat: &str) -> Vec<Value> {
        match std::fs::read_to_string(self.root.join(format!("state/events/{chat}.jsonl"))) {
            Ok(t) => t
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    fn serve(&self) -> Server {
        self.serve_with(&[])
    }

    fn serve_with(&self, env: &[(&str, &str)]) -> Server {
        self.serve_on(0, env)
    }

    fn serve_on(&self, port: u16, env: &[(&str, &str)]) -> Server {
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
    fn cleanup(&self) {
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

fn proc_start(pid: i32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    (f.first() != Some(&"Z")).then(|| f.get(19).map(|s| s.to_string()))?
}

struct Out(std::process::Output);

impl Out {
    #[track_caller]
    fn success(&self) -> String {
        assert!(
            self.0.status.success(),
            "failed: {}\n{}",
            String::from_utf8_lossy(&self.0.stdout),
            String::from_utf8_lossy(&self.0.stderr)
        );
        String::from_utf8_lossy(&self.0.stdout).into_owned()
    }
    #[track_caller]
    fn failure(&self) -> String {
        assert!(
            !self.0.status.success(),
            "unexpected success: {}",
            String::from_utf8_lossy(&self.0.stdout)
        );
        String::from_utf8_lossy(&self.0.stderr).into_owned()
    }
}

struct Server {
    child: Option<Child>,
    port: u16,
    token: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
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

    fn get(&self, path: &str) -> Value {
        let (s, v) = self.call("GET", path, None);
        assert_eq!(s, 200, "{path}: {v}");
        v
    }

    fn chat(&self, chat: &str) -> Value {
        self.get(&format!("/v1/chats/{chat}"))
    }

    fn list(&self) -> BTreeMap<String, Value> {
        self.get("/v1/chats")["chats"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["chat"].as_str().unwrap().to_string(), c.clone()))
            .collect()
    }

    #[track_caller]
    fn launch(&self, body: Value) -> Value {
        let (s, v) = self.call("POST", "/v1/chats/launch", Some(body));
        assert_eq!(s, 201, "{v}\n{}", self.log.lock().unwrap());
        v
    }

    /// Waits until the chat is no longer running; returns its view.
    fn wait_ended(&self, chat: &str) -> Value {
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
    fn kill(mut self) {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Asks it to shut down; waits for it to exit.
    fn shutdown(mut self) {
        let (s, v) = self.call("POST", "/v1/shutdown", None);
        assert_eq!(s, 200, "{v}");
        let status = self.child.take().unwrap().wait().unwrap();
        assert!(status.success(), "{status}");
    }

    fn alive(&mut self) -> bool {
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
fn http(
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
fn proof(port: u16, token: &str, method: &str, target: &str, body: &[u8]) -> String {
    try_proof(port, token, method, target, body).expect("the handshake failed")
}

/// As [`proof`], or `None` when the server does not answer (it may be dying on purpose).
fn try_proof(port: u16, token: &str, method: &str, target: &str, body: &[u8]) -> Option<String> {
    let (cn, sn, server_proof) = hello(port)?;
    assert!(
        auth::proof_ok(token, &cn, &sn, port, &server_proof),
        "the server's proof is wrong"
    );
    Some(mac(port, token, &cn, &sn, method, target, body))
}

/// A request MAC made with `token` on a real handshake, whether or not the server holds it.
fn forged_proof(port: u16, token: &str, method: &str, target: &str, body: &[u8]) -> String {
    let (cn, sn, server_proof) = hello(port).expect("the server answers the handshake");
    assert!(!auth::proof_ok(token, &cn, &sn, port, &server_proof));
    mac(port, token, &cn, &sn, method, target, body)
}

fn mac(
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
fn hello(port: u16) -> Option<(String, String, String)> {
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
fn try_post_json(port: u16, auth: Option<&str>, path: &str, body: &str) -> Option<String> {
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

fn raw(port: u16, bytes: &[u8]) -> (u16, Value) {
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

fn mcp_lines(calls: &[(&str, Value)]) -> String {
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
fn stdout_of(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["event"] == "output" && e["stream"] == "stdout")
        .map(|e| e["text"].as_str().unwrap())
        .collect()
}

fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect()
}

/// The state root's files, for "nothing changed" checks (event logs and journal included).
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(d: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
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

fn hold_body(chat: &str, hb: &Path, supervision: &str) -> Value {
    json!({"cli":"fake","chat":chat,"workflow":"w1","mode":"bridge-only","supervision":supervision,
           "cli_args":["hold", hb.display().to_string()]})
}

/// Waits until a `hold` chat's heartbeat exists (its TERM trap is set by then).
#[track_caller]
fn wait_running(hb: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !hb.exists() {
        assert!(Instant::now() < deadline, "{} never appeared", hb.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether a `hold` chat's heartbeat has stopped: a 400 ms window without growth, tried for
/// up to 10 s. A process killed under load can write one more beat while it dies; one that
/// keeps running fails every window.
fn stopped(file: &Path) -> bool {
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

fn grows(file: &Path) -> bool {
    let a = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
    std::thread::sleep(Duration::from_millis(400));
    let b = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
    b > a
}

/// Fails the test when tmux is missing (`scripts/setup-test-env.sh` installs it).
fn need_tmux() {
    let there = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !there {
        common::missing("tmux");
    }
}

// ---- auth and input ------------------------------------------------------------------------

#[test]
fn without_the_token_nothing_is_done() {
    let w = World::c1_on_w1();
    let mut srv = w.serve();
    let info: Value =
        serde_json::from_str(&std::fs::read_to_string(w.root.join("server.json")).unwrap())
            .unwrap();
    assert_eq!(info["port"], srv.port);
    assert_eq!(info["pid"], srv.pid());
    let mode = std::fs::metadata(w.root.join("server.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(
        !std::fs::read_to_string(w.root.join("server.json"))
            .unwrap()
            .contains(&w.token)
    );

    let before = snapshot(&w.root);
    let hb = w.base().join("hb");
    let launch = hold_body("c1", &hb, "structured").to_string();
    let forged = "0".repeat(w.token.len());
    let mut near = w.token.clone();
    near.replace_range(63..64, if near.ends_with('0') { "1" } else { "0" });
    let bad_auth: Vec<Vec<(&str, String)>> = vec![
        vec![],
        // The token itself, without a proof: refused.
        vec![("Authorization", format!("Bearer {}", w.token))],
        vec![("Authorization", format!("{} {}", auth::SCHEME, w.token))],
        vec![("Authorization", format!("Bearer {forged}"))],
        vec![("Authorization", format!("Bearer {near}"))],
        vec![("Authorization", format!("Bearer {}", &w.token[..63]))],
        vec![("Authorization", format!("Basic {}", w.token))],
        vec![("Authorization", w.token.clone())],
        vec![("X-Token", w.token.clone())],
    ];
    for headers in &bad_auth {
        let mut h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        h.push(("Content-Type", "application/json"));
        for (method, path, body) in [
            ("POST", "/v1/chats/launch", launch.as_str()),
            ("GET", "/v1/chats", ""),
            ("GET", "/v1/chats/c1", ""),
            ("GET", "/v1/chats/c1/events", ""),
            ("POST", "/v1/chats/c1/stop", ""),
            ("POST", "/v1/shutdown", ""),
            ("GET", "/v1/nowhere", ""),
        ] {
            let (s, v) = http(srv.port, method, path, &h, body.as_bytes());
            assert_eq!(s, 401, "{method} {path} with {headers:?}: {v}");
            assert_eq!(v["error"]["code"], "unauthorized");
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        srv.alive(),
        "a shutdown without the token stopped the server"
    );
    // A proof is good once, for its own request, with this state root's token only.
    let (p, t) = (srv.port, w.token.as_str());
    let ct = ("Content-Type", "application/json");
    let once = proof(p, t, "GET", "/v1/chats", b"");
    assert_eq!(
        http(p, "GET", "/v1/chats", &[("Authorization", &once)], b"").0,
        200
    );
    let (s, v) = http(p, "GET", "/v1/chats", &[("Authorization", &once)], b"");
    assert_eq!(s, 401, "a replayed proof passed: {v}");
    for (method, path, body, proved) in [
        ("POST", "/v1/shutdown", "", ("GET", "/v1/chats", "")),
        (
            "POST",
            "/v1/chats/launch",
            launch.as_str(),
            ("POST", "/v1/chats/launch", "{}"),
        ),
        (
            "POST",
            "/v1/chats/launch",
            launch.as_str(),
            ("POST", "/v1/chats/c1/stop", launch.as_str()),
        ),
        (
            "GET",
            "/v1/chats/c1/events?after=1",
            "",
            ("GET", "/v1/chats/c1/events?after=0", ""),
        ),
    ] {
        let a = proof(p, t, proved.0, proved.1, proved.2.as_bytes());
        let (s, v) = http(
            p,
            method,
            path,
            &[("Authorization", &a), ct],
            body.as_bytes(),
        );
        assert_eq!(s, 401, "{method} {path} with a proof for {proved:?}: {v}");
    }
    let (s, v) = http(
        p,
        "POST",
        "/v1/shutdown",
        &[(
            "Authorization",
            &forged_proof(p, &forged, "POST", "/v1/shutdown", b""),
        )],
        b"",
    );
    assert_eq!(s, 401, "a proof with another token passed: {v}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(srv.alive(), "a shutdown without a proof stopped the server");
    assert!(!hb.exists(), "a launch without the token ran the CLI");
    assert_eq!(snapshot(&w.root), before, "the state root changed");
    assert_eq!(srv.chat("c1")["state"], "never");
    // The right token works.
    srv.launch(hold_body("c1", &hb, "structured"));
    wait_running(&hb);
    let (s, v) = srv.call("POST", "/v1/chats/c1/stop", None);
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["ended"]["code"], 7, "{v}");
    // A refused launch leaves the last one standing.
    let (s, _) = srv.call(
        "POST",
        "/v1/chats/launch",
        Some(json!({"cli":"fake","chat":"c1","workflow":"nope"})),
    );
    assert_eq!(s, 404);
    let v = srv.chat("c1");
    assert_eq!(
        (v["state"].as_str(), v["ended"]["code"].as_i64()),
        (Some("exited"), Some(7)),
        "{v}"
    );
    srv.shutdown();
}

#[test]
fn malformed_oversized_and_misdirected_requests_are_refused() {
    let w = World::c1_on_w1();
    let mut srv = w.serve();
    let before = snapshot(&w.root);
    let p = srv.port;
    // A request with a good proof for exactly itself.
    let send = |method: &str, target: &str, content_type: &str, body: &[u8]| {
        let auth = proof(p, &w.token, method, target, body);
        let h = [
            ("Authorization", auth.as_str()),
            ("Content-Type", content_type),
        ];
        http(p, method, target, &h, body)
    };
    let json = "application/json";
    let post = |body: &[u8]| send("POST", "/v1/chats/launch", json, body);

    let (s, v) = post(b"{not json");
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (400, Some("bad_json")),
        "{v}"
    );
    let (s, v) = post(b"[1,2]");
    assert_eq!(s, 400, "{v}");
    let (s, v) = post(br#"{"cli":"fake","chat":"c1","workflow":"w1","colour":"red"}"#);
    assert_eq!(s, 400, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("colour"),
        "{v}"
    );
    let (s, v) = post(br#"{"cli":"fake","chat":"c1"}"#);
    assert_eq!(s, 400, "{v}");
    let (s, v) = post(b"");
    assert_eq!(s, 400, "{v}");
    let (s, v) = send(
        "POST",
        "/v1/chats/launch",
        "text/plain",
        br#"{"cli":"fake","chat":"c1","workflow":"w1"}"#,
    );
    assert_eq!(s, 415, "{v}");
    // Over the body limit: refused before it is read.
    let big = vec![b' '; dispatcher::server::MAX_BODY_BYTES + 1];
    let (s, v) = post(&big);
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (413, Some("body_too_large")),
        "{v}"
    );
    // Refused before the proof is looked at, even with one that is otherwise good.
    let auth = proof(p, &w.token, "GET", "/v1/chats", b"");
    // A body that claims more than the limit, and sends nothing.
    let (s, _) = raw(
        p,
        format!("POST /v1/chats/launch HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nAuthorization: {auth}\r\nContent-Length: 99999999999\r\n\r\n").as_bytes(),
    );
    assert_eq!(s, 413);
    let (s, _) = raw(
        p,
        format!("POST /v1/chats/launch HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nAuthorization: {auth}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").as_bytes(),
    );
    assert_eq!(s, 411);
    let mut huge = format!(
        "GET /v1/chats HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nAuthorization: {auth}\r\nX-Pad: "
    );
    huge.push_str(&"a".repeat(dispatcher::server::MAX_HEADER_BYTES));
    huge.push_str("\r\n\r\n");
    assert_eq!(raw(p, huge.as_bytes()).0, 431);
    assert_eq!(raw(p, b"GARBAGE\r\n\r\n").0, 400);
    assert_eq!(raw(p, b"GET /v1/chats HTTP/9.9\r\n\r\n").0, 505);
    // A Host that is not this loopback port (DNS rebinding): refused before the token.
    let (s, _) = raw(
        p,
        format!(
            "GET /v1/chats HTTP/1.1\r\nHost: evil.example:{p}\r\nAuthorization: {auth}\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_eq!(s, 400);
    let (s, v) = send("DELETE", "/v1/chats", json, b"");
    assert_eq!(s, 405, "{v}");
    let (s, v) = send("GET", "/v1/chats/launch/x", json, b"");
    assert_eq!(s, 404, "{v}");
    let (s, v) = send(
        "POST",
        "/v1/chats/c1/stop",
        json,
        br#"{"grace_seconds":-1}"#,
    );
    assert_eq!(s, 400, "{v}");
    let (s, v) = send("GET", "/v1/chats/c1/events?after=x", json, b"");
    assert_eq!(s, 400, "{v}");
    // A client that sends half a request and stalls is cut off, and others are served.
    let mut slow = TcpStream::connect(("127.0.0.1", p)).unwrap();
    slow.write_all(b"GET /v1/chats HTTP/1.1\r\n").unwrap();
    assert_eq!(srv.list().len(), 1);
    let t = Instant::now();
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut resp = String::new();
    let _ = slow.read_to_string(&mut resp);
    assert!(resp.starts_with("HTTP/1.1 408"), "{resp:?}");
    assert!(t.elapsed() <= dispatcher::server::REQUEST_TIMEOUT + Duration::from_secs(2));

    assert!(srv.alive());
    assert_eq!(
        snapshot(&w.root),
        before,
        "a refused request changed the state root"
    );
    srv.shutdown();
}

#[test]
fn unknown_chats_workflows_and_clis_are_clear_4xx_and_change_nothing() {
    let w = World::c1_on_w1();
    let srv = w.serve();
    let before = snapshot(&w.root);
    let cases = [
        (
            json!({"cli":"fake","chat":"nope","workflow":"w1"}),
            404,
            "unknown_chat",
            "nope",
        ),
        (
            json!({"cli":"fake","chat":"c1","workflow":"nope"}),
            404,
            "unknown_workflow",
            "nope",
        ),
        (
            json!({"cli":"nope","chat":"c1","workflow":"w1"}),
            404,
            "unknown_cli",
            "fake",
        ),
        (
            json!({"cli":"fake","chat":"../c1","workflow":"w1"}),
            400,
            "bad_request",
            "invalid chat id",
        ),
        (
            json!({"cli":"fake","chat":"c1","workflow":"w1","mode":"unconfined"}),
            400,
            "bad_request",
            "unconfined",
        ),
        (
            json!({"cli":"fake","chat":"c1","workflow":"w1","supervision":"screen"}),
            400,
            "bad_request",
            "screen",
        ),
        (
            json!({"cli":"fake","chat":"c1","workflow":"w1","attach":["w1"]}),
            422,
            "launch_refused",
            "own workflow",
        ),
        (
            json!({"cli":"fake","chat":"c1","workflow":"w1","attach":["nope"]}),
            404,
            "unknown_workflow",
            "nope",
        ),
        (
            json!({"cli":"fake","chat":"c1","workflow":"w1","cli_args":["a\u{0}b"]}),
            400,
            "bad_request",
            "NUL",
        ),
    ];
    for (body, status, code, says) in cases {
        let (s, v) = srv.call("POST", "/v1/chats/launch", Some(body.clone()));
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (status, Some(code)),
            "{body}: {v}"
        );
        assert!(
            v["error"]["message"].as_str().unwrap().contains(says),
            "{body}: {v}"
        );
    }
    for (method, path, status, code) in [
        ("POST", "/v1/chats/nope/stop", 404, "unknown_chat"),
        ("POST", "/v1/chats/c1/stop", 409, "not_running"),
        ("GET", "/v1/chats/nope/events", 404, "unknown_chat"),
        ("GET", "/v1/chats/nope", 404, "unknown_chat"),
        ("GET", "/v1/chats/bad%2Fid", 400, "bad_request"),
    ] {
        let (s, v) = srv.call(method, path, None);
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (status, Some(code)),
            "{method} {path}: {v}"
        );
    }
    assert_eq!(snapshot(&w.root), before);
    // The client commands say the server's words.
    let err = w
        .cli(&[
            "chats",
            "launch",
            "--cli",
            "nope",
            "--chat",
            "c1",
            "--workflow",
            "w1",
        ])
        .failure();
    assert!(
        err.contains("404") && err.contains("unknown CLI \"nope\""),
        "{err}"
    );
    srv.shutdown();
}

#[test]
fn serve_listens_on_loopback_only_and_once_per_state_root() {
    let w = World::new();
    for bind in ["0.0.0.0", "192.168.1.1", "::1", "localhost"] {
        let err = w.cli(&["serve", "--bind", bind]).failure();
        assert!(err.contains("127.0.0.1 only"), "{bind}: {err}");
    }
    let srv = w.serve();
    let err = w.cli(&["serve", "--port", "0"]).failure();
    assert!(
        err.contains("already serves") && err.contains(&srv.port.to_string()),
        "{err}"
    );
    srv.shutdown();
    assert!(
        !w.root.join("server.json").exists(),
        "server.json left after a clean stop"
    );
}

// ---- a squatter on the server's port ------------------------------------------------------

/// What a process that took the server's port does with a connection.
#[derive(Clone, Copy, Debug)]
enum Squat {
    /// Reads the request, answers nothing.
    Silent,
    /// Answers the handshake with a made-up proof.
    Fake,
    /// Passes each request to the real server on this port and its answer back.
    Relay(u16),
}

/// A listener of the same uid on `port` that records every byte it receives, per connection.
struct Squatter {
    got: Arc<Mutex<Vec<Vec<u8>>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Squatter {
    fn bind(port: u16, how: Squat) -> Squatter {
        let listener = std::net::TcpListener::bind(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("the squatter cannot bind 127.0.0.1:{port}: {e}"));
        listener.set_nonblocking(true).unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (g, st) = (got.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                let mut conn = match listener.accept() {
                    Ok((c, _)) => c,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                };
                conn.set_nonblocking(false).unwrap();
                conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let bytes = read_one_request(&mut conn);
                g.lock().unwrap().push(bytes.clone());
                match how {
                    Squat::Silent => {}
                    Squat::Fake => {
                        let body = json!({
                            "server_nonce": auth::new_nonce().unwrap(),
                            "server_proof": auth::new_nonce().unwrap(),
                        })
                        .to_string();
                        let _ = conn.write_all(
                            format!(
                                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                                body.len()
                            )
                            .as_bytes(),
                        );
                    }
                    Squat::Relay(real) => {
                        let text = String::from_utf8_lossy(&bytes)
                            .replace(&format!("127.0.0.1:{port}"), &format!("127.0.0.1:{real}"));
                        if let Ok(mut up) = TcpStream::connect(("127.0.0.1", real)) {
                            let _ = up.write_all(text.as_bytes());
                            let mut answer = Vec::new();
                            let _ = up.read_to_end(&mut answer);
                            let _ = conn.write_all(&answer);
                        }
                    }
                }
            }
        });
        Squatter {
            got,
            stop,
            thread: Some(thread),
        }
    }

    /// Stops listening (the port is free again) and returns what it received.
    fn finish(mut self) -> Vec<Vec<u8>> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap();
        std::mem::take(&mut *self.got.lock().unwrap())
    }
}

/// One request's bytes: the head, then `Content-Length` bytes of body.
fn read_one_request(conn: &mut TcpStream) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return buf;
            }
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return buf,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A port that was free a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The server's port is not the state root's: after a crash (`server.json` left behind) or a
/// clean stop on a fixed port, any process of the same uid (a confined chat is one) may bind
/// it. `dispatcher chats list` and `dispatcher stop --port` against such a squatter (silent,
/// answering with a made-up proof, or relaying to the real server on another port) fail
/// with an error naming the address and the state root, and what it recorded holds neither
/// the token nor anything the real server accepts. Controls: the same commands work against
/// the real server; the token alone, without a proof, is refused.
#[test]
fn a_squatter_on_the_servers_port_gets_no_token_and_nothing_that_authenticates() {
    const AS_USER: &str = "SERVER_SQUATTER_TEST_AS_USER";
    const NAME: &str =
        "a_squatter_on_the_servers_port_gets_no_token_and_nothing_that_authenticates";
    if common::is_rerun(AS_USER) {
        // The copy run as the test user.
        squatter_gets_nothing();
        return;
    }
    common::require_root();
    squatter_gets_nothing();
    // The same as the unprivileged test user: the squatter is a process of that uid.
    common::rerun_as_test_user(NAME, AS_USER);
}

fn squatter_gets_nothing() {
    let w = World::c1_on_w1();
    let root = w.root.display().to_string();
    let mut recorded: Vec<Vec<u8>> = Vec::new();
    let says_not_ours = |err: &str, port: u16, root: &str| {
        for part in [
            format!("127.0.0.1:{port}"),
            "is not the server of the state root".to_string(),
            root.to_string(),
        ] {
            assert!(err.contains(&part), "{err:?} does not say {part:?}");
        }
    };
    let no_token = |got: &[Vec<u8>], token: &str| {
        for bytes in got {
            let text = String::from_utf8_lossy(bytes);
            assert!(
                !text.contains(token),
                "the token reached a squatter: {text}"
            );
        }
    };

    // The real server, on another port, for the controls and the relay.
    let real = w.serve();
    let real_port = real.port;
    let listed = w.cli(&["chats", "list"]).success();
    assert!(listed.contains("c1"), "{listed}");
    real.kill();

    // 1. A crash leaves server.json naming a port; a squatter takes it.
    let crashed = w.serve();
    let stale_port = crashed.port;
    crashed.kill();
    assert!(
        w.root.join("server.json").exists(),
        "a crash leaves server.json"
    );
    let real = w.serve_on(real_port, &[]);
    // The restarted server rewrote server.json; put the stale one back.
    std::fs::write(
        w.root.join("server.json"),
        json!({"pid": 1, "port": stale_port, "started_ms": 0}).to_string(),
    )
    .unwrap();
    for how in [Squat::Silent, Squat::Fake, Squat::Relay(real_port)] {
        let sq = Squatter::bind(stale_port, how);
        let list = w.cli(&["chats", "list"]).failure();
        let stop = w
            .cli(&["stop", "--port", &stale_port.to_string()])
            .failure();
        let got = sq.finish();
        assert!(
            got.len() >= 2,
            "{how:?}: the client did not connect ({got:?})"
        );
        no_token(&got, &w.token);
        says_not_ours(&list, stale_port, &root);
        says_not_ours(&stop, stale_port, &root);
        if !matches!(how, Squat::Silent) {
            // A made-up proof, or the real server's proof for its own port, is told apart.
            assert!(list.contains("its proof is wrong"), "{how:?}: {list}");
        }
        recorded.extend(got);
    }

    // 2. A clean stop on a fixed port; a squatter takes the port.
    // (The real server holds this state root's lock: the fixed port serves a second root.)
    let fixed = free_port();
    let w2 = World::new();
    w2.workflows(&["w1"]);
    let srv2 = w2.serve_on(fixed, &[]);
    let out = w2.cli(&["stop", "--port", &fixed.to_string()]).success();
    assert!(out.contains("stopped"), "{out}");
    drop(srv2);
    let root2 = w2.root.display().to_string();
    for how in [Squat::Silent, Squat::Fake, Squat::Relay(real_port)] {
        let sq = Squatter::bind(fixed, how);
        let err = w2.cli(&["stop", "--port", &fixed.to_string()]).failure();
        let got = sq.finish();
        assert!(!got.is_empty(), "{how:?}: the client did not connect");
        no_token(&got, &w2.token);
        says_not_ours(&err, fixed, &root2);
        recorded.extend(got);
    }

    // What the squatters recorded: no token, no proof, nothing the real server accepts.
    let mut real = real;
    let before = snapshot(&w.root);
    for bytes in &recorded {
        let text = String::from_utf8_lossy(bytes);
        for secret in [&w.token, &w2.token] {
            assert!(
                !text.contains(secret.as_str()),
                "the token reached a squatter: {text}"
            );
        }
        assert!(
            !text.to_ascii_lowercase().contains("authorization"),
            "a proof reached a squatter: {text}"
        );
        assert!(text.starts_with("POST /v1/hello "), "{text}");
        // Replayed against the real server (its Host made right): the handshake's first step
        // only, which authenticates nothing; the same bytes sent to any other route are refused.
        let replay = text
            .replace(
                &format!("127.0.0.1:{stale_port}"),
                &format!("127.0.0.1:{real_port}"),
            )
            .replace(
                &format!("127.0.0.1:{fixed}"),
                &format!("127.0.0.1:{real_port}"),
            );
        let (s, v) = raw(real_port, replay.as_bytes());
        assert!(s == 200 && v.get("server_proof").is_some(), "{s} {v}");
        for route in ["/v1/shutdown", "/v1/chats/launch", "/v1/chats/c1/stop"] {
            let (s, v) = raw(real_port, replay.replacen("/v1/hello", route, 1).as_bytes());
            assert_eq!(s, 401, "{route}: {v}");
        }
    }
    assert!(real.alive(), "a replay stopped the real server");
    assert_eq!(snapshot(&w.root), before, "a replay changed the state root");

    // Control: the token alone, as a bearer token, is refused by the real server.
    for scheme in ["Bearer", auth::SCHEME] {
        let h = format!("{scheme} {}", w.token);
        let (s, v) = http(real_port, "GET", "/v1/chats", &[("Authorization", &h)], b"");
        assert_eq!(s, 401, "{scheme}: {v}");
        let (s, v) = http(
            real_port,
            "POST",
            "/v1/shutdown",
            &[("Authorization", &h)],
            b"",
        );
        assert_eq!(s, 401, "{scheme}: {v}");
    }
    // Control: against the real server the same commands work.
    std::fs::write(
        w.root.join("server.json"),
        json!({"pid": real.pid(), "port": real_port, "started_ms": 0}).to_string(),
    )
    .unwrap();
    let listed = w.cli(&["chats", "list"]).success();
    assert!(listed.contains("c1"), "{listed}");
    let out = w.cli(&["stop", "--port", &real_port.to_string()]).success();
    assert!(out.contains(&format!("pid {}", real.pid())), "{out}");
}

// ---- chats ---------------------------------------------------------------------------------

#[test]
fn a_bridge_only_chat_reaches_its_workflow_through_the_bridge_and_nothing_more() {
    let w = World::new();
    w.workflows(&["w1", "w2"]);
    w.chats(&["c1"]);
    let wf = w.workflow_dir("w1");
    std::fs::write(wf.join("notes.md"), "workflow notes\n").unwrap();
    std::fs::write(w.workflow_dir("w2").join("secret.md"), "other workflow\n").unwrap();
    let config = w.root.join("config.json");
    let script = w.base().join("session.jsonl");
    std::fs::write(
        &script,
        mcp_lines(&[
            ("read_file", json!({"path": wf.join("notes.md")})),
            (
                "write_file",
                json!({"path": wf.join("out.md"), "content": "written via bridge", "create": true}),
            ),
            ("read_file", json!({"path": config})),
            (
                "read_file",
                json!({"path": w.workflow_dir("w2").join("secret.md")}),
            ),
            (
                "write_file",
                json!({"path": w.workflow_dir("w2").join("x.md"), "content": "no", "create": true}),
            ),
            ("list_dir", json!({"path": wf.join("planning")})),
        ]),
    )
    .unwrap();
    let srv = w.serve();
    let v = srv.launch(json!({
        "cli":"fake","chat":"c1","workflow":"w1","mode":"bridge-only",
        "cli_args":["mcp", script.display().to_string(), config.display().to_string()]
    }));
    assert_eq!(v["mode"], "bridge-only");
    assert_eq!(v["state"], "running");
    let end = srv.wait_ended("c1");
    assert_eq!(end["state"], "exited");
    assert_eq!(end["ended"]["code"], 0, "{end}");

    let events = w.events("c1");
    let out = stdout_of(&events);
    // Native tools off, as the adapter says for bridge-only.
    assert!(out.contains("fake-cli native-tools=off"), "{out}");
    let replies: HashMap<i64, Value> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| Some((v["id"].as_i64()?, v)))
        .collect();
    let text = |id: i64| {
        replies[&id]["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let is_err = |id: i64| replies[&id]["result"]["isError"].as_bool().unwrap();
    assert!(
        !is_err(1) && text(1).contains("workflow notes"),
        "{}",
        text(1)
    );
    assert!(!is_err(2), "{}", text(2));
    for id in 3..=6 {
        assert!(is_err(id), "call {id} was allowed: {}", text(id));
    }
    assert_eq!(
        std::fs::read_to_string(wf.join("out.md")).unwrap(),
        "written via bridge"
    );
    assert!(!w.workflow_dir("w2").join("x.md").exists());
    // The sandbox refuses the protected file to the CLI itself too.
    assert!(out.contains("direct-read: refused"), "{out}");

    let bridge: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["event"] == "bridge")
        .map(|e| {
            (
                e["call"]["tool"].as_str().unwrap(),
                e["call"]["verdict"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        bridge,
        vec![
            ("read_file", "allow"),
            ("write_file", "allow"),
            ("read_file", "deny"),
            ("read_file", "deny"),
            ("write_file", "deny"),
            ("list_dir", "deny"),
        ]
    );
    let k = kinds(&events);
    assert_eq!(k.first().map(String::as_str), Some("launching"));
    assert_eq!(k.get(1).map(String::as_str), Some("started"));
    assert_eq!(k.last().map(String::as_str), Some("exited"));
    let started = &events[1];
    assert_eq!(started["mode"], "bridge-only");
    assert!(
        started["reason"].as_str().unwrap().contains("requested"),
        "{started}"
    );
    // The bridge is served only while the chat runs.
    assert!(!w.runtime("c1").join("bridge.sock").exists());
    srv.shutdown();
}

#[test]
fn client_commands_launch_list_stop_and_read_events() {
    let w = World::c1_on_w1();
    let srv = w.serve();
    let hb = w.base().join("hb");
    let out = w
        .cli(&[
            "chats",
            "launch",
            "--cli",
            "fake",
            "--chat",
            "c1",
            "--workflow",
            "w1",
            "--mode",
            "bridge-only",
            "--",
            "hold",
            hb.to_str().unwrap(),
        ])
        .success();
    assert!(out.contains("launched chat c1"), "{out}");
    wait_running(&hb);
    let list = w.cli(&["chats", "list"]).success();
    let row = list.lines().find(|l| l.starts_with("c1 ")).unwrap();
    assert!(
        row.contains("running") && row.contains("bridge-only") && row.contains("pid "),
        "{list}"
    );
    let json_list: Value =
        serde_json::from_str(&w.cli(&["chats", "list", "--json"]).success()).unwrap();
    assert_eq!(json_list["chats"][0]["state"], "running");
    let out = w.cli(&["chats", "stop", "c1", "--grace", "5"]).success();
    assert!(out.contains("exited with status 7"), "{out}");
    let events = w.cli(&["chats", "events", "c1", "--json"]).success();
    let kinds: Vec<String> = events
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["event"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(kinds.first().map(String::as_str), Some("launching"));
    assert!(kinds.contains(&"stop_requested".to_string()), "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("exited"));
    let text = w.cli(&["chats", "events", "c1"]).success();
    assert!(text.contains("got-term"), "{text}");
    srv.shutdown();
    // Without a server, the client says so.
    let err = w.cli(&["chats", "list"]).failure();
    assert!(err.contains("dispatcher serve"), "{err}");
}

#[test]
fn tmux_chats_run_on_the_state_roots_tmux_and_stop_with_their_status() {
    need_tmux();
    let w = World::new();
    w.workflows(&["w1"]);
    w.chats(&["c1", "c2"]);
    let srv = w.serve();
    let hb = w.base().join("hb");
    let pwned = w.base().join("PWNED");
    // An argument ending in ';' would end tmux's new-session and run the rest as tmux
    // commands (run-shell: unconfined). It must reach the CLI as an argument.
    let v = srv.launch(
        json!({"cli":"fake","chat":"c1","workflow":"w1","mode":"bridge-only","supervision":"tmux",
        "cli_args":["args", "x;", "run-shell", format!("touch {}", pwned.display()), "y\\;"]}),
    );
    assert_eq!(v["tmux_session"], "chat-c1");
    let end = srv.wait_ended("c1");
    assert_eq!(end["ended"]["code"], 0, "{end}");
    assert!(!pwned.exists(), "a CLI argument ran as a tmux command");

    let v = srv.launch(hold_body("c2", &hb, "tmux"));
    assert_eq!(v["state"], "running");
    assert!(
        v["tmux_attach"]
            .as_str()
            .unwrap()
            .contains(&w.root.join("tmux/default").display().to_string())
    );
    assert!(grows(&hb), "the tmux chat does not run");
    let sessions = Command::new("tmux")
        .arg("-S")
        .arg(w.root.join("tmux/default"))
        .args(["list-sessions", "-F", "#{session_name}"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&sessions.stdout).trim(), "chat-c2");
    let (s, v) = srv.call(
        "POST",
        "/v1/chats/c2/stop",
        Some(json!({"grace_seconds": 5})),
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["ended"]["code"], 7, "{v}");
    assert!(stopped(&hb));
    let k = kinds(&w.events("c2"));
    assert_eq!(k, vec!["launching", "started", "stop_requested", "exited"]);
    srv.shutdown();
}

#[test]
fn two_servers_side_by_side_see_only_their_own_chats_and_stop_only_themselves() {
    let a = World::new();
    let b = World::new();
    a.workflows(&["w1"]);
    b.workflows(&["w1"]);
    a.chats(&["shared", "only-a"]);
    b.chats(&["shared", "only-b"]);
    let mut sa = a.serve();
    let mut sb = b.serve();
    assert_ne!(sa.port, sb.port);
    let hb_a = a.base().join("hb");
    let v = sa.launch(hold_body("shared", &hb_a, "structured"));
    assert_eq!(v["state"], "running");
    assert_eq!(sb.chat("shared")["state"], "never");
    assert_eq!(
        sb.list().keys().cloned().collect::<Vec<_>>(),
        vec!["only-b", "shared"]
    );
    assert_eq!(
        sa.list().keys().cloned().collect::<Vec<_>>(),
        vec!["only-a", "shared"]
    );
    let (s, _) = sb.call("POST", "/v1/chats/shared/stop", None);
    assert_eq!(s, 409, "B stopped A's chat");
    let (s, _) = sb.call("GET", "/v1/chats/only-a", None);
    assert_eq!(s, 404);
    // A's token is not B's.
    let (s, _) = http(
        sb.port,
        "GET",
        "/v1/chats",
        &[(
            "Authorization",
            &forged_proof(sb.port, &a.token, "GET", "/v1/chats", b""),
        )],
        b"",
    );
    assert_eq!(s, 401);
    // `stop --port` with the other state root stops nothing: that server cannot prove it
    // holds this state root's token.
    let err = b.cli(&["stop", "--port", &sa.port.to_string()]).failure();
    assert!(err.contains("is not the server of the state root"), "{err}");
    assert!(sa.alive() && sb.alive());
    // With its own state root it stops that server only; its chat keeps running.
    let out = a.cli(&["stop", "--port", &sa.port.to_string()]).success();
    assert!(out.contains(&format!("pid {}", sa.pid())), "{out}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while sa.alive() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(sb.alive());
    assert_eq!(sb.list().len(), 2);
    assert!(grows(&hb_a), "stopping the server stopped its chat");
    // The next server of A adopts it, then stops it.
    let sa2 = a.serve();
    let v = sa2.chat("shared");
    assert_eq!(
        (v["state"].as_str(), v["adopted"].as_bool()),
        (Some("running"), Some(true)),
        "{v}"
    );
    let (s, v) = sa2.call("POST", "/v1/chats/shared/stop", None);
    assert_eq!(s, 200, "{v}");
    assert!(stopped(&hb_a));
    let events = a.events("shared");
    let k: Vec<String> = kinds(&events)
        .into_iter()
        .filter(|k| k != "output")
        .collect();
    assert_eq!(
        k,
        vec!["launching", "started", "adopted", "stop_requested", "lost"]
    );
    // Output written while no server ran, and after the restart, is all recorded.
    let out = stdout_of(&events);
    assert!(
        out.starts_with("fake-cli native-tools=off\n") && out.ends_with("got-term\n"),
        "{out:?}"
    );
    sa2.shutdown();
    sb.shutdown();
}

// ---- crashes -------------------------------------------------------------------------------

/// Checks the invariants a crash must keep: every launch in a chat's log begins with
/// `launching` and ends with at most one of `exited`/`lost`/`launch_failed`, and the chat
/// list agrees (running ⇔ the last launch has no end; never "launching" at rest).
fn assert_consistent(w: &World, srv: &Server) {
    let list = srv.list();
    for (chat, view) in &list {
        let events = w.events(chat);
        let mut open: Option<String> = None;
        let mut ends: HashMap<String, usize> = HashMap::new();
        for e in &events {
            let launch = e["launch"].as_str().map(str::to_string);
            match e["event"].as_str().unwrap() {
                "launching" => {
                    assert!(
                        open.is_none(),
                        "chat {chat}: a launch began while {open:?} was open: {events:#?}"
                    );
                    open = launch;
                }
                "exited" => {
                    let l = open
                        .take()
                        .unwrap_or_else(|| panic!("chat {chat}: exited outside a launch"));
                    *ends.entry(l).or_default() += 1;
                }
                "lost" | "launch_failed" => {
                    let l = launch.unwrap();
                    if open.as_deref() == Some(l.as_str()) {
                        open = None;
                    }
                    *ends.entry(l).or_default() += 1;
                }
                "started" | "adopted" | "bridge" | "output" | "stop_requested" => {}
                other => panic!("chat {chat}: unexpected event {other}"),
            }
        }
        for (l, n) in &ends {
            assert_eq!(*n, 1, "chat {chat}: launch {l} ended {n} times");
        }
        let state = view["state"].as_str().unwrap();
        assert_ne!(state, "launching", "chat {chat} half-registered: {view}");
        match &open {
            Some(l) => {
                assert_eq!(
                    state, "running",
                    "chat {chat}: launch {l} has no end but the chat is {view}"
                );
                assert_eq!(view["launch"].as_str(), Some(l.as_str()));
            }
            None => assert_ne!(
                state, "running",
                "chat {chat} runs without an open launch: {view}"
            ),
        }
        if let Some(l) = view["launch"].as_str()
            && state != "running"
        {
            assert_eq!(
                ends.get(l),
                Some(&1),
                "chat {chat}: the record's launch {l} has no end event"
            );
        }
    }
}

#[test]
fn a_server_killed_at_each_step_of_a_launch_rolls_back_or_adopts_on_restart() {
    let w = World::new();
    w.workflows(&["w1"]);
    let steps = ["intent", "spawned", "started"];
    need_tmux();
    let sups = ["structured", "tmux"];
    for sup in &sups {
        for step in steps {
            let chat = format!("{step}-{sup}");
            w.chats(&[&chat]);
            let hb = w.base().join(format!("hb-{chat}"));
            let srv = w.serve_with(&[(dispatcher::server::CRASH_AT_ENV, step)]);
            let (s, _) = {
                let body = hold_body(&chat, &hb, sup).to_string();
                let auth = proof(
                    srv.port,
                    &w.token,
                    "POST",
                    "/v1/chats/launch",
                    body.as_bytes(),
                );
                let mut stream = TcpStream::connect(("127.0.0.1", srv.port)).unwrap();
                let req = format!(
                    "POST /v1/chats/launch HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: {auth}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    srv.port,
                    body.len()
                );
                stream.write_all(req.as_bytes()).unwrap();
                let mut out = String::new();
                let _ = stream.read_to_string(&mut out);
                (out.len(), ())
            };
            assert_eq!(
                s, 0,
                "{step}/{sup}: the server answered instead of crashing"
            );
            let mut srv = srv;
            let deadline = Instant::now() + Duration::from_secs(10);
            while srv.alive() {
                assert!(Instant::now() < deadline);
                std::thread::sleep(Duration::from_millis(10));
            }
            let srv = w.serve();
            let view = srv.chat(&chat);
            let k = kinds(&w.events(&chat));
            match step {
                "intent" | "spawned" => {
                    assert_eq!(view["state"], "failed", "{step}/{sup}: {view}");
                    assert_eq!(k, vec!["launching", "launch_failed"], "{step}/{sup}");
                    let how = view["ended"]["how"].as_str().unwrap();
                    assert!(how.contains("rolled back"), "{how}");
                    if step == "spawned" {
                        assert!(!how.contains("nothing had started"), "{step}/{sup}: {how}");
                    }
                    assert!(
                        stopped(&hb),
                        "{step}/{sup}: the rolled-back chat still runs"
                    );
                }
                _ => {
                    assert_eq!(view["state"], "running", "{step}/{sup}: {view}");
                    assert_eq!(view["adopted"], true);
                    assert_eq!(&k[..2], ["launching", "started"], "{step}/{sup}");
                    assert!(k.contains(&"adopted".to_string()), "{k:?}");
                    assert!(grows(&hb), "{step}/{sup}: the adopted chat does not run");
                    // Its bridge is served again.
                    let sock = w.runtime(&chat).join("bridge.sock");
                    let reply = bridge_call(
                        &mut connect(&sock),
                        1,
                        "list_dir",
                        json!({"path": w.workflow_dir("w1")}),
                    );
                    assert_eq!(reply["result"]["isError"], false, "{reply}");
                    let (s, v) = srv.call("POST", &format!("/v1/chats/{chat}/stop"), None);
                    assert_eq!(s, 200, "{v}");
                    assert!(stopped(&hb));
                }
            }
            assert_consistent(&w, &srv);
            srv.shutdown();
        }
    }
    // A crash after a chat's end event but before its record: the record catches up.
    let chat = "ended-structured";
    w.chats(&[chat]);
    let srv = w.serve_with(&[(dispatcher::server::CRASH_AT_ENV, "ended")]);
    // The CLI exits 0.3 s after it starts: after the launch was answered.
    let (s, v) = srv.call(
        "POST",
        "/v1/chats/launch",
        Some(json!({"cli":"fake","chat":chat,"workflow":"w1","mode":"bridge-only","cli_args":["exit","3"]})),
    );
    assert_eq!(s, 201, "{v}");
    let mut srv = srv;
    let deadline = Instant::now() + Duration::from_secs(10);
    while srv.alive() {
        assert!(
            Instant::now() < deadline,
            "the server did not crash at 'ended'"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let srv = w.serve();
    let view = srv.chat(chat);
    assert_eq!(
        (view["state"].as_str(), view["ended"]["code"].as_i64()),
        (Some("exited"), Some(3)),
        "{view}"
    );
    assert_eq!(
        kinds(&w.events(chat)).last().map(String::as_str),
        Some("exited")
    );
    assert_consistent(&w, &srv);
    srv.shutdown();
}

fn connect(sock: &Path) -> (BufReader<UnixStream>, UnixStream) {
    let s = UnixStream::connect(sock).unwrap_or_else(|e| panic!("{}: {e}", sock.display()));
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    (BufReader::new(s.try_clone().unwrap()), s)
}

fn bridge_call(
    conn: &mut (BufReader<UnixStream>, UnixStream),
    id: u64,
    tool: &str,
    args: Value,
) -> Value {
    try_bridge_call(conn, id, tool, args).expect("bridge call")
}

fn try_bridge_call(
    conn: &mut (BufReader<UnixStream>, UnixStream),
    id: u64,
    tool: &str,
    args: Value,
) -> std::io::Result<Value> {
    let mut line = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":args}}).to_string();
    line.push('\n');
    conn.1.write_all(line.as_bytes())?;
    let mut reply = String::new();
    if conn.0.read_line(&mut reply)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    serde_json::from_str(&reply).map_err(std::io::Error::other)
}

#[test]
fn sigkill_during_launches_and_bridge_calls_loses_no_recorded_event() {
    let w = World::new();
    w.workflows(&["w1"]);
    let n = 8;
    let chats = w.chats_reading_w1("k", n);
    let base = w.base();
    let hb = |c: &str| base.join(format!("hb-{c}"));
    let bridge_reads = |c: &str| {
        w.events(c)
            .iter()
            .filter(|e| e["event"] == "bridge" && e["call"]["tool"] == "read_file")
            .count()
    };
    let (running, launching) = chats.split_at(n / 2);
    for round in 0..3u64 {
        let srv = w.serve();
        let port = srv.port;
        // Half the chats run (adopted from the last round, or launched now) and take bridge
        // calls; the other half are being launched when the server is killed.
        for c in running {
            if srv.chat(c)["state"] != "running" {
                srv.launch(hold_body(c, &hb(c), "structured"));
            }
        }
        let recorded_before: HashMap<String, usize> = running
            .iter()
            .map(|c| (c.clone(), bridge_reads(c)))
            .collect();
        let acked: Arc<Mutex<HashMap<String, usize>>> = Arc::new(Mutex::new(HashMap::new()));
        let mut threads = Vec::new();
        for c in running {
            let (sock, acked, c, path) = (
                w.runtime(c).join("bridge.sock"),
                acked.clone(),
                c.clone(),
                w.workflow_dir("w1").join(format!("{c}.txt")),
            );
            threads.push(std::thread::spawn(move || {
                let s = UnixStream::connect(&sock).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut conn = (BufReader::new(s.try_clone().unwrap()), s);
                for id in 0..20_000u64 {
                    match try_bridge_call(&mut conn, id, "read_file", json!({"path": path})) {
                        Ok(v) => {
                            assert_eq!(v["id"], id, "crossed reply");
                            let text = v["result"]["content"][0]["text"].as_str().unwrap();
                            assert_eq!(text, format!("content of {c}"), "crossed reply");
                            *acked.lock().unwrap().entry(c.clone()).or_default() += 1;
                        }
                        Err(_) => return,
                    }
                }
            }));
        }
        let token = w.token.clone();
        for c in launching {
            let launch = hold_body(c, &hb(c), "structured").to_string();
            let (token, c) = (token.clone(), c.clone());
            threads.push(std::thread::spawn(move || {
                // Launch, stop, launch again… until the server dies: the kill lands inside a
                // launch or a stop. No answer is a possible outcome.
                let send = |path: &str, body: &str| -> Option<String> {
                    let auth = try_proof(port, &token, "POST", path, body.as_bytes())?;
                    let out = try_post_json(port, Some(&auth), path, body)?;
                    (!out.is_empty()).then_some(out)
                };
                for _ in 0..200 {
                    let Some(r) = send("/v1/chats/launch", &launch) else {
                        return;
                    };
                    assert!(r.starts_with("HTTP/1.1 201"), "{r}");
                    let Some(r) = send(&format!("/v1/chats/{c}/stop"), "{\"grace_seconds\":5}")
                    else {
                        return;
                    };
                    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
                }
            }));
        }
        std::thread::sleep(Duration::from_millis(300 + 200 * round));
        srv.kill();
        for t in threads {
            t.join().unwrap();
        }
        let acked = acked.lock().unwrap().clone();
        let srv = w.serve();
        assert_consistent(&w, &srv);
        eprintln!(
            "round {round}: acked {acked:?}\n{}",
            srv.log.lock().unwrap()
        );
        for c in running {
            let mine = acked.get(c).copied().unwrap_or(0);
            let recorded = bridge_reads(c) - recorded_before[c];
            // Every answered call is recorded; at most the one in flight is recorded unanswered.
            assert!(
                recorded == mine || recorded == mine + 1,
                "round {round} chat {c}: {mine} calls answered, {recorded} recorded"
            );
            assert!(
                mine > 0,
                "round {round} chat {c}: no bridge call went through"
            );
            assert_eq!(
                srv.chat(c)["state"],
                "running",
                "round {round}: chat {c} was lost"
            );
        }
        // No orphan: a chat that is not running does not run. Then the launched half is
        // stopped, to be launched (and killed mid-launch) again next round.
        for c in &chats {
            let v = srv.chat(c);
            if v["state"] != "running" {
                assert!(
                    stopped(&hb(c)),
                    "round {round}: chat {c} runs unsupervised: {v}"
                );
            }
        }
        for c in launching {
            if srv.chat(c)["state"] == "running" {
                let (s, v) = srv.call("POST", &format!("/v1/chats/{c}/stop"), None);
                assert_eq!(s, 200, "{v}");
            }
        }
        srv.shutdown();
    }
    let srv = w.serve();
    for c in running {
        let (s, v) = srv.call("POST", &format!("/v1/chats/{c}/stop"), None);
        assert_eq!(s, 200, "{v}");
        assert!(stopped(&hb(c)));
    }
    assert_consistent(&w, &srv);
    srv.shutdown();
}

// ---- load ----------------------------------------------------------------------------------

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// `BENCH_CHATS` chats launched concurrently through the API, `BENCH_CALLS` bridge calls
/// spread over them on `BENCH_THREADS` threads (defaults: a test-sized 12, 1200, 4;
/// `scripts/bench-server.sh` runs 50 and 10 000). Every reply must be its request's (id and
/// the chat's own file), and every call must be in the chat's event log.
#[test]
fn load_concurrent_launches_and_bridge_calls() {
    let chats_n = env_or("BENCH_CHATS", 12);
    let calls_n = env_or("BENCH_CALLS", 1200);
    let threads_n = env_or("BENCH_THREADS", 4).max(1);
    let w = World::new();
    w.workflows(&["w1"]);
    let chats = w.chats_reading_w1("load", chats_n);
    let srv = w.serve();

    let t0 = Instant::now();
    let launches: Vec<_> = chats
        .iter()
        .map(|c| {
            let (port, token) = (srv.port, w.token.clone());
            let body = json!({"cli":"fake","chat":c,"workflow":"w1","mode":"bridge-only","cli_args":["idle"]})
                .to_string();
            std::thread::spawn(move || {
                let t = Instant::now();
                let auth = proof(port, &token, "POST", "/v1/chats/launch", body.as_bytes());
                let r = http(port, "POST", "/v1/chats/launch", &[("Authorization", &auth), ("Content-Type", "application/json")], body.as_bytes());
                (r, t.elapsed())
            })
        })
        .collect();
    let mut launch_times = Vec::new();
    for t in launches {
        let ((s, v), d) = t.join().unwrap();
        assert_eq!(s, 201, "{v}");
        launch_times.push(d);
    }
    let launch_wall = t0.elapsed();
    launch_times.sort();

    let counter = Arc::new(AtomicUsize::new(0));
    let chats = Arc::new(chats);
    let t1 = Instant::now();
    let workers: Vec<_> = (0..threads_n)
        .map(|_| {
            let (counter, chats, root, wf) = (
                counter.clone(),
                chats.clone(),
                w.root.clone(),
                w.workflow_dir("w1"),
            );
            std::thread::spawn(move || {
                let mut conns: HashMap<usize, (BufReader<UnixStream>, UnixStream)> = HashMap::new();
                let mut rtts = Vec::new();
                let mut per_chat = vec![0usize; chats.len()];
                loop {
                    let i = counter.fetch_add(1, Ordering::SeqCst);
                    if i >= calls_n {
                        return (rtts, per_chat);
                    }
                    let ci = i % chats.len();
                    let c = &chats[ci];
                    let conn = conns.entry(ci).or_insert_with(|| {
                        connect(
                            &root
                                .join("state/cli-runtimes/v1")
                                .join(c)
                                .join("bridge.sock"),
                        )
                    });
                    let t = Instant::now();
                    let v = bridge_call(
                        conn,
                        i as u64,
                        "read_file",
                        json!({"path": wf.join(format!("{c}.txt"))}),
                    );
                    rtts.push(t.elapsed());
                    assert_eq!(v["id"], i as u64, "crossed reply: {v}");
                    let text = v["result"]["content"][0]["text"].as_str().unwrap();
                    assert_eq!(
                        text,
                        format!("content of {c}"),
                        "crossed reply for {c}: {v}"
                    );
                    per_chat[ci] += 1;
                }
            })
        })
        .collect();
    let mut rtts = Vec::new();
    let mut per_chat = vec![0usize; chats.len()];
    for t in workers {
        let (r, p) = t.join().unwrap();
        rtts.extend(r);
        for (a, b) in per_chat.iter_mut().zip(p) {
            *a += b;
        }
    }
    let calls_wall = t1.elapsed();
    rtts.sort();
    assert_eq!(rtts.len(), calls_n);

    for (i, c) in chats.iter().enumerate() {
        let recorded = w
            .events(c)
            .iter()
            .filter(|e| e["event"] == "bridge" && e["call"]["tool"] == "read_file")
            .count();
        assert_eq!(
            recorded, per_chat[i],
            "chat {c}: calls answered vs recorded"
        );
    }
    let list = srv.list();
    assert!(list.values().all(|v| v["state"] == "running"));

    let t2 = Instant::now();
    for c in chats.iter() {
        let (s, v) = srv.call("POST", &format!("/v1/chats/{c}/stop"), None);
        assert_eq!(s, 200, "{v}");
    }
    let stop_wall = t2.elapsed();
    println!(
        "\nload: {chats_n} chats launched concurrently in {:.2}s ({:.1} launches/s; per launch p50 {:.0}ms p99 {:.0}ms)",
        launch_wall.as_secs_f64(),
        chats_n as f64 / launch_wall.as_secs_f64(),
        percentile(&launch_times, 0.5).as_secs_f64() * 1e3,
        percentile(&launch_times, 0.99).as_secs_f64() * 1e3,
    );
    println!(
        "load: {calls_n} bridge calls on {threads_n} threads in {:.2}s ({:.0} calls/s); round trip p50 {:.3}ms p99 {:.3}ms max {:.3}ms",
        calls_wall.as_secs_f64(),
        calls_n as f64 / calls_wall.as_secs_f64(),
        percentile(&rtts, 0.5).as_secs_f64() * 1e3,
        percentile(&rtts, 0.99).as_secs_f64() * 1e3,
        rtts.last().unwrap().as_secs_f64() * 1e3,
    );
    println!(
        "load: {chats_n} chats stopped one by one in {:.2}s",
        stop_wall.as_secs_f64()
    );
    assert_consistent(&w, &srv);
    srv.shutdown();
}
