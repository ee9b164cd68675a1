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
//! - sockets: `(SIDE unix-socket (subpath R))`, or
//!   `(require-all (SIDE unix-socket (subpath R)) (require-not (SIDE unix-socket (subpath X)))…)`
//!   with SIDE `remote` (connect) or `local` (bind), the forms Codex's and Anthropic's
//!   profiles use.

use std::fmt::Write as _;

/// One literal per line, indented under the rule: `(require-all` opens on the rule's second
/// line, its members follow four spaces in, and it closes on the last member's line.
const MEMBER: &str = "\n    ";

/// A file-operation filter for the region `root` minus the folders `except`, minus the
/// single paths `also`. All arguments are escaped literals.
pub(crate) fn files(root: &str, except: &[String], also: &[String]) -> String {
    if except.is_empty() && also.is_empty() {
        return format!("(subpath {root})");
    }
    let mut out = String::with_capacity(32 + root.len() + 60 * (except.len() * 2 + also.len()));
    write!(out, "(require-all{MEMBER}(subpath {root})").expect("writing to a String");
    for x in except {
        write!(out, "{MEMBER}(require-not (literal {x})){MEMBER}(require-not (subpath {x}))")
            .expect("writing to a String");
    }
    for k in also {
        write!(out, "{MEMBER}(require-not (literal {k}))").expect("writing to a String");
    }
    out.push(')');
    out
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

/// A Unix-socket filter for the region `root` minus the folders `except`.
pub(crate) fn sockets(side: Side, root: &str, except: &[String]) -> String {
    let side = side.word();
    if except.is_empty() {
        return format!("({side} unix-socket (subpath {root}))");
    }
    let mut out = String::with_capacity(48 + root.len() + 60 * except.len());
    write!(out, "(require-all{MEMBER}({side} unix-socket (subpath {root}))")
        .expect("writing to a String");
    for x in except {
        write!(out, "{MEMBER}(require-not ({side} unix-socket (subpath {x})))")
            .expect("writing to a String");
    }
    out.push(')');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn file_filters() {
        assert_eq!(files("\"/a\"", &[], &[]), "(subpath \"/a\")");
        assert_eq!(
            files("\"/a\"", &s(&["\"/a/x\""]), &s(&["\"/a/k\""])),
            "(require-all\n    (subpath \"/a\")\n    (require-not (literal \"/a/x\"))\n    \
             (require-not (subpath \"/a/x\"))\n    (require-not (literal \"/a/k\")))"
        );
        assert_eq!(
            files("\"/\"", &[], &s(&["\"/u\""])),
            "(require-all\n    (subpath \"/\")\n    (require-not (literal \"/u\")))"
        );
    }

    #[test]
    fn socket_filters() {
        assert_eq!(sockets(Side::Remote, "\"/a\"", &[]), "(remote unix-socket (subpath \"/a\"))");
        assert_eq!(
            sockets(Side::Local, "\"/a\"", &s(&["\"/a/x\""])),
            "(require-all\n    (local unix-socket (subpath \"/a\"))\n    \
             (require-not (local unix-socket (subpath \"/a/x\"))))"
        );
    }
}
