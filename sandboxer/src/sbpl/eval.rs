//! The evaluator: does a profile allow one operation on one object, and which rule says so?
//!
//! Filters evaluate in three-valued (Kleene) logic: yes, no, or unknown with a reason. Rule
//! precedence is read two ways, and an answer is given only where both agree (see
//! `docs/sbpl-evaluator.md`):
//!
//! - **last match** (reference.md): among the rules naming the operation (directly or by a
//!   family such as `file-read*`), the last matching filtered rule wins; unfiltered rules are
//!   the operation's default and decide only when no filtered rule matched (the last one);
//!   then the `default` rules; with none, deny.
//! - **most specific first**: the same, one level at a time — rules naming the operation
//!   itself, then its nearest family (`file-read*`), then the wider one (`file*`), then
//!   `default` — as public profile generators report Seatbelt to behave.
//!
//! For a deny-default profile made of allow rules (ours) both readings give the same answer:
//! allowed exactly when some allow rule matches.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde::Serialize;

use super::ops::{self, Coverage, QueryKind};
use super::profile::{
    Action, Filter, FilterKind, Pattern, Profile, Rule, SocketFilter, TargetFilter, VnodeType,
    is_normal_absolute, modifier_why, not_normal_why, regex_why,
};

/// What is asked about. Paths are taken as the kernel hands them to Seatbelt: absolute,
/// resolved (`/tmp` → `/private/tmp`, no symlinks, no `.`/`..`), compared as bytes.
#[derive(Clone, Copy, Debug)]
pub enum Query<'a> {
    /// A file: `file-*` operations and `process-exec`. `vnode` is the file's type where known;
    /// a `vnode-type` filter needs it.
    Path {
        path: &'a Path,
        vnode: Option<VnodeType>,
    },
    /// A global Mach service name: `mach-lookup`, `mach-register`.
    MachName(&'a str),
    /// The Unix socket being connected to: `network-outbound`.
    UnixSocket(&'a Path),
    /// The process a signal or process-info request goes to.
    Process(ProcessTarget),
    /// An operation with no object the evaluator models (`process-fork`, `lsopen`, …).
    NoObject,
}

impl Query<'_> {
    pub fn kind(&self) -> QueryKind {
        match self {
            Query::Path { .. } => QueryKind::Path,
            Query::MachName(_) => QueryKind::MachName,
            Query::UnixSocket(_) => QueryKind::UnixSocket,
            Query::Process(_) => QueryKind::Process,
            Query::NoObject => QueryKind::NoObject,
        }
    }
}

/// Whom a signal or process-info request targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessTarget {
    /// The process itself.
    Myself,
    /// Another process under the same sandbox.
    SameSandbox,
    /// A process outside this sandbox.
    Outside,
}

impl ProcessTarget {
    /// `self`, `same-sandbox`, `outside`.
    pub fn parse(word: &str) -> Option<ProcessTarget> {
        match word {
            "self" => Some(ProcessTarget::Myself),
            "same-sandbox" => Some(ProcessTarget::SameSandbox),
            "outside" => Some(ProcessTarget::Outside),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Allow,
    Deny,
    /// The profile's meaning for this query depends on something the evaluator does not
    /// model; `why` says what. Never a guess either way.
    Unknown,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allow => "allow",
            Outcome::Deny => "deny",
            Outcome::Unknown => "unknown",
        }
    }
}

impl From<Action> for Outcome {
    fn from(a: Action) -> Outcome {
        match a {
            Action::Allow => Outcome::Allow,
            Action::Deny => Outcome::Deny,
        }
    }
}

/// The deciding rule: where it is and what it says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RuleRef {
    pub line: usize,
    pub text: String,
}

impl RuleRef {
    fn of(rule: &Rule) -> RuleRef {
        RuleRef {
            line: rule.line,
            text: rule.text.clone(),
        }
    }
}

