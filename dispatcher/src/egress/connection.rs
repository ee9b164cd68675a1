//! One client connection: read the head, ask the rules, connect to a checked address, answer,
//! relay, report.

use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

use sandboxer::network::{Egress, OwnAddresses};

use super::Shared;
use super::event::{EgressEvent, EgressVerdict};
use super::head::{self, Destination, Head};
use super::listener::Stream;
use super::relay::relay;

/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one address may take to accept the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves one client to the end, and reports what became of it.
pub fn serve<S: Stream>(mut client: S, id: u64, shared: &Shared) {
    let event = handle(&mut client, id, shared);
    (shared.sink)(event);
}

fn handle<S: Stream>(client: &mut S, id: u64, shared: &Shared) -> EgressEvent {
    let _ = client.set_read_timeout(Some(HEAD_TIMEOUT));
    let head = match head::read(client) {
        Ok(head) => head,
        Err(e) => return refuse(client, 400, event("", "", None), &e.to_string()),
    };
    let mut report = event(&head.method, &quoted(&head.target), None);
    let destination = match head.destination() {
        Ok(d) => d,
        Err(e) => return refuse(client, 400, report, &e.to_string()),
    };
    let (host, port) = destination.host_port();
    report.host = host.to_string();
    report.port = Some(port);

    let own = match OwnAddresses::read() {
        Ok(own) => own,
        Err(e) => {
            let why = format!("cannot read this machine's addresses: {e}");
            return refuse(client, 403, report, &why);
        }
    };
    let (to, allowed) = match shared
        .rules
        .decide(host, port, &own, |name, port| (shared.resolve)(name, port))
    {
        Egress::Allow { to, reason } => (to, reason),
        Egress::Refuse(refused) => return refuse(client, 403, report, &refused.to_string()),
    };
    report.reason = allowed.to_string();

    let Some((upstream, address)) = connect(&to, port) else {
        report.verdict = EgressVerdict::Fail;
        let why = format!("no address of {} answered on port {port}", report.host);
        let _ = answer(client, 502, &why);
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
    match start(client, &head, &destination, &upstream) {
        Ok(up) => report.bytes_up += up,
        Err(e) => {
            report.verdict = EgressVerdict::Fail;
            report.reason = format!("cannot start the exchange: {e}");
            return report;
        }
    }
    let relayed = client
        .try_clone()
        .and_then(|c| relay(c, upstream))
        .unwrap_or_default();
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
) -> io::Result<u64> {
    let mut sent = 0;
    match destination {
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

fn refuse<S: Stream>(
    client: &mut S,
    status: u16,
    mut report: EgressEvent,
    why: &str,
) -> EgressEvent {
    let _ = answer(client, status, why);
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
