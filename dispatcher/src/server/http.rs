//! A small HTTP/1.1 server side on `std::net`: exactly what the API needs and nothing more.
//!
//! One request per connection (`Connection: close`), bodies only with `Content-Length`
//! (no chunked encoding), strict limits on the header section, the body and the time a
//! client may take. Anything outside that is refused with the matching status before any
//! handler runs, so a handler only ever sees a complete, bounded request.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The request line and headers together, at most.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// At most this many header lines.
pub const MAX_HEADERS: usize = 64;
/// A request body, at most (a launch request is a few hundred bytes).
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// A client must send its whole request within this time.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// A client must take the response within this time.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub struct Request {
    pub method: String,
    /// The path, without the query.
    pub path: String,
    pub query: Option<String>,
    /// Header names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// Every value of a header (name in lower case).
    pub fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// `?key=value` from the query (no percent-decoding: the API's values are plain).
    pub fn query_param(&self, key: &str) -> Option<&str> {
        self.query.as_deref()?.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k == key).then_some(v)
        })
    }
}

/// A JSON response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: Value,
    /// Extra headers (e.g. `Allow` on 405, `WWW-Authenticate` on 401).
    pub headers: Vec<(&'static str, String)>,
}

impl Response {
    pub fn json(status: u16, body: Value) -> Response {
        Response {
            status,
            body,
            headers: Vec::new(),
        }
    }

    /// `{"error": {"code": …, "message": …}}`.
    pub fn error(status: u16, code: &str, message: impl Into<String>) -> Response {
        Response::json(
            status,
            serde_json::json!({ "error": { "code": code, "message": message.into() } }),
        )
    }

    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Response {
        self.headers.push((name, value.into()));
        self
    }
}

pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Content",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// Reads one request, or the response that refuses it (`Err(Some)`), or nothing to answer
/// (`Err(None)`: the client went away without a request).
pub fn read_request(stream: &mut TcpStream) -> Result<Request, Option<Response>> {
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    let mut buf = Vec::with_capacity(1024);
    let header_end = loop {
        if let Some(i) = find_header_end(&buf) {
            break i;
        }
        if buf.len() >= MAX_HEADER_BYTES {
            return Err(Some(Response::error(
                431,
                "headers_too_large",
                format!("the request line and headers exceed {MAX_HEADER_BYTES} bytes"),
            )));
        }
        let mut chunk = [0u8; 4096];
        let want = chunk.len().min(MAX_HEADER_BYTES + 4 - buf.len());
        match read_some(stream, &mut chunk[..want], deadline) {
            Ok(0) if buf.is_empty() => return Err(None),
            Ok(0) => return Err(Some(bad("the request ended inside its headers"))),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if is_timeout(&e) => return Err(Some(timeout())),
            Err(_) => return Err(None),
        }
    };
    let head = std::str::from_utf8(&buf[..header_end])
        .map_err(|_| Some(bad("the request line and headers must be ASCII")))?;
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Some(bad("malformed request line")));
    };
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(Some(Response::error(
            505,
            "http_version",
            format!("{version:?} is not supported; use HTTP/1.1"),
        )));
    }
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(Some(bad("malformed method")));
    }
    if !target.starts_with('/') || !target.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Some(bad("the request target must be an absolute path")));
    }
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_string(), Some(q.to_string())),
        None => (target.to_string(), None),
    };
    let mut headers = Vec::new();
    for line in lines {
        if headers.len() >= MAX_HEADERS {
            return Err(Some(Response::error(
                431,
                "headers_too_large",
                format!("more than {MAX_HEADERS} header lines"),
            )));
        }
        if line.starts_with([' ', '\t']) {
            return Err(Some(bad("folded header lines are not accepted")));
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(Some(bad(format!("malformed header line {line:?}"))));
        };
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty() || !name.bytes().all(token) {
            return Err(Some(bad(format!("malformed header name {name:?}"))));
        }
        let value = value.trim_matches([' ', '\t']);
        if value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
            return Err(Some(bad("control characters in a header value")));
        }
        headers.push((name.to_ascii_lowercase(), value.to_string()));
    }
    let mut req = Request {
        method: method.to_string(),
        path,
        query,
        headers,
        body: Vec::new(),
    };
    if req.header_values("transfer-encoding").next().is_some() {
        return Err(Some(Response::error(
            411,
            "length_required",
            "send the body with Content-Length (no Transfer-Encoding)",
        )));
    }
    let lengths: Vec<&str> = req.header_values("content-length").collect();
    let length = match lengths.as_slice() {
        [] => 0,
        [one] => one
            .parse::<usize>()
            .ok()
            .filter(|_| one.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| Some(bad(format!("Content-Length {one:?} is not a number"))))?,
        _ => return Err(Some(bad("more than one Content-Length"))),
    };
    if length > MAX_BODY_BYTES {
        return Err(Some(Response::error(
            413,
            "body_too_large",
            format!("the body is {length} bytes; at most {MAX_BODY_BYTES} are accepted"),
        )));
    }
    let mut body = buf[header_end + 4..].to_vec();
    if body.len() > length {
        return Err(Some(bad(
            "more bytes than Content-Length (one request per connection)",
        )));
    }
    body.reserve_exact(length - body.len());
    while body.len() < length {
        let mut chunk = [0u8; 4096];
        let want = chunk.len().min(length - body.len());
        match read_some(stream, &mut chunk[..want], deadline) {
            Ok(0) => return Err(Some(bad("the body is shorter than Content-Length"))),
            Ok(n) => body.extend_from_slice(&chunk[..n]),
            Err(e) if is_timeout(&e) => return Err(Some(timeout())),
            Err(_) => return Err(None),
        }
    }
    req.body = body;
    Ok(req)
}

