//! `POST /v1/chats/launch`: a request checked, then launched through the launch lifecycle
//! with the chat's slot marked busy — planned, its intent journaled, its files written, its
//! bridge served, its process started — or rolled back and recorded as failed.

use std::process::Child;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::{ApiError, internal};
use super::slot::{Proc, Running, SlotState};
use super::{Supervisor, lock, now_ms, warn};
use crate::adapter::{self, Adapter};
use crate::events::{Event, EventKind, EventLog};
use crate::grants::Attach;
use crate::ids::{ChatId, WorkflowId};
use crate::launch::{self, Decide, Launch, LaunchFiles, LaunchRequest, Planned};
use crate::modes::Mode;
use crate::server::journal::{self, Ending, Phase, Record, Supervision};
use crate::server::tmux;

/// At most this many `cli_args`, each at most this long.
const MAX_CLI_ARGS: usize = 256;
const MAX_CLI_ARG: usize = 8 * 1024;

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
    /// Where the CLI sends its model requests (`dispatcher launch --model-endpoint`).
    #[serde(default)]
    pub model_endpoint: Option<EndpointBody>,
}

/// A launch's model endpoint: its base URL, the key sent (default a dummy), the model asked.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointBody {
    pub url: String,
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
}

/// A launch the server accepted: what to launch and how to supervise it.
struct Accepted {
    req: LaunchRequest,
    adapter: Adapter,
    supervision: Supervision,
    /// The `attach` words as given (the journal keeps them).
    attach: Vec<String>,
}

/// A launch that did not start: the error, and its record when its intent was journaled.
type Failed = (ApiError, Option<Box<Record>>);

