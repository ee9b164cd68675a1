//! The sandbox contract: `dispatcher contract`.
//!
//! The runner builds a real layout in a fresh temporary state root (made by the dispatcher's
//! own code: workflows, chats, runtimes, `config.json` with its real server token), then, for
//! each CLI, computes exactly that CLI's launch with [`crate::launch::plan`] — same policy,
//! environment, working folder, config home — and replaces only the final program: the CLI's
//! command line becomes `sandboxer probe …`, the harness, which runs every probe of
//! `queries/*.toml` inside the launch and reports raw facts. The runner plants markers before
//! and decides verdicts after, from evidence ([`evidence`]). An unconfined control run first
//! shows each probe can succeed at all, so a deny is never vacuous unawares.
//!
//! Linux: live. macOS: each probe decided by the SBPL evaluator against the exact profile
//! `dispatcher profile` writes for the launch (`platform::seatbelt_profile`), and live on a
//! Mac by `scripts/mac-selftest.sh`. `docs/contract.md` is the full description.

pub mod evidence;
pub mod fixture;
pub mod live;
#[cfg(feature = "test-hooks")]
pub mod mutate;
#[cfg(not(feature = "test-hooks"))]
pub use crate::test_hooks::absent as mutate;
pub mod own_sandbox;
pub mod report;
pub mod served;
#[cfg(target_os = "linux")]
pub mod shared;
pub mod vars;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use sandboxer::probe::{self, HarnessReport, Probe, ProbeOp};
use sandboxer::{Target, Verdict};

use crate::adapter::{self, Adapter};
use crate::launch::{self, Launch, LaunchRequest};
use crate::modes::Mode;
use crate::platform;

use evidence::Observed;
use fixture::{Fixtures, Layout, Resolved, Variant};
use mutate::Mutation;
use report::{CheckStatus, CliCheck, Column, How, Machine, ProbeResult, ProbeRow, Report};
use vars::Kind;

/// The embedded query files; `--queries-dir DIR` reads `DIR/NAME` instead, where present.
pub const QUERY_FILES: [(&str, &str); 3] = [
    (
        "contract.toml",
        include_str!("../../../queries/contract.toml"),
    ),
    (
        "escapes.toml",
        include_str!("../../../queries/escapes.toml"),
    ),
    ("steps.toml", include_str!("../../../queries/steps.toml")),
];

