//! How macOS spells a name: APFS (and HFS+) compare names case-insensitively and
//! normalisation-insensitively, so `~/.ZSHRC` is `~/.zshrc` and `/Users/zoë` in NFD is the
//! same folder as in NFC, while Seatbelt compares the bytes of the path as the caller wrote
//! it. The autorun guard must hold for every spelling: [`fold`] says when two spellings name
//! the same file (the reference meaning, in `Policy::decide`), [`variants`] lists the
//! spellings of one character (what the Seatbelt regexes match, `seatbelt::spelled`).
//!
//! Bounds, stated: case is folded per character, with Rust's simple (one character to one
//! character) mappings — a character's upper case lower-cased, so that the Kelvin sign is
//! `k`, the long s `ſ` is `s` and `ẞ` is `ß`, while `ß`/`SS`, `İ` and other mappings to
//! several characters are left as they are (the dotless `ı` folds with `i`, one spelling more
//! than APFS's, on the safe side); normalisation is Unicode's canonical one (NFC/NFD), not the
//! compatibility one.
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

/// `c` case-folded: its simple upper case lower-cased, so that characters with no case pair of
/// their own fold with the letter they are a form of (the Kelvin sign `K` to `k`, the long
/// s `ſ` to `s`, final sigma to sigma), as a case-insensitive file system compares them.
fn fold_char(c: char) -> char {
    simple_lower(simple_upper(c))
}

/// The characters that fold to a character ([`fold_char`]) without being its simple upper or
/// lower case: the spellings of that character that case mappings alone do not give.
/// Complete for this Rust's Unicode tables (the test `extra_spellings_are_every_one` scans
/// every character).
const EXTRA: &[(char, &[char])] = &[
    ('\u{69}', &['\u{131}']),
    ('\u{6B}', &['\u{212A}']),
    ('\u{73}', &['\u{17F}']),
    ('\u{DF}', &['\u{1E9E}']),
    ('\u{E5}', &['\u{212B}']),
    ('\u{1C6}', &['\u{1C5}']),
    ('\u{1C9}', &['\u{1C8}']),
    ('\u{1CC}', &['\u{1CB}']),
    ('\u{1F3}', &['\u{1F2}']),
    ('\u{3B2}', &['\u{3D0}']),
    ('\u{3B5}', &['\u{3F5}']),
    ('\u{3B8}', &['\u{3D1}', '\u{3F4}']),
    ('\u{3B9}', &['\u{345}', '\u{1FBE}']),
    ('\u{3BA}', &['\u{3F0}']),
    ('\u{3BC}', &['\u{B5}']),
    ('\u{3C0}', &['\u{3D6}']),
    ('\u{3C1}', &['\u{3F1}']),
    ('\u{3C3}', &['\u{3C2}']),
    ('\u{3C6}', &['\u{3D5}']),
    ('\u{3C9}', &['\u{2126}']),
    ('\u{432}', &['\u{1C80}']),
    ('\u{434}', &['\u{1C81}']),
    ('\u{43E}', &['\u{1C82}']),
    ('\u{441}', &['\u{1C83}']),
    ('\u{442}', &['\u{1C84}', '\u{1C85}']),
    ('\u{44A}', &['\u{1C86}']),
    ('\u{463}', &['\u{1C87}']),
    ('\u{1E61}', &['\u{1E9B}']),
    ('\u{1F80}', &['\u{1F88}']),
    ('\u{1F81}', &['\u{1F89}']),
    ('\u{1F82}', &['\u{1F8A}']),
    ('\u{1F83}', &['\u{1F8B}']),
    ('\u{1F84}', &['\u{1F8C}']),
    ('\u{1F85}', &['\u{1F8D}']),
    ('\u{1F86}', &['\u{1F8E}']),
    ('\u{1F87}', &['\u{1F8F}']),
    ('\u{1F90}', &['\u{1F98}']),
    ('\u{1F91}', &['\u{1F99}']),
    ('\u{1F92}', &['\u{1F9A}']),
    ('\u{1F93}', &['\u{1F9B}']),
    ('\u{1F94}', &['\u{1F9C}']),
    ('\u{1F95}', &['\u{1F9D}']),
    ('\u{1F96}', &['\u{1F9E}']),
    ('\u{1F97}', &['\u{1F9F}']),
    ('\u{1FA0}', &['\u{1FA8}']),
    ('\u{1FA1}', &['\u{1FA9}']),
    ('\u{1FA2}', &['\u{1FAA}']),
    ('\u{1FA3}', &['\u{1FAB}']),
    ('\u{1FA4}', &['\u{1FAC}']),
    ('\u{1FA5}', &['\u{1FAD}']),
    ('\u{1FA6}', &['\u{1FAE}']),
    ('\u{1FA7}', &['\u{1FAF}']),
    ('\u{1FB3}', &['\u{1FBC}']),
    ('\u{1FC3}', &['\u{1FCC}']),
    ('\u{1FF3}', &['\u{1FFC}']),
    ('\u{A64B}', &['\u{1C88}']),
];

