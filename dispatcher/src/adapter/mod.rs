//! CLI adapters as data: one TOML file per CLI in `profiles/clis/`, embedded at build time and
//! overridable with `--profiles-dir DIR` (`DIR/clis/NAME.toml`). Adding a CLI is adding a file.
//!
//! An adapter says how to find the binary, which flags turn its own sandbox and approvals off
//! (per platform), how its private config home is prepared inside the chat's runtime (files
//! written as structured data, so no path can break their syntax; the person's login copied
//! in), how grants become extra-dir flags, its headless arguments, how the prompt note reaches
//! it, and which modes it supports.
//!
//! Strings in `args`, `env`, file contents (keys and values) and `login` use `{name}`
//! placeholders ([`sandboxer::template`]), checked at load time against [`VARIABLES`]; `{{` and
//! `}}` are literal braces.

mod parse;
mod vars;

pub use vars::Vars;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::modes::Mode;

/// The adapters shipped with the dispatcher: (name, text).
pub const EMBEDDED: &[(&str, &str)] = &[
    ("claude", include_str!("../../../profiles/clis/claude.toml")),
    ("codex", include_str!("../../../profiles/clis/codex.toml")),
    ("cursor", include_str!("../../../profiles/clis/cursor.toml")),
    ("gemini", include_str!("../../../profiles/clis/gemini.toml")),
    ("agy", include_str!("../../../profiles/clis/agy.toml")),
    ("pi", include_str!("../../../profiles/clis/pi.toml")),
    (
        "opencode",
        include_str!("../../../profiles/clis/opencode.toml"),
    ),
];

/// Placeholders an adapter may use, with what they expand to.
pub const VARIABLES: &[(&str, &str)] = &[
    ("home", "the person's home"),
    ("runtime", "this chat's runtime folder"),
    ("cwd", "the CLI's working folder (the runtime unless --cwd)"),
    (
        "config_home",
        "the CLI's private config home inside the runtime",
    ),
    ("workflow", "this chat's workflow folder"),
    (
        "dir",
        "in `extra_dir` only: one granted folder (workflow or attached)",
    ),
    ("prompt_note", "the prompt note's text"),
    ("prompt_note_file", "the prompt note's file in the runtime"),
    (
        "bridge_command",
        "the dispatcher binary, run as the MCP bridge",
    ),
    ("bridge_socket", "this chat's bridge socket in the runtime"),
    ("chat", "the chat id"),
    (
        "model_url",
        "in `model_endpoint` only: the endpoint's base URL, as given",
    ),
    (
        "model_key",
        "in `model_endpoint` only: the key sent to it (a dummy unless one is given)",
    ),
    (
        "model_name",
        "in `model_endpoint` only: the model asked for (`model_endpoint.model` unless given)",
    ),
];

/// The placeholders that only mean something when a launch names a model endpoint.
pub const ENDPOINT_VARIABLES: &[&str] = &["model_url", "model_key", "model_name"];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {field}: {message}")]
pub struct AdapterError {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub field: String,
    pub message: String,
}

/// The file format of a prepared config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileFormat {
    Json,
    Toml,
    Text,
}

/// Where a prepared file goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FileBase {
    #[default]
    ConfigHome,
    Cwd,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSpec {
    pub path: Spanned<String>,
    #[serde(default)]
    pub base: FileBase,
    pub format: FileFormat,
    /// A table for json/toml, a string for text.
    pub content: toml::Value,
    /// The modes this file is written in (default: every mode). Two files with the same path
    /// and disjoint modes give a CLI a per-mode config where no flag can select one (e.g.
    /// opencode's permissions).
    #[serde(default)]
    pub modes: Option<Spanned<Vec<String>>>,
}

