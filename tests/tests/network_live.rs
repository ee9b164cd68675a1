//! The sandbox's network, live, as root and as the unprivileged `sbx-test`: `sandboxer exec`
//! under a policy's `[network]`, with the dispatcher's egress proxy on a Unix socket. A test
//! server on the machine's 127.0.0.1 stands in for the outside (the proxy resolves
//! `outside.test` to it, and its port is the policy's `loopback`); another server on
//! 127.0.0.1, named nowhere, is the person's local service. Every refusal has a control: the
//! same request made outside the sandbox, or the allowed one made inside.
#![cfg(target_os = "linux")]

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::Output;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::thread;

use agentworks_e2e::{Runner, chown_r, live_scenarios, sandboxer_bin, text, world_dir};
use dispatcher::egress::{EgressEvent, EgressVerdict, Proxy, ProxyHandle};
use sandboxer::network::{NetworkMode, NetworkRules};

/// An HTTP server on the machine's 127.0.0.1 that answers `hello NAME` and counts requests.
struct Server {
    port: u16,
    hits: Arc<Mutex<usize>>,
}

impl Server {
    fn start(name: &'static str) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits: Arc<Mutex<usize>> = Arc::default();
        let seen = hits.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                }
                *seen.lock().unwrap() += 1;
                let body = format!("hello {name}");
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Server { port, hits }
    }

    fn hits(&self) -> usize {
        *self.hits.lock().unwrap()
    }
}

/// A world: the two servers, the proxy on a socket the runner can reach, a policy file.
struct World {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    outside: Server,
    local: Server,
    events: Receiver<EgressEvent>,
    lookups: Arc<AtomicUsize>,
    _proxy: Option<ProxyHandle>,
    policy: PathBuf,
}

impl World {
    fn new(r: &Runner, mode: NetworkMode) -> World {
        let tmp = world_dir("aw-network-");
        let dir = tmp.path().to_path_buf();
        let outside = Server::start("outside");
        let local = Server::start("local");
        let socket = dir.join("egress.sock");
        let (tx, events) = channel();
        let lookups = Arc::new(AtomicUsize::new(0));
        let (proxy, section) = match mode {
            NetworkMode::None => (None, "mode = \"none\"\n".to_string()),
            _ => {
                let allow: &[&str] = match mode {
                    NetworkMode::Allowlist => &["outside.test"],
                    _ => &[],
                };
                let rules =
                    NetworkRules::with_entries(mode, allow.iter().copied(), &[outside.port])
                        .unwrap();
                let counted = lookups.clone();
                let tx = Mutex::new(tx);
                let listener = UnixListener::bind(&socket).unwrap();
                std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o777)).unwrap();
                let handle = Proxy::new(rules, move |e| {
                    let _ = tx.lock().unwrap().send(e);
                })
                .with_resolver(move |name, _| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    match name {
                        "outside.test" | "other.test" | "rebind.test" => {
                            Ok(vec![IpAddr::V4(Ipv4Addr::LOCALHOST)])
                        }
                        _ => Err(std::io::Error::other("no such name")),
                    }
                })
                .serve(listener)
                .unwrap();
                let allow_line = if allow.is_empty() {
                    String::new()
                } else {
                    "allow = [\"outside.test\"]\n".to_string()
                };
                (
                    Some(handle),
                    format!(
                        "mode = \"{}\"\n{allow_line}loopback = [{}]\nproxy = \"{}\"\n",
                        mode.as_str(),
                        outside.port,
                        socket.display()
                    ),
                )
            }
        };
        std::fs::create_dir(dir.join("home")).unwrap();
        let policy = dir.join("policy.toml");
        std::fs::write(
            &policy,
            format!(
                "version = 1\nbase = \"open\"\n[autorun]\nguard = false\n\n[network]\n{section}"
            ),
        )
        .unwrap();
        if r.uid != 0 {
            chown_r(&dir, (r.uid, r.gid));
        }
        World {
            _tmp: tmp,
            dir,
            outside,
            local,
            events,
            lookups,
            _proxy: proxy,
            policy,
        }
    }

    /// `script` run by bash inside the sandbox.
    fn inside(&self, r: &Runner, script: &str) -> Output {
        self.inside_with(r, &self.policy, script)
    }

    /// `script` run by bash inside a sandbox of `policy`.
    fn inside_with(&self, r: &Runner, policy: &std::path::Path, script: &str) -> Output {
        r.command_with_path(r.reachable(&sandboxer_bin()))
            .env("HOME", self.dir.join("home"))
            .args(["exec", "--policy"])
            .arg(policy)
            .args(["--", "/bin/bash", "-c", script])
            .current_dir(&self.dir)
            .output()
            .unwrap()
    }

    /// `script` run by bash outside any sandbox, as the runner.
    fn outside_sandbox(&self, r: &Runner, script: &str) -> Output {
        r.command_with_path("/bin/bash")
            .args(["-c", script])
            .current_dir(&self.dir)
            .output()
            .unwrap()
    }

    fn events(&self) -> Vec<EgressEvent> {
        self.events.try_iter().collect()
    }
}

