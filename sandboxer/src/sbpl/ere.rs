//! SBPL regexes (POSIX extended regular expressions, as Apple's profiles write them) →
//! `regex::bytes::Regex`, for the part of ERE whose meaning POSIX defines and every engine
//! agrees on. Anything else is refused with the reason, and the filter using it evaluates to
//! "unknown": undefined ERE corners (`\d`, `a**`, `()`, `\}`), bracket forms that depend on
//! locale or engine (`[[:alpha:]]`, `[\.]`, `[é]`, `[!-/]`), and repetition of a non-ASCII
//! character (byte or character semantics?).
//!
//! Matching is a search over the bytes of the path (POSIX `regexec`: unanchored unless the
//! pattern says `^`/`$`); `^` and `$` anchor at the ends of the whole path only.
//!
//! Whether a wildcard (`.`, `[^…]`) steps over a byte or a character is the engine's
//! business, and it matters for non-ASCII input. So each pattern is compiled twice: a lower
//! bound whose wildcards match single ASCII characters only (every engine matches those the
//! same way; for ASCII input it is exact), and an upper bound whose wildcards match any
//! non-empty run of bytes they could cover (no engine matches more). Matching the lower bound
//! is a sure match, missing the upper bound a sure miss, and in between the answer is unknown
//! ([`Ere::matches`]).

use regex::bytes::{Regex, RegexBuilder};

/// Bounds the recursion over groups; real profiles nest two or three deep.
const MAX_GROUP_DEPTH: usize = 32;
/// POSIX's minimum RE_DUP_MAX; larger counts may not be accepted by every engine.
const MAX_REPEAT: u32 = 255;
/// Keeps a hostile pattern from costing much memory.
const SIZE_LIMIT: usize = 1 << 20;

/// A wildcard's lower bound: one ASCII character other than newline (inputs with a newline
/// are refused anyway).
const LOWER_ANY: &str = r"[\x00-\x09\x0B-\x7F]";
/// `.`'s upper bound: any non-empty run of bytes (a character is one to four bytes, and an
/// engine may take a stray byte as one).
const UPPER_ANY: &str = "(?:.+)";
/// What U+FFFD may stand for in non-UTF-8 input: a run of stray non-ASCII bytes (ASCII
/// bytes are read as themselves by every engine, as the bounds above assume).
const NON_ASCII_RUN: &str = r"(?:[\x80-\xFF]+)";

/// A translated regex.
#[derive(Clone, Debug)]
pub struct Ere {
    lower: Regex,
    upper: Regex,
    /// The upper bound for non-UTF-8 input: a non-ASCII literal matches its own UTF-8 bytes
    /// only (an engine reads bytes, or characters out of valid sequences), except U+FFFD,
    /// which a decoder may make of any stray bytes. Missing it is a sure miss whatever the
    /// engine makes of stray bytes. None without a non-ASCII literal.
    loose: Option<Regex>,
    /// Has a non-ASCII literal, whose bytes may be matched mid-character in non-UTF-8 input.
    non_ascii_literal: bool,
}

impl Ere {
    /// Translates `source`; the error says which construct has no certain meaning.
    pub fn translate(source: &str) -> Result<Ere, String> {
        let mut t = Translator {
            chars: source.chars().collect(),
            at: 0,
            lower: String::new(),
            upper: String::new(),
            loose: String::new(),
            non_ascii_literal: false,
        };
        t.alternation(0)?;
        if t.at < t.chars.len() {
            return Err("unmatched `)`".into());
        }
        Ok(Ere {
            lower: compile(&t.lower)?,
            upper: compile(&t.upper)?,
            loose: match t.non_ascii_literal {
                true => Some(compile(&t.loose)?),
                false => None,
            },
            non_ascii_literal: t.non_ascii_literal,
        })
    }

