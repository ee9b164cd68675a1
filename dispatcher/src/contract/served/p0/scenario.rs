//! The P0 scenario as data (`queries/p0.toml`): its steps, each one model turn through the
//! CLI's own shell or write tool, with how it is judged and what is expected; and how each
//! CLI takes a first prompt when started interactively.

use std::collections::BTreeMap;

use sandboxer::Target;
use sandboxer::located::{DataFileError, LineIndex};
use sandboxer::template::Template;
use serde::Deserialize;
use toml::Spanned;

use crate::contract::ContractError;

/// The embedded scenario.
pub const P0_TOML: &str = include_str!("../../../../../queries/p0.toml");

/// The variables of the steps' templates.
const VARIABLES: [&str; 9] = [
    "home",
    "workflow",
    "other_workflow",
    "outside_evidence",
    "tmux_socket",
    "launch",
    "marker",
    "target",
    "evidence",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    version: Spanned<i64>,
    interactive_prompt: BTreeMap<String, Vec<Spanned<String>>>,
    step: Vec<RawStep>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    name: Spanned<String>,
    #[serde(default)]
    platforms: Option<Vec<Spanned<String>>>,
    tool: Tool,
    command: Option<Spanned<String>>,
    control: Option<Spanned<String>>,
    target: Option<Spanned<String>>,
    #[serde(default)]
    plant: bool,
    judge: Judge,
    evidence: Option<Spanned<String>>,
    #[serde(default)]
    settle_seconds: u64,
    expect: Expect,
    why: String,
    program: Option<RawProgram>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProgram {
    path: Spanned<String>,
    content: Spanned<String>,
}

/// The CLI's tool a step goes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tool {
    Shell,
    Write,
}

/// How a step's outcome is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Judge {
    /// The planted target's marker came back in a tool result.
    Seen,
    /// The target holds the step's marker.
    Written,
    /// The evidence file holds the step's marker.
    Evidence,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Expect {
    Allow,
    Deny,
}

impl Expect {
    pub fn as_str(self) -> &'static str {
        match self {
            Expect::Allow => "allow",
            Expect::Deny => "deny",
        }
    }
}

/// A file the runner writes (mode 0755) before the step: a program the step runs.
#[derive(Clone, Debug)]
pub struct Program {
    pub path: Template,
    pub content: Template,
}

/// One step of the scenario.
#[derive(Clone, Debug)]
pub struct Step {
    pub name: String,
    /// Where it runs (`None`: everywhere).
    pub platforms: Option<Vec<Target>>,
    pub tool: Tool,
    /// The shell tool's command.
    pub command: Option<Template>,
    /// What the unconfined control runs instead of `command`.
    pub control: Option<Template>,
    pub target: Option<Template>,
    /// The runner plants `target` with a marker of its own before each run.
    pub plant: bool,
    pub judge: Judge,
    pub evidence: Option<Template>,
    /// How long evidence may take to appear after the launch ended.
    pub settle_seconds: u64,
    pub expect: Expect,
    pub why: String,
    pub program: Option<Program>,
}

impl Step {
    pub fn runs_on(&self, host: Target) -> bool {
        self.platforms.as_ref().is_none_or(|p| p.contains(&host))
    }
}

#[derive(Clone, Debug)]
pub struct Scenario {
    pub steps: Vec<Step>,
    /// By CLI name: the arguments that give an interactive start its first prompt.
    pub interactive_prompt: BTreeMap<String, Vec<Template>>,
}

impl Scenario {
    /// The embedded `queries/p0.toml`.
    pub fn embedded() -> Result<Scenario, ContractError> {
        load(P0_TOML, "queries/p0.toml")
    }

    /// The steps for `host`.
    pub fn steps_on(&self, host: Target) -> Vec<&Step> {
        self.steps.iter().filter(|s| s.runs_on(host)).collect()
    }
}

