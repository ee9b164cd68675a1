//! Relaying a connection both ways until both sides are done, counting the bytes.

use std::io;
use std::net::{Shutdown, TcpStream};
use std::thread;

use sandboxer::network::copy_stream;

use super::listener::Stream;

/// Bytes sent each way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub up: u64,
    pub down: u64,
}

/// Copies client → host on a thread of its own and host → client on this one. When one side
/// ends, the other is told (a half-close), so a request whose reply follows its end works.
pub fn relay<S: Stream>(client: S, host: TcpStream) -> io::Result<Counts> {
    let (mut client_in, mut host_out) = (client.try_clone()?, host.try_clone()?);
    let up = thread::Builder::new()
        .name("egress-up".into())
        .spawn(move || {
            let n = copy_stream(&mut client_in, &mut host_out);
            let _ = host_out.shutdown(Shutdown::Write);
            n
        })?;
    let (mut host_in, mut client_out) = (host, client);
    let down = copy_stream(&mut host_in, &mut client_out);
    let _ = client_out.shutdown(Shutdown::Write);
    // The client may keep its side open after the reply: the host's end ends the exchange.
    let _ = client_out.shutdown(Shutdown::Read);
    let up = up.join().unwrap_or(0);
    Ok(Counts { up, down })
}
