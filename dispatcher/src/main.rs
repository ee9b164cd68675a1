//! `dispatcher`: the unconfined launcher of confined coding CLIs.

use std::path::PathBuf;
use std::process::ExitCode;

// The unwinder linked in from GCC's `libgcc_eh.a` rather than loaded from `libgcc_s.so.1`, whose
// constructor's `cpuid` calls trap on a VM: 0.1-0.2 ms of every start (`dispatcher launch`,
// and `dispatcher bridge`, which every confined CLI starts). See sandboxer's main.rs.
#[link(name = "gcc_eh", kind = "static", modifiers = "-bundle")]
unsafe extern "C" {}

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use dispatcher::adapter;
use dispatcher::grants::Attach;
use dispatcher::ids::{ChatId, WorkflowId};
use dispatcher::launch::{self, Decide, LaunchRequest};
use dispatcher::modes::Mode;
use dispatcher::platform;
use dispatcher::server::tmux;
use dispatcher::state::{ChatSettings, StateRoot};
use sandboxer::Target;

mod endpoint_args;
mod server_commands;

const AFTER_HELP: &str = "\
The state root is --state-root DIR, else $AGENTWORKS_STATE_ROOT, else the platform default
($XDG_DATA_HOME/agentworks on Linux, ~/Library/Application Support/AgentWorks on macOS).
Every command except `init` refuses a folder that is not a state root.

A first launch:
  dispatcher init --state-root /tmp/aw
  dispatcher --state-root /tmp/aw workflow add wf-main
  dispatcher --state-root /tmp/aw chat add chat-1
  dispatcher --state-root /tmp/aw launch --cli claude --chat chat-1 --workflow wf-main --dry-run

Exit codes: 0 success; 2 bad input (unknown chat/workflow/CLI, invalid ids, not a state root,
an adapter error); 125 the sandbox could not be set up (nothing was run); otherwise a launched
CLI's own exit status.";

