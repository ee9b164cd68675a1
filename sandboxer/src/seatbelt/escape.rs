//! SBPL string literals: the one place where a path or a name becomes profile text.
//!
//! SBPL is read by a Scheme reader (TinyScheme). Inside a `"…"` literal only two characters
//! are special: `\` starts an escape and `"` ends the literal. Escaping exactly those two makes
//! any other text inert, so a path cannot close its literal and add rules. Control characters
//! are refused rather than escaped: the reader's escapes for them (`\n`, `\x..`) are not
//! documented for Seatbelt, and a newline would also end the `;` comments that quote the
//! literal. A literal longer than Seatbelt's reader accepts is refused too: sandbox-exec
//! rejects the whole profile ("Error reading string") when one literal passes about 1 KiB
//! (observed by Anthropic's sandbox-runtime, which keeps its literals under 900 bytes).

use std::path::Path;

/// The longest literal body (between the quotes, after escaping) we emit. Seatbelt's reader
/// fails past roughly 1025 bytes; a margin keeps us clear of an off-by-some there.
pub const MAX_LITERAL_BYTES: usize = 1000;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EscapeError {
    #[error(
        "{text:?} contains the control character {ch:?} at byte {at}; a Seatbelt string cannot carry it safely"
    )]
    ControlCharacter { text: String, ch: char, at: usize },
    #[error(
        "{text:?} is {bytes} bytes once escaped; Seatbelt reads string literals only up to {max} bytes"
    )]
    TooLong {
        text: String,
        bytes: usize,
        max: usize,
    },
    #[error("{path:?} is not valid UTF-8; a Seatbelt profile cannot name it")]
    NotUtf8 { path: String },
}

/// Quotes `text` as an SBPL string literal, `"` included: `a"b\c` → `"a\"b\\c"`.
///
/// Total: every input either yields a literal that reads back as exactly `text`, or an error.
pub fn string_literal(text: &str) -> Result<String, EscapeError> {
    if let Some((at, ch)) = text.char_indices().find(|(_, c)| c.is_control()) {
        return Err(EscapeError::ControlCharacter {
            text: text.to_string(),
            ch,
            at,
        });
    }
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        if matches!(c, '\\' | '"') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    let body = out.len() - 2;
    if body > MAX_LITERAL_BYTES {
        return Err(EscapeError::TooLong {
            text: text.to_string(),
            bytes: body,
            max: MAX_LITERAL_BYTES,
        });
    }
    Ok(out)
}

/// [`string_literal`] for a path, which must be UTF-8 (Seatbelt compares UTF-8 paths).
pub fn path_literal(path: &Path) -> Result<String, EscapeError> {
    let text = path.to_str().ok_or_else(|| EscapeError::NotUtf8 {
        path: path.to_string_lossy().into_owned(),
    })?;
    string_literal(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Reads an SBPL string literal back the way the Scheme reader does for the escapes we
    /// emit: `\x` is `x`. Returns the text and the rest of the input after the closing quote.
    fn read_literal(input: &str) -> Option<(String, &str)> {
        let mut chars = input.strip_prefix('"')?.char_indices();
        let mut out = String::new();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => out.push(chars.next()?.1),
                '"' => return Some((out, &input[i + 2..])),
                c => out.push(c),
            }
        }
        None
    }

    #[test]
    fn escapes_quote_and_backslash_only() {
        assert_eq!(string_literal("/a b/c").unwrap(), r#""/a b/c""#);
        assert_eq!(string_literal(r#"a"b\c"#).unwrap(), r#""a\"b\\c""#);
        assert_eq!(
            string_literal(r#"#")(allow default)("#).unwrap(),
            r##""#\")(allow default)(""##
        );
        assert_eq!(string_literal("é😀;").unwrap(), "\"é😀;\"");
        assert_eq!(string_literal("").unwrap(), "\"\"");
    }

    #[test]
    fn refuses_control_characters() {
        for bad in ["a\nb", "\r", "x\u{0}", "\u{7f}", "\u{85}", "tab\there"] {
            let e = string_literal(bad).unwrap_err();
            assert!(
                matches!(e, EscapeError::ControlCharacter { .. }),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn refuses_literals_seatbelt_cannot_read() {
        assert!(string_literal(&"a".repeat(MAX_LITERAL_BYTES)).is_ok());
        let e = string_literal(&"a".repeat(MAX_LITERAL_BYTES + 1)).unwrap_err();
        assert!(matches!(e, EscapeError::TooLong { bytes, .. } if bytes == MAX_LITERAL_BYTES + 1));
        // Escapes count: 600 quotes become 1200 bytes.
        assert!(string_literal(&"\"".repeat(600)).is_err());
    }

    #[test]
    fn non_utf8_paths_are_refused() {
        use std::os::unix::ffi::OsStrExt;
        let p = Path::new(std::ffi::OsStr::from_bytes(b"/a/\xff"));
        assert!(matches!(path_literal(p), Err(EscapeError::NotUtf8 { .. })));
        assert_eq!(path_literal(Path::new("/a")).unwrap(), "\"/a\"");
    }

    fn cases() -> ProptestConfig {
        // CI runs the default 4096; PROPTEST_CASES overrides.
        ProptestConfig::with_cases(
            std::env::var("PROPTEST_CASES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(4096),
        )
    }

    proptest! {
        #![proptest_config(cases())]

        /// Any text without control characters round-trips through the reader, and nothing
        /// follows the closing quote: the literal cannot end early.
        #[test]
        fn literal_reads_back_exactly(text in "[\\PC\"\\\\()#;|]{0,60}") {
            match string_literal(&text) {
                Ok(lit) => {
                    let (read, rest) = read_literal(&lit).expect("a whole literal");
                    prop_assert_eq!(read, text);
                    prop_assert_eq!(rest, "");
                }
                Err(EscapeError::TooLong { .. }) => prop_assert!(text.len() * 2 > MAX_LITERAL_BYTES),
                Err(e) => prop_assert!(false, "unexpected error {}", e),
            }
        }

        /// Totality: arbitrary text (control characters included) is either refused with the
        /// reason, or escaped into a literal that reads back as exactly that text.
        #[test]
        fn total_over_arbitrary_text(text in any::<String>()) {
            match string_literal(&text) {
                Ok(lit) => {
                    prop_assert!(!text.chars().any(char::is_control));
                    let (read, rest) = read_literal(&lit).expect("a whole literal");
                    prop_assert_eq!(read, text);
                    prop_assert_eq!(rest, "");
                }
                Err(EscapeError::ControlCharacter { ch, .. }) => prop_assert!(ch.is_control()),
                Err(EscapeError::TooLong { bytes, .. }) => prop_assert!(bytes > MAX_LITERAL_BYTES),
                Err(e) => prop_assert!(false, "unexpected error {}", e),
            }
        }
    }
}
