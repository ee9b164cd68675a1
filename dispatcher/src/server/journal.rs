//! The launch journal: one record per chat (its current or last launch) in
//! `<state-root>/state/server/chats/<chat>.json`, replaced atomically at each step, beside the
//! chat's durable event log. The state root is protected, so no chat can touch either.
//!
//! The steps of a launch, each durable before the next:
//!
//! ```text
//! record launching ─► event launching ─► files, bridge ─► process started ─► event started ─► record running
//!                                         (the process writes its identity file itself)
//! end:   event exited | lost | launch_failed ─► record exited | failed
//! ```
//!
//! The event log is the truth about what happened; the record says what to look for after a
//! crash. Reconciliation (in `supervisor`) reads both.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::events::{Event, EventKind};
use crate::ids::{ChatId, WorkflowId};
use crate::state::{StateError, StateRoot, write_atomic};

pub const RECORD_VERSION: u32 = 1;

/// `<state-root>/state/server/`: the server's own files.
pub fn server_dir(state: &StateRoot) -> PathBuf {
    state.path().join("state/server")
}

pub fn records_dir(state: &StateRoot) -> PathBuf {
    server_dir(state).join("chats")
}

/// Where structured chats' output is captured before it becomes events.
pub fn output_dir(state: &StateRoot) -> PathBuf {
    server_dir(state).join("output")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Launching,
    Running,
    Exited,
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Supervision {
    Tmux,
    Structured,
}

impl Supervision {
    pub fn as_str(self) -> &'static str {
        match self {
            Supervision::Tmux => "tmux",
            Supervision::Structured => "structured",
        }
    }
}

/// How a launch ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ending {
    /// The exit code (128 + N for signal N), when known.
    pub code: Option<u8>,
    /// In words: `exited with status 0`, `lost: …`, `launch failed: …`.
    pub how: String,
}

/// A chat's current or last launch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub version: u32,
    pub chat: ChatId,
    pub launch: String,
    pub phase: Phase,
    pub supervision: Supervision,
    pub cli: String,
    pub workflow: WorkflowId,
    pub attach: Vec<String>,
    pub requested_mode: String,
    pub mode: String,
    pub reason: String,
    pub confined: bool,
    /// The person's home the policy was resolved for.
    pub home: PathBuf,
    /// The launch's policy, as written and enforced: a restarted server serves the chat's
    /// bridge from this copy, never from the runtime (which the chat may write).
    pub policy_text: String,
    pub policy_file: PathBuf,
    /// Structured: the process's identity (`PID START`), once known.
    #[serde(default)]
    pub ident: Option<String>,
    #[serde(default)]
    pub tmux_session: Option<String>,
    pub created_ms: u64,
    #[serde(default)]
    pub ended: Option<Ending>,
}

/// A journal file that is not a readable record of its chat.
#[derive(Debug, thiserror::Error)]
#[error("{}: {why}", .path.display())]
pub struct RecordError {
    pub path: PathBuf,
    pub why: BadRecord,
}

#[derive(Debug, thiserror::Error)]
pub enum BadRecord {
    #[error("{0}")]
    Unreadable(std::io::Error),
    #[error("{0}")]
    NotJson(serde_json::Error),
    #[error("unsupported record version {0}")]
    Version(u32),
    /// The file's name is another chat's.
    #[error("the record is for chat {0}")]
    OtherChat(ChatId),
}

impl Record {
    pub fn path(state: &StateRoot, chat: &ChatId) -> PathBuf {
        records_dir(state).join(format!("{chat}.json"))
    }

    /// The identity file the chat's process writes (structured).
    pub fn ident_file(&self, state: &StateRoot) -> PathBuf {
        records_dir(state).join(format!("{}.{}.ident", self.chat, self.launch))
    }

    pub fn output_file(&self, state: &StateRoot, stream: &str) -> PathBuf {
        output_dir(state).join(format!("{}.{}.{stream}", self.chat, self.launch))
    }

    pub fn save(&self, state: &StateRoot) -> Result<(), StateError> {
        let mut text = serde_json::to_string_pretty(self).expect("records serialize");
        text.push('\n');
        write_atomic(&Record::path(state, &self.chat), text.as_bytes(), 0o600)
    }

    pub fn load(path: &Path) -> Result<Record, RecordError> {
        let bad = |why| RecordError {
            path: path.to_path_buf(),
            why,
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(BadRecord::Unreadable(e)))?;
        let r: Record = serde_json::from_str(&text).map_err(|e| bad(BadRecord::NotJson(e)))?;
        if r.version != RECORD_VERSION {
            return Err(bad(BadRecord::Version(r.version)));
        }
        let expected = format!("{}.json", r.chat);
        if path.file_name().and_then(|n| n.to_str()) != Some(expected.as_str()) {
            return Err(bad(BadRecord::OtherChat(r.chat)));
        }
        Ok(r)
    }

