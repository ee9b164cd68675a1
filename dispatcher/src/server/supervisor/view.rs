//! What the API shows of chats: one chat's state, every chat's.

use std::path::Path;

use serde_json::{Value, json};

use super::Supervisor;
use super::error::ApiError;
use super::lock;
use super::slot::{Proc, Running, SlotState};
use crate::ids::ChatId;
use crate::server::journal::{Phase, Record};

impl Supervisor {
    // ---- views --------------------------------------------------------------------------

    /// One chat's state.
    pub fn view(&self, chat: &ChatId) -> Result<Value, ApiError> {
        self.state.require_chat(chat)?;
        let Some(slot) = self.existing_slot(chat) else {
            return Ok(json!({ "chat": chat, "state": "never" }));
        };
        let st = lock(&slot.st);
        Ok(match &*st {
            SlotState::Running(r) => view_running(r, &self.tmux_socket),
            SlotState::Busy => json!({ "chat": chat, "state": "launching" }),
            SlotState::Idle(None) => json!({ "chat": chat, "state": "never" }),
            SlotState::Idle(Some(rec)) => view_record(rec, None, &self.tmux_socket),
        })
    }

    /// Every chat of the state root.
    pub fn list(&self) -> Result<Value, ApiError> {
        let mut out = Vec::new();
        for chat in self.state.chats()? {
            match self.view(&chat) {
                Ok(v) => out.push(v),
                // Removed between listing and reading: not a chat any more.
                Err(e) if e.status == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(json!({ "chats": out }))
    }
}

pub(super) fn view_running(r: &Running, socket: &Path) -> Value {
    let pid = match &r.proc {
        Proc::Owned(i) | Proc::Adopted(i) => Some(i.pid),
        Proc::Tmux(_) => None,
    };
    let mut v = view_record(&r.record, pid, socket);
    v["state"] = json!("running");
    v["adopted"] = json!(r.adopted);
    v
}

fn view_record(rec: &Record, pid: Option<i32>, socket: &Path) -> Value {
    let state = match rec.phase {
        Phase::Launching => "launching",
        Phase::Running => "running",
        Phase::Exited => "exited",
        Phase::Failed => "failed",
    };
    json!({
        "chat": rec.chat,
        "state": state,
        "launch": rec.launch,
        "cli": rec.cli,
        "workflow": rec.workflow,
        "attach": rec.attach,
        "supervision": rec.supervision,
        "requested_mode": rec.requested_mode,
        "mode": rec.mode,
        "reason": rec.reason,
        "confined": rec.confined,
        "pid": pid,
        "tmux_session": rec.tmux_session,
        "tmux_attach": rec.tmux_session.as_ref().map(|s| format!("tmux -S {} attach -t ={s}", socket.display())),
        "ended": rec.ended,
    })
}