/// Whether characters other than `c`'s case pair fold with it ([`EXTRA`]: the Kelvin sign with
/// `k`, the long s with `s`).
pub fn folds_with_others(c: char) -> bool {
    let f = fold_char(c);
    EXTRA.iter().any(|(to, _)| *to == f)
}

/// The spelling every equivalent spelling of `text` shares: decomposed (NFD), each character
/// case-folded ([`fold_char`]), decomposed again (a folded letter may decompose differently).
pub fn fold(text: &str) -> String {
    text.nfd()
        .map(fold_char)
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
    let folded = fold_char(c);
    let extra = EXTRA
        .iter()
        .find(|(f, _)| *f == folded)
        .map_or(&[][..], |(_, more)| *more);
    let mut out: Vec<String> = [c, simple_lower(c), simple_upper(c)]
        .into_iter()
        .chain(extra.iter().copied())
        // A case mapping that changes the folded form is not a spelling of the same name
        // (the Kelvin sign K lower-cases to k, but k upper-cases to K).
        .filter(|v| fold(&v.to_string()) == fold(&c.to_string()))
        .flat_map(|v| {
            let marks: Vec<char> = v.to_string().nfd().collect();
            // `v` itself too: a character whose decomposition is another single character
            // (the Kelvin sign is K, the Angstrom sign Å) composes back to that one, not to
            // itself, while the file system takes it for the same name.
            std::iter::once(v.to_string()).chain((1..=marks.len()).filter_map(move |j| {
                let head: String = marks[..j].iter().collect::<String>().nfc().collect();
                (head.chars().count() == 1).then(|| head + &marks[j..].iter().collect::<String>())
            }))
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

    /// Every character that folds to another without being its upper or lower case is in
    /// [`EXTRA`], and nothing else is.
    #[test]
    fn extra_spellings_are_every_one() {
        let mut found: Vec<(char, char)> = Vec::new();
        for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
            let f = fold_char(c);
            if c != f && c != simple_upper(f) && c != simple_lower(f) {
                found.push((f, c));
            }
        }
        let listed: Vec<(char, char)> = EXTRA
            .iter()
            .flat_map(|(f, more)| more.iter().map(move |c| (*f, *c)))
            .collect();
        found.sort();
        let mut listed = listed;
        listed.sort();
        assert_eq!(found, listed);
        // The Kelvin sign and the long s, which a guarded `~/.kube` or `~/.zshrc` are spelt with.
        assert!(variants('k').contains(&"\u{212A}".to_string()));
        assert!(variants('S').contains(&"\u{17F}".to_string()));
        assert!(same("~/.\u{212A}ube", "~/.kube") && same(".z\u{17F}hrc", ".zshrc"));
    }

    #[test]
    fn variants_of_a_character() {
        assert_eq!(variants('a'), ["A", "a"]);
        assert_eq!(variants('/'), ["/"]);
        assert_eq!(
            variants('\u{eb}'),
            ["E\u{308}", "e\u{308}", "\u{cb}", "\u{eb}"]
        );
        assert_eq!(variants('ß'), ["ß", "ẞ"]);
        for c in ['a', 'Z', 'é', 'Å', 'ñ', '中', '\u{301}'] {
            let v = variants(c);
            assert!(v.contains(&c.to_string()), "{c}: {v:?}");
            assert!(v.iter().all(|s| same(s, &c.to_string())), "{c}: {v:?}");
        }
    }
}
