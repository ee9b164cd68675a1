//! SBPL regexes that match every spelling of a path: the one place a path becomes a regex.
//!
//! Seatbelt compares the bytes of the path as the caller spelled it, but APFS is
//! case-insensitive and normalisation-insensitive (see [`crate::spelling`]): a `literal` or
//! `subpath` rule for `/Users/ada/.zshrc` does not match `/Users/ada/.ZSHRC`, which opens the
//! same file. These regexes do. Each character of the path (taken composed, NFC) becomes:
//!
//! - an ASCII letter: a bracket with both cases, `[Zz]`;
//! - an ERE special character: escaped, `\.` `\(` … (`]` and `}`, whose lone meaning POSIX
//!   leaves open, as the brackets `[]]` and `[}]`);
//! - a non-ASCII character with other spellings: a group of them, composed and decomposed,
//!   upper and lower case, `(Ë|E\u{308}|ë|e\u{308})` (a group, since POSIX brackets hold
//!   single bytes in some engines);
//! - anything else: itself.
//!
//! Only the constructs docs/sbpl-evaluator.md lists as engine-independent are used (no
//! wildcard), so the evaluator decides these regexes for any UTF-8 input. The result is
//! returned as an SBPL string literal (`(regex "…")`), escaped by [`string_literal`]: a regex
//! literal `#"…"` cannot hold a `"`.

use super::escape::{EscapeError, string_literal};
use crate::spelling::{composed, folds_with_others, variants};

/// The regex body for `path`'s spellings, unanchored.
fn spellings(path: &str) -> String {
    let mut out = String::with_capacity(path.len() * 4);
    // ASCII is its own composed form; a policy's paths mostly are.
    let composed: std::borrow::Cow<'_, str> = match path.is_ascii() {
        true => path.into(),
        false => composed(path).into(),
    };
    for c in composed.chars() {
        // A letter that other characters fold with too (the Kelvin sign with k, the long s
        // with s) needs their bytes as well: an alternation (below), not a bracket.
        if c.is_ascii_alphabetic() && !folds_with_others(c) {
            out.push('[');
            out.push(c.to_ascii_uppercase());
            out.push(c.to_ascii_lowercase());
            out.push(']');
        } else if ".[\\()*+?{|^$".contains(c) {
            out.push('\\');
            out.push(c);
        } else if matches!(c, ']' | '}') {
            out.push('[');
            out.push(c);
            out.push(']');
        } else if c.is_ascii() && !c.is_ascii_alphabetic() {
            out.push(c);
        } else {
            let v = variants(c);
            if v.len() == 1 {
                out.push_str(&v[0]);
            } else {
                out.push('(');
                out.push_str(&v.join("|"));
                out.push(')');
            }
        }
    }
    out
}

/// `path` and everything beneath it, however spelled: `^…(/|$)`.
pub fn subtree_regex(path: &str) -> String {
    format!("^{}(/|$)", spellings(path))
}

/// `path` itself, however spelled: `^…$`.
pub fn exact_regex(path: &str) -> String {
    format!("^{}$", spellings(path))
}

/// Inside `home`, a git folder or anything in it, however spelled: `^HOME/(.*/)?\.git(/|$)`.
pub fn repository_regex(home: &str) -> String {
    format!("^{}/(.*/)?{}(/|$)", spellings(home), spellings(".git"))
}

/// Inside a folder below `home` (not in the home itself), an entry named one of `names` or
/// anything in it, however spelled: `^HOME/.+/(\.claude|\.mcp\.json)(/|$)`. `names` must not
/// be empty.
pub fn project_settings_regex(home: &str, names: &[String]) -> String {
    let names: Vec<String> = names.iter().map(|n| spellings(n)).collect();
    format!("^{}/.+/({})(/|$)", spellings(home), names.join("|"))
}

