//! A chat's event log: `<state-root>/state/events/<chat>.jsonl`, one JSON object per line,
//! appended with `O_APPEND` and flushed to disk before `append` returns, so an event that was
//! reported as recorded survives a crash. A torn last line (a crash mid-write) is skipped
//! when reading, never misread.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::ids::ChatId;
use crate::launch::Launch;
use crate::state::{StateError, StateRoot};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Milliseconds since the Unix epoch.
    pub ts_ms: u64,
    pub chat: ChatId,
    #[serde(flatten)]
    pub kind: EventKind,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    Started {
        cli: String,
        mode: String,
        reason: String,
        confined: bool,
        argv: Vec<String>,
    },
    Exited {
        code: u8,
    },
    Bridge {
        call: serde_json::Value,
    },
    /// `dispatcher serve`'s launch journal: the intent to launch, recorded before anything
    /// starts. Every later event of that launch follows it in the same log; the launch ends
    /// with exactly one of `exited`, `lost` or `launch_failed`.
    Launching {
        launch: String,
        cli: String,
        workflow: String,
        supervision: String,
    },
    /// The launch did not start, or was rolled back: nothing of it runs.
    LaunchFailed {
        launch: String,
        error: String,
    },
    /// A restarted server found the chat still running and took it over (bridge served again).
    Adopted {
        launch: String,
        pid: Option<i32>,
        tmux_session: Option<String>,
    },
    /// The chat ended while no server watched it, or was stopped without a status to report:
    /// its exit status is unknown.
    Lost {
        launch: String,
        reason: String,
    },
    /// A stop was asked for; the chat's `exited` or `lost` follows.
    StopRequested {
        launch: String,
    },
    /// Output of a structured (headless) chat: `bytes` bytes of the stream from byte
    /// `offset` on, as `text` (lossy UTF-8).
    Output {
        stream: String,
        offset: u64,
        bytes: u64,
        text: String,
    },
    /// A Mac's sandbox refused an operation of the chat's processes (`crate::denials`): what
    /// Seatbelt wrote to the unified log, each distinct denial once.
    SandboxDenial {
        process: String,
        pid: Option<u32>,
        operation: String,
        target: String,
    },
    /// More distinct denials than are recorded per launch: how many were not.
    SandboxDenialsDropped {
        count: u64,
    },
    /// A connection through the chat's egress proxy: the host asked for, the verdict, the
    /// bytes each way (`crate::egress`).
    Egress(crate::egress::EgressEvent),
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Event {
    /// An event of `chat` stamped now.
    pub fn new(chat: &ChatId, kind: EventKind) -> Event {
        Event {
            ts_ms: now_ms(),
            chat: chat.clone(),
            kind,
        }
    }

    pub fn started(l: &Launch) -> Event {
        Event {
            ts_ms: now_ms(),
            chat: l.chat.clone(),
            kind: EventKind::Started {
                cli: l.cli.clone(),
                mode: l.mode.mode.to_string(),
                reason: l.mode.reason.clone(),
                confined: l.confined,
                argv: l.argv.clone(),
            },
        }
    }

    pub fn exited(l: &Launch, code: u8) -> Event {
        Event {
            ts_ms: now_ms(),
            chat: l.chat.clone(),
            kind: EventKind::Exited { code },
        }
    }

    pub fn bridge(chat: &ChatId, call: &impl Serialize) -> Event {
        Event {
            ts_ms: now_ms(),
            chat: chat.clone(),
            kind: EventKind::Bridge {
                call: serde_json::to_value(call).unwrap_or(serde_json::Value::Null),
            },
        }
    }
}

/// An open event log; clones share one file handle and one lock, so lines never interleave.
#[derive(Debug, Clone)]
pub struct EventLog {
    path: PathBuf,
    file: Arc<Mutex<File>>,
    /// Set when [`EventLog::append_unsynced`] wrote something not yet flushed to disk.
    unsynced: Arc<AtomicBool>,
}