#[derive(Debug, thiserror::Error)]
pub enum ContractError {
    #[error(transparent)]
    Query(#[from] sandboxer::probe::QueryError),
    #[error("{0}")]
    Load(String),
    #[error("{0}")]
    Probe(String),
    #[error("{0}")]
    Io(String),
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    #[error(transparent)]
    Launch(#[from] crate::launch::LaunchError),
    #[error(transparent)]
    Adapter(#[from] crate::adapter::AdapterError),
}

/// `dispatcher contract`'s arguments.
#[derive(clap::Args, Debug, Default)]
pub struct ContractArgs {
    /// A CLI adapter name, or `all` (repeatable). Default: all.
    #[arg(long, value_name = "NAME|all")]
    pub cli: Vec<String>,
    /// The step contract (an agent step and a scripted step) instead of the chat contract.
    #[arg(long)]
    pub steps: bool,
    /// Both the chat contract and the step contract (for every CLI unless --cli names some).
    #[arg(long)]
    pub all: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Print the permission map (Markdown) instead of tables.
    #[arg(long, conflicts_with = "json")]
    pub markdown: bool,
    /// Keep the temporary folder (its path is printed).
    #[arg(long)]
    pub keep: bool,
    /// Only evaluate (macOS profiles); run nothing live.
    #[arg(long)]
    pub no_live: bool,
    /// Read contract.toml, escapes.toml, steps.toml, own-sandbox.toml from here where present.
    #[arg(long, value_name = "DIR")]
    pub queries_dir: Option<PathBuf>,
    /// Where to make the temporary folder (default $TMPDIR, else /tmp).
    #[arg(long, value_name = "DIR")]
    pub tmp_dir: Option<PathBuf>,
    /// Internal: be the runner's outside process, recording into DIR.
    #[arg(long, value_name = "DIR", hide = true)]
    pub outside_process: Option<PathBuf>,
    /// TEST ONLY: break the launch policy (widen-grant, empty-refuse, unblock-launchers,
    /// open-ways-out) to show which probes catch it. A run with it never passes.
    #[arg(long, value_name = "HOW", hide = true)]
    pub break_policy: Option<String>,
    /// TEST ONLY: run this program instead of `sandboxer probe` (same arguments). A run with
    /// it never passes.
    #[arg(long, value_name = "PROGRAM", hide = true)]
    pub harness: Option<PathBuf>,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Adapter names; empty = all.
    pub clis: Vec<String>,
    pub chat: bool,
    pub steps: bool,
    pub live: bool,
    pub keep: bool,
    pub profiles_dir: Option<PathBuf>,
    pub queries_dir: Option<PathBuf>,
    pub tmp_dir: Option<PathBuf>,
    /// The dispatcher binary (the outside process is this binary).
    pub dispatcher: PathBuf,
    /// TEST ONLY.
    pub mutation: Option<Mutation>,
    /// TEST ONLY: a harness program replacing `sandboxer probe`.
    pub harness: Option<PathBuf>,
}

/// The loaded probe sets.
struct Sets {
    chat: Vec<Probe>,
    steps: Vec<Probe>,
    /// (file name, text) as the harness reads them.
    files: Vec<(String, String)>,
    own: Vec<own_sandbox::Statement>,
}

fn load_sets(opts: &Options) -> Result<Sets, ContractError> {
    let read = |name: &str, embedded: &str| -> Result<(String, String), ContractError> {
        if let Some(dir) = &opts.queries_dir {
            let p = dir.join(name);
            if p.exists() {
                let t = std::fs::read_to_string(&p)
                    .map_err(|e| ContractError::Load(format!("{}: {e}", p.display())))?;
                return Ok((p.display().to_string(), t));
            }
        }
        Ok((format!("queries/{name}"), embedded.to_string()))
    };
    let files: Vec<(String, String)> = QUERY_FILES
        .iter()
        .map(|(n, t)| read(n, t))
        .collect::<Result<_, _>>()?;
    let chat = probe::load_all(&files[..2], &|v| vars::known(Kind::Chat, v))?;
    let steps = probe::load_all(&files[2..], &|v| vars::known(Kind::Step, v))?;
    let (own_file, own_text) = read("own-sandbox.toml", own_sandbox::OWN_SANDBOX_TOML)?;
    let own = own_sandbox::load(&own_text, &own_file)?;
    for set in [&chat, &steps] {
        for op in [ProbeOp::Signal, ProbeOp::Ptrace] {
            let users: Vec<&str> = set
                .iter()
                .filter(|p| p.op == op)
                .map(|p| p.name.as_str())
                .collect();
            if users.len() > 1 {
                return Err(ContractError::Load(format!(
                    "probes {} all {op} the outside process in one run; its evidence cannot tell them apart",
                    users.join(", ")
                )));
            }
        }
    }
    Ok(Sets {
        chat,
        steps,
        files,
        own,
    })
}

/// `dispatcher contract` itself.
pub fn main(args: ContractArgs, profiles_dir: Option<&Path>) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    if let Some(dir) = &args.outside_process {
        fixture::outside_process(dir);
    }
    let mutation = Mutation::from_flag(args.break_policy.as_deref()).map_err(anyhow::Error::msg)?;
    let clis = if args.cli.is_empty() || args.cli.iter().any(|c| c == "all") {
        Vec::new()
    } else {
        args.cli.clone()
    };
    let opts = Options {
        clis,
        chat: args.all || !args.steps,
        steps: args.all || args.steps,
        live: !args.no_live,
        keep: args.keep,
        profiles_dir: profiles_dir.map(Path::to_path_buf),
        queries_dir: args.queries_dir.clone(),
        tmp_dir: args.tmp_dir.clone(),
        dispatcher: std::env::current_exe().context("cannot find the dispatcher's own binary")?,
        mutation,
        harness: args.harness.clone(),
    };
    if mutation.is_some() || opts.harness.is_some() {
        eprintln!(
            "dispatcher: contract: TEST ONLY hooks active (--break-policy/--harness): this run cannot pass"
        );
    }
    let sets = load_sets(&opts)?;
    let report = run_with(&opts, &sets)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if args.markdown {
        print!("{}", report.markdown(&map_rows(&sets, &opts)));
    } else {
        print!("{}", report.text());
    }
    Ok(if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn map_rows<'a>(sets: &'a Sets, opts: &Options) -> Vec<(&'static str, Vec<ProbeRow>)> {
    let rows = |ps: &'a [Probe]| {
        ps.iter()
            .map(|p| ProbeRow {
                name: p.name.clone(),
                op: p.op.to_string(),
                linux: p.linux.as_ref().map(|e| e.expect),
                macos: p.macos.as_ref().map(|e| e.expect),
            })
            .collect()
    };
    let mut out = Vec::new();
    if opts.chat {
        out.push(("Chat contract", rows(&sets.chat)));
    }
    if opts.steps {
        out.push(("Step contract", rows(&sets.steps)));
    }
    out
}

/// Runs the contract as `opts` says.
pub fn run(opts: &Options) -> Result<Report, ContractError> {
    run_with(opts, &load_sets(opts)?)
}

fn run_with(opts: &Options, sets: &Sets) -> Result<Report, ContractError> {
    let started = Instant::now();
    let all = adapter::load_all(opts.profiles_dir.as_deref())?;
    let adapters: Vec<Adapter> = if opts.clis.is_empty() {
        all
    } else {
        opts.clis
            .iter()
            .map(|n| adapter::find(&all, n).map_err(ContractError::Load))
            .collect::<Result<_, _>>()?
    };
    for a in &adapters {
        if !sets.own.iter().any(|s| s.name == a.name) {
            return Err(ContractError::Load(format!(
                "queries/own-sandbox.toml says nothing about {}: add an entry (see its header)",
                a.name
            )));
        }
    }
    let layout = Layout::create(opts.tmp_dir.as_deref(), opts.keep)?;
    let host = Target::host();
    let live = opts.live && host.is_some();
    let fixtures = if live {
        Some(Fixtures::start(&layout, &opts.dispatcher)?)
    } else {
        None
    };
    let harness_files = write_harness_files(&layout, sets)?;
    let mut r = Runner {
        opts,
        fixtures,
        layout,
        host,
        runs: 0,
        controls: BTreeMap::new(),
        errors: Vec::new(),
        harness_files,
    };
    let mut columns = Vec::new();
    let mut checks = Vec::new();
    let mut installed = Vec::new();
    let chat_files: Vec<PathBuf> = sets.files[..2]
        .iter()
        .map(|(n, _)| r.harness_files[n].clone())
        .collect();
    let step_files: Vec<PathBuf> = vec![r.harness_files[&sets.files[2].0].clone()];

    if live {
        let sandboxer = platform::locate_sandboxer(&opts.dispatcher);
        if opts.chat {
            r.control(Variant::Chat, &sets.chat, &chat_files, &sandboxer);
        }
        if opts.steps {
            r.control(Variant::AgentStep, &sets.steps, &step_files, &sandboxer);
            r.control(Variant::ScriptedStep, &sets.steps, &step_files, &sandboxer);
        }
        for a in &adapters {
            if opts.chat {
                for mode in &a.modes {
                    columns.push(r.live_cli(a, Variant::Chat, *mode, &sets.chat, &chat_files));
                }
            }
            if opts.steps {
                columns.push(r.live_cli(
                    a,
                    Variant::AgentStep,
                    Mode::Full,
                    &sets.steps,
                    &step_files,
                ));
            }
            let own = sets
                .own
                .iter()
                .find(|s| s.name == a.name)
                .expect("checked above");
            let (c, version) = r.cli_checks(a, own);
            checks.extend(c);
            if let Some(v) = version {
                installed.push((a.name.clone(), v));
            }
        }
        if opts.steps {
            columns.push(r.live_script(&sets.steps, &step_files));
        }
    }
    for a in &adapters {
        if opts.chat {
            for mode in &a.modes {
                columns.push(r.evaluate_cli(a, Variant::Chat, *mode, &sets.chat));
            }
        }
        if opts.steps {
            columns.push(r.evaluate_cli(a, Variant::AgentStep, Mode::Full, &sets.steps));
        }
        let own = sets
            .own
            .iter()
            .find(|s| s.name == a.name)
            .expect("checked above");
        checks.push(r.macos_own_sandbox(a, own));
    }
    if opts.steps {
        columns.push(r.evaluate_script(&sets.steps));
    }

    let mut test_hooks = Vec::new();
    if let Some(m) = opts.mutation {
        test_hooks.push(format!(
            "--break-policy {}: the launch policy was deliberately broken",
            m.as_str()
        ));
    }
    if let Some(h) = &opts.harness {
        test_hooks.push(format!(
            "--harness {}: the harness was replaced",
            h.display()
        ));
    }
    let results_passed = r.errors.is_empty()
        && columns.iter().all(Column::passed)
        && checks.iter().all(|c| c.status != CheckStatus::Fail);
    let kept = r.layout.keep().then(|| r.layout.root.clone());
    let machine = machine(installed);
    Ok(Report {
        machine,
        elapsed_ms: started.elapsed().as_millis() as u64,
        columns,
        checks,
        errors: std::mem::take(&mut r.errors),
        passed: results_passed && test_hooks.is_empty(),
        test_hooks,
        mutation: opts.mutation,
        results_passed,
        kept,
    })
}

/// The query files, where the harness reads them (its folder, outside the state root).
fn write_harness_files(
    layout: &Layout,
    sets: &Sets,
) -> Result<BTreeMap<String, PathBuf>, ContractError> {
    let mut harness_files = BTreeMap::new();
    for (name, text) in &sets.files {
        let base = Path::new(name).file_name().expect("a file name").to_owned();
        let p = layout.harness_dir.join(base);
        std::fs::write(&p, text).map_err(|e| ContractError::Io(format!("{}: {e}", p.display())))?;
        harness_files.insert(name.clone(), p);
    }
    Ok(harness_files)
}

fn machine(installed: Vec<(String, String)>) -> Machine {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "(unknown kernel)".into());
    #[cfg(target_os = "linux")]
    let abi = sandboxer::linux::enforce::kernel_landlock_abi();
    #[cfg(not(target_os = "linux"))]
    let abi = 0;
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    Machine {
        os: std::env::consts::OS.to_string(),
        kernel,
        landlock_abi: abi,
        uid,
        user: std::env::var("USER").unwrap_or_else(|_| uid.to_string()),
        installed,
    }
}

struct Runner<'o> {
    opts: &'o Options,
    /// Dropped before the layout: its processes are stopped before their folder goes.
    fixtures: Option<Fixtures>,
    layout: Layout,
    host: Option<Target>,
    runs: u32,
    /// Per launch variant: which probes succeeded unconfined (the control run).
    controls: BTreeMap<&'static str, BTreeMap<String, bool>>,
    errors: Vec<String>,
    harness_files: BTreeMap<String, PathBuf>,
}

