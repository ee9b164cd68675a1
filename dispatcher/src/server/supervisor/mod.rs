//! Supervision: every chat the server launched, its process (structured or tmux), its bridge,
//! its output, its end — and, after a restart, reconciliation of the journal with what runs.
//!
//! One slot per chat serializes its launch, stop and end. Lock order: the slot map, then a
//! slot; never the other way. Slow work (planning, starting, waiting for an exit) runs with
//! the slot marked busy or running, not with a lock held across it.
//!
//! ```text
//! mod.rs        the supervisor, its slots, its test hooks, shutdown
//! slot.rs       a chat's slot and running process
//! error.rs      the API's errors
//! launch.rs     a launch request, checked and launched (or rolled back)
//! spawn.rs      a structured chat's process and waiter; the chat's bridge
//! end.rs        stop, kill, and recording a chat's end
//! watch.rs      the monitor (output, adopted processes, tmux panes)
//! tail.rs       a structured chat's output file, turned into events
//! reconcile.rs  the journal against what runs, after a restart
//! view.rs       what the API shows of chats
//! ```

mod end;
mod error;
mod launch;
mod reconcile;
mod slot;
mod spawn;
mod tail;
mod view;
mod watch;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use error::ApiError;
pub use launch::LaunchBody;
use slot::{Slot, SlotState};

use super::tmux;
use crate::ids::ChatId;
use crate::state::StateRoot;
use crate::test_hooks::ServerHooks;

/// How often running chats are looked at (output, adopted processes, tmux panes).
const POLL: Duration = Duration::from_millis(100);
/// How long a stopped chat has after SIGTERM before SIGKILL, by default and at most.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);
pub const MAX_GRACE: Duration = Duration::from_secs(60);

/// The server's chats.
pub struct Supervisor {
    state: StateRoot,
    home: PathBuf,
    profiles_dir: Option<PathBuf>,
    tmux_socket: PathBuf,
    slots: Mutex<HashMap<ChatId, Arc<Slot>>>,
    next_launch: AtomicU64,
    stopping: AtomicBool,
    started_ms: u64,
    /// Crash and broken-policy tests; nothing in a build without test hooks.
    hooks: ServerHooks,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn warn(msg: impl std::fmt::Display) {
    eprintln!("dispatcher serve: {msg}");
}

impl Supervisor {
    pub fn new(
        state: StateRoot,
        home: PathBuf,
        profiles_dir: Option<PathBuf>,
        hooks: ServerHooks,
    ) -> Supervisor {
        let tmux_socket = tmux::socket(&state);
        Supervisor {
            state,
            home,
            profiles_dir,
            tmux_socket,
            slots: Mutex::new(HashMap::new()),
            next_launch: AtomicU64::new(0),
            stopping: AtomicBool::new(false),
            started_ms: now_ms(),
            hooks,
        }
    }

    fn failpoint(&self, step: &str) {
        self.hooks.failpoint(step);
    }

    pub fn state(&self) -> &StateRoot {
        &self.state
    }

    fn slot(&self, chat: &ChatId) -> Arc<Slot> {
        lock(&self.slots)
            .entry(chat.clone())
            .or_insert_with(|| {
                Arc::new(Slot {
                    st: Mutex::new(SlotState::Idle(None)),
                    changed: Condvar::new(),
                })
            })
            .clone()
    }

    fn existing_slot(&self, chat: &ChatId) -> Option<Arc<Slot>> {
        lock(&self.slots).get(chat).cloned()
    }

    fn new_launch_id(&self) -> String {
        format!(
            "L{}-{}-{}",
            self.started_ms,
            std::process::id(),
            self.next_launch.fetch_add(1, Ordering::SeqCst)
        )
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    // ---- shutdown -----------------------------------------------------------------------

    /// Stops watching. With `stop_chats`, every running chat is stopped first; otherwise the
    /// chats keep running (their bridges pause) and the next server adopts them.
    pub fn begin_shutdown(&self, stop_chats: bool) {
        if stop_chats {
            let chats: Vec<ChatId> = lock(&self.slots).keys().cloned().collect();
            for chat in chats {
                let _ = self.stop(chat.as_str(), DEFAULT_GRACE);
            }
        }
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// After the monitor has ended: stops every bridge. Nothing is recorded as ended.
    pub fn close_bridges(&self) {
        let slots: Vec<Arc<Slot>> = lock(&self.slots).values().cloned().collect();
        for slot in slots {
            let mut st = lock(&slot.st);
            if let SlotState::Running(r) = &mut *st {
                for t in &mut r.tails {
                    t.pump(&r.events, &r.record.chat.clone(), false);
                }
                if let Some(b) = r.bridge.take() {
                    b.shutdown();
                }
                drop(r.denials.take());
                drop(r.egress.take());
                if let Err(e) = r.events.sync() {
                    warn(format!("chat {}: {e}", r.record.chat));
                }
            }
        }
    }
}
