//! SBPL filter text for a region, built from escaped literals only.
//!
//! The template decides which rules exist and which operations they name; the filters are
//! built here because they repeat once per grant (a template engine's per-node cost is what
//! dominated rendering a 10 000-grant policy) and because their shape is what carries the
//! policy's meaning, so it is unit-tested on its own. Every path goes through
//! [`super::escape`] first: nothing here can emit a raw path.
//!
//! Shapes (a region is a folder `R` minus folders `X…` inside it):
//!
//! - files: `(subpath R)`, or
//!   `(require-all (subpath R) (require-not (literal X)) (require-not (subpath X))… (require-not (literal K))…)`
//!   where the `K…` are single paths left out (launcher binaries, kept ancestors). Each
//!   excluded folder is named twice: Codex's Seatbelt policy found `subpath` alone let the
//!   folder itself be created when it did not exist yet.
//! - guarded paths (denied after every allow): `(subpath P)` and `(regex R)` per path, `R`
//!   matching every spelling (`super::spelled`); the repository pattern outside read-write
//!   grants as `(require-all (regex R) (require-not (subpath G))…)`.
//! - sockets: `(SIDE unix-socket (subpath R))`, or
//!   `(require-all (SIDE unix-socket (subpath R)) (require-not (SIDE unix-socket (subpath X)))…
//!   (require-not (SIDE unix-socket (path-literal K)))…)`, the `K…` single sockets left out
//!   (the resolver's, unless the network is open)
//!   with SIDE `remote` (connect) or `local` (bind), the forms Codex's and Anthropic's
//!   profiles use.

use std::fmt::Write as _;

/// One literal per line, indented under the rule: `(require-all` opens on the filter's
/// line, its members follow four spaces in, and it closes on the last member's line.
const MEMBER: &str = "\n    ";

/// A rule's filters, which SBPL reads as alternatives: the rule applies where any matches.
/// Each sits on its own line under the rule's head, optionally after a `;;` comment; the
/// template writes `(allow OPERATIONS{{ list }})`. Empty when no filter was added, and the
/// template must then write no rule at all: a rule without filters applies everywhere.
#[derive(Default)]
pub(crate) struct Alternatives(String);

impl Alternatives {
    pub(crate) fn into_string(self) -> String {
        self.0
    }

    /// The same text indented `levels` more (two spaces each), to sit inside another filter.
    /// Only the separators are line breaks: a literal with a control character is refused
    /// before it gets here (`escape.rs`).
    pub(crate) fn nested(&self, levels: usize) -> String {
        self.0.replace("\n", &format!("\n{}", "  ".repeat(levels)))
    }

    /// `comment` is fixed text from the renderer (never a path or a name from the policy).
    fn next(&mut self, comment: Option<&str>) -> &mut String {
        if let Some(c) = comment {
            self.0.push_str("\n  ;; ");
            self.0.push_str(c);
        }
        self.0.push_str("\n  ");
        &mut self.0
    }

    /// A file region: `root` minus the folders `except`, minus the single paths `also`.
    /// All arguments are escaped literals.
    pub(crate) fn files(
        &mut self,
        comment: Option<&str>,
        root: &str,
        except: &[String],
        also: &[String],
    ) {
        let out = self.next(comment);
        if except.is_empty() && also.is_empty() {
            write!(out, "(subpath {root})").expect("writing to a String");
            return;
        }
        write!(out, "(require-all{MEMBER}(subpath {root})").expect("writing to a String");
        for x in except {
            write!(
                out,
                "{MEMBER}(require-not (literal {x})){MEMBER}(require-not (subpath {x}))"
            )
            .expect("writing to a String");
        }
        for k in also {
            write!(out, "{MEMBER}(require-not (literal {k}))").expect("writing to a String");
        }
        out.push(')');
    }

