//! The shipped CLI adapters, end to end through `launch::plan` (the dry run): one snapshot per
//! adapter × target × mode of the command line (interactive and headless), the environment
//! and every planned file, with the temporary state root replaced by `[STATE]`. Plus the
//! properties every adapter must keep whatever its snapshot says: the bridge is the only MCP
//! server, nothing points into the person's own config, full mode turns the CLI's own sandbox
//! and approvals off and bridge-only does not, and adapter errors name file, line and field.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use dispatcher::adapter::{self, Adapter, EMBEDDED};
use dispatcher::grants::Attach;
use dispatcher::ids::{ChatId, WorkflowId};
use dispatcher::launch::{self, FileSource, Launch, LaunchRequest, Tools};
use dispatcher::modes::Mode;
use dispatcher::state::{ChatSettings, StateRoot};
use sandboxer::{Access, Target};

const HOME: &str = "/home/ada";
const DISPATCHER: &str = "/opt/agentworks/bin/dispatcher";
const TMUX: &str = "/usr/bin/tmux";
const SANDBOXER: &str = "/opt/agentworks/bin/sandboxer";
const TARGETS: [Target; 2] = [Target::Linux, Target::Macos];

// ---- fixture -------------------------------------------------------------------------------

/// A state root with one chat (`c1`), its workflow (`w1`) and a second workflow (`w2`) that
/// the launches attach read-only.
struct World {
    _dir: tempfile::TempDir,
    state: StateRoot,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let (state, created) = StateRoot::init(&dir.path().join("state-root"), None).unwrap();
        assert!(created);
        state
            .add_chat(
                &chat(),
                &ChatSettings {
                    mode: "auto".into(),
                },
            )
            .unwrap();
        state.add_workflow(&WorkflowId::new("w1").unwrap()).unwrap();
        state.add_workflow(&WorkflowId::new("w2").unwrap()).unwrap();
        World { _dir: dir, state }
    }

    fn root(&self) -> String {
        self.state.path().display().to_string()
    }

    fn plan(
        &self,
        adapter: &Adapter,
        target: Target,
        mode: Mode,
        headless: bool,
        cli_args: &[&str],
    ) -> Launch {
        self.plan_with(adapter, target, mode, headless, cli_args, None)
            .unwrap_or_else(|e| panic!("{} {target} {mode}: {e}", adapter.name))
    }

    /// [`World::plan`] with a model endpoint; the launch's error when it cannot be planned.
    fn plan_with(
        &self,
        adapter: &Adapter,
        target: Target,
        mode: Mode,
        headless: bool,
        cli_args: &[&str],
        model_endpoint: Option<launch::ModelEndpoint>,
    ) -> Result<Launch, launch::LaunchError> {
        let req = LaunchRequest {
            cli: adapter.name.clone(),
            chat: chat(),
            workflow: WorkflowId::new("w1").unwrap(),
            attach: vec![Attach {
                workflow: WorkflowId::new("w2").unwrap(),
                access: Access::Ro,
            }],
            mode: Some(mode),
            headless,
            cwd: None,
            target,
            home: PathBuf::from(HOME),
            cli_args: cli_args.iter().map(|s| s.to_string()).collect(),
            model_endpoint,
        };
        let tools = Tools {
            cli_binary: PathBuf::from(format!("/opt/clis/bin/{}", adapter.binary)),
            sandboxer: PathBuf::from(SANDBOXER),
            dispatcher: PathBuf::from(DISPATCHER),
            tmux: PathBuf::from(TMUX),
            clis: vec![PathBuf::from("/opt/clis/bin/codex")],
            as_root: false,
            lists_env: lists_env(),
        };
        launch::plan(&self.state, adapter, &req, &tools, |_| Ok("test".into()))
    }

    /// Every (adapter, target, mode) the shipped adapters support, with its interactive plan.
    fn all_plans(&self) -> Vec<(Adapter, Target, Mode, Launch)> {
        let mut out = Vec::new();
        for a in adapters() {
            for target in TARGETS {
                for mode in a.modes.clone() {
                    let plan = self.plan(&a, target, mode, false, &[]);
                    out.push((a.clone(), target, mode, plan));
                }
            }
        }
        out
    }
}

