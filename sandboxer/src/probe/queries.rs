//! Query files: probes as data (`queries/*.toml`), loaded with every error naming the file,
//! line, column and field.
//!
//! ```toml
//! version = 1
//!
//! [[probe]]
//! name = "other-runtime-read"            # unique across the files loaded together
//! op = "read"                            # the vocabulary: ops.rs
//! target = "{other_runtime}/secret.txt"  # a template; {{ and }} are literal braces
//! # arg = "..."                          # the second operand, for the operations that take one
//! linux = { expect = "deny", why = "another chat's runtime is inside the protected state root" }
//! macos = { expect = "deny", why = "..." }   # either platform may be left out
//! ```
//!
//! Which template variables exist is the caller's business (the contract runner has a fixed
//! vocabulary; the harness takes whatever its vars file defines): [`load`] is given the set.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::ops::{Operand, ProbeOp};
use crate::Verdict;
use crate::located::LineIndex;
use crate::target::Target;
use crate::template::Template;

/// A query file that cannot be used, with where and why.
pub type QueryError = crate::located::DataFileError;

/// What a probe expects on one platform, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Expectation {
    pub expect: Verdict,
    pub why: String,
}

/// One probe, as loaded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Probe {
    pub name: String,
    pub op: ProbeOp,
    pub target: Template,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arg: Option<Template>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub linux: Option<Expectation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub macos: Option<Expectation>,
    /// `file:line` of the probe's name, for messages.
    pub origin: String,
}

