//! Supervision: every chat the server launched, its process (structured or tmux), its bridge,
//! its output, its end — and, after a restart, reconciliation of the journal with what runs.
//!
//! One slot per chat serializes its launch, stop and end. Lock order: the slot map, then a
//! slot; never the other way. Slow work (planning, starting, waiting for an exit) runs with
//! the slot marked busy or running, not with a lock held across it.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::journal::{self, Ending, Phase, Record, Supervision};
use super::proc::{self, Ident, IdentFile};
use super::tmux;
use crate::adapter;
use crate::bridge::{self, BridgeHandle, ChatContext};
use crate::events::{Event, EventKind, EventLog};
use crate::grants::Attach;
use crate::ids::{ChatId, WorkflowId};
use crate::launch::{self, Launch, LaunchError, LaunchRequest};
use crate::modes::Mode;
use crate::platform;
use crate::state::{StateError, StateRoot};
use crate::test_hooks::ServerHooks;

/// How often running chats are looked at (output, adopted processes, tmux panes).
const POLL: Duration = Duration::from_millis(100);
/// How long a stopped chat has after SIGTERM before SIGKILL, by default and at most.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);
pub const MAX_GRACE: Duration = Duration::from_secs(60);
/// One output event holds at most this many bytes.
const OUTPUT_CHUNK: usize = 64 * 1024;
/// At most this many `cli_args`, each at most this long.
const MAX_CLI_ARGS: usize = 256;
const MAX_CLI_ARG: usize = 8 * 1024;

/// An API error: status, a stable code, a message for people.
#[derive(Debug)]
pub struct ApiError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(500, "internal", e.to_string())
}

impl From<StateError> for ApiError {
    fn from(e: StateError) -> ApiError {
        match e {
            StateError::UnknownChat(_) => ApiError::new(404, "unknown_chat", e.to_string()),
            StateError::UnknownWorkflow(_) => ApiError::new(404, "unknown_workflow", e.to_string()),
            other => internal(other),
        }
    }
}

impl From<LaunchError> for ApiError {
    fn from(e: LaunchError) -> ApiError {
        match e {
            LaunchError::State(s) => s.into(),
            LaunchError::Io { .. } => internal(e),
            LaunchError::Adapter(_) => ApiError::new(422, "launch_refused", e.to_string()),
            LaunchError::ModeUnsupported { .. }
            | LaunchError::BridgeOnlyNeedsSandbox { .. }
            | LaunchError::FullRefused(_)
            | LaunchError::AutoOffHost(_) => ApiError::new(422, "mode_refused", e.to_string()),
        }
    }
}

/// `POST /v1/chats/launch`: what `dispatcher launch` takes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchBody {
    pub cli: String,
    pub chat: String,
    pub workflow: String,
    /// `W` (read-only) or `W:rw`.
    #[serde(default)]
    pub attach: Vec<String>,
    /// `auto`, `full`, `bridge-only`; default the chat's saved mode.
    #[serde(default)]
    pub mode: Option<String>,
    /// `structured` (default: headless, output captured as events) or `tmux`.
    #[serde(default)]
    pub supervision: Option<String>,
    #[serde(default)]
    pub cli_args: Vec<String>,
}

struct Slot {
    st: Mutex<SlotState>,
    changed: Condvar,
}

enum SlotState {
    /// Not running; the last launch's record, if any.
    Idle(Option<Box<Record>>),
    /// A launch (or a reconciliation) is in progress.
    Busy,
    Running(Box<Running>),
}

struct Running {
    record: Record,
    events: EventLog,
    bridge: Option<BridgeHandle>,
    proc: Proc,
    tails: Vec<Tail>,
    /// Taken over by this server after a restart.
    adopted: bool,
    /// tmux: when the pane was first seen dead without its exit status (tmux closes the pane
    /// when its terminal ends and learns the status when it reaps the process, a moment later).
    dead_since: Option<Instant>,
}

