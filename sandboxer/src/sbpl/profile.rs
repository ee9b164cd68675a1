//! From s-expressions to a [`Profile`]: rules with their operations, filters and modifiers.
//!
//! Syntax errors and missing parameters are [`ParseError`]s (libsandbox would refuse such a
//! profile too). Constructs that are well-formed but whose meaning the evaluator does not
//! model are kept, marked, and make the answers they could affect "unknown":
//! profile-wide ones (an `import`, Scheme code such as `define`/`if`, a missing
//! `(version 1)`, an operation name not in [`KNOWN_OPERATIONS`]) affect every answer;
//! a filter or modifier the evaluator does not model affects only the rules holding it.

use std::collections::{BTreeMap, BTreeSet};

use super::ere::Ere;
use super::ops::{KNOWN_OPERATIONS, is_known};
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

/// A profile as read: its rules in file order, and what the evaluator cannot model.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    pub(crate) rules: Vec<Rule>,
    /// Constructs that could change any answer.
    pub(crate) profile_wide: Vec<Construct>,
    /// Constructs read and deliberately ignored (logging only), for `explain` to mention.
    pub(crate) ignored: Vec<Construct>,
}

/// A place in the profile and what is there.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Construct {
    pub line: usize,
    pub column: usize,
    /// The construct's text exactly as in the profile.
    pub text: String,
    pub why: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Allow,
    Deny,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Deny => "deny",
        }
    }
}

/// One `(allow …)` / `(deny …)`.
#[derive(Clone, Debug)]
pub struct Rule {
    pub line: usize,
    pub column: usize,
    /// The rule exactly as written.
    pub text: String,
    pub action: Action,
    /// Operation names in the order written (`default` included).
    pub operations: Vec<String>,
    /// Alternatives: the rule applies when any matches. Empty: an unfiltered rule.
    pub filters: Vec<Filter>,
    pub modifiers: Vec<Modifier>,
}

/// `(with NAME …)`.
#[derive(Clone, Debug)]
pub struct Modifier {
    pub line: usize,
    pub column: usize,
    pub text: String,
    pub name: String,
}

/// Modifiers that only log, report or signal; the decision stays the rule's action.
/// Others (`no-sandbox`, …) change what the decision means, so rules with them are unknown.
const LOGGING_MODIFIERS: &[&str] = &["message", "report", "no-report", "no-log", "send-signal"];

impl Modifier {
    pub fn changes_decision(&self) -> bool {
        !LOGGING_MODIFIERS.contains(&self.name.as_str())
    }
}

#[derive(Clone, Debug)]
pub struct Filter {
    pub line: usize,
    pub column: usize,
    pub text: String,
    pub kind: FilterKind,
}

#[derive(Clone, Debug)]
pub enum FilterKind {
    /// `(literal P)` / `(path P)`: exactly P.
    Literal(String),
    /// `(subpath P)`: P and everything beneath it, component-wise.
    Subpath(String),
    /// `(prefix P)`: any path whose bytes start with P.
    Prefix(String),
    /// `(regex R)` over the path.
    Regex(Pattern),
    /// `(vnode-type T)`.
    VnodeType(VnodeType),
    /// `(global-name N)` for Mach services.
    GlobalName(String),
    GlobalNamePrefix(String),
    GlobalNameRegex(Pattern),
    /// `(remote unix-socket …)`.
    RemoteUnixSocket(SocketFilter),
    /// `(target self)` / `(target same-sandbox)`.
    Target(TargetFilter),
    /// `(remote ip …)`, `(local tcp …)`, `(remote udp)` …: an IP address and port. It never
    /// matches a Unix socket (see docs/sbpl-evaluator.md); IP connections are not modelled.
    IpEndpoint,
    RequireAll(Vec<Filter>),
    RequireAny(Vec<Filter>),
    RequireNot(Box<Filter>),
    /// Well-formed, but not modelled: evaluates to unknown, for the reason given.
    Opaque(String),
}

/// A regex as written and its translation (or why there is none).
#[derive(Clone, Debug)]
pub struct Pattern {
    pub source: String,
    pub(crate) translated: Result<Ere, String>,
}

