//! Starting a structured chat's process (its output into files the monitor tails, its
//! identity recorded), its waiter, and serving its bridge.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::Arc;

use super::slot::{Proc, SlotState};
use super::tail::Tail;
use super::{Supervisor, lock, warn};
use crate::bridge::BridgeHandle;
use crate::events::{Event, EventLog};
use crate::ids::ChatId;
use crate::launch::{self, Launch};
use crate::server::journal::{self, Ending, Record};
use crate::server::proc::{self, Ident, IdentFile};

/// Why a chat's process or its bridge could not be started.
#[derive(Debug, thiserror::Error)]
pub(super) enum SpawnError {
    /// The launch lifecycle's own message (a binary missing, the bridge not served).
    #[error("{0}")]
    Launch(String),
    /// A file or the process: what was tried, and the system's answer.
    #[error("{what}: {io}")]
    Io { what: String, io: std::io::Error },
    #[error(transparent)]
    System(#[from] std::io::Error),
}

impl SpawnError {
    fn launch(e: impl std::fmt::Display) -> SpawnError {
        SpawnError::Launch(format!("{e:#}"))
    }

    fn io(what: String) -> impl FnOnce(std::io::Error) -> SpawnError {
        move |io| SpawnError::Io { what, io }
    }
}

impl Supervisor {
    /// Serves the chat's bridge from the journal's copy of its policy (a launch's, or an
    /// adopted chat's after a restart).
    pub(super) fn serve_bridge(
        &self,
        record: &Record,
        events: EventLog,
    ) -> Result<BridgeHandle, SpawnError> {
        let chat = record.chat.clone();
        // Written before the reply (a killed server loses none), flushed by the monitor.
        launch::serve_bridge(
            &self.state,
            &record.chat,
            &record.policy_text,
            &record.policy_file,
            &record.home,
            None,
            move |call| {
                if let Err(e) = events.append_unsynced(&Event::bridge(&chat, &call)) {
                    warn(format!("chat {chat}: bridge event not recorded: {e}"));
                }
            },
        )
        .map_err(SpawnError::launch)
    }

    pub(super) fn spawn_structured(
        &self,
        record: &Record,
        launch: &Launch,
    ) -> Result<(Ident, Vec<Tail>, Child), SpawnError> {
        let mut cmd = launch::command(launch).map_err(SpawnError::launch)?;
        let out_dir = journal::output_dir(&self.state);
        std::fs::create_dir_all(&out_dir).map_err(SpawnError::io(format!(
            "cannot create {}",
            out_dir.display()
        )))?;
        let open_out = |stream: &str| -> Result<(File, PathBuf), SpawnError> {
            let path = record.output_file(&self.state, stream);
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .map_err(SpawnError::io(format!("cannot create {}", path.display())))?;
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
            .map_err(SpawnError::io(format!("cannot start {}", launch.argv[0])))?;
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

    pub(super) fn spawn_waiter(
        self: &Arc<Self>,
        chat: ChatId,
        launch_id: String,
        mut child: Child,
    ) {
        let sup = self.clone();
        let chat_of_failed_waiter = chat.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("wait-{chat}"))
            .spawn(move || {
                let ending = match child.wait() {
                    Ok(status) => {
                        let code = launch::of_status(status);
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
}