    /// A Unix-socket region: `root` minus the folders `except`, minus the single sockets
    /// `also`, on the `side` given.
    pub(crate) fn sockets(&mut self, side: Side, root: &str, except: &[String], also: &[String]) {
        let side = side.word();
        let out = self.next(None);
        if except.is_empty() && also.is_empty() {
            write!(out, "({side} unix-socket (subpath {root}))").expect("writing to a String");
            return;
        }
        write!(
            out,
            "(require-all{MEMBER}({side} unix-socket (subpath {root}))"
        )
        .expect("writing to a String");
        for x in except {
            write!(
                out,
                "{MEMBER}(require-not ({side} unix-socket (subpath {x})))"
            )
            .expect("writing to a String");
        }
        for k in also {
            write!(
                out,
                "{MEMBER}(require-not ({side} unix-socket (path-literal {k})))"
            )
            .expect("writing to a String");
        }
        out.push(')');
    }

    /// Folders: `(subpath P)` each.
    pub(crate) fn subpaths(&mut self, literals: &[String]) {
        for l in literals {
            write!(self.next(None), "(subpath {l})").expect("writing to a String");
        }
    }

    /// Regexes: `(regex R)` each (`R` an escaped literal).
    pub(crate) fn regexes(&mut self, comment: Option<&str>, literals: &[String]) {
        for (i, l) in literals.iter().enumerate() {
            let comment = comment.filter(|_| i == 0);
            write!(self.next(comment), "(regex {l})").expect("writing to a String");
        }
    }

    /// A regex outside the folders `except`:
    /// `(require-all (regex R) (require-not (subpath X))…)`, or `(regex R)` alone.
    pub(crate) fn regex_outside(&mut self, comment: Option<&str>, regex: &str, except: &[String]) {
        let out = self.next(comment);
        if except.is_empty() {
            write!(out, "(regex {regex})").expect("writing to a String");
            return;
        }
        write!(out, "(require-all{MEMBER}(regex {regex})").expect("writing to a String");
        for x in except {
            write!(out, "{MEMBER}(require-not (subpath {x}))").expect("writing to a String");
        }
        out.push(')');
    }

    /// Single paths: `(literal P)` each.
    pub(crate) fn literals(&mut self, literals: &[String]) {
        for l in literals {
            write!(self.next(None), "(literal {l})").expect("writing to a String");
        }
    }
}

/// Which end of a Unix socket a filter names.
#[derive(Clone, Copy)]
pub(crate) enum Side {
    /// The socket connected to (`network-outbound`).
    Remote,
    /// The socket bound (`network-bind`).
    Local,
}

impl Side {
    fn word(self) -> &'static str {
        match self {
            Side::Remote => "remote",
            Side::Local => "local",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn file_filters() {
        let mut a = Alternatives::default();
        a.files(None, "\"/a\"", &[], &[]);
        a.files(
            Some("grant (rw)"),
            "\"/a\"",
            &s(&["\"/a/x\""]),
            &s(&["\"/a/k\""]),
        );
        a.files(None, "\"/\"", &[], &s(&["\"/u\""]));
        assert_eq!(
            a.into_string(),
            "\n  (subpath \"/a\")\
             \n  ;; grant (rw)\
             \n  (require-all\n    (subpath \"/a\")\n    (require-not (literal \"/a/x\"))\
             \n    (require-not (subpath \"/a/x\"))\n    (require-not (literal \"/a/k\")))\
             \n  (require-all\n    (subpath \"/\")\n    (require-not (literal \"/u\")))"
        );
    }

    #[test]
    fn socket_filters_and_literals() {
        let mut a = Alternatives::default();
        a.sockets(Side::Remote, "\"/a\"", &[], &[]);
        a.sockets(Side::Local, "\"/a\"", &s(&["\"/a/x\""]), &[]);
        a.sockets(Side::Remote, "\"/a\"", &[], &s(&["\"/a/s\""]));
        a.literals(&s(&["\"/k\""]));
        assert_eq!(
            a.into_string(),
            "\n  (remote unix-socket (subpath \"/a\"))\
             \n  (require-all\n    (local unix-socket (subpath \"/a\"))\
             \n    (require-not (local unix-socket (subpath \"/a/x\"))))\
             \n  (require-all\n    (remote unix-socket (subpath \"/a\"))\
             \n    (require-not (remote unix-socket (path-literal \"/a/s\"))))\
             \n  (literal \"/k\")"
        );
    }

    #[test]
    fn nothing_added_is_empty() {
        assert_eq!(Alternatives::default().into_string(), "");
    }
}
