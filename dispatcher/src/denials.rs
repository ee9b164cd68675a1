//! A chat's sandbox denials as chat events (macOS).
//!
//! Seatbelt writes every denial to the unified log as `Sandbox: PROCESS(PID) deny(N)
//! OPERATION TARGET`. Every deny rule of a launch's profile carries `(with message "TAG")`, a
//! tag made for that launch ([`launch_tag`]), which the kernel appends to the message; so
//! `log stream` with the predicate `eventMessage ENDSWITH "TAG"` yields exactly that launch's
//! denials, whatever its processes' ids, and no other chat's. [`Watch`] runs that stream for
//! the launch's life and records each denial once as a `sandbox_denial` event.
//!
//! A confined process can write to the unified log itself, so a line that looks like a denial
//! of its own chat can be forged from inside: these events explain a failure, they never
//! decide anything.

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;

use crate::events::{Event, EventKind, EventLog};
use crate::ids::ChatId;

/// The program that streams the unified log on a Mac.
pub const LOG_PROGRAM: &str = "/usr/bin/log";

/// Distinct denials recorded per launch; a program retrying a refused operation in a loop
/// must not fill the event log. Later ones are counted in one last event.
const MAX_DISTINCT: usize = 1000;

/// The tag of a chat's deny rules: `[agentworks:CHAT]`. A chat id holds no `]`, so no other
/// chat's tag ends with it; and nothing in it needs quoting in a Seatbelt string or a log
/// predicate. It stays the same across launches, so a launch's policy text does too.
pub fn chat_tag(chat: &ChatId) -> String {
    format!("[agentworks:{chat}]")
}

/// One denial, parsed from a log message.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Denial {
    pub process: String,
    pub pid: Option<u32>,
    pub operation: String,
    /// The path, Mach name or address refused; empty when the message names none.
    pub target: String,
}

impl Denial {
    pub fn into_event(self) -> EventKind {
        EventKind::SandboxDenial {
            process: self.process,
            pid: self.pid,
            operation: self.operation,
            target: self.target,
        }
    }
}

/// Parses a log line carrying a denial tagged `tag`: an `ndjson` line of `log stream` (its
/// `eventMessage`), or the message itself. `None` for anything else.
pub fn parse(line: &str, tag: &str) -> Option<Denial> {
    let message = match serde_json::from_str::<serde_json::Value>(line) {
        Ok(v) => v.get("eventMessage")?.as_str()?.to_string(),
        Err(_) => line.to_string(),
    };
    let rest = message.trim_end().strip_suffix(tag)?;
    let rest = &rest[rest.find("Sandbox: ")? + "Sandbox: ".len()..];
    // PROCESS(PID) deny(N) OPERATION TARGET: the process name may hold spaces and
    // parentheses, so split at the last `(` before ` deny(`.
    let deny_at = rest.find(") deny(")?;
    let (who, after) = rest.split_at(deny_at);
    let open = who.rfind('(')?;
    let process = who[..open].to_string();
    let pid = who[open + 1..].parse().ok();
    let after = &after[") deny(".len()..];
    let after = &after[after.find(") ")? + 2..];
    let (operation, target) = match after.split_once(' ') {
        Some((op, target)) => (op, target.trim()),
        None => (after.trim(), ""),
    };
    if operation.is_empty() {
        return None;
    }
    Some(Denial {
        process,
        pid,
        operation: operation.to_string(),
        target: target.to_string(),
    })
}

/// The unified log streamed for one launch's tag, each new denial handed to `record`.
/// Dropping it stops the stream.
pub struct Watch {
    child: Child,
    reader: Option<JoinHandle<()>>,
}

