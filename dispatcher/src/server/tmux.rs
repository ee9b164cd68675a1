//! Chats in tmux, on the dispatcher's own tmux server (its socket inside the state root, where
//! no confined process reaches it).
//!
//! A session is `chat-<chat>`, tagged with the launch id (`@agentworks_launch`) and kept after
//! its process exits (`remain-on-exit`), so the server reads the exit status from tmux — also
//! after a restart — and only then removes the session.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

use crate::launch::{self, Launch};
use crate::state::StateRoot;

const TAG: &str = "@agentworks_launch";

/// Why a tmux command did not do its work.
#[derive(Debug, thiserror::Error)]
pub enum TmuxError {
    /// The launch's own command could not be built (a binary is missing).
    #[error("{0}")]
    Launch(String),
    #[error("cannot run tmux (is it installed?): {0}")]
    Run(std::io::Error),
    /// The tmux found is not one the dispatcher runs outside a sandbox.
    #[error("tmux is not safe to run outside the sandbox: {0}; to fix: {fix}", fix = .0.fix())]
    Untrusted(crate::programs::Untrusted),
    /// tmux ran and refused: its own message.
    #[error("tmux {command} failed: {message}")]
    Failed {
        command: &'static str,
        message: String,
    },
}

type Result<T> = std::result::Result<T, TmuxError>;

/// How a tmux command line that ran ended.
enum Ran {
    /// Its output.
    Done(String),
    /// tmux's message (its stderr, trimmed).
    Refused(String),
}

fn run(mut cmd: Command) -> Result<Ran> {
    let out = cmd.output().map_err(TmuxError::Run)?;
    Ok(if out.status.success() {
        Ran::Done(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Ran::Refused(String::from_utf8_lossy(&out.stderr).trim().to_string())
    })
}

/// tmux's message when no server runs on the socket (so there are no sessions).
fn no_server(message: &str) -> bool {
    message.contains("no server running") || message.contains("error connecting")
}

fn failed(command: &'static str, message: String) -> TmuxError {
    TmuxError::Failed { command, message }
}

pub fn socket(state: &StateRoot) -> PathBuf {
    state.tmux_dir().join("default")
}

pub fn session_name(chat: &crate::ids::ChatId) -> String {
    format!("chat-{chat}")
}

/// One pane (each session has one) as tmux reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pane {
    pub pid: i32,
    pub dead: bool,
    /// The exit code (or 128 + signal) once dead, when tmux knows it.
    pub status: Option<u8>,
    /// The launch id the session was tagged with.
    pub launch: String,
}

/// The product's own tmux configuration: none. A server started without `-f` loads
/// `~/.tmux.conf` (and `$XDG_CONFIG_HOME/tmux/tmux.conf`) from the open home, which any chat
/// can write, and runs its `run-shell` lines outside every sandbox.
const OWN_CONFIG: &str = "/dev/null";

/// A command to the server at `socket`: tmux resolved once to an absolute path
/// ([`crate::programs::tmux`]), checked like a confined launch's enforcer (owned by root or
/// the person, neither it nor its folder writable by another account: a tmux a chat could have
/// replaced would run its code outside), with the product's own configuration.
fn tmux(socket: &Path) -> Result<Command> {
    let path =
        crate::programs::check_file(crate::programs::tmux()).map_err(TmuxError::Untrusted)?;
    let mut cmd = Command::new(path);
    cmd.arg("-f").arg(OWN_CONFIG).arg("-S").arg(socket);
    for k in crate::launch::ENV_REMOVED {
        cmd.env_remove(k);
    }
    Ok(cmd)
}

/// Whether tmux runs here (`tmux -V`), as a tmux the dispatcher may run: checked before it is
/// run at all.
pub fn available() -> Result<()> {
    let path =
        crate::programs::check_file(crate::programs::tmux()).map_err(TmuxError::Untrusted)?;
    let out = Command::new(path)
        .arg("-V")
        .output()
        .map_err(TmuxError::Run)?;
    if !out.status.success() {
        let message = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(failed("-V", message));
    }
    Ok(())
}

/// `tmux new-session` for the launch on the server at `socket`: detached, named
/// [`session_name`], in the launch's working folder and environment, running exactly its
/// command line ([`tmux_command_args`]). More tmux commands may be appended after a
/// `;` argument; [`run_new_session`] runs it.
pub fn new_session(socket: &Path, launch: &Launch) -> Result<Command> {
    // Validates the binaries.
    let base = launch::command(launch).map_err(|e| TmuxError::Launch(format!("{e:#}")))?;
    let mut cmd = tmux(socket)?;
    cmd.args(["new-session", "-d", "-s", &session_name(&launch.chat), "-c"])
        .arg(&launch.cwd);
    for (k, v) in &launch.env_set {
        cmd.arg("-e").arg(format!("{k}={v}"));
    }
    cmd.arg("--")
        .args(tmux_command_args(base.get_program(), base.get_args()));
    for k in &launch.env_removed {
        cmd.env_remove(k);
    }
    Ok(cmd)
}

/// Runs a [`new_session`] command line; a failure carries tmux's own message.
pub fn run_new_session(cmd: Command) -> Result<()> {
    match run(cmd)? {
        Ran::Done(_) => Ok(()),
        Ran::Refused(err) => Err(failed("new-session", err)),
    }
}

/// A tmux session started for a launch.
#[derive(Debug, Serialize)]
pub struct TmuxSession {
    pub socket: PathBuf,
    pub name: String,
}

