//! A squatter on the server's port gets no token and nothing that authenticates.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::world::*;
use agentworks_e2e::{self as common};
use dispatcher::server::auth;
use serde_json::json;

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

// ---- chats ---------------------------------------------------------------------------------
