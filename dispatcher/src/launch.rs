//! A launch, computed as data first (what `--dry-run --json` prints), then written and run.
//!
//! The order is fixed: validate the request against the state root; build the policy; decide
//! the mode (full only where the platform can enforce the policy); compose the CLI's argv and
//! environment from its adapter; wrap it in the platform's confinement (`sandboxer exec` on
//! Linux, `sandbox-exec -f` on macOS). Nothing is written until the whole launch is known.
//! A foreground launch on Linux does what its `sandboxer exec` wrapper would do in the
//! dispatcher's own process, through the sandboxer library (`platform::run_confined_here`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sandboxer::Target;
use serde::Serialize;

use crate::adapter::{Adapter, FileBase, FileFormat, Vars};
use crate::grants::{Attach, LaunchGrants};
use crate::ids::{ChatId, WorkflowId};
use crate::modes::{Mode, ModeDecision};
use crate::state::{StateError, StateRoot};

/// The prompt note template (`{home}`, `{runtime}`, `{workflow}`, `{attached}` placeholders).
pub const PROMPT_NOTE: &str = include_str!("../../profiles/prompt-note.md");

/// The launch's own files inside the runtime (policy, profile, prompt note, record). The
/// policy grants this folder read-only although the runtime is read-write, so a CLI can read
/// but never rewrite the policy a later launch is checked against.
pub const LAUNCH_DIR: &str = crate::grants::LAUNCH_DIR;

/// Variables the dispatcher removes from the CLI's environment: they point at the person's
/// own terminal multiplexer, which a confined CLI must not try to drive.
pub const ENV_REMOVED: &[&str] = &["TMUX", "TMUX_PANE", "STY"];

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error("{0}")]
    Adapter(String),
    #[error("{cli} does not support {mode} mode (it supports: {supported})")]
    ModeUnsupported {
        cli: String,
        mode: Mode,
        supported: String,
    },
    #[error(
        "{cli} runs bridge-only only inside a working sandbox ({needs}); no working sandbox here: {why}"
    )]
    BridgeOnlyNeedsSandbox {
        cli: String,
        needs: String,
        why: String,
    },
    #[error("full mode refused: {0}. Use --mode bridge-only, or --mode auto to fall back to it")]
    FullRefused(String),
    #[error(
        "--mode auto must be decided on the machine that runs the CLI; for --target {0} pass --mode full or --mode bridge-only"
    )]
    AutoOffHost(Target),
    #[error("{what}: {why}")]
    Io { what: String, why: String },
}

/// What the caller asks for.
#[derive(Debug, Clone)]
pub struct LaunchRequest {
    pub cli: String,
    pub chat: ChatId,
    pub workflow: WorkflowId,
    pub attach: Vec<Attach>,
    /// `None`: the chat's saved mode.
    pub mode: Option<Mode>,
    pub headless: bool,
    pub cwd: Option<PathBuf>,
    pub target: Target,
    /// The person's home (`{home}`, the login files).
    pub home: PathBuf,
    pub cli_args: Vec<String>,
}

/// Where the launch's tools live on this machine.
#[derive(Debug, Clone, Serialize)]
pub struct Tools {
    /// The CLI binary (as found, or the adapter's name when it is not installed).
    pub cli_binary: PathBuf,
    /// `sandboxer` (Linux) — the enforcer the launch is wrapped in.
    pub sandboxer: PathBuf,
    /// The dispatcher itself, run as the MCP bridge inside the sandbox.
    pub dispatcher: PathBuf,
    pub as_root: bool,
}

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
                FileSource::CopyOf(_) => None,
            })
    }
}

/// What the platform can do for one policy: `Ok(how)` when it can confine, `Err(why not)`.
pub type Confinement = Result<String, String>;