    /// Whether the regex matches somewhere in `input`, or why that depends on the engine.
    pub fn matches(&self, input: &[u8]) -> Result<bool, &'static str> {
        if input.contains(&b'\n') {
            // POSIX leaves `^`, `$`, `.` and `[^…]` around a newline to REG_NEWLINE.
            return Err("the input has a newline, where POSIX regex matching depends on flags");
        }
        if input.is_ascii() {
            // Every engine reads ASCII alike, and there the lower bound is exact.
            return Ok(self.lower.is_match(input));
        }
        if self.non_ascii_literal && std::str::from_utf8(input).is_err() {
            if let Some(loose) = &self.loose
                && !loose.is_match(input)
            {
                return Ok(false);
            }
            return Err("the input is not UTF-8 and the regex has a non-ASCII character");
        }
        if self.lower.is_match(input) {
            Ok(true)
        } else if !self.upper.is_match(input) {
            Ok(false)
        } else {
            Err(
                "the input is not ASCII and the regex has a wildcard (`.` or `[^…]`) whose \
                 byte-or-character meaning differs between engines",
            )
        }
    }
}

fn compile(pattern: &str) -> Result<Regex, String> {
    RegexBuilder::new(pattern)
        .unicode(false)
        .dot_matches_new_line(true)
        .size_limit(SIZE_LIMIT)
        .build()
        .map_err(|e| format!("the translated pattern does not compile: {e}"))
}

/// What an atom was, for the quantifier that may follow it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Atom {
    Anchor,
    Wildcard,
    Ascii,
    NonAscii,
    Group,
}

struct Translator {
    chars: Vec<char>,
    at: usize,
    /// The pattern with wildcards as [`LOWER_ANY`] (or its negated-bracket counterpart).
    lower: String,
    /// The pattern with wildcards as [`UPPER_ANY`].
    upper: String,
    /// The upper bound with U+FFFD as [`NON_ASCII_RUN`].
    loose: String,
    non_ascii_literal: bool,
}

impl Translator {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn next(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.at += 1;
        Some(c)
    }

    /// Text that is the same in both bounds.
    fn push(&mut self, s: &str) {
        self.lower.push_str(s);
        self.upper.push_str(s);
        self.loose.push_str(s);
    }

    fn push_literal(&mut self, c: char) {
        if !c.is_ascii() {
            self.non_ascii_literal = true;
        }
        let mut text = String::new();
        push_literal(&mut text, c);
        self.lower.push_str(&text);
        self.upper.push_str(&text);
        self.loose.push_str(if c == char::REPLACEMENT_CHARACTER {
            NON_ASCII_RUN
        } else {
            &text
        });
    }

    fn alternation(&mut self, depth: usize) -> Result<(), String> {
        loop {
            self.branch(depth)?;
            if self.peek() == Some('|') {
                self.at += 1;
                self.push("|");
            } else {
                return Ok(());
            }
        }
    }

    fn branch(&mut self, depth: usize) -> Result<(), String> {
        let mut pieces = 0;
        while let Some(c) = self.peek() {
            if c == '|' || c == ')' {
                break;
            }
            self.piece(depth)?;
            pieces += 1;
        }
        if pieces == 0 {
            return Err("empty regex or empty alternative (undefined in POSIX ERE)".into());
        }
        Ok(())
    }

    fn piece(&mut self, depth: usize) -> Result<(), String> {
        let atom = self.atom(depth)?;
        let Some(quantifier) = self.quantifier()? else {
            return Ok(());
        };
        if matches!(self.peek(), Some('*' | '+' | '?' | '{')) {
            return Err("a quantifier after a quantifier (undefined in POSIX ERE)".into());
        }
        match atom {
            Atom::Anchor => {
                return Err("a quantifier on `^` or `$` (undefined in POSIX ERE)".into());
            }
            Atom::NonAscii => {
                return Err(
                    "a repeated non-ASCII character: byte or character repetition is \
                     engine-dependent"
                        .into(),
                );
            }
            _ => {}
        }
        self.push(&quantifier);
        Ok(())
    }

