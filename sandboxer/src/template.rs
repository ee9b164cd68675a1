//! The one template syntax of the project's data files: CLI adapters (`profiles/clis/*.toml`),
//! query files (`queries/*.toml`), the ways-out lists (`profiles/*/ways-out.toml`) and the
//! own-sandbox statements (`queries/own-sandbox.toml`). (The Seatbelt profile is a Tera
//! template: another language, for another job.)
//!
//! A template is literal text and `{name}` variables, a name being `a-z`, `0-9` and `_`;
//! `{{` and `}}` are literal braces, and any other brace is an error. A template is parsed
//! once, when its file is loaded, and checked there against the caller's vocabulary
//! ([`Template::known_by`]), so that an unknown variable is reported at its file, line,
//! column and field; expanding asks the caller for each variable's value
//! ([`Template::expand_with`]).

use std::collections::BTreeMap;

use serde::Serialize;

/// A template that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("{text:?}: '{{' at byte {at} without a matching '}}' (write '{{{{' for a brace)")]
    Unclosed { text: String, at: usize },
    #[error("{text:?}: '}}' at byte {at} without a matching '{{' (write '}}}}' for a brace)")]
    Unopened { text: String, at: usize },
    #[error("{{{name}}} is not a variable name (a-z, 0-9, _; write '{{{{' for a brace)")]
    BadName { name: String },
    /// A variable outside the caller's vocabulary; callers may say it in their own words.
    #[error("unknown template variable {{{name}}}")]
    Unknown { name: String },
}

/// A piece of a template.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Lit(String),
    Var(String),
}

/// A parsed template: literal text and `{variable}`s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    text: String,
    pieces: Vec<Piece>,
}

impl Template {
    /// Parses `text`, whatever its variables.
    pub fn parse(text: &str) -> Result<Template, TemplateError> {
        let mut pieces = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        while let Some(i) = rest.find(['{', '}']) {
            let at = text.len() - rest.len() + i;
            lit.push_str(&rest[..i]);
            let brace = &rest[i..];
            if let Some(after) = brace.strip_prefix("{{") {
                lit.push('{');
                rest = after;
            } else if let Some(after) = brace.strip_prefix("}}") {
                lit.push('}');
                rest = after;
            } else if brace.starts_with('}') {
                return Err(TemplateError::Unopened {
                    text: text.into(),
                    at,
                });
            } else {
                let after = &brace[1..];
                let end = after.find('}').ok_or_else(|| TemplateError::Unclosed {
                    text: text.into(),
                    at,
                })?;
                let name = &after[..end];
                if name.is_empty()
                    || !name
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                {
                    return Err(TemplateError::BadName { name: name.into() });
                }
                if !lit.is_empty() {
                    pieces.push(Piece::Lit(std::mem::take(&mut lit)));
                }
                pieces.push(Piece::Var(name.into()));
                rest = &after[end + 1..];
            }
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            pieces.push(Piece::Lit(lit));
        }
        Ok(Template {
            text: text.to_string(),
            pieces,
        })
    }

    /// The template, if every variable it uses is `known`.
    pub fn known_by(self, known: impl Fn(&str) -> bool) -> Result<Template, TemplateError> {
        let unknown = self.variables().find(|v| !known(v)).map(str::to_string);
        match unknown {
            Some(name) => Err(TemplateError::Unknown { name }),
            None => Ok(self),
        }
    }

    /// The text as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The variables used, in order.
    pub fn variables(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Var(v) => Some(v.as_str()),
            Piece::Lit(_) => None,
        })
    }

    /// Whether the template starts with a literal `/` or a variable (an absolute path, once
    /// the variables are absolute).
    pub fn starts_absolute(&self) -> bool {
        match self.pieces.first() {
            Some(Piece::Lit(l)) => l.starts_with('/'),
            Some(Piece::Var(_)) => true,
            None => false,
        }
    }

    /// Expands the template, asking `value` for each variable; its first error stops.
    pub fn expand_with<E>(
        &self,
        mut value: impl FnMut(&str) -> Result<String, E>,
    ) -> Result<String, E> {
        let mut out = String::new();
        for p in &self.pieces {
            match p {
                Piece::Lit(l) => out.push_str(l),
                Piece::Var(v) => out.push_str(&value(v)?),
            }
        }
        Ok(out)
    }

    /// Expands the template with `vars`. A variable without a value is an error, never the
    /// empty string.
    pub fn expand(&self, vars: &BTreeMap<String, String>) -> Result<String, String> {
        self.expand_with(|v| {
            vars.get(v)
                .cloned()
                .ok_or_else(|| format!("{{{v}}} has no value here"))
        })
    }
}

impl Serialize for Template {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_parse_braces_and_refuse_garbage() {
        let t = Template::parse("/a/{{b}}/{home}").unwrap();
        assert_eq!(t.variables().collect::<Vec<_>>(), ["home"]);
        let vars = BTreeMap::from([("home".to_string(), "/h".to_string())]);
        assert_eq!(t.expand(&vars).unwrap(), "/a/{b}//h");
        assert_eq!(
            Template::parse("{{}}x{a}{b}").unwrap().pieces,
            [
                Piece::Lit("{}x".into()),
                Piece::Var("a".into()),
                Piece::Var("b".into())
            ]
        );
        let err = |t: &str| Template::parse(t).unwrap_err().to_string();
        assert!(err("/x/{home").contains("'{' at byte 3 without a matching '}'"));
        assert!(err("home}").contains("'}' at byte 4 without a matching '{'"));
        assert!(err("{Home}").contains("{Home} is not a variable name"));
        assert!(err("{}").contains("{} is not a variable name"));
        assert!(err("{a{b}").contains("is not a variable name"));
        assert!(Template::parse("{runtime}").unwrap().expand(&vars).is_err());
        assert_eq!(Template::parse("").unwrap().expand(&vars).unwrap(), "");
    }

    #[test]
    fn unknown_variables_are_named_and_lookups_can_fail() {
        let known = |v: &str| v == "home";
        let e = Template::parse("{home}/{hom}")
            .unwrap()
            .known_by(known)
            .unwrap_err();
        assert_eq!(e, TemplateError::Unknown { name: "hom".into() });
        assert_eq!(e.to_string(), "unknown template variable {hom}");
        let t = Template::parse("{home}/x")
            .unwrap()
            .known_by(known)
            .unwrap();
        assert_eq!(t.expand_with(|_| Err::<String, _>("no")), Err("no"));
        assert!(t.starts_absolute());
        assert!(!Template::parse("x/{home}").unwrap().starts_absolute());
    }
}
