//! Concurrent and pipelined sessions.

use std::io::Write;
use std::path::Path;

use dispatcher::bridge::CallVerdict;
use serde_json::json;

use crate::protocol::Raw;
use crate::world::*;

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
