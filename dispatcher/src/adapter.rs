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

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use sandboxer::template::{Template, TemplateError};
use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::modes::Mode;

/// The adapters shipped with the dispatcher: (name, text).
pub const EMBEDDED: &[(&str, &str)] = &[
    ("claude", include_str!("../../profiles/clis/claude.toml")),
    ("codex", include_str!("../../profiles/clis/codex.toml")),
    ("cursor", include_str!("../../profiles/clis/cursor.toml")),
    ("gemini", include_str!("../../profiles/clis/gemini.toml")),
    ("agy", include_str!("../../profiles/clis/agy.toml")),
    ("pi", include_str!("../../profiles/clis/pi.toml")),
    (
        "opencode",
        include_str!("../../profiles/clis/opencode.toml"),
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
];

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
    pub from: Spanned<String>,
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

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdapter {
    version: Spanned<u32>,
    name: Spanned<String>,
    display_name: String,
    binary: String,
    #[serde(default = "default_version_args")]
    version_args: Vec<String>,
    /// Where the binary comes from (documentation: `npm:@openai/codex`, `shell installer`).
    install: String,
    /// The version the flags were checked against (docs/clis.md says how).
    checked_version: String,
    modes: Spanned<Vec<String>>,
    config_home: ConfigHome,
    #[serde(default)]
    env: BTreeMap<String, Spanned<String>>,
    /// Set only when the dispatcher runs as root (e.g. Claude's `IS_SANDBOX=1`).
    #[serde(default)]
    env_as_root: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    args: Args,
    #[serde(default)]
    macos: PlatformOverride,
    #[serde(default)]
    linux: PlatformOverride,
    /// How the prompt note reaches the CLI, in words (docs and `dispatcher clis`).
    prompt_note_how: String,
    /// What bridge-only means for this CLI, in words.
    bridge_only_how: String,
    /// Set when bridge-only is sound only inside a working sandbox, with the reason (e.g. the
    /// CLI starts programs named in the person's open home whatever its permissions say).
    #[serde(default)]
    bridge_only_needs_sandbox: Option<String>,
    /// Environment variables whose presence shows the CLI is logged in (an API key the CLI
    /// reads), besides the `config_home.login` files.
    #[serde(default)]
    login_env: Option<Spanned<Vec<String>>>,
}

fn default_version_args() -> Vec<String> {
    vec!["--version".into()]
}

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
    /// Where it was loaded from, for messages.
    pub source: String,
}

impl Adapter {
    /// Parses and validates adapter text; `file` names it in errors.
    pub fn from_toml(text: &str, file: &str) -> Result<Adapter, AdapterError> {
        let cx = Cx {
            lines: sandboxer::located::LineIndex::new(text),
            file,
        };
        let raw: RawAdapter = toml::from_str(text).map_err(|e| {
            let (field, message) = sandboxer::located::toml_field_and_message(&e);
            cx.error(e.span().unwrap_or(0..0), &field, message)
        })?;
        if *raw.version.get_ref() != 1 {
            return Err(cx.error(
                raw.version.span(),
                "version",
                "unsupported adapter version; expected 1",
            ));
        }
        let name = raw.name.get_ref().clone();
        let name_ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !name_ok {
            return Err(cx.error(
                raw.name.span(),
                "name",
                format!("{name:?}: use lowercase letters, digits and '-'"),
            ));
        }
        let mut modes = Vec::new();
        for m in raw.modes.get_ref() {
            match Mode::parse(m) {
                Some(Mode::Auto) | None => {
                    return Err(cx.error(
                        raw.modes.span(),
                        "modes",
                        format!("{m:?} is not a mode an adapter supports; expected \"full\" or \"bridge-only\""),
                    ));
                }
                Some(mode) => modes.push(mode),
            }
        }
        if modes.is_empty() {
            return Err(cx.error(
                raw.modes.span(),
                "modes",
                "an adapter supports at least one mode",
            ));
        }
        let adapter = Adapter {
            name,
            display_name: raw.display_name,
            binary: raw.binary,
            version_args: raw.version_args,
            install: raw.install,
            checked_version: raw.checked_version,
            modes,
            config_home: raw.config_home,
            env: raw.env,
            env_as_root: raw.env_as_root,
            args: raw.args,
            macos: raw.macos,
            linux: raw.linux,
            prompt_note_how: raw.prompt_note_how,
            bridge_only_how: raw.bridge_only_how,
            bridge_only_needs_sandbox: raw.bridge_only_needs_sandbox,
            login_env: raw.login_env,
            source: file.to_string(),
        };
        adapter.validate(&cx)?;
        Ok(adapter)
    }

