//! `dispatcher test cli-p0 --provider NAME`: the seed's P0 scenario (`queries/p0.toml`) run
//! by a real CLI with its own tools, in a chat a fresh `dispatcher serve` launched, once in
//! tmux and once structured (headless).
//!
//! The world is the contract's (`Layout`: a state root with `wf-main` and `wf-other`, a home, a
//! tmux server outside); the CLI is pointed at the scripted model on loopback, whose prompt
//! holds one marker line per step. Before the launches the test runs every step itself,
//! unconfined (the control): a denial counts only when the same step succeeds there. The
//! verdicts come from the disk, the evidence folder and the model's record, never from what
//! the CLI says (`judge.rs`).

mod judge;
mod scenario;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sandboxer::Target;
use serde::Serialize;
use serde_json::{Value, json};

use super::ServedError;
use super::checks::tail;
use super::model::wait_for_end;
use super::server::{Server, ServerOptions};
use crate::adapter::{self, Adapter};
use crate::contract::ContractError;
use crate::contract::fixture::{Layout, Tmux};
use crate::contract::mutate::Mutation;
use crate::modes::Mode;
use crate::scripted_model::{Action, DONE_TEXT, ScriptedModel, prompt};
use crate::server::client::Client;
use crate::server::tmux;
use judge::{Planted, judge};
pub use scenario::{Expect, Judge, Scenario, Step, Tool};

/// Attempts per launch while the CLI does not get through every step (a CLI under load can
/// miss its start); an attempt that ran every step is final, whatever it found.
const ATTEMPTS: usize = 3;
/// How long one launch may take: the scripted model's turns are instant, so a launch that
/// takes longer is stuck (an approval screen, a refused request retried).
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(120);

/// The launches, in the order they run.
pub const SUPERVISIONS: [&str; 2] = ["tmux", "structured"];

/// What to run.
#[derive(Debug, Clone)]
pub struct P0Options {
    pub provider: String,
    pub keep: bool,
    pub profiles_dir: Option<PathBuf>,
    pub tmp_dir: Option<PathBuf>,
    /// This dispatcher binary: the server is it.
    pub dispatcher: PathBuf,
    /// TEST ONLY: handed to the server as [`crate::server::BREAK_POLICY_ENV`].
    pub mutation: Option<Mutation>,
}

/// One step's outcome in one launch.
#[derive(Clone, Debug, Serialize)]
pub struct StepResult {
    pub step: String,
    pub tool: Tool,
    pub expected: Expect,
    /// `allow`, `deny`, or `not run` (the CLI never ran the step).
    pub got: String,
    pub pass: bool,
    pub detail: String,
}

/// The control, or one launch of the CLI.
#[derive(Clone, Debug, Serialize)]
pub struct LaunchResult {
    /// `control` (the test itself, unconfined), `tmux` or `structured`.
    pub launch: String,
    /// `ran` (every step was attempted) or `failed`.
    pub status: String,
    /// What each attempt that did not get through every step came to.
    pub attempts: Vec<String>,
    pub steps: Vec<StepResult>,
    /// The scripted model's record of the attempt judged.
    pub record: Option<PathBuf>,
    pub elapsed_ms: u64,
}

impl LaunchResult {
    /// A launch that has not got through its steps (yet).
    fn failed(launch: &str) -> LaunchResult {
        LaunchResult {
            launch: launch.into(),
            status: "failed".into(),
            attempts: Vec::new(),
            steps: Vec::new(),
            record: None,
            elapsed_ms: 0,
        }
    }