impl Probe {
    pub fn expectation(&self, target: Target) -> Option<&Expectation> {
        match target {
            Target::Linux => self.linux.as_ref(),
            Target::Macos => self.macos.as_ref(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    version: Spanned<i64>,
    #[serde(default)]
    probe: Vec<RawProbe>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProbe {
    name: Spanned<String>,
    op: Spanned<String>,
    target: Spanned<String>,
    arg: Option<Spanned<String>>,
    linux: Option<Spanned<RawExpect>>,
    macos: Option<Spanned<RawExpect>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpect {
    expect: Spanned<String>,
    why: Spanned<String>,
}

struct Cx<'a> {
    lines: LineIndex,
    file: &'a str,
}

impl Cx<'_> {
    fn error(&self, span: Range<usize>, field: &str, message: impl Into<String>) -> QueryError {
        let (line, column) = self.lines.line_col(span.start);
        QueryError {
            file: self.file.into(),
            line,
            column,
            field: field.into(),
            message: message.into(),
        }
    }

    fn toml_error(&self, e: &toml::de::Error) -> QueryError {
        let (field, message) = crate::located::toml_field_and_message(e);
        match e.span() {
            Some(span) => self.error(span, &field, message),
            None => QueryError {
                file: self.file.into(),
                line: 0,
                column: 0,
                field,
                message,
            },
        }
    }
}

/// Loads one query file. `known` says which template variables exist; any other is an
/// error. Names must be unique within the file (see [`load_all`] for several files).
pub fn load(
    text: &str,
    file: &str,
    known: &dyn Fn(&str) -> bool,
) -> Result<Vec<Probe>, QueryError> {
    let cx = Cx {
        lines: LineIndex::new(text),
        file,
    };
    let raw: RawFile = toml::from_str(text).map_err(|e| cx.toml_error(&e))?;
    if *raw.version.get_ref() != 1 {
        return Err(cx.error(
            raw.version.span(),
            "version",
            format!(
                "unsupported query file version {}; this sandboxer reads version 1",
                raw.version.get_ref()
            ),
        ));
    }
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for (i, p) in raw.probe.into_iter().enumerate() {
        let field = |f: &str| format!("probe[{i}].{f}");
        let name = p.name.get_ref().clone();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            || name.starts_with('-')
        {
            return Err(cx.error(
                p.name.span(),
                &field("name"),
                format!("{name:?}: a probe name is lower-case letters, digits and '-'"),
            ));
        }
        let line = cx.lines.line(p.name.span().start);
        if let Some(prev) = seen.insert(name.clone(), line) {
            return Err(cx.error(
                p.name.span(),
                &field("name"),
                format!("probe {name:?} is defined twice (first at line {prev})"),
            ));
        }
        let op = ProbeOp::parse(p.op.get_ref()).ok_or_else(|| {
            cx.error(
                p.op.span(),
                &field("op"),
                format!(
                    "unknown operation {:?}; known: {}",
                    p.op.get_ref(),
                    ProbeOp::ALL
                        .iter()
                        .map(|o| o.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })?;
        let template =
            |s: &Spanned<String>, f: &str, kind: Operand| -> Result<Template, QueryError> {
                let t = Template::parse(s.get_ref())
                    .and_then(|t| t.known_by(known))
                    .map_err(|e| cx.error(s.span(), &field(f), e.to_string()))?;
                if kind == Operand::Path && !t.starts_absolute() {
                    return Err(cx.error(
                        s.span(),
                        &field(f),
                        format!(
                            "{:?}: {op} needs an absolute path (start with / or a folder variable)",
                            s.get_ref()
                        ),
                    ));
                }
                if s.get_ref().is_empty() {
                    return Err(cx.error(s.span(), &field(f), "empty"));
                }
                Ok(t)
            };
        let target = template(&p.target, "target", op.target())?;
        let arg = match (op.arg(), &p.arg) {
            (Some((kind, _)), Some(a)) => Some(template(a, "arg", kind)?),
            (Some((_, what)), None) => {
                return Err(cx.error(
                    p.name.span(),
                    &field("arg"),
                    format!("{op} needs an arg: {what}"),
                ));
            }
            (None, Some(a)) => {
                return Err(cx.error(a.span(), &field("arg"), format!("{op} takes no arg")));
            }
            (None, None) => None,
        };
        let expectation = |e: &Option<Spanned<RawExpect>>, platform: &str| {
            let Some(e) = e else { return Ok(None) };
            let inner = e.get_ref();
            let expect = match inner.expect.get_ref().as_str() {
                "allow" => Verdict::Allow,
                "deny" => Verdict::Deny,
                other => {
                    return Err(cx.error(
                        inner.expect.span(),
                        &field(&format!("{platform}.expect")),
                        format!("{other:?}: expected \"allow\" or \"deny\""),
                    ));
                }
            };
            if inner.why.get_ref().trim().is_empty() {
                return Err(cx.error(
                    inner.why.span(),
                    &field(&format!("{platform}.why")),
                    "say why the verdict is expected",
                ));
            }
            Ok(Some(Expectation {
                expect,
                why: inner.why.get_ref().trim().to_string(),
            }))
        };
        let linux = expectation(&p.linux, "linux")?;
        let macos = expectation(&p.macos, "macos")?;
        if linux.is_none() && macos.is_none() {
            return Err(cx.error(
                p.name.span(),
                &field("linux"),
                "a probe needs an expectation for linux, macos or both",
            ));
        }
        if let (Some(_), false) = (&p.linux, op.live_on_linux())
            && let Some(l) = &p.linux
        {
            return Err(cx.error(
                l.span(),
                &field("linux"),
                format!("{op} is a macOS mechanism: give it only a macos expectation"),
            ));
        }
        if let Some(m) = &p.macos
            && op.seatbelt_checks("/", Some("/")).is_none()
        {
            return Err(cx.error(
                m.span(),
                &field("macos"),
                format!("{op} is a Linux mechanism with no Seatbelt meaning: give it only a linux expectation"),
            ));
        }
        out.push(Probe {
            name,
            op,
            target,
            arg,
            linux,
            macos,
            origin: format!("{file}:{line}"),
        });
    }
    Ok(out)
}

/// Loads several files as one set: probe names must be unique across them.
pub fn load_all(
    files: &[(String, String)],
    known: &dyn Fn(&str) -> bool,
) -> Result<Vec<Probe>, QueryError> {
    let mut all: Vec<Probe> = Vec::new();
    let mut names = BTreeSet::new();
    for (file, text) in files {
        for p in load(text, file, known)? {
            if !names.insert(p.name.clone()) {
                let first = all
                    .iter()
                    .find(|q| q.name == p.name)
                    .map(|q| q.origin.clone());
                let line = p
                    .origin
                    .rsplit(':')
                    .next()
                    .and_then(|l| l.parse().ok())
                    .unwrap_or(0);
                return Err(QueryError {
                    file: file.clone(),
                    line,
                    column: 1,
                    field: "name".into(),
                    message: format!(
                        "probe {:?} is also defined at {}",
                        p.name,
                        first.unwrap_or_default()
                    ),
                });
            }
            all.push(p);
        }
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(v: &str) -> bool {
        matches!(v, "home" | "runtime" | "other_runtime" | "outside_pid")
    }

    fn one(body: &str) -> Result<Vec<Probe>, QueryError> {
        load(
            &format!("version = 1\n\n[[probe]]\n{body}"),
            "q.toml",
            &known,
        )
    }

    #[test]
    fn a_probe_loads() {
        let p = one(
            "name = \"a\"\nop = \"read\"\ntarget = \"{home}/x\"\nlinux = { expect = \"allow\", why = \"open\" }\n",
        )
        .unwrap();
        assert_eq!(p[0].op, ProbeOp::Read);
        assert_eq!(p[0].origin, "q.toml:4");
        let mut vars = BTreeMap::new();
        vars.insert("home".to_string(), "/h".to_string());
        assert_eq!(p[0].target.expand(&vars).unwrap(), "/h/x");
        assert!(p[0].macos.is_none());
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let e = one("name = \"a\"\nop = \"unlink\"\ntarget = \"{home}/x\"\nlinux = { expect = \"deny\", why = \"w\" }\n")
            .unwrap_err();
        assert_eq!(
            (e.file.as_str(), e.line, e.field.as_str()),
            ("q.toml", 5, "probe[0].op"),
            "{e}"
        );
        assert!(e.message.contains("unknown operation \"unlink\""), "{e}");

        let e = one("name = \"a\"\nop = \"read\"\ntarget = \"{hom}/x\"\nlinux = { expect = \"deny\", why = \"w\" }\n")
            .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (6, "probe[0].target"), "{e}");
        assert!(e.message.contains("unknown template variable {hom}"), "{e}");

        let e = one("name = \"a\"\nop = \"rename\"\ntarget = \"{home}/x\"\nlinux = { expect = \"deny\", why = \"w\" }\n")
            .unwrap_err();
        assert_eq!(e.field, "probe[0].arg", "{e}");

        let e = one("name = \"a\"\nop = \"read\"\ntarget = \"{home}/x\"\nlinux = { expect = \"maybe\", why = \"w\" }\n")
            .unwrap_err();
        assert_eq!(
            (e.line, e.field.as_str()),
            (7, "probe[0].linux.expect"),
            "{e}"
        );

        let e = one("name = \"a\"\nop = \"read\"\ntarget = \"{home}/x\"\ncolour = 1\nlinux = { expect = \"deny\", why = \"w\" }\n")
            .unwrap_err();
        assert!(e.message.contains("colour"), "{e}");

        let e = one("name = \"a\"\nop = \"read\"\ntarget = \"x\"\nlinux = { expect = \"deny\", why = \"w\" }\n")
            .unwrap_err();
        assert_eq!(e.field, "probe[0].target", "{e}");

        let e = one("name = \"a\"\nop = \"ptrace\"\ntarget = \"{outside_pid}\"\nmacos = { expect = \"deny\", why = \"w\" }\n")
            .unwrap_err();
        assert_eq!(e.field, "probe[0].macos", "{e}");

        let e = one("name = \"a\"\nop = \"mach-lookup\"\ntarget = \"com.apple.x\"\nlinux = { expect = \"deny\", why = \"w\" }\n")
            .unwrap_err();
        assert_eq!(e.field, "probe[0].linux", "{e}");

        let e = one("name = \"a\"\nop = \"read\"\ntarget = \"{home}/x\"\n").unwrap_err();
        assert!(e.message.contains("expectation"), "{e}");

        let e = one("name = \"a\"\nop = \"read\"\ntarget = \"{home}/x\"\nlinux = { expect = \"deny\", why = \" \" }\n")
            .unwrap_err();
        assert_eq!(e.field, "probe[0].linux.why", "{e}");
    }

    #[test]
    fn names_are_unique_across_files() {
        let body = "version = 1\n[[probe]]\nname = \"a\"\nop = \"read\"\ntarget = \"{home}/x\"\nlinux = { expect = \"allow\", why = \"w\" }\n";
        let e = load_all(
            &[
                ("a.toml".into(), body.into()),
                ("b.toml".into(), body.into()),
            ],
            &known,
        )
        .unwrap_err();
        assert_eq!((e.file.as_str(), e.line), ("b.toml", 3), "{e}");
        assert!(e.message.contains("a.toml:3"), "{e}");
        let twice = format!(
            "{body}[[probe]]\nname = \"a\"\nop = \"list\"\ntarget = \"{{home}}\"\nlinux = {{ expect = \"allow\", why = \"w\" }}\n"
        );
        let e = load(&twice, "c.toml", &known).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (8, "probe[1].name"), "{e}");
    }
}