/// An answer: the outcome, the deciding rule (none for an implicit deny or an unknown), and
/// why in words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Evaluation {
    pub outcome: Outcome,
    pub rule: Option<RuleRef>,
    pub why: String,
}

impl Evaluation {
    fn unknown(why: impl Into<String>) -> Evaluation {
        Evaluation {
            outcome: Outcome::Unknown,
            rule: None,
            why: why.into(),
        }
    }
}

impl Profile {
    /// Decides `op` (an SBPL operation name such as `file-read-data`; `file-read*` and
    /// `file-write*` ask about all their members at once) for `query`.
    pub fn evaluate(&self, op: &str, query: &Query) -> Evaluation {
        if let Some(first) = self.profile_wide.first() {
            let more = match self.profile_wide.len() - 1 {
                0 => String::new(),
                n => format!(" (and {n} more such construct(s))"),
            };
            return Evaluation::unknown(format!("line {}: {}{more}", first.line, first.why));
        }
        let Some(leaves) = ops::leaves(op) else {
            return Evaluation::unknown(if ops::is_known(op) {
                format!(
                    "`{op}` is a family whose members no source lists in full; ask about one \
                     operation (file-read* and file-write* can be asked)"
                )
            } else {
                format!("`{op}` is not a known operation")
            });
        };
        let expected = ops::query_kind(op).expect("an operation with leaves is known");
        if query.kind() != expected {
            return Evaluation::unknown(format!(
                "`{op}` is checked against {}, but the query is {}",
                expected.as_str(),
                query.kind().as_str()
            ));
        }
        let subject = match Subject::of(query) {
            Ok(s) => s,
            Err(why) => return Evaluation::unknown(why),
        };
        match leaves.as_slice() {
            [leaf] => self.evaluate_leaf(leaf, &subject),
            _ => self.evaluate_family(op, &leaves, &subject),
        }
    }

    /// A family asked at once: denied if any member is, allowed if all are.
    fn evaluate_family(&self, op: &str, leaves: &[&str], subject: &Subject) -> Evaluation {
        let answers: Vec<(&str, Evaluation)> = leaves
            .iter()
            .map(|leaf| (*leaf, self.evaluate_leaf(leaf, subject)))
            .collect();
        for wanted in [Outcome::Deny, Outcome::Unknown] {
            if let Some((leaf, e)) = answers.iter().find(|(_, e)| e.outcome == wanted) {
                return Evaluation {
                    outcome: wanted,
                    rule: e.rule.clone(),
                    why: format!("{leaf} (one of {op}): {}", e.why),
                };
            }
        }
        let (first_leaf, first) = &answers[0];
        let same_rule = answers.iter().all(|(_, e)| e.rule == first.rule);
        Evaluation {
            outcome: Outcome::Allow,
            rule: first.rule.clone(),
            why: format!(
                "all {} operations of {op} are allowed{}; {first_leaf}: {}",
                answers.len(),
                if same_rule {
                    " by the same rule"
                } else {
                    " (by different rules)"
                },
                first.why
            ),
        }
    }

    fn evaluate_leaf(&self, leaf: &str, subject: &Subject) -> Evaluation {
        let candidates = self.candidates(leaf);
        let by_order = settle(run_tiers(&reference_tiers(&candidates, self), subject));
        let by_specificity = settle(run_tiers(&specificity_tiers(&candidates, self), subject));
        match (by_order, by_specificity) {
            (Settled::Sure(a), Settled::Sure(b)) if a.action == b.action => Evaluation {
                outcome: a.action.into(),
                rule: a.rule.map(RuleRef::of),
                why: a.explain(leaf),
            },
            (Settled::Sure(a), Settled::Sure(b)) => Evaluation::unknown(format!(
                "Seatbelt's rule precedence decides here, and it is not established: by last \
                 match {}; by most specific operation first {}",
                a.short(),
                b.short()
            )),
            (Settled::Unsure(why), _) | (_, Settled::Unsure(why)) => Evaluation::unknown(why),
        }
    }

