//! The launch computed as data (what `--dry-run --json` prints and `launch.json` records):
//! the policy, the mode, the CLI's argv and environment from its adapter, the files to write,
//! and the command that runs it inside the platform's confinement. Nothing is written here.

use std::collections::BTreeMap;
use std::path::PathBuf;

use sandboxer::Target;
use serde::Serialize;

use super::confine::{Confinement, decide_mode, wrapper_argv};
use super::endpoint;
use super::error::LaunchError;
use super::ledger::Ledger;
use super::request::{LaunchRequest, Tools};
use crate::adapter::{Adapter, FileBase, FileFormat, Vars};
use crate::grants::{Attach, LaunchGrants};
use crate::ids::{ChatId, WorkflowId};
use crate::modes::{Mode, ModeDecision};
use crate::state::StateRoot;

/// The prompt note template (`{home}`, `{runtime}`, `{workflow}`, `{attached}`, `{mode}`,
/// `{autorun}` placeholders).
pub const PROMPT_NOTE: &str = include_str!("../../../profiles/prompt-note.md");

/// The launch's own files inside the runtime (policy, profile, prompt note, record). The
/// policy grants this folder read-only although the runtime is read-write, so a CLI can read
/// but never rewrite the policy a later launch is checked against.
pub const LAUNCH_DIR: &str = crate::grants::LAUNCH_DIR;

/// Variables the dispatcher removes from the CLI's environment: they point at the person's
/// own terminal multiplexer, which a confined CLI must not try to drive.
pub const ENV_REMOVED: &[&str] = &["TMUX", "TMUX_PANE", "STY"];

/// A file the launch writes before running.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedFile {
    pub path: PathBuf,
    pub mode: u32,
    #[serde(flatten)]
    pub source: FileSource,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileSource {
    Content(String),
    /// The person's login file, copied when present.
    CopyOf(PathBuf),
    /// The person's login in their keychain (this generic password's service name), copied
    /// when present, on a Mac only ([`super::keychain`]).
    Keychain(String),
}

/// The whole launch, before anything is written.
#[derive(Debug, Clone, Serialize)]
pub struct Launch {
    pub cli: String,
    pub chat: ChatId,
    pub workflow: WorkflowId,
    pub attached: Vec<Attach>,
    pub target: Target,
    pub mode: ModeDecision,
    pub runtime: PathBuf,
    pub cwd: PathBuf,
    pub config_home: PathBuf,
    pub policy_path: PathBuf,
    /// macOS: the Seatbelt profile the launch runs under.
    pub profile_path: Option<PathBuf>,
    /// Whether the CLI runs inside the sandbox (always, where one works).
    pub confined: bool,
    /// Where the CLI sends its model requests, when the launch chose (its key is not kept).
    pub model_endpoint: Option<super::ModelEndpoint>,
    /// The command actually run: the confinement wrapper, then the CLI. (A foreground launch
    /// on Linux applies the same confinement in-process instead of starting the wrapper.)
    pub argv: Vec<String>,
    /// The CLI's own command line.
    pub cli_argv: Vec<String>,
    pub env_set: BTreeMap<String, String>,
    pub env_removed: Vec<String>,
    pub prompt_note: String,
    pub files: Vec<PlannedFile>,
}

impl Launch {
    /// The policy text this launch enforces: the content planned for `policy_path`. Callers
    /// use it, never the file in the runtime, which a CLI could have touched.
    pub fn policy_text(&self) -> Option<&str> {
        self.files
            .iter()
            .find(|f| f.path == self.policy_path)
            .and_then(|f| match &f.source {
                FileSource::Content(c) => Some(c.as_str()),
                FileSource::CopyOf(_) | FileSource::Keychain(_) => None,
            })
    }
}