fn bad(message: impl Into<String>) -> Response {
    Response::error(400, "bad_request", message)
}

fn timeout() -> Response {
    Response::error(
        408,
        "request_timeout",
        format!(
            "the request was not complete within {} s",
            REQUEST_TIMEOUT.as_secs()
        ),
    )
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn find_header_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n")
}

/// One read that returns by the deadline.
fn read_some(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> io::Result<usize> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Writes the response and closes the connection. When the request was not read to its end
/// (a refused body), what the client still sends is read and dropped for a moment, so that
/// closing does not reset the connection before the client has read the answer.
pub fn write_response(stream: &mut TcpStream, resp: &Response, drain: bool) {
    let mut body = serde_json::to_vec_pretty(&resp.body).unwrap_or_else(|_| b"{}".to_vec());
    body.push(b'\n');
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\nCache-Control: no-store\r\n",
        resp.status,
        reason(resp.status),
        body.len()
    );
    for (name, value) in &resp.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let mut out = head.into_bytes();
    out.extend_from_slice(&body);
    if stream
        .write_all(&out)
        .and_then(|()| stream.flush())
        .is_err()
    {
        return;
    }
    let _ = stream.shutdown(std::net::Shutdown::Write);
    if drain {
        let deadline = Instant::now() + Duration::from_millis(500);
        let mut sink = [0u8; 8192];
        let mut left = 1usize << 20;
        while left > 0 {
            match read_some(stream, &mut sink, deadline) {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn roundtrip(raw: &[u8]) -> Result<Request, Option<u16>> {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let raw = raw.to_vec();
        let t = std::thread::spawn(move || {
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(&raw).unwrap();
            c.shutdown(std::net::Shutdown::Write).unwrap();
            c
        });
        let (mut s, _) = listener.accept().unwrap();
        let out = read_request(&mut s).map_err(|r| r.map(|r| r.status));
        drop(t.join().unwrap());
        out
    }

    #[test]
    fn parses_a_request_with_a_body() {
        let r = roundtrip(b"POST /v1/x?after=3 HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}")
            .unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/v1/x"));
        assert_eq!(r.query_param("after"), Some("3"));
        assert_eq!(r.body, b"{}");
        assert_eq!(r.header_values("host").collect::<Vec<_>>(), vec!["a"]);
    }

    #[test]
    fn refuses_what_it_does_not_speak() {
        let cases: &[(&[u8], u16)] = &[
            (b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411),
            (b"GET / HTTP/2.0\r\n\r\n", 505),
            (b"GET  / HTTP/1.1\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\n folded\r\n\r\n", 400),
            (
                b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
                400,
            ),
            (b"GET / HTTP/1.1\r\nContent-Length: +1\r\n\r\nx", 400),
            (b"POST / HTTP/1.1\r\nContent-Length: 999999\r\n\r\n", 413),
            (b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nab", 400),
            (b"GET x HTTP/1.1\r\n\r\n", 400),
        ];
        for (raw, status) in cases {
            assert_eq!(
                roundtrip(raw).unwrap_err(),
                Some(*status),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
        let mut huge = b"GET / HTTP/1.1\r\nX: ".to_vec();
        huge.extend(std::iter::repeat_n(b'a', MAX_HEADER_BYTES));
        huge.extend_from_slice(b"\r\n\r\n");
        assert_eq!(roundtrip(&huge).unwrap_err(), Some(431));
        assert_eq!(roundtrip(b"").unwrap_err(), None);
    }
}
