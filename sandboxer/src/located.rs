//! Places in the project's data files (policies, query files, adapters, ways-out lists), for
//! errors that name the file, line, column and field.

use std::fmt;

/// A data file that cannot be used, with where and why: `file:line:column: field: message`,
/// or `file: field: message` when the error is not at a place in the file (`line` 0).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct DataFileError {
    pub file: String,
    /// 1-based; 0 when the error is not at a place in the file (e.g. a bad `--home`).
    pub line: usize,
    pub column: usize,
    /// The field, as a path into the document: `grant[2].path`, `probe[3].target`.
    pub field: String,
    pub message: String,
}

impl DataFileError {
    /// An error at byte `offset` of the text `lines` indexes (`None`: at no place in it).
    pub fn at(
        file: &str,
        lines: &LineIndex,
        offset: Option<usize>,
        field: String,
        message: String,
    ) -> DataFileError {
        let (line, column) = offset.map_or((0, 0), |o| lines.line_col(o));
        DataFileError {
            file: file.into(),
            line,
            column,
            field,
            message,
        }
    }
}

impl fmt::Display for DataFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}: {}", self.file, self.field, self.message)
        } else {
            write!(
                f,
                "{}:{}:{}: {}: {}",
                self.file, self.line, self.column, self.field, self.message
            )
        }
    }
}

/// The offsets where each line of a text starts, built once, so that many errors (or a
/// policy with 10 000 rules) do not rescan the text per place.
#[derive(Clone, Debug)]
pub struct LineIndex {
    /// Byte offset where each line starts; `starts[0] == 0`.
    starts: Vec<usize>,
    len: usize,
}

impl LineIndex {
    pub fn new(text: &str) -> LineIndex {
        LineIndex {
            starts: std::iter::once(0)
                .chain(text.match_indices('\n').map(|(i, _)| i + 1))
                .collect(),
            len: text.len(),
        }
    }

    /// 1-based line and column (in bytes) of `offset`; an offset past the end is the end.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.len);
        let line = self.starts.partition_point(|&start| start <= offset);
        (line, offset - self.starts[line - 1] + 1)
    }

    /// 1-based line of `offset`.
    pub fn line(&self, offset: usize) -> usize {
        self.line_col(offset).0
    }
}

/// The message of a TOML (serde) error, and the field it names: serde names the offending key
/// in its message ("unknown field `x`", "missing field `y`"); anything else is `(syntax)`.
pub fn toml_field_and_message(e: &toml::de::Error) -> (String, String) {
    let message = e.message().trim().to_string();
    let field = message
        .split('`')
        .nth(1)
        .filter(|_| message.contains("field"))
        .unwrap_or("(syntax)")
        .to_string();
    (field, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_columns_count_from_one() {
        let text = "ab\ncd\n\nef";
        let ix = LineIndex::new(text);
        for (offset, want) in [
            (0, (1, 1)),
            (1, (1, 2)),
            (2, (1, 3)),
            (3, (2, 1)),
            (6, (3, 1)),
            (7, (4, 1)),
            (8, (4, 2)),
            (99, (4, 3)),
        ] {
            assert_eq!(ix.line_col(offset), want, "offset {offset}");
            // The same as counting by hand.
            let o = offset.min(text.len());
            let before = &text[..o];
            let line = before.matches('\n').count() + 1;
            let col = before.rfind('\n').map_or(o, |nl| o - nl - 1) + 1;
            assert_eq!((line, col), want, "offset {offset}");
        }
        assert_eq!(LineIndex::new("").line_col(5), (1, 1));
    }

    #[test]
    fn toml_errors_name_their_field() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct T {
            a: i64,
        }
        let field = |text: &str| toml_field_and_message(&toml::from_str::<T>(text).unwrap_err()).0;
        assert_eq!(field("a = 1\nb = 2\n"), "b");
        assert_eq!(field(""), "a");
        assert_eq!(field("a = \n"), "(syntax)");
    }
}