/// Loads a scenario; errors name the file, line, column and field.
pub fn load(text: &str, file: &str) -> Result<Scenario, ContractError> {
    let lines = LineIndex::new(text);
    let at = |offset: usize, field: String, message: String| {
        ContractError::Load(
            DataFileError::at(file, &lines, Some(offset), field, message).to_string(),
        )
    };
    let template = |s: &Spanned<String>, field: String, extra: &[&str]| {
        Template::parse(s.get_ref())
            .and_then(|t| t.known_by(|v| VARIABLES.contains(&v) || extra.contains(&v)))
            .map_err(|e| {
                let known = VARIABLES
                    .iter()
                    .chain(extra)
                    .map(|v| format!("{{{v}}}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                at(s.span().start, field, format!("{e}; known: {known}"))
            })
    };
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let (line, column) = e.span().map_or((0, 0), |s| lines.line_col(s.start));
        ContractError::Load(format!("{file}:{line}:{column}: {}", e.message().trim()))
    })?;
    if *raw.version.get_ref() != 1 {
        return Err(at(
            raw.version.span().start,
            "version".into(),
            format!("unsupported version {}", raw.version.get_ref()),
        ));
    }
    let mut interactive_prompt = BTreeMap::new();
    for (cli, args) in &raw.interactive_prompt {
        let field = |i: usize| format!("interactive_prompt.{cli}[{i}]");
        let parsed = args
            .iter()
            .enumerate()
            .map(|(i, a)| {
                Template::parse(a.get_ref())
                    .and_then(|t| t.known_by(|v| v == "prompt"))
                    .map_err(|e| at(a.span().start, field(i), format!("{e}; known: {{prompt}}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        interactive_prompt.insert(cli.clone(), parsed);
    }
    let mut steps: Vec<Step> = Vec::new();
    for (i, s) in raw.step.into_iter().enumerate() {
        let f = |k: &str| format!("step[{i}].{k}");
        let start = s.name.span().start;
        let name = s.name.into_inner();
        if steps.iter().any(|x| x.name == name) {
            return Err(at(start, f("name"), format!("{name} twice")));
        }
        let platforms = match s.platforms {
            None => None,
            Some(list) => Some(
                list.iter()
                    .map(|p| match p.get_ref().as_str() {
                        "linux" => Ok(Target::Linux),
                        "macos" => Ok(Target::Macos),
                        other => Err(at(
                            p.span().start,
                            f("platforms"),
                            format!("{other:?}: linux or macos"),
                        )),
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        let opt = |v: &Option<Spanned<String>>, k: &str| {
            v.as_ref().map(|v| template(v, f(k), &[])).transpose()
        };
        let step = Step {
            name: name.clone(),
            platforms,
            tool: s.tool,
            command: opt(&s.command, "command")?,
            control: opt(&s.control, "control")?,
            target: opt(&s.target, "target")?,
            plant: s.plant,
            judge: s.judge,
            evidence: opt(&s.evidence, "evidence")?,
            settle_seconds: s.settle_seconds,
            expect: s.expect,
            why: s.why,
            program: s
                .program
                .map(|p| {
                    Ok::<_, ContractError>(Program {
                        path: template(&p.path, f("program.path"), &[])?,
                        content: template(&p.content, f("program.content"), &[])?,
                    })
                })
                .transpose()?,
        };
        // What each shape needs, said at the step.
        let missing = match (step.tool, step.judge) {
            (Tool::Shell, _) if step.command.is_none() => Some("command"),
            (Tool::Write, _) if step.command.is_some() => {
                return Err(at(
                    start,
                    f("command"),
                    "a write step has no command".into(),
                ));
            }
            (_, Judge::Seen | Judge::Written) if step.target.is_none() => Some("target"),
            (Tool::Write, _) if step.target.is_none() => Some("target"),
            (_, Judge::Evidence) if step.evidence.is_none() => Some("evidence"),
            _ => None,
        };
        if let Some(k) = missing {
            return Err(at(start, f(k), format!("{name}: this step needs `{k}`")));
        }
        if step.judge == Judge::Seen && step.tool != Tool::Shell {
            return Err(at(
                start,
                f("judge"),
                "`seen` is judged from a shell tool's result".into(),
            ));
        }
        steps.push(step);
    }
    Ok(Scenario {
        steps,
        interactive_prompt,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_scenario_loads_with_a_denial_and_an_allowed_counterpart_per_tool() {
        let s = Scenario::embedded().unwrap();
        for host in [Target::Linux, Target::Macos] {
            let steps = s.steps_on(host);
            for tool in [Tool::Shell, Tool::Write] {
                assert!(
                    steps
                        .iter()
                        .any(|x| x.tool == tool && x.expect == Expect::Allow),
                    "{host:?} {tool:?}"
                );
                assert!(
                    steps
                        .iter()
                        .any(|x| x.tool == tool && x.expect == Expect::Deny),
                    "{host:?} {tool:?}"
                );
            }
            assert!(steps.iter().any(|x| x.judge == Judge::Evidence), "{host:?}");
        }
        for cli in ["claude", "codex", "gemini", "pi", "opencode"] {
            assert!(s.interactive_prompt.contains_key(cli), "{cli}");
        }
    }

    #[test]
    fn errors_name_the_line_and_field() {
        let text = "version = 1\n[interactive_prompt]\n[[step]]\nname = \"a\"\ntool = \"shell\"\ncommand = \"cat {nope}\"\njudge = \"seen\"\ntarget = \"/x\"\nexpect = \"allow\"\nwhy = \"w\"\n";
        let e = load(text, "p0.toml").unwrap_err().to_string();
        assert!(e.contains("p0.toml:6"), "{e}");
        assert!(e.contains("step[0].command"), "{e}");
        assert!(e.contains("{nope}"), "{e}");
        let no_command = text.replace("command = \"cat {nope}\"\n", "");
        let e = load(&no_command, "p0.toml").unwrap_err().to_string();
        assert!(e.contains("step[0].command"), "{e}");
    }
}
