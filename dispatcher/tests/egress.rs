//! The egress proxy live on loopback: a test server on 127.0.0.1 stands in for the outside
//! (named through a test resolver and a loopback port), reached through CONNECT and plain
//! HTTP; refused requests get 403 and the server sees nothing; every connection is an event.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use dispatcher::egress::{EgressEvent, EgressVerdict, Proxy, ProxyHandle};
use sandboxer::network::{NetworkMode, NetworkRules};

const REPLY: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";

/// A loopback HTTP server: answers every request with [`REPLY`] and keeps the heads it got.
struct Server {
    port: u16,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let heads: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = heads.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let mut stream = stream.unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    head.push_str(&line);
                }
                seen.lock().unwrap().push(head);
                let _ = stream.write_all(REPLY);
            }
        });
        Server { port, heads }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

/// Rules, a resolver answering `outside.test` and `rebind.test` with 127.0.0.1 (and counting
/// its lookups), events on a channel.
struct Setup {
    lookups: Arc<AtomicUsize>,
    events: Receiver<EgressEvent>,
    proxy: Proxy,
}

fn setup(mode: NetworkMode, allow: &[&str], loopback: &[u16]) -> Setup {
    let rules = NetworkRules::with_entries(mode, allow.iter().copied(), loopback).unwrap();
    let (tx, events) = channel();
    let lookups = Arc::new(AtomicUsize::new(0));
    let counted = lookups.clone();
    let proxy = Proxy::new(rules, move |e| tx.send(e).unwrap()).with_resolver(move |name, _| {
        counted.fetch_add(1, Ordering::SeqCst);
        match name {
            "outside.test" | "rebind.test" => Ok(vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]),
            _ => Err(std::io::Error::other("no such name")),
        }
    });
    Setup {
        lookups,
        events,
        proxy,
    }
}

fn serve_unix(proxy: Proxy) -> (ProxyHandle, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let listener = UnixListener::bind(dir.path().join("proxy.sock")).unwrap();
    (proxy.serve(listener).unwrap(), dir)
}

