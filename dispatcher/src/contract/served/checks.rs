//! Part 1 of the served contract: the server's own facts about the chat (the policy it
//! journaled, the bridge it serves, the CLI's confinement, the events).

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::Check;
use super::api::launch_events;
use crate::server::client::Client;
use crate::server::journal::{Record, RecordError};
use crate::server::tmux;
use crate::state::StateRoot;

/// The journal's policy (the bridge's copy), the file in the runtime and the argv's
/// `--policy` must be one and the same, inside the chat's read-only launch folder.
pub(super) fn policy_identical(
    record: &Result<Record, RecordError>,
    argv: &[String],
    runtime: &Path,
) -> Result<String, String> {
    let rec = record
        .as_ref()
        .map_err(|e| format!("the journal record: {e}"))?;
    let on_disk =
        fs::read(&rec.policy_file).map_err(|e| format!("{}: {e}", rec.policy_file.display()))?;
    if on_disk != rec.policy_text.as_bytes() {
        return Err(format!(
            "{} ({} bytes) differs from the journal's copy ({} bytes)",
            rec.policy_file.display(),
            on_disk.len(),
            rec.policy_text.len()
        ));
    }
    let named = argv
        .windows(2)
        .find(|w| w[0] == "--policy")
        .map(|w| PathBuf::from(&w[1]));
    if named.as_deref() != Some(rec.policy_file.as_path()) {
        return Err(format!(
            "the started argv names {:?}, the journal {}",
            named,
            rec.policy_file.display()
        ));
    }
    let launch_dir = runtime.join(crate::grants::LAUNCH_DIR);
    if rec.policy_file.parent() != Some(launch_dir.as_path()) {
        return Err(format!(
            "{} is not in the chat's launch folder {}",
            rec.policy_file.display(),
            launch_dir.display()
        ));
    }
    Ok(format!(
        "{} ({} bytes) = the journal's copy = the started argv's --policy",
        rec.policy_file.display(),
        on_disk.len()
    ))
}

/// The chat's bridge socket answers `tools/list` (we connect as the server's own user, as the
/// shim inside the sandbox does).
pub(super) fn bridge_served(socket: &Path) -> Result<String, String> {
    use std::os::unix::fs::FileTypeExt;
    let m = fs::symlink_metadata(socket).map_err(|e| format!("{}: {e}", socket.display()))?;
    if !m.file_type().is_socket() {
        return Err(format!("{} is not a socket", socket.display()));
    }
    let v = bridge_request(
        socket,
        &json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}),
    )?;
    let tools = v["result"]["tools"].as_array().map(Vec::len).unwrap_or(0);
    if tools == 0 {
        return Err(format!("tools/list answered {}", tail(&v.to_string(), 300)));
    }
    Ok(format!(
        "{} answers tools/list with {tools} tools",
        socket.display()
    ))
}

