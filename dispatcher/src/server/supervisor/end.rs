//! A chat's end: stopped on request (SIGTERM, then SIGKILL after the grace), killed at once
//! (a launch rolled back), or found ended — its output drained, its bridge stopped, its end
//! recorded, its files removed.

use std::process::Child;
use std::sync::PoisonError;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::error::{ApiError, internal, not_running};
use super::slot::{Proc, Running, SlotState};
use super::{POLL, Supervisor, lock, warn};
use crate::events::{Event, EventKind};
use crate::ids::ChatId;
use crate::server::journal::{Ending, Phase, Record};
use crate::server::tmux;

impl Supervisor {
    // ---- end ----------------------------------------------------------------------------

    /// Ends `launch_id` if it is the running one: output drained, bridge stopped, the end
    /// recorded (event, then record), files removed.
    pub(super) fn finish_locked(
        &self,
        chat: &ChatId,
        st: &mut SlotState,
        launch_id: &str,
        ending: Ending,
    ) {
        let SlotState::Running(r) = st else { return };
        if r.record.launch != launch_id {
            return;
        }
        for t in &mut r.tails {
            t.pump(&r.events, chat, true);
        }
        if let Some(b) = r.bridge.take() {
            b.shutdown();
        }
        // Its denials are in the log before the event that ends the launch.
        drop(r.denials.take());
        drop(r.egress.take());
        let kind = match ending.code {
            Some(code) => EventKind::Exited { code },
            None => EventKind::Lost {
                launch: launch_id.to_string(),
                reason: ending.how.trim_start_matches("lost: ").to_string(),
            },
        };
        if let Err(e) = r.events.append(&Event::new(chat, kind)) {
            warn(format!(
                "chat {chat}: its end was not recorded in its events: {e}"
            ));
        }
        self.failpoint("ended");
        let mut record = r.record.clone();
        record.phase = Phase::Exited;
        record.ended = Some(ending);
        if let Err(e) = record.save(&self.state) {
            warn(format!("chat {chat}: journal record not updated: {e}"));
        }
        self.cleanup_files(&record);
        *st = SlotState::Idle(Some(Box::new(record)));
    }

    pub(super) fn cleanup_files(&self, record: &Record) {
        let _ = std::fs::remove_file(record.ident_file(&self.state));
        for s in ["stdout", "stderr"] {
            let _ = std::fs::remove_file(record.output_file(&self.state, s));
        }
    }

    pub(super) fn remove_tagged_session(&self, record: &Record) {
        let name = tmux::session_name(&record.chat);
        if let Ok(panes) = tmux::list(&self.tmux_socket)
            // Ours: tagged with this launch, or untagged (a new-session whose tagging failed;
            // the name was checked to be free just before).
            && panes
                .get(&name)
                .is_some_and(|p| p.launch == record.launch || p.launch.is_empty())
        {
            let _ = tmux::kill_session(&self.tmux_socket, &name);
        }
    }

    /// Kills a chat's process at once (a launch being rolled back).
    pub(super) fn kill_now(&self, r: &mut Running, child: Option<Child>) {
        if let Some(b) = r.bridge.take() {
            b.shutdown();
        }
        drop(r.denials.take());
        drop(r.egress.take());
        match (&r.proc, child) {
            (Proc::Owned(_), Some(mut child)) => {
                // SAFETY: the child is not reaped: its pid (group leader) is still ours.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                let _ = child.kill();
                let _ = child.wait();
            }
            (Proc::Owned(i) | Proc::Adopted(i), _) => {
                let _ = i.signal_group(libc::SIGKILL);
            }
            (Proc::Tmux(_), _) => self.remove_tagged_session(&r.record),
        }
        self.cleanup_files(&r.record);
    }

    /// Sends `sig` to a running chat's process group. `false`: nothing was there to signal.
    pub(super) fn signal(&self, r: &Running, sig: i32) -> bool {
        match &r.proc {
            Proc::Owned(i) | Proc::Adopted(i) => i.signal_group(sig).unwrap_or(false),
            Proc::Tmux(session) => match tmux::list(&self.tmux_socket) {
                Ok(panes) => match panes.get(session) {
                    Some(p) if p.launch == r.record.launch && !p.dead && p.pid > 0 => {
                        // SAFETY: tmux reports the pane's live process; it leads its own
                        // session (tmux makes it so), hence its own group.
                        unsafe { libc::kill(-p.pid, sig) == 0 || libc::kill(p.pid, sig) == 0 }
                    }
                    _ => false,
                },
                Err(_) => false,
            },
        }
    }

    // ---- stop ---------------------------------------------------------------------------

    /// Stops a running chat: SIGTERM to its process group, SIGKILL after `grace`; returns
    /// once its end is recorded.
    pub fn stop(&self, chat_word: &str, grace: Duration) -> Result<Value, ApiError> {
        let chat =
            ChatId::new(chat_word).map_err(|e| ApiError::new(400, "bad_request", e.to_string()))?;
        self.state.require_chat(&chat)?;
        let Some(slot) = self.existing_slot(&chat) else {
            return Err(not_running(&chat));
        };
        let launch_id = {
            let st = lock(&slot.st);
            match &*st {
                SlotState::Running(r) => {
                    let id = r.record.launch.clone();
                    let ev = Event::new(&chat, EventKind::StopRequested { launch: id.clone() });
                    if let Err(e) = r.events.append(&ev) {
                        warn(format!("chat {chat}: stop request not recorded: {e}"));
                    }
                    self.signal(r, libc::SIGTERM);
                    id
                }
                SlotState::Busy => {
                    return Err(ApiError::new(
                        409,
                        "busy",
                        format!("chat {chat}: a launch is in progress; stop it when it runs"),
                    ));
                }
                SlotState::Idle(_) => return Err(not_running(&chat)),
            }
        };
        let ended =
            |st: &SlotState| !matches!(st, SlotState::Running(r) if r.record.launch == launch_id);
        let wait = |limit: Duration| -> bool {
            let deadline = Instant::now() + limit;
            let mut st = lock(&slot.st);
            loop {
                if ended(&st) {
                    return true;
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return false;
                }
                st = slot
                    .changed
                    .wait_timeout(st, left.min(POLL))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        };
        if !wait(grace) {
            {
                let st = lock(&slot.st);
                if let SlotState::Running(r) = &*st
                    && r.record.launch == launch_id
                {
                    self.signal(r, libc::SIGKILL);
                }
            }
            if !wait(Duration::from_secs(5)) {
                let mut st = lock(&slot.st);
                // A tmux session whose process ignores everything: remove the session.
                let tmux_session = match &*st {
                    SlotState::Running(r) if r.record.launch == launch_id => match &r.proc {
                        Proc::Tmux(s) => Some(s.clone()),
                        _ => None,
                    },
                    _ => None,
                };
                if let Some(session) = tmux_session {
                    let _ = tmux::kill_session(&self.tmux_socket, &session);
                    self.finish_locked(
                        &chat,
                        &mut st,
                        &launch_id,
                        Ending {
                            code: None,
                            how: "lost: its tmux session was removed after SIGKILL had no effect"
                                .into(),
                        },
                    );
                    drop(st);
                    slot.changed.notify_all();
                } else if !ended(&st) {
                    return Err(internal(format!(
                        "chat {chat}: its process did not end after SIGKILL"
                    )));
                }
            }
        }
        self.view(&chat)
    }
}
