//! Relaying a connection both ways until both sides are done, counting the bytes.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::thread;

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
            let n = copy(&mut client_in, &mut host_out);
            let _ = host_out.shutdown(Shutdown::Write);
            n
        })?;
    let (mut host_in, mut client_out) = (host, client);
    let down = copy(&mut host_in, &mut client_out);
    let _ = client_out.shutdown(Shutdown::Write);
    // The client may keep its side open after the reply: the host's end ends the exchange.
    let _ = client_out.shutdown(Shutdown::Read);
    let up = up.join().unwrap_or(0);
    Ok(Counts { up, down })
}

/// What one read may take. Under 128 KiB, so that the allocator does not map and unmap it
/// per connection (docs/network.md, "Cost").
const COPY_BUFFER: usize = 64 * 1024;

/// Copies until the end or an error, and says how much went through either way.
fn copy(from: &mut impl Read, to: &mut impl Write) -> u64 {
    let mut buf = vec![0u8; COPY_BUFFER];
    let mut total = 0;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return total,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return total,
        };
        if to.write_all(&buf[..n]).is_err() {
            return total;
        }
        total += n as u64;
    }
}