#[derive(Parser)]
#[command(name = "dispatcher", version, about = "Launch coding CLIs confined; the only unconfined path out", after_help = AFTER_HELP)]
struct Cli {
    /// The state root (default: $AGENTWORKS_STATE_ROOT, else the platform's app folder).
    #[arg(long, global = true, value_name = "DIR")]
    state_root: Option<PathBuf>,
    /// A folder overriding the embedded profiles (clis/NAME.toml adapters).
    #[arg(long, global = true, value_name = "DIR")]
    profiles_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a state root (config.json with a fresh server token, the layout), or confirm one.
    Init {
        /// Keep workflows in this folder instead of <state-root>/workspace-docs.
        #[arg(long, value_name = "DIR")]
        docs_root: Option<PathBuf>,
        /// Anchor the existing state root at this path anew, though its anchor names another
        /// folder (you moved or restored it yourself). Run it outside any chat.
        #[arg(long)]
        adopt: bool,
        /// Give the existing state root a fresh server token (for one that may have been read,
        /// e.g. through a hard link a launch refused). Running chats and servers keep the old
        /// one until restarted. Run it outside any chat.
        #[arg(long, conflicts_with_all = ["adopt", "docs_root"])]
        rotate_token: bool,
    },
    /// Workflows: folders of workspace documents.
    #[command(subcommand)]
    Workflow(WorkflowCmd),
    /// Chats: each has a runtime folder and saved settings.
    #[command(subcommand)]
    Chat(ChatCmd),
    /// Launch a CLI for a chat on a workflow, confined.
    Launch(LaunchArgs),
    /// Write the chat's Seatbelt profile for a Mac (works on any OS).
    Profile(ProfileArgs),
    /// Check the programs the dispatcher runs outside a sandbox (the enforcer, tmux): each
    /// must be one no chat can have written; says how to fix one that is not.
    Doctor {
        #[arg(long)]
        json: bool,
    },
    /// List the CLI adapters, whether each is installed, its version and the modes it gets here.
    Clis {
        #[arg(long)]
        json: bool,
    },
    /// The MCP server a confined CLI starts (stdio): forwards every tool call to the chat's
    /// bridge socket, where the unconfined dispatcher checks it against the chat's policy.
    Bridge {
        /// The chat's bridge socket (in its runtime).
        #[arg(long, value_name = "PATH")]
        socket: PathBuf,
    },
    /// Run the dispatcher server on 127.0.0.1: launches chats (structured or tmux), serves
    /// their bridges, records their events; API authenticated with config.json's server token.
    Serve(server_commands::ServeArgs),
    /// Stop the server listening on --port: asked to shut down with this state root's token
    /// (never killed by name).
    Stop(server_commands::StopArgs),
    /// Talk to the running server of this state root: list, launch, stop chats, read events.
    #[command(subcommand)]
    Chats(server_commands::ChatsCmd),
    /// The sandbox contract: run the probes of queries/*.toml inside every CLI's real launch
    /// in a fresh temporary state root (Linux: live; macOS: evaluated against the exact
    /// profile), check each CLI starts confined with its own sandbox off. Exit 1 on any
    /// failure. `--all --markdown` prints the permission map (docs/permission-map.md). It
    /// makes its own temporary state root: --state-root is not used.
    Contract(dispatcher::contract::ContractArgs),
    /// Workflow steps.
    #[command(subcommand)]
    Step(StepCmd),
    /// End-to-end self-tests. `test cli-sandbox-contract --provider NAME`: the sandbox
    /// contract through a fresh `dispatcher serve` of its own (a real chat of that CLI launched
    /// by the server, the probes under the policy the server wrote, the model-driven part when
    /// the CLI is logged in). --state-root DIR, if given, is where its world's state root is
    /// made (a new or empty folder), never an existing one. `test cli-p0 --provider NAME`: the
    /// seed's P0 scenario run by that CLI's own tools, driven by the scripted model, in a tmux
    /// and a structured chat of a fresh server.
    #[command(subcommand)]
    Test(dispatcher::contract::served::TestCmd),
    /// A scripted model on loopback for driving real CLIs offline (see its --help).
    ScriptedModel(ScriptedModelArgs),
}

const SCRIPTED_MODEL_HELP: &str = "\
Speaks Anthropic Messages (…/messages), OpenAI Responses (…/responses), OpenAI Chat
Completions (…/chat/completions) and Gemini (…:streamGenerateContent, …:generateContent),
routed by the path's suffix. Each request's answer comes from marker lines in the prompt:
  AGENTWORKS-RUN: <command>             the CLI's shell tool runs <command>
  AGENTWORKS-WRITE: <path> <content>    the CLI's write tool writes the rest of the line
One action per turn, in order (the step is the number of tool results in the request), then
the final text AGENTWORKS-DONE. Every request is one JSON line in the record file.

The first line on stdout is the bound address. Example:
  dispatcher scripted-model --record /tmp/model.jsonl &   # prints 127.0.0.1:PORT
  ANTHROPIC_BASE_URL=http://127.0.0.1:PORT ANTHROPIC_API_KEY=dummy \\
    claude -p 'AGENTWORKS-RUN: echo hi > /tmp/hi.txt' --allowedTools Bash
See docs/scripted-model.md for each CLI's settings.";

#[derive(Args)]
#[command(after_help = SCRIPTED_MODEL_HELP)]
struct ScriptedModelArgs {
    /// The address to listen on: loopback only (127.0.0.1 or ::1); port 0 picks a free one.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    listen: std::net::SocketAddr,
    /// The JSONL file every request is recorded to (appended to).
    #[arg(long, value_name = "FILE")]
    record: PathBuf,
}