/// Each probe prints `NAME=CODE` (curl's exit status and the body), so one run says all.
fn probes(list: &[(&str, String)]) -> String {
    list.iter()
        .map(|(name, cmd)| format!("echo \"{name}=$({cmd} 2>/dev/null; echo \" rc=$?\")\";"))
        .collect()
}

fn field<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} in:\n{out}"))
}

fn reached(out: &str, name: &str, who: &str) -> bool {
    field(out, name).contains(&format!("hello {who}"))
}

/// Ways to name the machine itself, each asked of the proxy for the local service's port.
fn loopback_spellings(port: u16) -> Vec<(String, String)> {
    [
        "127.0.0.1",
        "localhost",
        "127.0.0.2",
        "2130706433",
        "0177.0.0.1",
        "0x7f.1",
        "127.1",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "LOCALHOST",
        "localhost.",
        "0.0.0.0",
        "169.254.169.254",
        "rebind.test",
    ]
    .iter()
    .enumerate()
    .map(|(i, h)| {
        (
            format!("trick{i}"),
            format!("curl -s -m 5 -g http://{h}:{port}/"),
        )
    })
    .collect()
}

/// `public`: the outside is reached through the proxy; the machine itself in none of its
/// spellings, neither through the proxy nor directly; a program ignoring the proxy gets
/// nothing; every request is an event.
fn public_mode(r: &Runner) {
    let w = World::new(r, NetworkMode::Public);
    let (po, pl) = (w.outside.port, w.local.port);
    let mut list = vec![
        (
            "via_proxy".to_string(),
            format!("curl -s -m 5 http://outside.test:{po}/"),
        ),
        (
            "via_connect".to_string(),
            format!("curl -s -m 5 -p http://outside.test:{po}/"),
        ),
        (
            "loopback_port_direct".to_string(),
            format!("curl -s -m 5 --noproxy '*' http://127.0.0.1:{po}/"),
        ),
        (
            "local_direct".to_string(),
            format!("curl -s -m 5 --noproxy '*' http://127.0.0.1:{pl}/"),
        ),
        (
            "ignores_proxy".to_string(),
            format!("curl -s -m 5 --noproxy '*' http://outside.test:{po}/"),
        ),
        (
            "public_ip_direct".to_string(),
            "curl -s -m 5 --noproxy '*' http://1.1.1.1/".to_string(),
        ),
    ];
    list.extend(loopback_spellings(pl));
    let refs: Vec<(&str, String)> = list.iter().map(|(n, c)| (n.as_str(), c.clone())).collect();
    let out = w.inside(r, &probes(&refs));
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(reached(&all, "via_proxy", "outside"), "{all}");
    assert!(reached(&all, "via_connect", "outside"), "{all}");
    // The named loopback port is reached directly too: the proxy holds its listener.
    assert!(reached(&all, "loopback_port_direct", "outside"), "{all}");
    for (name, _) in &list[3..] {
        assert!(
            !all.contains(&format!("{name}=hello")),
            "{name} got through:\n{all}"
        );
    }
    assert_eq!(w.local.hits(), 0, "the local service was reached:\n{all}");
    // Controls: outside the sandbox the local service and the outside stand-in answer.
    let control = w.outside_sandbox(
        r,
        &probes(&[
            (
                "local",
                format!("curl -s -m 5 --noproxy '*' http://127.0.0.1:{pl}/"),
            ),
            (
                "outside",
                format!("curl -s -m 5 --noproxy '*' http://127.0.0.1:{po}/"),
            ),
        ]),
    );
    let c = text(&control);
    assert!(
        reached(&c, "local", "local") && reached(&c, "outside", "outside"),
        "{c}"
    );
    let events = w.events();
    assert!(
        events.iter().any(|e| e.verdict == EgressVerdict::Allow
            && e.host == "outside.test"
            && e.bytes_down > 0),
        "{events:#?}"
    );
    assert!(
        events.iter().any(|e| e.verdict == EgressVerdict::Refuse),
        "{events:#?}"
    );
}

