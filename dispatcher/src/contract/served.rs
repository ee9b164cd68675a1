//! `dispatcher test cli-sandbox-contract --provider NAME`: the chat contract run through a
//! running server, so that the grants under test are the ones the *server* wrote.
//!
//! `dispatcher contract` plans each launch itself (the same `launch::plan` the server uses),
//! which shows the planner is right but not that the server hands its chats that plan. Here
//! the contract's world (the fixture state root, markers, fixtures) gets a real
//! `dispatcher serve` of its own, started as our child on a loopback port and stopped by that
//! port and pid; a real chat of the provider's CLI is launched through the server's API on
//! `wf-main` with `wf-attached` (ro) and `wf-attached-rw` (rw) attached, in full mode. Then:
//!
//! 1. **server**: what the server did for that chat — listed running, the `launching` /
//!    `started` / `stop_requested` / `exited` events, the bridge socket served, the policy
//!    the journal keeps (the bridge's copy) byte-identical to the file `sandboxer exec`
//!    enforces and named by the recorded argv, and the CLI itself running in a mount
//!    namespace other than the server's;
//! 2. **harness**: the probes of the chat contract, run inside the wrapper the server recorded
//!    in `started` (`sandboxer exec --policy <runtime>/.agentworks/policy.toml …`), i.e. under
//!    the server's policy file itself, with evidence and verdicts exactly as
//!    `dispatcher contract` decides them;
//! 3. **model**: when the CLI is logged in, the real CLI is launched headless through the
//!    server and asked to run the harness script with its own shell tool (up to three
//!    attempts); the evidence is read off the disk and the fixtures, never from its answer.
//!    Otherwise the part says `skipped: not logged in`.
//!
//! `docs/contract.md` ("Through the server") says what this covers and what it does not.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sandboxer::Target;
use serde::Serialize;
use serde_json::{Value, json};

use super::fixture::{Fixtures, Layout, Variant};
use super::mutate::Mutation;
use super::report::{Column, How, Machine};
use super::{ContractError, HarnessOutput, Options, Runner, load_sets, sh_quote};
use crate::adapter::{self, Adapter};
use crate::modes::Mode;
use crate::platform;
use crate::server::client::Client;
use crate::server::journal::Record;
use crate::server::tmux;
use crate::state::StateRoot;

/// What the model part says when the CLI has no login here.
pub const NOT_LOGGED_IN: &str = "skipped: not logged in";
/// How often the model is asked to run the harness before the part fails.
pub const MODEL_ATTEMPTS: usize = 3;
/// How long one model run may take.
const MODEL_TIMEOUT: Duration = Duration::from_secs(600);
/// How long the server has to say where it listens.
const SERVER_START: Duration = Duration::from_secs(20);

#[derive(Debug, thiserror::Error)]
pub enum ServedError {
    /// Bad input or a machine that cannot run the test: nothing was started.
    #[error("{0}")]
    Usage(String),
    /// The world or the server could not be set up (everything started was stopped).
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    Contract(#[from] ContractError),
}

/// `dispatcher test …`.
#[derive(clap::Subcommand, Debug)]
pub enum TestCmd {
    /// The sandbox contract through a running server: a real chat of one CLI, launched by a
    /// fresh `dispatcher serve`, and the contract's probes run under the policy that server
    /// wrote for it.
    #[command(name = "cli-sandbox-contract", long_about = LONG_ABOUT)]
    CliSandboxContract(ServedArgs),
}

const LONG_ABOUT: &str = "\
The sandbox contract through a running server, for one CLI.

Builds a fresh temporary world (a state root made by the dispatcher's own code with workflows
wf-main, wf-attached, wf-attached-rw, wf-other and chats chat-1, chat-2; markers planted in
protected files; a home; a tmux server, listeners, an outside process and a pty as
`dispatcher contract` has them), starts `dispatcher serve` for it on a free 127.0.0.1 port as
a child of this command, and launches a real chat of the CLI through the server's API:
chat-1 on wf-main with wf-attached (read-only) and wf-attached-rw (read-write) attached, in
full mode, in the server's own tmux. Then three parts:

