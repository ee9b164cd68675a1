//! The way back from the sandbox's processes to the caller: one close-on-exec pipe.
//!
//! The read end stays with the caller. Every process of the sandbox inherits the write end
//! until it executes the command (close-on-exec), so a step that fails after `fork` reports
//! exactly which layer failed and why, and PID 1 reports how the command ended (a status
//! cannot carry "killed by signal N" through an init, which the kernel never lets die of a
//! signal it sends itself). Messages are JSON lines shorter than `PIPE_BUF`, so each write is
//! atomic even when two processes report at once.

use std::io::Read;
use std::os::fd::OwnedFd;

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use serde::{Deserialize, Serialize};

use super::error::{EnforceError, Layer, Outcome};
use super::placeholders::MadeLater;

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum Message {
    Failed(EnforceError),
    Finished(Outcome),
    /// The guard watcher made a placeholder while the sandbox ran: the caller removes it.
    Placeholder(MadeLater),
}

/// Room for the message envelope around an error's detail, within `PIPE_BUF` (4096).
const MAX_DETAIL: usize = 3500;

pub(super) struct Channel {
    read: OwnedFd,
    write: OwnedFd,
}

/// The write end, as seen by a child process.
#[derive(Clone, Copy)]
pub(super) struct Reporter<'a> {
    fd: &'a OwnedFd,
}

/// What the sandbox's processes said, read after they are gone.
#[derive(Debug, Default)]
pub(super) struct Reports {
    /// The first failure reported (later ones are consequences of it).
    pub failure: Option<EnforceError>,
    pub finished: Option<Outcome>,
    /// Placeholders made while the sandbox ran, for the caller to remove.
    pub placeholders: Vec<MadeLater>,
}

impl Channel {
    pub fn new() -> Result<Channel, EnforceError> {
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)
            .map_err(|e| EnforceError::os(Layer::Process, "creating the report pipe", e))?;
        Ok(Channel { read, write })
    }

    pub fn reporter(&self) -> Reporter<'_> {
        Reporter { fd: &self.write }
    }

    /// Parent side after `fork`: keep only the read end, so that reading ends when every
    /// child has exited or executed.
    pub fn into_reader(self) -> OwnedFd {
        drop(self.write);
        self.read
    }
}

impl Reporter<'_> {
    pub fn send(&self, message: &Message) {
        let mut message = match message {
            Message::Failed(e) if e.detail.len() > MAX_DETAIL => {
                let mut cut = MAX_DETAIL;
                while !e.detail.is_char_boundary(cut) {
                    cut -= 1;
                }
                let mut e = e.clone();
                e.detail.truncate(cut);
                e.detail.push('…');
                serde_json::to_vec(&Message::Failed(e))
            }
            m => serde_json::to_vec(m),
        }
        .unwrap_or_else(|_| b"{}".to_vec());
        message.push(b'\n');
        // A short write or an error cannot be reported anywhere else; the caller still sees the
        // process exit with 125 and says so.
        let _ = nix::unistd::write(self.fd, &message);
    }
}

/// Reads every report. Called once the last child has exited, so all writers are gone or have
/// executed; the descriptor is made non-blocking anyway, so that a writer that somehow
/// survived can never hang the caller.
pub(super) fn read_reports(read: OwnedFd) -> Reports {
    let mut reports = Reports::default();
    let Ok(flags) = fcntl(&read, FcntlArg::F_GETFL) else {
        return reports;
    };
    let nonblocking = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
    if fcntl(&read, FcntlArg::F_SETFL(nonblocking)).is_err() {
        return reports;
    }
    let mut file = std::fs::File::from(read);
    let mut text = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => text.extend_from_slice(&chunk[..n]),
            Err(e) if e.raw_os_error() == Some(Errno::EINTR as i32) => continue,
            Err(_) => break,
        }
    }
    for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        match serde_json::from_slice::<Message>(line) {
            Ok(Message::Failed(e)) => {
                reports.failure.get_or_insert(e);
            }
            Ok(Message::Finished(o)) => reports.finished = Some(o),
            Ok(Message::Placeholder(m)) => reports.placeholders.push(m),
            Err(_) => {
                reports.failure.get_or_insert(EnforceError::new(
                    Layer::Process,
                    format!(
                        "unreadable report from a sandbox process: {:?}",
                        String::from_utf8_lossy(line)
                    ),
                ));
            }
        }
    }
    reports
}
