//! The autorun guard as SBPL filters: what the profile's last rules deny.
//!
//! A guarded path refuses every write whatever the grants say (`Policy::decide`), so these
//! are the profile's only denials besides `(deny default)`, placed after every allow (the last
//! matching rule wins) instead of carved out of each writable region. Each guarded path is
//! named as its bytes (`subpath`) and as a regex for every spelling of it (`spelled`), since
//! APFS opens `~/.ZSHRC` as `~/.zshrc`; its ancestors, however spelled, are never deleted or
//! renamed. On macOS the repository pattern guards every git folder, and everything in it,
//! under the home, except inside read-write grants, where only that pattern is lifted.
//!
//! The other denials after every allow are the names reserved in every spelling
//! (`policy/reserved.rs`): creating another spelling of a protected root or refused path,
//! or anything beneath one, as a regex for its every spelling minus its own bytes.

use std::collections::BTreeSet;
use std::path::Path;

use super::RenderError;
use super::escape::path_literal;
use super::filters::Alternatives;
use super::spelled::{
    exact_regex, project_settings_regex, regex_literal, repository_regex, subtree_regex,
};
use crate::policy::{Access, Policy};

/// The guard's filter lists; each empty when there is nothing to deny.
pub(super) struct GuardFilters {
    /// Guarded paths and everything beneath them: every write and link.
    pub writes: String,
    /// Their ancestors and the repositories' git folders: never deleted or renamed.
    pub unlink: String,
    /// Other spellings of protected roots and refused paths, and what lies beneath them:
    /// never created.
    pub respelled: String,
}

fn text<'p>(path: &'p Path, what: &'static str) -> Result<&'p str, RenderError> {
    path.to_str().ok_or_else(|| RenderError::Literal {
        what,
        origin: path.to_string_lossy().into_owned(),
        source: super::escape::EscapeError::NotUtf8 {
            path: path.to_string_lossy().into_owned(),
        },
    })
}

fn literal(regex: &str, what: &'static str, path: &Path) -> Result<String, RenderError> {
    regex_literal(regex).map_err(|source| RenderError::Literal {
        what,
        origin: path.to_string_lossy().into_owned(),
        source,
    })
}

impl GuardFilters {
    pub(super) fn new(policy: &Policy) -> Result<GuardFilters, RenderError> {
        let paths: BTreeSet<&Path> = policy.guarded.iter().map(|g| g.path.as_path()).collect();
        let mut subpaths = Vec::new();
        let mut spellings = Vec::new();
        let mut ancestors = BTreeSet::new();
        for &p in &paths {
            subpaths.push(path_literal(p).map_err(|source| RenderError::Literal {
                what: "guarded path",
                origin: p.to_string_lossy().into_owned(),
                source,
            })?);
            spellings.push(literal(
                &subtree_regex(text(p, "guarded path")?),
                "guarded path",
                p,
            )?);
            ancestors.extend(p.ancestors().skip(1));
        }
        let mut writes = Alternatives::default();
        writes.subpaths(&subpaths);
        writes.regexes(
            Some("every spelling (APFS ignores case and normalisation)"),
            &spellings,
        );

        let mut unlink = Alternatives::default();
        let mut kept = Vec::new();
        for a in ancestors {
            kept.push(literal(
                &exact_regex(text(a, "guarded path's folder")?),
                "guarded path's folder",
                a,
            )?);
        }
        unlink.regexes(None, &kept);

        if policy.autorun.repositories {
            let home = text(&policy.home, "home")?;
            let rw: Vec<String> = policy
                .grants
                .iter()
                .filter(|g| g.access == Access::Rw)
                .map(|g| g.path.as_path())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .map(|g| {
                    path_literal(g).map_err(|source| RenderError::Literal {
                        what: "grant",
                        origin: g.to_string_lossy().into_owned(),
                        source,
                    })
                })
                .collect::<Result<_, _>>()?;
            writes.regex_outside(
                Some("every repository's git folder under the home, outside read-write grants"),
                &literal(&repository_regex(home), "repository pattern", &policy.home)?,
                &rw,
            );
            if !policy.autorun.project_settings.is_empty() {
                let names = &policy.autorun.project_settings;
                writes.regex_outside(
                    Some("project settings in every folder below the home, outside read-write grants"),
                    &literal(&project_settings_regex(home, names), "repository pattern", &policy.home)?,
                    &rw,
                );
            }
        }
        Ok(GuardFilters {
            writes: writes.into_string(),
            unlink: unlink.into_string(),
            respelled: respelled(policy)?,
        })
    }
}

/// Every spelling of each protected root and refused path but its own bytes, and what lies
/// beneath: `(require-all (regex SPELLINGS) (require-not (subpath ROOT)))`.
fn respelled(policy: &Policy) -> Result<String, RenderError> {
    let roots: BTreeSet<&Path> = policy
        .protected
        .iter()
        .chain(&policy.refuse)
        .map(|r| r.path.as_path())
        .collect();
    let mut out = Alternatives::default();
    for (i, &r) in roots.iter().enumerate() {
        let what = "protected root or refused path";
        let own = path_literal(r).map_err(|source| RenderError::Literal {
            what,
            origin: r.to_string_lossy().into_owned(),
            source,
        })?;
        let comment =
            (i == 0).then_some("every other spelling (APFS ignores case and normalisation)");
        out.regex_outside(
            comment,
            &literal(&subtree_regex(text(r, what)?), what, r)?,
            &[own],
        );
    }
    Ok(out.into_string())
}