/// A regex as an SBPL string literal.
pub fn regex_literal(regex: &str) -> Result<String, EscapeError> {
    string_literal(regex)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sbpl::{Outcome, Query};
    use crate::spelling::fold;
    use proptest::prelude::*;

    /// Whether the evaluator's regex engine matches `regex` against `path`; the regex must
    /// translate (it is in the dialect every engine agrees on) and be decided.
    fn matches(regex: &str, path: &str) -> bool {
        let text = format!(
            "(version 1)(deny default)(allow file-read-data (regex {}))",
            regex_literal(regex).unwrap()
        );
        let profile = crate::sbpl::parse(&text, &Default::default()).expect("parses");
        let e = profile.evaluate(
            "file-read-data",
            &Query::Path {
                path: std::path::Path::new(path),
                vnode: None,
            },
        );
        match e.outcome {
            Outcome::Allow => true,
            Outcome::Deny => false,
            Outcome::Unknown => panic!("{regex} on {path:?} is unknown: {}", e.why),
        }
    }

    /// The oracle: `candidate` is `path` or beneath it, comparing spellings.
    fn same_or_beneath(path: &str, candidate: &str) -> bool {
        let (p, c) = (fold(path), fold(candidate));
        c == p || c.strip_prefix(&p).is_some_and(|rest| rest.starts_with('/'))
    }

    #[test]
    fn shapes() {
        assert_eq!(subtree_regex("/U/.z"), r"^/[Uu]/\.[Zz](/|$)");
        assert_eq!(exact_regex("/a]}(b"), r"^/[Aa][]][}]\([Bb]$");
        assert_eq!(
            subtree_regex("/zo\u{eb}"),
            "^/[Zz][Oo](E\u{308}|e\u{308}|\u{cb}|\u{eb})(/|$)"
        );
        assert_eq!(
            repository_regex("/h"),
            "^/[Hh]/(.*/)?\\.[Gg](I|i|\u{131})[Tt](/|$)"
        );
        assert_eq!(subtree_regex("/k"), "^/(K|k|\u{212A})(/|$)");
        assert_eq!(regex_literal(r"^/a\.b").unwrap(), r#""^/a\\.b""#);
    }

    #[test]
    fn the_guard_examples() {
        let zshrc = subtree_regex("/Users/ada/.zshrc");
        for yes in [
            "/Users/ada/.zshrc",
            "/Users/ada/.ZSHRC",
            "/USERS/ADA/.zshRC",
        ] {
            assert!(matches(&zshrc, yes), "{yes}");
        }
        for no in [
            "/Users/ada/.zshrc2",
            "/Users/ada/.zsh",
            "/Users/ada/xzshrc",
            "/Users/ada",
        ] {
            assert!(!matches(&zshrc, no), "{no}");
        }
        let agents = subtree_regex("/Users/zo\u{eb}/Library/LaunchAgents");
        for yes in [
            "/Users/zo\u{eb}/Library/LaunchAgents/x.plist",
            "/Users/zoe\u{308}/library/launchagents/x.plist",
            "/Users/ZO\u{cb}/LIBRARY/LaunchAgents",
        ] {
            assert!(matches(&agents, yes), "{yes}");
        }
        assert!(!matches(&agents, "/Users/zoe/Library/LaunchAgents"));
        let repos = repository_regex("/Users/ada");
        for yes in [
            "/Users/ada/p/.git/hooks/pre-commit",
            "/Users/ada/a/b/.GIT/Hooks",
            "/Users/ada/.git/config",
            "/Users/ada/p/.git",
            "/Users/ada/p/.Git/commondir",
            "/Users/ada/p/.git/modules/sub/hooks/post-checkout",
        ] {
            assert!(matches(&repos, yes), "{yes}");
        }
        for no in [
            "/Users/ada/p/x.git/hooks",
            "/Users/ada/p/.gitignore",
            "/Users/ada/p/.github/workflows/ci.yml",
            "/Users/adam/p/.git/config",
            "/x/p/.git/config",
        ] {
            assert!(!matches(&repos, no), "{no}");
        }
    }

    fn cases() -> ProptestConfig {
        ProptestConfig::with_cases(
            std::env::var("PROPTEST_CASES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1024),
        )
    }

    /// Path components: letters, hostile characters, ERE metacharacters, non-ASCII letters in
    /// both forms, combining marks, characters without case.
    const PIECES: &[&str] = &[
        "a", "Z", "q", ".", "*", "+", "?", "(", ")", "[", "]", "{", "}", "|", "^", "$", "\\", "\"",
        " ", "-", "_", "1", "é", "e\u{301}", "Å", "ñ", "ö", "o\u{308}", "中", "😀", "ß", "\u{301}",
    ];

    fn component() -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(PIECES), 1..5)
            .prop_map(|v| v.concat())
            .prop_filter("the kernel hands over no `.` or `..`", |c| {
                c != "." && c != ".."
            })
    }

    /// A path as the kernel hands it to Seatbelt (what the evaluator accepts).
    fn resolved(path: &str) -> bool {
        path.starts_with('/')
            && (path == "/"
                || path[1..]
                    .split('/')
                    .all(|c| !c.is_empty() && c != "." && c != ".."))
    }

    fn path() -> impl Strategy<Value = String> {
        prop::collection::vec(component(), 1..4).prop_map(|v| format!("/{}", v.join("/")))
    }

    /// A spelling of `path`: each composed character replaced by one of its variants.
    fn respell(path: &str, picks: &[usize]) -> String {
        composed(path)
            .chars()
            .zip(picks.iter().cycle())
            .map(|(c, i)| {
                let v = variants(c);
                v[i % v.len()].clone()
            })
            .collect()
    }

    proptest! {
        #![proptest_config(cases())]

        /// Every spelling of the path, and of anything beneath it, matches.
        #[test]
        fn every_spelling_matches(p in path(), picks in prop::collection::vec(any::<usize>(), 1..8), tail in prop::option::of(component())) {
            let regex = subtree_regex(&p);
            let mut spelled = respell(&p, &picks);
            if let Some(t) = tail {
                spelled = format!("{spelled}/{t}");
            }
            prop_assert!(matches(&regex, &spelled), "{} {:?}", regex, spelled);
            prop_assert!(matches(&exact_regex(&p), &respell(&p, &picks)));
        }

        /// The regex matches exactly the spellings of the path and what lies beneath them:
        /// a sibling with a suffix, a changed character or a shorter path does not match.
        #[test]
        fn matches_only_spellings(p in path(), other in path(), suffix in component(), cut in any::<prop::sample::Index>()) {
            let regex = subtree_regex(&p);
            let exact = exact_regex(&p);
            let cut_at = {
                let ends: Vec<usize> = p.char_indices().map(|(i, _)| i).skip(1).collect();
                cut.get(&ends).to_owned()
            };
            for candidate in [other.clone(), format!("{p}{suffix}"), p[..cut_at].to_string(), format!("{p}/{suffix}"), format!("{other}{p}")] {
                if !resolved(&candidate) {
                    continue;
                }
                prop_assert_eq!(matches(&regex, &candidate), same_or_beneath(&p, &candidate), "{} {:?}", regex, candidate);
                prop_assert_eq!(matches(&exact, &candidate), fold(&p) == fold(&candidate), "{} {:?}", exact, candidate);
            }
        }
    }
}
