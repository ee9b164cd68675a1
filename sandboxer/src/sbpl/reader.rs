//! The SBPL reader: profile text → s-expressions ([`Datum`]), with line and column on each.
//!
//! Only the syntax real profiles use is read; everything else is a [`ParseError`], because a
//! construct whose meaning we cannot state must never be read as something it is not. In
//! particular (see `docs/sbpl-evaluator.md`):
//!
//! - strings `"…"` know the escapes `\\`, `\"`, `\n`, `\t`, `\r` (TinyScheme, the reader
//!   inside libsandbox, and R7RS agree on these); any other escape is an error;
//! - regex literals `#"…"` keep every character as written, backslashes included; `\"`
//!   inside one is an error (whether it ends the literal is not documented);
//! - block comments `#| … |#` may not contain `#|` (whether they nest is not documented);
//! - a NUL anywhere is an error (libsandbox reads C strings: it would cut the text there).

use std::fmt;
use std::ops::Range;

/// Deeper nesting is refused: no real profile comes close, and it bounds every recursion
/// over a [`Datum`] (reading, interpreting, dropping).
pub const MAX_DEPTH: usize = 64;

/// Why a profile could not be read, and where (1-based line and column; the column counts
/// characters, not bytes).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ParseError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

/// A place in the profile text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pos {
    pub line: usize,
    pub column: usize,
}

impl Pos {
    pub(crate) fn error(self, message: impl Into<String>) -> ParseError {
        ParseError {
            line: self.line,
            column: self.column,
            message: message.into(),
        }
    }
}

/// One s-expression as read, with where it starts and the bytes of the text it spans.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datum {
    pub kind: DatumKind,
    pub pos: Pos,
    pub span: Range<usize>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatumKind {
    /// `( … )`
    List(Vec<Datum>),
    /// `"…"` after escapes.
    Str(String),
    /// `#"…"`, exactly as written between the quotes.
    RegexStr(String),
    /// An operation name, filter name, keyword or number: everything else that is a word.
    Symbol(String),
    /// `#t` / `#f`.
    Bool(bool),
    /// `'datum` (Chromium's `(defined? 'name)`); never part of a rule we model.
    Quote(Box<Datum>),
}

/// Reads every top-level datum of `text`.
pub fn read(text: &str) -> Result<Vec<Datum>, ParseError> {
    let mut reader = Reader {
        text,
        at: 0,
        line: 1,
        column: 1,
    };
    let mut out = Vec::new();
    loop {
        reader.skip_atmosphere()?;
        match reader.peek() {
            None => return Ok(out),
            Some(')') => return Err(reader.pos().error("unexpected `)`")),
            Some(_) => out.push(reader.datum(0)?),
        }
    }
}

/// Characters that end a symbol or must follow a string.
fn is_delimiter(c: char) -> bool {
    is_whitespace(c) || matches!(c, '(' | ')' | '"' | ';' | '\'')
}

fn is_whitespace(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0c')
}

/// Symbol characters: the ones operation, filter and keyword names are made of. A stricter
/// set than Scheme's, so `|sym|`, `\` escapes in symbols and similar never slip through.
fn is_symbol_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!$%&*+-./:<=>?@^_~#".contains(c)
}

struct Reader<'a> {
    text: &'a str,
    at: usize,
    line: usize,
    column: usize,
}

