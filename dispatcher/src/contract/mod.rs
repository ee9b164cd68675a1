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
//! `dispatcher profile` writes for the launch (`launch::seatbelt_profile`), and live on a
//! Mac by `scripts/mac-selftest.sh`. `docs/contract.md` is the full description.

mod cli_checks;
mod evaluated;
pub mod evidence;
pub mod fixture;
mod judge;
pub mod late;
mod launches;
mod links;
pub mod live;
#[cfg(feature = "test-hooks")]
pub mod mutate;
#[cfg(not(feature = "test-hooks"))]
pub use crate::test_hooks::absent as mutate;
pub mod own_sandbox;
pub mod report;
mod runner;
pub mod served;
#[cfg(target_os = "linux")]
pub mod shared;
pub mod vars;

use runner::{HarnessOutput, Runner, sh_quote};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use sandboxer::Target;
use sandboxer::probe::{self, Probe, ProbeOp};

use crate::adapter::{self, Adapter};
use crate::modes::Mode;
use crate::platform;

use fixture::{Fixtures, Layout, Variant};
use mutate::Mutation;
use report::{CheckStatus, Column, Machine, ProbeRow, Report};
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
    /// The command line asks for something this build cannot do.
    #[error("{0}")]
    Usage(String),
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
pub fn main(args: ContractArgs, profiles_dir: Option<&Path>) -> Result<ExitCode, ContractError> {
    if let Some(dir) = &args.outside_process {
        fixture::outside_process(dir);
    }
    let mutation =
        Mutation::from_flag(args.break_policy.as_deref()).map_err(ContractError::Usage)?;
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
        dispatcher: std::env::current_exe().map_err(|e| {
            ContractError::Io(format!("cannot find the dispatcher's own binary: {e}"))
        })?,
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
        let json =
            serde_json::to_string_pretty(&report).map_err(|e| ContractError::Io(e.to_string()))?;
        println!("{json}");
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
            .map(|n| adapter::find(&all, n).map_err(|e| ContractError::Load(e.to_string())))
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
    let abi = sandboxer::Confiner::kernel_landlock_abi();
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

#[cfg(test)]
mod tests {
    use super::*;
    use fixture::Resolved;

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
        // Loads the probes of `body`, resolves them and prepares them all for one run.
        let mut prepare = |body: &str| {
            let ps = probe::load(&format!("version = 1\n{body}"), "t.toml", &|v| {
                vars::known(Kind::Chat, v)
            })
            .unwrap();
            let rs: Vec<Resolved<'_>> = ps
                .iter()
                .map(|p| Resolved::new(p, &vars, "r1").unwrap())
                .collect();
            layout
                .prepare(&rs, &mut listeners)
                .map_err(|e| e.to_string())
        };

        let e = prepare(
            "[[probe]]\nname = \"a\"\nop = \"read\"\ntarget = \"{home}/x\"\nlinux = { expect = \"allow\", why = \"w\" }\n\
             [[probe]]\nname = \"b\"\nop = \"create\"\ntarget = \"{home}/x\"\nlinux = { expect = \"allow\", why = \"w\" }\n",
        )
        .unwrap_err();
        assert!(
            e.contains("needs") && e.contains("give one of them another path"),
            "{e}"
        );

        let e = prepare(
            "[[probe]]\nname = \"a\"\nop = \"read\"\ntarget = \"{home}/y\"\nlinux = { expect = \"allow\", why = \"w\" }\n\
             [[probe]]\nname = \"b\"\nop = \"delete\"\ntarget = \"{home}/y\"\nlinux = { expect = \"allow\", why = \"w\" }\n",
        )
        .unwrap_err();
        assert!(
            e.contains("b removes, moves or makes") && e.contains("a also use"),
            "{e}"
        );

        // A path outside the temporary folder is never planted: left to the evaluator.
        let skipped = prepare(
            "[[probe]]\nname = \"c\"\nop = \"read\"\ntarget = \"/etc/hostname\"\nmacos = { expect = \"allow\", why = \"w\" }\n",
        )
        .unwrap();
        assert!(
            skipped["c"].contains("outside the runner's temporary folder"),
            "{skipped:?}"
        );

        // A kernel-setting probe names a file under /proc/sys, nothing else: nothing is read,
        // locked or written for it.
        let e = prepare(
            "[[probe]]\nname = \"k\"\nop = \"sysctl-write\"\ntarget = \"{home}/not-a-setting\"\nlinux = { expect = \"deny\", why = \"w\" }\n",
        )
        .unwrap_err();
        assert!(
            e.contains("is not a kernel setting") && e.contains("not-a-setting"),
            "{e}"
        );
        assert!(!Path::new(&vars["home"]).join("not-a-setting").exists());

        // Planting: a file with a marker, an absent path, a folder with a marker entry.
        let home = vars["home"].clone();
        std::fs::write(Path::new(&home).join("made.txt"), "left over").unwrap();
        assert!(
            prepare(
                "[[probe]]\nname = \"r\"\nop = \"read\"\ntarget = \"{home}/deep/r.txt\"\nlinux = { expect = \"allow\", why = \"w\" }\n\
                 [[probe]]\nname = \"c\"\nop = \"create\"\ntarget = \"{home}/made.txt\"\nlinux = { expect = \"allow\", why = \"w\" }\n\
                 [[probe]]\nname = \"l\"\nop = \"list\"\ntarget = \"{home}/dir\"\nlinux = { expect = \"allow\", why = \"w\" }\n",
            )
            .unwrap()
            .is_empty()
        );
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