    /// Every non-`default` rule whose operations may cover `leaf`, in file order.
    fn candidates(&self, leaf: &str) -> Vec<Candidate<'_>> {
        self.rules
            .iter()
            .filter_map(|rule| {
                let mut best: Option<Candidate> = None;
                for op in rule.operations.iter().filter(|op| *op != "default") {
                    let (covers, specificity) = match ops::coverage(op, leaf) {
                        Coverage::Yes { specificity } => (Match::Yes, specificity),
                        Coverage::Maybe { specificity, why } => (Match::Unknown(why), specificity),
                        Coverage::No => continue,
                    };
                    let better = match &best {
                        None => true,
                        Some(b) => match (&b.covers, &covers) {
                            (Match::Yes, Match::Yes) => specificity > b.specificity,
                            (Match::Yes, _) => false,
                            (_, Match::Yes) => true,
                            _ => specificity > b.specificity,
                        },
                    };
                    if better {
                        best = Some(Candidate {
                            rule,
                            covers,
                            specificity,
                        });
                    }
                }
                best
            })
            .collect()
    }
}

/// A rule that may apply to the operation asked about.
struct Candidate<'p> {
    rule: &'p Rule,
    /// Yes, or unknown (the name may or may not cover the operation).
    covers: Match,
    specificity: usize,
}

/// last match: all the operation's rules in one tier, then `default`.
fn reference_tiers<'p>(candidates: &[Candidate<'p>], profile: &'p Profile) -> Vec<Tier<'p>> {
    vec![
        Tier {
            level: Level::Operation,
            rules: candidates
                .iter()
                .map(|c| (c.rule, c.covers.clone()))
                .collect(),
        },
        default_tier(profile),
    ]
}

/// most specific first: one tier per naming level, narrowest first, then `default`.
fn specificity_tiers<'p>(candidates: &[Candidate<'p>], profile: &'p Profile) -> Vec<Tier<'p>> {
    let mut levels: Vec<usize> = candidates.iter().map(|c| c.specificity).collect();
    levels.sort_unstable_by(|a, b| b.cmp(a));
    levels.dedup();
    let mut tiers: Vec<Tier> = levels
        .into_iter()
        .map(|level| Tier {
            level: Level::Operation,
            rules: candidates
                .iter()
                .filter(|c| c.specificity == level)
                .map(|c| (c.rule, c.covers.clone()))
                .collect(),
        })
        .collect();
    tiers.push(default_tier(profile));
    tiers
}

fn default_tier(profile: &Profile) -> Tier<'_> {
    Tier {
        level: Level::Default,
        rules: profile
            .rules
            .iter()
            .filter(|r| r.operations.iter().any(|op| op == "default"))
            .map(|r| (r, Match::Yes))
            .collect(),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Operation,
    Default,
}

struct Tier<'p> {
    level: Level,
    /// In file order, each with whether it covers the operation.
    rules: Vec<(&'p Rule, Match)>,
}

/// How the decision was reached.
#[derive(Clone, Copy, PartialEq, Eq)]
enum How {
    Filtered,
    Unfiltered,
    Default,
    /// No rule applies and there is no `default` rule.
    Nothing,
}

/// One reading's walk: the rule that certainly decides, and the rules that might have
/// decided before it.
struct Walk<'p> {
    rule: Option<&'p Rule>,
    action: Action,
    how: How,
    maybes: Vec<(&'p Rule, String)>,
}

