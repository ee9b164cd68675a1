//! A chat's slot: what the server knows of it (idle with its last record, busy launching or
//! stopping, running), and how a running chat's process is held.

use std::sync::{Condvar, Mutex};
use std::time::Instant;

use super::tail::Tail;
use crate::bridge::BridgeHandle;
use crate::events::EventLog;
use crate::server::journal::Record;
use crate::server::proc::Ident;

pub(super) struct Slot {
    pub(super) st: Mutex<SlotState>,
    pub(super) changed: Condvar,
}

pub(super) enum SlotState {
    /// Not running; the last launch's record, if any.
    Idle(Option<Box<Record>>),
    /// A launch (or a reconciliation) is in progress.
    Busy,
    Running(Box<Running>),
}

pub(super) struct Running {
    pub(super) record: Record,
    pub(super) events: EventLog,
    pub(super) bridge: Option<BridgeHandle>,
    /// On a Mac, the chat's Seatbelt denials streamed into its events (`crate::denials`).
    pub(super) denials: Option<crate::denials::Watch>,
    /// The chat's egress proxy, when its network has one (`launch::serve_egress`).
    pub(super) egress: Option<crate::egress::ProxyHandle>,
    pub(super) proc: Proc,
    pub(super) tails: Vec<Tail>,
    /// Taken over by this server after a restart.
    pub(super) adopted: bool,
    /// tmux: when the pane was first seen dead without its exit status (tmux closes the pane
    /// when its terminal ends and learns the status when it reaps the process, a moment later).
    pub(super) dead_since: Option<Instant>,
}

pub(super) enum Proc {
    /// Our child; a waiter thread reaps it and reports its status.
    Owned(Ident),
    /// A chat found running after a restart: watched by polling, status unknown.
    Adopted(Ident),
    Tmux(String),
}