/// Picks the mode. Explicit `full` where confinement is impossible is refused (fail
/// closed), never downgraded silently; `auto` falls back to bridge-only and says why.
pub fn decide_mode(
    requested: Mode,
    adapter: &Adapter,
    confinement: &Confinement,
) -> Result<ModeDecision, LaunchError> {
    let (mode, reason) = match (requested, confinement) {
        (Mode::Full | Mode::Auto, Ok(how)) => {
            (Mode::Full, format!("the platform confines the CLI: {how}"))
        }
        (Mode::Full, Err(why)) => return Err(LaunchError::FullRefused(why.clone())),
        (Mode::Auto, Err(why)) => (Mode::BridgeOnly, format!("no working sandbox here: {why}")),
        (Mode::BridgeOnly, Ok(how)) => (
            Mode::BridgeOnly,
            format!("requested; still confined: {how}"),
        ),
        (Mode::BridgeOnly, Err(why)) => (
            Mode::BridgeOnly,
            format!("requested; no working sandbox here: {why}"),
        ),
    };
    if !adapter.supports(mode) {
        return Err(LaunchError::ModeUnsupported {
            cli: adapter.name.clone(),
            mode,
            supported: adapter
                .modes
                .iter()
                .map(|m| m.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    if let (Mode::BridgeOnly, Err(why), Some(needs)) =
        (mode, confinement, &adapter.bridge_only_needs_sandbox)
    {
        return Err(LaunchError::BridgeOnlyNeedsSandbox {
            cli: adapter.name.clone(),
            needs: needs.clone(),
            why: why.clone(),
        });
    }
    Ok(ModeDecision {
        requested,
        mode,
        reason,
    })
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
    let grants = LaunchGrants::new(state, runtime.clone(), &req.workflow, &req.attach);
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
    let prompt_note =
        prompt_note_text(&vars, &attached_list, mode.mode).map_err(LaunchError::Adapter)?;
    vars.0.insert("prompt_note", prompt_note.clone());

    let fail =
        |field: &str, e: String| LaunchError::Adapter(format!("{}: {field}: {e}", adapter.source));
    let args = adapter.args_for(req.target);
    let mut cli_argv = vec![tools.cli_binary.display().to_string()];
    if req.headless {
        cli_argv.extend(
            vars.expand_list(args.headless.as_ref())
                .map_err(|e| fail("args.headless", e))?,
        );
    }
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
    for (i, f) in adapter.config_home.files.iter().enumerate() {
        if !f.applies_to(mode.mode) {
            continue;
        }
        let field = format!("config_home.files[{i}]");
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
        let from = vars
            .expand(l.from.get_ref())
            .map_err(|e| fail(&format!("config_home.login[{i}]"), e))?;
        files.push(PlannedFile {
            path: config_home.join(l.to.get_ref()),
            mode: 0o600,
            source: FileSource::CopyOf(PathBuf::from(from)),
        });
    }

    let profile_path = (req.target == Target::Macos).then(|| launch_dir.join("sandbox.sb"));
    let argv = if !confined {
        cli_argv.clone()
    } else {
        match req.target {
            Target::Linux => {
                let mut a = vec![
                    tools.sandboxer.display().to_string(),
                    "exec".into(),
                    "--policy".into(),
                    policy_path.display().to_string(),
                    "--cwd".into(),
                    cwd.display().to_string(),
                    "--".into(),
                ];
                a.extend(cli_argv.iter().cloned());
                a
            }
            Target::Macos => {
                let mut a = vec![
                    "/usr/bin/sandbox-exec".to_string(),
                    "-f".into(),
                    profile_path.as_ref().expect("macos").display().to_string(),
                ];
                a.extend(cli_argv.iter().cloned());
                a
            }
        }
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
        argv,
        cli_argv,
        env_set,
        env_removed: ENV_REMOVED.iter().map(|s| s.to_string()).collect(),
        prompt_note,
        files,
    })
}

fn prompt_note_text(vars: &Vars, attached: &[String], mode: Mode) -> Result<String, String> {
    let mut v = vars.clone();
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

/// Writes the launch's files into the runtime: config home (0700), policy, prompt note,
/// prepared config files, login copies (only those that exist), and the macOS profile. Each
/// is regenerated by every launch, so a file already holding its bytes is left alone and none
/// is flushed to disk ([`crate::state::write_regenerated`]).
pub fn write_files(launch: &Launch, seatbelt_profile: Option<&str>) -> Result<(), LaunchError> {
    let io = |what: &Path, e: &dyn std::fmt::Display| LaunchError::Io {
        what: what.display().to_string(),
        why: e.to_string(),
    };
    // Everything below the runtime was writable by the CLI in earlier sessions: a folder on
    // the way may have been replaced by a symlink into another chat. Folders are walked one
    // component at a time and a symlink is refused, never followed.
    let inside = |p: &Path| {
        p.strip_prefix(&launch.runtime)
            .map(Path::to_path_buf)
            .map_err(|_| io(p, &"is outside the chat's runtime"))
    };
    let real_dir = |p: &Path| -> Result<(), LaunchError> {
        ensure_real_dir(&launch.runtime, &inside(p)?).map_err(|e| io(p, &e))
    };
    let launch_dir = launch.runtime.join(LAUNCH_DIR);
    real_dir(&launch_dir)?;
    if !launch.confined && launch.config_home.exists() {
        real_dir(&launch.config_home)?;
        std::fs::remove_dir_all(&launch.config_home).map_err(|e| io(&launch.config_home, &e))?;
    }
    let bare_cwd = launch_dir.join("bare-cwd");
    if launch.cwd == bare_cwd && bare_cwd.exists() {
        real_dir(&bare_cwd)?;
        std::fs::remove_dir_all(&bare_cwd).map_err(|e| io(&bare_cwd, &e))?;
    }
    if launch.cwd.starts_with(&launch.runtime) {
        real_dir(&launch.cwd)?;
    }
    real_dir(&launch.config_home)?;
    for f in &launch.files {
        let parent = f.path.parent().expect("planned files have a folder");
        if parent.starts_with(&launch.runtime) {
            real_dir(parent)?;
        } else {
            std::fs::create_dir_all(parent).map_err(|e| io(parent, &e))?;
        }
        let data = match &f.source {
            FileSource::Content(c) => c.clone().into_bytes(),
            FileSource::CopyOf(from) => match std::fs::read(from) {
                Ok(d) => d,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io(from, &e)),
            },
        };
        crate::state::write_regenerated(&f.path, &data, f.mode).map_err(|e| io(&f.path, &e))?;
    }
    if let (Some(path), Some(text)) = (&launch.profile_path, seatbelt_profile) {
        crate::state::write_regenerated(path, text.as_bytes(), 0o600).map_err(|e| io(path, &e))?;
    }
    let record = serde_json::to_string_pretty(&launch).expect("launch serializes");
    let record_path = launch_dir.join("launch.json");
    crate::state::write_regenerated(&record_path, record.as_bytes(), 0o600)
        .map_err(|e| io(&record_path, &e))?;
    Ok(())
}

/// Creates `base/rel` folder by folder (mode 0700), refusing any component that exists as
/// a symlink or a non-folder.
pub(crate) fn ensure_real_dir(base: &Path, rel: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let mut dir = base.to_path_buf();
    for part in rel.components() {
        let std::path::Component::Normal(name) = part else {
            return Err(std::io::Error::other("unexpected path component"));
        };
        dir.push(name);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(std::io::Error::other(format!(
                    "{} is a symlink or a file, not a folder; refusing to follow it",
                    dir.display()
                )));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
