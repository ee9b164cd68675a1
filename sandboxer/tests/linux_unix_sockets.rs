//! Live tests of the socket broker: inside `sandboxer exec`, in both shapes, as root and as the
//! unprivileged user `sbx-test`, no pathname Unix socket off the policy's `unix_sockets` can be
//! connected to, wherever it lives (the home, a `/tmp/ssh-XXXX`-like folder, a real tmux
//! server's `-S` socket), by absolute or relative path or through a symlink; datagram Unix
//! sockets and io_uring are refused; an allowlisted socket carries data and TCP keeps working.
//!
//! Every denial has a control: the same probe, run unconfined by the same user, succeeds. A
//! missing prerequisite (the user, tmux, python) fails the test.

#![cfg(target_os = "linux")]

use std::fs;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::{PermissionsExt, chown};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use agentworks_test_user::{Runner, Who, require_root};
use serde_json::Value;

const PYTHON: &str = "/usr/bin/python3";

/// Connects to each `unix:PATH` (and exchanges a line), `conn:PATH` (connects only), `tcp:PORT`; tries a datagram socket and io_uring; prints one
/// JSON object: name -> "ok" (and what the server said) or the errno's name.
const PROBE: &str = r#"
import ctypes, errno, json, os, socket, sys
out = {}
def name(e): return errno.errorcode.get(e.errno, str(e.errno))
for arg in sys.argv[1:]:
    kind, _, target = arg.partition(":")
    try:
        if kind == "unix":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10)
            s.connect(target)
            s.sendall(b"ping\n")
            out[arg] = "ok:" + s.recv(64).decode(errors="replace").strip()
        elif kind == "conn":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(target)
            out[arg] = "ok"
        elif kind == "tcp":
            s = socket.create_connection(("127.0.0.1", int(target)), timeout=10)
            s.sendall(b"ping\n")
            out[arg] = "ok:" + s.recv(64).decode(errors="replace").strip()
        elif kind == "dgram":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            s.sendto(b"x", target)
            out[arg] = "ok"
        elif kind == "uring":
            libc = ctypes.CDLL(None, use_errno=True)
            params = ctypes.create_string_buffer(120)
            fd = libc.syscall(425, 4, params)
            out[arg] = "ok" if fd >= 0 else errno.errorcode[ctypes.get_errno()]
    except OSError as e:
        out[arg] = name(e)
print(json.dumps(out))
"#;

/// Who runs the sandbox and its controls (these live tests run as root and switch to the test
/// user).
fn runner(who: Who) -> Runner {
    require_root();
    Runner::new(who)
}

/// A pathname listener served on a thread: answers each connection with `name` and echoes
/// one line back (so data is seen to pass both ways). Counts connections.
struct Server {
    stop: Arc<AtomicBool>,
    accepted: Arc<std::sync::atomic::AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    fn unix(path: &Path, name: &'static str) -> Server {
        let l = UnixListener::bind(path).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(0o777)).unwrap();
        l.set_nonblocking(true).unwrap();
        Server::serve(
            move || l.accept().ok().map(|(s, _)| Box::new(s) as Box<dyn Stream>),
            name,
        )
    }

    fn tcp(name: &'static str) -> (Server, u16) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        l.set_nonblocking(true).unwrap();
        let s = Server::serve(
            move || l.accept().ok().map(|(s, _)| Box::new(s) as Box<dyn Stream>),
            name,
        );
        (s, port)
    }

    fn serve(
        mut accept: impl FnMut() -> Option<Box<dyn Stream>> + Send + 'static,
        name: &'static str,
    ) -> Server {
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (st, ac) = (stop.clone(), accepted.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                match accept() {
                    Some(mut s) => {
                        ac.fetch_add(1, Ordering::Relaxed);
                        s.set_blocking();
                        let mut line = [0u8; 5];
                        let got = s.read(&mut line).unwrap_or(0);
                        let reply = format!("{name}+{}", String::from_utf8_lossy(&line[..got]));
                        let _ = s.write_all(reply.as_bytes());
                    }
                    None => std::thread::sleep(std::time::Duration::from_millis(5)),
                }
            }
        });
        Server {
            stop,
            accepted,
            thread: Some(thread),
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }
}

