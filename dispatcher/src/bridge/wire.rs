//! Framing shared by both channels (the MCP client ↔ shim on stdio, the shim ↔ server on the
//! chat's socket): one JSON value per line, UTF-8, `\n`-terminated, at most [`MAX_MESSAGE`]
//! bytes. A longer line is never held in memory: it is skipped to its end and reported, so a
//! hostile or broken peer cannot make us allocate without bound, and the stream stays in step.

use std::io::{self, BufRead, Write};

use serde_json::Value;

/// The most bytes one message may have, newline excluded, in either direction on either
/// channel. Requests carry at most [`super::tools::MAX_WRITE`] bytes of file content and
/// replies at most [`super::tools::MAX_READ`], so real traffic stays well below it.
pub const MAX_MESSAGE: usize = 1 << 20;

/// One read from a framed stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A complete line (without its `\n`) is in the buffer.
    Line,
    /// The line was longer than the limit; it was read to its end and dropped.
    TooLong,
    /// The peer closed the stream. A partial last line without `\n` is dropped: a message
    /// that was not finished is not a message.
    Eof,
}

/// Reads one line into `buf` (cleared first), never holding more than `max` bytes.
pub fn read_frame(reader: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> io::Result<Frame> {
    buf.clear();
    let mut too_long = false;
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            buf.clear();
            return Ok(Frame::Eof);
        }
        let (chunk, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        if !too_long {
            if buf.len() + chunk.len() > max {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(chunk);
            }
        }
        let used = done.unwrap_or(available.len());
        reader.consume(used);
        if done.is_some() {
            return Ok(if too_long {
                Frame::TooLong
            } else {
                Frame::Line
            });
        }
    }
}

/// Writes one message as a line and flushes it.
pub fn write_frame(writer: &mut impl Write, message: &Value) -> io::Result<()> {
    let mut line = serde_json::to_vec(message).map_err(io::Error::other)?;
    line.push(b'\n');
    writer.write_all(&line)?;
    writer.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(input: &[u8], max: usize) -> Vec<(Frame, Vec<u8>)> {
        // A tiny buffer capacity forces lines to span several fill_buf calls.
        let mut r = io::BufReader::with_capacity(3, input);
        let mut out = Vec::new();
        let mut buf = Vec::new();
        loop {
            let f = read_frame(&mut r, &mut buf, max).unwrap();
            let done = f == Frame::Eof;
            out.push((f, buf.clone()));
            if done {
                return out;
            }
        }
    }

    #[test]
    fn lines_split_and_limit() {
        let got = frames(b"ab\n0123456789\ncd\n\nxyz", 5);
        assert_eq!(
            got,
            vec![
                (Frame::Line, b"ab".to_vec()),
                (Frame::TooLong, Vec::new()),
                (Frame::Line, b"cd".to_vec()),
                (Frame::Line, Vec::new()),
                (Frame::Eof, Vec::new()),
            ]
        );
    }

    #[test]
    fn exactly_the_limit_fits() {
        let got = frames(b"12345\n123456\n", 5);
        assert_eq!(got[0], (Frame::Line, b"12345".to_vec()));
        assert_eq!(got[1].0, Frame::TooLong);
    }
}