/// Within a tier: filtered rules last to first, then unfiltered rules last to first; the
/// first that certainly applies decides; uncertain ones are remembered.
fn run_tiers<'p>(tiers: &[Tier<'p>], subject: &Subject) -> Walk<'p> {
    let mut maybes = Vec::new();
    for tier in tiers {
        let filtered = tier
            .rules
            .iter()
            .rev()
            .filter(|(r, _)| !r.filters.is_empty());
        for (rule, covers) in filtered {
            match covers.clone().and(|| rule_matches(rule, subject)) {
                Match::No => {}
                Match::Unknown(why) => maybes.push((*rule, why)),
                Match::Yes => {
                    let how = match tier.level {
                        Level::Operation => How::Filtered,
                        Level::Default => How::Default,
                    };
                    return Walk {
                        rule: Some(rule),
                        action: rule.action,
                        how,
                        maybes,
                    };
                }
            }
        }
        let unfiltered = tier
            .rules
            .iter()
            .rev()
            .filter(|(r, _)| r.filters.is_empty());
        for (rule, covers) in unfiltered {
            match covers {
                Match::No => {}
                Match::Unknown(why) => maybes.push((*rule, why.clone())),
                Match::Yes => {
                    let how = match tier.level {
                        Level::Operation => How::Unfiltered,
                        Level::Default => How::Default,
                    };
                    return Walk {
                        rule: Some(rule),
                        action: rule.action,
                        how,
                        maybes,
                    };
                }
            }
        }
    }
    Walk {
        rule: None,
        action: Action::Deny,
        how: How::Nothing,
        maybes,
    }
}

/// A rule's filters are alternatives.
fn rule_matches(rule: &Rule, subject: &Subject) -> Match {
    Match::any(rule.filters.iter().map(|f| filter_matches(f, subject)))
}

enum Settled<'p> {
    Sure(Sure<'p>),
    Unsure(String),
}

struct Sure<'p> {
    action: Action,
    rule: Option<&'p Rule>,
    how: How,
}

impl Sure<'_> {
    fn explain(&self, leaf: &str) -> String {
        let verb = match self.action {
            Action::Allow => "allowed",
            Action::Deny => "denied",
        };
        match (self.how, self.rule) {
            (How::Filtered, Some(r)) => {
                format!(
                    "{leaf} {verb} by the last matching rule for it, line {}",
                    r.line
                )
            }
            (How::Unfiltered, Some(r)) => format!(
                "{leaf} {verb} by the unfiltered rule at line {} (no filtered rule for it \
                 matches)",
                r.line
            ),
            (How::Default, Some(r)) => format!(
                "{leaf} {verb} by the default rule at line {} (no rule for it matches)",
                r.line
            ),
            _ => {
                format!("{leaf} {verb}: no rule for it matches and the profile has no default rule")
            }
        }
    }

    fn short(&self) -> String {
        match self.rule {
            Some(r) => format!("line {} would {}", r.line, r.action.as_str()),
            None => "no rule matches, so deny".into(),
        }
    }
}

/// A walk is sure when the deciding rule's decision means what it says and every rule that
/// might have decided first would have decided the same.
fn settle(walk: Walk) -> Settled {
    if let Some(rule) = walk.rule
        && let Some(m) = rule.modifiers.iter().find(|m| m.changes_decision())
    {
        return Settled::Unsure(format!("line {}: {}", rule.line, modifier_why(&m.name)));
    }
    for (rule, why) in &walk.maybes {
        if let Some(m) = rule.modifiers.iter().find(|m| m.changes_decision()) {
            return Settled::Unsure(format!(
                "line {} may apply ({why}) and {}",
                rule.line,
                modifier_why(&m.name)
            ));
        }
        if rule.action != walk.action {
            return Settled::Unsure(format!(
                "line {} may apply first and would {}: {why}; otherwise {}",
                rule.line,
                rule.action.as_str(),
                match walk.rule {
                    Some(r) => format!("line {} would {}", r.line, walk.action.as_str()),
                    None => "nothing matches, so deny".into(),
                }
            ));
        }
    }
    Settled::Sure(Sure {
        action: walk.action,
        rule: walk.rule,
        how: walk.how,
    })
}

/// Three-valued match.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Match {
    Yes,
    No,
    Unknown(String),
}

