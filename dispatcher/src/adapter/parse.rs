//! Reading an adapter file: the raw TOML, then every check with the file, line and field it
//! names ([`Adapter::from_toml`]).

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use sandboxer::template::{Template, TemplateError};
use serde::Deserialize;
use toml::Spanned;

use super::{
    Adapter, AdapterError, Args, ConfigHome, ENDPOINT_VARIABLES, FileBase, FileFormat, FileSpec,
    ModelEndpointSpec, PlatformOverride, VARIABLES, WIRES,
};
use crate::modes::Mode;

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
    #[serde(default)]
    model_endpoint: Option<ModelEndpointSpec>,
    #[serde(default)]
    network: Option<AdapterNetwork>,
}

/// `[network]` of an adapter: the hosts its CLI needs (its model API, its login), allowed in
/// `allowlist` mode.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct AdapterNetwork {
    hosts: Vec<Spanned<String>>,
}

fn default_version_args() -> Vec<String> {
    vec!["--version".into()]
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
            model_endpoint: raw.model_endpoint,
            network_hosts: match &raw.network {
                Some(n) => n
                    .hosts
                    .iter()
                    .enumerate()
                    .map(|(i, h)| {
                        sandboxer::network::HostPattern::parse(h.get_ref())
                            .map(|_| h.get_ref().clone())
                            .map_err(|e| {
                                cx.error(
                                    h.span(),
                                    &format!("network.hosts[{i}]"),
                                    format!("{:?}: {e}", h.get_ref()),
                                )
                            })
                    })
                    .collect::<Result<_, _>>()?,
                None => Vec::new(),
            },
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
        let check = |s: &Spanned<String>, field: &str, scope: Scope| -> Result<(), AdapterError> {
            check_template(s.get_ref(), scope).map_err(|m| cx.error(s.span(), field, m))
        };
        for (section, args) in [
            ("args", &self.args),
            ("macos.args", &self.macos.args),
            ("linux.args", &self.linux.args),
        ] {
            for (key, list) in args.all() {
                for (i, s) in list.iter().enumerate() {
                    let scope = if key == "extra_dir" {
                        Scope::ExtraDir
                    } else {
                        Scope::Plain
                    };
                    check(s, &format!("{section}.{key}[{i}]"), scope)?;
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
                check(v, &format!("{section}.{k}"), Scope::Plain)?;
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
            check(&self.config_home.value, "config_home.value", Scope::Plain)?;
        }
        for (i, f) in self.config_home.files.iter().enumerate() {
            self.check_file(cx, f, &format!("config_home.files[{i}]"), Scope::Plain)?;
        }
        if let Some(ep) = &self.model_endpoint {
            self.check_endpoint(cx, ep)?;
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
            match (&l.from, &l.keychain) {
                (Some(from), None) => {
                    check(from, &format!("{field}.from"), Scope::Plain)?;
                    if !from.get_ref().starts_with("{home}/") {
                        return Err(cx.error(from.span(), &format!("{field}.from"), "a login file is carried over from the person's home: start it with \"{home}/\""));
                    }
                }
                (None, Some(service)) => {
                    let name = service.get_ref();
                    if name.is_empty() || name.len() > 128 || name.chars().any(char::is_control) {
                        return Err(cx.error(
                            service.span(),
                            &format!("{field}.keychain"),
                            "a keychain service name: 1 to 128 characters, none of them control characters",
                        ));
                    }
                }
                _ => {
                    return Err(cx.error(
                        l.to.span(),
                        &field,
                        "give exactly one of `from` (a file in the home) and `keychain` (a keychain service name)",
                    ));
                }
            }
            check_relative(l.to.get_ref())
                .map_err(|m| cx.error(l.to.span(), &format!("{field}.to"), m))?;
        }
        Ok(())
    }

    /// Checks one prepared file (`field` names it), its templates as allowed in `scope`.
    fn check_file(
        &self,
        cx: &Cx,
        f: &FileSpec,
        field: &str,
        scope: Scope,
    ) -> Result<(), AdapterError> {
        check_relative(f.path.get_ref())
            .map_err(|m| cx.error(f.path.span(), &format!("{field}.path"), m))?;
        check_template(f.path.get_ref(), scope)
            .map_err(|m| cx.error(f.path.span(), &format!("{field}.path"), m))?;
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
                check_template(s, scope)
                    .map_err(|m| cx.error(f.path.span(), &format!("{field}.content"), m))?;
            }
            (FileFormat::Json | FileFormat::Toml, toml::Value::Table(_)) => {
                check_value(&f.content, &format!("{field}.content"), scope)
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
        Ok(())
    }

    fn check_endpoint(&self, cx: &Cx, ep: &ModelEndpointSpec) -> Result<(), AdapterError> {
        if !WIRES.contains(&ep.wire.get_ref().as_str()) {
            return Err(cx.error(
                ep.wire.span(),
                "model_endpoint.wire",
                format!(
                    "{:?} is not a wire API; expected one of: {}",
                    ep.wire.get_ref(),
                    WIRES.join(", ")
                ),
            ));
        }
        if ep.model.get_ref().is_empty() || ep.model.get_ref().chars().any(char::is_control) {
            return Err(cx.error(
                ep.model.span(),
                "model_endpoint.model",
                "a model name: not empty, no control characters",
            ));
        }
        for (k, v) in &ep.env {
            if !valid_env_name(k) {
                return Err(cx.error(
                    v.span(),
                    &format!("model_endpoint.env.{k}"),
                    format!("{k:?} is not an environment variable name"),
                ));
            }
            check_template(v.get_ref(), Scope::Endpoint)
                .map_err(|m| cx.error(v.span(), &format!("model_endpoint.env.{k}"), m))?;
        }
        for (i, a) in ep.args.iter().enumerate() {
            check_template(a.get_ref(), Scope::Endpoint)
                .map_err(|m| cx.error(a.span(), &format!("model_endpoint.args[{i}]"), m))?;
        }
        for (i, f) in ep.files.iter().enumerate() {
            let field = format!("model_endpoint.files[{i}]");
            if f.modes.is_some() {
                return Err(cx.error(
                    f.path.span(),
                    &format!("{field}.modes"),
                    "an endpoint's file is written in every mode the launch has",
                ));
            }
            self.check_file(cx, f, &field, Scope::Endpoint)?;
        }
        Ok(())
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

fn check_value(v: &toml::Value, field: &str, scope: Scope) -> Result<(), (String, String)> {
    match v {
        toml::Value::String(s) => check_template(s, scope).map_err(|m| (field.to_string(), m)),
        toml::Value::Array(a) => a
            .iter()
            .enumerate()
            .try_for_each(|(i, x)| check_value(x, &format!("{field}[{i}]"), scope)),
        toml::Value::Table(t) => t.iter().try_for_each(|(k, x)| {
            let f = format!("{field}.{k:?}");
            check_template(k, scope).map_err(|m| (f.clone(), m))?;
            check_value(x, &f, scope)
        }),
        _ => Ok(()),
    }
}

/// Where a template is, for the placeholders that mean something only in some places.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    /// Anywhere: every placeholder but `{dir}` and the model endpoint's.
    Plain,
    /// `args.extra_dir`: also `{dir}`.
    ExtraDir,
    /// `model_endpoint`: also `{model_url}`, `{model_key}`, `{model_name}`.
    Endpoint,
}

/// Checks a template against [`VARIABLES`], as allowed in `scope`.
pub(super) fn check_template(t: &str, scope: Scope) -> Result<(), String> {
    let known = |name: &str| {
        VARIABLES.iter().any(|(v, _)| *v == name)
            && (scope == Scope::ExtraDir || name != "dir")
            && (scope == Scope::Endpoint || !ENDPOINT_VARIABLES.contains(&name))
    };
    match Template::parse(t).and_then(|t| t.known_by(known)) {
        Ok(_) => Ok(()),
        Err(TemplateError::Unknown { name }) => {
            let names: Vec<_> = VARIABLES.iter().map(|(v, _)| *v).collect();
            let only = if name == "dir" {
                " (only in args.extra_dir)"
            } else if ENDPOINT_VARIABLES.contains(&name.as_str()) {
                " (only in model_endpoint)"
            } else {
                ""
            };
            Err(format!(
                "unknown placeholder {{{name}}}{only}; known: {}",
                names.join(", ")
            ))
        }
        Err(e) => Err(e.to_string()),
    }
}