impl EventLog {
    pub fn open(state: &StateRoot, chat: &ChatId) -> Result<EventLog, StateError> {
        let path = state.events(chat);
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .map_err(|source| StateError::Io {
                path: path.clone(),
                what: "cannot open the event log",
                source,
            })?;
        // A crash mid-append can leave a torn last line; end it, so the next event starts on a
        // line of its own instead of being glued to the fragment (and skipped with it).
        terminate_torn_line(&file).map_err(|source| StateError::Io {
            path: path.clone(),
            what: "cannot repair the event log's last line",
            source,
        })?;
        Ok(EventLog {
            path,
            file: Arc::new(Mutex::new(file)),
            unsynced: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Appends one event and flushes it to disk.
    pub fn append(&self, event: &Event) -> Result<(), StateError> {
        let mut line = serde_json::to_vec(event).expect("events serialize");
        line.push(b'\n');
        let file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        (&*file)
            .write_all(&line)
            .and_then(|()| file.sync_data())
            .map_err(|source| StateError::Io {
                path: self.path.clone(),
                what: "cannot append to the event log",
                source,
            })
    }

    /// Appends one event without waiting for the disk: once this returns the kernel has the
    /// line, so it survives the dispatcher being killed, but a power loss may take the last
    /// moments of such events with it until [`EventLog::sync`] (or any [`EventLog::append`])
    /// flushes them. For events at the rate of bridge calls, whose own effects (a written
    /// file) are not flushed either.
    pub fn append_unsynced(&self, event: &Event) -> Result<(), StateError> {
        let mut line = serde_json::to_vec(event).expect("events serialize");
        line.push(b'\n');
        let file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        (&*file).write_all(&line).map_err(|source| StateError::Io {
            path: self.path.clone(),
            what: "cannot append to the event log",
            source,
        })?;
        self.unsynced.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Flushes what [`EventLog::append_unsynced`] wrote, if anything.
    pub fn sync(&self) -> Result<(), StateError> {
        if !self.unsynced.swap(false, Ordering::SeqCst) {
            return Ok(());
        }
        let file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        file.sync_data().map_err(|source| {
            self.unsynced.store(true, Ordering::SeqCst);
            StateError::Io {
                path: self.path.clone(),
                what: "cannot flush the event log",
                source,
            }
        })
    }

    /// Every complete event of a chat, oldest first.
    pub fn read(state: &StateRoot, chat: &ChatId) -> Result<Vec<Event>, StateError> {
        let path = state.events(chat);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(StateError::Io {
                    path,
                    what: "cannot read the event log",
                    source,
                });
            }
        };
        let mut out = Vec::new();
        for line in BufReader::new(file).split(b'\n') {
            let line = line.map_err(|source| StateError::Io {
                path: path.clone(),
                what: "cannot read the event log",
                source,
            })?;
            if let Ok(e) = serde_json::from_slice::<Event>(&line) {
                out.push(e);
            }
        }
        Ok(out)
    }
}

fn terminate_torn_line(file: &File) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    let mut last = [0u8; 1];
    file.read_exact_at(&mut last, len - 1)?;
    if last[0] != b'\n' {
        (&*file).write_all(b"\n")?;
        file.sync_data()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::ChatSettings;

    #[test]
    fn appends_survive_and_torn_lines_are_skipped() {
        let d = tempfile::tempdir().unwrap();
        let (s, _) = StateRoot::init(d.path(), None).unwrap();
        let c = ChatId::new("c").unwrap();
        s.add_chat(
            &c,
            &ChatSettings {
                mode: "auto".into(),
            },
        )
        .unwrap();
        let log = EventLog::open(&s, &c).unwrap();
        let ev = Event {
            ts_ms: 1,
            chat: c.clone(),
            kind: EventKind::Exited { code: 3 },
        };
        log.append(&ev).unwrap();
        // Unsynced appends are there at once (the kernel has them); sync flushes them.
        log.append_unsynced(&ev).unwrap();
        assert!(log.unsynced.load(Ordering::SeqCst));
        log.sync().unwrap();
        assert!(!log.unsynced.load(Ordering::SeqCst));
        std::fs::OpenOptions::new()
            .append(true)
            .open(s.events(&c))
            .unwrap()
            .write_all(b"{\"ts_ms\":2,\"chat\":\"c\",\"ev")
            .unwrap();
        assert_eq!(
            EventLog::read(&s, &c).unwrap(),
            vec![ev.clone(), ev.clone()]
        );
        // Reopened after the crash, the next event is not glued to the torn fragment.
        let log = EventLog::open(&s, &c).unwrap();
        log.append(&ev).unwrap();
        assert_eq!(
            EventLog::read(&s, &c).unwrap(),
            vec![ev.clone(), ev.clone(), ev]
        );
    }
}