/// What one harness run gave: its JSON report (or why there is none) and its stderr.
struct HarnessOutput {
    report: Result<String, String>,
    stderr: String,
}

/// One probe of one live run, judged.
struct Judged {
    name: String,
    op: ProbeOp,
    target: String,
    expected: Verdict,
    decided: evidence::Decided,
}

/// The `sh` spelling of one word.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

impl Runner<'_> {
    fn next_run_id(&mut self) -> String {
        self.runs += 1;
        format!("{}-{}", self.layout.invocation, self.runs)
    }

    fn base_env(&self) -> BTreeMap<String, String> {
        live::base_env(
            &self.layout.home,
            &self.layout.xdg_runtime,
            &self.layout.tmux_tmpdir,
        )
    }

    /// The harness's command line for a run, and its vars file.
    fn harness_argv(
        &self,
        run_id: &str,
        queries: &[PathBuf],
        sandboxer: &Path,
    ) -> (Vec<String>, PathBuf) {
        let program = match &self.opts.harness {
            Some(h) => vec![h.display().to_string()],
            None => vec![sandboxer.display().to_string(), "probe".into()],
        };
        let vars_path = self.layout.harness_dir.join(format!("vars-{run_id}.json"));
        (live::harness_argv(&program, queries, &vars_path), vars_path)
    }

    /// The probes a live run on this host decides.
    fn live_probes<'p>(&self, probes: &'p [Probe]) -> Vec<&'p Probe> {
        let host = self.host.expect("live runs have a host");
        probes
            .iter()
            .filter(|p| p.expectation(host).is_some() && probe::supported_live(p.op, host))
            .collect()
    }

    fn chat_and_workflow(
        &self,
        v: Variant,
    ) -> (
        crate::ids::ChatId,
        crate::ids::WorkflowId,
        Vec<crate::grants::Attach>,
    ) {
        match v {
            Variant::Chat => (
                self.layout.chat.clone(),
                self.layout.workflow.clone(),
                vec![
                    crate::grants::Attach {
                        workflow: self.layout.attached.clone(),
                        access: sandboxer::Access::Ro,
                    },
                    crate::grants::Attach {
                        workflow: self.layout.attached_rw.clone(),
                        access: sandboxer::Access::Rw,
                    },
                ],
            ),
            _ => (
                self.layout.step_chat.clone(),
                self.layout.step_workflow.clone(),
                Vec::new(),
            ),
        }
    }

    fn request(
        &self,
        a: &Adapter,
        v: Variant,
        mode: Mode,
        target: Target,
        cli_args: Vec<String>,
    ) -> LaunchRequest {
        let (chat, workflow, attach) = self.chat_and_workflow(v);
        LaunchRequest {
            cli: a.name.clone(),
            chat,
            workflow,
            attach,
            mode: Some(mode),
            headless: false,
            cwd: None,
            target,
            home: self.layout.home.clone(),
            cli_args,
        }
    }

    /// Computes a CLI's launch for `target` (confinement asked of this machine for the host,
    /// assumed for another OS, as `dispatcher profile` does).
    fn plan_launch(
        &self,
        a: &Adapter,
        v: Variant,
        mode: Mode,
        target: Target,
        cli_args: Vec<String>,
    ) -> Result<Launch, String> {
        let tools = platform::tools(a, target).map_err(|e| format!("{e:#}"))?;
        let req = self.request(a, v, mode, target, cli_args);
        let home = self.layout.home.clone();
        launch::plan(&self.layout.state, a, &req, &tools, |policy| {
            if target.is_host() {
                platform::confinement(target, policy, &home)
            } else {
                Ok(format!("evaluated for {target}"))
            }
        })
        .map_err(|e| e.to_string())
    }

    /// TEST ONLY: breaks the launch's policy text as `--break-policy` says.
    fn mutate_text(&self, text: &mut String) -> Result<(), String> {
        if let Some(m) = self.opts.mutation {
            *text = m.apply(text)?;
        }
        Ok(())
    }

    fn mutate_launch(&self, launch: &mut Launch) -> Result<(), String> {
        match self.opts.mutation {
            Some(m) => m.apply_to_launch(launch),
            None => Ok(()),
        }
    }

    /// Plants, runs `argv` under the runner's pty, gathers the evidence, judges every probe.
    #[allow(clippy::too_many_arguments)]
    fn live_run(
        &mut self,
        variant: Variant,
        probes: &[&Probe],
        run_id: &str,
        vars_path: &Path,
        argv: Vec<String>,
        env: &BTreeMap<String, String>,
        env_removed: &[String],
        cwd: &Path,
    ) -> Result<Vec<Judged>, String> {
        self.live_run_with(variant, probes, run_id, vars_path, &mut |fx| {
            let stdin = fx.pty.stdin().map_err(|e| e.to_string())?;
            let ran = live::run(live::Spawn {
                argv: argv.clone(),
                env,
                env_removed,
                cwd,
                stdin,
                controlling_tty: true,
                timeout: live::RUN_TIMEOUT,
            })
            .map_err(|e| e.to_string())?;
            Ok(HarnessOutput {
                report: if ran.success() {
                    Ok(ran.stdout)
                } else {
                    Err(format!("it ended with {}", ran.status()))
                },
                stderr: ran.stderr,
            })
        })
    }

    /// Plants, lets `run` start the harness however it is started (inside a launch here, or
    /// by a CLI's model through the server), gathers the evidence, judges every probe.
    fn live_run_with(
        &mut self,
        variant: Variant,
        probes: &[&Probe],
        run_id: &str,
        vars_path: &Path,
        run: &mut dyn FnMut(&mut Fixtures) -> Result<HarnessOutput, String>,
    ) -> Result<Vec<Judged>, String> {
        let host = self.host.expect("live");
        let fx = self.fixtures.as_mut().expect("live runs have fixtures");
        let vars = self.layout.vars(variant, Some(fx));
        let resolved: Vec<Resolved<'_>> = probes
            .iter()
            .map(|p| Resolved::new(p, &vars, run_id))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        let unplantable = self
            .layout
            .prepare(&resolved, &mut fx.listeners)
            .map_err(|e| e.to_string())?;
        if host == Target::Linux
            && let Some((name, why)) = unplantable.iter().next()
        {
            return Err(format!("probe {name} cannot be prepared: {why}"));
        }
        let vf = probe::VarsFile {
            run_id: run_id.to_string(),
            vars: vars.clone(),
        };
        std::fs::write(
            vars_path,
            serde_json::to_string_pretty(&vf).expect("serializes"),
        )
        .map_err(|e| format!("{}: {e}", vars_path.display()))?;
        fx.outside.clear().map_err(|e| e.to_string())?;
        fx.listeners.drain();
        fx.pty.drain();
        let ran = run(fx)?;
        let report: Result<HarnessReport, String> = ran.report.and_then(|text| {
            serde_json::from_str(text.trim())
                .map_err(|e| format!("its output is not a report: {e}"))
        });
        let failure = report.as_ref().err().map(|e| {
            format!(
                "the harness run failed: {e}; stderr: {}",
                ran.stderr
                    .trim()
                    .chars()
                    .rev()
                    .take(600)
                    .collect::<String>()
                    .chars()
                    .rev()
                    .collect::<String>()
            )
        });
        let outcomes: BTreeMap<&str, &probe::ProbeOutcome> = report
            .as_ref()
            .map(|r| r.results.iter().map(|o| (o.name.as_str(), o)).collect())
            .unwrap_or_default();
        // Signals and traces are recorded by the outside process a moment later.
        // Each claimed one is waited for: the first to appear says nothing of the other.
        let claimed = |op: &str| {
            outcomes
                .values()
                .any(|o| o.op == op && o.claim == probe::Claim::Done)
        };
        let (signal_claimed, trace_claimed) = (claimed("signal"), claimed("ptrace"));
        if signal_claimed || trace_claimed {
            let deadline = Instant::now() + Duration::from_secs(1);
            while Instant::now() < deadline
                && ((signal_claimed && fx.outside.signalled().is_none())
                    || (trace_claimed && fx.outside.traced().is_none()))
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let observed = Observed {
            listeners: fx.listeners.drain(),
            tty: fx.pty.drain(),
            signalled: fx.outside.signalled(),
            traced: fx.outside.traced(),
            env_marker: fx.outside.marker.clone(),
            #[cfg(target_os = "linux")]
            shared_marker: fx.shared.marker.clone(),
            #[cfg(not(target_os = "linux"))]
            shared_marker: String::new(),
        };
        let mut judged = Vec::new();
        for r in &resolved {
            if unplantable.contains_key(&r.probe.name) {
                continue;
            }
            let mut decided = evidence::decide(
                &self.layout,
                r,
                outcomes.get(r.probe.name.as_str()).copied(),
                &observed,
            );
            if let (Some(f), None) = (&failure, &decided.inconsistent) {
                decided.inconsistent = Some(f.clone());
            }
            judged.push(Judged {
                name: r.probe.name.clone(),
                op: r.probe.op,
                target: r.target.clone(),
                expected: r.probe.expectation(host).expect("filtered").expect,
                decided,
            });
        }
        if let Some(f) = failure {
            return Err(f);
        }
        Ok(judged)
    }

    /// The unconfined control run: which probes can succeed at all on this machine.
    fn control(
        &mut self,
        variant: Variant,
        probes: &[Probe],
        queries: &[PathBuf],
        sandboxer: &Path,
    ) {
        let probes = self.live_probes(probes);
        let run_id = self.next_run_id();
        let (argv, vars_path) = self.harness_argv(&run_id, queries, sandboxer);
        let cwd = self.layout.runtime(variant);
        if let Err(e) = std::fs::create_dir_all(&cwd) {
            self.errors.push(format!(
                "control ({}): {}: {e}",
                variant.as_str(),
                cwd.display()
            ));
            return;
        }
        let env = self.base_env();
        match self.live_run(variant, &probes, &run_id, &vars_path, argv, &env, &[], &cwd) {
            Ok(judged) => {
                let mut seen = BTreeMap::new();
                for j in judged {
                    if let Some(inc) = &j.decided.inconsistent {
                        self.errors.push(format!(
                            "control run ({}), unconfined: {}: {inc} ({})",
                            variant.as_str(),
                            j.name,
                            j.decided.evidence
                        ));
                    }
                    seen.insert(j.name, j.decided.got == Some(Verdict::Allow));
                }
                self.controls.insert(variant.as_str(), seen);
            }
            Err(e) => self.errors.push(format!(
                "control run ({}), unconfined: {e}",
                variant.as_str()
            )),
        }
    }

    fn results(&self, variant: Variant, judged: Vec<Judged>) -> Vec<ProbeResult> {
        let control = self.controls.get(variant.as_str());
        judged
            .into_iter()
            .map(|j| {
                let reachable = control.and_then(|c| c.get(&j.name)).copied();
                let ev = j.decided.evidence.clone();
                let (pass, evidence, vacuous) = match (j.decided.got, &j.decided.inconsistent) {
                    (None, _) => (false, format!("undecided: {ev}"), false),
                    (Some(_), Some(inc)) => (false, format!("{inc} ({ev})"), false),
                    (Some(got), None) if got != j.expected => {
                        let broken = if j.expected == Verdict::Allow && reachable == Some(false) {
                            "; not possible even unconfined: the probe or its fixture is broken"
                        } else {
                            ""
                        };
                        (false, format!("{ev}{broken}"), false)
                    }
                    (Some(_), None) => (
                        true,
                        ev,
                        j.expected == Verdict::Deny && reachable == Some(false),
                    ),
                };
                ProbeResult {
                    probe: j.name,
                    op: j.op.to_string(),
                    target: j.target,
                    expected: j.expected,
                    got: j.decided.got,
                    pass,
                    evidence,
                    vacuous,
                }
            })
            .collect()
    }

    fn column(
        &self,
        cli: &str,
        variant: Variant,
        platform: Target,
        mode: &str,
        how: How,
    ) -> Column {
        Column {
            cli: cli.to_string(),
            launch: variant,
            platform,
            mode: mode.to_string(),
            how,
            confinement: String::new(),
            results: Vec::new(),
            error: None,
            elapsed_ms: 0,
        }
    }

    /// A CLI's launch, run live with the harness in place of the CLI.
    fn live_cli(
        &mut self,
        a: &Adapter,
        variant: Variant,
        mode: Mode,
        probes: &[Probe],
        queries: &[PathBuf],
    ) -> Column {
        let started = Instant::now();
        let host = self.host.expect("live");
        let mut col = self.column(&a.name, variant, host, mode.as_str(), How::Live);
        match self.live_cli_inner(a, variant, mode, probes, queries) {
            Ok((how, results)) => {
                col.confinement = how;
                col.results = results;
            }
            Err(e) => col.error = Some(e),
        }
        col.elapsed_ms = started.elapsed().as_millis() as u64;
        col
    }

    fn live_cli_inner(
        &mut self,
        a: &Adapter,
        variant: Variant,
        mode: Mode,
        probes: &[Probe],
        queries: &[PathBuf],
    ) -> Result<(String, Vec<ProbeResult>), String> {
        let host = self.host.expect("live");
        let mut launch = self.plan_launch(a, variant, mode, host, Vec::new())?;
        if !launch.confined || launch.mode.mode != mode {
            return Err(format!(
                "the launch is not confined in {mode} mode here: {}",
                launch.mode.reason
            ));
        }
        self.mutate_launch(&mut launch)?;
        let profile = match host {
            Target::Macos => Some(
                platform::seatbelt_profile(&launch, &self.layout.home, None)
                    .map_err(|e| format!("{e:#}"))?,
            ),
            Target::Linux => None,
        };
        launch::write_files(&launch, profile.as_deref()).map_err(|e| e.to_string())?;
        let sandboxer = PathBuf::from(&launch.argv[0]);
        let sandboxer = match host {
            Target::Linux => sandboxer,
            Target::Macos => platform::locate_sandboxer(&self.opts.dispatcher),
        };
        let run_id = self.next_run_id();
        let (hargv, vars_path) = self.harness_argv(&run_id, queries, &sandboxer);
        let mut argv = live::wrapper(&launch.argv, &launch.cli_argv).map_err(|e| e.to_string())?;
        argv.extend(hargv);
        let mut env = self.base_env();
        env.extend(launch.env_set.clone());
        let live = self.live_probes(probes);
        let judged = self.live_run(
            variant,
            &live,
            &run_id,
            &vars_path,
            argv,
            &env,
            &launch.env_removed,
            &launch.cwd,
        )?;
        Ok((launch.mode.reason.clone(), self.results(variant, judged)))
    }

    /// The scripted step, run live: `dispatcher step run`'s launch, its script the harness.
    fn live_script(&mut self, probes: &[Probe], queries: &[PathBuf]) -> Column {
        let started = Instant::now();
        let host = self.host.expect("live");
        let mut col = self.column("scripted-step", Variant::ScriptedStep, host, "-", How::Live);
        match self.live_script_inner(probes, queries) {
            Ok((how, results)) => {
                col.confinement = how;
                col.results = results;
            }
            Err(e) => col.error = Some(e),
        }
        col.elapsed_ms = started.elapsed().as_millis() as u64;
        col
    }

    fn live_script_inner(
        &mut self,
        probes: &[Probe],
        queries: &[PathBuf],
    ) -> Result<(String, Vec<ProbeResult>), String> {
        let host = self.host.expect("live");
        let sandboxer = platform::locate_sandboxer(&self.opts.dispatcher);
        let run_id = self.next_run_id();
        let (hargv, vars_path) = self.harness_argv(&run_id, queries, &sandboxer);
        let script = self.layout.harness_dir.join(format!("step-{run_id}.sh"));
        let text = format!(
            "#!/bin/sh\n# The contract's scripted step: the harness, run as the step's script.\nexec {}\n",
            hargv
                .iter()
                .map(|w| sh_quote(w))
                .collect::<Vec<_>>()
                .join(" ")
        );
        std::fs::write(&script, text).map_err(|e| format!("{}: {e}", script.display()))?;
        let mut step = self.plan_step(host, script, &sandboxer)?;
        crate::step::write_files(&self.layout.state, &step).map_err(|e| e.to_string())?;
        let env = self.base_env();
        let live = self.live_probes(probes);
        let argv = std::mem::take(&mut step.argv);
        let judged = self.live_run(
            Variant::ScriptedStep,
            &live,
            &run_id,
            &vars_path,
            argv,
            &env,
            &step.env_removed,
            &step.cwd,
        )?;
        Ok((
            step.confinement.clone(),
            self.results(Variant::ScriptedStep, judged),
        ))
    }

    fn plan_step(
        &self,
        target: Target,
        script: PathBuf,
        sandboxer: &Path,
    ) -> Result<crate::step::StepLaunch, String> {
        let req = crate::step::StepRequest {
            workflow: self.layout.step_workflow.clone(),
            step: self.layout.scripted_step.clone(),
            script,
            args: Vec::new(),
            attach: Vec::new(),
        };
        let home = self.layout.home.clone();
        let mut step = crate::step::plan(
            &self.layout.state,
            &req,
            target,
            &home,
            sandboxer,
            |policy| {
                if target.is_host() {
                    platform::confinement(target, policy, &home)
                } else {
                    Ok(format!("evaluated for {target}"))
                }
            },
        )
        .map_err(|e| e.to_string())?;
        if self.opts.mutation.is_some() {
            self.mutate_text(&mut step.policy_text)?;
            if target == Target::Macos {
                step.profile = Some(render_macos(&step.policy_text, &home, &step.policy_path)?);
            }
        }
        Ok(step)
    }

    /// A CLI's macOS launch, decided by the evaluator against its exact profile.
    fn evaluate_cli(&self, a: &Adapter, variant: Variant, mode: Mode, probes: &[Probe]) -> Column {
        let started = Instant::now();
        let mut col = self.column(
            &a.name,
            variant,
            Target::Macos,
            mode.as_str(),
            How::Evaluated,
        );
        let profile = self
            .plan_launch(a, variant, mode, Target::Macos, Vec::new())
            .and_then(|mut l| {
                self.mutate_launch(&mut l)?;
                platform::seatbelt_profile(&l, &self.layout.home, None)
                    .map_err(|e| format!("{e:#}"))
            });
        self.evaluate_into(&mut col, variant, profile, probes);
        col.elapsed_ms = started.elapsed().as_millis() as u64;
        col
    }

    fn evaluate_script(&self, probes: &[Probe]) -> Column {
        let started = Instant::now();
        let mut col = self.column(
            "scripted-step",
            Variant::ScriptedStep,
            Target::Macos,
            "-",
            How::Evaluated,
        );
        let script = self.layout.harness_dir.join("step-evaluated.sh");
        let profile = self
            .plan_step(Target::Macos, script, Path::new("sandboxer"))
            .and_then(|s| {
                s.profile
                    .ok_or_else(|| "the step has no profile".to_string())
            });
        self.evaluate_into(&mut col, Variant::ScriptedStep, profile, probes);
        col.elapsed_ms = started.elapsed().as_millis() as u64;
        col
    }

    fn evaluate_into(
        &self,
        col: &mut Column,
        variant: Variant,
        profile: Result<String, String>,
        probes: &[Probe],
    ) {
        let text = match profile {
            Ok(t) => t,
            Err(e) => {
                col.error = Some(e);
                return;
            }
        };
        let parsed = match sandboxer::sbpl::parse(&text, &BTreeMap::new()) {
            Ok(p) => p,
            Err(e) => {
                col.error = Some(format!("the rendered profile does not parse: {e}"));
                return;
            }
        };
        col.confinement = format!(
            "the Seatbelt profile `dispatcher profile` writes ({} lines)",
            text.lines().count()
        );
        let vars = self.layout.vars(variant, None);
        for p in probes {
            let Some(expect) = p.macos.as_ref() else {
                continue;
            };
            let (got, target, evidence) = match probe::evaluate(&parsed, p, &vars) {
                Ok(e) => {
                    let got = match e.outcome {
                        sandboxer::sbpl::Outcome::Allow => Some(Verdict::Allow),
                        sandboxer::sbpl::Outcome::Deny => Some(Verdict::Deny),
                        sandboxer::sbpl::Outcome::Unknown => None,
                    };
                    let why = e
                        .deciding()
                        .map(|c| format!("{}: {}", c.check, c.rule))
                        .unwrap_or_default();
                    (got, e.target.clone(), why)
                }
                Err(e) => (None, p.target.as_str().to_string(), e),
            };
            col.results.push(ProbeResult {
                probe: p.name.clone(),
                op: p.op.to_string(),
                target,
                expected: expect.expect,
                pass: got == Some(expect.expect),
                got,
                evidence,
                vacuous: false,
            });
        }
    }

    /// Whether the real CLI starts inside its launch (`--version`), and its own sandbox is
    /// off (statically, and by asking it where it can say so). Returns the checks and the
    /// version line of an installed CLI.
    fn cli_checks(
        &mut self,
        a: &Adapter,
        own: &own_sandbox::Statement,
    ) -> (Vec<CliCheck>, Option<String>) {
        let host = self.host.expect("live");
        let check = |name: &str, status, detail: String| CliCheck {
            cli: a.name.clone(),
            platform: host,
            check: name.to_string(),
            status,
            detail,
        };
        let mut out = Vec::new();
        let installed = adapter::locate_binary(a);
        let mut version = None;
        match &installed {
            None => out.push(check(
                "starts",
                CheckStatus::Skipped,
                format!(
                    "{} is not installed here (scripts/install-clis.sh, or AGENTWORKS_CLI_{})",
                    a.binary,
                    a.name.to_ascii_uppercase()
                ),
            )),
            Some(_) => match self.run_cli(a, a.version_args.clone()) {
                Ok(ran)
                    if ran.success()
                        && !(ran.stdout.trim().is_empty() && ran.stderr.trim().is_empty()) =>
                {
                    // Some CLIs (pi) print their version on stderr.
                    let text = if ran.stdout.trim().is_empty() {
                        &ran.stderr
                    } else {
                        &ran.stdout
                    };
                    let line = text.trim().lines().next().unwrap_or_default().to_string();
                    version = Some(line.clone());
                    out.push(check(
                        "starts",
                        CheckStatus::Pass,
                        format!(
                            "`{} {}` inside the launch printed {line:?}",
                            a.binary,
                            a.version_args.join(" ")
                        ),
                    ));
                }
                Ok(ran) => out.push(check(
                    "starts",
                    CheckStatus::Fail,
                    format!(
                        "{} inside the launch: {}",
                        ran.status(),
                        ran.stderr.trim().lines().last().unwrap_or("")
                    ),
                )),
                Err(e) => out.push(check("starts", CheckStatus::Fail, e)),
            },
        }
        let statically = self
            .plan_launch(a, Variant::Chat, Mode::Full, host, Vec::new())
            .and_then(|l| own_sandbox::check_static(own, &l));
        let observed = match (&own.observe, &installed) {
            (Some(obs), Some(_)) => Some(match self.run_cli(a, obs.args.clone()) {
                Ok(ran) if ran.stdout.contains(&obs.stdout_contains) => Ok(format!(
                    "`{} {}` inside the launch says {:?}",
                    a.binary,
                    obs.args.join(" "),
                    obs.stdout_contains
                )),
                Ok(ran) => Err(format!(
                    "`{} {}` inside the launch ({}) does not say {:?}",
                    a.binary,
                    obs.args.join(" "),
                    ran.status(),
                    obs.stdout_contains
                )),
                Err(e) => Err(e),
            }),
            (Some(_), None) => Some(Ok("(its own answer not asked: not installed)".to_string())),
            (None, _) => None,
        };
        let (status, detail) = match (statically, observed) {
            (Err(e), _) | (Ok(_), Some(Err(e))) => (CheckStatus::Fail, e),
            (Ok(s), Some(Ok(o))) => (CheckStatus::Pass, format!("{s}; {o}")),
            (Ok(s), None) => (CheckStatus::Pass, s),
        };
        out.push(check("own-sandbox-off", status, detail));
        (out, version)
    }

    /// Runs the real CLI inside its full-mode chat launch with `cli_args` after the adapter's.
    fn run_cli(&mut self, a: &Adapter, cli_args: Vec<String>) -> Result<live::Ran, String> {
        let host = self.host.expect("live");
        let launch = self.plan_launch(a, Variant::Chat, Mode::Full, host, cli_args)?;
        if !launch.confined {
            return Err(format!(
                "the launch is not confined here: {}",
                launch.mode.reason
            ));
        }
        let profile = match host {
            Target::Macos => Some(
                platform::seatbelt_profile(&launch, &self.layout.home, None)
                    .map_err(|e| format!("{e:#}"))?,
            ),
            Target::Linux => None,
        };
        launch::write_files(&launch, profile.as_deref()).map_err(|e| e.to_string())?;
        let mut env = self.base_env();
        env.extend(launch.env_set.clone());
        live::run(live::Spawn {
            argv: launch.argv.clone(),
            env: &env,
            env_removed: &launch.env_removed,
            cwd: &launch.cwd,
            stdin: Stdio::null(),
            controlling_tty: false,
            timeout: live::RUN_TIMEOUT,
        })
        .map_err(|e| e.to_string())
    }

    fn macos_own_sandbox(&self, a: &Adapter, own: &own_sandbox::Statement) -> CliCheck {
        let (status, detail) = match self
            .plan_launch(a, Variant::Chat, Mode::Full, Target::Macos, Vec::new())
            .and_then(|l| own_sandbox::check_static(own, &l))
        {
            Ok(s) => (CheckStatus::Pass, s),
            Err(e) => (CheckStatus::Fail, e),
        };
        CliCheck {
            cli: a.name.clone(),
            platform: Target::Macos,
            check: "own-sandbox-off".into(),
            status,
            detail,
        }
    }
}