impl Supervisor {
    pub fn launch(self: &Arc<Self>, body: LaunchBody) -> Result<Value, ApiError> {
        let accepted = self.accept(body)?;
        let chat = accepted.req.chat.clone();
        if self.stopping() {
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
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.launch_busy(&accepted)))
                .unwrap_or_else(|_| {
                    Err((internal("the launch failed unexpectedly (a bug)"), None))
                });
        let mut st = lock(&slot.st);
        let out = match result {
            Ok((running, child)) => {
                let view = super::view::view_running(&running, &self.tmux_socket);
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

    /// Checks a request body: ids, attachments, mode, supervision, arguments, the CLI, and
    /// that its chat and workflow exist.
    fn accept(&self, body: LaunchBody) -> Result<Accepted, ApiError> {
        let bad = |m: String| ApiError::new(400, "bad_request", m);
        let chat = ChatId::new(&body.chat).map_err(|e| bad(e.to_string()))?;
        let workflow = WorkflowId::new(&body.workflow).map_err(|e| bad(e.to_string()))?;
        let attach = body
            .attach
            .iter()
            .map(|a| a.parse::<Attach>().map_err(|e| bad(e.to_string())))
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
            .map_err(|e| ApiError::new(404, "unknown_cli", e.to_string()))?;
        self.state.require_chat(&chat)?;
        self.state.require_workflow(&workflow)?;
        let model_endpoint = match body.model_endpoint {
            Some(e) => Some(
                crate::launch::ModelEndpoint::new(&e.url, e.key, e.model)
                    .map_err(|why| bad(format!("model_endpoint: {why}")))?,
            ),
            None => None,
        };
        let target =
            sandboxer::Target::host().ok_or_else(|| internal("this OS has no sandbox backend"))?;
        Ok(Accepted {
            req: LaunchRequest {
                cli: body.cli,
                chat,
                workflow,
                attach,
                mode,
                headless: supervision == Supervision::Structured,
                cwd: None,
                target,
                home: self.home.clone(),
                cli_args: body.cli_args,
                model_endpoint,
            },
            adapter,
            supervision,
            attach: body.attach,
        })
    }

    /// The launch proper, with the slot marked busy: planned and checked, its intent
    /// journaled, then started. On failure after the intent was journaled, the launch is
    /// rolled back and the failed record returned.
    fn launch_busy(&self, a: &Accepted) -> Result<(Running, Option<Child>), Failed> {
        let planned = self.plan(a).map_err(|e| (e, None))?;
        let launch = planned.launch();
        let files = planned
            .files(&self.home)
            .map_err(|e| (ApiError::from(e), None))?;
        if a.supervision == Supervision::Tmux {
            self.check_tmux(&a.req.chat).map_err(|e| (e, None))?;
        }
        let (record, events) = self.journal_intent(a, launch)?;
        self.start(record, events, launch, &files)
    }

    /// Plans the launch; refused before anything is journaled when it cannot run here.
    fn plan(&self, a: &Accepted) -> Result<Planned, ApiError> {
        let mut planned = launch::prepare(&self.state, &a.adapter, &a.req, Decide::ThisMachine)?;
        self.hooks
            .break_launch(planned.launch_mut())
            .map_err(internal)?;
        // The binaries must be there before anything is journaled.
        launch::command(planned.launch())
            .map_err(|e| ApiError::new(422, "not_installed", format!("{e:#}")))?;
        Ok(planned)
    }

    /// A tmux launch needs tmux, and no session of the chat's name on the server's socket.
    fn check_tmux(&self, chat: &ChatId) -> Result<(), ApiError> {
        if let Err(e) = tmux::available() {
            return Err(ApiError::new(
                422,
                "not_installed",
                format!("tmux cannot be used here ({e}); launch structured instead"),
            ));
        }
        let panes = tmux::list(&self.tmux_socket).map_err(internal)?;
        if panes.contains_key(&tmux::session_name(chat)) {
            return Err(ApiError::new(
                409,
                "tmux_session_exists",
                format!(
                    "a tmux session {} already exists on {} (started outside this server?); end it first",
                    tmux::session_name(chat),
                    self.tmux_socket.display()
                ),
            ));
        }
        Ok(())
    }

    /// 1. The intent, durable before anything starts: the record, then the `launching` event.
    fn journal_intent(&self, a: &Accepted, launch: &Launch) -> Result<(Record, EventLog), Failed> {
        let chat = &a.req.chat;
        let policy_text = launch
            .policy_text()
            .map(str::to_string)
            .ok_or_else(|| (internal("the launch has no policy file"), None))?;
        let record = Record {
            version: journal::RECORD_VERSION,
            chat: chat.clone(),
            launch: self.new_launch_id(),
            phase: Phase::Launching,
            supervision: a.supervision,
            cli: launch.cli.clone(),
            workflow: a.req.workflow.clone(),
            attach: a.attach.clone(),
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
                workflow: a.req.workflow.to_string(),
                supervision: a.supervision.as_str().into(),
            },
        );
        if let Err(e) = events.append(&intent) {
            return Err(self.fail_launch(record, Some(&events), internal(e)));
        }
        self.failpoint("intent");
        Ok((record, events))
    }

    /// 2. Files, bridge, process; 3. `started`, then the record says running.
    fn start(
        &self,
        mut record: Record,
        events: EventLog,
        launch: &Launch,
        files: &LaunchFiles<'_>,
    ) -> Result<(Running, Option<Child>), Failed> {
        if let Err(e) = files.write() {
            return Err(self.fail_launch(record, Some(&events), e.into()));
        }
        let bridge = match self.serve_bridge(&record, events.clone()) {
            Ok(b) => b,
            Err(e) => {
                let e = internal(format!("cannot serve the chat's bridge: {e:#}"));
                return Err(self.fail_launch(record, Some(&events), e));
            }
        };
        // Before the sandbox starts: its relay opens the proxy's socket then.
        let egress = match crate::launch::serve_egress(&record.policy_text, &record.chat, &events) {
            Ok(e) => e,
            Err(e) => {
                drop(bridge);
                let e = internal(format!("cannot serve the chat's egress proxy: {e}"));
                return Err(self.fail_launch(record, Some(&events), e));
            }
        };
        let (proc, tails, child) = match record.supervision {
            Supervision::Structured => match self.spawn_structured(&record, launch) {
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
            Supervision::Tmux => match tmux::start(&self.tmux_socket, launch, &record.launch) {
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

        let denials = crate::denials::watch_chat(&record.chat, record.confined, &events);
        let mut running = Running {
            record,
            events,
            bridge: Some(bridge),
            denials,
            egress,
            proc,
            tails,
            adopted: false,
            dead_since: None,
        };
        if let Err(e) = running.events.append(&Event::started(launch)) {
            self.kill_now(&mut running, child);
            let Running { record, events, .. } = running;
            return Err(self.fail_launch(record, Some(&events), internal(e)));
        }
        self.failpoint("started");
        running.record.phase = Phase::Running;
        if let Err(e) = running.record.save(&self.state) {
            // The event log already says started: a restart adopts the chat from it.
            warn(format!(
                "chat {}: the journal record was not updated: {e}",
                running.record.chat
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
}
