//! Concurrent launches and bridge calls (scripts/bench-server.sh runs this at full size).

use std::collections::HashMap;
use std::io::BufReader;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::chats::assert_consistent;
use crate::crash::{bridge_call, connect, env_or, percentile};
use crate::world::*;
use serde_json::json;

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
