//! How macOS spells a name: APFS (and HFS+) compare names case-insensitively and
//! normalisation-insensitively, so `~/.ZSHRC` is `~/.zshrc` and `/Users/zoë` in NFD is the
//! same folder as in NFC, while Seatbelt compares the bytes of the path as the caller wrote
//! it. The autorun guard must hold for every spelling: [`fold`] says when two spellings name
//! the same file (the reference meaning, in `Policy::decide`), [`variants`] lists the
//! spellings of one character (what the Seatbelt regexes match, `seatbelt::spelled`).
//!
//! Bounds, stated: case is folded per character, with Rust's simple (one character to one
//! character) mappings — `ß`/`SS`, `İ` and other mappings to several characters are left as
//! they are; normalisation is Unicode's canonical one (NFC/NFD), not the compatibility one.
//! APFS's own tables may differ in such corners; ASCII and the common accented letters are
//! exact.

use std::ffi::OsStr;
use std::path::{Component, Path};

use unicode_normalization::UnicodeNormalization;

/// `c` lower-cased when that gives one character, else `c`.
fn simple_lower(c: char) -> char {
    let mut l = c.to_lowercase();
    match (l.next(), l.next()) {
        (Some(one), None) => one,
        _ => c,
    }
}

/// `c` upper-cased when that gives one character, else `c`.
fn simple_upper(c: char) -> char {
    let mut u = c.to_uppercase();
    match (u.next(), u.next()) {
        (Some(one), None) => one,
        _ => c,
    }
}

/// The spelling every equivalent spelling of `text` shares: decomposed (NFD), each character
/// lower-cased, decomposed again (a lower-cased letter may decompose differently).
pub fn fold(text: &str) -> String {
    text.nfd()
        .map(simple_lower)
        .collect::<String>()
        .nfd()
        .collect()
}

/// `text` in composed form (NFC): the form [`variants`] are taken from.
pub fn composed(text: &str) -> String {
    text.nfc().collect()
}

/// Every spelling of the composed character `c`: itself and its simple upper and lower case,
/// each decomposed (NFD: base and marks) and composed as far as each leading run of its
/// marks allows (`Ǻ`, `Å` + acute, `A` + ring + acute). Sorted, no duplicates, `c` among
/// them. Marks are kept in canonical order: a reordering of marks of different classes is a
/// further spelling these do not list.
pub fn variants(c: char) -> Vec<String> {
    let mut out: Vec<String> = [c, simple_lower(c), simple_upper(c)]
        .into_iter()
        // A case mapping that changes the folded form is not a spelling of the same name
        // (the Kelvin sign K lower-cases to k, but k upper-cases to K).
        .filter(|v| fold(&v.to_string()) == fold(&c.to_string()))
        .flat_map(|v| {
            let marks: Vec<char> = v.to_string().nfd().collect();
            (1..=marks.len()).filter_map(move |j| {
                let head: String = marks[..j].iter().collect::<String>().nfc().collect();
                (head.chars().count() == 1).then(|| head + &marks[j..].iter().collect::<String>())
            })
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Whether the names `a` and `b` are spellings of the same name.
pub fn same(a: &str, b: &str) -> bool {
    a == b || fold(a) == fold(b)
}

/// Whether two path components name the same entry: equal bytes, or UTF-8 spellings of the
/// same name.
pub fn same_name(a: &OsStr, b: &OsStr) -> bool {
    if a == b {
        return true;
    }
    match (a.to_str(), b.to_str()) {
        (Some(a), Some(b)) if a.is_ascii() && b.is_ascii() => a.eq_ignore_ascii_case(b),
        (Some(a), Some(b)) => fold(a) == fold(b),
        _ => false,
    }
}

/// The number of components of `path` that spell `root` (its leading ones), when `path` is
/// `root` or lies beneath it however either is spelled; both absolute.
pub fn within_at(path: &Path, root: &Path) -> Option<usize> {
    let mut names = path.components();
    let mut count = 0;
    for r in root.components() {
        let same = match (names.next()?, r) {
            (Component::Normal(a), Component::Normal(b)) => same_name(a, b),
            (a, b) => a == b,
        };
        if !same {
            return None;
        }
        count += 1;
    }
    Some(count)
}

/// `path` is `root` or lies beneath it, however either is spelled.
pub fn within(path: &Path, root: &Path) -> bool {
    within_at(path, root).is_some()
}

/// `path` lies strictly beneath `root`, however either is spelled.
pub fn strictly_within(path: &Path, root: &Path) -> bool {
    within_at(path, root).is_some_and(|n| path.components().count() > n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_case_and_normalisation() {
        assert!(same("/Users/ada/.zshrc", "/USERS/Ada/.ZSHRC"));
        assert!(same("/Users/zo\u{eb}", "/Users/zoe\u{308}"));
        assert!(same("/Users/zo\u{eb}", "/users/ZOE\u{308}"));
        assert!(!same("/Users/ada/.zshrc", "/Users/ada/.zshrc2"));
        assert!(!same("zoë", "zoe"));
        let (p, r) = (
            Path::new("/USERS/zoe\u{308}/.ZSHRC/x"),
            Path::new("/Users/zo\u{eb}/.zshrc"),
        );
        assert_eq!(within_at(p, r), Some(4));
        assert!(strictly_within(p, r) && !strictly_within(r, r) && within(r, r));
        assert!(!within(Path::new("/Users/zoe/.zshrc"), r));
        assert!(!within(Path::new("/Users/zo\u{eb}/.zshrc2"), r));
        assert!(within(p, Path::new("/")));
    }

    #[test]
    fn variants_of_a_character() {
        assert_eq!(variants('a'), ["A", "a"]);
        assert_eq!(variants('/'), ["/"]);
        assert_eq!(
            variants('\u{eb}'),
            ["E\u{308}", "e\u{308}", "\u{cb}", "\u{eb}"]
        );
        assert_eq!(variants('ß'), ["ß"]);
        for c in ['a', 'Z', 'é', 'Å', 'ñ', '中', '\u{301}'] {
            let v = variants(c);
            assert!(v.contains(&c.to_string()), "{c}: {v:?}");
            assert!(v.iter().all(|s| same(s, &c.to_string())), "{c}: {v:?}");
        }
    }
}