impl Pattern {
    fn new(source: String) -> Pattern {
        let translated = Ere::translate(&source);
        Pattern { source, translated }
    }
}

#[derive(Clone, Debug)]
pub enum SocketFilter {
    /// `(path-literal P)`
    PathLiteral(String),
    /// `(subpath P)`
    Subpath(String),
    /// `(path-regex R)`
    PathRegex(Pattern),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetFilter {
    /// `(target self)`: the process itself.
    Myself,
    /// `(target same-sandbox)`: any process under this same sandbox, itself included.
    SameSandbox,
}

/// `vnode-type` values whose meaning is plain (the kind of file system object).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "SCREAMING-KEBAB-CASE")]
pub enum VnodeType {
    RegularFile,
    Directory,
    Symlink,
    Fifo,
    Socket,
    BlockDevice,
    CharacterDevice,
}

impl VnodeType {
    pub const ALL: [VnodeType; 7] = [
        VnodeType::RegularFile,
        VnodeType::Directory,
        VnodeType::Symlink,
        VnodeType::Fifo,
        VnodeType::Socket,
        VnodeType::BlockDevice,
        VnodeType::CharacterDevice,
    ];

    /// The SBPL name: `REGULAR-FILE`, `DIRECTORY`, …
    pub fn as_str(self) -> &'static str {
        match self {
            VnodeType::RegularFile => "REGULAR-FILE",
            VnodeType::Directory => "DIRECTORY",
            VnodeType::Symlink => "SYMLINK",
            VnodeType::Fifo => "FIFO",
            VnodeType::Socket => "SOCKET",
            VnodeType::BlockDevice => "BLOCK-DEVICE",
            VnodeType::CharacterDevice => "CHARACTER-DEVICE",
        }
    }

    /// From the SBPL name, exactly as SBPL spells it.
    pub fn parse(name: &str) -> Option<VnodeType> {
        VnodeType::ALL.into_iter().find(|v| v.as_str() == name)
    }
}

impl Profile {
    /// The rules in file order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Every operation name the rules use, `default` included.
    pub fn operations(&self) -> BTreeSet<&str> {
        self.rules
            .iter()
            .flat_map(|r| r.operations.iter().map(String::as_str))
            .collect()
    }

    /// Operation names not in [`KNOWN_OPERATIONS`]: macOS may refuse the whole profile.
    pub fn unknown_operations(&self) -> BTreeSet<&str> {
        self.operations()
            .into_iter()
            .filter(|op| !is_known(op))
            .collect()
    }

    /// Everything that keeps some answer from being decided: profile-wide constructs, then
    /// per rule the filters, regexes, paths and modifiers the evaluator does not model. For a
    /// profile where this is empty, every query of a modelled kind is decided (given the file
    /// type where a `vnode-type` filter asks for it, and paths the regexes can judge);
    /// operations with no modelled object are still decided by unfiltered rules only.
    pub fn unknown_constructs(&self) -> Vec<Construct> {
        let mut out = self.profile_wide.clone();
        for rule in &self.rules {
            for m in rule.modifiers.iter().filter(|m| m.changes_decision()) {
                out.push(Construct {
                    line: m.line,
                    column: m.column,
                    text: m.text.clone(),
                    why: modifier_why(&m.name),
                });
            }
            for f in &rule.filters {
                f.collect_unknowns(&mut out);
            }
        }
        out
    }

    /// Constructs read and ignored because they only affect logging (`(debug deny)`).
    pub fn ignored(&self) -> &[Construct] {
        &self.ignored
    }
}

pub(crate) fn modifier_why(name: &str) -> String {
    format!(
        "modifier `(with {name} …)` is not modelled: it may change what the rule's decision means"
    )
}