fn connect_unix(dir: &tempfile::TempDir) -> UnixStream {
    let s = UnixStream::connect(dir.path().join("proxy.sock")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// Sends `request` and reads everything until the proxy or the host closes.
fn exchange(mut stream: impl Read + Write, request: &str) -> String {
    stream.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn next(events: &Receiver<EgressEvent>) -> EgressEvent {
    events
        .recv_timeout(Duration::from_secs(20))
        .expect("an event")
}

#[test]
fn a_listed_host_is_reached_through_connect_and_plain_http() {
    let server = Server::start();
    let p = server.port;
    let s = setup(NetworkMode::Allowlist, &["outside.test"], &[p]);
    let (events, proxy) = (s.events, s.proxy);
    let (_handle, dir) = serve_unix(proxy);

    // CONNECT over the Unix socket, then a request inside the tunnel.
    let mut tunnel = connect_unix(&dir);
    tunnel
        .write_all(
            format!("CONNECT outside.test:{p} HTTP/1.1\r\nHost: outside.test:{p}\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
    let mut established = [0u8; 39];
    tunnel.read_exact(&mut established).unwrap();
    assert_eq!(&established, b"HTTP/1.1 200 Connection established\r\n\r\n");
    let inner = "GET /inside HTTP/1.1\r\nHost: outside.test\r\n\r\n";
    let reply = exchange(&mut tunnel, inner);
    assert_eq!(reply.as_bytes(), REPLY);
    let e = next(&events);
    assert_eq!(
        (e.method.as_str(), e.host.as_str(), e.port, e.verdict),
        ("CONNECT", "outside.test", Some(p), EgressVerdict::Allow)
    );
    assert_eq!(
        (e.bytes_up, e.bytes_down),
        (inner.len() as u64, REPLY.len() as u64)
    );
    assert_eq!(e.address, Some(([127, 0, 0, 1], p).into()));
    assert_eq!(e.reason, "allowed by \"outside.test\"");

    // Plain HTTP: the URI's path goes out in origin form, with `Connection: close`.
    let reply = exchange(
        connect_unix(&dir),
        &format!(
            "GET http://OUTSIDE.test:{p}/plain?q=1 HTTP/1.1\r\nHost: outside.test:{p}\r\n\
             Proxy-Connection: keep-alive\r\n\r\n"
        ),
    );
    assert_eq!(reply.as_bytes(), REPLY);
    let e = next(&events);
    assert_eq!(
        (e.method.as_str(), e.verdict),
        ("GET", EgressVerdict::Allow)
    );
    let heads = server.heads();
    assert_eq!(
        heads[0],
        inner.trim_end_matches("\r\n").to_string() + "\r\n"
    );
    let forwarded =
        format!("GET /plain?q=1 HTTP/1.1\r\nHost: outside.test:{p}\r\nConnection: close\r\n");
    assert_eq!(heads[1], forwarded);
    assert_eq!(
        (e.bytes_up, e.bytes_down),
        (forwarded.len() as u64 + 2, REPLY.len() as u64)
    );
}

#[test]
fn a_refused_host_gets_403_and_is_never_looked_up_or_reached() {
    let server = Server::start();
    let p = server.port;
    let s = setup(NetworkMode::Allowlist, &["outside.test"], &[p]);
    let (_handle, dir) = serve_unix(s.proxy);
    for request in [
        format!("CONNECT other.test:{p} HTTP/1.1\r\n\r\n"),
        format!("CONNECT outside.test.:{p} HTTP/1.1\r\n\r\n"),
        format!("CONNECT x.outside.test:{p} HTTP/1.1\r\n\r\n"),
        format!("GET http://other.test:{p}/ HTTP/1.1\r\nHost: other.test:{p}\r\n\r\n"),
        format!("GET http://outside.test:{p}/ HTTP/1.1\r\nHost: other.test:{p}\r\n\r\n"),
        format!("GET http://user@outside.test:{p}/ HTTP/1.1\r\n\r\n"),
        format!("CONNECT 2130706433:{p} HTTP/1.1\r\n\r\n"),
        format!("CONNECT 0x7f.1:{p} HTTP/1.1\r\n\r\n"),
        format!("CONNECT outside%2etest:{p} HTTP/1.1\r\n\r\n"),
    ] {
        let reply = exchange(connect_unix(&dir), &request);
        assert!(
            reply.starts_with("HTTP/1.1 403 ") || reply.starts_with("HTTP/1.1 400 "),
            "{request:?}: {reply}"
        );
        let e = next(&s.events);
        assert_eq!(e.verdict, EgressVerdict::Refuse, "{request:?}");
        assert_eq!((e.bytes_up, e.bytes_down), (0, 0));
    }
    assert_eq!(
        s.lookups.load(Ordering::SeqCst),
        0,
        "a refused name was looked up"
    );
    assert!(
        server.heads().is_empty(),
        "the server saw {:?}",
        server.heads()
    );
    // Control: the server answers directly, and through the proxy for a listed name.
    assert_eq!(
        exchange(
            TcpStream::connect(("127.0.0.1", p)).unwrap(),
            "GET / HTTP/1.1\r\n\r\n"
        )
        .as_bytes(),
        REPLY
    );
    let ok = exchange(
        connect_unix(&dir),
        &format!("GET http://outside.test:{p}/ HTTP/1.1\r\n\r\n"),
    );
    assert_eq!(ok.as_bytes(), REPLY);
}

#[test]
fn public_refuses_the_machine_by_every_name_unless_its_port_is_named() {
    let server = Server::start();
    let p = server.port;
    let requests = [
        format!("CONNECT localhost:{p} HTTP/1.1\r\n\r\n"),
        format!("CONNECT 127.0.0.1:{p} HTTP/1.1\r\n\r\n"),
        format!("CONNECT [::ffff:127.0.0.1]:{p} HTTP/1.1\r\n\r\n"),
        format!("CONNECT rebind.test:{p} HTTP/1.1\r\n\r\n"),
        format!("GET http://localhost:{p}/ HTTP/1.1\r\nHost: localhost:{p}\r\n\r\n"),
    ];
    // The proxy on a TCP loopback port this time.
    let s = setup(NetworkMode::Public, &[], &[]);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = listener.local_addr().unwrap();
    let handle = s.proxy.serve(listener).unwrap();
    for request in &requests {
        let reply = exchange(TcpStream::connect(at).unwrap(), request);
        assert!(reply.starts_with("HTTP/1.1 403 "), "{request:?}: {reply}");
        let e = next(&s.events);
        assert_eq!(e.verdict, EgressVerdict::Refuse, "{request:?}");
    }
    assert!(
        server.heads().is_empty(),
        "the server saw {:?}",
        server.heads()
    );
    drop(handle);

    // Control: the same requests reach it once the policy names its port.
    let s = setup(NetworkMode::Public, &[], &[p]);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = listener.local_addr().unwrap();
    let _handle = s.proxy.serve(listener).unwrap();
    for request in &requests {
        let mut stream = TcpStream::connect(at).unwrap();
        let reply = if request.starts_with("CONNECT") {
            stream.write_all(request.as_bytes()).unwrap();
            let mut established = [0u8; 39];
            stream.read_exact(&mut established).unwrap();
            exchange(stream, "GET / HTTP/1.1\r\n\r\n")
        } else {
            exchange(stream, request)
        };
        assert_eq!(reply.as_bytes(), REPLY, "{request:?}");
        assert_eq!(next(&s.events).verdict, EgressVerdict::Allow);
    }
    assert_eq!(server.heads().len(), requests.len());
}

#[test]
fn dropping_the_proxy_ends_its_open_connections_and_reports_them() {
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let p = server.local_addr().unwrap().port();
    let s = setup(NetworkMode::Public, &[], &[p]);
    let (handle, dir) = serve_unix(s.proxy);
    let mut tunnel = connect_unix(&dir);
    tunnel
        .write_all(format!("CONNECT localhost:{p} HTTP/1.1\r\n\r\n").as_bytes())
        .unwrap();
    let mut established = [0u8; 39];
    tunnel.read_exact(&mut established).unwrap();
    let (mut held, _) = server.accept().unwrap(); // the host holds the connection open
    tunnel.write_all(b"ping").unwrap();
    let mut ping = [0u8; 4];
    held.read_exact(&mut ping).unwrap();
    drop(handle);
    let mut rest = Vec::new();
    let _ = tunnel.read_to_end(&mut rest);
    assert!(rest.is_empty());
    let e = next(&s.events);
    assert_eq!((e.verdict, e.bytes_up), (EgressVerdict::Allow, 4));
    assert!(
        UnixStream::connect(dir.path().join("proxy.sock")).is_err(),
        "still accepting"
    );
}

/// Hands `listeners` to the proxy at `dir` as a sandbox's PID 1 does; the connection they
/// went over, to be held.
#[cfg(target_os = "linux")]
fn hand(
    dir: &tempfile::TempDir,
    listeners: &[(&TcpListener, sandboxer::network::handoff::Carry)],
) -> Result<UnixStream, sandboxer::network::handoff::HandoffError> {
    let s = connect_unix(dir);
    sandboxer::network::handoff::hand_over(&s, listeners).map(|()| s)
}

/// Whether a connection to `addr` is refused within 10 s (the proxy closes a listener from
/// its accepting thread).
#[cfg(target_os = "linux")]
fn refused_soon(addr: std::net::SocketAddr) -> bool {
    (0..200).any(|_| {
        let refused = TcpStream::connect(addr).is_err();
        if !refused {
            thread::sleep(Duration::from_millis(50));
        }
        refused
    })
}

/// Listeners handed by a caller that is no sandbox: the proxy port's clients speak to the
/// proxy, a loopback port's connection is the tunnel `CONNECT 127.0.0.1:PORT` would be; each
/// is decided by the same rules and is an event. A port not named is refused (the client is
/// closed, the server sees nothing); the control is the same server reached directly.
#[cfg(target_os = "linux")]
#[test]
fn handed_listeners_are_served_by_the_same_rules() {
    use sandboxer::network::handoff::Carry;
    let server = Server::start();
    let unnamed = Server::start();
    let p = server.port;
    let s = setup(NetworkMode::Public, &[], &[p]);
    let (_handle, dir) = serve_unix(s.proxy);
    let proxy_port = TcpListener::bind("127.0.0.1:0").unwrap();
    let named = TcpListener::bind("127.0.0.1:0").unwrap();
    let not_named = TcpListener::bind("127.0.0.1:0").unwrap();
    let addrs: Vec<_> = [&proxy_port, &named, &not_named]
        .iter()
        .map(|l| l.local_addr().unwrap())
        .collect();
    let _held = hand(
        &dir,
        &[
            (&proxy_port, Carry::Proxy),
            (&named, Carry::Loopback(p)),
            (&not_named, Carry::Loopback(unnamed.port)),
        ],
    )
    .unwrap();
    drop((proxy_port, named, not_named)); // the proxy holds the only copies

    let through_proxy = exchange(
        TcpStream::connect(addrs[0]).unwrap(),
        &format!("GET http://outside.test:{p}/a HTTP/1.1\r\n\r\n"),
    );
    assert!(through_proxy.ends_with("hello"), "{through_proxy}");
    let e = next(&s.events);
    assert_eq!(
        (e.method.as_str(), e.host.as_str(), e.verdict),
        ("GET", "outside.test", EgressVerdict::Allow)
    );

    let direct = exchange(
        TcpStream::connect(addrs[1]).unwrap(),
        "GET /b HTTP/1.1\r\n\r\n",
    );
    assert_eq!(direct.as_bytes(), REPLY);
    let e = next(&s.events);
    assert_eq!(
        (
            e.method.as_str(),
            e.host.as_str(),
            e.port,
            e.verdict,
            e.bytes_down
        ),
        (
            "CONNECT",
            "127.0.0.1",
            Some(p),
            EgressVerdict::Allow,
            REPLY.len() as u64
        )
    );
    assert_eq!(server.heads().len(), 2);

    let refused = exchange(
        TcpStream::connect(addrs[2]).unwrap(),
        "GET /c HTTP/1.1\r\n\r\n",
    );
    assert_eq!(
        refused, "",
        "a refused loopback port's client is only closed"
    );
    let e = next(&s.events);
    assert_eq!(
        (e.port, e.verdict),
        (Some(unnamed.port), EgressVerdict::Refuse)
    );
    assert!(unnamed.heads().is_empty());
    // Control: that server answers when asked directly.
    let control = exchange(
        TcpStream::connect(("127.0.0.1", unnamed.port)).unwrap(),
        "GET / HTTP/1.1\r\n\r\n",
    );
    assert_eq!(control.as_bytes(), REPLY);
}

/// A listener bound to an address other machines reach is refused, whoever hands it; the
/// same on loopback is taken (the control). Handed listeners close when the connection they
/// came over closes (the sandbox's PID 1 ended).
#[cfg(target_os = "linux")]
#[test]
fn handed_listeners_are_on_loopback_and_live_as_long_as_their_sandbox() {
    use sandboxer::network::handoff::{Carry, HandoffError};
    let server = Server::start();
    let p = server.port;
    let s = setup(NetworkMode::Public, &[], &[p]);
    let (_handle, dir) = serve_unix(s.proxy);
    let everywhere = TcpListener::bind("0.0.0.0:0").unwrap();
    let e = hand(&dir, &[(&everywhere, Carry::Proxy)]).unwrap_err();
    assert!(
        matches!(&e, HandoffError::Refused(why) if why.contains("not to loopback")),
        "{e}"
    );
    let local = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = local.local_addr().unwrap();
    let held = hand(&dir, &[(&local, Carry::Proxy)]).unwrap();
    drop(local);
    let answer = exchange(
        TcpStream::connect(addr).unwrap(),
        &format!("GET http://127.0.0.1:{p}/ HTTP/1.1\r\n\r\n"),
    );
    assert!(answer.ends_with("hello"), "{answer}");
    assert_eq!(next(&s.events).verdict, EgressVerdict::Allow);
    drop(held);
    assert!(refused_soon(addr), "the handed listener still accepts");
}

/// Stopping the proxy ends the open connections of handed listeners (each reported) and
/// closes the listeners.
#[cfg(target_os = "linux")]
#[test]
fn stopping_the_proxy_ends_what_handed_listeners_carry() {
    use sandboxer::network::handoff::Carry;
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let p = server.local_addr().unwrap().port();
    let s = setup(NetworkMode::Public, &[], &[p]);
    let (handle, dir) = serve_unix(s.proxy);
    let port = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = port.local_addr().unwrap();
    let _held = hand(&dir, &[(&port, Carry::Loopback(p))]).unwrap();
    drop(port);
    let mut tunnel = TcpStream::connect(addr).unwrap();
    tunnel
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let (mut host, _) = server.accept().unwrap();
    tunnel.write_all(b"ping").unwrap();
    let mut ping = [0u8; 4];
    host.read_exact(&mut ping).unwrap();
    drop(handle);
    let mut rest = Vec::new();
    let _ = tunnel.read_to_end(&mut rest);
    assert!(rest.is_empty());
    let e = next(&s.events);
    assert_eq!(
        (e.verdict, e.bytes_up, e.port),
        (EgressVerdict::Allow, 4, Some(p))
    );
    assert!(refused_soon(addr), "the handed listener still accepts");
}
