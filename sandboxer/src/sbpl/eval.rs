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

use serde::Serialize;

use super::matching::{Match, Subject, rule_matches};
use super::ops::{self, Coverage};
use super::profile::{Action, Profile, Rule, modifier_why};
use super::query::Query;

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
        let side = ops::ip_side(op);
        let fits =
            query.kind() == expected || (query.kind() == ops::QueryKind::Ip && side.is_some());
        if !fits {
            return Evaluation::unknown(format!(
                "`{op}` is checked against {}, but the query is {}",
                expected.as_str(),
                query.kind().as_str()
            ));
        }
        let subject = match Subject::of(query, side) {
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
            .filter(|(r, _)| !r.filters.is_empty())
            .map(|(rule, covers)| {
                let matched = covers.clone().and(|| rule_matches(rule, subject));
                (*rule, matched, How::Filtered)
            });
        let unfiltered = tier
            .rules
            .iter()
            .rev()
            .filter(|(r, _)| r.filters.is_empty())
            .map(|(rule, covers)| (*rule, covers.clone(), How::Unfiltered));
        // Lazily, in this order: a filter is matched only when no rule before it decided.
        for (rule, matched, how) in filtered.chain(unfiltered) {
            match matched {
                Match::No => {}
                Match::Unknown(why) => maybes.push((rule, why)),
                Match::Yes => {
                    let how = match tier.level {
                        Level::Operation => how,
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    use super::super::parse;
    use super::*;
    use crate::sbpl::matching::is_subpath;
    use std::path::Path;

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
        let unknown: Vec<String> = p
            .unknown_constructs()
            .iter()
            .map(|c| c.why.clone())
            .collect();
        assert_eq!(unknown.len(), 1, "{unknown:?}");
        assert!(unknown[0].contains("without one"), "{unknown:?}");
        let e = p.evaluate("network-outbound", &Query::UnixSocket(Path::new("/a.sock")));
        assert_eq!(e.outcome, Outcome::Deny);
    }

    fn ip(p: &Profile, op: &str, addr: &str) -> Outcome {
        p.evaluate(op, &Query::Ip(addr.parse().unwrap())).outcome
    }

    #[test]
    fn ip_endpoints_by_side_host_and_port() {
        let p = profile(
            "(version 1)(deny default)\
             (allow network-outbound (remote ip \"localhost:3128\"))\
             (allow network-outbound (remote unix-socket (subpath \"/run\")))\
             (allow network-bind (local unix-socket (subpath \"/run\")))\
             (allow network-bind (local ip \"*:8080\"))",
        );
        assert!(
            p.unknown_constructs().is_empty(),
            "{:?}",
            p.unknown_constructs()
        );
        let out = "network-outbound";
        assert_eq!(ip(&p, out, "127.0.0.1:3128"), Outcome::Allow);
        assert_eq!(ip(&p, out, "[::1]:3128"), Outcome::Allow);
        // Measured by Anthropic's sandbox-runtime: the mapped form is not `localhost`.
        assert_eq!(ip(&p, out, "[::ffff:127.0.0.1]:3128"), Outcome::Deny);
        assert_eq!(ip(&p, out, "127.0.0.1:3129"), Outcome::Deny);
        assert_eq!(ip(&p, out, "203.0.113.5:3128"), Outcome::Deny);
        assert_eq!(ip(&p, out, "[2001:db8::1]:3128"), Outcome::Deny);
        // Not documented either way.
        assert_eq!(ip(&p, out, "127.0.0.2:3128"), Outcome::Unknown);
        assert_eq!(ip(&p, out, "0.0.0.0:3128"), Outcome::Unknown);
        // A port that differs settles it, whatever the address.
        assert_eq!(ip(&p, out, "127.0.0.2:53"), Outcome::Deny);
        // Bind: `local` filters; a Unix-socket filter never matches an IP endpoint.
        assert_eq!(ip(&p, "network-bind", "127.0.0.1:8080"), Outcome::Allow);
        assert_eq!(ip(&p, "network-bind", "0.0.0.0:8080"), Outcome::Allow);
        assert_eq!(ip(&p, "network-bind", "127.0.0.1:3128"), Outcome::Deny);
        assert_eq!(ip(&p, "network-inbound", "127.0.0.1:8080"), Outcome::Deny);
        // The Unix-socket rules still decide Unix sockets.
        let sock = |path: &str| p.evaluate(out, &Query::UnixSocket(Path::new(path))).outcome;
        assert_eq!(sock("/run/a.sock"), Outcome::Allow);
        assert_eq!(sock("/var/a.sock"), Outcome::Deny);
        // Operations without an IP end, and unknown operations, are not asked this way.
        assert_eq!(ip(&p, "file-read-data", "127.0.0.1:1"), Outcome::Unknown);
        assert_eq!(ip(&p, "system-socket", "127.0.0.1:1"), Outcome::Unknown);
    }

    #[test]
    fn ip_forms_not_modelled_are_unknown_where_they_could_decide() {
        for (rule, why) in [
            (
                "(allow network-outbound (remote tcp \"localhost:1\"))",
                "protocol",
            ),
            (
                "(allow network-outbound (local ip \"localhost:1\"))",
                "local",
            ),
            (
                "(allow network-outbound (remote ip \"10.0.0.1:1\"))",
                "host",
            ),
            ("(allow network-outbound (remote ip \"*:01\"))", "port"),
            ("(allow network-outbound (remote ip \"*:65536\"))", "port"),
            ("(allow network-outbound (remote ip))", "without one"),
        ] {
            let p = profile(&format!("(version 1)(deny default){rule}"));
            let e = p.evaluate(
                "network-outbound",
                &Query::Ip("127.0.0.1:1".parse().unwrap()),
            );
            assert_eq!(e.outcome, Outcome::Unknown, "{rule}");
            assert!(e.why.contains(why), "{rule}: {}", e.why);
            // A Unix socket is decided all the same: no IP filter matches one.
            let e = p.evaluate("network-outbound", &Query::UnixSocket(Path::new("/a.sock")));
            assert_eq!(e.outcome, Outcome::Deny, "{rule}");
        }
        let p = profile(
            "(version 1)(deny default)(allow network-outbound (local unix-socket (subpath \"/a\")))",
        );
        let e = p.evaluate("network-outbound", &Query::UnixSocket(Path::new("/a/s")));
        assert_eq!(e.outcome, Outcome::Unknown);
    }

    #[test]
    fn no_default_rule_denies() {
        let p = profile("(version 1)(allow file-read* (literal \"/a\"))");
        let e = file(&p, "file-read-data", "/b");
        assert_eq!((e.outcome, e.rule), (Outcome::Deny, None));
        assert!(e.why.contains("no default rule"), "{}", e.why);
    }
}