impl Filter {
    fn collect_unknowns(&self, out: &mut Vec<Construct>) {
        let why = match &self.kind {
            FilterKind::RequireAll(fs) | FilterKind::RequireAny(fs) => {
                fs.iter().for_each(|f| f.collect_unknowns(out));
                None
            }
            FilterKind::RequireNot(f) => {
                f.collect_unknowns(out);
                None
            }
            FilterKind::Opaque(why) => Some(why.clone()),
            FilterKind::Regex(p)
            | FilterKind::GlobalNameRegex(p)
            | FilterKind::RemoteUnixSocket(SocketFilter::PathRegex(p)) => {
                p.translated.as_ref().err().map(|e| regex_why(&p.source, e))
            }
            FilterKind::Literal(p)
            | FilterKind::Subpath(p)
            | FilterKind::RemoteUnixSocket(SocketFilter::PathLiteral(p))
            | FilterKind::RemoteUnixSocket(SocketFilter::Subpath(p)) => {
                (!is_normal_absolute(p.as_bytes())).then(|| not_normal_why(p))
            }
            FilterKind::Prefix(_)
            | FilterKind::VnodeType(_)
            | FilterKind::GlobalName(_)
            | FilterKind::GlobalNamePrefix(_)
            | FilterKind::Target(_)
            | FilterKind::IpEndpoint => None,
        };
        if let Some(why) = why {
            out.push(Construct {
                line: self.line,
                column: self.column,
                text: self.text.clone(),
                why,
            });
        }
    }
}

pub(crate) fn regex_why(source: &str, error: &str) -> String {
    format!("regex {source:?} has no certain translation: {error}")
}

pub(crate) fn not_normal_why(path: &str) -> String {
    format!(
        "{path:?} is not a normalized absolute path; how Seatbelt treats such an argument is \
         not documented"
    )
}

/// Absolute, no empty, `.` or `..` component, no trailing `/` (except `/` itself), no NUL:
/// the form the kernel hands to Seatbelt after resolving a path.
pub(crate) fn is_normal_absolute(path: &[u8]) -> bool {
    if path == b"/" {
        return true;
    }
    let Some(rest) = path.strip_prefix(b"/") else {
        return false;
    };
    !path.contains(&0)
        && rest
            .split(|b| *b == b'/')
            .all(|c| !c.is_empty() && c != b"." && c != b"..")
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
            "remote" | "local" if is_ip_endpoint(args) => FilterKind::IpEndpoint,
            "remote" => self.remote(args)?,
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

    /// `(remote unix-socket (path-literal P))`, `(… (subpath P))`, `(… (path-regex R))`.
    fn remote(&self, args: &[Datum]) -> Result<FilterKind, ParseError> {
        let [
            Datum {
                kind: DatumKind::Symbol(family),
                ..
            },
            sub,
        ] = args
        else {
            return Ok(FilterKind::Opaque(
                "this `remote` form is not modelled".into(),
            ));
        };
        if family != "unix-socket" {
            return Ok(FilterKind::Opaque(format!(
                "`(remote {family} …)` is not modelled"
            )));
        }
        let DatumKind::List(items) = &sub.kind else {
            return Ok(FilterKind::Opaque(
                "this `remote unix-socket` form is not modelled".into(),
            ));
        };
        let Some((
            Datum {
                kind: DatumKind::Symbol(head),
                ..
            },
            sub_args,
        )) = items.split_first()
        else {
            return Ok(FilterKind::Opaque(
                "this `remote unix-socket` form is not modelled".into(),
            ));
        };
        let wrap =
            |f: fn(String) -> SocketFilter| move |s: String| FilterKind::RemoteUnixSocket(f(s));
        match head.as_str() {
            "path-literal" => self.one_string(head, sub_args, wrap(SocketFilter::PathLiteral)),
            "subpath" => self.one_string(head, sub_args, wrap(SocketFilter::Subpath)),
            "path-regex" => self.one_string(head, sub_args, |s| {
                FilterKind::RemoteUnixSocket(SocketFilter::PathRegex(Pattern::new(s)))
            }),
            other => Ok(FilterKind::Opaque(format!(
                "`(remote unix-socket ({other} …))` is not modelled"
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
            "(version 1)\n(allow file-read* (extension \"x\") (regex #\"\\d\") \
             (subpath \"/a/\") (require-not (vnode-type TTY)))\n\
             (allow process-exec (with no-sandbox))",
        );
        let unknown = prof.unknown_constructs();
        assert_eq!(unknown.len(), 5, "{unknown:?}");
        assert!(unknown[0].why.contains("extension"));
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