/// Computes a launch. `confinement` answers whether the target can enforce a policy text.
pub fn plan(
    state: &StateRoot,
    adapter: &Adapter,
    req: &LaunchRequest,
    tools: &Tools,
    confinement: impl FnOnce(&str) -> Confinement,
) -> Result<Launch, LaunchError> {
    state.require_chat(&req.chat)?;
    state.require_workflow(&req.workflow)?;
    for a in &req.attach {
        state.require_workflow(&a.workflow)?;
        if a.workflow == req.workflow {
            return Err(LaunchError::Adapter(format!(
                "--attach {}: that is the chat's own workflow, already granted rw",
                a.workflow
            )));
        }
    }
    let runtime = state.runtime(&req.chat);
    let launch_dir = runtime.join(LAUNCH_DIR);
    let config_home = runtime.join("cli-home").join(&adapter.name);
    let grants = LaunchGrants::new(state, runtime.clone(), &req.workflow, &req.attach)
        .with_programs(programs_run_outside(tools))
        .with_log_tag(crate::denials::chat_tag(&req.chat))
        .with_network(super::network::launch_network(
            state,
            adapter,
            req.model_endpoint.as_ref(),
            super::network::proxy_for(req.target, &runtime)?,
        ));
    let policy_text = grants.policy_toml();
    let policy_path = launch_dir.join("policy.toml");

    let requested = match req.mode {
        Some(m) => m,
        None => Mode::parse(&state.load_chat(&req.chat)?.mode).unwrap_or(Mode::Auto),
    };
    let confinement = if requested == Mode::Auto && !req.target.is_host() {
        return Err(LaunchError::AutoOffHost(req.target));
    } else {
        confinement(&policy_text)
    };
    let mode = decide_mode(requested, adapter, &confinement)?;
    let confined = confinement.is_ok();
    if !confined {
        refuse_unprotected_cli(state, adapter, &tools.cli_binary)?;
    }
    // Unconfined (bridge-only without a working sandbox), the CLI must not read anything an
    // earlier confined session could have planted for it (project settings with hooks in the
    // runtime): it starts in a fresh, empty folder, and its config home is rebuilt.
    let cwd = match (&req.cwd, confined) {
        (Some(c), _) => c.clone(),
        (None, true) => runtime.clone(),
        (None, false) => launch_dir.join("bare-cwd"),
    };

    let attached_list = grants
        .attached
        .iter()
        .map(|(p, a)| {
            format!(
                "{} ({})",
                p.display(),
                if *a == sandboxer::Access::Rw {
                    "read-write"
                } else {
                    "read-only"
                }
            )
        })
        .collect::<Vec<_>>();
    let prompt_note_file = launch_dir.join("prompt-note.md");
    let mut vars = Vars::default();
    vars.0.insert("home", req.home.display().to_string());
    vars.0.insert("runtime", runtime.display().to_string());
    vars.0.insert("cwd", cwd.display().to_string());
    vars.0
        .insert("config_home", config_home.display().to_string());
    vars.0
        .insert("workflow", grants.workflow.display().to_string());
    vars.0.insert("chat", req.chat.to_string());
    vars.0
        .insert("bridge_command", tools.dispatcher.display().to_string());
    vars.0.insert(
        "bridge_socket",
        runtime.join("bridge.sock").display().to_string(),
    );
    vars.0
        .insert("prompt_note_file", prompt_note_file.display().to_string());
    let prompt_note = prompt_note_text(
        &vars,
        &attached_list,
        mode.mode,
        grants.autorun_guard,
        grants.network.as_ref(),
    )
    .map_err(LaunchError::Adapter)?;
    vars.0.insert("prompt_note", prompt_note.clone());
    let endpoint_spec = match &req.model_endpoint {
        Some(ep) => {
            let spec = endpoint::spec(adapter).map_err(LaunchError::Adapter)?;
            endpoint::add_vars(&mut vars, spec, ep);
            Some(spec)
        }
        None => None,
    };

    let fail =
        |field: &str, e: String| LaunchError::Adapter(format!("{}: {field}: {e}", adapter.source));
    let args = adapter.args_for(req.target);
    let mut cli_argv = vec![tools.cli_binary.display().to_string()];
    let (start, start_field) = match req.headless {
        true => (args.headless.as_ref(), "args.headless"),
        false => (args.interactive.as_ref(), "args.interactive"),
    };
    cli_argv.extend(vars.expand_list(start).map_err(|e| fail(start_field, e))?);
    let mode_args = match mode.mode {
        Mode::BridgeOnly => vars.expand_list(args.bridge_only.as_ref()),
        _ => vars.expand_list(args.full.as_ref()),
    };
    cli_argv.extend(mode_args.map_err(|e| fail("args.full/bridge_only", e))?);
    cli_argv.extend(
        vars.expand_list(args.mcp.as_ref())
            .map_err(|e| fail("args.mcp", e))?,
    );
    for dir in grants.workflow_dirs() {
        if dir == cwd {
            continue;
        }
        let mut v = vars.clone();
        v.0.insert("dir", dir.display().to_string());
        cli_argv.extend(
            v.expand_list(args.extra_dir.as_ref())
                .map_err(|e| fail("args.extra_dir", e))?,
        );
    }
    cli_argv.extend(
        vars.expand_list(args.prompt_note.as_ref())
            .map_err(|e| fail("args.prompt_note", e))?,
    );
    if let Some(spec) = endpoint_spec {
        cli_argv.extend(
            vars.expand_list(Some(&spec.args))
                .map_err(|e| fail("model_endpoint.args", e))?,
        );
    }
    cli_argv.extend(req.cli_args.iter().cloned());

    let mut env_set = BTreeMap::new();
    if let Some(var) = &adapter.config_home.env {
        let value = vars
            .expand(adapter.config_home.value.get_ref())
            .map_err(|e| fail("config_home.value", e))?;
        env_set.insert(var.clone(), value);
    }
    for (k, v) in adapter.env_for(req.target, tools.as_root) {
        env_set.insert(
            k.clone(),
            vars.expand(v.get_ref())
                .map_err(|e| fail(&format!("env.{k}"), e))?,
        );
    }
    for (k, v) in endpoint_spec.iter().flat_map(|spec| &spec.env) {
        env_set.insert(
            k.clone(),
            vars.expand(v.get_ref())
                .map_err(|e| fail(&format!("model_endpoint.env.{k}"), e))?,
        );
    }

    env_set.extend(super::network::command_env(
        grants.network.as_ref(),
        confined,
    ));

    let mut files = vec![
        PlannedFile {
            path: policy_path.clone(),
            mode: 0o600,
            source: FileSource::Content(policy_text),
        },
        PlannedFile {
            path: prompt_note_file,
            mode: 0o600,
            source: FileSource::Content(prompt_note.clone()),
        },
    ];
    for (field, f) in endpoint::files(adapter, mode.mode, endpoint_spec) {
        let rel = vars.expand(f.path.get_ref()).map_err(|e| fail(&field, e))?;
        let base = match f.base {
            FileBase::ConfigHome => &config_home,
            FileBase::Cwd => &cwd,
        };
        let content = render_file(&vars, f.format, &f.content).map_err(|e| fail(&field, e))?;
        files.push(PlannedFile {
            path: base.join(rel),
            mode: 0o600,
            source: FileSource::Content(content),
        });
    }
    for (i, l) in adapter.config_home.login.iter().enumerate() {
        let source = match (&l.from, &l.keychain) {
            (Some(from), _) => FileSource::CopyOf(PathBuf::from(
                vars.expand(from.get_ref())
                    .map_err(|e| fail(&format!("config_home.login[{i}]"), e))?,
            )),
            (None, Some(service)) => FileSource::Keychain(service.get_ref().clone()),
            (None, None) => unreachable!("checked when the adapter was loaded"),
        };
        files.push(PlannedFile {
            path: config_home.join(l.to.get_ref()),
            mode: 0o600,
            source,
        });
    }

    let profile_path = (req.target == Target::Macos).then(|| launch_dir.join("sandbox.sb"));
    let argv = if confined {
        wrapper_argv(
            req.target,
            &tools.sandboxer,
            &policy_path,
            profile_path.as_deref(),
            &cwd,
            &cli_argv,
            &tools.lists_env,
        )
    } else {
        cli_argv.clone()
    };

    Ok(Launch {
        cli: adapter.name.clone(),
        chat: req.chat.clone(),
        workflow: req.workflow.clone(),
        attached: req.attach.clone(),
        target: req.target,
        mode,
        runtime,
        cwd,
        config_home,
        policy_path,
        profile_path,
        confined,
        model_endpoint: req.model_endpoint.clone(),
        argv,
        cli_argv,
        env_set,
        env_removed: ENV_REMOVED.iter().map(|s| s.to_string()).collect(),
        prompt_note,
        files,
    })
}

