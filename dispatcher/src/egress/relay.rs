//! Relaying a connection both ways until both sides are done, counting the bytes.

use std::io;
use std::net::{Shutdown, TcpStream};
use std::sync::mpsc;

use sandboxer::network::{copy_stream, relay_both};

use super::listener::Stream;
use super::pool::Pool;

/// Bytes sent each way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub up: u64,
    pub down: u64,
}

/// Relays both ways on this thread (`relay_both`); where the kernel cannot splice these
/// sockets, copies client → host on a thread of `pool` and host → client on this one. When one
/// side ends, the other is told (a half-close), so a request whose reply follows its end
/// works.
pub fn relay<S: Stream>(client: &S, host: TcpStream, pool: &Pool) -> io::Result<Counts> {
    if let Some(carried) = relay_both(client, &host) {
        return Ok(Counts {
            up: carried.up,
            down: carried.down,
        });
    }
    let client = client.try_clone()?;
    let (mut client_in, mut host_out) = (client.try_clone()?, host.try_clone()?);
    let (sent, up) = mpsc::sync_channel(1);
    pool.run(move || {
        let n = copy_stream(&mut client_in, &mut host_out);
        let _ = host_out.shutdown(Shutdown::Write);
        let _ = sent.send(n);
    })?;
    let (mut host_in, mut client_out) = (host, client);
    let down = copy_stream(&mut host_in, &mut client_out);
    let _ = client_out.shutdown(Shutdown::Write);
    // The client may keep its side open after the reply: the host's end ends the exchange.
    let _ = client_out.shutdown(Shutdown::Read);
    let up = up.recv().unwrap_or(0);
    Ok(Counts { up, down })
}
