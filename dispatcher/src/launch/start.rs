//! Starting a prepared launch: its command (the confinement wrapper and the CLI, its cwd and
//! environment), in the foreground — on Linux through the sandboxer library in this very
//! process — or spawned for a supervisor (the server, tmux) to watch.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use sandboxer::Confiner;

#[cfg(target_os = "linux")]
use super::confine::Resolved;
use super::ending;
use super::plan::Launch;

/// Runs the launch in the foreground and returns its exit code (128+N for signal N).
/// `started` runs once the launch's process exists, while it starts (the caller flushes the
/// `started` event then, instead of before).
pub fn run_foreground(launch: &Launch, started: impl FnOnce()) -> Result<u8> {
    let mut cmd = command(launch)?;
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {}", launch.argv[0]))?;
    started();
    let status = child
        .wait()
        .with_context(|| format!("waiting for {}", launch.argv[0]))?;
    Ok(ending::of_status(status))
}

/// Runs a confined Linux launch in the foreground in this process, through the sandboxer
/// library ([`sandboxer::Confiner::launch`]: the fallback rule and the fail-closed exits of
/// `sandboxer exec`, which `launch.argv` names and tmux and server launches run), and returns
/// its exit code: the CLI's (128+N for signal N), 125 when the sandbox could not be set up
/// (nothing was run, the reason on stderr), 126/127 when the CLI could not be executed.
/// Starting `sandboxer exec` instead would cost its process start, loading the policy again
/// and the ways-out list, about 2 ms a launch.
///
/// `resolved` is the mode decision's: the launch's own policy text as resolved on this
/// machine, and the confiner holding the probed facts. The launch's files are written by now,
/// and the policy is planned again for them (a plan depends on what the filesystem holds).
/// `beside` runs in a thread of its own while the sandbox starts. The caller must have applied
/// the launch's environment to this process ([`apply_env`]): the CLI inherits it.
#[cfg(target_os = "linux")]
pub fn run_confined_here(
    launch: &Launch,
    resolved: &Resolved,
    beside: impl FnOnce() + Send + 'static,
) -> Result<u8> {
    check_cli(launch)?;
    let (program, args) = launch
        .cli_argv
        .split_first()
        .context("the launch has no CLI")?;
    let command = sandboxer::Command {
        program: program.into(),
        args: args.iter().map(Into::into).collect(),
        cwd: launch.cwd.clone(),
    };
    let beside = Confiner::with_waited_signals_blocked(|| std::thread::spawn(beside));
    let ended = resolved.confiner.launch(&resolved.policy, &command);
    let _ = beside.join();
    if let Some(message) = ended.message() {
        eprintln!("{message}");
    }
    Ok(ended.exit_code())
}

/// Sets the launch's environment in this process (its variables set, the terminal
/// multiplexer's removed), for a launch run here: the sandbox passes the environment through.
///
/// # Safety
///
/// No other thread may run in this process (changing the environment races with any thread
/// reading it).
pub unsafe fn apply_env(launch: &Launch) {
    for k in &launch.env_removed {
        // SAFETY: the caller guarantees this process runs one thread.
        unsafe { std::env::remove_var(k) };
    }
    for (k, v) in &launch.env_set {
        // SAFETY: as above.
        unsafe { std::env::set_var(k, v) };
    }
}

/// Fails unless the launch's CLI was found (an absolute path).
fn check_cli(launch: &Launch) -> Result<()> {
    let cli = Path::new(&launch.cli_argv[0]);
    if !cli.is_absolute() {
        bail!(
            "{} is not installed (not on PATH; set AGENTWORKS_CLI_{} to its path)",
            launch.cli_argv[0],
            launch.cli.to_ascii_uppercase()
        );
    }
    Ok(())
}

/// The launch's command (wrapper and CLI), its cwd and environment, after checking that its
/// binaries are there. Callers choose how it runs (foreground, spawned and supervised).
pub fn command(launch: &Launch) -> Result<Command> {
    let program = Path::new(&launch.argv[0]);
    if program.is_absolute() && !program.is_file() {
        bail!("{} is not installed here", program.display());
    }
    check_cli(launch)?;
    let mut cmd = match launch.confined {
        true => super::confine::wrapper_command(&launch.argv),
        false => {
            let mut cmd = Command::new(program);
            cmd.args(&launch.argv[1..]);
            cmd
        }
    };
    cmd.current_dir(&launch.cwd);
    for k in &launch.env_removed {
        cmd.env_remove(k);
    }
    cmd.envs(&launch.env_set);
    Ok(cmd)
}