impl Reader<'_> {
    fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            column: self.column,
        }
    }

    fn peek(&self) -> Option<char> {
        self.text[self.at..].chars().next()
    }

    fn peek_second(&self) -> Option<char> {
        let mut chars = self.text[self.at..].chars();
        chars.next();
        chars.next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.at += c.len_utf8();
        if c == '\n' {
            self.line += 1;
            self.column = 1;
        } else {
            self.column += 1;
        }
        Some(c)
    }

    /// Whitespace and comments.
    fn skip_atmosphere(&mut self) -> Result<(), ParseError> {
        loop {
            match self.peek() {
                Some(c) if is_whitespace(c) => {
                    self.bump();
                }
                Some(';') => {
                    while let Some(c) = self.peek() {
                        if c == '\n' {
                            break;
                        }
                        if c == '\0' {
                            return Err(self.pos().error("NUL character in a comment"));
                        }
                        self.bump();
                    }
                }
                Some('#') if self.peek_second() == Some('|') => self.block_comment()?,
                _ => return Ok(()),
            }
        }
    }

    fn block_comment(&mut self) -> Result<(), ParseError> {
        let start = self.pos();
        self.bump();
        self.bump();
        loop {
            match self.bump() {
                None => return Err(start.error("unterminated block comment `#|`")),
                Some('\0') => return Err(self.pos().error("NUL character in a comment")),
                Some('|') if self.peek() == Some('#') => {
                    self.bump();
                    return Ok(());
                }
                Some('#') if self.peek() == Some('|') => {
                    return Err(self.pos().error(
                        "`#|` inside a block comment: whether SBPL block comments nest is not \
                         documented, so this text has no certain meaning",
                    ));
                }
                Some(_) => {}
            }
        }
    }

    fn datum(&mut self, depth: usize) -> Result<Datum, ParseError> {
        let pos = self.pos();
        if depth >= MAX_DEPTH {
            return Err(pos.error(format!("nesting deeper than {MAX_DEPTH} levels")));
        }
        let start = self.at;
        let c = self.peek().expect("datum() is called with input left");
        let kind = match c {
            '(' => DatumKind::List(self.list(depth)?),
            '"' => {
                self.bump();
                DatumKind::Str(self.string(pos)?)
            }
            '#' => self.hash(pos)?,
            '\'' => {
                self.bump();
                self.skip_atmosphere()?;
                match self.peek() {
                    None | Some(')') => return Err(pos.error("`'` with nothing to quote")),
                    Some(_) => DatumKind::Quote(Box::new(self.datum(depth + 1)?)),
                }
            }
            c if is_symbol_char(c) => DatumKind::Symbol(self.symbol()?),
            '\0' => return Err(pos.error("NUL character outside a string")),
            c => {
                return Err(pos.error(format!(
                    "unexpected character {c:?}: not part of the SBPL this reader knows"
                )));
            }
        };
        Ok(Datum {
            kind,
            pos,
            span: start..self.at,
        })
    }

    fn list(&mut self, depth: usize) -> Result<Vec<Datum>, ParseError> {
        let open = self.pos();
        self.bump();
        let mut items = Vec::new();
        loop {
            self.skip_atmosphere()?;
            match self.peek() {
                None => return Err(open.error("unclosed `(`")),
                Some(')') => {
                    self.bump();
                    return Ok(items);
                }
                Some(_) => items.push(self.datum(depth + 1)?),
            }
        }
    }

    /// The body of `"…"`, after the opening quote.
    fn string(&mut self, open: Pos) -> Result<String, ParseError> {
        let mut out = String::new();
        loop {
            let here = self.pos();
            match self.bump() {
                None => return Err(open.error("unterminated string")),
                Some('"') => break,
                Some('\0') => return Err(here.error("NUL character in a string")),
                Some('\\') => match self.bump() {
                    Some('\\') => out.push('\\'),
                    Some('"') => out.push('"'),
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some('r') => out.push('\r'),
                    None => return Err(open.error("unterminated string")),
                    Some(c) => {
                        return Err(here.error(format!(
                            "escape `\\{}` in a string: only \\\\ \\\" \\n \\t \\r have a \
                             meaning this reader can state",
                            c.escape_debug()
                        )));
                    }
                },
                Some(c) => out.push(c),
            }
        }
        self.expect_delimiter("string")?;
        Ok(out)
    }

    /// `#"…"`, `#t`, `#f`; every other `#` form is refused.
    fn hash(&mut self, pos: Pos) -> Result<DatumKind, ParseError> {
        match self.peek_second() {
            Some('"') => {
                self.bump();
                self.bump();
                self.regex_string(pos).map(DatumKind::RegexStr)
            }
            Some(b @ ('t' | 'f')) => {
                self.bump();
                self.bump();
                match self.peek() {
                    Some(c) if !is_delimiter(c) => {
                        Err(pos.error("unsupported `#` syntax (only #t, #f and #\"…\" are SBPL)"))
                    }
                    _ => Ok(DatumKind::Bool(b == 't')),
                }
            }
            _ => Err(pos.error("unsupported `#` syntax (only #t, #f and #\"…\" are SBPL)")),
        }
    }

    /// The body of `#"…"`, after the opening `#"`: raw, up to the next `"`.
    fn regex_string(&mut self, open: Pos) -> Result<String, ParseError> {
        let mut out = String::new();
        loop {
            let here = self.pos();
            match self.bump() {
                None => return Err(open.error("unterminated regex literal `#\"`")),
                Some('"') => break,
                Some('\0') => return Err(here.error("NUL character in a regex literal")),
                Some('\\') if self.peek() == Some('"') => {
                    return Err(here.error(
                        "`\\\"` in a `#\"…\"` regex literal: whether it ends the literal is not \
                         documented; write the regex as a plain string instead",
                    ));
                }
                Some(c) => out.push(c),
            }
        }
        self.expect_delimiter("regex literal")?;
        Ok(out)
    }

    fn symbol(&mut self) -> Result<String, ParseError> {
        let mut out = String::new();
        while let Some(c) = self.peek() {
            if is_delimiter(c) {
                break;
            }
            if !is_symbol_char(c) {
                return Err(self.pos().error(format!(
                    "unexpected character {c:?} in a name: not part of the SBPL this reader knows"
                )));
            }
            out.push(c);
            self.bump();
        }
        Ok(out)
    }

    /// After a string: `"a""b"` or `"a"b` is refused rather than read as two data.
    fn expect_delimiter(&self, what: &str) -> Result<(), ParseError> {
        match self.peek() {
            None => Ok(()),
            Some(c) if is_whitespace(c) || matches!(c, '(' | ')' | ';') => Ok(()),
            Some(c) => Err(self.pos().error(format!(
                "{c:?} right after a {what}: expected a space, `(`, `)` or a comment"
            ))),
        }
    }
}

