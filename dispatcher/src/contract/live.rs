//! Running things live: the harness (or a CLI) inside a launch's confinement, with the
//! launch's environment and working folder, under the runner's pty as controlling terminal.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::ContractError;

/// How long one run may take before the runner stops it (by its pid).
pub const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// What to start and how.
pub struct Spawn<'a> {
    pub argv: Vec<String>,
    pub env: &'a BTreeMap<String, String>,
    pub env_removed: &'a [String],
    pub cwd: &'a Path,
    pub stdin: Stdio,
    /// Make stdin the child's controlling terminal (a new session, TIOCSCTTY).
    pub controlling_tty: bool,
    pub timeout: Duration,
}

/// How it ended.
#[derive(Debug)]
pub struct Ran {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Ran {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    pub fn status(&self) -> String {
        match (self.code, self.signal) {
            (Some(c), _) => format!("exit {c}"),
            (None, Some(s)) => format!("killed by signal {s}"),
            _ => "unknown status".into(),
        }
    }
}

/// The environment a contract run starts from: the runner's PATH, the layout's home and
/// session folders, a fixed terminal and locale — nothing else of the runner's environment.
pub fn base_env(home: &Path, xdg_runtime: &Path, tmux_tmpdir: &Path) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    env.insert(
        "PATH".to_string(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
    );
    env.insert("HOME".into(), home.display().to_string());
    for k in ["USER", "LOGNAME"] {
        if let Ok(v) = std::env::var(k) {
            env.insert(k.into(), v);
        }
    }
    env.insert("TERM".into(), "xterm-256color".into());
    env.insert("LANG".into(), "C.UTF-8".into());
    env.insert("XDG_RUNTIME_DIR".into(), xdg_runtime.display().to_string());
    env.insert("TMUX_TMPDIR".into(), tmux_tmpdir.display().to_string());
    env
}

pub fn run(s: Spawn<'_>) -> Result<Ran, ContractError> {
    let (program, args) = s
        .argv
        .split_first()
        .ok_or_else(|| ContractError::Io("nothing to run".into()))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(s.cwd)
        .env_clear()
        .envs(s.env)
        .stdin(s.stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for k in s.env_removed {
        cmd.env_remove(k);
    }
    if s.controlling_tty {
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY as _, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| ContractError::Io(format!("cannot start {program}: {e}")))?;
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let out_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out.read_to_end(&mut b);
        b
    });
    let err_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if start.elapsed() > s.timeout => {
                // Our own child, stopped by its pid.
                let _ = child.kill();
                let _ = child.wait();
                return Err(ContractError::Io(format!(
                    "{program} did not finish in {} s; stopped",
                    s.timeout.as_secs()
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(ContractError::Io(format!("waiting for {program}: {e}"))),
        }
    };
    let stdout = String::from_utf8_lossy(&out_reader.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&err_reader.join().unwrap_or_default()).into_owned();
    Ok(Ran {
        code: status.code(),
        signal: status.signal(),
        stdout,
        stderr,
        elapsed: start.elapsed(),
    })
}

/// The harness command: `sandboxer probe --queries F… --vars V --json`, or a replacement
/// program (test only) given the same arguments.
pub fn harness_argv(program: &[String], queries: &[PathBuf], vars: &Path) -> Vec<String> {
    let mut argv = program.to_vec();
    for q in queries {
        argv.push("--queries".into());
        argv.push(q.display().to_string());
    }
    argv.push("--vars".into());
    argv.push(vars.display().to_string());
    argv.push("--json".into());
    argv
}

/// The part of a launch's argv before the CLI's own command line: the confinement wrapper
/// (`sandboxer exec … --`, `sandbox-exec -f …`), or nothing when unconfined.
pub fn wrapper(argv: &[String], cli_argv: &[String]) -> Result<Vec<String>, ContractError> {
    if !argv.ends_with(cli_argv) {
        return Err(ContractError::Io(
            "the launch's argv does not end with the CLI's command line".into(),
        ));
    }
    Ok(argv[..argv.len() - cli_argv.len()].to_vec())
}