impl FileSpec {
    /// Whether the file is written in `mode` (the words were checked at load time).
    pub fn applies_to(&self, mode: Mode) -> bool {
        self.modes
            .as_ref()
            .is_none_or(|m| m.get_ref().iter().any(|w| Mode::parse(w) == Some(mode)))
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoginSpec {
    /// The person's file, e.g. `{home}/.codex/auth.json`. Copied when it exists.
    pub from: Option<Spanned<String>>,
    /// Or, on a Mac, the service name of a generic password in the person's login keychain
    /// (account: their login name), copied when it exists: a CLI that keeps its login there
    /// and in a file of its config home otherwise (Claude Code).
    pub keychain: Option<Spanned<String>>,
    /// Relative to the config home.
    pub to: Spanned<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigHome {
    /// The variable pointing the CLI at its config home (`CODEX_HOME`), if it has one.
    pub env: Option<String>,
    /// What that variable is set to (default `{config_home}`).
    #[serde(default = "default_env_value")]
    pub value: Spanned<String>,
    #[serde(default)]
    pub files: Vec<FileSpec>,
    #[serde(default)]
    pub login: Vec<LoginSpec>,
}

fn default_env_value() -> Spanned<String> {
    Spanned::new(0..0, "{config_home}".into())
}

/// Argument lists, each a list of templates.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// Before everything (e.g. a subcommand in headless mode comes from `headless`).
    #[serde(default)]
    pub headless: Option<Vec<Spanned<String>>>,
    /// In an interactive start (tmux, or in the foreground) in place of `headless`: flags only
    /// the interactive command accepts.
    #[serde(default)]
    pub interactive: Option<Vec<Spanned<String>>>,
    /// Full mode: the CLI's own sandbox and approvals off (we are the sandbox).
    #[serde(default)]
    pub full: Option<Vec<Spanned<String>>>,
    /// Bridge-only mode: native tools off, only the bridge.
    #[serde(default)]
    pub bridge_only: Option<Vec<Spanned<String>>>,
    /// Repeated for each granted folder besides the cwd; uses `{dir}`.
    #[serde(default)]
    pub extra_dir: Option<Vec<Spanned<String>>>,
    /// How the MCP config (the bridge, only) is passed, if by flags.
    #[serde(default)]
    pub mcp: Option<Vec<Spanned<String>>>,
    /// How the prompt note is passed, if by flags.
    #[serde(default)]
    pub prompt_note: Option<Vec<Spanned<String>>>,
}

impl Args {
    fn overlay(&self, over: &Args) -> Args {
        Args {
            headless: over.headless.clone().or_else(|| self.headless.clone()),
            interactive: over
                .interactive
                .clone()
                .or_else(|| self.interactive.clone()),
            full: over.full.clone().or_else(|| self.full.clone()),
            bridge_only: over
                .bridge_only
                .clone()
                .or_else(|| self.bridge_only.clone()),
            extra_dir: over.extra_dir.clone().or_else(|| self.extra_dir.clone()),
            mcp: over.mcp.clone().or_else(|| self.mcp.clone()),
            prompt_note: over
                .prompt_note
                .clone()
                .or_else(|| self.prompt_note.clone()),
        }
    }

    fn all(&self) -> impl Iterator<Item = (&'static str, &Vec<Spanned<String>>)> {
        [
            ("headless", &self.headless),
            ("interactive", &self.interactive),
            ("full", &self.full),
            ("bridge_only", &self.bridge_only),
            ("extra_dir", &self.extra_dir),
            ("mcp", &self.mcp),
            ("prompt_note", &self.prompt_note),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlatformOverride {
    #[serde(default)]
    pub args: Args,
    #[serde(default)]
    pub env: BTreeMap<String, Spanned<String>>,
}

/// How the CLI is pointed at a model endpoint of the launch's choosing (a local gateway, the
/// scripted model of the tests): what is added to its environment, its arguments and its
/// config files when a launch names one. docs/clis.md, "Model endpoints".
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEndpointSpec {
    /// The wire API the CLI speaks to it: `anthropic-messages`, `openai-responses`,
    /// `openai-chat` or `gemini`.
    pub wire: Spanned<String>,
    /// The model asked for when the launch names none (`{model_name}`).
    pub model: Spanned<String>,
    #[serde(default)]
    pub env: BTreeMap<String, Spanned<String>>,
    /// Added after the mode's arguments.
    #[serde(default)]
    pub args: Vec<Spanned<String>>,
    /// Written into the config home as `config_home.files` are; a file of the same path and
    /// format there gets these tables merged over its own (key by key, these win).
    #[serde(default)]
    pub files: Vec<FileSpec>,
}

/// The wire APIs a model endpoint can speak.
pub const WIRES: &[&str] = &[
    "anthropic-messages",
    "openai-responses",
    "openai-chat",
    "gemini",
];

/// A loaded, validated adapter.
#[derive(Debug, Clone)]
pub struct Adapter {
    pub name: String,
    pub display_name: String,
    pub binary: String,
    pub version_args: Vec<String>,
    pub install: String,
    pub checked_version: String,
    pub modes: Vec<Mode>,
    pub config_home: ConfigHome,
    pub env: BTreeMap<String, Spanned<String>>,
    pub env_as_root: BTreeMap<String, Spanned<String>>,
    pub args: Args,
    pub macos: PlatformOverride,
    pub linux: PlatformOverride,
    pub prompt_note_how: String,
    pub bridge_only_how: String,
    /// Why bridge-only needs a working sandbox for this CLI, if it does.
    pub bridge_only_needs_sandbox: Option<String>,
    /// Variables whose presence (non-empty) shows a login, besides the `config_home.login`
    /// files (`dispatcher test cli-sandbox-contract` asks the model only when logged in).
    pub login_env: Option<Spanned<Vec<String>>>,
    /// How to point it at a model endpoint, when it can be.
    pub model_endpoint: Option<ModelEndpointSpec>,
    /// The hosts its CLI needs (`[network] hosts`), allowed when a launch's network is an
    /// allowlist (docs/network.md).
    pub network_hosts: Vec<String>,
    /// Where it was loaded from, for messages.
    pub source: String,
}

impl Adapter {
    /// The adapter's argument lists for a target, platform overrides applied.
    pub fn args_for(&self, target: sandboxer::Target) -> Args {
        match target {
            sandboxer::Target::Macos => self.args.overlay(&self.macos.args),
            sandboxer::Target::Linux => self.args.overlay(&self.linux.args),
        }
    }

    /// The adapter's fixed environment for a target, platform overrides applied.
    pub fn env_for(
        &self,
        target: sandboxer::Target,
        as_root: bool,
    ) -> BTreeMap<String, Spanned<String>> {
        let mut env = self.env.clone();
        if as_root {
            env.extend(self.env_as_root.clone());
        }
        let over = match target {
            sandboxer::Target::Macos => &self.macos.env,
            sandboxer::Target::Linux => &self.linux.env,
        };
        env.extend(over.clone());
        env
    }

    pub fn supports(&self, mode: Mode) -> bool {
        self.modes.contains(&mode)
    }
}

/// All adapters: the embedded ones, each replaced by `DIR/clis/NAME.toml` when a profiles
/// folder is given, plus any extra `*.toml` there (a new CLI needs no Rust change).
pub fn load_all(profiles_dir: Option<&Path>) -> Result<Vec<Adapter>, AdapterError> {
    let mut texts: BTreeMap<String, (String, String)> = EMBEDDED
        .iter()
        .map(|(n, t)| {
            (
                n.to_string(),
                (format!("profiles/clis/{n}.toml (embedded)"), t.to_string()),
            )
        })
        .collect();
    if let Some(dir) = profiles_dir {
        let clis = dir.join("clis");
        if clis.is_dir() {
            let entries = std::fs::read_dir(&clis).map_err(|e| io_error(&clis, e))?;
            for entry in entries {
                let path = entry.map_err(|e| io_error(&clis, e))?.path();
                if path.extension().is_some_and(|e| e == "toml")
                    && let Some(stem) = path.file_stem().and_then(|s| s.to_str())
                {
                    let text = std::fs::read_to_string(&path).map_err(|e| io_error(&path, e))?;
                    texts.insert(stem.to_string(), (path.display().to_string(), text));
                }
            }
        }
    }
    let mut out = Vec::new();
    for (stem, (file, text)) in texts {
        let adapter = Adapter::from_toml(&text, &file)?;
        if adapter.name != stem {
            return Err(AdapterError {
                file,
                line: 0,
                column: 0,
                field: "name".into(),
                message: format!(
                    "the adapter is named {:?} but its file is {stem}.toml",
                    adapter.name
                ),
            });
        }
        out.push(adapter);
    }
    Ok(out)
}

fn io_error(path: &Path, e: std::io::Error) -> AdapterError {
    AdapterError {
        file: path.display().to_string(),
        line: 0,
        column: 0,
        field: "(file)".into(),
        message: e.to_string(),
    }
}

/// A CLI no adapter is for, and the ones that exist.
#[derive(Debug, thiserror::Error)]
#[error("unknown CLI {name:?}; known: {}", .known.join(", "))]
pub struct UnknownCli {
    pub name: String,
    pub known: Vec<String>,
}

/// Finds an adapter by name, or says which exist.
pub fn find(adapters: &[Adapter], name: &str) -> Result<Adapter, UnknownCli> {
    adapters
        .iter()
        .find(|a| a.name == name)
        .cloned()
        .ok_or_else(|| UnknownCli {
            name: name.to_string(),
            known: adapters.iter().map(|a| a.name.clone()).collect(),
        })
}

/// Locates the adapter's binary: `$AGENTWORKS_CLI_<NAME>` (upper-case, '-' → '_'), else an
/// absolute `binary`, else the first match on `PATH`.
pub fn locate_binary(adapter: &Adapter) -> Option<PathBuf> {
    let var = format!(
        "AGENTWORKS_CLI_{}",
        adapter.name.to_ascii_uppercase().replace('-', "_")
    );
    if let Some(p) = std::env::var_os(&var).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let bin = Path::new(&adapter.binary);
    if bin.is_absolute() {
        return bin.is_file().then(|| bin.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(bin))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use parse::{Scope, check_template};

    #[test]
    fn every_embedded_adapter_loads() {
        let all = load_all(None).unwrap();
        assert_eq!(all.len(), EMBEDDED.len());
    }

    #[test]
    fn templates_expand_and_escape_braces() {
        let mut v = Vars::default();
        v.0.insert("home", "/h".into());
        assert_eq!(v.expand("{home}/x{{y}}").unwrap(), "/h/x{y}");
        assert!(v.expand("{runtime}").is_err());
        assert!(
            check_template("{nope}", Scope::Plain)
                .unwrap_err()
                .contains("unknown placeholder")
        );
        assert!(check_template("{dir}", Scope::Plain).is_err());
        assert!(check_template("{dir}", Scope::ExtraDir).is_ok());
        assert!(check_template("{model_url}", Scope::Plain).is_err());
        assert!(check_template("{model_url}", Scope::ExtraDir).is_err());
        assert!(check_template("{model_url}/v1", Scope::Endpoint).is_ok());
        assert!(check_template("{dir}", Scope::Endpoint).is_err());
        assert!(check_template("{home", Scope::Plain).is_err());
        assert!(check_template("home}", Scope::Plain).is_err());
    }

    fn minimal(extra: &str) -> String {
        format!(
            "version = 1\nname = \"t\"\ndisplay_name = \"T\"\nbinary = \"t\"\ninstall = \"x\"\nchecked_version = \"1\"\nmodes = [\"full\"]\nprompt_note_how = \"x\"\nbridge_only_how = \"x\"\n[args]\nfull = []\n{extra}[config_home]\nenv = \"T_HOME\"\n"
        )
    }

    #[test]
    fn errors_name_file_line_and_field() {
        Adapter::from_toml(&minimal(""), "t.toml").unwrap();
        let e = Adapter::from_toml(&minimal("mcp = [\"{secret}\"]\n"), "t.toml").unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (12, "args.mcp[0]"), "{e}");
        let e = Adapter::from_toml(&minimal("colour = 1\n"), "t.toml").unwrap_err();
        assert!(e.message.contains("colour"), "{e}");
        let e = Adapter::from_toml(
            &minimal("").replace("[\"full\"]", "[\"unconfined\"]"),
            "t.toml",
        )
        .unwrap_err();
        assert_eq!(e.field, "modes");
        let bad_file = format!(
            "{}[[config_home.files]]\npath = \"../x\"\nformat = \"json\"\ncontent = {{}}\n",
            minimal("")
        );
        let e = Adapter::from_toml(&bad_file, "t.toml").unwrap_err();
        assert_eq!(e.field, "config_home.files[0].path", "{e}");
        let bad_login = format!(
            "{}[[config_home.login]]\nfrom = \"/etc/shadow\"\nto = \"x\"\n",
            minimal("")
        );
        let e = Adapter::from_toml(&bad_login, "t.toml").unwrap_err();
        assert!(e.message.contains("{home}"), "{e}");
        let e = Adapter::from_toml(
            &minimal("").replace("[args]", "login_env = [\"OK_KEY\", \"NOT A NAME\"]\n[args]"),
            "t.toml",
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (10, "login_env[1]"), "{e}");
    }
}