/// One request on the chat's bridge socket, one answer.
pub(super) fn bridge_request(socket: &Path, request: &Value) -> Result<Value, String> {
    use std::os::unix::net::UnixStream;
    let mut s = UnixStream::connect(socket)
        .map_err(|e| format!("connecting to {}: {e}", socket.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut line = request.to_string();
    line.push('\n');
    s.write_all(line.as_bytes())
        .map_err(|e| format!("writing to {}: {e}", socket.display()))?;
    let mut line = String::new();
    BufReader::new(&mut s)
        .read_line(&mut line)
        .map_err(|e| format!("reading from {}: {e}", socket.display()))?;
    serde_json::from_str(line.trim()).map_err(|e| format!("its answer is not JSON: {e}"))
}

/// The chat's bridge never resolves through the confined CLI's mount namespace (its
/// `/proc/<pid>/root` and `cwd`) or `/proc/self/root`: read and list there are refused (as
/// magic links, or as /proc), while the same folder by its plain path is listed (the control).
pub(super) fn bridge_own_namespace(
    socket: &Path,
    cli_pid: i32,
    config_json: &Path,
    runtime: &Path,
) -> Result<String, String> {
    let call = |tool: &str, path: &Path| {
        bridge_request(
            socket,
            &json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
                    "params":{"name": tool, "arguments": {"path": path}}}),
        )
        .map(|v| {
            let text = v["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            (v["result"]["isError"].as_bool(), text)
        })
    };
    let (ok, text) = call("list_dir", runtime)?;
    if ok != Some(false) {
        return Err(format!(
            "control: list_dir {} was not answered: {}",
            runtime.display(),
            tail(&text, 300)
        ));
    }
    let inside = |p: &Path| p.strip_prefix("/").unwrap_or(p).to_path_buf();
    let other_root = PathBuf::from(format!("/proc/{cli_pid}/root"));
    let cases = [
        ("read_file", other_root.join(inside(config_json))),
        ("list_dir", other_root.join(inside(runtime))),
        ("list_dir", PathBuf::from(format!("/proc/{cli_pid}/cwd"))),
        (
            "list_dir",
            Path::new("/proc/self/root").join(inside(runtime)),
        ),
    ];
    for (tool, path) in &cases {
        let (error, text) = call(tool, path)?;
        // A magic link is refused as one; where the kernel denies looking at the CLI's
        // process at all, the lookup stops on /proc, refused as such.
        let why = text.contains("magic link") || text.contains("on /proc");
        if error != Some(true) || !text.starts_with("refused: ") || !why {
            return Err(format!(
                "{tool} {} was not refused as a magic link or /proc: {}",
                path.display(),
                tail(&text, 300)
            ));
        }
    }
    Ok(format!(
        "{} is listed by its path; read and list through /proc/{cli_pid}/root, /proc/{cli_pid}/cwd \
         and /proc/self/root are refused",
        runtime.display()
    ))
}

/// The CLI's own process (a descendant of the tmux pane's `sandboxer exec` that is not
/// `sandboxer` itself) runs in a mount namespace other than the server's; none runs in the
/// server's. With the CLI's pid.
pub(super) fn cli_confined(
    state: &StateRoot,
    chat: &crate::ids::ChatId,
    server_pid: u32,
) -> Result<(String, i32), String> {
    let panes = tmux::list(&tmux::socket(state)).map_err(|e| format!("{e:#}"))?;
    let pane = panes.get(&tmux::session_name(chat)).ok_or_else(|| {
        format!(
            "no tmux session {} on the server's tmux (it has: {:?})",
            tmux::session_name(chat),
            panes.keys().collect::<Vec<_>>()
        )
    })?;
    if pane.dead {
        return Err(format!(
            "the chat's pane is dead (status {:?}): the CLI ended at once",
            pane.status
        ));
    }
    let ns = |pid: i32| fs::read_link(format!("/proc/{pid}/ns/mnt")).ok();
    let server_ns = ns(server_pid as i32).ok_or("cannot read the server's mount namespace")?;
    let top_exe = fs::read_link(format!("/proc/{}/exe", pane.pid)).unwrap_or_default();
    // A CLI takes a moment to start under its wrapper.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let mut found = Vec::new();
        for pid in descendants(pane.pid) {
            let Ok(exe) = fs::read_link(format!("/proc/{pid}/exe")) else {
                continue;
            };
            if exe.file_name() == top_exe.file_name() {
                continue;
            }
            found.push((pid, exe, ns(pid)));
        }
        if let Some((pid, exe, _)) = found
            .iter()
            .find(|(_, _, n)| n.as_ref() == Some(&server_ns))
        {
            return Err(format!(
                "pid {pid} ({}) runs in the server's mount namespace {}",
                exe.display(),
                server_ns.display()
            ));
        }
        if let Some((pid, exe, Some(n))) = found.first() {
            return Ok((
                format!(
                    "pid {pid} ({}) under sandboxer exec (pid {}) runs in mount namespace {}, the server in {}",
                    exe.display(),
                    pane.pid,
                    n.display(),
                    server_ns.display()
                ),
                *pid,
            ));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "no process of the CLI under sandboxer exec (pid {}) within 15 s",
                pane.pid
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every descendant of `root`, from `/proc/*/stat`.
pub(super) fn descendants(root: i32) -> Vec<i32> {
    let mut parent = BTreeMap::new();
    for e in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`; comm may hold anything, so read after the last ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if let Some(pp) = ppid {
            parent.insert(pid, pp);
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (&c, &pp) in &parent {
            if pp == p && !out.contains(&c) {
                out.push(c);
                frontier.push(c);
            }
        }
    }
    out
}

pub(super) fn events_check(client: &Client, chat: &str, launch: &str) -> Result<String, String> {
    let evs = launch_events(client, chat, launch)?;
    let kinds: Vec<&str> = evs.iter().filter_map(|e| e["event"].as_str()).collect();
    let started = evs
        .iter()
        .find(|e| e["event"] == "started")
        .ok_or_else(|| format!("no `started` event: {kinds:?}"))?;
    if started["mode"] != "full" || started["confined"] != true {
        return Err(format!(
            "`started` says mode {} confined {}",
            started["mode"], started["confined"]
        ));
    }
    let ends: Vec<&str> = kinds
        .iter()
        .copied()
        .filter(|k| matches!(*k, "exited" | "lost" | "launch_failed"))
        .collect();
    if !kinds.contains(&"stop_requested") || ends != ["exited"] {
        return Err(format!(
            "expected launching, started, stop_requested and one exited; got {kinds:?}"
        ));
    }
    Ok(format!(
        "{} (started: mode full, confined; {})",
        kinds.join(", "),
        started["reason"].as_str().unwrap_or("")
    ))
}

pub(super) fn check(checks: &mut Vec<Check>, name: &str, r: Result<String, String>) {
    let (pass, detail) = match r {
        Ok(d) => (true, d),
        Err(d) => (false, d),
    };
    checks.push(Check {
        check: name.to_string(),
        pass,
        detail,
    });
}

pub(super) fn tail(s: &str, n: usize) -> String {
    let s = s.trim();
    let cut = s.len().saturating_sub(n);
    let cut = (cut..=s.len())
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(0);
    s[cut..].to_string()
}

/// A listener on 127.0.0.1 that is not this state root's server (a squatter on a stale
/// `server.json`'s port, or on a fixed port after a clean stop: any process of the person's
/// uid, the confined agent included): the product's client asks it to prove the state root's
/// secret first, refuses it with a clear error, and sends it nothing that carries the token.
/// The squatter answers like a server would, `200` with a made-up proof.
pub(super) fn squatter_learns_nothing(state: &crate::state::StateRoot) -> Result<String, String> {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("binding: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let squatter = std::thread::spawn(move || {
        let mut got: Vec<u8> = Vec::new();
        // Every connection the client makes, until it gives up (the listener is dropped with
        // the thread once the client has returned and connected once more to wake it).
        for stream in listener.incoming().take(4) {
            let Ok(mut stream) = stream else { break };
            let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(2)));
            let mut buf = [0u8; 8192];
            let n = stream.read(&mut buf).unwrap_or(0);
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            let body = r#"{"server_nonce":"00","proof":"00","server_proof":"00"}"#;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
        got
    });
    let answer = crate::server::client::Client::for_port(state, port)
        .and_then(|c| c.call("GET", "/v1/chats", None));
    // Wakes the squatter's accept loop if the client stopped early.
    let _ = std::net::TcpStream::connect(("127.0.0.1", port));
    let got = squatter
        .join()
        .map_err(|_| "the squatter thread panicked")?;
    let token = &state.config().server_token;
    if String::from_utf8_lossy(&got).contains(token.as_str()) {
        return Err(format!("the token reached the squatter on port {port}"));
    }
    match answer {
        Ok(reply) => Err(format!(
            "the client accepted the squatter on port {port} (status {})",
            reply.status
        )),
        Err(e) => {
            let e = format!("{e:#}");
            if e.contains("is not the server of the state root") {
                Ok(format!(
                    "the client refused the squatter on port {port} ({} bytes received, no token): {}",
                    got.len(),
                    tail(&e, 160)
                ))
            } else {
                Err(format!("the client failed otherwise: {e}"))
            }
        }
    }
}
