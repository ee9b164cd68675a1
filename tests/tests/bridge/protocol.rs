//! The protocol and the socket: errors through the shim and on the socket, a private single
//! socket, the policy file checked first, callers of another uid turned away.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;

use dispatcher::bridge::{self, BridgeError, CallVerdict, ChatContext, MAX_MESSAGE, SOCKET_NAME};
use sandboxer::Target;
use sandboxer::policy::ResolveOptions;
use serde_json::{Value, json};

use crate::world::*;
use agentworks_e2e::{self as common};

#[test]
fn protocol_errors_through_the_shim() {
    let (w, c, before) = World::with_file_f();
    let mut lines = init_lines();
    lines.push("{not json".into());
    lines.push("[1,2,3]".into());
    lines.push(format!("\"{}\"", "x".repeat(MAX_MESSAGE)));
    lines.push(json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_everything","arguments":{"path":"/"}}}).to_string());
    lines.push(
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"arguments":{}}}).to_string(),
    );
    lines.push(json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read_file","arguments":"path"}}).to_string());
    lines.push(json!({"jsonrpc":"2.0","id":4,"method":"no/such/method"}).to_string());
    lines.push(call_line(5, "read_file", at(c.workflow.join("f"))));
    let out = session(&c.socket, &lines);
    assert_eq!(out.len(), 9, "{out:#?}");
    assert_eq!(out[1]["error"]["code"], json!(-32700));
    assert_eq!(out[1]["id"], Value::Null);
    assert_eq!(out[2]["error"]["code"], json!(-32600));
    assert_eq!(out[3]["error"]["code"], json!(-32600));
    assert!(error_message(&out[3]).contains("longer than"));
    assert_eq!(out[4]["id"], json!(1));
    assert_eq!(out[4]["error"]["code"], json!(-32602));
    assert!(error_message(&out[4]).contains("Unknown tool"));
    assert_eq!(out[5]["error"]["code"], json!(-32602));
    assert_eq!(out[6]["error"]["code"], json!(-32602));
    assert_eq!(out[7]["error"]["code"], json!(-32601));
    // The session is still sane after all that.
    assert_eq!(out[8]["id"], json!(5));
    assert_eq!(assert_ok(&out[8]), "ok");
    assert_eq!(w.snapshot(), before);
    let events = c.events.lock().unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.tool == "delete_everything" && e.verdict == CallVerdict::Error)
    );
}

/// A raw client on a chat's socket: the server's side of the protocol, without the shim.
pub struct Raw {
    pub reader: BufReader<UnixStream>,
    pub writer: UnixStream,
}

impl Raw {
    pub fn connect(socket: &Path) -> Raw {
        let s = UnixStream::connect(socket).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        Raw {
            reader: BufReader::new(s.try_clone().unwrap()),
            writer: s,
        }
    }
    pub fn send(&mut self, line: &[u8]) {
        self.writer.write_all(line).unwrap();
        self.writer.write_all(b"\n").unwrap();
    }
    pub fn recv(&mut self) -> Option<Value> {
        let mut l = String::new();
        match self.reader.read_line(&mut l).unwrap() {
            0 => None,
            _ => Some(serde_json::from_str(&l).unwrap()),
        }
    }
}

