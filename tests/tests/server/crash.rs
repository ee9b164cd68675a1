//! A server killed at any step loses nothing it recorded, and adopts or rolls back on restart.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::chats::assert_consistent;
use crate::world::*;
use serde_json::{Value, json};

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

pub fn connect(sock: &Path) -> (BufReader<UnixStream>, UnixStream) {
    let s = UnixStream::connect(sock).unwrap_or_else(|e| panic!("{}: {e}", sock.display()));
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    (BufReader::new(s.try_clone().unwrap()), s)
}

pub fn bridge_call(
    conn: &mut (BufReader<UnixStream>, UnixStream),
    id: u64,
    tool: &str,
    args: Value,
) -> Value {
    try_bridge_call(conn, id, tool, args).expect("bridge call")
}

pub fn try_bridge_call(
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

pub fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}