/// The person's variables as a launch passes them to `sandboxer exec --lists-env`: fixed
/// here, so that the snapshots do not depend on the machine's environment.
fn lists_env() -> Vec<(String, String)> {
    sandboxer::LISTS_ENV
        .iter()
        .map(|k| {
            let v = match *k {
                "XDG_CONFIG_HOME" => "/home/ada/.config",
                "SSH_AUTH_SOCK" => "/tmp/ssh-agent.sock",
                _ => "",
            };
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn chat() -> ChatId {
    ChatId::new("c1").unwrap()
}

fn adapters() -> Vec<Adapter> {
    adapter::load_all(None).unwrap()
}

fn content(f: &launch::PlannedFile) -> Option<&str> {
    match &f.source {
        FileSource::Content(c) => Some(c),
        FileSource::CopyOf(_) | FileSource::Keychain(_) => None,
    }
}

// ---- snapshots -----------------------------------------------------------------------------

/// The dry run of one launch as readable text: argv one element per line (`{:?}`, so empty
/// arguments and newlines show), the environment, then each planned file with its content.
fn render(w: &World, interactive: &Launch, headless: &Launch) -> String {
    let root = w.root();
    let anchor = dispatcher::anchor::path_for(std::path::Path::new(&root))
        .display()
        .to_string();
    // A Mac's launch picks a free loopback port for its egress proxy: each launch its own.
    let ports: Vec<String> = [interactive, headless]
        .iter()
        .filter_map(|l| {
            let doc = sandboxer::PolicyDocument::from_toml(l.policy_text()?, "p.toml").ok()?;
            let proxy = doc.network?.proxy?.into_inner();
            proxy
                .strip_prefix("127.0.0.1:")
                .map(|p| format!("127.0.0.1:{p}"))
        })
        .collect();
    let clean = |s: &str| {
        let s = s.replace(&anchor, "[ANCHOR]").replace(&root, "[STATE]");
        ports
            .iter()
            .fold(s, |s, p| s.replace(p.as_str(), "127.0.0.1:[PORT]"))
    };
    let mut out = String::new();
    writeln!(
        out,
        "mode: {} ({})",
        interactive.mode.mode,
        clean(&interactive.mode.reason)
    )
    .unwrap();
    writeln!(out, "confined: {}", interactive.confined).unwrap();
    writeln!(
        out,
        "cwd: {}",
        clean(&interactive.cwd.display().to_string())
    )
    .unwrap();
    writeln!(
        out,
        "config_home: {}",
        clean(&interactive.config_home.display().to_string())
    )
    .unwrap();
    for (title, l) in [
        ("argv (interactive)", interactive),
        ("argv (headless, person's args: \"PROMPT\")", headless),
    ] {
        writeln!(out, "\n{title}:").unwrap();
        for a in &l.argv {
            writeln!(out, "  {:?}", clean(a)).unwrap();
        }
    }
    writeln!(out, "\nenv_set:").unwrap();
    for (k, v) in &interactive.env_set {
        writeln!(out, "  {k}={:?}", clean(v)).unwrap();
    }
    writeln!(out, "env_removed: {}", interactive.env_removed.join(", ")).unwrap();
    let cleaned = |l: &Launch| -> Vec<(String, String)> {
        l.env_set
            .iter()
            .map(|(k, v)| (k.clone(), clean(v)))
            .collect()
    };
    assert_eq!(
        cleaned(interactive),
        cleaned(headless),
        "headless changes only argv"
    );
    assert_eq!(
        interactive.files.len(),
        headless.files.len(),
        "headless changes only argv"
    );
    for f in &interactive.files {
        let path = clean(&f.path.display().to_string());
        match &f.source {
            FileSource::Content(c) => {
                writeln!(out, "\n--- file {path} (mode {:o})", f.mode).unwrap();
                out.push_str(&clean(c));
                if !c.ends_with('\n') {
                    out.push_str("\n[no newline at end]\n");
                }
            }
            FileSource::CopyOf(from) => {
                writeln!(out, "\n--- file {path} (mode {:o})", f.mode).unwrap();
                writeln!(
                    out,
                    "copy of the person's {}, when it exists",
                    from.display()
                )
                .unwrap();
            }
            FileSource::Keychain(service) => {
                writeln!(out, "\n--- file {path} (mode {:o})", f.mode).unwrap();
                writeln!(
                    out,
                    "copy of the person's keychain item {service:?} (a Mac's), when it exists"
                )
                .unwrap();
            }
        }
    }
    out
}

#[test]
fn dry_run_snapshots_of_every_adapter_target_and_mode() {
    let w = World::new();
    let mut seen = Vec::new();
    for a in adapters() {
        for target in TARGETS {
            for mode in a.modes.clone() {
                let interactive = w.plan(&a, target, mode, false, &[]);
                let headless = w.plan(&a, target, mode, true, &["PROMPT"]);
                let name = format!("{}-{}-{}", a.name, target.as_str(), mode.as_str());
                insta::assert_snapshot!(name.clone(), render(&w, &interactive, &headless));
                seen.push(name);
            }
        }
    }
    // Every shipped adapter took part, in each of its modes on both targets.
    let expected: usize = adapters()
        .iter()
        .map(|a| a.modes.len() * TARGETS.len())
        .sum();
    assert_eq!(seen.len(), expected);
    for (name, _) in EMBEDDED {
        assert!(
            seen.iter().any(|s| s.starts_with(&format!("{name}-"))),
            "{name} has no snapshot"
        );
    }
}

/// The five CLIs that speak a public wire API can be pointed at a model endpoint; each
/// adapter's `[model_endpoint]` as it lands in a headless full launch; the others are refused,
/// naming their adapter.
#[test]
fn endpoint_snapshots_of_every_adapter_that_has_one() {
    let w = World::new();
    let ep = || Some(launch::ModelEndpoint::new("http://127.0.0.1:8099", None, None).unwrap());
    let mut with = Vec::new();
    for a in adapters() {
        match &a.model_endpoint {
            Some(_) => {
                let plan = w
                    .plan_with(&a, Target::Linux, Mode::Full, true, &["PROMPT"], ep())
                    .unwrap();
                let interactive = w
                    .plan_with(&a, Target::Linux, Mode::Full, false, &[], ep())
                    .unwrap();
                insta::assert_snapshot!(
                    format!("{}-linux-full-endpoint", a.name),
                    render(&w, &interactive, &plan)
                );
                // The key is the dummy one, and it is not in the launch's own endpoint record.
                let json = serde_json::to_string(&plan).unwrap();
                assert!(
                    json.contains("\"model_endpoint\":{\"url\":\"http://127.0.0.1:8099\""),
                    "{json}"
                );
                assert!(!json.contains("\"key\""), "{json}");
                with.push(a.name.clone());
            }
            None => {
                let e = w
                    .plan_with(&a, Target::Linux, Mode::Full, true, &[], ep())
                    .unwrap_err()
                    .to_string();
                assert!(
                    e.contains("[model_endpoint]") && e.contains(&a.source),
                    "{e}"
                );
            }
        }
    }
    with.sort();
    assert_eq!(with, ["claude", "codex", "gemini", "opencode", "pi"]);
}

// ---- properties ----------------------------------------------------------------------------

#[test]
fn an_unknown_cli_names_the_known_ones() {
    let all = adapters();
    let err = adapter::find(&all, "copilot").unwrap_err().to_string();
    assert!(err.contains("\"copilot\""), "{err}");
    for (name, _) in EMBEDDED {
        assert!(err.contains(name), "{name} missing from: {err}");
    }
    assert_eq!(
        EMBEDDED.len(),
        7,
        "claude, codex, cursor, gemini, agy, pi, opencode"
    );
}

/// The MCP servers a prepared config file declares, whatever the CLI calls the table.
fn mcp_servers(path: &Path, text: &str) -> Option<BTreeMap<String, serde_json::Value>> {
    let name = path.file_name()?.to_str()?;
    let value: serde_json::Value = if name.ends_with(".json") {
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    } else if name.ends_with(".toml") {
        let t: toml::Value =
            toml::from_str(text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_json::to_value(t).unwrap()
    } else {
        return None;
    };
    ["mcpServers", "mcp_servers", "mcp"].iter().find_map(|k| {
        let table = value.get(*k)?.as_object()?;
        // Gemini's "mcp" is settings (allowed/excluded), not servers.
        if *k == "mcp" && table.contains_key("allowed") {
            return None;
        }
        Some(table.clone().into_iter().collect())
    })
}

#[test]
fn the_bridge_is_the_only_mcp_server_and_runs_the_dispatcher() {
    let w = World::new();
    let socket = w
        .state
        .runtime(&chat())
        .join("bridge.sock")
        .display()
        .to_string();
    let mut declaring = BTreeMap::<String, usize>::new();
    for (a, target, mode, plan) in w.all_plans() {
        for f in &plan.files {
            let Some(text) = content(f) else { continue };
            let Some(servers) = mcp_servers(&f.path, text) else {
                continue;
            };
            let names: Vec<_> = servers.keys().cloned().collect();
            assert_eq!(
                names,
                ["agentworks"],
                "{} {target} {mode}: {}",
                a.name,
                f.path.display()
            );
            let s = &servers["agentworks"];
            // The stdio shapes: {command, args} (claude, codex, cursor, gemini) or a command
            // list (opencode).
            let argv: Vec<String> = match s.get("command") {
                Some(serde_json::Value::String(c)) => std::iter::once(c.clone())
                    .chain(
                        s["args"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|x| x.as_str().unwrap().to_string()),
                    )
                    .collect(),
                Some(serde_json::Value::Array(list)) => list
                    .iter()
                    .map(|x| x.as_str().unwrap().to_string())
                    .collect(),
                other => panic!("{}: command {other:?}", a.name),
            };
            assert_eq!(
                argv,
                [DISPATCHER, "bridge", "--socket", socket.as_str()],
                "{}",
                a.name
            );
            *declaring.entry(a.name.clone()).or_default() += 1;
        }
    }
    // Which adapters configure the bridge at all (pi has no MCP client; agy's config folder is
    // the person's own and is never written).
    let names: Vec<_> = declaring.keys().map(String::as_str).collect();
    assert_eq!(names, ["claude", "codex", "cursor", "gemini", "opencode"]);
}

/// Where the person's own CLI configs (and MCP servers) live: a private config home must
/// never point there. Login files are the one thing read from the home, by copying.
const PERSONAL_CONFIG: &[&str] = &[
    "/home/ada/.claude",
    "/home/ada/.claude.json",
    "/home/ada/.codex",
    "/home/ada/.gemini",
    "/home/ada/.cursor",
    "/home/ada/.config",
    "/home/ada/.local",
    "/home/ada/.pi",
    "/home/ada/.opencode",
    "/home/ada/.mcp.json",
];

#[test]
fn nothing_points_at_the_persons_own_config() {
    let w = World::new();
    for (a, target, mode, plan) in w.all_plans() {
        let ctx = format!("{} {target} {mode}", a.name);
        // The CLI's own arguments: the wrapper's name the person's config on purpose, for the
        // lists the sandbox masks (`--lists-env`).
        let mut texts: Vec<(String, &str)> = plan
            .cli_argv
            .iter()
            .map(|s| ("argv".to_string(), s.as_str()))
            .collect();
        texts.extend(
            plan.env_set
                .iter()
                .map(|(k, v)| (format!("env {k}"), v.as_str())),
        );
        for f in &plan.files {
            match &f.source {
                FileSource::Content(c) => texts.push((f.path.display().to_string(), c)),
                FileSource::CopyOf(from) => {
                    // Copied from the person's home into the private config home, nowhere else.
                    assert!(from.starts_with(HOME), "{ctx}: {}", from.display());
                    assert!(
                        f.path.starts_with(&plan.config_home),
                        "{ctx}: {}",
                        f.path.display()
                    );
                    assert_eq!(f.mode, 0o600, "{ctx}");
                }
                FileSource::Keychain(_) => {
                    // Copied into the private config home, nowhere else.
                    assert!(f.path.starts_with(&plan.config_home), "{ctx}");
                    assert_eq!(f.mode, 0o600, "{ctx}");
                }
            }
        }
        for (where_, text) in texts {
            for p in PERSONAL_CONFIG {
                assert!(!text.contains(p), "{ctx}: {where_} mentions {p}");
            }
        }
        // Every file the launch writes stays inside the chat's runtime.
        let runtime = w.state.runtime(&chat());
        for f in &plan.files {
            assert!(f.path.starts_with(&runtime), "{ctx}: {}", f.path.display());
        }
    }
}

/// What turns each CLI's own sandbox and approvals off in full mode: argument runs that must
/// appear in argv (contiguously) and variables that must be set.
fn sandbox_off(cli: &str) -> (Vec<Vec<&'static str>>, Vec<(&'static str, &'static str)>) {
    match cli {
        "claude" => (vec![vec!["--dangerously-skip-permissions"]], vec![]),
        "codex" => (
            vec![vec!["--dangerously-bypass-approvals-and-sandbox"]],
            vec![],
        ),
        "cursor" => (vec![vec!["--force"], vec!["--sandbox", "disabled"]], vec![]),
        "gemini" => (
            vec![vec!["--approval-mode", "yolo"]],
            vec![("GEMINI_SANDBOX", "false")],
        ),
        "agy" => (vec![vec!["--dangerously-skip-permissions"]], vec![]),
        // pi has neither a sandbox nor approval prompts: nothing to turn off.
        "pi" => (vec![], vec![]),
        "opencode" => (vec![vec!["--auto"]], vec![]),
        other => panic!("{other}: add the adapter's sandbox-off flags to this table"),
    }
}

fn contains_run(argv: &[String], run: &[&str]) -> bool {
    argv.windows(run.len())
        .any(|w| w.iter().zip(run).all(|(a, b)| a == b))
}

#[test]
fn full_mode_turns_the_clis_own_sandbox_and_approvals_off_and_bridge_only_does_not() {
    let w = World::new();
    for (a, target, mode, plan) in w.all_plans() {
        let ctx = format!("{} {target} {mode}", a.name);
        let (runs, vars) = sandbox_off(&a.name);
        for run in &runs {
            let present = contains_run(&plan.cli_argv, run);
            match mode {
                Mode::Full => assert!(present, "{ctx}: {run:?} missing from {:?}", plan.cli_argv),
                _ => assert!(
                    !present,
                    "{ctx}: approvals must stay on without native tools: {run:?}"
                ),
            }
        }
        for (k, v) in &vars {
            assert_eq!(plan.env_set.get(*k).map(String::as_str), Some(*v), "{ctx}");
        }
        if a.name == "pi" {
            assert!(
                a.args_for(target).full.as_ref().unwrap().is_empty(),
                "pi has nothing to turn off"
            );
        }
    }
    // The flags are the same on both targets (each CLI's own sandbox is off on Linux too);
    // only the prompt note's line on the network differs (a Mac's is not confined yet).
    let flags = |argv: Vec<String>| -> Vec<String> {
        argv.into_iter()
            .map(|a| {
                a.lines()
                    .filter(|l| {
                        !l.starts_with("- The network")
                            && !l.starts_with("- This chat has no network")
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .collect()
    };
    for a in adapters() {
        assert_eq!(
            flags(w.plan(&a, Target::Linux, Mode::Full, false, &[]).cli_argv),
            flags(w.plan(&a, Target::Macos, Mode::Full, false, &[]).cli_argv),
            "{}",
            a.name
        );
    }
}

#[test]
fn claude_keeps_its_own_sandbox_off_by_settings() {
    let w = World::new();
    let a = adapter::find(&adapters(), "claude").unwrap();
    let plan = w.plan(&a, Target::Macos, Mode::Full, false, &[]);
    let settings = plan
        .files
        .iter()
        .find(|f| f.path.ends_with("settings.json"))
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(content(settings).unwrap()).unwrap();
    assert_eq!(v["sandbox"]["enabled"], false);
}

#[test]
fn config_home_paths_on_the_command_line_are_planned_files() {
    let w = World::new();
    for (a, target, mode, plan) in w.all_plans() {
        let home = plan.config_home.display().to_string();
        for arg in &plan.cli_argv {
            if let Some(rest) = arg.strip_prefix(&home)
                && rest.starts_with('/')
            {
                assert!(
                    plan.files.iter().any(|f| f.path == Path::new(arg)),
                    "{} {target} {mode}: {arg} is passed but not written",
                    a.name
                );
            }
        }
    }
}

#[test]
fn gemini_bridge_only_policy_denies_everything_but_the_bridge() {
    let w = World::new();
    let a = adapter::find(&adapters(), "gemini").unwrap();
    let plan = w.plan(&a, Target::Linux, Mode::BridgeOnly, false, &[]);
    let policy = plan
        .config_home
        .join("bridge-only-policy.toml")
        .display()
        .to_string();
    assert!(contains_run(&plan.cli_argv, &["--policy", &policy]));
    assert!(contains_run(&plan.cli_argv, &["--admin-policy", &policy]));
    let file = plan
        .files
        .iter()
        .find(|f| f.path == Path::new(&policy))
        .unwrap();
    let v: toml::Value = toml::from_str(content(file).unwrap()).unwrap();
    let rules = v["rule"].as_array().unwrap();
    let rule = |decision: &str| {
        rules
            .iter()
            .find(|r| r["decision"].as_str() == Some(decision))
            .unwrap()
    };
    // Deny everything; allow the bridge one step above it (priority decides, not order).
    assert_eq!(rule("deny")["toolName"].as_str(), Some("*"));
    assert!(rule("deny").get("mcpName").is_none());
    assert_eq!(rule("allow")["mcpName"].as_str(), Some("agentworks"));
    assert!(rule("allow")["priority"].as_integer() > rule("deny")["priority"].as_integer());
    // Full mode passes no policy, so every tool is there.
    let full = w.plan(&a, Target::Linux, Mode::Full, false, &[]);
    assert!(
        !full
            .cli_argv
            .iter()
            .any(|x| x == "--policy" || x == "--admin-policy")
    );
}

#[test]
fn opencode_writes_one_config_per_mode_with_deny_before_the_bridge() {
    let w = World::new();
    let a = adapter::find(&adapters(), "opencode").unwrap();
    for (mode, expect) in [(Mode::Full, "allow"), (Mode::BridgeOnly, "deny")] {
        let plan = w.plan(&a, Target::Linux, mode, false, &[]);
        let configs: Vec<_> = plan
            .files
            .iter()
            .filter(|f| f.path.ends_with("opencode/opencode.json"))
            .collect();
        assert_eq!(configs.len(), 1, "{mode}: exactly one opencode.json");
        let text = content(configs[0]).unwrap();
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(v["permission"]["*"], expect, "{mode}");
        if mode == Mode::BridgeOnly {
            assert_eq!(v["permission"]["agentworks_*"], "allow");
            // opencode applies the last matching rule: "*" must come first in the file.
            let (star, bridge) = (
                text.find("\"*\"").unwrap(),
                text.find("\"agentworks_*\"").unwrap(),
            );
            assert!(star < bridge, "{text}");
        } else {
            assert!(v["permission"].get("agentworks_*").is_none());
        }
        // The config opencode reads is ours: XDG_CONFIG_HOME and OPENCODE_CONFIG point at it,
        // and inherited config or permission overrides are emptied.
        let env = &plan.env_set;
        assert_eq!(
            Path::new(&env["XDG_CONFIG_HOME"]).join("opencode/opencode.json"),
            configs[0].path
        );
        assert_eq!(Path::new(&env["OPENCODE_CONFIG"]), configs[0].path);
        assert_eq!(env["OPENCODE_CONFIG_CONTENT"], "{}");
        assert_eq!(env["OPENCODE_PERMISSION"], "{}");
        assert_eq!(env["OPENCODE_DISABLE_PROJECT_CONFIG"], "1");
    }
}

#[test]
fn headless_arguments_come_first_and_the_persons_last() {
    let w = World::new();
    for a in adapters() {
        let mode = a.modes[0];
        let plan = w.plan(&a, Target::Linux, mode, true, &["PROMPT"]);
        let headless = a.args.headless.clone().unwrap_or_default();
        let expected: Vec<&str> = headless.iter().map(|s| s.get_ref().as_str()).collect();
        assert_eq!(
            &plan.cli_argv[1..=expected.len()],
            expected.as_slice(),
            "{}",
            a.name
        );
        assert_eq!(
            plan.cli_argv.last().map(String::as_str),
            Some("PROMPT"),
            "{}",
            a.name
        );
    }
}

/// Where the sandbox works but the `sandboxer` that would enforce it cannot be trusted (a chat
/// could have made its folder writable to others), `auto` is refused as `full` is, for every
/// CLI: falling back to bridge-only would let a chat turn its own later launches unconfined.
#[test]
fn an_untrusted_enforcer_is_refused_never_run_around() {
    let untrusted: launch::Confinement = Err(launch::Unconfined::UntrustedEnforcer(
        "the sandboxer binary that would confine it cannot be trusted".into(),
    ));
    let no_sandbox: launch::Confinement = Err(launch::Unconfined::NoSandbox("none".into()));
    for a in adapters() {
        for mode in [Mode::Auto, Mode::Full] {
            let got = launch::decide_mode(mode, &a, &untrusted);
            assert!(
                matches!(&got, Err(launch::LaunchError::EnforcerUntrusted(why)) if why.contains("cannot be trusted")),
                "{} {mode:?}: {got:?}",
                a.name
            );
        }
        // The control: with no sandbox at all, `auto` does not refuse on these grounds.
        let got = launch::decide_mode(Mode::Auto, &a, &no_sandbox);
        assert!(
            !matches!(got, Err(launch::LaunchError::EnforcerUntrusted(_))),
            "{}: {got:?}",
            a.name
        );
    }
}

/// Where no sandbox works: `auto` falls back to bridge-only for the CLIs that can really run
/// without native tools, and every other CLI is refused, never run unconfined with its tools.
#[test]
fn without_a_sandbox_only_sound_bridge_only_runs() {
    let no_sandbox: launch::Confinement =
        Err(launch::Unconfined::NoSandbox("no Landlock here".into()));
    let mut outcome = BTreeMap::new();
    for a in adapters() {
        let auto = launch::decide_mode(Mode::Auto, &a, &no_sandbox);
        let full = launch::decide_mode(Mode::Full, &a, &no_sandbox);
        assert!(
            matches!(full, Err(launch::LaunchError::FullRefused(_))),
            "{}: {full:?}",
            a.name
        );
        let word = match auto {
            Ok(d) => {
                assert_eq!(d.mode, Mode::BridgeOnly, "{}", a.name);
                assert!(
                    d.reason.contains("no Landlock here"),
                    "{}: {}",
                    a.name,
                    d.reason
                );
                "bridge-only"
            }
            Err(launch::LaunchError::ModeUnsupported { .. }) => "refused: no bridge-only",
            Err(launch::LaunchError::BridgeOnlyNeedsSandbox { needs, why, .. }) => {
                assert_eq!(why, "no Landlock here");
                assert!(!needs.is_empty());
                "refused: bridge-only needs a sandbox"
            }
            Err(e) => panic!("{}: {e}", a.name),
        };
        outcome.insert(a.name.clone(), word);
    }
    let expected: BTreeMap<String, &str> = [
        ("agy", "refused: no bridge-only"),
        ("claude", "bridge-only"),
        ("codex", "refused: no bridge-only"),
        ("cursor", "refused: no bridge-only"),
        ("gemini", "bridge-only"),
        ("opencode", "refused: bridge-only needs a sandbox"),
        ("pi", "refused: no bridge-only"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(outcome, expected);

    // Inside a sandbox, opencode's bridge-only runs (confined).
    let opencode = adapter::find(&adapters(), "opencode").unwrap();
    let d = launch::decide_mode(Mode::BridgeOnly, &opencode, &Ok("test".into())).unwrap();
    assert_eq!(d.mode, Mode::BridgeOnly);
    // And plan() refuses it without one.
    let w = World::new();
    let req = LaunchRequest {
        cli: "opencode".into(),
        chat: chat(),
        workflow: WorkflowId::new("w1").unwrap(),
        attach: vec![],
        mode: Some(Mode::BridgeOnly),
        headless: false,
        cwd: None,
        target: Target::Linux,
        home: PathBuf::from(HOME),
        cli_args: vec![],
        model_endpoint: None,
    };
    let tools = Tools {
        cli_binary: "/opt/clis/bin/opencode".into(),
        sandboxer: SANDBOXER.into(),
        dispatcher: DISPATCHER.into(),
        tmux: TMUX.into(),
        clis: vec![],
        as_root: false,
        lists_env: lists_env(),
    };
    let e = launch::plan(&w.state, &opencode, &req, &tools, |_| {
        Err(launch::Unconfined::NoSandbox("no Landlock here".into()))
    })
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("opencode runs bridge-only only inside a working sandbox"),
        "{e}"
    );
}

/// Bridge-only without a sandbox runs the CLI outside every sandbox: only from files every
/// confined launch so far guarded (the guard ledger). A confined launch of codex that did not
/// guard claude's binary leaves claude refused; before any confined launch it runs.
#[test]
fn without_a_sandbox_a_cli_runs_only_from_files_every_confined_launch_guarded() {
    let w = World::new();
    let all = adapters();
    let tools = |cli: &str| Tools {
        cli_binary: format!("/opt/clis/bin/{cli}").into(),
        sandboxer: SANDBOXER.into(),
        dispatcher: DISPATCHER.into(),
        tmux: TMUX.into(),
        clis: vec![],
        as_root: false,
        lists_env: lists_env(),
    };
    let req = |cli: &str, mode| LaunchRequest {
        cli: cli.into(),
        chat: chat(),
        workflow: WorkflowId::new("w1").unwrap(),
        attach: vec![],
        mode: Some(mode),
        headless: false,
        cwd: None,
        target: Target::Linux,
        home: PathBuf::from(HOME),
        cli_args: vec![],
        model_endpoint: None,
    };
    let claude = adapter::find(&all, "claude").unwrap();
    let unconfined = || {
        launch::plan(
            &w.state,
            &claude,
            &req("claude", Mode::BridgeOnly),
            &tools("claude"),
            |_| Err(launch::Unconfined::NoSandbox("no Landlock here".into())),
        )
    };
    let first = unconfined().unwrap();
    assert!(!first.confined, "{:?}", first.mode);

    let codex = adapter::find(&all, "codex").unwrap();
    let confined = launch::plan(
        &w.state,
        &codex,
        &req("codex", Mode::Full),
        &tools("codex"),
        |_| Ok("test".into()),
    )
    .unwrap();
    let ledger = w.state.guard_ledger();
    launch::LaunchFiles::prepare(&confined, Path::new(HOME), &ledger)
        .unwrap()
        .write()
        .unwrap();
    let e = unconfined().unwrap_err().to_string();
    assert!(
        e.contains("claude would run outside any sandbox from /opt/clis/bin/claude")
            && e.contains("was not guarded in every earlier confined launch")
            && e.contains(&ledger.display().to_string()),
        "{e}"
    );
}

// ---- adapter errors ------------------------------------------------------------------------

/// A valid adapter exercising files, modes per file and a login; each error test changes one
/// line of it.
const VALID: &str = r#"version = 1
name = "t"
display_name = "T"
binary = "t"
install = "x"
checked_version = "1"
modes = ["full", "bridge-only"]
prompt_note_how = "x"
bridge_only_how = "x"

[config_home]
env = "T_HOME"

[[config_home.files]]
path = "config.json"
modes = ["full"]
format = "json"
[config_home.files.content]
note = "{prompt_note}"

[[config_home.files]]
path = "config.json"
modes = ["bridge-only"]
format = "json"
[config_home.files.content]
tools = false

[[config_home.login]]
from = "{home}/.t/auth.json"
to = "auth.json"

[args]
full = ["--yolo"]
bridge_only = ["--no-tools"]
"#;

/// Replaces the one line starting with `line_start` and returns the text and that line's
/// number.
fn with_line(line_start: &str, replacement: &str) -> (String, usize) {
    let mut found = None;
    let lines: Vec<String> = VALID
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if l.starts_with(line_start) {
                assert!(found.is_none(), "{line_start:?} is not unique");
                found = Some(i + 1);
                replacement.to_string()
            } else {
                l.to_string()
            }
        })
        .collect();
    (
        lines.join("\n") + "\n",
        found.unwrap_or_else(|| panic!("{line_start:?} not found")),
    )
}

fn load_err(text: &str) -> adapter::AdapterError {
    Adapter::from_toml(text, "profiles/clis/t.toml").unwrap_err()
}

#[test]
fn the_valid_fixture_loads_and_writes_one_file_per_mode() {
    let a = Adapter::from_toml(VALID, "profiles/clis/t.toml").unwrap();
    let files = &a.config_home.files;
    assert!(files[0].applies_to(Mode::Full) && !files[0].applies_to(Mode::BridgeOnly));
    assert!(files[1].applies_to(Mode::BridgeOnly) && !files[1].applies_to(Mode::Full));
}

#[test]
fn a_bad_placeholder_names_file_line_and_field() {
    let (text, line) = with_line("full = ", r#"full = ["--yolo", "{secret_token}"]"#);
    let e = load_err(&text);
    assert_eq!(
        (e.file.as_str(), e.line, e.field.as_str()),
        ("profiles/clis/t.toml", line, "args.full[1]"),
        "{e}"
    );
    assert!(
        e.message.contains("unknown placeholder {secret_token}"),
        "{e}"
    );
    assert!(
        e.message.contains("bridge_socket"),
        "the known ones are listed: {e}"
    );

    let (text, line) = with_line("note = ", r##"note = "{home""##);
    let e = load_err(&text);
    assert_eq!(
        (e.line, e.field.as_str()),
        (line - 4, "config_home.files[0].content.\"note\""),
        "{e}"
    );
}

#[test]
fn an_unknown_key_names_file_line_and_field() {
    let (text, line) = with_line("binary = ", "binray = \"t\"");
    let e = load_err(&text);
    assert_eq!(
        (e.file.as_str(), e.line),
        ("profiles/clis/t.toml", line),
        "{e}"
    );
    assert!(e.message.contains("binray"), "{e}");

    let (text, line) = with_line("to = ", "to = \"auth.json\"\nmode = 384");
    let e = load_err(&text);
    assert_eq!(e.line, line + 1, "{e}");
    assert!(e.message.contains("mode"), "{e}");
}

#[test]
fn a_bad_mode_word_names_file_line_and_field() {
    let (text, line) = with_line(
        "modes = [\"full\", ",
        r#"modes = ["full", "full_unconfined_please"]"#,
    );
    let e = load_err(&text);
    assert_eq!(
        (e.file.as_str(), e.line, e.field.as_str()),
        ("profiles/clis/t.toml", line, "modes"),
        "{e}"
    );
    assert!(e.message.contains("full_unconfined_please"), "{e}");

    let (text, line) = with_line("modes = [\"full\"]", r#"modes = ["auto"]"#);
    let e = load_err(&text);
    assert_eq!(
        (e.line, e.field.as_str()),
        (line, "config_home.files[0].modes"),
        "{e}"
    );

    // A file mode the adapter does not support.
    let adapter_full_only =
        VALID.replace(r#"modes = ["full", "bridge-only"]"#, r#"modes = ["full"]"#);
    let e = load_err(&adapter_full_only);
    assert_eq!(e.field, "config_home.files[1].modes", "{e}");
    assert!(e.message.contains("\"bridge-only\""), "{e}");
}

#[test]
fn a_relative_or_escaping_login_path_names_file_line_and_field() {
    let (text, line) = with_line("from = ", r#"from = ".t/auth.json""#);
    let e = load_err(&text);
    assert_eq!(
        (e.file.as_str(), e.line, e.field.as_str()),
        ("profiles/clis/t.toml", line, "config_home.login[0].from"),
        "{e}"
    );
    assert!(e.message.contains("{home}/"), "{e}");

    let (text, line) = with_line("to = ", r#"to = "/etc/passwd""#);
    let e = load_err(&text);
    assert_eq!(
        (e.line, e.field.as_str()),
        (line, "config_home.login[0].to"),
        "{e}"
    );

    let (text, line) = with_line("to = ", r#"to = "../../auth.json""#);
    let e = load_err(&text);
    assert_eq!(
        (e.line, e.field.as_str()),
        (line, "config_home.login[0].to"),
        "{e}"
    );
}

#[test]
fn a_login_names_exactly_one_source_and_a_sane_keychain_service() {
    // Neither `from` nor `keychain`: named at the entry's `to`.
    let (text, line) = with_line("from = ", "");
    let e = load_err(&text);
    assert_eq!(
        (e.line, e.field.as_str()),
        (line + 1, "config_home.login[0]"),
        "{e}"
    );
    assert!(e.message.contains("exactly one of"), "{e}");
    // Both.
    let (text, _) = with_line("from = ", "from = \"{home}/.t/a\"\nkeychain = \"T\"");
    assert!(load_err(&text).message.contains("exactly one of"));
    // A keychain service with a control character, or empty.
    for bad in ["keychain = \"a\\nb\"", "keychain = \"\""] {
        let (text, line) = with_line("from = ", bad);
        let e = load_err(&text);
        assert_eq!(
            (e.line, e.field.as_str()),
            (line, "config_home.login[0].keychain"),
            "{bad}: {e}"
        );
    }
    // A good one loads.
    let (text, _) = with_line("from = ", "keychain = \"T Login\"");
    Adapter::from_toml(&text, "profiles/clis/t.toml").unwrap();
}

#[test]
fn the_same_file_twice_in_one_mode_is_refused() {
    let text = VALID.replace(
        r#"modes = ["bridge-only"]"#,
        r#"modes = ["bridge-only", "full"]"#,
    );
    let e = load_err(&text);
    assert_eq!(e.field, "config_home.files[1].path", "{e}");
    assert!(e.message.contains("twice in full mode"), "{e}");
    let line = text
        .lines()
        .position(|l| l == r#"modes = ["bridge-only", "full"]"#)
        .unwrap();
    assert_eq!(e.line, line, "the path line just above: {e}");
}