/// `allowlist`: the listed host is reached; another name is refused without being looked up.
fn allowlist_mode(r: &Runner) {
    let w = World::new(r, NetworkMode::Allowlist);
    let po = w.outside.port;
    let out = w.inside(
        r,
        &probes(&[
            ("listed", format!("curl -s -m 5 http://outside.test:{po}/")),
            ("unlisted", format!("curl -s -m 5 http://other.test:{po}/")),
            (
                "unlisted_connect",
                format!("curl -s -m 5 -p http://other.test:{po}/"),
            ),
        ]),
    );
    let all = text(&out);
    assert!(reached(&all, "listed", "outside"), "{all}");
    assert!(!reached(&all, "unlisted", "outside"), "{all}");
    assert!(!reached(&all, "unlisted_connect", "outside"), "{all}");
    assert_eq!(w.outside.hits(), 1, "{all}");
    // `outside.test` was looked up; `other.test` never was.
    assert_eq!(w.lookups.load(Ordering::SeqCst), 1, "{all}");
    let events = w.events();
    assert!(
        events
            .iter()
            .any(|e| e.verdict == EgressVerdict::Refuse && e.host == "other.test"),
        "{events:#?}"
    );
}

/// `none`: only `lo`, nothing listening, nothing reachable; control: the same probes outside.
fn none_mode(r: &Runner) {
    let w = World::new(r, NetworkMode::None);
    let pl = w.local.port;
    let script = probes(&[
        (
            "local",
            format!("curl -s -m 5 --noproxy '*' http://127.0.0.1:{pl}/"),
        ),
        (
            "proxy_port",
            "curl -s -m 5 --noproxy '*' http://127.0.0.1:3128/".to_string(),
        ),
    ]) + "echo IFACES=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ,);";
    let out = w.inside(r, &script);
    let all = text(&out);
    assert!(!reached(&all, "local", "local"), "{all}");
    assert_eq!(field(&all, "IFACES"), "lo,", "{all}");
    assert_eq!(w.local.hits(), 0, "{all}");
    let control = w.outside_sandbox(r, &script);
    assert!(
        reached(&text(&control), "local", "local"),
        "{}",
        text(&control)
    );
}

/// A socket that does not take the sandbox's listeners (a server that answers as a proxy
/// without the handoff would, with 400): the launch fails, naming the network layer, and the
/// command does not run. Control: the same command under the policy with the proxy runs.
fn a_socket_that_takes_no_listeners_fails_the_launch(r: &Runner) {
    let w = World::new(r, NetworkMode::Public);
    let other = w.dir.join("other.sock");
    let listener = UnixListener::bind(&other).unwrap();
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o777)).unwrap();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = std::io::Read::read(&mut stream, &mut [0u8; 4096]);
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let policy = w.dir.join("other.toml");
    let text_of = std::fs::read_to_string(&w.policy).unwrap();
    let proxy_line = format!("proxy = \"{}\"", w.dir.join("egress.sock").display());
    assert!(text_of.contains(&proxy_line), "{text_of}");
    let other_line = format!("proxy = \"{}\"", other.display());
    std::fs::write(&policy, text_of.replace(&proxy_line, &other_line)).unwrap();
    if r.uid != 0 {
        chown_r(&w.dir, (r.uid, r.gid));
    }
    let out = w.inside_with(r, &policy, "echo RAN");
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(!all.contains("RAN"), "{all}");
    assert!(
        all.contains("network") && all.contains("not a proxy that takes listeners"),
        "{all}"
    );
    let control = w.inside(r, "echo RAN");
    assert!(text(&control).contains("RAN"), "{}", text(&control));
}

live_scenarios!(
    public_mode,
    allowlist_mode,
    none_mode,
    a_socket_that_takes_no_listeners_fails_the_launch
);