#[derive(Subcommand)]
enum StepCmd {
    /// Run a script for a workflow step, confined like a chat launch: the step's runtime and
    /// its workflow read-write, attached workflows as given, planning/ and workflow.db
    /// refused, the state root protected. Refused where no sandbox works. Exits with the
    /// script's status.
    Run {
        /// The workflow the step belongs to (granted read-write; its working folder).
        #[arg(long)]
        workflow: String,
        /// The step's name (its runtime folder's name).
        #[arg(long, default_value = "script")]
        step: String,
        /// The script (copied into the step's read-only launch folder, then run from there).
        #[arg(long, value_name = "FILE")]
        script: PathBuf,
        /// Attach another workflow: W (read-only) or W:rw. Repeatable.
        #[arg(long, value_name = "W[:rw]")]
        attach: Vec<String>,
        /// Print the step's launch without writing or running anything.
        #[arg(long)]
        dry_run: bool,
        /// Arguments for the script.
        #[arg(last = true)]
        args: Vec<String>,
    },
}

#[derive(Subcommand)]
enum WorkflowCmd {
    /// Create a workflow folder.
    Add { id: String },
    /// List workflows.
    List,
}

#[derive(Subcommand)]
enum ChatCmd {
    /// Create a chat (its runtime folder and settings).
    Add {
        id: String,
        /// The chat's saved mode.
        #[arg(long, value_enum, default_value_t = Mode::Auto)]
        mode: Mode,
    },
    /// List chats.
    List,
}

#[derive(Args)]
struct LaunchTarget {
    /// CLI adapter name (see `dispatcher clis`).
    #[arg(long)]
    cli: String,
    #[arg(long)]
    chat: String,
    #[arg(long)]
    workflow: String,
    /// Attach another workflow: W (read-only) or W:rw. Repeatable.
    #[arg(long, value_name = "W[:rw]")]
    attach: Vec<String>,
}

#[derive(Args)]
struct LaunchArgs {
    #[command(flatten)]
    target: LaunchTarget,
    /// auto (full where the platform can enforce the policy, else bridge-only), full, or
    /// bridge-only. Default: the chat's saved mode.
    #[arg(long, value_enum)]
    mode: Option<Mode>,
    /// Start the CLI in a tmux session whose server socket lives inside the state root.
    #[arg(long)]
    tmux: bool,
    /// Run the CLI headless (its non-interactive arguments, e.g. `-p --output-format json`).
    #[arg(long)]
    headless: bool,
    /// The CLI's working folder (default: the chat's runtime).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Print the launch without writing or running anything.
    #[arg(long)]
    dry_run: bool,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
    /// Compute the launch for another OS (with --dry-run).
    #[arg(long, value_enum)]
    target_os: Option<TargetOs>,
    #[command(flatten)]
    endpoint: endpoint_args::EndpointArgs,
    /// Arguments passed to the CLI after the adapter's.
    #[arg(last = true)]
    cli_args: Vec<String>,
}