  server   the server's own facts: the chat listed running with mode full; its event log
           (launching, started with the mode, stop_requested, exited); its bridge socket
           in the runtime answering; the policy the server journaled (the bridge's copy)
           byte-identical to <runtime>/.agentworks/policy.toml, the file the recorded argv
           hands `sandboxer exec`; the CLI's process in a mount namespace other than the
           server's.
  harness  every Linux probe of the chat contract (queries/contract.toml, escapes.toml),
           run with `sandboxer probe` in place of the CLI inside the wrapper the server
           recorded (`sandboxer exec --policy <the server's file> … --`): the grants tested
           are the server's, not this command's planning. Verdicts from evidence, exactly as
           `dispatcher contract` decides them.
  model    only when the CLI is logged in (a login file of its adapter in $HOME, or one of
           its adapter's login_env variables set): the CLI is launched headless through the
           server and asked to run the harness script with its own shell tool, up to three
           attempts; the verdicts come from the evidence, never from its answer. Otherwise
           it says \"skipped: not logged in\".

The server is stopped (with its chats) by its own port and pid at the end, also on error; the
temporary folder is removed unless --keep. Linux only (live).

Exit status: 0 every check and probe passed; 1 something failed (the tables say what);
2 bad input or setup error (unknown provider, CLI not installed, no sandbox here).";

#[derive(clap::Args, Debug)]
pub struct ServedArgs {
    /// The CLI adapter: claude, codex, gemini, pi, opencode, cursor, agy.
    #[arg(long, value_name = "NAME")]
    pub provider: String,
    /// The server's port on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Keep the temporary folder (its path is printed).
    #[arg(long)]
    pub keep: bool,
    /// Where to make the temporary folder (default $TMPDIR, else /tmp).
    #[arg(long, value_name = "DIR")]
    pub tmp_dir: Option<PathBuf>,
    /// TEST ONLY: make the server break every launch's policy (widen-grant,
    /// widen-workflow-grant, empty-refuse, unblock-launchers, open-ways-out). Never passes.
    #[arg(long, value_name = "HOW", hide = true)]
    pub break_policy: Option<String>,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct ServedOptions {
    pub provider: String,
    pub port: u16,
    pub keep: bool,
    /// Where to make the world's state root (a new or empty folder), instead of inside the
    /// temporary folder. Never an existing state root.
    pub state_root: Option<PathBuf>,
    pub profiles_dir: Option<PathBuf>,
    pub tmp_dir: Option<PathBuf>,
    /// This dispatcher binary: the server and the outside process are it.
    pub dispatcher: PathBuf,
    /// The person's home: only looked at for the CLI's login files.
    pub home: PathBuf,
    /// TEST ONLY: handed to the server as [`crate::server::BREAK_POLICY_ENV`].
    pub mutation: Option<Mutation>,
}

/// One fact about the server's handling of the chat.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub check: String,
    pub pass: bool,
    pub detail: String,
}

/// Part 1.
#[derive(Clone, Debug, Serialize)]
pub struct ServerPart {
    pub port: u16,
    pub pid: u32,
    pub chat: String,
    pub workflow: String,
    pub attach: Vec<String>,
    pub launch: Option<String>,
    pub checks: Vec<Check>,
}

/// Part 3.
#[derive(Clone, Debug, Serialize)]
pub struct ModelPart {
    /// `skipped: not logged in`, `ran`, or `failed`.
    pub status: String,
    /// What showed the login (a file or a variable name, never its content), or why none.
    pub detail: String,
    /// What each attempt that did not produce a report came to.
    pub attempts: Vec<String>,
    /// The probes, decided from the evidence of the run the model made.
    pub column: Option<Column>,
    /// Probes whose verdict differs from the harness part's (information: a structured run
    /// has no terminal, so e.g. TIOCSTI has nothing to push into).
    pub differs_from_harness: Vec<String>,
}

impl ModelPart {
    pub fn passed(&self) -> bool {
        match &self.column {
            Some(c) => self.status == "ran" && c.passed(),
            None => self.status == NOT_LOGGED_IN,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ServedReport {
    pub provider: String,
    pub cli_binary: PathBuf,
    pub machine: Machine,
    pub server: ServerPart,
    pub harness: Column,
    pub model: ModelPart,
    /// Failures of the run itself (a fixture, the control run).
    pub errors: Vec<String>,
    /// The end of the server's stderr (printed with a failure).
    pub server_log: Option<String>,
    pub test_hooks: Vec<String>,
    pub results_passed: bool,
    pub passed: bool,
    pub elapsed_ms: u64,
    pub kept: Option<PathBuf>,
}

impl ServedReport {
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        for h in &self.test_hooks {
            let _ = writeln!(s, "TEST ONLY: {h}");
        }
        let sv = &self.server;
        let _ = writeln!(
            s,
            "== part 1 · server · {} chat {} on {} (attached: {}) through 127.0.0.1:{} (server pid {}, launch {})",
            self.provider,
            sv.chat,
            sv.workflow,
            sv.attach.join(", "),
            sv.port,
            sv.pid,
            sv.launch.as_deref().unwrap_or("-")
        );
        let _ = writeln!(s, "   {:<20} {:<5} DETAIL", "CHECK", "PASS");
        for c in &sv.checks {
            let _ = writeln!(
                s,
                "   {:<20} {:<5} {}",
                c.check,
                if c.pass { "ok" } else { "FAIL" },
                c.detail
            );
        }
        let h = &self.harness;
        let _ = writeln!(
            s,
            "== part 2 · harness under the server's policy · {} ({}, {} ms)",
            h.header(),
            h.confinement,
            h.elapsed_ms
        );
        h.table(&mut s);
        let m = &self.model;
        let _ = writeln!(s, "== part 3 · model-driven · {}: {}", m.status, m.detail);
        for (i, a) in m.attempts.iter().enumerate() {
            let _ = writeln!(s, "   attempt {}: {a}", i + 1);
        }
        if let Some(c) = &m.column {
            c.table(&mut s);
            if !m.differs_from_harness.is_empty() {
                let _ = writeln!(
                    s,
                    "   differs from part 2: {}",
                    m.differs_from_harness.join(", ")
                );
            }
        }
        for e in &self.errors {
            let _ = writeln!(s, "ERROR: {e}");
        }
        if let (false, Some(log)) = (self.results_passed, &self.server_log) {
            let _ = writeln!(s, "the server's log ends: {log}");
        }
        let checks_failed = sv.checks.iter().filter(|c| !c.pass).count();
        let _ = writeln!(
            s,
            "cli-sandbox-contract {}: server {} checks, {checks_failed} failed; harness {} probes, {} failed{}; model {}; {} errors; {:.1} s: {}",
            self.provider,
            sv.checks.len(),
            h.results.len(),
            h.failures().count(),
            if h.error.is_some() { " (not run)" } else { "" },
            match &m.column {
                Some(c) => format!(
                    "{} probes, {} failed",
                    c.results.len(),
                    c.failures().count()
                ),
                None => m.status.clone(),
            },
            self.errors.len(),
            self.elapsed_ms as f64 / 1000.0,
            if self.passed { "PASS" } else { "FAIL" }
        );
        if let Some(k) = &self.kept {
            let _ = writeln!(s, "kept: {}", k.display());
        }
        s
    }
}

/// How the CLI is logged in here, if it is.
#[derive(Debug, Clone)]
enum Login {
    No,
    /// The person's login files (absolute) and where they go below the world's home.
    Files(Vec<(PathBuf, PathBuf)>),
    /// A variable of the adapter's `login_env`, and its value (handed to the server only).
    Env(String, String),
}

/// Decided from the adapter's data: a `config_home.login` file present in the person's
/// home, else a `login_env` variable set. Nothing is read from the files.
fn login_state(a: &Adapter, home: &Path) -> Login {
    let mut files = Vec::new();
    for l in &a.config_home.login {
        // Validated at load: every `from` starts with "{home}/".
        let Some(rel) = l.from.get_ref().strip_prefix("{home}/") else {
            continue;
        };
        if rel.contains('{') {
            continue;
        }
        let p = home.join(rel);
        if p.is_file() {
            files.push((p, PathBuf::from(rel)));
        }
    }
    if !files.is_empty() {
        return Login::Files(files);
    }
    for v in a.login_env.iter().flat_map(|v| v.get_ref().iter()) {
        if let Ok(val) = std::env::var(v)
            && !val.is_empty()
        {
            return Login::Env(v.clone(), val);
        }
    }
    Login::No
}

/// The server we started: stopped by its own port (with this state root's token) and, if it
/// does not end, by its own pid — also when the test fails half-way.
struct Server {
    child: Child,
    port: u16,
    pid: u32,
    state: StateRoot,
    log: PathBuf,
}

impl Server {
    fn start(
        o: &ServedOptions,
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
        let mut cmd = Command::new(&o.dispatcher);
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

    fn log_tail(&self) -> String {
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
            let _ = Command::new("tmux")
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
fn parse_listening(line: &str) -> Option<(u16, u32)> {
    let rest = line.split("listening on 127.0.0.1:").nth(1)?;
    let (port, rest) = rest.split_once(" (pid ")?;
    let pid = rest.split(|c: char| !c.is_ascii_digit()).next()?;
    Some((port.parse().ok()?, pid.parse().ok()?))
}

fn tail(s: &str, n: usize) -> String {
    let s = s.trim();
    let cut = s.len().saturating_sub(n);
    let cut = (cut..=s.len())
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(0);
    s[cut..].to_string()
}

fn check(checks: &mut Vec<Check>, name: &str, r: Result<String, String>) {
    let (pass, detail) = match r {
        Ok(d) => (true, d),
        Err(d) => (false, d),
    };
    checks.push(Check {
        check: name.to_string(),
        pass,
        detail,
    });
}

/// Runs the test.
pub fn run(o: &ServedOptions) -> Result<ServedReport, ServedError> {
    let started = Instant::now();
    let host = match Target::host() {
        Some(Target::Linux) => Target::Linux,
        _ => {
            return Err(ServedError::Usage(
                "cli-sandbox-contract runs the contract live and needs Linux (on a Mac: scripts/mac-selftest.sh)".into(),
            ));
        }
    };
    let all = adapter::load_all(o.profiles_dir.as_deref()).map_err(ContractError::from)?;
    let a = adapter::find(&all, &o.provider)
        .map_err(|e| ServedError::Usage(format!("--provider {:?}: {e}", o.provider)))?;
    let cli_binary = adapter::locate_binary(&a).ok_or_else(|| {
        ServedError::Usage(format!(
            "{} ({}) is not installed: `{}` is not on PATH. scripts/install-clis.sh installs claude, codex, gemini, pi and opencode into .tools/clis/bin (put that on PATH); or set AGENTWORKS_CLI_{} to its path",
            a.name,
            a.display_name,
            a.binary,
            a.name.to_ascii_uppercase().replace('-', "_")
        ))
    })?;
    if !a.modes.contains(&Mode::Full) {
        return Err(ServedError::Usage(format!(
            "{} has no full mode: there are no native tools to confine",
            a.name
        )));
    }
    let login = login_state(&a, &o.home);
    let copts = Options {
        clis: vec![a.name.clone()],
        chat: true,
        steps: false,
        live: true,
        keep: o.keep,
        profiles_dir: o.profiles_dir.clone(),
        queries_dir: None,
        tmp_dir: o.tmp_dir.clone(),
        dispatcher: o.dispatcher.clone(),
        mutation: None,
        harness: None,
    };
    let sets = load_sets(&copts)?;
    let layout = Layout::create_with_state(o.tmp_dir.as_deref(), o.keep, o.state_root.as_deref())?;
    // The login is carried over the way a launch carries it: from the home the server runs
    // with (the world's), so the person's own files are copied there first.
    if let Login::Files(files) = &login {
        for (from, rel) in files {
            let to = layout.home.join(rel);
            if let Some(parent) = to.parent() {
                fs::DirBuilder::new()
                    .mode(0o700)
                    .recursive(true)
                    .create(parent)
                    .map_err(|e| ServedError::Setup(format!("{}: {e}", parent.display())))?;
            }
            fs::copy(from, &to)
                .and_then(|_| fs::set_permissions(&to, fs::Permissions::from_mode(0o600)))
                .map_err(|e| {
                    ServedError::Setup(format!(
                        "copying the login {} into the test home: {e}",
                        from.display()
                    ))
                })?;
        }
    }
    let fixtures = Fixtures::start(&layout, &o.dispatcher)?;
    let harness_files = super::write_harness_files(&layout, &sets)?;
    let mut r = Runner {
        opts: &copts,
        fixtures: Some(fixtures),
        layout,
        host: Some(host),
        runs: 0,
        controls: BTreeMap::new(),
        errors: Vec::new(),
        harness_files,
    };
    let chat_files: Vec<PathBuf> = sets.files[..2]
        .iter()
        .map(|(n, _)| r.harness_files[n].clone())
        .collect();
    let sandboxer = platform::locate_sandboxer(&o.dispatcher);

    // The server's environment is the contract's clean one (its launches inherit it), plus
    // what locates the binaries, the login variable when that is the login, and the hook.
    let mut env = r.base_env();
    for (k, v) in std::env::vars() {
        if k == "SANDBOXER_BIN" || k.starts_with("AGENTWORKS_CLI_") {
            env.insert(k, v);
        }
    }
    if let Login::Env(k, v) = &login {
        env.insert(k.clone(), v.clone());
    }
    if let Some(m) = o.mutation {
        env.insert(crate::server::BREAK_POLICY_ENV.into(), m.as_str().into());
    }
    // Declared after the runner: dropped (stopped) before the world it serves is removed.
    let server = Server::start(o, &r.layout, &env)?;
    let client = Client::for_port(&r.layout.state, server.port)
        .map_err(|e| ServedError::Setup(format!("{e:#}")))?;
    // After the server read config.json: the unconfined control run writes into it (the
    // `config-json-write` probe succeeds there, as it must).
    r.control(Variant::Chat, &sets.chat, &chat_files, &sandboxer);

    let mut part = ServerPart {
        port: server.port,
        pid: server.pid,
        chat: r.layout.chat.to_string(),
        workflow: r.layout.workflow.to_string(),
        attach: vec![
            r.layout.attached.to_string(),
            format!("{}:rw", r.layout.attached_rw),
        ],
        launch: None,
        checks: Vec::new(),
    };
    let harness = server_and_harness(
        &mut r,
        &a,
        &client,
        &server,
        &sets.chat,
        &chat_files,
        &sandboxer,
        &mut part,
    );
    let model = match &login {
        Login::No => ModelPart {
            status: NOT_LOGGED_IN.into(),
            detail: format!(
                "no login file of the adapter ({}) in {} and none of its login_env variables ({}) set",
                if a.config_home.login.is_empty() {
                    "it names none".to_string()
                } else {
                    a.config_home
                        .login
                        .iter()
                        .map(|l| l.from.get_ref().as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                },
                o.home.display(),
                a.login_env
                    .as_ref()
                    .map(|v| v.get_ref().join(", "))
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "it names none".into())
            ),
            attempts: Vec::new(),
            column: None,
            differs_from_harness: Vec::new(),
        },
        login => model_part(
            &mut r,
            &a,
            &client,
            &sets.chat,
            &chat_files,
            &sandboxer,
            login,
            &harness,
        ),
    };
    // The server's own account, for whoever reads a failure.
    let server_log = Some(server.log_tail()).filter(|l| !l.is_empty());
    drop(client);
    drop(server);

    let mut test_hooks = Vec::new();
    if let Some(m) = o.mutation {
        test_hooks.push(format!(
            "--break-policy {}: the server broke every launch's policy",
            m.as_str()
        ));
    }
    let results_passed = r.errors.is_empty()
        && part.checks.iter().all(|c| c.pass)
        && !part.checks.is_empty()
        && harness.passed()
        && !harness.results.is_empty()
        && model.passed();
    let kept = r.layout.keep().then(|| r.layout.root.clone());
    Ok(ServedReport {
        provider: a.name.clone(),
        cli_binary,
        machine: super::machine(Vec::new()),
        server: part,
        harness,
        model,
        errors: std::mem::take(&mut r.errors),
        server_log,
        passed: results_passed && test_hooks.is_empty(),
        test_hooks,
        results_passed,
        elapsed_ms: started.elapsed().as_millis() as u64,
        kept,
    })
}

fn launch_body(r: &Runner<'_>, a: &Adapter, supervision: &str, cli_args: Vec<String>) -> Value {
    json!({
        "cli": a.name,
        "chat": r.layout.chat.to_string(),
        "workflow": r.layout.workflow.to_string(),
        "attach": [r.layout.attached.to_string(), format!("{}:rw", r.layout.attached_rw)],
        "mode": "full",
        "supervision": supervision,
        "cli_args": cli_args,
    })
}

/// Every event of `launch` in the chat's log.
fn launch_events(client: &Client, chat: &str, launch: &str) -> Result<Vec<Value>, String> {
    let all = client.events(chat, 0).map_err(|e| format!("{e:#}"))?;
    // A launch's events run from its `launching` to the next launch's.
    let start = all
        .iter()
        .position(|e| e["event"] == "launching" && e["launch"] == launch)
        .ok_or_else(|| format!("no `launching` event for launch {launch}"))?;
    let end = all[start + 1..]
        .iter()
        .position(|e| e["event"] == "launching")
        .map_or(all.len(), |i| start + 1 + i);
    Ok(all[start..end].to_vec())
}

/// Parts 1 and 2.
#[allow(clippy::too_many_arguments)]
fn server_and_harness(
    r: &mut Runner<'_>,
    a: &Adapter,
    client: &Client,
    server: &Server,
    probes: &[sandboxer::probe::Probe],
    queries: &[PathBuf],
    sandboxer: &Path,
    part: &mut ServerPart,
) -> Column {
    let started = Instant::now();
    let host = r.host.expect("live");
    let mut col = r.column(&a.name, Variant::Chat, host, Mode::Full.as_str(), How::Live);
    let chat = r.layout.chat.to_string();
    let checks = &mut part.checks;

    // Launched through the API, in the server's tmux: an interactive CLI waits there (for a
    // prompt or a login) so its process, namespaces and bridge can be looked at while it runs.
    let body = launch_body(r, a, "tmux", Vec::new());
    let view = match client.call("POST", "/v1/chats/launch", Some(&body)) {
        Ok(reply) if reply.status == 201 => reply.body,
        Ok(reply) => {
            let msg = reply.body["error"]["message"]
                .as_str()
                .unwrap_or("")
                .to_string();
            check(
                checks,
                "launched",
                Err(format!("the server answered {}: {msg}", reply.status)),
            );
            col.error = Some("no chat was launched: nothing to run the harness under".into());
            return col;
        }
        Err(e) => {
            check(checks, "launched", Err(format!("{e:#}")));
            col.error = Some("no chat was launched: nothing to run the harness under".into());
            return col;
        }
    };
    let launch = view["launch"].as_str().unwrap_or("").to_string();
    part.launch = Some(launch.clone());
    check(
        checks,
        "launched",
        if view["state"] == "running" && view["mode"] == "full" && view["confined"] == true {
            Ok(format!(
                "201: running in full mode, confined ({})",
                view["reason"].as_str().unwrap_or("")
            ))
        } else {
            Err(format!("201, but the view says {view}"))
        },
    );
    check(
        checks,
        "listed",
        match client.call("GET", "/v1/chats", None).and_then(|r| r.ok()) {
            Ok(list) => {
                let me = list["chats"]
                    .as_array()
                    .and_then(|cs| cs.iter().find(|c| c["chat"] == chat.as_str()).cloned());
                match me {
                    Some(c) if c["state"] == "running" && c["launch"] == launch.as_str() => {
                        Ok(format!(
                            "GET /v1/chats: {chat} running, launch {launch}, {} supervision",
                            c["supervision"].as_str().unwrap_or("?")
                        ))
                    }
                    Some(c) => Err(format!("GET /v1/chats lists {c}")),
                    None => Err(format!("GET /v1/chats does not list {chat}")),
                }
            }
            Err(e) => Err(format!("{e:#}")),
        },
    );

    // What the server recorded: the started argv (the wrapper) and the journal's policy.
    let argv: Vec<String> = match launch_events(client, &chat, &launch) {
        Ok(evs) => evs
            .iter()
            .find(|e| e["event"] == "started")
            .and_then(|e| serde_json::from_value(e["argv"].clone()).ok())
            .unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    let record = Record::load(&Record::path(&r.layout.state, &r.layout.chat));
    let runtime = r.layout.state.runtime(&r.layout.chat);
    let policy_file = record.as_ref().ok().map(|rec| rec.policy_file.clone());
    check(
        checks,
        "policy-identical",
        policy_identical(&record, &argv, &runtime),
    );
    check(
        checks,
        "bridge-served",
        bridge_served(&runtime.join(crate::bridge::SOCKET_NAME)),
    );
    let confined = cli_confined(&r.layout.state, &r.layout.chat, server.pid);
    let cli_pid = confined.as_ref().ok().map(|(_, pid)| *pid);
    check(checks, "cli-confined", confined.map(|(d, _)| d));
    check(
        checks,
        "bridge-own-namespace",
        match cli_pid {
            Some(pid) => bridge_own_namespace(
                &runtime.join(crate::bridge::SOCKET_NAME),
                pid,
                &r.layout.state.config_json(),
                &runtime,
            ),
            None => Err("no confined CLI process to look through".into()),
        },
    );

    // Part 2: the harness inside the server's own wrapper.
    match harness_in_server_wrapper(
        r,
        a,
        &argv,
        policy_file.as_deref(),
        probes,
        queries,
        sandboxer,
    ) {
        Ok((how, results)) => {
            col.confinement = how;
            col.results = results;
        }
        Err(e) => col.error = Some(e),
    }

    // Stopped through the API; its end must be in the log.
    check(
        checks,
        "stopped",
        match client
            .call(
                "POST",
                &format!("/v1/chats/{chat}/stop"),
                Some(&json!({"grace_seconds": 2})),
            )
            .and_then(|r| r.ok())
        {
            Ok(v) if v["state"] == "exited" => Ok(format!(
                "POST …/stop: exited ({})",
                v["ended"]["how"].as_str().unwrap_or("?")
            )),
            Ok(v) => Err(format!("POST …/stop answered {v}")),
            Err(e) => Err(format!("{e:#}")),
        },
    );
    check(checks, "events", events_check(client, &chat, &launch));
    col.elapsed_ms = started.elapsed().as_millis() as u64;
    col
}

/// The journal's policy (the bridge's copy), the file in the runtime and the argv's
/// `--policy` must be one and the same, inside the chat's read-only launch folder.
fn policy_identical(
    record: &Result<Record, String>,
    argv: &[String],
    runtime: &Path,
) -> Result<String, String> {
    let rec = record
        .as_ref()
        .map_err(|e| format!("the journal record: {e}"))?;
    let on_disk =
        fs::read(&rec.policy_file).map_err(|e| format!("{}: {e}", rec.policy_file.display()))?;
    if on_disk != rec.policy_text.as_bytes() {
        return Err(format!(
            "{} ({} bytes) differs from the journal's copy ({} bytes)",
            rec.policy_file.display(),
            on_disk.len(),
            rec.policy_text.len()
        ));
    }
    let named = argv
        .windows(2)
        .find(|w| w[0] == "--policy")
        .map(|w| PathBuf::from(&w[1]));
    if named.as_deref() != Some(rec.policy_file.as_path()) {
        return Err(format!(
            "the started argv names {:?}, the journal {}",
            named,
            rec.policy_file.display()
        ));
    }
    let launch_dir = runtime.join(crate::grants::LAUNCH_DIR);
    if rec.policy_file.parent() != Some(launch_dir.as_path()) {
        return Err(format!(
            "{} is not in the chat's launch folder {}",
            rec.policy_file.display(),
            launch_dir.display()
        ));
    }
    Ok(format!(
        "{} ({} bytes) = the journal's copy = the started argv's --policy",
        rec.policy_file.display(),
        on_disk.len()
    ))
}

/// The chat's bridge socket answers `tools/list` (we connect as the server's own user, as the
/// shim inside the sandbox does).
fn bridge_served(socket: &Path) -> Result<String, String> {
    use std::os::unix::fs::FileTypeExt;
    let m = fs::symlink_metadata(socket).map_err(|e| format!("{}: {e}", socket.display()))?;
    if !m.file_type().is_socket() {
        return Err(format!("{} is not a socket", socket.display()));
    }
    let v = bridge_request(
        socket,
        &json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}),
    )?;
    let tools = v["result"]["tools"].as_array().map(Vec::len).unwrap_or(0);
    if tools == 0 {
        return Err(format!("tools/list answered {}", tail(&v.to_string(), 300)));
    }
    Ok(format!(
        "{} answers tools/list with {tools} tools",
        socket.display()
    ))
}

/// One request on the chat's bridge socket, one answer.
fn bridge_request(socket: &Path, request: &Value) -> Result<Value, String> {
    use std::os::unix::net::UnixStream;
    let mut s = UnixStream::connect(socket)
        .map_err(|e| format!("connecting to {}: {e}", socket.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut line = request.to_string();
    line.push('\n');
    s.write_all(line.as_bytes())
        .map_err(|e| format!("writing to {}: {e}", socket.display()))?;
    let mut line = String::new();
    BufReader::new(&mut s)
        .read_line(&mut line)
        .map_err(|e| format!("reading from {}: {e}", socket.display()))?;
    serde_json::from_str(line.trim()).map_err(|e| format!("its answer is not JSON: {e}"))
}

/// The chat's bridge never resolves through the confined CLI's mount namespace (its
/// `/proc/<pid>/root` and `cwd`) or `/proc/self/root`: read and list there are refused (as
/// magic links, or as /proc), while the same folder by its plain path is listed (the control).
fn bridge_own_namespace(
    socket: &Path,
    cli_pid: i32,
    config_json: &Path,
    runtime: &Path,
) -> Result<String, String> {
    let call = |tool: &str, path: &Path| {
        bridge_request(
            socket,
            &json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
                    "params":{"name": tool, "arguments": {"path": path}}}),
        )
        .map(|v| {
            let text = v["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            (v["result"]["isError"].as_bool(), text)
        })
    };
    let (ok, text) = call("list_dir", runtime)?;
    if ok != Some(false) {
        return Err(format!(
            "control: list_dir {} was not answered: {}",
            runtime.display(),
            tail(&text, 300)
        ));
    }
    let inside = |p: &Path| p.strip_prefix("/").unwrap_or(p).to_path_buf();
    let other_root = PathBuf::from(format!("/proc/{cli_pid}/root"));
    let cases = [
        ("read_file", other_root.join(inside(config_json))),
        ("list_dir", other_root.join(inside(runtime))),
        ("list_dir", PathBuf::from(format!("/proc/{cli_pid}/cwd"))),
        (
            "list_dir",
            Path::new("/proc/self/root").join(inside(runtime)),
        ),
    ];
    for (tool, path) in &cases {
        let (error, text) = call(tool, path)?;
        // A magic link is refused as one; where the kernel denies looking at the CLI's
        // process at all, the lookup stops on /proc, refused as such.
        let why = text.contains("magic link") || text.contains("on /proc");
        if error != Some(true) || !text.starts_with("refused: ") || !why {
            return Err(format!(
                "{tool} {} was not refused as a magic link or /proc: {}",
                path.display(),
                tail(&text, 300)
            ));
        }
    }
    Ok(format!(
        "{} is listed by its path; read and list through /proc/{cli_pid}/root, /proc/{cli_pid}/cwd \
         and /proc/self/root are refused",
        runtime.display()
    ))
}

/// The CLI's own process (a descendant of the tmux pane's `sandboxer exec` that is not
/// `sandboxer` itself) runs in a mount namespace other than the server's; none runs in the
/// server's. With the CLI's pid.
fn cli_confined(
    state: &StateRoot,
    chat: &crate::ids::ChatId,
    server_pid: u32,
) -> Result<(String, i32), String> {
    let panes = tmux::list(&tmux::socket(state)).map_err(|e| format!("{e:#}"))?;
    let pane = panes.get(&tmux::session_name(chat)).ok_or_else(|| {
        format!(
            "no tmux session {} on the server's tmux (it has: {:?})",
            tmux::session_name(chat),
            panes.keys().collect::<Vec<_>>()
        )
    })?;
    if pane.dead {
        return Err(format!(
            "the chat's pane is dead (status {:?}): the CLI ended at once",
            pane.status
        ));
    }
    let ns = |pid: i32| fs::read_link(format!("/proc/{pid}/ns/mnt")).ok();
    let server_ns = ns(server_pid as i32).ok_or("cannot read the server's mount namespace")?;
    let top_exe = fs::read_link(format!("/proc/{}/exe", pane.pid)).unwrap_or_default();
    // A CLI takes a moment to start under its wrapper.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let mut found = Vec::new();
        for pid in descendants(pane.pid) {
            let Ok(exe) = fs::read_link(format!("/proc/{pid}/exe")) else {
                continue;
            };
            if exe.file_name() == top_exe.file_name() {
                continue;
            }
            found.push((pid, exe, ns(pid)));
        }
        if let Some((pid, exe, _)) = found
            .iter()
            .find(|(_, _, n)| n.as_ref() == Some(&server_ns))
        {
            return Err(format!(
                "pid {pid} ({}) runs in the server's mount namespace {}",
                exe.display(),
                server_ns.display()
            ));
        }
        if let Some((pid, exe, Some(n))) = found.first() {
            return Ok((
                format!(
                    "pid {pid} ({}) under sandboxer exec (pid {}) runs in mount namespace {}, the server in {}",
                    exe.display(),
                    pane.pid,
                    n.display(),
                    server_ns.display()
                ),
                *pid,
            ));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "no process of the CLI under sandboxer exec (pid {}) within 15 s",
                pane.pid
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every descendant of `root`, from `/proc/*/stat`.
fn descendants(root: i32) -> Vec<i32> {
    let mut parent = BTreeMap::new();
    for e in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`; comm may hold anything, so read after the last ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if let Some(pp) = ppid {
            parent.insert(pid, pp);
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (&c, &pp) in &parent {
            if pp == p && !out.contains(&c) {
                out.push(c);
                frontier.push(c);
            }
        }
    }
    out
}

fn events_check(client: &Client, chat: &str, launch: &str) -> Result<String, String> {
    let evs = launch_events(client, chat, launch)?;
    let kinds: Vec<&str> = evs.iter().filter_map(|e| e["event"].as_str()).collect();
    let started = evs
        .iter()
        .find(|e| e["event"] == "started")
        .ok_or_else(|| format!("no `started` event: {kinds:?}"))?;
    if started["mode"] != "full" || started["confined"] != true {
        return Err(format!(
            "`started` says mode {} confined {}",
            started["mode"], started["confined"]
        ));
    }
    let ends: Vec<&str> = kinds
        .iter()
        .copied()
        .filter(|k| matches!(*k, "exited" | "lost" | "launch_failed"))
        .collect();
    if !kinds.contains(&"stop_requested") || ends != ["exited"] {
        return Err(format!(
            "expected launching, started, stop_requested and one exited; got {kinds:?}"
        ));
    }
    Ok(format!(
        "{} (started: mode full, confined; {})",
        kinds.join(", "),
        started["reason"].as_str().unwrap_or("")
    ))
}

/// The harness inside the wrapper the server recorded (everything of its argv before the
/// CLI's own command line), so it runs under the server's policy file. The environment is
/// the launch's as `launch::plan` computes it (variables only; no grant comes from it).
fn harness_in_server_wrapper(
    r: &mut Runner<'_>,
    a: &Adapter,
    argv: &[String],
    policy_file: Option<&Path>,
    probes: &[sandboxer::probe::Probe],
    queries: &[PathBuf],
    sandboxer: &Path,
) -> Result<(String, Vec<super::report::ProbeResult>), String> {
    let host = r.host.expect("live");
    if argv.is_empty() {
        return Err("the server recorded no `started` argv: nothing to run under".into());
    }
    // The Linux wrapper ends with `--`; what follows is the CLI's command line.
    let cut = argv.iter().position(|w| w == "--").ok_or_else(|| {
        format!("the server's argv has no `sandboxer exec … --` wrapper: {argv:?}")
    })?;
    let wrapper = argv[..=cut].to_vec();
    if !wrapper
        .windows(2)
        .any(|w| w[0] == "--policy" && Some(Path::new(&w[1])) == policy_file)
    {
        return Err(format!(
            "the server's wrapper {wrapper:?} does not enforce the journal's policy file"
        ));
    }
    let planned = r
        .plan_launch(a, Variant::Chat, Mode::Full, host, Vec::new())?
        .into_launch();
    let run_id = r.next_run_id();
    let (hargv, vars_path) = r.harness_argv(&run_id, queries, sandboxer);
    let mut full = wrapper.clone();
    full.extend(hargv);
    let mut env = r.base_env();
    env.extend(planned.env_set.clone());
    let live = r.live_probes(probes);
    let cwd = planned.cwd.clone();
    let judged = r.live_run(
        Variant::Chat,
        &live,
        &run_id,
        &vars_path,
        full,
        &env,
        &planned.env_removed,
        &cwd,
    )?;
    let how = format!(
        "the server's wrapper: {}",
        wrapper
            .iter()
            .map(|w| if w.contains(' ') {
                sh_quote(w)
            } else {
                w.clone()
            })
            .collect::<Vec<_>>()
            .join(" ")
    );
    Ok((how, r.results(Variant::Chat, judged)))
}

/// Part 3, logged in: the real CLI, launched headless through the server, is asked to run
/// the harness script with its own shell tool; up to [`MODEL_ATTEMPTS`] attempts while it
/// does not. Its answer is never read for a verdict: the report the harness wrote, the disk
/// and the fixtures decide.
#[allow(clippy::too_many_arguments)]
fn model_part(
    r: &mut Runner<'_>,
    a: &Adapter,
    client: &Client,
    probes: &[sandboxer::probe::Probe],
    queries: &[PathBuf],
    sandboxer: &Path,
    login: &Login,
    harness: &Column,
) -> ModelPart {
    let detail = match login {
        Login::Files(f) => format!(
            "logged in: {}",
            f.iter()
                .map(|(p, _)| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Login::Env(k, _) => format!("logged in: ${k} is set"),
        Login::No => unreachable!("only called when logged in"),
    };
    let mut part = ModelPart {
        status: "failed".into(),
        detail,
        attempts: Vec::new(),
        column: None,
        differs_from_harness: Vec::new(),
    };
    let host = r.host.expect("live");
    let chat = r.layout.chat.to_string();
    let runtime = r.layout.state.runtime(&r.layout.chat);
    let live = r.live_probes(probes);
    for attempt in 1..=MODEL_ATTEMPTS {
        let started = Instant::now();
        let run_id = r.next_run_id();
        let (hargv, vars_path) = r.harness_argv(&run_id, queries, sandboxer);
        // The report goes where the chat may write: its runtime.
        let report = runtime.join(format!(".contract-report-{run_id}.json"));
        let script = r.layout.harness_dir.join(format!("model-{run_id}.sh"));
        let text = format!(
            "#!/bin/sh\n# The sandbox contract's harness, run by the CLI's own shell tool.\nexec {} > {}\n",
            hargv
                .iter()
                .map(|w| sh_quote(w))
                .collect::<Vec<_>>()
                .join(" "),
            sh_quote(&report.display().to_string())
        );
        if let Err(e) = fs::write(&script, text)
            .and_then(|_| fs::set_permissions(&script, fs::Permissions::from_mode(0o755)))
        {
            part.attempts.push(format!("{}: {e}", script.display()));
            break;
        }
        let prompt = model_prompt(&script);
        let body = launch_body(r, a, "structured", vec![prompt]);
        let mut ran_it = false;
        let mut how = String::new();
        let result = r.live_run_with(Variant::Chat, &live, &run_id, &vars_path, &mut |_fx: &mut Fixtures| {
            let _ = fs::remove_file(&report);
            let v = client
                .call("POST", "/v1/chats/launch", Some(&body))
                .and_then(|r| r.ok())
                .map_err(|e| format!("launching the model run: {e:#}"))?;
            let launch = v["launch"].as_str().unwrap_or("").to_string();
            how = wait_for_end(client, &chat, &launch);
            let output = launch_events(client, &chat, &launch)
                .map(|evs| {
                    evs.iter()
                        .filter(|e| e["event"] == "output")
                        .filter_map(|e| e["text"].as_str())
                        .collect::<String>()
                })
                .unwrap_or_default();
            match fs::read_to_string(&report) {
                Ok(t) => {
                    ran_it = true;
                    Ok(HarnessOutput { report: Ok(t), stderr: output })
                }
                Err(_) => Ok(HarnessOutput {
                    report: Err(format!(
                        "the CLI did not run the harness (no {}; the chat {how}; its output ends: {})",
                        report.display(),
                        tail(&output, 300)
                    )),
                    stderr: String::new(),
                }),
            }
        });
        match result {
            Ok(judged) => {
                let mut col =
                    r.column(&a.name, Variant::Chat, host, Mode::Full.as_str(), How::Live);
                col.confinement = format!(
                    "run by the CLI's own shell tool in a chat launched by the server (attempt {attempt}; the chat {how})"
                );
                col.results = r.results(Variant::Chat, judged);
                col.elapsed_ms = started.elapsed().as_millis() as u64;
                part.differs_from_harness = col
                    .results
                    .iter()
                    .filter(|m| {
                        harness
                            .results
                            .iter()
                            .find(|h| h.probe == m.probe)
                            .is_some_and(|h| h.got != m.got)
                    })
                    .map(|m| m.probe.clone())
                    .collect();
                part.status = "ran".into();
                part.column = Some(col);
                break;
            }
            Err(e) => {
                part.attempts.push(e);
                // A run the model made but that failed is a finding, not a reason to ask again.
                if ran_it {
                    break;
                }
            }
        }
    }
    part
}

/// The prompt: run one script with the shell tool, nothing else.
fn model_prompt(script: &Path) -> String {
    format!(
        "This is an automated test of the sandbox you run in. Use your shell tool to run exactly \
         this one command, once, and wait for it to finish: sh {}\n\
         Do not run any other command, do not read or change any other file, and do not try to \
         work around errors. When it has finished, answer with the single word DONE.",
        sh_quote(&script.display().to_string())
    )
}

/// Waits until the chat's launch is no longer running (stopping it after [`MODEL_TIMEOUT`]),
/// and says how it ended.
fn wait_for_end(client: &Client, chat: &str, launch: &str) -> String {
    let deadline = Instant::now() + MODEL_TIMEOUT;
    loop {
        match client
            .call("GET", &format!("/v1/chats/{chat}"), None)
            .and_then(|r| r.ok())
        {
            Ok(v)
                if v["launch"] == launch
                    && v["state"] != "running"
                    && v["state"] != "launching" =>
            {
                return v["ended"]["how"].as_str().unwrap_or("ended").to_string();
            }
            Ok(_) => {}
            Err(e) => return format!("could not be watched: {e:#}"),
        }
        if Instant::now() > deadline {
            let _ = client.call(
                "POST",
                &format!("/v1/chats/{chat}/stop"),
                Some(&json!({"grace_seconds": 2})),
            );
            return format!("was stopped after {} s", MODEL_TIMEOUT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
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

    #[test]
    fn login_is_decided_from_the_adapters_data() {
        let all = adapter::load_all(None).unwrap();
        let claude = adapter::find(&all, "claude").unwrap();
        let home = tempfile::tempdir().unwrap();
        // Only without the adapter's variables in this environment is the answer "no".
        let env_login = ["ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"]
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
        if !env_login {
            assert!(matches!(login_state(&claude, home.path()), Login::No));
        }
        fs::create_dir_all(home.path().join(".claude")).unwrap();
        fs::write(home.path().join(".claude/.credentials.json"), "{}").unwrap();
        match login_state(&claude, home.path()) {
            Login::Files(f) => assert_eq!(f[0].1, PathBuf::from(".claude/.credentials.json")),
            other => panic!("{other:?}"),
        }
        // agy names no login at all: never logged in.
        let agy = adapter::find(&all, "agy").unwrap();
        assert!(matches!(login_state(&agy, home.path()), Login::No));
    }

    #[test]
    fn the_model_part_passes_only_when_skipped_or_run_clean() {
        let skipped = ModelPart {
            status: NOT_LOGGED_IN.into(),
            detail: String::new(),
            attempts: Vec::new(),
            column: None,
            differs_from_harness: Vec::new(),
        };
        assert!(skipped.passed());
        let failed = ModelPart {
            status: "failed".into(),
            ..skipped.clone()
        };
        assert!(!failed.passed());
    }
}
