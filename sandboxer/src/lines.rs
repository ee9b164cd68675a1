//! Where a byte offset of a text file is, for errors that name the file, line and column
//! (every data file of the project: policies, query files, adapters, ways-out lists).

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
}
