//! A launch run attached to the person's terminal (`dispatcher launch`): its bridge served by
//! this process while the CLI runs in the foreground, its start and exit in the chat's events.
//! The server runs its launches its own way (`server::supervisor`).

use std::path::Path;

use anyhow::{Context, Result};
use sandboxer::{Confiner, Target};

use super::Planned;
use super::bridge::serve_bridge;
use super::start::{apply_env, run_foreground};
use crate::events::{Event, EventLog};
use crate::state::StateRoot;

/// Runs a planned launch whose files are written, in the foreground, and returns its exit
/// status. A confined launch on Linux runs in this process, through the sandboxer library
/// ([`super::start::run_confined_here`]); it inherits this process's environment, set here.
///
/// # Safety
///
/// No other thread may run in this process: the launch's environment is set in it.
pub unsafe fn run_attached(state: &StateRoot, planned: &Planned, home: &Path) -> Result<u8> {
    let launch = planned.launch();
    let here = match (planned.resolved(), launch.target, launch.confined) {
        (Some(r), Target::Linux, true) if cfg!(target_os = "linux") => Some(r),
        _ => None,
    };
    if here.is_some() {
        // SAFETY: the caller guarantees this process runs one thread (the bridge's starts
        // below).
        unsafe { apply_env(launch) };
    }
    // The chat's bridge is served by this process while the CLI runs in the foreground (the
    // server serves it for tmux and API launches). Its context comes from the launch's own
    // policy text, never re-read from the runtime. Its thread keeps the signals the launch
    // waits for blocked, so that they reach the waiting thread.
    let events = EventLog::open(state, &launch.chat)?;
    let policy_text = launch
        .policy_text()
        .context("the launch has no policy file")?;
    let bridge = Confiner::with_waited_signals_blocked(|| {
        let events = events.clone();
        let chat = launch.chat.clone();
        serve_bridge(
            state,
            &launch.chat,
            policy_text,
            &launch.policy_path,
            home,
            planned.resolved(),
            move |call| {
                if let Err(e) = events.append(&Event::bridge(&chat, &call)) {
                    eprintln!("dispatcher: bridge event not recorded: {e}");
                }
            },
        )
    })?;
    // `started` is in the log (the kernel has the line) before the launch starts, and on disk
    // while it starts: flushing it first would add a journal commit (0.2–4 ms here) to every
    // launch. Only a power loss within those milliseconds could lose it, together with
    // whatever the CLI wrote meanwhile (not flushed either). `exited` is flushed before the
    // dispatcher returns, as every `append` is.
    // The egress proxy, before the sandbox starts: its relay opens the proxy's socket then.
    let egress = Confiner::with_waited_signals_blocked(|| {
        super::serve_egress(policy_text, &launch.chat, &events)
    })?;
    let denials = Confiner::with_waited_signals_blocked(|| {
        crate::denials::watch_chat(&launch.chat, launch.confined, &events)
    });
    events.append_unsynced(&Event::started(launch))?;
    let flush = {
        let events = events.clone();
        move || {
            if let Err(e) = events.sync() {
                eprintln!("dispatcher: the started event is not on disk: {e}");
            }
        }
    };
    let code = match here {
        #[cfg(target_os = "linux")]
        Some(r) => super::start::run_confined_here(launch, r, flush),
        _ => run_foreground(launch, flush),
    };
    drop(bridge);
    drop(denials);
    drop(egress);
    let code = code?;
    events.append(&Event::exited(launch, code))?;
    Ok(code)
}