    /// Every record in the journal, and the files that are not readable records.
    pub fn load_all(state: &StateRoot) -> Result<(Vec<Record>, Vec<String>), StateError> {
        let dir = records_dir(state);
        let mut records = Vec::new();
        let mut bad = Vec::new();
        let entries = std::fs::read_dir(&dir).map_err(|source| StateError::Io {
            path: dir.clone(),
            what: "cannot list the launch journal",
            source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| StateError::Io {
                path: dir.clone(),
                what: "cannot list the launch journal",
                source,
            })?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') || !name.ends_with(".json") {
                continue;
            }
            match Record::load(&entry.path()) {
                Ok(r) => records.push(r),
                Err(e) => bad.push(e.to_string()),
            }
        }
        records.sort_by(|a, b| a.chat.cmp(&b.chat));
        Ok((records, bad))
    }
}

/// What a chat's event log says about one launch.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct LaunchHistory {
    /// The launch's `launching` event is in the log.
    pub intent: bool,
    /// `started` follows it.
    pub started: bool,
    /// Its end, if recorded: the ending and whether it was a failure to launch.
    pub ending: Option<(Ending, bool)>,
    /// Bytes of output already recorded, per stream (the next offset to read from).
    pub stdout_done: u64,
    pub stderr_done: u64,
}

/// Reads the part of `events` that belongs to `launch`: from its `launching` event on.
pub fn history(events: &[Event], launch: &str) -> LaunchHistory {
    let Some(start) = events
        .iter()
        .rposition(|e| matches!(&e.kind, EventKind::Launching { launch: l, .. } if l == launch))
    else {
        // Without its intent, a launch can still have been closed (a failure recorded by
        // reconciliation).
        let ending = events.iter().rev().find_map(|e| match &e.kind {
            EventKind::LaunchFailed { launch: l, error } if l == launch => Some((
                Ending {
                    code: None,
                    how: format!("launch failed: {error}"),
                },
                true,
            )),
            _ => None,
        });
        return LaunchHistory {
            ending,
            ..LaunchHistory::default()
        };
    };
    let mut h = LaunchHistory {
        intent: true,
        ..LaunchHistory::default()
    };
    for e in &events[start + 1..] {
        match &e.kind {
            EventKind::Started { .. } => h.started = true,
            EventKind::Exited { code } => {
                h.ending.get_or_insert((
                    Ending {
                        code: Some(*code),
                        how: describe_code(*code),
                    },
                    false,
                ));
            }
            EventKind::Lost { launch: l, reason } if l == launch => {
                h.ending.get_or_insert((
                    Ending {
                        code: None,
                        how: format!("lost: {reason}"),
                    },
                    false,
                ));
            }
            EventKind::LaunchFailed { launch: l, error } if l == launch => {
                h.ending.get_or_insert((
                    Ending {
                        code: None,
                        how: format!("launch failed: {error}"),
                    },
                    true,
                ));
            }
            EventKind::Output {
                stream,
                offset,
                bytes,
                ..
            } => {
                let end = offset.saturating_add(*bytes);
                match stream.as_str() {
                    "stdout" => h.stdout_done = h.stdout_done.max(end),
                    "stderr" => h.stderr_done = h.stderr_done.max(end),
                    _ => {}
                }
            }
            _ => {}
        }
    }
    h
}

/// `exited with status N` / `killed by signal N`.
pub fn describe_code(code: u8) -> String {
    if code > 128 {
        format!("killed by signal {} (status {code})", code - 128)
    } else {
        format!("exited with status {code}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: EventKind) -> Event {
        Event::new(&ChatId::new("c").unwrap(), kind)
    }

    fn launching(id: &str) -> Event {
        ev(EventKind::Launching {
            launch: id.into(),
            cli: "x".into(),
            workflow: "w".into(),
            supervision: "structured".into(),
        })
    }

    fn output(stream: &str, offset: u64, bytes: u64) -> Event {
        ev(EventKind::Output {
            stream: stream.into(),
            offset,
            bytes,
            text: "…".into(),
        })
    }

    #[test]
    fn history_reads_only_its_launch() {
        let events = vec![
            launching("L1"),
            output("stdout", 0, 10),
            ev(EventKind::Exited { code: 0 }),
            launching("L2"),
            ev(EventKind::Bridge {
                call: serde_json::Value::Null,
            }),
            output("stdout", 0, 4),
            output("stderr", 0, 3),
            output("stdout", 4, 6),
        ];
        let h = history(&events, "L2");
        assert!(h.intent && !h.started && h.ending.is_none());
        assert_eq!((h.stdout_done, h.stderr_done), (10, 3));
        let h1 = history(&events, "L1");
        assert_eq!(h1.ending.unwrap().0.code, Some(0));

        let mut ended = events.clone();
        ended.push(ev(EventKind::Started {
            cli: "x".into(),
            mode: "full".into(),
            reason: "r".into(),
            confined: true,
            argv: vec![],
        }));
        ended.push(ev(EventKind::Lost {
            launch: "L2".into(),
            reason: "gone".into(),
        }));
        let h = history(&ended, "L2");
        assert!(h.started);
        let (ending, failed) = h.ending.unwrap();
        assert_eq!((ending.how.as_str(), failed), ("lost: gone", false));

        // A failure recorded without its intent (a crash between record and event).
        let only_failed = vec![ev(EventKind::LaunchFailed {
            launch: "L3".into(),
            error: "e".into(),
        })];
        let h = history(&only_failed, "L3");
        assert!(!h.intent);
        assert!(h.ending.unwrap().1);
        assert_eq!(history(&only_failed, "L4"), LaunchHistory::default());
    }
}
