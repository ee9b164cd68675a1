//! The loopback HTTP/1.1 of the scripted model: one request per connection, a body by
//! `Content-Length` or chunked (the CLIs' requests run to hundreds of kilobytes, past what
//! the dispatcher server's API reader accepts), the whole answer sent with its length and the
//! connection closed.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A CLI's request, at most (its system prompt, tools and a long conversation).
const MAX_BODY_BYTES: usize = 32 << 20;
const MAX_HEADER_LINES: usize = 200;
/// A client must send within this time between reads.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub struct Request {
    pub method: String,
    /// Without the query.
    pub path: String,
    pub body: Vec<u8>,
}

/// Why a request is answered with an error status.
#[derive(Debug)]
pub struct Refused {
    pub status: u16,
    pub message: String,
}

fn refused(status: u16, message: impl Into<String>) -> Refused {
    Refused {
        status,
        message: message.into(),
    }
}

/// Reads one request; `Ok(None)` when the client closed before sending one.
pub fn read_request(stream: &TcpStream) -> Result<Option<Request>, Refused> {
    let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    let io = |e: io::Error| refused(400, format!("reading the request: {e}"));
    if reader.read_line(&mut line).map_err(io)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Err(refused(400, "malformed request line"));
    };
    let (method, path) = (
        method.to_string(),
        target.split('?').next().unwrap_or_default().to_string(),
    );
    let (mut length, mut chunked, mut encoded) = (0usize, false, None);
    for _ in 0..MAX_HEADER_LINES {
        line.clear();
        reader.read_line(&mut line).map_err(io)?;
        let header = line.trim_end();
        if header.is_empty() {
            let body = match (chunked, encoded) {
                (_, Some(encoding)) => {
                    return Err(refused(
                        415,
                        format!("Content-Encoding {encoding} is not supported: send plain JSON"),
                    ));
                }
                (true, None) => read_chunked(&mut reader)?,
                (false, None) => read_exact(&mut reader, length)?,
            };
            return Ok(Some(Request { method, path, body }));
        }
        let Some((name, value)) = header.split_once(':') else {
            return Err(refused(400, format!("malformed header line {header:?}")));
        };
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => {
                length = value
                    .parse()
                    .map_err(|_| refused(400, format!("Content-Length {value:?}")))?;
            }
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            "content-encoding" if !value.eq_ignore_ascii_case("identity") => {
                encoded = Some(value.to_string());
            }
            _ => {}
        }
    }
    Err(refused(431, "too many header lines"))
}

fn read_exact(reader: &mut impl Read, length: usize) -> Result<Vec<u8>, Refused> {
    if length > MAX_BODY_BYTES {
        return Err(refused(413, format!("a body over {MAX_BODY_BYTES} bytes")));
    }
    let mut body = vec![0; length];
    reader
        .read_exact(&mut body)
        .map_err(|e| refused(400, format!("reading the body: {e}")))?;
    Ok(body)
}

fn read_chunked(reader: &mut impl BufRead) -> Result<Vec<u8>, Refused> {
    let mut body = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        reader
            .read_line(&mut line)
            .map_err(|e| refused(400, format!("reading a chunk: {e}")))?;
        let size = line.trim().split(';').next().unwrap_or_default();
        let size = usize::from_str_radix(size, 16)
            .map_err(|_| refused(400, format!("malformed chunk size {size:?}")))?;
        if body.len() + size > MAX_BODY_BYTES {
            return Err(refused(413, format!("a body over {MAX_BODY_BYTES} bytes")));
        }
        body.extend(read_exact(reader, size)?);
        // The CRLF after the chunk, or the (empty) trailer after the last one.
        line.clear();
        let _ = reader.read_line(&mut line);
        if size == 0 {
            return Ok(body);
        }
    }
}

/// Sends a whole response and closes the connection.
pub fn respond(mut stream: &TcpStream, status: u16, content_type: &str, body: &[u8]) {
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        431 => "Request Header Fields Too Large",
        _ => "Bad Request",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
    let _ = stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body))
        .and_then(|()| stream.flush());
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn roundtrip(raw: &'static [u8]) -> Result<Option<Request>, Refused> {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client = std::thread::spawn(move || {
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(raw).unwrap();
            c
        });
        let (s, _) = listener.accept().unwrap();
        let out = read_request(&s);
        drop(client.join().unwrap());
        out
    }

    #[test]
    fn reads_a_chunked_body_and_a_sized_one() {
        let r = roundtrip(b"POST /v1/messages?beta=true HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4\r\n\":1}\r\n0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            (r.path.as_str(), r.body.as_slice()),
            ("/v1/messages", &b"{\"a\":1}"[..])
        );
        let r = roundtrip(b"POST /x HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}")
            .unwrap()
            .unwrap();
        assert_eq!(r.body, b"{}");
    }

    #[test]
    fn refuses_a_compressed_body_by_name() {
        let e =
            roundtrip(b"POST /x HTTP/1.1\r\nContent-Encoding: zstd\r\nContent-Length: 0\r\n\r\n")
                .unwrap_err();
        assert_eq!(e.status, 415);
        assert!(e.message.contains("zstd"));
    }
}
