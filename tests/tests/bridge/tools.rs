//! The tools: reads, writes and lists inside grants, refusals outside them, a chat's own
//! socket as its identity, `open_url`.

use std::sync::{Arc, Mutex};

use dispatcher::bridge::{self, CallVerdict, ChatContext, OpenOutcome, Opener, SOCKET_NAME};
use serde_json::{Value, json};

use crate::world::*;

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
