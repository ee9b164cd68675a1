//! A squatter on the server's port gets no token and nothing that authenticates; a chat cannot
//! squat it at all (its loopback is its own).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::world::*;
use agentworks_e2e::{self as common};
use dispatcher::server::auth;
use serde_json::{Value, json};

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
    // The test's full name in this binary, for the copy run as the test user.
    const NAME: &str =
        "squatter::a_squatter_on_the_servers_port_gets_no_token_and_nothing_that_authenticates";
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

/// The squatter a chat runs, and its unconfined control: `squat.py PORT DIR`. Files in DIR say
/// where it is (`ready`, `bound`, `accepted`, `probe`); the test moves it on by creating `go`
/// (bind PORT on 127.0.0.1 and listen) and `stop` (close the listener; then probe PORT from
/// where it runs, directly and through the proxy its environment names). Nothing on stdout:
/// the server that reads it is killed while it runs.
const SQUAT_PY: &str = r#"
import os, socket, sys, time
port, d = int(sys.argv[1]), sys.argv[2]
def say(name, text):
    with open(os.path.join(d, name + ".tmp"), "w") as f:
        f.write(text)
    os.rename(os.path.join(d, name + ".tmp"), os.path.join(d, name))
def wait_for(name):
    while not os.path.exists(os.path.join(d, name)):
        time.sleep(0.02)
say("ready", str(os.getpid()))
wait_for("go")
s = socket.socket()
# As any server does (and as the dispatcher's own does): the crashed server's connections
# may still be in TIME_WAIT on this port.
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", port))
    s.listen(16)
except OSError as e:
    say("bound", "error " + str(e))
    sys.exit(1)
s.settimeout(0.05)
say("bound", "listening")
accepted = []
while not os.path.exists(os.path.join(d, "stop")):
    try:
        c, _ = s.accept()
    except socket.timeout:
        continue
    c.settimeout(2)
    try:
        accepted.append(c.recv(65536).decode("latin-1"))
    except OSError:
        accepted.append("")
    c.close()
s.close()
say("accepted", "%d\n%s" % (len(accepted), "\n---\n".join(accepted)))
def direct():
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        return "connected"
    except OSError as e:
        return "refused %s" % e
def via_proxy(request):
    # The proxy the launch names; retried while a restarted server serves it anew.
    proxy = os.environ.get("HTTP_PROXY", "")
    if not proxy.startswith("http://127.0.0.1:"):
        return "no proxy in the environment: %r" % proxy
    for _ in range(100):
        try:
            p = socket.create_connection(("127.0.0.1", int(proxy.rsplit(":", 1)[1])), timeout=5)
            p.sendall(request.encode())
            status = p.makefile("rb").readline().decode("latin-1").strip()
            p.close()
            if status:
                return status
        except OSError:
            pass
        time.sleep(0.1)
    return "the proxy never answered"