/// `s` as an SBPL string literal that [`read`] reads back as exactly `s`: in double quotes,
/// with `\` and `"` escaped and every other character as is (newlines included). Fails only
/// for a NUL, which no SBPL string can hold.
pub fn quote_string(s: &str) -> Result<String, UnquotableString> {
    if s.contains('\0') {
        return Err(UnquotableString);
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if matches!(c, '\\' | '"') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Ok(out)
}

/// A string with a NUL: libsandbox reads C strings, so no SBPL literal can hold it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a string with a NUL character cannot be written in SBPL")]
pub struct UnquotableString;

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> DatumKind {
        let mut all = read(text).unwrap();
        assert_eq!(all.len(), 1, "{text}");
        all.remove(0).kind
    }

    fn err(text: &str) -> ParseError {
        read(text).unwrap_err()
    }

    #[test]
    fn reads_lists_strings_symbols_with_positions() {
        let data = read("(version 1)\n  (allow file-read* (literal \"/a b\"))").unwrap();
        assert_eq!(data.len(), 2);
        assert_eq!(data[1].pos, Pos { line: 2, column: 3 });
        let DatumKind::List(items) = &data[1].kind else {
            panic!()
        };
        assert_eq!(items[1].kind, DatumKind::Symbol("file-read*".into()));
        let DatumKind::List(filter) = &items[2].kind else {
            panic!()
        };
        assert_eq!(filter[1].kind, DatumKind::Str("/a b".into()));
        assert_eq!(
            filter[1].pos,
            Pos {
                line: 2,
                column: 30
            }
        );
    }

    #[test]
    fn string_escapes() {
        assert_eq!(one(r#""a\\b\"c\nd""#), DatumKind::Str("a\\b\"c\nd".into()));
        assert_eq!(
            one("\"raw\nnewline\""),
            DatumKind::Str("raw\nnewline".into())
        );
        let e = err(r#"(literal "a\.b")"#);
        assert_eq!((e.line, e.column), (1, 12));
        assert!(e.message.contains("escape"), "{e}");
        assert!(err(r#""\x41""#).message.contains("escape"));
        assert!(err(r#""\101""#).message.contains("escape"));
    }

    #[test]
    fn regex_literals_keep_backslashes() {
        assert_eq!(one(r#"#"^/a\.b$""#), DatumKind::RegexStr(r"^/a\.b$".into()));
        assert!(err(r#"#"a\"b""#).message.contains("regex literal"));
    }

    #[test]
    fn comments() {
        let data = read("; one\n#| two\n (allow default) |# (deny default) ; three").unwrap();
        assert_eq!(data.len(), 1);
        assert_eq!(data[0].pos.line, 3);
        assert!(err("#| a #| b |# |#").message.contains("nest"));
        assert!(err("#| open").message.contains("unterminated"));
    }

    #[test]
    fn refuses_what_it_does_not_know() {
        assert!(err("(a [b])").message.contains("unexpected character"));
        assert!(err("#\\a").message.contains("#"));
        assert!(err("(a |b|)").message.contains("unexpected character"));
        assert!(err("\"a\"\"b\"").message.contains("right after"));
        assert!(err("(a \"b\0\")").message.contains("NUL"));
        assert!(err(")").message.contains("unexpected `)`"));
        let e = err("(allow\n  (literal \"x\"");
        assert_eq!(
            (e.line, e.column, e.message.as_str()),
            (2, 3, "unclosed `(`")
        );
    }

    #[test]
    fn depth_is_bounded() {
        let deep = "(".repeat(MAX_DEPTH + 1) + &")".repeat(MAX_DEPTH + 1);
        assert!(err(&deep).message.contains("nesting"));
        let ok = "(".repeat(MAX_DEPTH) + &")".repeat(MAX_DEPTH);
        assert!(read(&ok).is_ok());
    }

    #[test]
    fn booleans_and_quote() {
        assert_eq!(one("#t"), DatumKind::Bool(true));
        assert!(matches!(one("'x"), DatumKind::Quote(_)));
        assert!(err("#true").message.contains("#"));
    }

    #[test]
    fn quote_string_round_trips_hostile_text() {
        for s in [
            "",
            "a\"b",
            "a\\",
            "\\\"",
            ")(allow default)(",
            "#\"x\"",
            "line\nbreak",
            "é",
        ] {
            let q = quote_string(s).unwrap();
            assert_eq!(one(&q), DatumKind::Str(s.into()), "{q}");
        }
        assert_eq!(quote_string("a\0b"), Err(UnquotableString));
    }
}