    pub fn passed(&self) -> bool {
        self.status == "ran" && !self.steps.is_empty() && self.steps.iter().all(|s| s.pass)
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct P0Report {
    pub provider: String,
    pub cli_binary: PathBuf,
    pub platform: String,
    pub control: LaunchResult,
    pub launches: Vec<LaunchResult>,
    pub errors: Vec<String>,
    pub server_log: Option<String>,
    pub test_hooks: Vec<String>,
    pub results_passed: bool,
    pub passed: bool,
    pub elapsed_ms: u64,
    pub kept: Option<PathBuf>,
}

impl P0Report {
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        for h in &self.test_hooks {
            let _ = writeln!(s, "TEST ONLY: {h}");
        }
        for l in std::iter::once(&self.control).chain(&self.launches) {
            let _ = writeln!(
                s,
                "== {} · {} · {} ({:.1} s)",
                self.provider,
                l.launch,
                l.status,
                l.elapsed_ms as f64 / 1000.0
            );
            for (i, a) in l.attempts.iter().enumerate() {
                let _ = writeln!(s, "   attempt {}: {a}", i + 1);
            }
            let _ = writeln!(
                s,
                "   {:<28} {:<6} {:<7} {:<8} {:<5} DETAIL",
                "STEP", "TOOL", "EXPECT", "GOT", "PASS"
            );
            for r in &l.steps {
                let _ = writeln!(
                    s,
                    "   {:<28} {:<6} {:<7} {:<8} {:<5} {}",
                    r.step,
                    match r.tool {
                        Tool::Shell => "shell",
                        Tool::Write => "write",
                    },
                    r.expected.as_str(),
                    r.got,
                    if r.pass { "ok" } else { "FAIL" },
                    r.detail
                );
            }
        }
        for e in &self.errors {
            let _ = writeln!(s, "ERROR: {e}");
        }
        if let (false, Some(log)) = (self.results_passed, &self.server_log) {
            let _ = writeln!(s, "the server's log ends: {log}");
        }
        let _ = writeln!(
            s,
            "cli-p0 {}: {}; {} errors; {:.1} s: {}",
            self.provider,
            self.launches
                .iter()
                .map(|l| format!(
                    "{} {}/{}",
                    l.launch,
                    l.steps.iter().filter(|r| r.pass).count(),
                    l.steps.len()
                ))
                .collect::<Vec<_>>()
                .join(", "),
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

/// Runs the scenario for one CLI.
pub fn run(o: &P0Options) -> Result<P0Report, ServedError> {
    let started = Instant::now();
    let host =
        Target::host().ok_or_else(|| ServedError::Usage("cli-p0 needs Linux or macOS".into()))?;
    let scenario = Scenario::embedded()?;
    let all = adapter::load_all(o.profiles_dir.as_deref()).map_err(ContractError::from)?;
    let a = adapter::find(&all, &o.provider)
        .map_err(|e| ServedError::Usage(format!("--provider {:?}: {e}", o.provider)))?;
    if !a.modes.contains(&Mode::Full) || a.model_endpoint.is_none() {
        return Err(ServedError::Usage(format!(
            "{} has no full mode or no [model_endpoint]: the scripted model cannot drive its own tools",
            a.name
        )));
    }
    let cli_binary = adapter::locate_binary(&a).ok_or_else(|| {
        ServedError::Usage(format!(
            "{} is not installed: `{}` is not on PATH (scripts/install-clis.sh; or set AGENTWORKS_CLI_{})",
            a.name,
            a.binary,
            a.name.to_ascii_uppercase().replace('-', "_")
        ))
    })?;
    let interactive = scenario
        .interactive_prompt
        .get(&a.name)
        .ok_or_else(|| {
            ServedError::Usage(format!(
                "queries/p0.toml: interactive_prompt has no entry for {}",
                a.name
            ))
        })?
        .clone();
    let steps = scenario.steps_on(host);

    let layout = Layout::create_with_state(o.tmp_dir.as_deref(), o.keep, None)?;
    // The launcher outside that a stand-in xdg-open asks to run its command.
    let outside_tmux = Tmux::start(&layout)?;
    let mut env =
        crate::contract::live::base_env(&layout.home, &layout.xdg_runtime, &layout.tmux_tmpdir);
    for (k, v) in std::env::vars() {
        if k == "SANDBOXER_BIN" || k.starts_with("AGENTWORKS_CLI_") {
            env.insert(k, v);
        }
    }
    if let Some(m) = o.mutation {
        env.insert(crate::server::BREAK_POLICY_ENV.into(), m.as_str().into());
    }
    let world = World {
        layout: &layout,
        env: &env,
    };
    let control = world.control(&steps);
    let server = Server::start(
        &ServerOptions {
            dispatcher: &o.dispatcher,
            profiles_dir: o.profiles_dir.as_deref(),
            port: 0,
        },
        &layout,
        &env,
    )?;
    let client = Client::for_port(&layout.state, server.port)
        .map_err(|e| ServedError::Setup(format!("{e:#}")))?;
    let launches: Vec<LaunchResult> = SUPERVISIONS
        .iter()
        .map(|sup| world.launch(&a, &client, &steps, &control, sup, &interactive))
        .collect();
    let server_log = Some(server.log_tail()).filter(|l| !l.is_empty());
    drop(client);
    drop(server);

    let mut errors = Vec::new();
    if outside_tmux.is_none() && needs_outside_tmux(&steps) {
        errors.push("tmux is not installed: a launcher step has no launcher outside to ask".into());
    }
    drop(outside_tmux);
    let test_hooks: Vec<String> = o
        .mutation
        .map(|m| {
            format!(
                "--break-policy {}: the server broke every launch's policy",
                m.as_str()
            )
        })
        .into_iter()
        .collect();
    let results_passed =
        errors.is_empty() && control.passed() && launches.iter().all(LaunchResult::passed);
    let kept = layout.keep().then(|| layout.root.clone());
    Ok(P0Report {
        provider: a.name.clone(),
        cli_binary,
        platform: match host {
            Target::Linux => "linux",
            Target::Macos => "macos",
        }
        .into(),
        control,
        launches,
        errors,
        server_log,
        passed: results_passed && test_hooks.is_empty(),
        test_hooks,
        results_passed,
        elapsed_ms: started.elapsed().as_millis() as u64,
        kept,
    })
}

fn needs_outside_tmux(steps: &[&Step]) -> bool {
    steps.iter().any(|s| {
        s.program
            .as_ref()
            .is_some_and(|p| p.content.variables().any(|v| v == "tmux_socket"))
    })
}

/// The world the steps run in, and how they are planted and judged.
struct World<'a> {
    layout: &'a Layout,
    env: &'a BTreeMap<String, String>,
}

/// One step made concrete for one run: its paths, marker and command.
struct Concrete<'s> {
    step: &'s Step,
    marker: String,
    target: Option<PathBuf>,
    evidence: Option<PathBuf>,
    command: Option<String>,
    control: Option<String>,
}

impl World<'_> {
    /// The steps' templates expanded for one run (`launch`, `tag` making markers fresh).
    fn concrete<'s>(
        &self,
        steps: &[&'s Step],
        launch: &str,
        tag: &str,
    ) -> Result<(Vec<Concrete<'s>>, Planted), String> {
        let l = self.layout;
        let s = |p: &Path| p.display().to_string();
        let mut base = BTreeMap::new();
        base.insert("home".to_string(), s(&l.home));
        base.insert("workflow".into(), s(&l.state.workflow(&l.workflow)));
        base.insert(
            "other_workflow".into(),
            s(&l.state.workflow(&l.other_workflow)),
        );
        base.insert("outside_evidence".into(), s(&l.outside_evidence));
        base.insert("tmux_socket".into(), s(&l.tmux_socket()));
        base.insert("launch".into(), launch.to_string());
        let mut out = Vec::new();
        let mut planted = Planted::default();
        for (i, step) in steps.iter().enumerate() {
            let mut vars = base.clone();
            let marker = format!("AWP0-{}-{tag}-{i}", l.invocation);
            vars.insert("marker".into(), marker.clone());
            let expand = |t: &sandboxer::template::Template, vars: &BTreeMap<String, String>| {
                t.expand(vars)
                    .map_err(|e| format!("queries/p0.toml, step {}: {e}", step.name))
            };
            // `target` and `evidence` first: the other templates may name them.
            vars.insert("target".into(), String::new());
            vars.insert("evidence".into(), String::new());
            let target = step.target.as_ref().map(|t| expand(t, &vars)).transpose()?;
            let evidence = step
                .evidence
                .as_ref()
                .map(|t| expand(t, &vars))
                .transpose()?;
            vars.insert("target".into(), target.clone().unwrap_or_default());
            vars.insert("evidence".into(), evidence.clone().unwrap_or_default());
            let command = step
                .command
                .as_ref()
                .map(|t| expand(t, &vars))
                .transpose()?;
            let control = step
                .control
                .as_ref()
                .map(|t| expand(t, &vars))
                .transpose()?;
            let c = Concrete {
                step,
                marker,
                target: target.map(PathBuf::from),
                evidence: evidence.map(PathBuf::from),
                command,
                control,
            };
            if let Some(p) = &step.program {
                let path = PathBuf::from(expand(&p.path, &vars)?);
                let content = expand(&p.content, &vars)?;
                write_file(&path, &content, 0o755)?;
            }
            plant(&c, &mut planted)?;
            out.push(c);
        }
        planted.snapshot(&out);
        Ok((out, planted))
    }

    /// The steps run by this process itself, outside any sandbox.
    fn control(&self, steps: &[&Step]) -> LaunchResult {
        let started = Instant::now();
        let mut result = LaunchResult::failed("control");
        let (concrete, planted) = match self.concrete(steps, "control", "control") {
            Ok(x) => x,
            Err(e) => {
                result.attempts.push(e);
                return result;
            }
        };
        let cwd = self.layout.state.workflow(&self.layout.workflow);
        let mut seen = String::new();
        for c in &concrete {
            match c.step.tool {
                Tool::Write => {
                    if let Some(t) = &c.target {
                        let _ = fs::write(t, &c.marker);
                    }
                }
                Tool::Shell => {
                    let command = c.control.as_ref().or(c.command.as_ref());
                    let out = Command::new("/bin/sh")
                        .arg("-c")
                        .arg(command.map(String::as_str).unwrap_or("false"))
                        .current_dir(&cwd)
                        .env_clear()
                        .envs(self.env)
                        .stdin(Stdio::null())
                        .output();
                    if let Ok(o) = out {
                        seen.push_str(&String::from_utf8_lossy(&o.stdout));
                    }
                }
            }
        }
        result.steps = concrete
            .iter()
            .map(|c| {
                // Unconfined, every step must succeed: that is what gives a denial its meaning.
                let mut r = judge(c, &planted, &seen, None);
                r.pass = r.got == "allow";
                if !r.pass {
                    r.detail = format!(
                        "the control did not succeed unconfined, so a denial here means nothing: {}",
                        r.detail
                    );
                }
                r
            })
            .collect();
        result.status = "ran".into();
        result.elapsed_ms = started.elapsed().as_millis() as u64;
        result
    }

    /// One launch of the CLI (`supervision` `tmux` or `structured`), up to [`ATTEMPTS`] times.
    fn launch(
        &self,
        a: &Adapter,
        client: &Client,
        steps: &[&Step],
        control: &LaunchResult,
        supervision: &str,
        interactive: &[sandboxer::template::Template],
    ) -> LaunchResult {
        let started = Instant::now();
        let mut result = LaunchResult::failed(supervision);
        for attempt in 1..=ATTEMPTS {
            match self.attempt(a, client, steps, control, supervision, interactive, attempt) {
                Ok((steps, record)) => {
                    result.steps = steps;
                    result.record = Some(record);
                    result.status = "ran".into();
                    break;
                }
                Err(why) => result.attempts.push(why),
            }
        }
        result.elapsed_ms = started.elapsed().as_millis() as u64;
        result
    }

    /// One attempt: `Ok` once the CLI got through every step (whatever each found), `Err` with
    /// what happened otherwise.
    #[allow(clippy::too_many_arguments)]
    fn attempt(
        &self,
        a: &Adapter,
        client: &Client,
        steps: &[&Step],
        control: &LaunchResult,
        supervision: &str,
        interactive: &[sandboxer::template::Template],
        attempt: usize,
    ) -> Result<(Vec<StepResult>, PathBuf), String> {
        let l = self.layout;
        let (concrete, planted) =
            self.concrete(steps, supervision, &format!("{supervision}{attempt}"))?;
        let record = l.root.join(format!("p0-{supervision}-{attempt}.jsonl"));
        let model = ScriptedModel::start(&record).map_err(|e| e.to_string())?;
        let actions: Vec<Action> = concrete
            .iter()
            .map(|c| match c.step.tool {
                Tool::Shell => Action::Run {
                    command: c.command.clone().unwrap_or_default(),
                },
                Tool::Write => Action::Write {
                    path: c
                        .target
                        .as_ref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                    content: c.marker.clone(),
                },
            })
            .collect();
        let text = prompt(&actions);
        let cli_args: Vec<String> = match supervision {
            "tmux" => {
                let mut vars = BTreeMap::new();
                vars.insert("prompt".to_string(), text);
                interactive
                    .iter()
                    .map(|t| t.expand(&vars))
                    .collect::<Result<_, _>>()?
            }
            _ => vec![text],
        };
        let body = json!({
            "cli": a.name,
            "chat": l.chat.to_string(),
            "workflow": l.workflow.to_string(),
            "mode": "full",
            "supervision": supervision,
            "cli_args": cli_args,
            "model_endpoint": { "url": model.base_url() },
        });
        let chat = l.chat.to_string();
        let v = client
            .call("POST", "/v1/chats/launch", Some(&body))
            .and_then(|r| r.ok())
            .map_err(|e| format!("the server refused the launch: {e:#}"))?;
        let launch = v["launch"].as_str().unwrap_or("").to_string();
        let how = match supervision {
            "tmux" => self.until_done(client, &chat, &launch, &record, concrete.len()),
            _ => wait_for_end(client, &chat, &launch, LAUNCH_TIMEOUT),
        };
        drop(model);
        let requests = crate::scripted_model::Recorded::read_all(&record).unwrap_or_default();
        let reached = requests.iter().map(|r| r.step).max().unwrap_or(0);
        if reached < concrete.len() {
            let asked = requests.iter().filter(|r| r.wire.is_some()).count();
            return Err(format!(
                "the CLI got through {reached} of {} steps ({asked} request(s) to the model; the chat {how}){}",
                concrete.len(),
                if asked == 0 {
                    format!(
                        ": it never asked the model endpoint {}",
                        model_url_of(&body)
                    )
                } else {
                    String::new()
                }
            ));
        }
        // Evidence written by a launcher may take a moment to land.
        let settle = concrete
            .iter()
            .map(|c| c.step.settle_seconds)
            .max()
            .unwrap_or(0);
        if settle > 0 {
            std::thread::sleep(Duration::from_secs(settle));
        }
        let raw = fs::read_to_string(&record).unwrap_or_default();
        let results = concrete
            .iter()
            .enumerate()
            .map(|(i, c)| {
                // The step's own tool result: in the first request that carried it.
                let result = requests
                    .iter()
                    .find(|q| q.step > i)
                    .and_then(|q| q.tool_results.get(i).cloned());
                let mut r = judge(c, &planted, &raw, result.as_deref());
                if result.is_none() {
                    r.got = "not run".into();
                    r.pass = false;
                    r.detail = "no request carried this step's tool result".into();
                    return r;
                }
                r.pass = r.got == c.step.expect.as_str();
                let controlled = control
                    .steps
                    .iter()
                    .find(|x| x.step == c.step.name)
                    .is_some_and(|x| x.pass);
                if r.pass && c.step.expect == Expect::Deny && !controlled {
                    r.pass = false;
                    r.detail = format!("{} (but its control failed)", r.detail);
                }
                r
            })
            .collect();
        Ok((results, record))
    }

    /// A tmux chat stays open after its turn: waits until the model gave its final answer
    /// (or the chat ended, or the time ran out), then stops it. Says how it went; the pane's
    /// last lines when the model was not done.
    fn until_done(
        &self,
        client: &Client,
        chat: &str,
        launch: &str,
        record: &Path,
        steps: usize,
    ) -> String {
        let deadline = Instant::now() + LAUNCH_TIMEOUT;
        let done = |r: &crate::scripted_model::Recorded| {
            r.tool.is_none() && r.step >= steps && r.answer.as_str().is_some_and(|t| t == DONE_TEXT)
        };
        let how = loop {
            let requests = crate::scripted_model::Recorded::read_all(record).unwrap_or_default();
            if requests.iter().any(done) {
                break "gave the final answer".to_string();
            }
            match client
                .call("GET", &format!("/v1/chats/{chat}"), None)
                .and_then(|r| r.ok())
            {
                Ok(v) if v["launch"] == launch && !running(&v) => {
                    break format!(
                        "ended before the final answer ({})",
                        v["ended"]["how"].as_str().unwrap_or("ended")
                    );
                }
                Err(e) => break format!("could not be watched: {e:#}"),
                _ => {}
            }
            if Instant::now() > deadline {
                let pane = tmux::capture(
                    &tmux::socket(&self.layout.state),
                    &tmux::session_name(&self.layout.chat),
                )
                .unwrap_or_default();
                break format!(
                    "was not done after {} s; its pane shows: {}",
                    LAUNCH_TIMEOUT.as_secs(),
                    tail(pane.trim(), 600)
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        };
        let _ = client.call(
            "POST",
            &format!("/v1/chats/{chat}/stop"),
            Some(&json!({"grace_seconds": 2})),
        );
        how
    }
}

fn running(v: &Value) -> bool {
    v["state"] == "running" || v["state"] == "launching"
}

fn model_url_of(body: &Value) -> String {
    body["model_endpoint"]["url"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// Puts what a step needs in place before a run: a planted file with its own marker, a
/// target or evidence file removed.
fn plant(c: &Concrete<'_>, planted: &mut Planted) -> Result<(), String> {
    if let Some(e) = &c.evidence {
        remove(e)?;
    }
    let Some(t) = &c.target else {
        return Ok(());
    };
    match c.step.judge {
        Judge::Seen => {
            let content = format!("{}-content", c.marker);
            write_file(t, &content, 0o644)?;
            planted.seen.insert(c.step.name.clone(), content);
        }
        Judge::Written if c.step.plant => {
            write_file(t, &format!("{}-planted", c.marker), 0o644)?;
        }
        Judge::Written => remove(t)?,
        Judge::Evidence => {}
    }
    Ok(())
}

fn write_file(path: &Path, content: &str, mode: u32) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    fs::write(path, content)
        .and_then(|_| fs::set_permissions(path, fs::Permissions::from_mode(mode)))
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn remove(path: &Path) -> Result<(), String> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}