say("probe", "\n".join([
    "direct=" + direct(),
    "connect=" + via_proxy("CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (port, port)),
    "plain=" + via_proxy("POST http://localhost:%d/v1/hello HTTP/1.1\r\nHost: localhost:%d\r\nContent-Length: 0\r\n\r\n" % (port, port)),
]))
"#;

/// A squatter's folder: its files, and the waits on them.
struct SquatDir(std::path::PathBuf);

impl SquatDir {
    fn new(at: std::path::PathBuf) -> SquatDir {
        std::fs::create_dir_all(&at).unwrap();
        SquatDir(at)
    }

    fn signal(&self, name: &str) {
        std::fs::write(self.0.join(name), "").unwrap();
    }

    /// The text of `name` once the squatter has written it.
    #[track_caller]
    fn wait(&self, name: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(text) = std::fs::read_to_string(self.0.join(name)) {
                return text;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the squatter never wrote {name} in {}",
                self.0.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// How many connections it accepted, with what each sent.
    fn accepted(&self) -> (usize, String) {
        let text = self.wait("accepted");
        let (n, rest) = text.split_once('\n').unwrap_or((&text, ""));
        (n.parse().unwrap(), rest.to_string())
    }
}

/// The attack of a squatter, made impossible by construction: a chat launched by the server
/// runs in a network namespace of its own (docs/network.md), whose 127.0.0.1 is not the
/// machine's. After the server crashes, the chat binds the server's port and listens: the
/// client (`dispatcher chats list`, a plain connect) finds nothing listening on the machine's
/// port, says so, and the chat's listener accepts nothing. The server restarts on that very
/// port while the chat still holds its own; closed, the chat cannot reach the server's port,
/// directly or through its proxy (refused, and recorded). Control: the same program, bound
/// by the same user outside the sandbox, is reached by the same connect and client.
#[test]
fn a_chat_that_binds_the_servers_port_after_a_crash_is_reached_by_nothing() {
    const AS_USER: &str = "SERVER_CHAT_SQUATTER_TEST_AS_USER";
    const NAME: &str =
        "squatter::a_chat_that_binds_the_servers_port_after_a_crash_is_reached_by_nothing";
    if common::is_rerun(AS_USER) {
        chat_squatter_reached_by_nothing();
        return;
    }
    common::require_root();
    chat_squatter_reached_by_nothing();
    common::rerun_as_test_user(NAME, AS_USER);
}

fn chat_squatter_reached_by_nothing() {
    let w = World::c1_on_w1();
    std::fs::write(w.profiles.join("clis/sh.toml"), common::SH_ADAPTER).unwrap();
    let script = w.base().join("squat.py");
    std::fs::write(&script, SQUAT_PY).unwrap();
    let squat = |port: u16, dir: &SquatDir| {
        format!(
            "exec /usr/bin/python3 {} {port} {}",
            script.display(),
            dir.0.display()
        )
    };
    let root = w.root.display().to_string();

    // A server launches the chat, then crashes (SIGKILL by its own pid); the chat lives on.
    let first = w.serve();
    let port = first.port;
    let confined = SquatDir::new(w.base().join("confined"));
    first.launch(
        json!({"cli": "sh", "chat": "c1", "workflow": "w1", "mode": "bridge-only",
                        "supervision": "structured", "cli_args": ["-c", squat(port, &confined)]}),
    );
    confined.wait("ready");
    let policy = std::fs::read_to_string(w.runtime("c1").join(".agentworks/policy.toml")).unwrap();
    assert!(policy.contains("mode = \"public\""), "{policy}");
    first.kill();

    // The chat binds the crashed server's port: in its own namespace, it can.
    confined.signal("go");
    assert_eq!(confined.wait("bound"), "listening");
    let nothing_listens = format!("nothing listens on 127.0.0.1:{port}");
    let err = TcpStream::connect(("127.0.0.1", port)).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
    let list = w.cli(&["chats", "list"]).failure();
    assert!(list.contains(&nothing_listens), "{list}");
    let stop = w.cli(&["stop", "--port", &port.to_string()]).failure();
    assert!(!stop.contains("is not the server"), "{stop}");

    // Control: the same program, bound by the same user outside any sandbox, is reached by
    // the same connect and the same client.
    let host = SquatDir::new(w.base().join("host"));
    host.signal("go");
    let mut unconfined = std::process::Command::new("/bin/sh")
        .args(["-c", &squat(port, &host)])
        .env("HTTP_PROXY", "")
        .spawn()
        .unwrap();
    assert_eq!(host.wait("bound"), "listening");
    TcpStream::connect(("127.0.0.1", port))
        .unwrap()
        .write_all(b"host connect\n")
        .unwrap();
    let list = w.cli(&["chats", "list"]).failure();
    assert!(
        list.contains("is not the server of the state root"),
        "{list}"
    );
    assert!(list.contains(&root), "{list}");
    host.signal("stop");
    let (n, got) = host.accepted();
    assert!(n >= 2, "the unconfined squatter was not reached: {n} {got}");
    assert!(
        got.contains("host connect") && got.contains("POST /v1/hello"),
        "{got}"
    );
    assert!(!got.contains(&w.token), "{got}");
    unconfined.wait().unwrap();

    // The server restarts on its port while the chat still listens on its own, adopts the
    // chat and serves its proxy again; the client reaches it.
    let second = w.serve_on(port, &[]);
    let listed = w.cli(&["chats", "list"]).success();
    assert!(listed.contains("c1"), "{listed}");

    // The chat's listener accepted nothing, all along.
    confined.signal("stop");
    let (n, got) = confined.accepted();
    assert_eq!(n, 0, "the confined squatter was reached: {got}");
    // And the chat cannot reach the server's port: not directly (its own loopback has
    // nothing there), not through its proxy (the machine's loopback is refused).
    let probe = confined.wait("probe");
    let line = |name: &str| {
        probe
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name} in {probe}"))
            .to_string()
    };
    assert!(line("direct").starts_with("refused"), "{probe}");
    assert!(line("connect").contains(" 403 "), "{probe}");
    assert!(line("plain").contains(" 403 "), "{probe}");
    let refused: Vec<Value> = w
        .events("c1")
        .into_iter()
        .filter(|e| e["event"] == "egress" && e["port"] == port)
        .collect();
    assert!(
        refused.len() == 2 && refused.iter().all(|e| e["verdict"] == "refuse"),
        "{refused:#?}"
    );
    let view = second.wait_ended("c1");
    assert_eq!(view["state"], "exited", "{view}");
    let mut second = second;
    assert!(second.alive());
}
