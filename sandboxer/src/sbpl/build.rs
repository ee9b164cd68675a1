//! From s-expressions to a [`Profile`] ([`parse`]).
//!
//! Syntax errors and missing parameters are [`ParseError`]s (libsandbox would refuse such a
//! profile too). Constructs that are well-formed but whose meaning the evaluator does not
//! model are kept, marked, and make the answers they could affect "unknown":
//! profile-wide ones (an `import`, Scheme code such as `define`/`if`, a missing
//! `(version 1)`, an operation name not in [`KNOWN_OPERATIONS`]) affect every answer;
//! a filter or modifier the evaluator does not model affects only the rules holding it.

use std::collections::BTreeMap;

use super::ops::{KNOWN_OPERATIONS, is_known};
use super::profile::{
    Action, Construct, EndpointSide, Filter, FilterKind, IpEndpoint, IpFilter, Modifier, Pattern,
    Profile, Rule, SocketFilter, TargetFilter, VnodeType,
};
use super::reader::{Datum, DatumKind, ParseError, read};

/// Reads `text` as an SBPL profile. `params` are the `-D KEY=VALUE` definitions that
/// `(param "KEY")` returns; their values are used as strings and never read as SBPL.
pub fn parse(text: &str, params: &BTreeMap<String, String>) -> Result<Profile, ParseError> {
    let data = read(text)?;
    let mut builder = Builder {
        text,
        params,
        profile: Profile::default(),
        has_version: false,
    };
    for datum in &data {
        builder.top_level(datum)?;
    }
    Ok(builder.finish())
}

struct Builder<'a> {
    text: &'a str,
    params: &'a BTreeMap<String, String>,
    profile: Profile,
    has_version: bool,
}

/// A string argument: its value, or why it cannot be computed here.
enum Arg {
    Value(String),
    Unevaluable(String),
}