/// Refuses to run the CLI at `binary` outside a sandbox unless its files (its path, the file
/// it resolves to, its package folder) were guarded in every confined launch so far.
fn refuse_unprotected_cli(
    state: &StateRoot,
    adapter: &Adapter,
    binary: &std::path::Path,
) -> Result<(), LaunchError> {
    let ledger = state.guard_ledger();
    let files: Vec<PathBuf> = crate::programs::guard_rules(&[binary.to_path_buf()])
        .into_iter()
        .map(|g| g.path.into_inner())
        .collect();
    let recorded = Ledger::load(&ledger).map_err(|e| LaunchError::Io {
        what: "checking the CLI against the guard ledger".into(),
        why: e.to_string(),
    })?;
    recorded
        .allows(&files)
        .map_err(|why| LaunchError::CliUnprotected {
            cli: adapter.name.clone(),
            binary: binary.to_path_buf(),
            why,
            ledger,
        })
}

/// The programs this launch's tools run outside a sandbox later, by the paths this machine
/// resolves them to: the CLI and every other adapter's (which the person or a bridge-only
/// launch runs), `sandboxer`, the dispatcher, and tmux.
fn programs_run_outside(tools: &Tools) -> Vec<PathBuf> {
    let mut out = vec![tools.cli_binary.clone()];
    out.extend(tools.clis.iter().cloned());
    out.extend([
        tools.sandboxer.clone(),
        tools.dispatcher.clone(),
        tools.tmux.clone(),
    ]);
    out
}

