//! After a restart: the journal reconciled with what runs — ended launches recorded, launches
//! that never started rolled back, running chats adopted (their bridges served again).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::slot::{Proc, Running, SlotState};
use super::tail::Tail;
use super::{Supervisor, lock, warn};
use crate::events::{Event, EventKind, EventLog};
use crate::server::journal::{self, Ending, Phase, Record, Supervision};
use crate::server::proc::{self, Ident, IdentFile};
use crate::server::tmux;
use crate::state::StateError;

impl Supervisor {
    // ---- restart ------------------------------------------------------------------------

    /// Reconciles the journal with what runs, before the server takes requests. Returns one
    /// line per chat it acted on.
    pub fn reconcile(self: &Arc<Self>) -> Result<Vec<String>, StateError> {
        for dir in [
            journal::server_dir(&self.state),
            journal::records_dir(&self.state),
            journal::output_dir(&self.state),
        ] {
            std::fs::create_dir_all(&dir).map_err(|source| StateError::Io {
                path: dir.clone(),
                what: "cannot create",
                source,
            })?;
            std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .map_err(|source| StateError::Io {
                    path: dir.clone(),
                    what: "cannot chmod",
                    source,
                })?;
        }
        let (records, bad) = Record::load_all(&self.state)?;
        let mut report: Vec<String> = bad
            .into_iter()
            .map(|b| format!("unreadable journal record, ignored: {b}"))
            .collect();
        let mut panes = tmux::list(&self.tmux_socket).unwrap_or_else(|e| {
            report.push(format!("cannot list tmux sessions: {e:#}"));
            HashMap::new()
        });
        if panes.values().any(|p| p.dead && p.status.is_none()) {
            tmux::nudge(&self.tmux_socket);
            std::thread::sleep(Duration::from_millis(200));
            if let Ok(again) = tmux::list(&self.tmux_socket) {
                panes = again;
            }
        }
        for record in records {
            let chat = record.chat.clone();
            let slot = self.slot(&chat);
            let (state, line) = self.reconcile_one(record, &panes);
            *lock(&slot.st) = state;
            if let Some(line) = line {
                report.push(format!("chat {chat}: {line}"));
            }
        }
        Ok(report)
    }