/// How long a dead tmux pane may go without an exit status before the chat is recorded lost.
const STATUS_WAIT: Duration = Duration::from_secs(3);

enum Proc {
    /// Our child; a waiter thread reaps it and reports its status.
    Owned(Ident),
    /// A chat found running after a restart: watched by polling, status unknown.
    Adopted(Ident),
    Tmux(String),
}

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

    // ---- launch -------------------------------------------------------------------------

    pub fn launch(self: &Arc<Self>, body: LaunchBody) -> Result<Value, ApiError> {
        let bad = |m: String| ApiError::new(400, "bad_request", m);
        let chat = ChatId::new(&body.chat).map_err(|e| bad(e.to_string()))?;
        let workflow = WorkflowId::new(&body.workflow).map_err(|e| bad(e.to_string()))?;
        let attach = body
            .attach
            .iter()
            .map(|a| a.parse::<Attach>().map_err(bad))
            .collect::<Result<Vec<_>, _>>()?;
        let mode =
            match &body.mode {
                None => None,
                Some(m) => Some(Mode::parse(m).ok_or_else(|| {
                    bad(format!("mode {m:?}: expected auto, full or bridge-only"))
                })?),
            };
        let supervision = match body.supervision.as_deref() {
            None | Some("structured") => Supervision::Structured,
            Some("tmux") => Supervision::Tmux,
            Some(other) => {
                return Err(bad(format!(
                    "supervision {other:?}: expected \"structured\" or \"tmux\""
                )));
            }
        };
        if body.cli_args.len() > MAX_CLI_ARGS {
            return Err(bad(format!("more than {MAX_CLI_ARGS} cli_args")));
        }
        if let Some(a) = body
            .cli_args
            .iter()
            .find(|a| a.contains('\0') || a.len() > MAX_CLI_ARG)
        {
            return Err(bad(format!(
                "cli_args: {:?}…: no NUL, at most {MAX_CLI_ARG} bytes",
                a.chars().take(40).collect::<String>()
            )));
        }
        let adapters = adapter::load_all(self.profiles_dir.as_deref())
            .map_err(|e| internal(format!("the adapters do not load: {e}")))?;
        let adapter = adapter::find(&adapters, &body.cli)
            .map_err(|e| ApiError::new(404, "unknown_cli", e))?;
        self.state.require_chat(&chat)?;
        self.state.require_workflow(&workflow)?;
        if self.stopping.load(Ordering::SeqCst) {
            return Err(ApiError::new(
                503,
                "stopping",
                "the server is shutting down",
            ));
        }

        let slot = self.slot(&chat);
        let previous = {
            let mut st = lock(&slot.st);
            match &mut *st {
                SlotState::Idle(prev) => {
                    let prev = prev.take();
                    *st = SlotState::Busy;
                    prev
                }
                SlotState::Busy => {
                    return Err(ApiError::new(
                        409,
                        "busy",
                        format!("chat {chat}: a launch or stop is in progress"),
                    ));
                }
                SlotState::Running(r) => {
                    return Err(ApiError::new(
                        409,
                        "already_running",
                        format!(
                            "chat {chat} is already running (launch {}); stop it first",
                            r.record.launch
                        ),
                    ));
                }
            }
        };
        // A panic must not leave the chat busy for good.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.launch_busy(
                &chat,
                &workflow,
                &attach,
                mode,
                supervision,
                &adapter,
                &body,
            )
        }))
        .unwrap_or_else(|_| Err((internal("the launch failed unexpectedly (a bug)"), None)));
        let mut st = lock(&slot.st);
        let out = match result {
            Ok((running, child)) => {
                let view = view_running(&running, &self.tmux_socket);
                let launch_id = running.record.launch.clone();
                *st = SlotState::Running(Box::new(running));
                drop(st);
                slot.changed.notify_all();
                if let Some(child) = child {
                    self.spawn_waiter(chat, launch_id, child);
                }
                return Ok(view);
            }
            Err((e, record)) => {
                // Refused before anything was journaled: the last launch still stands.
                *st = SlotState::Idle(record.or(previous));
                Err(e)
            }
        };
        drop(st);
        slot.changed.notify_all();
        out
    }

    /// The launch proper, with the slot marked busy. On failure after the intent was
    /// journaled, the launch is rolled back and the failed record returned.
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn launch_busy(
        &self,
        chat: &ChatId,
        workflow: &WorkflowId,
        attach: &[Attach],
        mode: Option<Mode>,
        supervision: Supervision,
        adapter: &adapter::Adapter,
        body: &LaunchBody,
    ) -> Result<(Running, Option<Child>), (ApiError, Option<Box<Record>>)> {
        let target = sandboxer::Target::host()
            .ok_or_else(|| (internal("this OS has no sandbox backend"), None))?;
        let req = LaunchRequest {
            cli: body.cli.clone(),
            chat: chat.clone(),
            workflow: workflow.clone(),
            attach: attach.to_vec(),
            mode,
            headless: supervision == Supervision::Structured,
            cwd: None,
            target,
            home: self.home.clone(),
            cli_args: body.cli_args.clone(),
        };
        let tools = platform::tools(adapter, target).map_err(|e| (internal(e), None))?;
        let mut launch = launch::plan(&self.state, adapter, &req, &tools, |policy| {
            platform::confinement(target, policy, &self.home)
        })
        .map_err(|e| (e.into(), None))?;
        self.hooks
            .break_launch(&mut launch)
            .map_err(|e| (internal(e), None))?;
        // The binaries must be there before anything is journaled.
        platform::command(&launch)
            .map_err(|e| (ApiError::new(422, "not_installed", format!("{e:#}")), None))?;
        let profile = match target {
            sandboxer::Target::Macos if launch.confined => Some(
                platform::seatbelt_profile(&launch, &self.home, None)
                    .map_err(|e| (internal(format!("{e:#}")), None))?,
            ),
            _ => None,
        };
        if supervision == Supervision::Tmux {
            if !tmux::available() {
                return Err((
                    ApiError::new(
                        422,
                        "not_installed",
                        "tmux is not installed here; launch structured instead",
                    ),
                    None,
                ));
            }
            let panes = tmux::list(&self.tmux_socket).map_err(|e| (internal(e), None))?;
            if panes.contains_key(&tmux::session_name(chat)) {
                return Err((
                    ApiError::new(
                        409,
                        "tmux_session_exists",
                        format!(
                            "a tmux session {} already exists on {} (started outside this server?); end it first",
                            tmux::session_name(chat),
                            self.tmux_socket.display()
                        ),
                    ),
                    None,
                ));
            }
        }
        let policy_text = launch
            .policy_text()
            .map(str::to_string)
            .ok_or_else(|| (internal("the launch has no policy file"), None))?;

        // 1. The intent, durable before anything starts.
        let mut record = Record {
            version: journal::RECORD_VERSION,
            chat: chat.clone(),
            launch: self.new_launch_id(),
            phase: Phase::Launching,
            supervision,
            cli: launch.cli.clone(),
            workflow: workflow.clone(),
            attach: body.attach.clone(),
            requested_mode: launch.mode.requested.to_string(),
            mode: launch.mode.mode.to_string(),
            reason: launch.mode.reason.clone(),
            confined: launch.confined,
            home: self.home.clone(),
            policy_text,
            policy_file: launch.policy_path.clone(),
            ident: None,
            tmux_session: None,
            created_ms: now_ms(),
            ended: None,
        };
        record.save(&self.state).map_err(|e| (internal(e), None))?;
        let events = match EventLog::open(&self.state, chat) {
            Ok(ev) => ev,
            Err(e) => return Err(self.fail_launch(record, None, internal(e))),
        };
        let intent = Event::new(
            chat,
            EventKind::Launching {
                launch: record.launch.clone(),
                cli: record.cli.clone(),
                workflow: workflow.to_string(),
                supervision: supervision.as_str().into(),
            },
        );
        if let Err(e) = events.append(&intent) {
            return Err(self.fail_launch(record, Some(&events), internal(e)));
        }
        self.failpoint("intent");

        // 2. Files, bridge, process.
        if let Err(e) = launch::write_files(&launch, profile.as_deref()) {
            return Err(self.fail_launch(record, Some(&events), e.into()));
        }
        let bridge = match self.serve_bridge(&record, events.clone()) {
            Ok(b) => b,
            Err(e) => {
                let e = internal(format!("cannot serve the chat's bridge: {e:#}"));
                return Err(self.fail_launch(record, Some(&events), e));
            }
        };
        let (proc, tails, child) = match supervision {
            Supervision::Structured => match self.spawn_structured(&record, &launch) {
                Ok((ident, tails, child)) => {
                    record.ident = Some(ident.to_line().trim().to_string());
                    (Proc::Owned(ident), tails, Some(child))
                }
                Err(e) => {
                    drop(bridge);
                    let e = ApiError::new(500, "start_failed", format!("{e:#}"));
                    return Err(self.fail_launch(record, Some(&events), e));
                }
            },
            Supervision::Tmux => match tmux::start(&self.tmux_socket, &launch, &record.launch) {
                Ok(session) => {
                    record.tmux_session = Some(session.clone());
                    (Proc::Tmux(session), Vec::new(), None)
                }
                Err(e) => {
                    drop(bridge);
                    // A failed new-session may still have made the session: it is tagged with
                    // this launch, so only it is removed.
                    self.remove_tagged_session(&record);
                    let e = ApiError::new(500, "start_failed", format!("{e:#}"));
                    return Err(self.fail_launch(record, Some(&events), e));
                }
            },
        };

        self.failpoint("spawned");

        // 3. Started, then the record.
        let mut running = Running {
            record,
            events,
            bridge: Some(bridge),
            proc,
            tails,
            adopted: false,
            dead_since: None,
        };
        if let Err(e) = running.events.append(&Event::started(&launch)) {
            self.kill_now(&mut running, child);
            let Running { record, events, .. } = running;
            return Err(self.fail_launch(record, Some(&events), internal(e)));
        }
        self.failpoint("started");
        running.record.phase = Phase::Running;
        if let Err(e) = running.record.save(&self.state) {
            // The event log already says started: a restart adopts the chat from it.
            warn(format!(
                "chat {chat}: the journal record was not updated: {e}"
            ));
        }
        Ok((running, child))
    }

    /// Records a launch that did not start (or was rolled back) and returns the error.
    fn fail_launch(
        &self,
        mut record: Record,
        events: Option<&EventLog>,
        err: ApiError,
    ) -> (ApiError, Option<Box<Record>>) {
        let ev = Event::new(
            &record.chat,
            EventKind::LaunchFailed {
                launch: record.launch.clone(),
                error: err.message.clone(),
            },
        );
        let logged = match events {
            Some(l) => l.append(&ev),
            None => EventLog::open(&self.state, &record.chat).and_then(|l| l.append(&ev)),
        };
        if let Err(e) = logged {
            warn(format!(
                "chat {}: the failed launch was not recorded in its events: {e}",
                record.chat
            ));
        }
        record.phase = Phase::Failed;
        record.ended = Some(Ending {
            code: None,
            how: format!("launch failed: {}", err.message),
        });
        if let Err(e) = record.save(&self.state) {
            warn(format!(
                "chat {}: journal record not updated: {e}",
                record.chat
            ));
        }
        self.cleanup_files(&record);
        (err, Some(Box::new(record)))
    }

    fn serve_bridge(&self, record: &Record, events: EventLog) -> anyhow::Result<BridgeHandle> {
        let opts = platform::host_resolve_options(&record.home)?;
        let ctx = ChatContext::from_toml(
            &self.state,
            &record.chat,
            &record.policy_text,
            &record.policy_file.display().to_string(),
            &opts,
        )?;
        let socket = self.state.runtime(&record.chat).join(bridge::SOCKET_NAME);
        let chat = record.chat.clone();
        // Written before the reply (a killed server loses none), flushed by the monitor.
        Ok(bridge::serve(&socket, ctx, move |call| {
            if let Err(e) = events.append_unsynced(&Event::bridge(&chat, &call)) {
                warn(format!("chat {chat}: bridge event not recorded: {e}"));
            }
        })?)
    }

    fn spawn_structured(
        &self,
        record: &Record,
        launch: &Launch,
    ) -> anyhow::Result<(Ident, Vec<Tail>, Child)> {
        use anyhow::Context;
        let mut cmd = platform::command(launch)?;
        let out_dir = journal::output_dir(&self.state);
        std::fs::create_dir_all(&out_dir)
            .with_context(|| format!("cannot create {}", out_dir.display()))?;
        let open_out = |stream: &str| -> anyhow::Result<(File, PathBuf)> {
            let path = record.output_file(&self.state, stream);
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .with_context(|| format!("cannot create {}", path.display()))?;
            Ok((f, path))
        };
        let (stdout, stdout_path) = open_out("stdout")?;
        let (stderr, stderr_path) = open_out("stderr")?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(stdout))
            .stderr(Stdio::from(stderr));
        let ident_file = record.ident_file(&self.state);
        proc::prepare_spawn(&mut cmd, &ident_file)?;
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", launch.argv[0]))?;
        let pid = child.id() as i32;
        // The child is not reaped yet, so its pid cannot have been reused.
        let ident = match proc::read_ident_file(&ident_file) {
            Some(IdentFile::Ident(i)) if i.pid == pid => i,
            _ => Ident::of(pid).unwrap_or(Ident {
                pid,
                start: "exited".into(),
            }),
        };
        let tails = vec![
            Tail::new("stdout", &stdout_path, 0)?,
            Tail::new("stderr", &stderr_path, 0)?,
        ];
        Ok((ident, tails, child))
    }

    fn spawn_waiter(self: &Arc<Self>, chat: ChatId, launch_id: String, mut child: Child) {
        let sup = self.clone();
        let chat_of_failed_waiter = chat.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("wait-{chat}"))
            .spawn(move || {
                let ending = match child.wait() {
                    Ok(status) => {
                        use std::os::unix::process::ExitStatusExt;
                        let code = match (status.code(), status.signal()) {
                            (Some(c), _) => c as u8,
                            (None, Some(s)) => 128u8.saturating_add(s as u8),
                            _ => 1,
                        };
                        Ending {
                            code: Some(code),
                            how: journal::describe_code(code),
                        }
                    }
                    Err(e) => Ending {
                        code: None,
                        how: format!("cannot wait for the process: {e}"),
                    },
                };
                if let Some(slot) = sup.existing_slot(&chat) {
                    let mut st = lock(&slot.st);
                    sup.finish_locked(&chat, &mut st, &launch_id, ending);
                    drop(st);
                    slot.changed.notify_all();
                }
            });
        if let Err(e) = spawned {
            // The child was dropped unreaped: the monitor watches it like an adopted process
            // and sees it end (as a zombie), with an unknown status.
            warn(format!(
                "cannot start a waiter thread: {e}; watching by polling"
            ));
            if let Some(slot) = self.existing_slot(&chat_of_failed_waiter) {
                let mut st = lock(&slot.st);
                if let SlotState::Running(r) = &mut *st
                    && let Proc::Owned(i) = &r.proc
                {
                    r.proc = Proc::Adopted(i.clone());
                }
            }
        }
    }

    // ---- end ----------------------------------------------------------------------------

    /// Ends `launch_id` if it is the running one: output drained, bridge stopped, the end
    /// recorded (event, then record), files removed.
    fn finish_locked(&self, chat: &ChatId, st: &mut SlotState, launch_id: &str, ending: Ending) {
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

    fn cleanup_files(&self, record: &Record) {
        let _ = std::fs::remove_file(record.ident_file(&self.state));
        for s in ["stdout", "stderr"] {
            let _ = std::fs::remove_file(record.output_file(&self.state, s));
        }
    }

    fn remove_tagged_session(&self, record: &Record) {
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
    fn kill_now(&self, r: &mut Running, child: Option<Child>) {
        if let Some(b) = r.bridge.take() {
            b.shutdown();
        }
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
    fn signal(&self, r: &Running, sig: i32) -> bool {
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
        (
            SlotState::Running(Box::new(Running {
                record,
                events: events_log,
                bridge: Some(bridge),
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
                if let Err(e) = r.events.sync() {
                    warn(format!("chat {}: {e}", r.record.chat));
                }
            }
        }
    }
}

fn not_running(chat: &ChatId) -> ApiError {
    ApiError::new(409, "not_running", format!("chat {chat} is not running"))
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

fn view_running(r: &Running, socket: &Path) -> Value {
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

/// A structured chat's output file, turned into `output` events as it grows.
struct Tail {
    stream: &'static str,
    file: File,
    /// Bytes already recorded as events.
    offset: u64,
    /// Bytes read but not yet recorded (an unfinished line).
    pending: Vec<u8>,
}

impl Tail {
    fn new(stream: &'static str, path: &Path, offset: u64) -> std::io::Result<Tail> {
        Ok(Tail {
            stream,
            file: File::open(path)?,
            offset,
            pending: Vec::new(),
        })
    }

    /// Records what is new: whole lines (at most [`OUTPUT_CHUNK`] bytes per event), and with
    /// `last` everything that is left.
    fn pump(&mut self, events: &EventLog, chat: &ChatId, last: bool) {
        let mut buf = vec![0u8; OUTPUT_CHUNK];
        // Bounded per call, so one chatty chat cannot hold the monitor.
        for _ in 0..16 {
            let at = self.offset + self.pending.len() as u64;
            match self.file.read_at(&mut buf, at) {
                Ok(0) | Err(_) => break,
                Ok(n) => self.pending.extend_from_slice(&buf[..n]),
            }
            if !self.emit(events, chat, false) {
                return;
            }
        }
        self.emit(events, chat, last);
    }

    /// Returns false when an event could not be recorded (retried next time).
    fn emit(&mut self, events: &EventLog, chat: &ChatId, all: bool) -> bool {
        loop {
            let cut = match self.pending.iter().rposition(|&b| b == b'\n') {
                _ if self.pending.is_empty() => return true,
                Some(i) => (i + 1).min(OUTPUT_CHUNK),
                None if self.pending.len() >= OUTPUT_CHUNK || all => {
                    self.pending.len().min(OUTPUT_CHUNK)
                }
                None => return true,
            };
            // Never split a UTF-8 character when a line is cut by size.
            let cut = match std::str::from_utf8(&self.pending[..cut]) {
                Ok(_) => cut,
                Err(e) if e.valid_up_to() > 0 && e.error_len().is_none() => e.valid_up_to(),
                Err(_) => cut,
            };
            let chunk: Vec<u8> = self.pending[..cut].to_vec();
            let ev = Event::new(
                chat,
                EventKind::Output {
                    stream: self.stream.into(),
                    offset: self.offset,
                    bytes: chunk.len() as u64,
                    text: String::from_utf8_lossy(&chunk).into_owned(),
                },
            );
            if let Err(e) = events.append(&ev) {
                warn(format!("chat {chat}: output not recorded: {e}"));
                return false;
            }
            self.offset += chunk.len() as u64;
            self.pending.drain(..cut);
            if !all && !self.pending.contains(&b'\n') && self.pending.len() < OUTPUT_CHUNK {
                return true;
            }
        }
    }
}