    fn validate(&self, cx: &Cx) -> Result<(), AdapterError> {
        if self.modes.contains(&Mode::Full) && self.args.full.is_none() {
            return Err(cx.error(
                0..0,
                "args.full",
                "the adapter supports full mode but says no flags for it (use [] if it needs none)",
            ));
        }
        if self.modes.contains(&Mode::BridgeOnly) && self.args.bridge_only.is_none() {
            return Err(cx.error(
                0..0,
                "args.bridge_only",
                "the adapter supports bridge-only mode but says no flags for it",
            ));
        }
        let check =
            |s: &Spanned<String>, field: &str, allow_dir: bool| -> Result<(), AdapterError> {
                check_template(s.get_ref(), allow_dir).map_err(|m| cx.error(s.span(), field, m))
            };
        for (section, args) in [
            ("args", &self.args),
            ("macos.args", &self.macos.args),
            ("linux.args", &self.linux.args),
        ] {
            for (key, list) in args.all() {
                for (i, s) in list.iter().enumerate() {
                    check(s, &format!("{section}.{key}[{i}]"), key == "extra_dir")?;
                }
            }
        }
        for (section, env) in [
            ("env", &self.env),
            ("env_as_root", &self.env_as_root),
            ("macos.env", &self.macos.env),
            ("linux.env", &self.linux.env),
        ] {
            for (k, v) in env {
                if !valid_env_name(k) {
                    return Err(cx.error(
                        v.span(),
                        &format!("{section}.{k}"),
                        format!("{k:?} is not an environment variable name"),
                    ));
                }
                check(v, &format!("{section}.{k}"), false)?;
            }
        }
        if let Some(var) = &self.config_home.env
            && !valid_env_name(var)
        {
            return Err(cx.error(
                0..0,
                "config_home.env",
                format!("{var:?} is not an environment variable name"),
            ));
        }
        if self.config_home.value.span() != (0..0) {
            check(&self.config_home.value, "config_home.value", false)?;
        }
        for (i, f) in self.config_home.files.iter().enumerate() {
            let field = format!("config_home.files[{i}]");
            check_relative(f.path.get_ref())
                .map_err(|m| cx.error(f.path.span(), &format!("{field}.path"), m))?;
            check(&f.path, &format!("{field}.path"), false)?;
            if let Some(modes) = &f.modes {
                let words = modes.get_ref();
                if words.is_empty() {
                    return Err(cx.error(
                        modes.span(),
                        &format!("{field}.modes"),
                        "a file is written in at least one mode (omit modes for every mode)",
                    ));
                }
                for w in words {
                    match Mode::parse(w) {
                        Some(m) if m != Mode::Auto && self.modes.contains(&m) => {}
                        _ => {
                            let supported: Vec<_> = self.modes.iter().map(|m| m.as_str()).collect();
                            return Err(cx.error(
                                modes.span(),
                                &format!("{field}.modes"),
                                format!(
                                    "{w:?} is not a mode of this adapter; expected one of: {}",
                                    supported.join(", ")
                                ),
                            ));
                        }
                    }
                }
            }
            match (f.format, &f.content) {
                (FileFormat::Text, toml::Value::String(s)) => {
                    check_template(s, false)
                        .map_err(|m| cx.error(f.path.span(), &format!("{field}.content"), m))?;
                }
                (FileFormat::Json | FileFormat::Toml, toml::Value::Table(_)) => {
                    check_value(&f.content, &format!("{field}.content"))
                        .map_err(|(fld, m)| cx.error(f.path.span(), &fld, m))?;
                }
                (format, _) => {
                    return Err(cx.error(
                        f.path.span(),
                        &format!("{field}.content"),
                        format!(
                            "a {format:?} file needs {} content",
                            if format == FileFormat::Text {
                                "string"
                            } else {
                                "table"
                            }
                        ),
                    ));
                }
            }
        }
        for mode in &self.modes {
            let mut seen: Vec<(FileBase, &str)> = Vec::new();
            for (i, f) in self.config_home.files.iter().enumerate() {
                if !f.applies_to(*mode) {
                    continue;
                }
                let key = (f.base, f.path.get_ref().as_str());
                if seen.contains(&key) {
                    return Err(cx.error(
                        f.path.span(),
                        &format!("config_home.files[{i}].path"),
                        format!(
                            "{:?} is written twice in {mode} mode (give the files disjoint modes)",
                            key.1
                        ),
                    ));
                }
                seen.push(key);
            }
        }
        if let Some(vars) = &self.login_env {
            for (i, v) in vars.get_ref().iter().enumerate() {
                if !valid_env_name(v) {
                    return Err(cx.error(
                        vars.span(),
                        &format!("login_env[{i}]"),
                        format!("{v:?} is not an environment variable name"),
                    ));
                }
            }
        }
        for (i, l) in self.config_home.login.iter().enumerate() {
            let field = format!("config_home.login[{i}]");
            check(&l.from, &format!("{field}.from"), false)?;
            if !l.from.get_ref().starts_with("{home}/") {
                return Err(cx.error(l.from.span(), &format!("{field}.from"), "a login file is carried over from the person's home: start it with \"{home}/\""));
            }
            check_relative(l.to.get_ref())
                .map_err(|m| cx.error(l.to.span(), &format!("{field}.to"), m))?;
        }
        Ok(())
    }

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

struct Cx<'a> {
    lines: sandboxer::located::LineIndex,
    file: &'a str,
}