    fn reconcile_one(
        &self,
        mut record: Record,
        panes: &HashMap<String, tmux::Pane>,
    ) -> (SlotState, Option<String>) {
        if matches!(record.phase, Phase::Exited | Phase::Failed) {
            self.cleanup_files(&record);
            return (SlotState::Idle(Some(Box::new(record))), None);
        }
        let chat = record.chat.clone();
        let events = EventLog::read(&self.state, &chat).unwrap_or_default();
        let h = journal::history(&events, &record.launch);
        let session = tmux::session_name(&chat);
        let pane = panes
            .get(&session)
            .filter(|p| p.launch == record.launch)
            .cloned();

        // Its end is already recorded: only the record lags behind.
        if let Some((ending, failed)) = h.ending {
            if pane.is_some() {
                let _ = tmux::kill_session(&self.tmux_socket, &session);
            }
            record.phase = if failed { Phase::Failed } else { Phase::Exited };
            let line = format!(
                "launch {} had ended ({}); record updated",
                record.launch, ending.how
            );
            record.ended = Some(ending);
            if let Err(e) = record.save(&self.state) {
                warn(format!("chat {chat}: journal record not updated: {e}"));
            }
            self.cleanup_files(&record);
            return (SlotState::Idle(Some(Box::new(record))), Some(line));
        }

        let ident = match record.supervision {
            Supervision::Structured => record
                .ident
                .as_deref()
                .and_then(Ident::parse_line)
                .map(IdentFile::Ident)
                .or_else(|| proc::read_ident_file(&record.ident_file(&self.state))),
            Supervision::Tmux => None,
        };

        // Not started (no `started` event): roll back whatever began.
        if !h.started {
            let mut what = String::from("nothing had started");
            match (&ident, &pane) {
                (Some(IdentFile::Ident(i)), _) if i.alive() => {
                    stop_ident(i);
                    what = format!("its process {} was stopped", i.pid);
                }
                (Some(IdentFile::PidOnly(pid)), _) => {
                    what = format!(
                        "its process {pid} may still run: not signalled, its identity cannot be proven here"
                    );
                }
                (_, Some(_)) => {
                    let _ = tmux::kill_session(&self.tmux_socket, &session);
                    what = format!("its tmux session {session} was removed");
                }
                _ => {}
            }
            let error =
                format!("the server stopped before the launch completed; rolled back: {what}");
            let ev = Event::new(
                &chat,
                EventKind::LaunchFailed {
                    launch: record.launch.clone(),
                    error: error.clone(),
                },
            );
            if let Err(e) = EventLog::open(&self.state, &chat).and_then(|l| l.append(&ev)) {
                warn(format!(
                    "chat {chat}: rollback not recorded in its events: {e}"
                ));
            }
            record.phase = Phase::Failed;
            record.ended = Some(Ending {
                code: None,
                how: format!("launch failed: {error}"),
            });
            if let Err(e) = record.save(&self.state) {
                warn(format!("chat {chat}: journal record not updated: {e}"));
            }
            self.cleanup_files(&record);
            let line = format!("launch {} rolled back ({what})", record.launch);
            return (SlotState::Idle(Some(Box::new(record))), Some(line));
        }

        // Started, no end recorded: adopt it if it still runs, else record it lost.
        let alive = match record.supervision {
            Supervision::Structured => match &ident {
                Some(IdentFile::Ident(i)) if i.alive() => Some(Proc::Adopted(i.clone())),
                _ => None,
            },
            Supervision::Tmux => match &pane {
                Some(p) if !p.dead => Some(Proc::Tmux(session.clone())),
                _ => None,
            },
        };
        let events_log = match EventLog::open(&self.state, &chat) {
            Ok(l) => l,
            Err(e) => {
                warn(format!("chat {chat}: cannot open its event log: {e}"));
                return (SlotState::Idle(Some(Box::new(record))), None);
            }
        };
        let Some(proc) = alive else {
            let ending = match &pane {
                Some(p) => {
                    let _ = tmux::kill_session(&self.tmux_socket, &session);
                    match p.status {
                        Some(code) => Ending {
                            code: Some(code),
                            how: journal::describe_code(code),
                        },
                        None => Ending {
                            code: None,
                            how: "lost: server restarted; tmux did not report its exit status"
                                .into(),
                        },
                    }
                }
                None => Ending {
                    code: None,
                    how: "lost: server restarted; the chat had ended, its exit status is unknown"
                        .into(),
                },
            };
            let line = format!("launch {} had ended: {}", record.launch, ending.how);
            // Output captured but not yet recorded is recorded before the end.
            let tails = self.resume_tails(&record, &h);
            let launch_id = record.launch.clone();
            let mut st = SlotState::Running(Box::new(Running {
                record,
                events: events_log,
                bridge: None,
                denials: None,
                egress: None,
                proc: Proc::Tmux(session.clone()),
                tails,
                adopted: true,
                dead_since: None,
            }));
            self.finish_locked(&chat, &mut st, &launch_id, ending);
            return (st, Some(line));
        };

        // Adopt: the bridge again, from the journal's copy of the policy.
        let bridge = match self.serve_bridge(&record, events_log.clone()) {
            Ok(b) => b,
            Err(e) => {
                let why =
                    format!("stopped: its bridge could not be served again after a restart: {e:#}");
                let mut running = Running {
                    tails: self.resume_tails(&record, &h),
                    record,
                    events: events_log,
                    bridge: None,
                    denials: None,
                    egress: None,
                    proc,
                    adopted: true,
                    dead_since: None,
                };
                self.kill_now(&mut running, None);
                let launch_id = running.record.launch.clone();
                let mut st = SlotState::Running(Box::new(running));
                self.finish_locked(
                    &chat,
                    &mut st,
                    &launch_id,
                    Ending {
                        code: None,
                        how: format!("lost: {why}"),
                    },
                );
                return (st, Some(why));
            }
        };
        let (pid, tmux_session) = match &proc {
            Proc::Adopted(i) | Proc::Owned(i) => (Some(i.pid), None),
            Proc::Tmux(s) => (pane.as_ref().map(|p| p.pid), Some(s.clone())),
        };
        let ev = Event::new(
            &chat,
            EventKind::Adopted {
                launch: record.launch.clone(),
                pid,
                tmux_session,
            },
        );
        if let Err(e) = events_log.append(&ev) {
            warn(format!(
                "chat {chat}: adoption not recorded in its events: {e}"
            ));
        }
        record.phase = Phase::Running;
        if let Err(e) = record.save(&self.state) {
            warn(format!("chat {chat}: journal record not updated: {e}"));
        }
        let line = format!("launch {} adopted (still running)", record.launch);
        let tails = self.resume_tails(&record, &h);
        let denials = crate::denials::watch_chat(&chat, record.confined, &events_log);
        // Its egress proxy again, from the journal's copy of the policy, at the same socket:
        // the sandbox's PID 1 hands its listeners to the proxy served there anew (connections
        // made while no server ran were closed).
        let egress = match crate::launch::serve_egress(&record.policy_text, &chat, &events_log) {
            Ok(e) => e,
            Err(e) => {
                warn(format!(
                    "chat {chat}: its egress proxy is not served again: {e}"
                ));
                None
            }
        };
        (
            SlotState::Running(Box::new(Running {
                record,
                events: events_log,
                bridge: Some(bridge),
                denials,
                egress,
                proc,
                tails,
                adopted: true,
                dead_since: None,
            })),
            Some(line),
        )
    }

    fn resume_tails(&self, record: &Record, h: &journal::LaunchHistory) -> Vec<Tail> {
        if record.supervision != Supervision::Structured {
            return Vec::new();
        }
        [("stdout", h.stdout_done), ("stderr", h.stderr_done)]
            .into_iter()
            .filter_map(|(s, done)| Tail::new(s, &record.output_file(&self.state, s), done).ok())
            .collect()
    }
}

/// SIGTERM, a moment, then SIGKILL: for a rollback at restart.
fn stop_ident(i: &Ident) {
    let _ = i.signal_group(libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(3);
    while i.alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if i.alive() {
        let _ = i.signal_group(libc::SIGKILL);
    }
}