impl Match {
    fn of(b: bool) -> Match {
        if b { Match::Yes } else { Match::No }
    }

    /// Kleene and; `other` is not evaluated when `self` is no.
    fn and(self, other: impl FnOnce() -> Match) -> Match {
        match self {
            Match::No => Match::No,
            Match::Yes => other(),
            Match::Unknown(why) => match other() {
                Match::No => Match::No,
                _ => Match::Unknown(why),
            },
        }
    }

    fn all(items: impl Iterator<Item = Match>) -> Match {
        let mut unknown = None;
        for m in items {
            match m {
                Match::No => return Match::No,
                Match::Unknown(why) => {
                    unknown.get_or_insert(why);
                }
                Match::Yes => {}
            }
        }
        unknown.map_or(Match::Yes, Match::Unknown)
    }

    fn any(items: impl Iterator<Item = Match>) -> Match {
        let mut unknown = None;
        for m in items {
            match m {
                Match::Yes => return Match::Yes,
                Match::Unknown(why) => {
                    unknown.get_or_insert(why);
                }
                Match::No => {}
            }
        }
        unknown.map_or(Match::No, Match::Unknown)
    }

    fn not(self) -> Match {
        match self {
            Match::Yes => Match::No,
            Match::No => Match::Yes,
            unknown => unknown,
        }
    }
}

/// The query, checked and as bytes.
enum Subject<'a> {
    Path {
        bytes: &'a [u8],
        vnode: Option<VnodeType>,
    },
    Mach(&'a str),
    Socket(&'a [u8]),
    Process(ProcessTarget),
    NoObject,
}

impl<'a> Subject<'a> {
    fn of(query: &Query<'a>) -> Result<Subject<'a>, String> {
        let checked_path = |path: &'a Path| {
            let bytes = path.as_os_str().as_bytes();
            if is_normal_absolute(bytes) {
                Ok(bytes)
            } else {
                Err(format!(
                    "the query path {} is not absolute and normalized; pass it as the kernel \
                     resolves it (no symlinks, `.`, `..`, `//` or trailing `/`)",
                    path.display()
                ))
            }
        };
        Ok(match *query {
            Query::Path { path, vnode } => Subject::Path {
                bytes: checked_path(path)?,
                vnode,
            },
            Query::UnixSocket(path) => Subject::Socket(checked_path(path)?),
            Query::MachName(name) if name.is_empty() || name.contains('\0') => {
                return Err("the Mach service name is empty or has a NUL".into());
            }
            Query::MachName(name) => Subject::Mach(name),
            Query::Process(target) => Subject::Process(target),
            Query::NoObject => Subject::NoObject,
        })
    }

    fn describe(&self) -> &'static str {
        match self {
            Subject::Path { .. } => QueryKind::Path.as_str(),
            Subject::Mach(_) => QueryKind::MachName.as_str(),
            Subject::Socket(_) => QueryKind::UnixSocket.as_str(),
            Subject::Process(_) => QueryKind::Process.as_str(),
            Subject::NoObject => QueryKind::NoObject.as_str(),
        }
    }
}