impl Builder<'_> {
    fn source(&self, d: &Datum) -> String {
        self.text[d.span.clone()].to_string()
    }

    fn construct(&self, d: &Datum, why: String) -> Construct {
        Construct {
            line: d.pos.line,
            column: d.pos.column,
            text: self.source(d),
            why,
        }
    }

    fn top_level(&mut self, d: &Datum) -> Result<(), ParseError> {
        let (head, args) = match &d.kind {
            DatumKind::List(items) => match items.split_first() {
                Some((
                    Datum {
                        kind: DatumKind::Symbol(head),
                        ..
                    },
                    args,
                )) => (head.as_str(), args),
                _ => {
                    let c = self.construct(d, "a top-level form that is not a rule".into());
                    self.profile.profile_wide.push(c);
                    return Ok(());
                }
            },
            _ => {
                let c = self.construct(
                    d,
                    "a top-level atom: Scheme evaluates it, which may fail the profile".into(),
                );
                self.profile.profile_wide.push(c);
                return Ok(());
            }
        };
        match head {
            "version" => self.version(d, args),
            "allow" => self.rule(d, Action::Allow, args),
            "deny" => self.rule(d, Action::Deny, args),
            "debug" => {
                let c = self.construct(d, "logging only; no effect on decisions".into());
                self.profile.ignored.push(c);
                Ok(())
            }
            "import" => {
                let what = match args {
                    [
                        Datum {
                            kind: DatumKind::Str(name),
                            ..
                        },
                    ] => format!("{name:?}"),
                    _ => "a profile".into(),
                };
                let c = self.construct(
                    d,
                    format!(
                        "imports {what}, whose rules are not read here and could change any answer"
                    ),
                );
                self.profile.profile_wide.push(c);
                Ok(())
            }
            other => {
                let c = self.construct(
                    d,
                    format!(
                        "`({other} …)` is Scheme the evaluator does not run; it could add or \
                         change rules"
                    ),
                );
                self.profile.profile_wide.push(c);
                Ok(())
            }
        }
    }

    fn version(&mut self, d: &Datum, args: &[Datum]) -> Result<(), ParseError> {
        match args {
            [
                Datum {
                    kind: DatumKind::Symbol(v),
                    ..
                },
            ] if v == "1" => {
                self.has_version = true;
                Ok(())
            }
            _ => Err(d.pos.error("unsupported version: only (version 1) exists")),
        }
    }

    fn rule(&mut self, d: &Datum, action: Action, args: &[Datum]) -> Result<(), ParseError> {
        let mut rule = Rule {
            line: d.pos.line,
            column: d.pos.column,
            text: self.source(d),
            action,
            operations: Vec::new(),
            filters: Vec::new(),
            modifiers: Vec::new(),
        };
        for arg in args {
            match &arg.kind {
                DatumKind::Symbol(op) => rule.operations.push(op.clone()),
                DatumKind::List(items) if is_headed(items, "with") => {
                    rule.modifiers.push(self.modifier(arg, &items[1..])?);
                }
                DatumKind::List(_) => rule.filters.push(self.filter(arg)?),
                _ => {
                    return Err(arg.pos.error(format!(
                        "expected an operation name, a filter or `(with …)` in `({} …)`",
                        action.as_str()
                    )));
                }
            }
        }
        if rule.operations.is_empty() {
            return Err(d
                .pos
                .error(format!("`({} …)` names no operation", action.as_str())));
        }
        self.profile.rules.push(rule);
        Ok(())
    }

    fn modifier(&self, d: &Datum, args: &[Datum]) -> Result<Modifier, ParseError> {
        match args.first() {
            Some(Datum {
                kind: DatumKind::Symbol(name),
                ..
            }) => Ok(Modifier {
                line: d.pos.line,
                column: d.pos.column,
                text: self.source(d),
                name: name.clone(),
            }),
            _ => Err(d.pos.error("`(with …)` needs a modifier name")),
        }
    }

    fn filter(&self, d: &Datum) -> Result<Filter, ParseError> {
        let kind = match &d.kind {
            DatumKind::List(items) => match items.split_first() {
                Some((
                    Datum {
                        kind: DatumKind::Symbol(head),
                        ..
                    },
                    args,
                )) => self.filter_kind(head, args)?,
                _ => FilterKind::Opaque("a filter must start with its name".into()),
            },
            DatumKind::Symbol(name) => FilterKind::Opaque(format!(
                "`{name}` where a filter was expected: a Scheme variable the evaluator does not \
                 know"
            )),
            _ => return Err(d.pos.error("expected a filter")),
        };
        Ok(Filter {
            line: d.pos.line,
            column: d.pos.column,
            text: self.source(d),
            kind,
        })
    }

    fn filter_kind(&self, head: &str, args: &[Datum]) -> Result<FilterKind, ParseError> {
        Ok(match head {
            "literal" | "path" => self.one_string(head, args, FilterKind::Literal)?,
            "subpath" => self.one_string(head, args, FilterKind::Subpath)?,
            "prefix" => self.one_string(head, args, FilterKind::Prefix)?,
            "regex" => self.one_string(head, args, |s| FilterKind::Regex(Pattern::new(s)))?,
            "global-name" => self.one_string(head, args, FilterKind::GlobalName)?,
            "global-name-prefix" => self.one_string(head, args, FilterKind::GlobalNamePrefix)?,
            "sysctl-name" => self.one_string(head, args, FilterKind::SysctlName)?,
            "extension" => self.one_string(head, args, FilterKind::Extension)?,
            "sysctl-name-prefix" => self.one_string(head, args, FilterKind::SysctlNamePrefix)?,
            "global-name-regex" => {
                self.one_string(head, args, |s| FilterKind::GlobalNameRegex(Pattern::new(s)))?
            }
            "vnode-type" => match args {
                [
                    Datum {
                        kind: DatumKind::Symbol(t),
                        ..
                    },
                ] => match VnodeType::parse(t) {
                    Some(v) => FilterKind::VnodeType(v),
                    None => FilterKind::Opaque(format!("vnode type `{t}` is not modelled")),
                },
                _ => FilterKind::Opaque("`vnode-type` with other than one type name".into()),
            },
            "target" => match args {
                [
                    Datum {
                        kind: DatumKind::Symbol(t),
                        ..
                    },
                ] if t == "self" => FilterKind::Target(TargetFilter::Myself),
                [
                    Datum {
                        kind: DatumKind::Symbol(t),
                        ..
                    },
                ] if t == "same-sandbox" => FilterKind::Target(TargetFilter::SameSandbox),
                _ => FilterKind::Opaque("this `target` form is not modelled".into()),
            },
            "remote" | "local" if is_ip_endpoint(args) => self.ip(head, args)?,
            "remote" => self.unix_socket(EndpointSide::Remote, args)?,
            "local" => self.unix_socket(EndpointSide::Local, args)?,
            "require-all" => FilterKind::RequireAll(self.filters(args)?),
            "require-any" => FilterKind::RequireAny(self.filters(args)?),
            "require-not" => match args {
                [one] => FilterKind::RequireNot(Box::new(self.filter(one)?)),
                _ => FilterKind::Opaque("`require-not` with other than one filter".into()),
            },
            other => FilterKind::Opaque(format!("filter `{other}` is not modelled")),
        })
    }

    fn filters(&self, args: &[Datum]) -> Result<Vec<Filter>, ParseError> {
        args.iter().map(|a| self.filter(a)).collect()
    }

    /// `(SIDE ip "HOST:PORT")` (and `tcp`, `udp`): the endpoint as modelled, or why not.
    fn ip(&self, head: &str, args: &[Datum]) -> Result<FilterKind, ParseError> {
        let side = match head {
            "remote" => EndpointSide::Remote,
            _ => EndpointSide::Local,
        };
        let protocol = match args.first() {
            Some(Datum {
                kind: DatumKind::Symbol(p),
                ..
            }) => p.clone(),
            _ => unreachable!("is_ip_endpoint checked the protocol"),
        };
        let endpoint = match &args[1..] {
            [arg] => match self.string_arg(arg)? {
                Arg::Value(s) => IpEndpoint::parse(&s),
                Arg::Unevaluable(why) => Err(why),
            },
            _ => Err(format!(
                "`({head} {protocol} …)` without one \"HOST:PORT\" argument is not modelled"
            )),
        };
        Ok(FilterKind::IpEndpoint(IpFilter {
            side,
            protocol,
            endpoint,
        }))
    }

    /// `(SIDE unix-socket (path-literal P))`, `(… (subpath P))`, `(… (path-regex R))`.
    fn unix_socket(&self, side: EndpointSide, args: &[Datum]) -> Result<FilterKind, ParseError> {
        let word = side.word();
        let [
            Datum {
                kind: DatumKind::Symbol(family),
                ..
            },
            sub,
        ] = args
        else {
            return Ok(FilterKind::Opaque(format!(
                "this `{word}` form is not modelled"
            )));
        };
        if family != "unix-socket" {
            return Ok(FilterKind::Opaque(format!(
                "`({word} {family} …)` is not modelled"
            )));
        }
        let unmodelled = || {
            Ok(FilterKind::Opaque(format!(
                "this `{word} unix-socket` form is not modelled"
            )))
        };
        let DatumKind::List(items) = &sub.kind else {
            return unmodelled();
        };
        let Some((
            Datum {
                kind: DatumKind::Symbol(head),
                ..
            },
            sub_args,
        )) = items.split_first()
        else {
            return unmodelled();
        };
        let wrap = move |f: SocketFilter| match side {
            EndpointSide::Remote => FilterKind::RemoteUnixSocket(f),
            EndpointSide::Local => FilterKind::LocalUnixSocket(f),
        };
        match head.as_str() {
            "path-literal" => {
                self.one_string(head, sub_args, |s| wrap(SocketFilter::PathLiteral(s)))
            }
            "subpath" => self.one_string(head, sub_args, |s| wrap(SocketFilter::Subpath(s))),
            "path-regex" => self.one_string(head, sub_args, |s| {
                wrap(SocketFilter::PathRegex(Pattern::new(s)))
            }),
            other => Ok(FilterKind::Opaque(format!(
                "`({word} unix-socket ({other} …))` is not modelled"
            ))),
        }
    }

    /// A filter taking one string argument.
    fn one_string(
        &self,
        head: &str,
        args: &[Datum],
        make: impl FnOnce(String) -> FilterKind,
    ) -> Result<FilterKind, ParseError> {
        let [arg] = args else {
            return Ok(FilterKind::Opaque(format!(
                "`{head}` with other than one argument is not modelled"
            )));
        };
        Ok(match self.string_arg(arg)? {
            Arg::Value(s) => make(s),
            Arg::Unevaluable(why) => FilterKind::Opaque(why),
        })
    }

    /// `"…"`, `#"…"`, `(param "K")`, `(string-append …)` of those.
    fn string_arg(&self, d: &Datum) -> Result<Arg, ParseError> {
        match &d.kind {
            DatumKind::Str(s) | DatumKind::RegexStr(s) => Ok(Arg::Value(s.clone())),
            DatumKind::List(items) if is_headed(items, "param") => match &items[1..] {
                [
                    Datum {
                        kind: DatumKind::Str(key),
                        ..
                    },
                ] => match self.params.get(key) {
                    Some(v) => Ok(Arg::Value(v.clone())),
                    None => Err(d.pos.error(format!(
                        "parameter {key:?} is not defined (pass -D {key}=VALUE)"
                    ))),
                },
                _ => Ok(Arg::Unevaluable("`(param …)` without a string key".into())),
            },
            DatumKind::List(items) if is_headed(items, "string-append") => {
                let mut out = String::new();
                for part in &items[1..] {
                    match self.string_arg(part)? {
                        Arg::Value(s) => out.push_str(&s),
                        unevaluable @ Arg::Unevaluable(_) => return Ok(unevaluable),
                    }
                }
                Ok(Arg::Value(out))
            }
            _ => Ok(Arg::Unevaluable(format!(
                "`{}` is not an expression the evaluator computes (strings, param and \
                 string-append only)",
                self.source(d)
            ))),
        }
    }

    fn finish(mut self) -> Profile {
        if !self.has_version {
            self.profile.profile_wide.push(Construct {
                line: 1,
                column: 1,
                text: String::new(),
                why: "the profile has no (version 1): whether macOS accepts it is not known".into(),
            });
        }
        let mut unknown: Vec<Construct> = Vec::new();
        for rule in &self.profile.rules {
            for op in &rule.operations {
                if !is_known(op) && !unknown.iter().any(|c| c.text == *op) {
                    unknown.push(Construct {
                        line: rule.line,
                        column: rule.column,
                        text: op.clone(),
                        why: format!(
                            "operation `{op}` is not one seen in working profiles \
                             (KNOWN_OPERATIONS has {}); macOS refuses a whole profile over an \
                             unknown name",
                            KNOWN_OPERATIONS.len()
                        ),
                    });
                }
            }
        }
        self.profile.profile_wide.extend(unknown);
        self.profile
    }
}

