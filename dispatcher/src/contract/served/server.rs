//! The `dispatcher serve` the served contract starts for its world, and stops by its own
//! port and pid.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use super::ServedError;
use super::checks::tail;
use crate::contract::fixture::Layout;
use crate::server::client::Client;
use crate::server::tmux;
use crate::state::StateRoot;

/// How long the server has to say where it listens.
const SERVER_START: Duration = Duration::from_secs(20);

/// How to start it: this dispatcher binary, its profiles, the port (0: any free one).
pub(super) struct ServerOptions<'a> {
    pub(super) dispatcher: &'a Path,
    pub(super) profiles_dir: Option<&'a Path>,
    pub(super) port: u16,
}

/// The server we started: stopped by its own port (with this state root's token) and, if it
/// does not end, by its own pid — also when the test fails half-way.
pub(super) struct Server {
    pub(super) child: Child,
    pub(super) port: u16,
    pub(super) pid: u32,
    pub(super) state: StateRoot,
    pub(super) log: PathBuf,
}

impl Server {
    pub(super) fn start(
        o: &ServerOptions<'_>,
        layout: &Layout,
        env: &BTreeMap<String, String>,
    ) -> Result<Server, ServedError> {
        let log = layout.root.join("server.log");
        let log_file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&log)
            .map_err(|e| ServedError::Setup(format!("{}: {e}", log.display())))?;
        let mut cmd = Command::new(o.dispatcher);
        if let Some(p) = &o.profiles_dir {
            cmd.arg("--profiles-dir").arg(p);
        }
        cmd.arg("--state-root")
            .arg(layout.state.path())
            .args(["serve", "--port", &o.port.to_string()])
            .env_clear()
            .envs(env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file));
        let mut child = cmd.spawn().map_err(|e| {
            ServedError::Setup(format!(
                "cannot start {} serve: {e}",
                o.dispatcher.display()
            ))
        })?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut line = String::new();
            let _ = r.read_line(&mut line);
            let _ = tx.send(line);
            // Drained to the end so the server never blocks on a full pipe.
            let _ = std::io::copy(&mut r, &mut std::io::sink());
        });
        let line = rx.recv_timeout(SERVER_START).unwrap_or_default();
        let parsed = parse_listening(&line);
        let Some((port, pid)) = parsed.filter(|(_, pid)| *pid == child.id()) else {
            // Our own child, stopped by its pid.
            let _ = child.kill();
            let _ = child.wait();
            return Err(ServedError::Setup(format!(
                "the server did not start (its first line: {:?}); its log: {}",
                line.trim(),
                tail(&fs::read_to_string(&log).unwrap_or_default(), 800)
            )));
        };
        Ok(Server {
            child,
            port,
            pid,
            state: layout.state.clone(),
            log,
        })
    }

    pub(super) fn log_tail(&self) -> String {
        tail(&fs::read_to_string(&self.log).unwrap_or_default(), 800)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // Asked first, with the state root's token: it stops its chats and its bridges.
            if let Ok(c) = Client::for_port(&self.state, self.port) {
                let _ = c.call("POST", "/v1/shutdown", Some(&json!({ "stop_chats": true })));
            }
            let deadline = Instant::now() + Duration::from_secs(30);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            // Our own child, by its pid, if it did not end.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // The server's tmux ends with its last session; if the server was killed before it
        // stopped its chats, that tmux server is ended through its own socket.
        let socket = tmux::socket(&self.state);
        if socket.exists() {
            let _ = Command::new(crate::programs::tmux())
                .arg("-S")
                .arg(&socket)
                .arg("kill-server")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// `dispatcher serve: listening on 127.0.0.1:PORT (pid PID, state root …)`.
pub(super) fn parse_listening(line: &str) -> Option<(u16, u32)> {
    let rest = line.split("listening on 127.0.0.1:").nth(1)?;
    let (port, rest) = rest.split_once(" (pid ")?;
    let pid = rest.split(|c: char| !c.is_ascii_digit()).next()?;
    Some((port.parse().ok()?, pid.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listening_line_parses() {
        assert_eq!(
            parse_listening(
                "dispatcher serve: listening on 127.0.0.1:41235 (pid 4242, state root /x)\n"
            ),
            Some((41235, 4242))
        );
        assert_eq!(parse_listening(""), None);
        assert_eq!(parse_listening("listening on 0.0.0.0:1 (pid 2,"), None);
    }
}