    /// `*`, `+`, `?` or a bounded interval `{n}`, `{n,}`, `{n,m}`.
    fn quantifier(&mut self) -> Result<Option<String>, String> {
        match self.peek() {
            Some(c @ ('*' | '+' | '?')) => {
                self.at += 1;
                Ok(Some(c.to_string()))
            }
            Some('{') => {
                self.at += 1;
                let low = self
                    .number()?
                    .ok_or("`{` without a count (undefined in POSIX ERE)")?;
                let high = if self.peek() == Some(',') {
                    self.at += 1;
                    self.number()?
                } else {
                    Some(low)
                };
                if self.next() != Some('}') {
                    return Err("malformed interval `{…}`".into());
                }
                if high.is_some_and(|h| h < low) {
                    return Err("interval `{n,m}` with m < n".into());
                }
                Ok(Some(match high {
                    Some(h) if h == low => format!("{{{low}}}"),
                    Some(h) => format!("{{{low},{h}}}"),
                    None => format!("{{{low},}}"),
                }))
            }
            _ => Ok(None),
        }
    }

    fn number(&mut self) -> Result<Option<u32>, String> {
        let start = self.at;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.at += 1;
        }
        if start == self.at {
            return Ok(None);
        }
        let digits: String = self.chars[start..self.at].iter().collect();
        match digits.parse::<u32>() {
            Ok(n) if n <= MAX_REPEAT => Ok(Some(n)),
            _ => Err(format!("repetition count above {MAX_REPEAT}")),
        }
    }

    fn atom(&mut self, depth: usize) -> Result<Atom, String> {
        let c = self.next().expect("atom() is called with input left");
        match c {
            '(' => {
                if depth >= MAX_GROUP_DEPTH {
                    return Err("groups nested too deep".into());
                }
                match self.peek() {
                    Some(')') => return Err("empty group `()` (undefined in POSIX ERE)".into()),
                    Some('?') => return Err("`(?` is not POSIX ERE".into()),
                    _ => {}
                }
                self.push("(?:");
                self.alternation(depth + 1)?;
                if self.next() != Some(')') {
                    return Err("unclosed `(`".into());
                }
                self.push(")");
                Ok(Atom::Group)
            }
            '.' => {
                self.lower.push_str(LOWER_ANY);
                self.upper.push_str(UPPER_ANY);
                self.loose.push_str(UPPER_ANY);
                Ok(Atom::Wildcard)
            }
            '^' => {
                self.push(r"\A");
                Ok(Atom::Anchor)
            }
            '$' => {
                self.push(r"\z");
                Ok(Atom::Anchor)
            }
            '[' => self.bracket(),
            '\\' => match self.next() {
                // The ERE special characters: escaped, POSIX defines them as themselves.
                Some(e) if ".[\\()*+?{|^$".contains(e) => {
                    self.push_literal(e);
                    Ok(Atom::Ascii)
                }
                Some(e) => Err(format!(
                    "`\\{}` (POSIX ERE defines `\\` only before . [ \\ ( ) * + ? {{ | ^ $)",
                    e.escape_debug()
                )),
                None => Err("a trailing `\\`".into()),
            },
            '*' | '+' | '?' | '{' => Err(format!("`{c}` with nothing to repeat")),
            c => {
                self.push_literal(c);
                Ok(if c.is_ascii() {
                    Atom::Ascii
                } else {
                    Atom::NonAscii
                })
            }
        }
    }

    /// `[…]` / `[^…]`, after the `[`.
    fn bracket(&mut self) -> Result<Atom, String> {
        let negated = self.peek() == Some('^');
        if negated {
            self.at += 1;
        }
        let mut class = String::new();
        let mut first = true;
        loop {
            let c = self.next().ok_or("unclosed `[`")?;
            if c == ']' && !first {
                break;
            }
            first = false;
            if c == '[' && matches!(self.peek(), Some(':' | '=' | '.')) {
                return Err(
                    "character classes, equivalence classes and collating elements in brackets \
                     are locale-dependent"
                        .into(),
                );
            }
            if c == '\\' {
                return Err(
                    "`\\` inside brackets: literal in POSIX, an escape in other engines".into(),
                );
            }
            if !c.is_ascii() {
                return Err("a non-ASCII character inside brackets".into());
            }
            let is_range =
                self.peek() == Some('-') && self.chars.get(self.at + 1).is_some_and(|&n| n != ']');
            if is_range {
                self.at += 1;
                let end = self.next().ok_or("unclosed `[`")?;
                if !same_simple_range(c, end) {
                    return Err(format!(
                        "range `{c}-{end}`: only ranges within 0-9, a-z or A-Z mean the same in \
                         every locale"
                    ));
                }
                class.push_str(&format!(r"\x{:02X}-\x{:02X}", c as u32, end as u32));
            } else {
                class.push_str(&format!(r"\x{:02X}", c as u32));
            }
        }
        if negated {
            // Lower bound: one ASCII character outside the set (and not a newline).
            self.lower.push_str(&format!(r"[^{class}\x0A\x80-\xFF]"));
            // Upper bound: any non-empty run of bytes outside the set. The set is ASCII, and
            // no byte of a multi-byte character is ASCII, so no engine matches more.
            self.upper.push_str(&format!("(?:[^{class}]+)"));
            self.loose.push_str(&format!("(?:[^{class}]+)"));
            Ok(Atom::Wildcard)
        } else {
            self.push(&format!("[{class}]"));
            Ok(Atom::Ascii)
        }
    }
}