#[test]
fn protocol_errors_on_the_socket() {
    let (w, c, before) = World::with_file_f();
    let mut raw = Raw::connect(&c.socket);
    raw.send(b"{oops");
    assert_eq!(raw.recv().unwrap()["error"]["code"], json!(-32700));
    raw.send(&vec![b'x'; MAX_MESSAGE + 10]);
    let r = raw.recv().unwrap();
    assert_eq!(r["error"]["code"], json!(-32600));
    assert_eq!(r["id"], Value::Null);
    raw.send(br#"{"jsonrpc":"2.0","method":"tools/list"}"#);
    assert_eq!(
        raw.recv().unwrap()["error"]["code"],
        json!(-32600),
        "a notification is not a request here"
    );
    raw.send(br#"{"jsonrpc":"2.0","id":9,"method":"initialize","params":{}}"#);
    assert_eq!(raw.recv().unwrap()["error"]["code"], json!(-32601));
    raw.send(br#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"nope"}}"#);
    let r = raw.recv().unwrap();
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].clone()),
        (json!(10), json!(-32602))
    );
    // Still in step: a good request gets its own answer.
    raw.send(format!("{}", json!({"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"read_file","arguments":{"path":c.workflow.join("f")}}})).as_bytes());
    let r = raw.recv().unwrap();
    assert_eq!(r["id"], json!(11));
    assert_eq!(assert_ok(&r), "ok");
    assert_eq!(w.snapshot(), before);
}

#[test]
fn socket_is_private_single_and_cleaned_up() {
    let w = World::new();
    let c = w.chat("c1", "w1", &[]);
    let mode = std::fs::metadata(&c.socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    let opts = w.opts();
    let ctx = || ChatContext::load(&w.state, &c.id, &opts).unwrap();
    // A live socket is never taken over.
    match bridge::serve(&c.socket, ctx(), |_| {}) {
        Err(BridgeError::AlreadyServing(p)) => assert_eq!(p, c.socket),
        other => panic!("{other:?}"),
    }
    // The socket must sit in the chat's own runtime.
    let elsewhere = w.workflow("w1").join(SOCKET_NAME);
    assert!(matches!(
        bridge::serve(&elsewhere, ctx(), |_| {}),
        Err(BridgeError::SocketOutsideRuntime { .. })
    ));
    assert!(!elsewhere.exists());

    // A connection open at shutdown is closed; the socket file goes away.
    let mut raw = Raw::connect(&c.socket);
    let socket = c.socket.clone();
    c.handle.shutdown();
    // The write itself may fail (EPIPE): the server's end is gone.
    let _ = raw
        .writer
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\n");
    let mut rest = String::new();
    let closed = matches!(raw.reader.read_line(&mut rest), Ok(0) | Err(_));
    assert!(closed, "the connection was closed, not answered: {rest}");
    assert!(!socket.exists());
    // A stale socket or a planted file at the path is replaced.
    std::fs::write(&socket, "planted").unwrap();
    let h = bridge::serve(&socket, ctx(), |_| {}).unwrap();
    let r = call(&socket, "list_dir", at(w.workflow("w1")));
    assert_ok(&r);
    drop(h);
    assert!(!socket.exists());
}

#[test]
fn the_policy_file_is_checked_before_serving() {
    let w = World::new();
    let (id, runtime) = w.add_chat("c1", "auto");
    let opts = w.opts();
    assert!(
        matches!(
            ChatContext::load(&w.state, &id, &opts),
            Err(BridgeError::Io { .. })
        ),
        "no policy yet"
    );
    // A policy that does not protect the state root is not served.
    std::fs::write(
        runtime.join("policy.toml"),
        "version = 1\nbase = \"open\"\n",
    )
    .unwrap();
    let e = ChatContext::load(&w.state, &id, &opts).unwrap_err();
    assert!(e.to_string().contains("config.json"), "{e}");
    // The same checks on policy text given directly.
    let e = ChatContext::from_toml(
        &w.state,
        &id,
        "version = 1\nbase = \"open\"\n",
        "(launch)",
        &opts,
    )
    .unwrap_err();
    assert!(matches!(e, BridgeError::BadPolicy { .. }), "{e}");
    let other = match Target::host().unwrap() {
        Target::Linux => Target::Macos,
        Target::Macos => Target::Linux,
    };
    let off_host = ResolveOptions::new(other, w.home.clone(), false).unwrap();
    w.workflow("w1");
    let good = w.policy_toml(&runtime, "w1", &[]);
    assert!(ChatContext::from_toml(&w.state, &id, &good, "(launch)", &opts).is_ok());
    assert!(matches!(
        ChatContext::from_toml(&w.state, &id, &good, "(launch)", &off_host),
        Err(BridgeError::BadPolicy { .. })
    ));
    // Nor a policy file that is a symlink.
    std::fs::remove_file(runtime.join("policy.toml")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", runtime.join("policy.toml")).unwrap();
    assert!(matches!(
        ChatContext::load(&w.state, &id, &opts),
        Err(BridgeError::BadPolicy { .. })
    ));
}

#[test]
fn callers_of_another_uid_are_turned_away() {
    // Root connects as another uid.
    common::require_root();
    let w = World::new();
    let c = w.chat("c1", "w1", &[]);
    // Let uid 65534 reach the socket at all, so that only the peer check stands in its way.
    let top = std::fs::canonicalize(w.dir.path()).unwrap();
    let mut p = c.socket.clone();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
    while p.pop() && p.starts_with(&top) {
        let m = std::fs::metadata(&p).unwrap().permissions().mode();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m | 0o011)).unwrap();
    }
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr
        .sun_path
        .iter_mut()
        .zip(c.socket.as_os_str().as_encoded_bytes())
    {
        *d = *s as libc::c_char;
    }
    let request = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\n";
    // The child only makes async-signal-safe calls before _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        unsafe {
            if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                libc::_exit(10);
            }
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
            if libc::connect(fd, (&raw const addr).cast(), len) != 0 {
                libc::_exit(11);
            }
            libc::write(fd, request.as_ptr().cast(), request.len());
            let mut buf = [0u8; 64];
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            // Closed without a word, as it should be: EOF, or a reset because our request
            // was never read.
            libc::_exit(if n <= 0 { 0 } else { 12 });
        }
    }
    let mut status = 0;
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "child status {status}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "10: setuid, 11: connect, 12: got a reply"
    );
    let events = c.events.lock().unwrap();
    let e = events
        .iter()
        .find(|e| e.tool == "(connect)")
        .expect("the refusal is logged");
    assert_eq!(e.verdict, CallVerdict::Deny);
    assert_eq!(e.peer.unwrap().uid, 65534);
    assert!(e.reason.contains("65534"), "{}", e.reason);
}
