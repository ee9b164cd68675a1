//! A structured chat's output file, turned into `output` events as it grows.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::warn;
use crate::events::{Event, EventKind, EventLog};
use crate::ids::ChatId;

/// One output event holds at most this many bytes.
const OUTPUT_CHUNK: usize = 64 * 1024;

/// A structured chat's output file, turned into `output` events as it grows.
pub(super) struct Tail {
    stream: &'static str,
    file: File,
    /// Bytes already recorded as events.
    offset: u64,
    /// Bytes read but not yet recorded (an unfinished line).
    pending: Vec<u8>,
}

impl Tail {
    pub(super) fn new(stream: &'static str, path: &Path, offset: u64) -> std::io::Result<Tail> {
        Ok(Tail {
            stream,
            file: File::open(path)?,
            offset,
            pending: Vec::new(),
        })
    }

    /// Records what is new: whole lines (at most [`OUTPUT_CHUNK`] bytes per event), and with
    /// `last` everything that is left.
    pub(super) fn pump(&mut self, events: &EventLog, chat: &ChatId, last: bool) {
        let mut buf = vec![0u8; OUTPUT_CHUNK];
        // Bounded per call, so one chatty chat cannot hold the monitor.
        for _ in 0..16 {
            let at = self.offset + self.pending.len() as u64;
            match self.file.read_at(&mut buf, at) {
                Ok(0) | Err(_) => break,
                Ok(n) => self.pending.extend_from_slice(&buf[..n]),
            }
            if !self.emit(events, chat, false) {
                return;
            }
        }
        self.emit(events, chat, last);
    }

    /// Returns false when an event could not be recorded (retried next time).
    fn emit(&mut self, events: &EventLog, chat: &ChatId, all: bool) -> bool {
        loop {
            let cut = match self.pending.iter().rposition(|&b| b == b'\n') {
                _ if self.pending.is_empty() => return true,
                Some(i) => (i + 1).min(OUTPUT_CHUNK),
                None if self.pending.len() >= OUTPUT_CHUNK || all => {
                    self.pending.len().min(OUTPUT_CHUNK)
                }
                None => return true,
            };
            // Never split a UTF-8 character when a line is cut by size.
            let cut = match std::str::from_utf8(&self.pending[..cut]) {
                Ok(_) => cut,
                Err(e) if e.valid_up_to() > 0 && e.error_len().is_none() => e.valid_up_to(),
                Err(_) => cut,
            };
            let chunk: Vec<u8> = self.pending[..cut].to_vec();
            let ev = Event::new(
                chat,
                EventKind::Output {
                    stream: self.stream.into(),
                    offset: self.offset,
                    bytes: chunk.len() as u64,
                    text: String::from_utf8_lossy(&chunk).into_owned(),
                },
            );
            if let Err(e) = events.append(&ev) {
                warn(format!("chat {chat}: output not recorded: {e}"));
                return false;
            }
            self.offset += chunk.len() as u64;
            self.pending.drain(..cut);
            if !all && !self.pending.contains(&b'\n') && self.pending.len() < OUTPUT_CHUNK {
                return true;
            }
        }
    }
}
