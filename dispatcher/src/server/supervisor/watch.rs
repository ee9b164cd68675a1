//! The monitor: every running chat looked at each [`POLL`]: its events flushed, its output
//! tailed, adopted processes and tmux panes checked for their end.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, TryLockError};
use std::time::{Duration, Instant};

use super::slot::{Proc, Slot, SlotState};
use super::{POLL, Supervisor, lock, warn};
use crate::ids::ChatId;
use crate::server::journal::{self, Ending};
use crate::server::tmux;

/// How long a dead tmux pane may go without an exit status before the chat is recorded lost.
const STATUS_WAIT: Duration = Duration::from_secs(3);

impl Supervisor {
    // ---- watching -----------------------------------------------------------------------

    /// The monitor: output of structured chats, adopted processes, tmux panes. Runs until
    /// [`Supervisor::begin_shutdown`].
    pub fn monitor(self: &Arc<Self>) {
        while !self.stopping.load(Ordering::SeqCst) {
            std::thread::sleep(POLL);
            self.poll_once();
        }
    }

    fn poll_once(&self) {
        let slots: Vec<(ChatId, Arc<Slot>)> = lock(&self.slots)
            .iter()
            .map(|(c, s)| (c.clone(), s.clone()))
            .collect();
        let mut panes: Option<HashMap<String, tmux::Pane>> = None;
        let mut nudged = false;
        for (chat, slot) in slots {
            let mut st = match slot.st.try_lock() {
                Ok(g) => g,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                Err(TryLockError::WouldBlock) => continue,
            };
            let SlotState::Running(r) = &mut *st else {
                continue;
            };
            if let Err(e) = r.events.sync() {
                warn(format!("chat {chat}: {e}"));
            }
            for t in &mut r.tails {
                t.pump(&r.events, &chat, false);
            }
            let launch_id = r.record.launch.clone();
            let ending = match &r.proc {
                Proc::Owned(_) => None,
                Proc::Adopted(ident) => (!ident.alive()).then(|| Ending {
                    code: None,
                    how: if r.adopted {
                        "lost: it ended while adopted after a server restart; its exit status is unknown"
                    } else {
                        "lost: it ended while watched without a waiter; its exit status is unknown"
                    }
                    .into(),
                }),
                Proc::Tmux(session) => {
                    if panes.is_none() {
                        match tmux::list(&self.tmux_socket) {
                            Ok(p) => panes = Some(p),
                            Err(e) => {
                                warn(format!("cannot list the tmux sessions: {e:#}"));
                                continue;
                            }
                        }
                    }
                    let pane = panes.as_ref().and_then(|p| p.get(session));
                    match pane {
                        Some(p) if p.launch == launch_id && !p.dead => None,
                        Some(p)
                            if p.launch == launch_id
                                && p.status.is_none()
                                && r.dead_since.get_or_insert_with(Instant::now).elapsed()
                                    < STATUS_WAIT =>
                        {
                            if !nudged {
                                tmux::nudge(&self.tmux_socket);
                                nudged = true;
                            }
                            None
                        }
                        Some(p) if p.launch == launch_id => {
                            let _ = tmux::kill_session(&self.tmux_socket, session);
                            Some(match p.status {
                                Some(code) => Ending {
                                    code: Some(code),
                                    how: journal::describe_code(code),
                                },
                                None => Ending {
                                    code: None,
                                    how: "lost: tmux did not report its exit status".into(),
                                },
                            })
                        }
                        _ => Some(Ending {
                            code: None,
                            how: format!("lost: its tmux session {session} is gone"),
                        }),
                    }
                }
            };
            if let Some(ending) = ending {
                self.finish_locked(&chat, &mut st, &launch_id, ending);
                drop(st);
                slot.changed.notify_all();
            }
        }
    }
}