fn prompt_note_text(
    vars: &Vars,
    attached: &[String],
    mode: Mode,
    autorun_guard: bool,
    network: Option<&crate::grants::LaunchNetwork>,
) -> Result<String, String> {
    use sandboxer::network::NetworkMode;
    let mut v = vars.clone();
    v.0.insert(
        "network",
        match network.map(|n| n.mode) {
            None | Some(NetworkMode::Open) => "The network is open to you, as to the person's own programs.".into(),
            Some(NetworkMode::Public) => "The network goes through AgentWorks' proxy (HTTPS_PROXY is set): any outside host, but never this machine itself (localhost, its local services, cloud metadata). A program that ignores the proxy has no network.".into(),
            Some(NetworkMode::Allowlist) => "The network goes through AgentWorks' proxy (HTTPS_PROXY is set) to the hosts this chat's policy allows only; others are refused (HTTP 403). Do not try to work around it.".into(),
            Some(NetworkMode::None) => "This chat has no network at all.".into(),
        },
    );
    v.0.insert(
        "autorun",
        if autorun_guard {
            "Files that make programs outside the sandbox run code later (shell start-up files, git's config and the .git folders of repositories outside your workflow, so commits there fail, the CLIs' settings and binaries) are read-only to you; reading them works. Do not try to change them.".into()
        } else {
            "The autorun guard is off in this chat's policy: shell start-up files, git hooks and the CLIs' settings are writable; change them only when asked.".into()
        },
    );
    v.0.insert(
        "attached",
        if attached.is_empty() {
            "none".into()
        } else {
            attached.join(", ")
        },
    );
    v.0.insert(
        "mode",
        match mode {
            Mode::BridgeOnly => "Your built-in tools are off: use the agentworks MCP tools to read, write and list files in your granted folders.".into(),
            _ => "Your built-in tools work inside the sandbox.".into(),
        },
    );
    v.expand(PROMPT_NOTE)
}

fn render_file(vars: &Vars, format: FileFormat, content: &toml::Value) -> Result<String, String> {
    Ok(match format {
        FileFormat::Text => {
            vars.expand(content.as_str().ok_or("text content must be a string")?)?
        }
        FileFormat::Json => {
            let value = vars.expand_value(content)?;
            let mut s = serde_json::to_string_pretty(&value).map_err(|e| e.to_string())?;
            s.push('\n');
            s
        }
        FileFormat::Toml => {
            toml::to_string(&vars.expand_value(content)?).map_err(|e| e.to_string())?
        }
    })
}
