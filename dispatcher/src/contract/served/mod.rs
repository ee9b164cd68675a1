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
//! 3. **model**: the real CLI is launched headless through the server, pointed at the scripted
//!    model on loopback (`scripted.rs`; with `--real-model`, or for an adapter without a
//!    `[model_endpoint]`, its own logged-in model instead), and its own shell tool runs the
//!    harness script and its own write tool writes a file (up to three attempts); the
//!    evidence is read off the disk, the fixtures and the model's record, never from its
//!    answer. A real model without a login says `skipped: not logged in`.
//!
//! `docs/contract.md` ("Through the server") says what this covers and what it does not.

mod api;
mod checks;
mod harness;
mod model;
pub mod p0;
mod scripted;
mod server;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::PathBuf;
use std::time::Instant;

use sandboxer::Target;
use serde::Serialize;

use super::fixture::{Fixtures, Layout, Variant};
use super::mutate::Mutation;
use super::report::{Column, Machine};
use super::{ContractError, Options, Runner, load_sets};
use crate::adapter;
use crate::modes::Mode;
use crate::platform;
use crate::server::client::Client;
use harness::server_and_harness;
use model::{Driver, Login, login_state, model_part};
use server::{Server, ServerOptions};

/// What the model part says when the CLI has no login here.
pub const NOT_LOGGED_IN: &str = "skipped: not logged in";

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
    /// The seed's P0 scenario (queries/p0.toml) run by one real CLI with its own tools,
    /// driven by the scripted model, in a tmux and a structured chat of a fresh server.
    #[command(name = "cli-p0", long_about = P0_LONG_ABOUT)]
    CliP0(P0Args),
}

const P0_LONG_ABOUT: &str = "\
The seed's P0 scenario for one CLI, through its own tools.

Builds the contract's temporary world (a state root with wf-main and wf-other, a home, a tmux
server outside), starts `dispatcher serve` for it, and launches chat-1 on wf-main in full
mode twice: in the server's tmux (the prompt given as the CLI's first interactive prompt) and
structured (headless). Each time the CLI is pointed at a scripted model on loopback whose
prompt asks, one turn per step of queries/p0.toml, for: a write into its own workflow
folder (its write tool), a read of a personal file in the home (its shell tool), a read and
writes into wf-other, writes of the refused planning/plan.json (write and shell tools), and
a launcher (a stand-in xdg-open asking the tmux server outside; on macOS open and osascript).

Verdicts come from the disk, an evidence folder only a process outside the sandbox can
write, and the model's record (a read is allowed when the planted content came back in a
tool result, denied when it appears nowhere in the record), never from what the CLI says.
Before the launches the test runs every step itself, unconfined: a denial counts only when
that control succeeded. A launch whose CLI does not get through every step is tried again
(three attempts).

Exit status: 0 every step as expected in both launches; 1 something failed; 2 bad input or
setup error.";

#[derive(clap::Args, Debug)]
pub struct P0Args {
    /// The CLI adapter: claude, codex, gemini, pi, opencode.
    #[arg(long, value_name = "NAME")]
    pub provider: String,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Keep the temporary folder (its path is printed).
    #[arg(long)]
    pub keep: bool,
    /// Where to make the temporary folder (default $TMPDIR, else /tmp).
    #[arg(long, value_name = "DIR")]
    pub tmp_dir: Option<PathBuf>,
    /// TEST ONLY: make the server break every launch's policy (as cli-sandbox-contract).
    #[arg(long, value_name = "HOW", hide = true)]
    pub break_policy: Option<String>,
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
  model    the CLI is launched headless through the server, pointed (the launch's
           model_endpoint) at a scripted model on a loopback port of this command: its own
           shell tool runs the harness script, its own write tool writes a file in the
           workflow, no login needed; up to three attempts. The verdicts come from the
           evidence, the file on disk and the model's record (each tool's result reached the
           next request), never from the CLI's answer; a CLI that never asks the endpoint
           fails saying so. With --real-model (and for an adapter without a
           [model_endpoint]) its own logged-in model is asked instead, only when logged in (a
           login file of its adapter in $HOME, or one of its login_env variables set);
           otherwise it says \"skipped: not logged in\".

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
    /// Part 3 asks the CLI's own logged-in model (skipped when not logged in), not the
    /// scripted model.
    #[arg(long)]
    pub real_model: bool,
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
    /// Part 3 asks the CLI's logged-in model instead of the scripted one.
    pub real_model: bool,
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
    /// Who played the model: the scripted one, or what showed the login (a file or a
    /// variable name, never its content), or why there is none.
    pub detail: String,
    /// What each attempt that did not produce a report came to.
    pub attempts: Vec<String>,
    /// With the scripted model: the endpoint asked, each tool's result back in the next
    /// request, the write tool's file on disk.
    pub checks: Vec<Check>,
    /// The probes, decided from the evidence of the run the model made.
    pub column: Option<Column>,
    /// Probes whose verdict differs from the harness part's (information: a structured run
    /// has no terminal, so e.g. TIOCSTI has nothing to push into).
    pub differs_from_harness: Vec<String>,
}

impl ModelPart {
    pub fn passed(&self) -> bool {
        match &self.column {
            Some(c) => self.status == "ran" && c.passed() && self.checks.iter().all(|k| k.pass),
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
        let _ = writeln!(s, "   {:<22} {:<5} DETAIL", "CHECK", "PASS");
        check_rows(&mut s, &sv.checks);
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
        check_rows(&mut s, &m.checks);
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

/// One line per check: its name, `ok` or `FAIL`, its detail.
fn check_rows(s: &mut String, checks: &[Check]) {
    use std::fmt::Write as _;
    for c in checks {
        let _ = writeln!(
            s,
            "   {:<22} {:<5} {}",
            c.check,
            if c.pass { "ok" } else { "FAIL" },
            c.detail
        );
    }
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
    let driver = if o.real_model || a.model_endpoint.is_none() {
        Driver::Login(login.clone())
    } else {
        Driver::Scripted
    };
    let login = match &driver {
        Driver::Login(l) => l.clone(),
        Driver::Scripted => Login::No,
    };
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
    let server = Server::start(
        &ServerOptions {
            dispatcher: &o.dispatcher,
            profiles_dir: o.profiles_dir.as_deref(),
            port: o.port,
        },
        &r.layout,
        &env,
    )?;
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
    let model = match &driver {
        Driver::Login(Login::No) => ModelPart {
            status: NOT_LOGGED_IN.into(),
            detail: format!(
                "no login file of the adapter ({}) in {} and none of its login_env variables ({}) set",
                if a.config_home.login.is_empty() {
                    "it names none".to_string()
                } else {
                    a.config_home
                        .login
                        .iter()
                        .map(|l| match (&l.from, &l.keychain) {
                            (Some(from), _) => from.get_ref().clone(),
                            (None, Some(service)) => format!("keychain {:?}", service.get_ref()),
                            (None, None) => String::new(),
                        })
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
            checks: Vec::new(),
            column: None,
            differs_from_harness: Vec::new(),
        },
        driver => model_part(
            &mut r,
            &a,
            &client,
            &sets.chat,
            &chat_files,
            &sandboxer,
            driver,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_part_passes_only_when_skipped_or_run_clean() {
        let skipped = ModelPart {
            status: NOT_LOGGED_IN.into(),
            detail: String::new(),
            attempts: Vec::new(),
            checks: Vec::new(),
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
