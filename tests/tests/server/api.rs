//! The API refuses whoever lacks the token, malformed and misdirected requests, unknown names;
//! the server listens on loopback only, once per state root.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use crate::world::*;
use dispatcher::server::auth;
use serde_json::{Value, json};

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