/// Renders a policy text as the macOS profile, as `platform::seatbelt_profile` does.
fn render_macos(policy_text: &str, home: &Path, policy_path: &Path) -> Result<String, String> {
    let opts = platform::macos_resolve_options(home, None).map_err(|e| format!("{e:#}"))?;
    let policy =
        sandboxer::Policy::from_toml(policy_text, &policy_path.display().to_string(), &opts)
            .map_err(|e| e.to_string())?;
    sandboxer::seatbelt::render(&policy).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(tmp: &Path) -> Options {
        Options {
            clis: Vec::new(),
            chat: true,
            steps: true,
            live: false,
            keep: false,
            profiles_dir: None,
            queries_dir: None,
            tmp_dir: Some(tmp.to_path_buf()),
            dispatcher: PathBuf::from("/nonexistent/dispatcher"),
            mutation: None,
            harness: None,
        }
    }

    #[test]
    fn the_embedded_queries_cover_the_contract() {
        let t = tempfile::tempdir().unwrap();
        let sets = load_sets(&options(t.path())).unwrap();
        let names: Vec<&str> = sets.chat.iter().map(|p| p.name.as_str()).collect();
        for must in [
            "home-read",
            "home-write",
            "runtime-write",
            "workflow-write",
            "attached-read",
            "attached-write",
            "other-workflow-read",
            "other-workflow-write",
            "other-runtime-read",
            "other-runtime-read-dotdot",
            "config-json-read",
            "auth-read",
            "personal-mcp-read",
            "events-db-read",
            "beside-runtimes-create",
            "plan-json-read",
            "workflow-db-read",
            "absent-plan-json-create",
            "absent-workflow-db-create",
            "exec-open",
            "exec-osascript",
            "exec-osacompile",
            "exec-automator",
            "exec-shortcuts",
            "copied-open",
            "apple-event",
            "launchservices-lookup",
            "session-bus",
            "tmux-server",
            "abstract-socket",
            "signal-outside",
            "ptrace-outside",
            "proc-root-outside",
            "proc-environ-outside",
            "tiocsti-inherited-terminal",
        ] {
            assert!(names.contains(&must), "the chat contract lacks {must}");
        }
        assert!(!sets.steps.is_empty());
        // Every probe decides on at least one platform, with a reason.
        for p in sets.chat.iter().chain(&sets.steps) {
            assert!(p.linux.is_some() || p.macos.is_some(), "{}", p.name);
        }
    }

    #[test]
    fn the_harness_reads_what_the_runner_loads() {
        // The harness checks variables against the vars file: the runner's vars define every
        // variable of the vocabulary, for every launch it describes.
        let t = tempfile::tempdir().unwrap();
        let layout = Layout::create(Some(t.path()), false).unwrap();
        for v in [Variant::Chat, Variant::AgentStep, Variant::ScriptedStep] {
            let vars = layout.vars(v, None);
            for var in vars::VARIABLES {
                assert!(
                    vars.contains_key(var.name),
                    "{} has no value for {:?}",
                    var.name,
                    v
                );
            }
        }
    }

    #[test]
    fn preparing_refuses_probes_that_would_disturb_each_other() {
        let t = tempfile::tempdir().unwrap();
        let mut layout = Layout::create(Some(t.path()), false).unwrap();
        let mut listeners =
            fixture::Listeners::new(&format!("aw-test-{}", layout.invocation)).unwrap();
        let vars = layout.vars(Variant::Chat, None);
        let load = |body: &str| {
            probe::load(&format!("version = 1\n{body}"), "t.toml", &|v| {
                vars::known(Kind::Chat, v)
            })
            .unwrap()
        };

        let ps = load(
            "[[probe]]\nname = \"a\"\nop = \"read\"\ntarget = \"{home}/x\"\nlinux = { expect = \"allow\", why = \"w\" }\n\
             [[probe]]\nname = \"b\"\nop = \"create\"\ntarget = \"{home}/x\"\nlinux = { expect = \"allow\", why = \"w\" }\n",
        );
        let rs: Vec<Resolved<'_>> = ps
            .iter()
            .map(|p| Resolved::new(p, &vars, "r1").unwrap())
            .collect();
        let e = layout.prepare(&rs, &mut listeners).unwrap_err().to_string();
        assert!(
            e.contains("needs") && e.contains("give one of them another path"),
            "{e}"
        );

        let ps = load(
            "[[probe]]\nname = \"a\"\nop = \"read\"\ntarget = \"{home}/y\"\nlinux = { expect = \"allow\", why = \"w\" }\n\
             [[probe]]\nname = \"b\"\nop = \"delete\"\ntarget = \"{home}/y\"\nlinux = { expect = \"allow\", why = \"w\" }\n",
        );
        let rs: Vec<Resolved<'_>> = ps
            .iter()
            .map(|p| Resolved::new(p, &vars, "r1").unwrap())
            .collect();
        let e = layout.prepare(&rs, &mut listeners).unwrap_err().to_string();
        assert!(
            e.contains("b removes, moves or makes") && e.contains("a also use"),
            "{e}"
        );

        // A path outside the temporary folder is never planted: left to the evaluator.
        let ps = load(
            "[[probe]]\nname = \"c\"\nop = \"read\"\ntarget = \"/etc/hostname\"\nmacos = { expect = \"allow\", why = \"w\" }\n",
        );
        let rs: Vec<Resolved<'_>> = ps
            .iter()
            .map(|p| Resolved::new(p, &vars, "r1").unwrap())
            .collect();
        let skipped = layout.prepare(&rs, &mut listeners).unwrap();
        assert!(
            skipped["c"].contains("outside the runner's temporary folder"),
            "{skipped:?}"
        );

        // Planting: a file with a marker, an absent path, a folder with a marker entry.
        let ps = load(
            "[[probe]]\nname = \"r\"\nop = \"read\"\ntarget = \"{home}/deep/r.txt\"\nlinux = { expect = \"allow\", why = \"w\" }\n\
             [[probe]]\nname = \"c\"\nop = \"create\"\ntarget = \"{home}/made.txt\"\nlinux = { expect = \"allow\", why = \"w\" }\n\
             [[probe]]\nname = \"l\"\nop = \"list\"\ntarget = \"{home}/dir\"\nlinux = { expect = \"allow\", why = \"w\" }\n",
        );
        std::fs::write(layout.home.join("made.txt"), "left over").unwrap();
        let rs: Vec<Resolved<'_>> = ps
            .iter()
            .map(|p| Resolved::new(p, &vars, "r1").unwrap())
            .collect();
        assert!(layout.prepare(&rs, &mut listeners).unwrap().is_empty());
        let r = layout.home.join("deep/r.txt");
        let marker = layout.marker_for(&r).unwrap().to_string();
        assert_eq!(std::fs::read_to_string(&r).unwrap(), format!("{marker}\n"));
        assert!(!layout.home.join("made.txt").exists());
        let dir = layout.home.join("dir");
        assert!(dir.join(layout.marker_for(&dir).unwrap()).exists());
        // The product's own secret is its marker, and is never printed.
        let config = layout.state.config_json();
        assert_eq!(
            layout.marker_for(&config),
            Some(layout.state.config().server_token.as_str())
        );
        assert!(
            !layout
                .marker_label(&layout.state.config().server_token)
                .contains(&layout.state.config().server_token)
        );
    }
}