/// `(remote ip …)`, `(local tcp …)`, … : an IP endpoint, whatever the address and port.
fn is_ip_endpoint(args: &[Datum]) -> bool {
    matches!(args.first(), Some(Datum { kind: DatumKind::Symbol(f), .. }) if matches!(f.as_str(), "ip" | "tcp" | "udp"))
}

fn is_headed(items: &[Datum], name: &str) -> bool {
    matches!(items.first(), Some(Datum { kind: DatumKind::Symbol(h), .. }) if h == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sbpl::profile::is_normal_absolute;
    use std::collections::BTreeSet;

    fn p(text: &str) -> Profile {
        parse(text, &BTreeMap::new()).unwrap()
    }

    #[test]
    fn rules_operations_filters_modifiers() {
        let prof = p("(version 1)\n(deny default (with no-log))\n\
             (allow file-read* file-write-data\n  (subpath \"/a\") (literal \"/b\"))");
        assert_eq!(prof.rules().len(), 2);
        let r = &prof.rules()[1];
        assert_eq!((r.line, r.column, r.action), (3, 1, Action::Allow));
        assert_eq!(r.operations, ["file-read*", "file-write-data"]);
        assert_eq!(r.filters.len(), 2);
        assert!(matches!(&r.filters[0].kind, FilterKind::Subpath(s) if s == "/a"));
        assert_eq!(
            r.text,
            "(allow file-read* file-write-data\n  (subpath \"/a\") (literal \"/b\"))"
        );
        assert!(!prof.rules()[0].modifiers[0].changes_decision());
        assert!(
            prof.unknown_constructs().is_empty(),
            "{:?}",
            prof.unknown_constructs()
        );
    }

    #[test]
    fn params_and_string_append() {
        let params = BTreeMap::from([("HOME".to_string(), "/Users/a \"q\"".to_string())]);
        let prof = parse(
            "(version 1)(allow file-read* (subpath (string-append (param \"HOME\") \"/x\")))",
            &params,
        )
        .unwrap();
        assert!(
            matches!(&prof.rules()[0].filters[0].kind, FilterKind::Subpath(s) if s == "/Users/a \"q\"/x")
        );
        let e = parse(
            "(version 1)\n(allow file-read* (subpath (param \"NOPE\")))",
            &BTreeMap::new(),
        )
        .unwrap_err();
        assert_eq!((e.line, e.column), (2, 28));
        assert!(e.message.contains("NOPE"), "{e}");
    }

    #[test]
    fn profile_wide_unknowns() {
        let prof = p("(version 1)(import \"system.sb\")(define x 1)(allow frobnicate)");
        let whys: Vec<_> = prof
            .unknown_constructs()
            .into_iter()
            .map(|c| c.why)
            .collect();
        assert_eq!(whys.len(), 3, "{whys:?}");
        assert!(whys[0].contains("system.sb"));
        assert!(whys[1].contains("define"));
        assert!(whys[2].contains("frobnicate"));
        assert_eq!(prof.unknown_operations(), BTreeSet::from(["frobnicate"]));
        assert!(
            p("(allow default)").unknown_constructs()[0]
                .why
                .contains("version")
        );
    }

    #[test]
    fn per_rule_unknowns() {
        let prof = p(
            "(version 1)\n(allow file-read* (xattr \"x\") (regex #\"\\d\") \
             (subpath \"/a/\") (require-not (vnode-type TTY)))\n\
             (allow process-exec (with no-sandbox))",
        );
        let unknown = prof.unknown_constructs();
        assert_eq!(unknown.len(), 5, "{unknown:?}");
        assert!(unknown[0].why.contains("xattr"));
        assert!(unknown[1].why.contains("regex"));
        assert!(unknown[2].why.contains("normalized"));
        assert!(unknown[3].why.contains("TTY"));
        assert!(unknown[4].why.contains("no-sandbox"));
    }

    #[test]
    fn malformed_rules_are_errors() {
        assert!(parse("(version 2)", &BTreeMap::new()).is_err());
        assert!(parse("(version 1)(allow (literal \"/a\"))", &BTreeMap::new()).is_err());
        assert!(parse("(version 1)(allow file-read* \"/a\")", &BTreeMap::new()).is_err());
        assert!(parse("(version 1)(allow file-read* (with))", &BTreeMap::new()).is_err());
    }

    #[test]
    fn normal_absolute() {
        for ok in ["/", "/a", "/a/b c", "/a/.b"] {
            assert!(is_normal_absolute(ok.as_bytes()), "{ok}");
        }
        for bad in ["", "a", "/a/", "//a", "/a/./b", "/a/..", "/a\0"] {
            assert!(!is_normal_absolute(bad.as_bytes()), "{bad:?}");
        }
    }
}