#[derive(Args)]
struct ProfileArgs {
    #[command(flatten)]
    target: LaunchTarget,
    /// Only macos: Seatbelt profiles are macOS's.
    #[arg(long, value_enum)]
    target_os: TargetOs,
    /// The Mac user's home (default: this home on a Mac; /Users/NAME with --user).
    #[arg(long, value_name = "DIR", conflicts_with = "user")]
    home: Option<PathBuf>,
    /// The Mac user's name: the home is /Users/NAME.
    #[arg(long)]
    user: Option<String>,
    /// The Mac user's uid, for the ways-out list (their `/private/tmp/tmux-UID`). Default:
    /// this process's (right on the Mac itself; pass it when writing a profile elsewhere).
    #[arg(long, value_name = "N")]
    uid: Option<u32>,
    /// Write here instead of the chat's runtime (sandbox.sb).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// An OS a launch can be computed for (`--target-os`).
#[derive(Clone, Copy, ValueEnum)]
enum TargetOs {
    Macos,
    Linux,
}

impl From<TargetOs> for Target {
    fn from(t: TargetOs) -> Target {
        match t {
            TargetOs::Macos => Target::Macos,
            TargetOs::Linux => Target::Linux,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("dispatcher: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn open_state(cli_root: Option<&PathBuf>) -> Result<StateRoot> {
    let path = StateRoot::locate(cli_root.map(|p| p.as_path()))?;
    Ok(StateRoot::open(&path)?)
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Init {
            docs_root,
            adopt,
            rotate_token,
        } => {
            let path = StateRoot::locate(cli.state_root.as_deref())?;
            if rotate_token {
                let mut state = StateRoot::open(&path)?;
                state.rotate_token()?;
                println!("new server token in {}", state.config_json().display());
                return Ok(ExitCode::SUCCESS);
            }
            let (state, created) = if adopt {
                (StateRoot::anchor(&path, true)?, false)
            } else {
                StateRoot::init(&path, docs_root.as_deref())?
            };
            println!(
                "{} state root {}",
                if created { "created" } else { "already a" },
                state.path().display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Workflow(cmd) => {
            let state = open_state(cli.state_root.as_ref())?;
            match cmd {
                WorkflowCmd::Add { id } => {
                    let dir = state.add_workflow(&WorkflowId::new(&id)?)?;
                    println!("created workflow {id} at {}", dir.display());
                }
                WorkflowCmd::List => {
                    let docs = state.docs_root();
                    let mut names: Vec<_> = std::fs::read_dir(&docs)
                        .with_context(|| format!("listing {}", docs.display()))?
                        .filter_map(|e| e.ok()?.file_name().into_string().ok())
                        .filter(|n| WorkflowId::new(n).is_ok())
                        .collect();
                    names.sort();
                    for n in names {
                        println!("{n}");
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Chat(cmd) => {
            let state = open_state(cli.state_root.as_ref())?;
            match cmd {
                ChatCmd::Add { id, mode } => {
                    let settings = ChatSettings {
                        mode: mode.to_string(),
                    };
                    let runtime = state.add_chat(&ChatId::new(&id)?, &settings)?;
                    println!("created chat {id}; runtime {}", runtime.display());
                }
                ChatCmd::List => {
                    for c in state.chats()? {
                        let s = state.load_chat(&c)?;
                        println!("{c}\t{}", s.mode);
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Launch(args) => launch_cmd(&cli.state_root, cli.profiles_dir.as_deref(), args),
        Command::Profile(args) => profile_cmd(&cli.state_root, cli.profiles_dir.as_deref(), args),
        Command::Doctor { json } => doctor_cmd(&open_state(cli.state_root.as_ref())?, json),
        Command::Clis { json } => {
            let state_root = StateRoot::locate(cli.state_root.as_deref()).ok();
            clis_cmd(cli.profiles_dir.as_deref(), state_root.as_deref(), json)
        }
        Command::Serve(args) => {
            server_commands::serve(open_state(cli.state_root.as_ref())?, cli.profiles_dir, args)
        }
        Command::Stop(args) => server_commands::stop(&open_state(cli.state_root.as_ref())?, args),
        Command::Chats(cmd) => server_commands::chats(&open_state(cli.state_root.as_ref())?, cmd),
        Command::Contract(args) => Ok(dispatcher::contract::main(
            args,
            cli.profiles_dir.as_deref(),
        )?),
        Command::Test(dispatcher::contract::served::TestCmd::CliSandboxContract(args)) => {
            test_contract_cmd(cli.state_root, cli.profiles_dir, args)
        }
        Command::Test(dispatcher::contract::served::TestCmd::CliP0(args)) => {
            test_p0_cmd(cli.profiles_dir, args)
        }
        Command::Step(StepCmd::Run {
            workflow,
            step,
            script,
            attach,
            dry_run,
            args,
        }) => step_run(
            cli.state_root.as_ref(),
            &workflow,
            &step,
            script,
            &attach,
            dry_run,
            args,
        ),
        Command::ScriptedModel(args) => {
            let model = dispatcher::scripted_model::ScriptedModel::bind(args.listen, &args.record)?;
            println!("{}", model.addr());
            std::io::Write::flush(&mut std::io::stdout())?;
            model.wait();
            Ok(ExitCode::SUCCESS)
        }
        Command::Bridge { socket } => {
            let stdin = std::io::stdin().lock();
            let stdout = std::io::stdout().lock();
            dispatcher::bridge::run_shim(&socket, stdin, stdout)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `--break-policy`: the TEST ONLY mutation, said aloud when one is active.
fn break_policy(flag: Option<&str>) -> Result<Option<dispatcher::contract::mutate::Mutation>> {
    let mutation =
        dispatcher::contract::mutate::Mutation::from_flag(flag).map_err(anyhow::Error::msg)?;
    if mutation.is_some() {
        eprintln!("dispatcher: test: TEST ONLY hook active (--break-policy): this run cannot pass");
    }
    Ok(mutation)
}

/// A test command's report, as JSON or text, and its exit code: 1 when it did not pass.
fn finish_test(
    json: bool,
    report: &impl serde::Serialize,
    text: &str,
    passed: bool,
) -> Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        print!("{text}");
    }
    Ok(if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `dispatcher test cli-sandbox-contract`: errors (bad input, setup) exit 2 through `main`.
fn test_contract_cmd(
    state_root: Option<PathBuf>,
    profiles_dir: Option<PathBuf>,
    args: dispatcher::contract::served::ServedArgs,
) -> Result<ExitCode> {
    use dispatcher::contract::served;
    let mutation = break_policy(args.break_policy.as_deref())?;
    let opts = served::ServedOptions {
        provider: args.provider.clone(),
        port: args.port,
        keep: args.keep,
        // Only the explicit flag: $AGENTWORKS_STATE_ROOT may name the person's real one.
        state_root,
        profiles_dir,
        tmp_dir: args.tmp_dir.clone(),
        dispatcher: std::env::current_exe().context("cannot find the dispatcher's own binary")?,
        home: platform::home()?,
        mutation,
        real_model: args.real_model,
    };
    let report = served::run(&opts)
        .with_context(|| format!("test cli-sandbox-contract --provider {}", args.provider))?;
    finish_test(args.json, &report, &report.text(), report.passed)
}

/// `dispatcher test cli-p0`: errors (bad input, setup) exit 2 through `main`.
fn test_p0_cmd(
    profiles_dir: Option<PathBuf>,
    args: dispatcher::contract::served::P0Args,
) -> Result<ExitCode> {
    use dispatcher::contract::served::p0;
    let mutation = break_policy(args.break_policy.as_deref())?;
    let opts = p0::P0Options {
        provider: args.provider.clone(),
        keep: args.keep,
        profiles_dir,
        tmp_dir: args.tmp_dir.clone(),
        dispatcher: std::env::current_exe().context("cannot find the dispatcher's own binary")?,
        mutation,
    };
    let report =
        p0::run(&opts).with_context(|| format!("test cli-p0 --provider {}", args.provider))?;
    finish_test(args.json, &report, &report.text(), report.passed)
}

fn step_run(
    state_root: Option<&PathBuf>,
    workflow: &str,
    step: &str,
    script: PathBuf,
    attach: &[String],
    dry_run: bool,
    args: Vec<String>,
) -> Result<ExitCode> {
    let state = open_state(state_root)?;
    let target = Target::host().context("this OS has no sandbox backend")?;
    let home = platform::home()?;
    let script = std::path::absolute(&script)
        .with_context(|| format!("--script {}: cannot make it absolute", script.display()))?;
    let req = dispatcher::step::StepRequest {
        workflow: WorkflowId::new(workflow)?,
        step: WorkflowId::new(step).context("--step")?,
        script,
        args,
        attach: attach
            .iter()
            .map(|a| a.parse::<Attach>().map_err(anyhow::Error::msg))
            .collect::<Result<_>>()?,
    };
    let dispatcher_bin =
        std::env::current_exe().context("cannot find the dispatcher's own binary")?;
    let sandboxer = platform::locate_sandboxer(&dispatcher_bin);
    let launch = dispatcher::step::plan(&state, &req, target, &home, &sandboxer, |policy| {
        launch::confinement(target, policy, &home, Some(&sandboxer))
    })?;
    if dry_run {
        println!("{}", serde_json::to_string_pretty(&launch)?);
        return Ok(ExitCode::SUCCESS);
    }
    dispatcher::step::write_files(&state, &launch)?;
    eprintln!(
        "dispatcher: step {} of workflow {} confined ({})",
        launch.step, launch.workflow, launch.confinement
    );
    Ok(ExitCode::from(dispatcher::step::run_foreground(&launch)?))
}

fn request(
    t: &LaunchTarget,
    mode: Option<Mode>,
    target: Target,
    home: PathBuf,
) -> Result<LaunchRequest> {
    Ok(LaunchRequest {
        cli: t.cli.clone(),
        chat: ChatId::new(&t.chat)?,
        workflow: WorkflowId::new(&t.workflow)?,
        attach: t
            .attach
            .iter()
            .map(|a| a.parse::<Attach>().map_err(anyhow::Error::msg))
            .collect::<Result<_>>()?,
        mode,
        headless: false,
        cwd: None,
        target,
        home,
        cli_args: Vec::new(),
        model_endpoint: None,
    })
}

fn launch_cmd(
    state_root: &Option<PathBuf>,
    profiles_dir: Option<&std::path::Path>,
    args: LaunchArgs,
) -> Result<ExitCode> {
    let state = open_state(state_root.as_ref())?;
    let adapters = adapter::load_all(profiles_dir)?;
    let adapter = adapter::find(&adapters, &args.target.cli).map_err(anyhow::Error::msg)?;
    let target = match args.target_os.map(Target::from) {
        Some(t) if !t.is_host() && !args.dry_run => {
            bail!("--target-os {t} is only for --dry-run: a launch runs on this machine")
        }
        Some(t) => t,
        None => Target::host().context("this OS has no sandbox backend")?,
    };
    if args.tmux && args.headless {
        bail!("--tmux and --headless are exclusive: tmux is for interactive sessions");
    }
    let home = platform::home()?;
    let mut req = request(&args.target, args.mode, target, home)?;
    req.headless = args.headless;
    req.cwd = args.cwd.clone();
    req.cli_args = args.cli_args.clone();
    req.model_endpoint = args.endpoint.endpoint()?;
    let planned = launch::prepare(&state, &adapter, &req, Decide::ThisMachine)?;
    let launch = planned.launch();
    let files = planned.files(&req.home)?;

    if args.dry_run {
        if args.json {
            println!("{}", serde_json::to_string_pretty(launch)?);
        } else {
            print_launch(launch);
        }
        return Ok(ExitCode::SUCCESS);
    }
    files.write()?;
    eprintln!(
        "dispatcher: {} for chat {} in {} mode ({})",
        launch.cli, launch.chat, launch.mode.mode, launch.mode.reason
    );
    if args.tmux {
        let session = tmux::start_interactive(&state, launch)?;
        if args.json {
            println!(
                "{}",
                serde_json::json!({"tmux_socket": session.socket, "session": session.name, "mode": launch.mode})
            );
        } else {
            println!(
                "started in tmux: tmux -S {} attach -t {}",
                session.socket.display(),
                session.name
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    // SAFETY: this process runs one thread here (the namespace probe's was joined).
    let code = unsafe { launch::run_attached(&state, &planned, &req.home)? };
    Ok(ExitCode::from(code))
}

fn print_launch(l: &launch::Launch) {
    println!("cli:      {}", l.cli);
    println!("chat:     {}  workflow: {}", l.chat, l.workflow);
    println!(
        "mode:     {} (requested {}): {}",
        l.mode.mode, l.mode.requested, l.mode.reason
    );
    println!("policy:   {}", l.policy_path.display());
    if let Some(p) = &l.profile_path {
        println!("profile:  {}", p.display());
    }
    println!("cwd:      {}", l.cwd.display());
    if let Some(ep) = &l.model_endpoint {
        println!(
            "model:    {} at {}",
            ep.model.as_deref().unwrap_or("(the adapter's default)"),
            ep.url
        );
    }
    println!("argv:     {}", shell_words(&l.argv));
    for (k, v) in &l.env_set {
        println!("env:      {k}={v}");
    }
    for k in &l.env_removed {
        println!("env:      unset {k}");
    }
    for f in &l.files {
        match &f.source {
            launch::FileSource::Content(_) => println!("file:     {}", f.path.display()),
            launch::FileSource::CopyOf(from) => {
                println!(
                    "file:     {} (copy of {}, if present)",
                    f.path.display(),
                    from.display()
                )
            }
            launch::FileSource::Keychain(service) => println!(
                "file:     {} (copy of the keychain item {service:?}, on a Mac, if present)",
                f.path.display()
            ),
        }
    }
}

fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "/._-=:,@+".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn profile_cmd(
    state_root: &Option<PathBuf>,
    profiles_dir: Option<&std::path::Path>,
    args: ProfileArgs,
) -> Result<ExitCode> {
    let target_os = Target::from(args.target_os);
    if target_os != Target::Macos {
        bail!("--target-os {target_os}: Seatbelt profiles are for macos");
    }
    let state = open_state(state_root.as_ref())?;
    let adapters = adapter::load_all(profiles_dir)?;
    let adapter = adapter::find(&adapters, &args.target.cli).map_err(anyhow::Error::msg)?;
    let home = match (&args.home, &args.user) {
        (Some(h), None) => h.clone(),
        (None, Some(u)) => {
            if u.is_empty()
                || !u
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
                || u.starts_with(['.', '-'])
            {
                bail!("--user {u:?} is not a macOS account name");
            }
            PathBuf::from("/Users").join(u)
        }
        _ if Target::Macos.is_host() => platform::home()?,
        _ => bail!("on this OS, name the Mac's home: --home /Users/NAME or --user NAME"),
    };
    let req = request(&args.target, Some(Mode::Full), Target::Macos, home)?;
    let launch =
        launch::prepare(&state, &adapter, &req, Decide::Assumed("sandbox-exec"))?.into_launch();
    let text = launch::seatbelt_profile(&launch, &req.home, args.uid)?;
    let out = args.out.clone().unwrap_or_else(|| {
        launch
            .profile_path
            .clone()
            .expect("macos launch has a profile")
    });
    dispatcher::state::write_atomic(&out, text.as_bytes(), 0o600)?;
    println!("{}", out.display());
    Ok(ExitCode::SUCCESS)
}

fn doctor_cmd(state: &StateRoot, json: bool) -> Result<ExitCode> {
    let checks = dispatcher::doctor::checks(state);
    if json {
        println!("{}", serde_json::to_string_pretty(&checks)?);
    } else {
        println!(
            "autorun guard: {}",
            if state.config().autorun.guard {
                "on"
            } else {
                "off (config.json)"
            }
        );
        for c in &checks {
            match (&c.problem, c.fix) {
                (None, _) => println!("ok    {}: {}", c.name, c.path.display()),
                (Some(p), fix) => {
                    println!("FAIL  {}: {p}", c.name);
                    println!("      fix: {}", fix.unwrap_or("-"));
                }
            }
        }
    }
    let ok = checks.iter().all(|c| c.problem.is_none());
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn clis_cmd(
    profiles_dir: Option<&std::path::Path>,
    state_root: Option<&std::path::Path>,
    json: bool,
) -> Result<ExitCode> {
    let adapters = adapter::load_all(profiles_dir)?;
    let rows = dispatcher::clis::cli_status(&adapters, state_root);
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!(
            "{:<10} {:<10} {:<28} MODES HERE",
            "CLI", "INSTALLED", "VERSION"
        );
        for r in rows {
            println!(
                "{:<10} {:<10} {:<28} {}",
                r.name,
                if r.installed { "yes" } else { "no" },
                r.version.as_deref().unwrap_or("-"),
                r.modes_here.join(", ")
            );
            if let Some(why) = &r.version_not_asked {
                eprintln!("{}: version not asked outside the sandbox: {why}", r.name);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