impl Cx<'_> {
    fn error(&self, span: Range<usize>, field: &str, message: impl Into<String>) -> AdapterError {
        let (line, column) = if span == (0..0) {
            (0, 0)
        } else {
            self.lines.line_col(span.start)
        };
        AdapterError {
            file: self.file.into(),
            line,
            column,
            field: field.into(),
            message: message.into(),
        }
    }
}

fn valid_env_name(k: &str) -> bool {
    !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn check_relative(p: &str) -> Result<(), String> {
    let path = Path::new(p);
    if p.is_empty() || path.is_absolute() || p.contains('\0') {
        return Err(format!("{p:?} must be a non-empty relative path"));
    }
    if !path
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)))
    {
        return Err(format!("{p:?} must not contain '..' or '.'"));
    }
    Ok(())
}

fn check_value(v: &toml::Value, field: &str) -> Result<(), (String, String)> {
    match v {
        toml::Value::String(s) => check_template(s, false).map_err(|m| (field.to_string(), m)),
        toml::Value::Array(a) => a
            .iter()
            .enumerate()
            .try_for_each(|(i, x)| check_value(x, &format!("{field}[{i}]"))),
        toml::Value::Table(t) => t.iter().try_for_each(|(k, x)| {
            let f = format!("{field}.{k:?}");
            check_template(k, false).map_err(|m| (f.clone(), m))?;
            check_value(x, &f)
        }),
        _ => Ok(()),
    }
}

/// Checks a template against [`VARIABLES`] (`{dir}` only where `allow_dir`).
fn check_template(t: &str, allow_dir: bool) -> Result<(), String> {
    let known =
        |name: &str| VARIABLES.iter().any(|(v, _)| *v == name) && (allow_dir || name != "dir");
    match Template::parse(t).and_then(|t| t.known_by(known)) {
        Ok(_) => Ok(()),
        Err(TemplateError::Unknown { name }) => {
            let names: Vec<_> = VARIABLES.iter().map(|(v, _)| *v).collect();
            Err(format!(
                "unknown placeholder {{{name}}}{}; known: {}",
                if name == "dir" {
                    " (only in args.extra_dir)"
                } else {
                    ""
                },
                names.join(", ")
            ))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Values for the placeholders of one launch.
#[derive(Debug, Clone, Default)]
pub struct Vars(pub BTreeMap<&'static str, String>);

impl Vars {
    /// Expands a template checked at load time. A variable missing here is a bug in the
    /// caller, reported as an error rather than expanded to nothing.
    pub fn expand(&self, t: &str) -> Result<String, String> {
        Template::parse(t)
            .map_err(|e| e.to_string())?
            .expand_with(|name| {
                self.0
                    .get(name)
                    .cloned()
                    .ok_or_else(|| format!("placeholder {{{name}}} has no value here"))
            })
    }

    pub fn expand_list(&self, list: Option<&Vec<Spanned<String>>>) -> Result<Vec<String>, String> {
        list.into_iter()
            .flatten()
            .map(|s| self.expand(s.get_ref()))
            .collect()
    }

    /// Expands every key and string inside a structured value.
    pub fn expand_value(&self, v: &toml::Value) -> Result<toml::Value, String> {
        Ok(match v {
            toml::Value::String(s) => toml::Value::String(self.expand(s)?),
            toml::Value::Array(a) => toml::Value::Array(
                a.iter()
                    .map(|x| self.expand_value(x))
                    .collect::<Result<_, _>>()?,
            ),
            toml::Value::Table(t) => {
                let mut out = toml::map::Map::new();
                for (k, x) in t {
                    out.insert(self.expand(k)?, self.expand_value(x)?);
                }
                toml::Value::Table(out)
            }
            other => other.clone(),
        })
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
            check_template("{nope}", false)
                .unwrap_err()
                .contains("unknown placeholder")
        );
        assert!(check_template("{dir}", false).is_err());
        assert!(check_template("{dir}", true).is_ok());
        assert!(check_template("{home", false).is_err());
        assert!(check_template("home}", false).is_err());
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