fn same_simple_range(a: char, b: char) -> bool {
    let same_class = (a.is_ascii_digit() && b.is_ascii_digit())
        || (a.is_ascii_lowercase() && b.is_ascii_lowercase())
        || (a.is_ascii_uppercase() && b.is_ascii_uppercase());
    same_class && a <= b
}

/// A literal character as bytes; alphanumerics as themselves for readable patterns.
fn push_literal(out: &mut String, c: char) {
    if c.is_ascii_alphanumeric() {
        out.push(c);
        return;
    }
    let mut buf = [0u8; 4];
    for b in c.encode_utf8(&mut buf).bytes() {
        out.push_str(&format!(r"\x{b:02X}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(re: &str, input: &str) -> bool {
        Ere::translate(re)
            .unwrap()
            .matches(input.as_bytes())
            .unwrap()
    }

    fn refused(re: &str) -> String {
        Ere::translate(re).unwrap_err()
    }

    #[test]
    fn apple_style_patterns() {
        assert!(m(r"^/dev/ttys[0-9]+$", "/dev/ttys003"));
        assert!(!m(r"^/dev/ttys[0-9]+$", "/dev/ttys003x"));
        assert!(m(
            r"^/Users/[^/]+/\.docker/run/",
            "/Users/ada/.docker/run/x.sock"
        ));
        assert!(!m(
            r"^/Users/[^/]+/\.docker/run/",
            "/Users/ada/x/.docker/run/"
        ));
        assert!(m(r"^(/private)?/etc/(hosts|resolv\.conf)$", "/etc/hosts"));
        assert!(m(
            r"^(/private)?/etc/(hosts|resolv\.conf)$",
            "/private/etc/resolv.conf"
        ));
        assert!(!m(
            r"^(/private)?/etc/(hosts|resolv\.conf)$",
            "/etc/resolvXconf"
        ));
        // Unanchored is a search, as POSIX regexec.
        assert!(m(r"/\.git/", "/Users/ada/p/.git/config"));
        assert!(m(r"^/a{2,3}$", "/aaa"));
        assert!(!m(r"^/a{2,3}$", "/aaaa"));
        // `]` first in a bracket and `-` last are literals; `}` and `]` alone are ordinary.
        assert!(m(r"^[]a-]$", "-"));
        assert!(m(r"^x}]$", "x}]"));
    }

    #[test]
    fn metacharacters_are_escaped_in_the_translation() {
        // A literal `(` `)` `|` `*` quoted the POSIX way matches only itself.
        assert!(m(r"^/a\(b\)\|c\*\.\+\?\{\$\^\[\\$", r"/a(b)|c*.+?{$^[\"));
        assert!(!m(r"^/a\.b$", "/aXb"));
    }

    #[test]
    fn refuses_undefined_and_engine_dependent_forms() {
        for re in [
            r"\d",
            r"a**",
            r"()",
            r"a|",
            r"\}",
            r"[[:alpha:]]",
            r"[\.]",
            "[é]",
            r"[!-/]",
            "é+",
            r"(?i)a",
            r"^*",
            "{2}",
            r"a{3,2}",
            "a{999}",
            "[a",
            "(a",
            "a)",
            r"a\",
        ] {
            assert!(Ere::translate(re).is_err(), "{re} should be refused");
        }
        assert!(refused(r"\d").contains("POSIX ERE defines"));
    }

    #[test]
    fn wildcards_on_non_ascii_input_are_bounded() {
        let any = Ere::translate(r"^/a/[^/]+$").unwrap();
        assert_eq!(any.matches(b"/a/b"), Ok(true));
        assert_eq!(any.matches(b"/a/b/c"), Ok(false));
        // Non-ASCII under a wildcard: between the bounds, so unknown.
        assert!(any.matches(b"/a/\xff").is_err());
        assert!(any.matches("/a/é".as_bytes()).is_err());
        // ASCII decides even with non-ASCII elsewhere, and a sure miss stays a miss.
        assert_eq!(any.matches("/a/b/é".as_bytes()), Ok(false));
        assert_eq!(any.matches("/é/b".as_bytes()), Ok(false));
        let docker = Ere::translate(r"^/Users/[^/]+/\.docker/").unwrap();
        assert_eq!(docker.matches("/Users/José/x".as_bytes()), Ok(false));
        assert!(
            docker
                .matches("/Users/José/.docker/run".as_bytes())
                .is_err()
        );
        assert_eq!(
            docker.matches("/Users/ada/.docker/run/é".as_bytes()),
            Ok(true)
        );
        let search = Ere::translate(r"/\.ssh/").unwrap();
        assert_eq!(search.matches(b"/\xff/.ssh/k"), Ok(true));
        let one = Ere::translate(r"^/a/.$").unwrap();
        assert!(one.matches("/a/é".as_bytes()).is_err());
        assert_eq!(one.matches(b"/a/bc"), Ok(false));
        let plain = Ere::translate(r"^/a/b$").unwrap();
        assert_eq!(plain.matches(b"/a/\xff"), Ok(false));
        assert!(plain.matches(b"/a\n/b").is_err());
        // Non-ASCII literals match their UTF-8 bytes, but not in non-UTF-8 input.
        assert!(m("^/é$", "/é"));
        assert!(
            Ere::translate("é")
                .unwrap()
                .matches(b"\xc3\xa9\xff")
                .is_err()
        );
        // Unless its bytes are nowhere they could match: no engine reads é out of other bytes.
        let spelled = Ere::translate("^/[Xx]/(É|é)(/|$)").unwrap();
        assert_eq!(spelled.matches(b"/a/\xff"), Ok(false));
        assert_eq!(spelled.matches(b"/x/b/\xff"), Ok(false));
        assert_eq!(spelled.matches(b"/x/\xff\xfe"), Ok(false));
        assert!(spelled.matches(b"/x/\xc3\xa9/\xff").is_err());
        // A decoder may make U+FFFD of any stray bytes.
        let replaced = Ere::translate("^/x/\u{FFFD}$").unwrap();
        assert!(replaced.matches(b"/x/\xff").is_err());
        assert_eq!(replaced.matches(b"/y/\xff"), Ok(false));
    }
}
