//! Chats through the server: the bridge, the client commands, tmux, two servers side by side.

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::world::*;
use serde_json::{Value, json};

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

/// A chat can write the open home's `~/.tmux.conf`; the server's tmux never loads it, so its
/// `run-shell` runs nothing outside. Control: a tmux server started the ordinary way with the
/// same home runs it.
#[test]
fn the_servers_tmux_loads_no_tmux_conf_from_the_home() {
    need_tmux();
    let w = World::new();
    w.workflows(&["w1"]);
    w.chats(&["c1"]);
    let ran = w.base().join("TMUX-CONF-RAN");
    std::fs::write(
        w.home.join(".tmux.conf"),
        format!("run-shell 'touch {}'\n", ran.display()),
    )
    .unwrap();
    // Control: tmux as a person starts it loads the file and runs the line.
    let control_socket = w.base().join("control.sock");
    let control = |args: &[&str]| {
        Command::new("tmux")
            .arg("-S")
            .arg(&control_socket)
            .args(args)
            .env("HOME", &w.home)
            .env_remove("TMUX")
            .output()
            .unwrap()
    };
    assert!(control(&["new-session", "-d", "sleep 30"]).status.success());
    let deadline = Instant::now() + Duration::from_secs(5);
    while !ran.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    control(&["kill-server"]);
    assert!(ran.exists(), "control: tmux did not load ~/.tmux.conf");
    std::fs::remove_file(&ran).unwrap();

    let srv = w.serve();
    let hb = w.base().join("hb");
    let v = srv.launch(hold_body("c1", &hb, "tmux"));
    assert_eq!(v["state"], "running", "{v}");
    assert!(grows(&hb), "the tmux chat does not run");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !ran.exists(),
        "the server's tmux loaded the home's ~/.tmux.conf and ran it outside"
    );
    let (s, v) = srv.call(
        "POST",
        "/v1/chats/c1/stop",
        Some(json!({"grace_seconds": 5})),
    );
    assert_eq!(s, 200, "{v}");
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
pub fn assert_consistent(w: &World, srv: &Server) {
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