/// Starts the launch in a detached tmux session on the dispatcher's own server, whose socket
/// lives inside the state root (protected: no confined process can reach it), for the person
/// to attach to (`dispatcher launch --tmux`; the server's own sessions are [`start`]ed).
pub fn start_interactive(state: &StateRoot, launch: &Launch) -> Result<TmuxSession> {
    let socket = socket(state);
    run_new_session(new_session(&socket, launch)?)?;
    Ok(TmuxSession {
        socket,
        name: session_name(&launch.chat),
    })
}

/// A command line as tmux must be given it so that it runs exactly `program args…`.
///
/// tmux splits its own command line at every argument that *ends* in `;` (even after `--`):
/// an argument `x;` would end `new-session`, and the arguments after it would run as tmux
/// commands (`run-shell …`, unconfined). A trailing `;` is written `\;`, which tmux turns back
/// into `;`. And tmux runs a command of a single argument through `sh -c`; that one argument
/// is shell-quoted so the shell runs exactly it.
pub fn tmux_command_args<'a>(
    program: &'a std::ffi::OsStr,
    args: impl Iterator<Item = &'a std::ffi::OsStr>,
) -> Vec<std::ffi::OsString> {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let argv: Vec<&std::ffi::OsStr> = std::iter::once(program).chain(args).collect();
    if argv.len() == 1 {
        let mut quoted = b"'".to_vec();
        for &b in program.as_bytes() {
            if b == b'\'' {
                quoted.extend_from_slice(b"'\\''");
            } else {
                quoted.push(b);
            }
        }
        quoted.push(b'\'');
        return vec![tmux_escape(std::ffi::OsString::from_vec(quoted))];
    }
    argv.into_iter()
        .map(|a| tmux_escape(a.to_os_string()))
        .collect()
}

fn tmux_escape(arg: std::ffi::OsString) -> std::ffi::OsString {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let bytes = arg.as_bytes();
    if bytes.last() != Some(&b';') {
        return arg;
    }
    let mut out = bytes[..bytes.len() - 1].to_vec();
    out.extend_from_slice(b"\\;");
    std::ffi::OsString::from_vec(out)
}

/// Starts the launch in a detached session, tagged with `launch_id`, kept after exit.
pub fn start(socket: &Path, launch: &Launch, launch_id: &str) -> Result<String> {
    let name = session_name(&launch.chat);
    let mut cmd = new_session(socket, launch)?;
    // The same command queue: tmux handles the pane's exit only after these ran.
    cmd.args([";", "set-option", "-w", "-t"])
        .arg(format!("={name}:"))
        .args(["remain-on-exit", "on", ";", "set-option", "-t"])
        .arg(format!("={name}:"))
        .args([TAG, launch_id]);
    run_new_session(cmd)?;
    Ok(name)
}

/// Every session on the server, by name. An absent server is no sessions.
pub fn list(socket: &Path) -> Result<HashMap<String, Pane>> {
    if !socket.exists() {
        return Ok(HashMap::new());
    }
    // `-u`: without a UTF-8 locale (a server started with an empty environment) tmux prints
    // the tabs below as `_`, and no pane would parse.
    let mut cmd = tmux(socket)?;
    cmd.args([
            "-u",
            "list-panes",
            "-a",
            "-F",
            &format!(
                "#{{session_name}}\t#{{pane_pid}}\t#{{pane_dead}}\t#{{pane_dead_status}}\t#{{pane_dead_signal}}\t#{{{TAG}}}"
            ),
        ]);
    let listed = match run(cmd)? {
        Ran::Done(listed) => listed,
        Ran::Refused(err) if no_server(&err) => return Ok(HashMap::new()),
        Ran::Refused(err) => return Err(failed("list-panes", err)),
    };
    let mut panes = HashMap::new();
    for line in listed.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let [name, pid, dead, status, signal, launch] = f.as_slice() else {
            continue;
        };
        let signal = signal.parse::<u8>().ok().filter(|s| *s > 0).map(i32::from);
        let code = status.parse::<u8>().ok().map(i32::from);
        let status = (signal.is_some() || code.is_some()).then(|| launch::exit_code(signal, code));
        panes.insert(
            name.to_string(),
            Pane {
                pid: pid.parse().unwrap_or(0),
                dead: *dead == "1",
                status,
                launch: launch.to_string(),
            },
        );
    }
    Ok(panes)
}

/// Makes the tmux server reap its exited children now.
///
/// tmux 3.3 sometimes misses the SIGCHLD of a pane's process: the pane shows dead (its
/// terminal closed) but the process stays a zombie, without an exit status, until the next
/// SIGCHLD reaches the server. A job that exits at once (`run-shell true`, a fixed command run
/// by the dispatcher's own tmux server) is such a SIGCHLD; tmux then reaps every exited child.
pub fn nudge(socket: &Path) {
    let Ok(mut cmd) = tmux(socket) else {
        return;
    };
    let _ = cmd
        .args(["run-shell", "true"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// What a session's pane shows now (`capture-pane -p`): for a person, or a test, to see why
/// an interactive CLI waits.
pub fn capture(socket: &Path, name: &str) -> Result<String> {
    let mut cmd = tmux(socket)?;
    cmd.args(["capture-pane", "-p", "-t"])
        .arg(format!("={name}:"));
    match run(cmd)? {
        Ran::Done(text) => Ok(text),
        Ran::Refused(err) => Err(failed("capture-pane", err)),
    }
}

/// Removes a session (its process gets SIGHUP if it still runs).
pub fn kill_session(socket: &Path, name: &str) -> Result<()> {
    let mut cmd = tmux(socket)?;
    cmd.args(["kill-session", "-t"]).arg(format!("={name}"));
    match run(cmd)? {
        Ran::Refused(err) if !(err.contains("can't find session") || no_server(&err)) => {
            Err(failed("kill-session", err))
        }
        _ => Ok(()),
    }
}
