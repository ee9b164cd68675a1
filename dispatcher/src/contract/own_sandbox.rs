//! Each CLI's own sandbox must be off inside ours: the statements of
//! `queries/own-sandbox.toml`, checked against a computed launch (its argv, environment and
//! the files it writes), plus, where the CLI can say so offline, its own answer asked inside
//! the launch (see `live.rs`).

use std::collections::BTreeMap;

use sandboxer::located::{DataFileError, LineIndex};
use sandboxer::template::Template;
use serde::Deserialize;
use toml::Spanned;

use super::ContractError;
use crate::launch::{FileSource, Launch};

/// The embedded statements.
pub const OWN_SANDBOX_TOML: &str = include_str!("../../../queries/own-sandbox.toml");

/// The variables of the statements' templates (argv words, JSON file paths).
const VARIABLES: [&str; 3] = ["config_home", "runtime", "cwd"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    version: Spanned<i64>,
    cli: Vec<RawCli>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCli {
    name: Spanned<String>,
    #[serde(default)]
    argv: Vec<Vec<Spanned<String>>>,
    #[serde(default)]
    argv_lacks: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    json: Vec<RawJsonCheck>,
    observe: Option<Observe>,
    none: Option<String>,
    why: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJsonCheck {
    file: Spanned<String>,
    pointer: String,
    equals: serde_json::Value,
}

/// A JSON file the launch writes has `equals` at `pointer`.
#[derive(Clone, Debug)]
pub struct JsonCheck {
    pub file: Template,
    pub pointer: String,
    pub equals: serde_json::Value,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observe {
    pub args: Vec<String>,
    pub stdout_contains: String,
}

/// What must hold for one CLI.
#[derive(Clone, Debug)]
pub struct Statement {
    pub name: String,
    /// Word sequences the argv must contain, each word a template.
    pub argv: Vec<Vec<Template>>,
    pub argv_lacks: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub json: Vec<JsonCheck>,
    pub observe: Option<Observe>,
    /// The CLI has no sandbox of its own (and why we say so).
    pub none: Option<String>,
    pub why: String,
}

/// Loads the statements; errors name the file, line and field.
pub fn load(text: &str, file: &str) -> Result<Vec<Statement>, ContractError> {
    let lines = LineIndex::new(text);
    let line_of = |offset: usize| lines.line(offset);
    let template = |s: &Spanned<String>, field: String| -> Result<Template, ContractError> {
        Template::parse(s.get_ref())
            .and_then(|t| t.known_by(|v| VARIABLES.contains(&v)))
            .map_err(|e| {
                let known = VARIABLES.map(|v| format!("{{{v}}}")).join(", ");
                let message = format!("{e}; known: {known}");
                ContractError::Load(
                    DataFileError::at(file, &lines, Some(s.span().start), field, message)
                        .to_string(),
                )
            })
    };
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(0, |s| line_of(s.start));
        ContractError::Load(format!("{file}:{line}: {}", e.message().trim()))
    })?;
    if *raw.version.get_ref() != 1 {
        return Err(ContractError::Load(format!(
            "{file}:{}: version: unsupported version {}",
            line_of(raw.version.span().start),
            raw.version.get_ref()
        )));
    }
    let mut out: Vec<Statement> = Vec::new();
    for (i, c) in raw.cli.into_iter().enumerate() {
        let line = line_of(c.name.span().start);
        let name = c.name.into_inner();
        let empty = c.argv.is_empty()
            && c.argv_lacks.is_empty()
            && c.env.is_empty()
            && c.json.is_empty()
            && c.observe.is_none();
        match (&c.none, empty) {
            (Some(_), false) => {
                return Err(ContractError::Load(format!(
                    "{file}:{line}: cli[{i}].none: {name} says it has no sandbox but also lists checks"
                )));
            }
            (None, true) => {
                return Err(ContractError::Load(format!(
                    "{file}:{line}: cli[{i}]: {name} lists no check; say `none = \"why\"` if it has no sandbox"
                )));
            }
            _ => {}
        }
        if out.iter().any(|s| s.name == name) {
            return Err(ContractError::Load(format!(
                "{file}:{line}: cli[{i}].name: {name} twice"
            )));
        }
        if c.argv.iter().any(Vec::is_empty) {
            return Err(ContractError::Load(format!(
                "{file}:{line}: cli[{i}].argv: an empty sequence"
            )));
        }
        let argv = (c.argv.iter().enumerate())
            .map(|(j, seq)| {
                (seq.iter().enumerate())
                    .map(|(k, w)| template(w, format!("cli[{i}].argv[{j}][{k}]")))
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let json = (c.json.into_iter().enumerate())
            .map(|(j, check)| {
                Ok(JsonCheck {
                    file: template(&check.file, format!("cli[{i}].json[{j}].file"))?,
                    pointer: check.pointer,
                    equals: check.equals,
                })
            })
            .collect::<Result<Vec<_>, ContractError>>()?;
        out.push(Statement {
            why: c.why.or_else(|| c.none.clone()).unwrap_or_default(),
            name,
            argv,
            argv_lacks: c.argv_lacks,
            env: c.env,
            json,
            observe: c.observe,
            none: c.none,
        });
    }
    Ok(out)
}

/// A statement's template, for this launch.
fn expand(t: &Template, launch: &Launch) -> Result<String, String> {
    t.expand_with(|v| {
        let path = match v {
            "config_home" => &launch.config_home,
            "runtime" => &launch.runtime,
            "cwd" => &launch.cwd,
            _ => return Err(format!("{{{v}}} has no value here")),
        };
        Ok(path.display().to_string())
    })
}

/// Checks the static part of `s` against a computed launch: `Ok(what held)` or `Err(what
/// did not)`.
pub fn check_static(s: &Statement, launch: &Launch) -> Result<String, String> {
    if let Some(none) = &s.none {
        return Ok(format!("nothing to turn off: {none}"));
    }
    let argv = &launch.cli_argv[1..];
    let mut held = Vec::new();
    for raw in &s.argv {
        let seq = (raw.iter())
            .map(|w| expand(w, launch))
            .collect::<Result<Vec<_>, _>>()?;
        if !argv.windows(seq.len()).any(|w| w == seq.as_slice()) {
            return Err(format!("the argv lacks `{}`", seq.join(" ")));
        }
        let written: Vec<&str> = raw.iter().map(Template::as_str).collect();
        held.push(format!("argv has `{}`", written.join(" ")));
    }
    for w in &s.argv_lacks {
        if argv.iter().any(|a| a == w) {
            return Err(format!("the argv has `{w}`"));
        }
        held.push(format!("no `{w}`"));
    }
    for (k, v) in &s.env {
        match launch.env_set.get(k) {
            Some(got) if got == v => held.push(format!("{k}={v}")),
            Some(got) => return Err(format!("{k}={got}, not {v}")),
            None => return Err(format!("{k} is not set")),
        }
    }
    for j in &s.json {
        let path = expand(&j.file, launch)?;
        let content = launch
            .files
            .iter()
            .find(|f| f.path.display().to_string() == path)
            .and_then(|f| match &f.source {
                FileSource::Content(c) => Some(c.clone()),
                FileSource::CopyOf(_) | FileSource::Keychain(_) => None,
            })
            .ok_or_else(|| format!("the launch writes no {path}"))?;
        let v: serde_json::Value =
            serde_json::from_str(&content).map_err(|e| format!("{path}: not JSON: {e}"))?;
        match v.pointer(&j.pointer) {
            Some(got) if *got == j.equals => {
                held.push(format!("{}#{} = {}", j.file.as_str(), j.pointer, j.equals))
            }
            Some(got) => return Err(format!("{path}#{} is {got}, not {}", j.pointer, j.equals)),
            None => return Err(format!("{path} has no {}", j.pointer)),
        }
    }
    Ok(held.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_statements_load_and_cover_every_adapter() {
        let st = load(OWN_SANDBOX_TOML, "own-sandbox.toml").unwrap();
        for a in crate::adapter::load_all(None).unwrap() {
            assert!(
                st.iter().any(|s| s.name == a.name),
                "{} has no statement",
                a.name
            );
        }
    }

    #[test]
    fn bad_statements_name_the_line() {
        let e = load("version = 1\n[[cli]]\nname = \"x\"\n", "o.toml").unwrap_err();
        assert!(e.to_string().contains("o.toml:3: cli[0]"), "{e}");
        let e = load(
            "version = 1\n[[cli]]\nname = \"x\"\nnone = \"n\"\nargv_lacks = [\"-s\"]\n",
            "o.toml",
        )
        .unwrap_err();
        assert!(e.to_string().contains("cli[0].none"), "{e}");
        let e = load("version = 1\n[[cli]]\nname = \"x\"\ncolour = 1\n", "o.toml").unwrap_err();
        assert!(e.to_string().contains("o.toml:4"), "{e}");
        let e = load(
            "version = 1\n[[cli]]\nname = \"x\"\nargv = [[\"-s\", \"{home}/x\"]]\n",
            "o.toml",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("o.toml:4:16: cli[0].argv[0][1]: unknown template variable {home}"),
            "{e}"
        );
    }
}