impl Watch {
    /// Starts `program stream --style ndjson --predicate 'eventMessage ENDSWITH "TAG"'`
    /// (`program` is [`LOG_PROGRAM`] on a Mac; tests pass a stand-in).
    pub fn start(
        program: impl Into<OsString>,
        tag: &str,
        record: impl FnMut(EventKind) + Send + 'static,
    ) -> std::io::Result<Watch> {
        let mut child = Command::new(program.into())
            .args(["stream", "--style", "ndjson", "--predicate"])
            .arg(format!("eventMessage ENDSWITH \"{tag}\""))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let out = child.stdout.take().expect("piped");
        let tag = tag.to_string();
        let reader = std::thread::Builder::new()
            .name("denials".into())
            .spawn(move || read_denials(BufReader::new(out), &tag, record))?;
        Ok(Watch {
            child,
            reader: Some(reader),
        })
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // Killed by its own handle (its pid is ours to reap), never by name.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// Watches a confined chat's denials into its event log, on a Mac (where its launches run
/// under Seatbelt); elsewhere, or when `log` cannot be started, nothing is watched (a warning
/// says why in the latter case: the launch itself goes on).
pub fn watch_chat(chat: &ChatId, confined: bool, events: &EventLog) -> Option<Watch> {
    if !(cfg!(target_os = "macos") && confined) {
        return None;
    }
    let events = events.clone();
    let of = chat.clone();
    let record = move |kind| {
        if let Err(e) = events.append_unsynced(&Event::new(&of, kind)) {
            eprintln!("dispatcher: sandbox denial not recorded: {e}");
        }
    };
    match Watch::start(LOG_PROGRAM, &chat_tag(chat), record) {
        Ok(watch) => Some(watch),
        Err(e) => {
            eprintln!("dispatcher: chat {chat}: sandbox denials not recorded: {LOG_PROGRAM}: {e}");
            None
        }
    }
}

fn read_denials(out: impl BufRead, tag: &str, mut record: impl FnMut(EventKind)) {
    let mut seen: HashSet<Denial> = HashSet::new();
    let mut dropped: u64 = 0;
    for line in out.lines() {
        let Ok(line) = line else { break };
        let Some(denial) = parse(&line, tag) else {
            continue;
        };
        if seen.contains(&denial) {
            continue;
        }
        if seen.len() >= MAX_DISTINCT {
            dropped += 1;
            continue;
        }
        seen.insert(denial.clone());
        record(denial.into_event());
    }
    if dropped > 0 {
        record(EventKind::SandboxDenialsDropped { count: dropped });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    const TAG: &str = "[agentworks:chat-1]";

    #[test]
    fn the_tag_is_the_chats() {
        assert_eq!(chat_tag(&ChatId::new("chat-1").unwrap()), TAG);
    }

    #[test]
    fn parses_a_tagged_denial_from_ndjson_and_plain_text() {
        let msg = format!(
            "Sandbox: cat(4242) deny(1) file-read-data /Users/ada/Library/Application Support/x {TAG}"
        );
        let json = serde_json::json!({"eventMessage": msg, "processID": 0}).to_string();
        let want = Denial {
            process: "cat".into(),
            pid: Some(4242),
            operation: "file-read-data".into(),
            target: "/Users/ada/Library/Application Support/x".into(),
        };
        assert_eq!(parse(&json, TAG), Some(want.clone()));
        assert_eq!(parse(&msg, TAG), Some(want));
    }

    #[test]
    fn odd_process_names_and_targetless_denials() {
        let msg = format!("Sandbox: Code Helper (GPU)(77) deny(1) mach-lookup {TAG}");
        assert_eq!(
            parse(&msg, TAG),
            Some(Denial {
                process: "Code Helper (GPU)".into(),
                pid: Some(77),
                operation: "mach-lookup".into(),
                target: String::new(),
            })
        );
    }

    #[test]
    fn untagged_or_other_tags_or_other_messages_are_not_denials() {
        let other = "[agentworks:other-chat-1]";
        for line in [
            "Sandbox: cat(1) deny(1) file-read-data /etc/x".to_string(),
            format!("Sandbox: cat(1) deny(1) file-read-data /etc/x {other}"),
            format!("something else {TAG}"),
            format!("Sandbox: cat(1) allow file-read-data {TAG}"),
            "{\"eventMessage\": 3}".to_string(),
        ] {
            assert_eq!(parse(&line, TAG), None, "{line}");
        }
    }

    #[test]
    fn repeats_are_recorded_once_and_a_flood_is_capped() {
        let mut lines = String::new();
        for _ in 0..3 {
            lines.push_str(&format!("Sandbox: a(1) deny(1) file-write-data /x {TAG}\n"));
        }
        for i in 0..MAX_DISTINCT + 5 {
            lines.push_str(&format!(
                "Sandbox: b(2) deny(1) file-read-data /y{i} {TAG}\n"
            ));
        }
        let mut got = Vec::new();
        read_denials(lines.as_bytes(), TAG, |e| got.push(e));
        assert_eq!(got.len(), MAX_DISTINCT + 1);
        assert_eq!(
            got.last(),
            Some(&EventKind::SandboxDenialsDropped { count: 6 })
        );
    }

    /// The watch runs the log program with the launch's predicate and records what it prints;
    /// a stand-in program plays the Mac's `log`.
    #[test]
    fn the_watch_streams_the_launchs_predicate() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("log");
        let args_file = dir.path().join("args");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\nprintf '%s\\n' \"$@\" > {}\n\
                 echo '{{\"eventMessage\":\"Sandbox: sh(9) deny(1) file-write-create /w {TAG}\"}}'\n\
                 exec sleep 30\n",
                args_file.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = got.clone();
        let watch = Watch::start(&fake, TAG, move |e| sink.lock().unwrap().push(e)).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while got.lock().unwrap().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        drop(watch); // stops the stand-in (sleep 30) at once
        let args = std::fs::read_to_string(&args_file).unwrap();
        assert_eq!(
            args.lines().collect::<Vec<_>>(),
            [
                "stream",
                "--style",
                "ndjson",
                "--predicate",
                &format!("eventMessage ENDSWITH \"{TAG}\"")
            ]
        );
        assert_eq!(
            *got.lock().unwrap(),
            [EventKind::SandboxDenial {
                process: "sh".into(),
                pid: Some(9),
                operation: "file-write-create".into(),
                target: "/w".into(),
            }]
        );
    }
}