fn filter_matches(filter: &Filter, subject: &Subject) -> Match {
    let unknown =
        |why: String| Match::Unknown(format!("line {}: {}: {why}", filter.line, filter.text));
    match (&filter.kind, subject) {
        (FilterKind::RequireAll(fs), _) => {
            Match::all(fs.iter().map(|f| filter_matches(f, subject)))
        }
        (FilterKind::RequireAny(fs), _) => {
            Match::any(fs.iter().map(|f| filter_matches(f, subject)))
        }
        (FilterKind::RequireNot(f), _) => filter_matches(f, subject).not(),
        (FilterKind::Opaque(why), _) => unknown(why.clone()),
        // A bare path filter on network-outbound names the socket (Chromium's common.sb).
        (FilterKind::Literal(p), Subject::Path { bytes, .. } | Subject::Socket(bytes)) => {
            path_argument(p, |p| *bytes == p).unwrap_or_else(unknown)
        }
        (FilterKind::Subpath(p), Subject::Path { bytes, .. }) => {
            path_argument(p, |p| is_subpath(bytes, p)).unwrap_or_else(unknown)
        }
        (FilterKind::Prefix(p), Subject::Path { bytes, .. }) => {
            Match::of(bytes.starts_with(p.as_bytes()))
        }
        (FilterKind::Regex(p), Subject::Path { bytes, .. }) => {
            regex_matches(p, bytes).unwrap_or_else(unknown)
        }
        (FilterKind::VnodeType(t), Subject::Path { vnode, .. }) => match vnode {
            Some(v) => Match::of(v == t),
            None => unknown("the query does not say the file's type (vnode type)".into()),
        },
        (FilterKind::GlobalName(n), Subject::Mach(name)) => Match::of(name == n),
        (FilterKind::GlobalNamePrefix(n), Subject::Mach(name)) => {
            Match::of(name.starts_with(n.as_str()))
        }
        (FilterKind::GlobalNameRegex(p), Subject::Mach(name)) => {
            regex_matches(p, name.as_bytes()).unwrap_or_else(unknown)
        }
        (FilterKind::RemoteUnixSocket(sf), Subject::Socket(bytes)) => match sf {
            SocketFilter::PathLiteral(p) => path_argument(p, |p| *bytes == p),
            SocketFilter::Subpath(p) => path_argument(p, |p| is_subpath(bytes, p)),
            SocketFilter::PathRegex(p) => regex_matches(p, bytes),
        }
        .unwrap_or_else(unknown),
        // An IP address and port is never a Unix socket's.
        (FilterKind::IpEndpoint, Subject::Socket(_)) => Match::No,
        (FilterKind::Target(t), Subject::Process(target)) => Match::of(match t {
            TargetFilter::Myself => *target == ProcessTarget::Myself,
            TargetFilter::SameSandbox => *target != ProcessTarget::Outside,
        }),
        _ => unknown(format!(
            "this filter is not modelled for {} (what Seatbelt does with it there is not known)",
            subject.describe()
        )),
    }
}

/// Applies `test` to a path argument that is in the form the kernel's paths are in.
fn path_argument(arg: &str, test: impl FnOnce(&[u8]) -> bool) -> Result<Match, String> {
    let arg = arg.as_bytes();
    if is_normal_absolute(arg) {
        Ok(Match::of(test(arg)))
    } else {
        Err(not_normal_why(&String::from_utf8_lossy(arg)))
    }
}

/// `root` itself or beneath it, component-wise: `/a` holds `/a/b`, not `/ab`.
fn is_subpath(path: &[u8], root: &[u8]) -> bool {
    root == b"/"
        || path == root
        || path
            .strip_prefix(root)
            .is_some_and(|rest| rest.first() == Some(&b'/'))
}