trait Stream: Read + Write + Send {
    fn set_blocking(&mut self);
}
impl Stream for std::os::unix::net::UnixStream {
    fn set_blocking(&mut self) {
        let _ = self.set_nonblocking(false);
    }
}
impl Stream for std::net::TcpStream {
    fn set_blocking(&mut self) {
        let _ = self.set_nonblocking(false);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn output_json(out: &Output, what: &str) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{what}: {:?}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{what}: {e}: {stdout}"))
}

/// The sandboxer binary, where the runner can execute it.
fn sandboxer_for(root: &Path) -> PathBuf {
    let copy = root.join("sandboxer");
    fs::copy(env!("CARGO_BIN_EXE_sandboxer"), &copy).unwrap();
    fs::set_permissions(&copy, fs::Permissions::from_mode(0o755)).unwrap();
    copy
}

fn scenario(who: Who, shape: &str) {
    let r = runner(who);
    let (uid, gid) = (r.uid, r.gid);
    assert!(Path::new(PYTHON).exists(), "{PYTHON} is missing");
    let dir = tempfile::Builder::new()
        .prefix("sbx-sockets-")
        .tempdir_in("/tmp")
        .unwrap();
    let root = dir.path().to_path_buf();
    fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
    let home = root.join("home");
    let ssh = root.join("ssh-XXXXabcd");
    let tmux_dir = root.join("tmuxdir");
    for d in [&home, &ssh, &tmux_dir] {
        fs::create_dir(d).unwrap();
        fs::set_permissions(d, fs::Permissions::from_mode(0o777)).unwrap();
    }
    chown(&home, Some(uid), Some(gid)).unwrap();
    chown(&tmux_dir, Some(uid), Some(gid)).unwrap();
    let probe = root.join("probe.py");
    fs::write(&probe, PROBE).unwrap();
    fs::set_permissions(&probe, fs::Permissions::from_mode(0o644)).unwrap();

    let refused_home = home.join("x.sock");
    let refused_ssh = ssh.join("agent.123");
    let allowed = home.join("bridge.sock");
    let dgram = home.join("dgram.sock");
    let servers = [
        Server::unix(&refused_home, "home"),
        Server::unix(&refused_ssh, "agent"),
        Server::unix(&allowed, "bridge"),
    ];
    let dgram_sink = std::os::unix::net::UnixDatagram::bind(&dgram).unwrap();
    fs::set_permissions(&dgram, fs::Permissions::from_mode(0o777)).unwrap();
    let (tcp, port) = Server::tcp("tcp");

    // A real tmux server of the runner's, on a socket of its choosing.
    let tmux_sock = tmux_dir.join("x.sock");
    let tmux = |args: &[&str]| {
        r.command_with_path("tmux")
            .arg("-S")
            .arg(&tmux_sock)
            .args(args)
            .env("HOME", &home)
            .output()
            .expect("running tmux (install it: scripts/setup-test-env.sh)")
    };
    let started = tmux(&[
        "-f",
        "/dev/null",
        "new-session",
        "-d",
        "-s",
        "sbx",
        "sleep 600",
    ]);
    assert!(started.status.success(), "starting tmux: {started:?}");
    struct KillTmux<F: Fn(&[&str]) -> Output>(F);
    impl<F: Fn(&[&str]) -> Output> Drop for KillTmux<F> {
        fn drop(&mut self) {
            let _ = (self.0)(&["kill-server"]);
        }
    }
    let tmux = KillTmux(tmux);

    // A symlink inside the sandbox's reach pointing at a refused socket.
    let link = home.join("link.sock");
    std::os::unix::fs::symlink(&refused_ssh, &link).unwrap();

    let s = |p: &Path| format!("unix:{}", p.display());
    let tmux_probe = format!("conn:{}", tmux_sock.display());
    let probes = [
        s(&refused_home),
        s(&refused_ssh),
        tmux_probe.clone(),
        s(&link),
        "unix:x.sock".to_string(),
        s(&allowed),
        "unix:bridge.sock".to_string(),
        format!("dgram:{}", dgram.display()),
        format!("tcp:{port}"),
        "uring:".to_string(),
    ];

    // Control: the same probes unconfined, as the same user, all get through.
    let control = r
        .command_with_path(PYTHON)
        .arg(&probe)
        .args(&probes)
        .current_dir(&home)
        .output()
        .unwrap();
    let control = output_json(&control, "unconfined control");
    for p in &probes {
        let v = control[p].as_str().unwrap_or_default();
        assert!(
            v.starts_with("ok"),
            "unconfined {p} should succeed: {control}"
        );
    }
    let tmux_control = (tmux.0)(&["list-sessions"]);
    assert!(
        tmux_control.status.success(),
        "tmux control: {tmux_control:?}"
    );

    let policy = root.join("policy.toml");
    fs::write(
        &policy,
        format!(
            "version = 1\nbase = \"open\"\nunix_sockets = [{:?}]\n[linux]\nways_out = false\n[autorun]\nguard = false\n",
            allowed.display().to_string()
        ),
    )
    .unwrap();
    fs::set_permissions(&policy, fs::Permissions::from_mode(0o644)).unwrap();
    let before: Vec<usize> = servers.iter().map(Server::accepted).collect();
    let confined = r
        .command_with_path(sandboxer_for(&root))
        .arg("exec")
        .arg("--policy")
        .arg(&policy)
        .arg("--home")
        .arg(&home)
        .args(["--enforce", shape])
        .arg("--cwd")
        .arg(&home)
        .arg("--")
        .arg(PYTHON)
        .arg(&probe)
        .args(&probes)
        .env("HOME", &home)
        .output()
        .unwrap();
    let got = output_json(&confined, &format!("confined ({shape}, {who:?})"));
    let expect = |p: &str, want: &str| {
        assert_eq!(
            got[p].as_str(),
            Some(want),
            "{p} inside ({shape}, {who:?}): {got}"
        );
    };
    expect(&s(&refused_home), "EACCES");
    expect(&s(&refused_ssh), "EACCES");
    expect(&tmux_probe, "EACCES");
    expect(&s(&link), "EACCES");
    expect("unix:x.sock", "EACCES");
    expect(&s(&allowed), "ok:bridge+ping");
    expect("unix:bridge.sock", "ok:bridge+ping");
    expect(&format!("dgram:{}", dgram.display()), "EACCES");
    expect(&format!("tcp:{port}"), "ok:tcp+ping");
    expect("uring:", "ENOSYS");
    // The refused servers saw no connection from inside; the allowed one saw two.
    let after: Vec<usize> = servers.iter().map(Server::accepted).collect();
    assert_eq!(after[0], before[0], "the home server was reached");
    assert_eq!(after[1], before[1], "the agent was reached");
    assert_eq!(after[2], before[2] + 2, "the allowlisted server");
    let mut buf = [0u8; 8];
    dgram_sink.set_nonblocking(true).unwrap();
    // The control's datagram arrived; nothing from inside.
    assert!(dgram_sink.recv(&mut buf).is_ok());
    assert!(
        dgram_sink.recv(&mut buf).is_err(),
        "a datagram from inside arrived"
    );
    drop(tcp);
}

macro_rules! live {
    ($($name:ident: $who:ident, $shape:literal;)*) => {$(
        #[test]
        fn $name() {
            scenario(Who::$who, $shape);
        }
    )*};
}

live! {
    masks_as_root: Root, "masks";
    masks_as_user: User, "masks";
    landlock_only_as_root: Root, "landlock-only";
    landlock_only_as_user: User, "landlock-only";
}
