//! One client connection: read the head (or take the tunnel a loopback port stands for), ask
//! the rules, connect to a checked address, answer, relay, report.

use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

use sandboxer::network::{Egress, Host};

use super::Shared;
use super::event::{EgressEvent, EgressVerdict};
use super::head::{self, Destination, Head};
use super::listener::Stream;
use super::relay::relay;

/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one address may take to accept the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a client asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// What its request head says: it speaks to the proxy.
    Http,
    /// The tunnel `CONNECT 127.0.0.1:PORT` would open: a client of a sandbox's loopback port,
    /// which speaks to the host itself. It gets no answer from the proxy: refused, it is
    /// closed.
    Loopback(u16),
}

/// Serves one client to the end, and reports what became of it. `read` is what was read of
/// the client already.
pub fn serve<S: Stream>(mut client: S, id: u64, shared: &Shared, ask: Ask, read: Vec<u8>) {
    let event = handle(&mut client, id, shared, ask, read);
    (shared.sink)(event);
}

/// Reports a client whose first bytes could not be read, and tells it.
pub fn unread<S: Stream>(mut client: S, shared: &Shared, e: &std::io::Error) {
    let why = format!("cannot read the request: {e}");
    let event = refuse(&mut client, Some(400), event("", "", None), &why);
    (shared.sink)(event);
}

fn handle<S: Stream>(
    client: &mut S,
    id: u64,
    shared: &Shared,
    ask: Ask,
    read: Vec<u8>,
) -> EgressEvent {
    // A loopback port's client is told nothing: it does not speak to the proxy.
    let status = |code: u16| (ask == Ask::Http).then_some(code);
    let (head, destination, mut report) = match ask {
        Ask::Http => {
            let _ = client.set_read_timeout(Some(HEAD_TIMEOUT));
            let head = match head::read_after(client, read) {
                Ok(head) => head,
                Err(e) => return refuse(client, status(400), event("", "", None), &e.to_string()),
            };
            let report = event(&head.method, &quoted(&head.target), None);
            match head.destination() {
                Ok(d) => (head, d, report),
                Err(e) => return refuse(client, status(400), report, &e.to_string()),
            }
        }
        Ask::Loopback(port) => {
            let host = Host::Ip(std::net::Ipv4Addr::LOCALHOST.into());
            let head = Head::tunnel(&host, port);
            let report = event(&head.method, &quoted(&head.target), None);
            (head, Destination::Tunnel { host, port }, report)
        }
    };
    let (host, port) = destination.host_port();
    report.host = host.to_string();
    report.port = Some(port);

    let own = match shared.own_addresses() {
        Ok(own) => own,
        Err(e) => {
            let why = format!("cannot read this machine's addresses: {e}");
            return refuse(client, status(403), report, &why);
        }
    };
    let (to, allowed) = match shared
        .rules
        .decide(host, port, &own, |name, port| (shared.resolve)(name, port))
    {
        Egress::Allow { to, reason } => (to, reason),
        Egress::Refuse(refused) => {
            return refuse(client, status(403), report, &refused.to_string());
        }
    };
    report.reason = allowed.to_string();

    let Some((upstream, address)) = connect(&to, port) else {
        report.verdict = EgressVerdict::Fail;
        let why = format!("no address of {} answered on port {port}", report.host);
        if let Some(code) = status(502) {
            let _ = answer(client, code, &why);
        }
        report.reason = why;
        return report;
    };
    report.address = Some(address);
    match upstream.try_clone() {
        Ok(socket) => shared.track(id, socket),
        Err(e) => {
            report.verdict = EgressVerdict::Fail;
            report.reason = format!("cannot keep the connection to stop it later: {e}");
            return report;
        }
    }
    let _ = client.set_read_timeout(None);
    match start(client, &head, &destination, &upstream, ask) {
        Ok(up) => report.bytes_up += up,
        Err(e) => {
            report.verdict = EgressVerdict::Fail;
            report.reason = format!("cannot start the exchange: {e}");
            return report;
        }
    }
    let relayed = relay(client, upstream, &shared.pool).unwrap_or_default();
    report.bytes_up += relayed.up;
    report.bytes_down += relayed.down;
    report
}

/// Tells the client the tunnel is open, or sends the host the forwarded head; then whatever
/// the client sent past its head. Returns the bytes sent to the host.
fn start<S: Stream>(
    client: &mut S,
    head: &Head,
    destination: &Destination,
    mut upstream: &TcpStream,
    ask: Ask,
) -> io::Result<u64> {
    let mut sent = 0;
    match destination {
        Destination::Tunnel { .. } if ask != Ask::Http => {}
        Destination::Tunnel { .. } => {
            client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")?;
        }
        Destination::Plain { host, port, path } => {
            let forwarded = head.forwarded(host, *port, path);
            upstream.write_all(&forwarded)?;
            sent += forwarded.len() as u64;
        }
    }
    upstream.write_all(&head.rest)?;
    Ok(sent + head.rest.len() as u64)
}

/// Connects to the first of `to` that answers: only checked addresses, never a new lookup.
fn connect(to: &[IpAddr], port: u16) -> Option<(TcpStream, SocketAddr)> {
    to.iter().find_map(|&ip| {
        let address = SocketAddr::new(ip, port);
        TcpStream::connect_timeout(&address, CONNECT_TIMEOUT)
            .ok()
            .map(|s| (s, address))
    })
}

fn event(method: &str, host: &str, port: Option<u16>) -> EgressEvent {
    EgressEvent {
        method: method.into(),
        host: host.into(),
        port,
        verdict: EgressVerdict::Allow,
        reason: String::new(),
        address: None,
        bytes_up: 0,
        bytes_down: 0,
    }
}

/// A target that did not parse, as it can be shown: quoted, cut at 200 characters.
fn quoted(target: &str) -> String {
    format!("{:?}", target.chars().take(200).collect::<String>())
}

/// Refuses: the client gets `status` (when it speaks to the proxy), the report the reason.
fn refuse<S: Stream>(
    client: &mut S,
    status: Option<u16>,
    mut report: EgressEvent,
    why: &str,
) -> EgressEvent {
    if let Some(status) = status {
        let _ = answer(client, status, why);
    }
    report.verdict = EgressVerdict::Refuse;
    report.reason = why.into();
    report
}

/// A short plain-text answer that closes the connection.
fn answer<S: Stream>(client: &mut S, status: u16, why: &str) -> io::Result<()> {
    let phrase = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        _ => "Bad Gateway",
    };
    let body = format!("{why}\n");
    write!(
        client,
        "HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    client.flush()
}