fn regex_matches(pattern: &Pattern, input: &[u8]) -> Result<Match, String> {
    let ere = pattern
        .translated
        .as_ref()
        .map_err(|e| regex_why(&pattern.source, e))?;
    ere.matches(input).map(Match::of).map_err(str::to_string)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::ffi::OsStr;

    use super::super::parse;
    use super::*;

    fn profile(text: &str) -> Profile {
        parse(text, &BTreeMap::new()).unwrap()
    }

    fn file(p: &Profile, op: &str, path: &str) -> Evaluation {
        p.evaluate(
            op,
            &Query::Path {
                path: Path::new(path),
                vnode: None,
            },
        )
    }

    #[test]
    fn kleene() {
        let u = || Match::Unknown("u".into());
        assert_eq!(Match::all([Match::Yes, u()].into_iter()), u());
        assert_eq!(Match::all([Match::No, u()].into_iter()), Match::No);
        assert_eq!(Match::any([Match::Yes, u()].into_iter()), Match::Yes);
        assert_eq!(Match::any([Match::No, u()].into_iter()), u());
        assert_eq!(u().not(), u());
        assert_eq!(Match::all(std::iter::empty()), Match::Yes);
        assert_eq!(Match::any(std::iter::empty()), Match::No);
    }

    #[test]
    fn subpath_is_component_wise() {
        assert!(is_subpath(b"/a", b"/a"));
        assert!(is_subpath(b"/a/b", b"/a"));
        assert!(!is_subpath(b"/ab", b"/a"));
        assert!(is_subpath(b"/anything", b"/"));
    }

    #[test]
    fn unfiltered_rule_does_not_override_a_matching_filtered_rule() {
        let p = profile(
            "(version 1)\n(deny default)\n(deny file-read* (subpath \"/x\"))\n(allow file-read*)",
        );
        let e = file(&p, "file-read-data", "/x/y");
        assert_eq!((e.outcome, e.rule.unwrap().line), (Outcome::Deny, 3));
        let e = file(&p, "file-read-data", "/z");
        assert_eq!((e.outcome, e.rule.unwrap().line), (Outcome::Allow, 4));
    }

    #[test]
    fn precedence_readings_that_disagree_give_unknown() {
        // An earlier rule on the operation itself against a later family rule.
        let p = profile(
            "(version 1)\n(deny default)\n(allow file-write-create (subpath \"/a\"))\n\
             (deny file-write* (subpath \"/a\"))",
        );
        let e = file(&p, "file-write-create", "/a/f");
        assert_eq!(e.outcome, Outcome::Unknown, "{e:?}");
        assert!(e.why.contains("precedence"), "{}", e.why);
        // Where only one rule matches, both readings agree.
        assert_eq!(file(&p, "file-write-data", "/a/f").outcome, Outcome::Deny);
        assert_eq!(file(&p, "file-write-create", "/b").outcome, Outcome::Deny);
    }

    #[test]
    fn non_utf8_paths_compare_as_bytes() {
        let p = profile("(version 1)(deny default)(allow file-read* (subpath \"/a\"))");
        let raw = Path::new(OsStr::from_bytes(b"/a/\xff\xfe"));
        let e = p.evaluate(
            "file-read-data",
            &Query::Path {
                path: raw,
                vnode: None,
            },
        );
        assert_eq!(e.outcome, Outcome::Allow);
    }

    #[test]
    fn wrong_query_kind_and_bad_paths_are_unknown() {
        let p = profile("(version 1)(allow default)");
        assert_eq!(
            p.evaluate("mach-lookup", &Query::NoObject).outcome,
            Outcome::Unknown
        );
        assert_eq!(
            file(&p, "file-read-data", "relative").outcome,
            Outcome::Unknown
        );
        assert_eq!(
            file(&p, "file-read-data", "/a/../b").outcome,
            Outcome::Unknown
        );
        assert_eq!(file(&p, "file*", "/a").outcome, Outcome::Unknown);
        assert_eq!(file(&p, "file-frob", "/a").outcome, Outcome::Unknown);
        assert_eq!(file(&p, "file-read-data", "/a").outcome, Outcome::Allow);
    }

    #[test]
    fn ip_endpoints_never_match_unix_sockets() {
        let p = profile(
            "(version 1)(deny default)(allow network-outbound (remote ip \"*:*\") (local tcp))",
        );
        assert!(p.unknown_constructs().is_empty());
        let e = p.evaluate("network-outbound", &Query::UnixSocket(Path::new("/a.sock")));
        assert_eq!(e.outcome, Outcome::Deny);
    }

    #[test]
    fn no_default_rule_denies() {
        let p = profile("(version 1)(allow file-read* (literal \"/a\"))");
        let e = file(&p, "file-read-data", "/b");
        assert_eq!((e.outcome, e.rule), (Outcome::Deny, None));
        assert!(e.why.contains("no default rule"), "{}", e.why);
    }
}
