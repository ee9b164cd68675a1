//! Loading a policy: TOML with spans → validated, resolved [`Policy`]. Every error names the
//! file, line, column and field. Nothing is guessed: a path that cannot be resolved the way
//! the kernel will see it is an error, not a best effort.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};

use toml::Spanned;

use super::document::PolicyDocument;
use super::network;
use super::resolve::{ResolveOptions, option_error};
use super::{
    Access, AutorunKnobs, Base, ClosedBase, Enforce, Grant, Guarded, LinuxKnobs, MacosKnobs,
    Origin, Policy, Rule, launchers::LauncherPath,
};
use crate::autorun::{Missing, RepositorySettings, repos};
use crate::located::LineIndex;
use crate::network::{NetworkMode, ProxyEndpoint};
use crate::paths::{Resolver, canonicalize_existing_prefix, normalize, within};
use crate::target::Target;

/// The embedded default policy for a target: home open, the product's state root on that OS
/// protected, launchers blocked. `sandboxer` uses it when no `--policy` is given.
pub fn default_policy(target: Target) -> &'static str {
    match target {
        Target::Linux => include_str!("../../../profiles/policies/default-linux.toml"),
        Target::Macos => include_str!("../../../profiles/policies/default-macos.toml"),
    }
}

/// A policy that cannot be loaded, with where and why.
pub type PolicyError = crate::located::DataFileError;

/// Folders a closed base opens when the file does not say. Read: the system; write: the
/// character devices every program expects to write.
fn closed_defaults(target: Target) -> (&'static [&'static str], &'static [&'static str]) {
    match target {
        Target::Macos => (
            &[
                "/System",
                "/usr",
                "/bin",
                "/sbin",
                "/Library",
                "/Applications",
                "/opt",
                "/private/etc",
                "/dev",
            ],
            &["/dev/null", "/dev/zero", "/dev/tty", "/dev/dtracehelper"],
        ),
        Target::Linux => (
            &[
                "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt", "/dev",
                "/proc", "/sys",
            ],
            &[
                "/dev/null",
                "/dev/zero",
                "/dev/full",
                "/dev/tty",
                "/dev/pts",
            ],
        ),
    }
}

/// Looks for git repositories under `home` (outside protected roots and read-write grants: a
/// chat's own repositories stay its own) and adds each one's git folder, and the project
/// settings its working tree holds, to `guarded`. Returns what the scan's bounds left out, for
/// the plan and `doctor`.
fn repositories(
    settings: &RepositorySettings,
    home: &Path,
    protected: &[Rule],
    grants: &[Grant],
    guarded: &mut Vec<Guarded>,
) -> Vec<String> {
    let exclude = |p: &Path| {
        protected.iter().any(|r| within(p, &r.path))
            || grants
                .iter()
                .any(|g| g.access == Access::Rw && within(p, &g.path))
    };
    let found = repos::scan(home, &settings.limits, &exclude);
    let mut known: std::collections::HashSet<PathBuf> =
        guarded.iter().map(|g| g.path.clone()).collect();
    let origin = Origin {
        file: "(autorun)".into(),
        line: 0,
        field: "repositories".into(),
    };
    for repo in &found.repos {
        // Project settings that exist at launch; one missing then can be made (a placeholder
        // would show in the person's project: docs/linux.md).
        let tree = repo.git_dir.parent().filter(|_| !repo.bare);
        for (tree, name) in tree.into_iter().flat_map(|t| {
            settings
                .project_settings
                .iter()
                .map(move |n| (t, t.join(n)))
        }) {
            if std::fs::symlink_metadata(&name).is_ok() && known.insert(name.clone()) {
                guarded.push(Guarded {
                    missing: Missing::None,
                    origin: origin.clone(),
                    why: Some(format!(
                        "project settings in the repository {}: a CLI or editor the person \
                         runs there obeys their hooks, MCP servers and tasks once it trusts \
                         the folder",
                        tree.display()
                    )),
                    path: name,
                    repository: true,
                });
            }
        }
        let path = repo.git_dir.clone();
        if !known.insert(path.clone()) {
            continue;
        }
        guarded.push(Guarded {
            missing: Missing::None,
            origin: origin.clone(),
            why: Some(format!(
                "the git repository {}: git runs its hooks and what its config names \
                 (core.fsmonitor, core.hooksPath, filters) for the person later, and the rest \
                 of its git folder can point it at other hooks and config (commondir, \
                 config.worktree, a submodule's or worktree's own git folder)",
                repo.git_dir.display()
            )),
            path,
            repository: true,
        });
    }
    found.beyond.iter().map(repos::Beyond::describe).collect()
}

/// The guard on a symlink that the guarded `path` is reached through ([`Resolver::links_to`]).
fn link_on_the_way(link: PathBuf, path: &Path, origin: &Origin) -> Guarded {
    Guarded {
        why: Some(format!(
            "a symlink on the way to {}: pointed elsewhere, or replaced by a folder, it would \
             let that name be made anew",
            path.display()
        )),
        path: link,
        origin: origin.clone(),
        missing: Missing::None,
        repository: false,
    }
}

// ---- loading -------------------------------------------------------------------------------

impl Policy {
    /// Reads and resolves the policy file at `path`.
    pub fn load(path: &Path, opts: &ResolveOptions) -> Result<Policy, PolicyError> {
        let label = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| PolicyError {
            file: label.clone(),
            line: 0,
            column: 0,
            field: "(file)".into(),
            message: format!("cannot read the policy: {e}"),
        })?;
        Policy::from_toml(&text, &label, opts)
    }

    /// Parses and resolves policy text; `file` names it in errors.
    pub fn from_toml(text: &str, file: &str, opts: &ResolveOptions) -> Result<Policy, PolicyError> {
        let doc = PolicyDocument::from_toml(text, file)?;
        let cx = Cx {
            file,
            opts,
            lines: LineIndex::new(text),
        };
        cx.resolve(doc)
    }
}

struct Cx<'a> {
    file: &'a str,
    opts: &'a ResolveOptions,
    lines: LineIndex,
}

impl Cx<'_> {
    fn error(&self, span: Range<usize>, field: &str, message: impl Into<String>) -> PolicyError {
        let (line, column) = self.lines.line_col(span.start);
        PolicyError {
            file: self.file.into(),
            line,
            column,
            field: field.into(),
            message: message.into(),
        }
    }

    fn origin(&self, span: &Range<usize>, field: &str) -> Origin {
        Origin {
            file: self.file.into(),
            line: self.lines.line(span.start),
            field: field.into(),
        }
    }

    fn resolve(&self, raw: PolicyDocument) -> Result<Policy, PolicyError> {
        let target = self.opts.target;
        if *raw.version.get_ref() != 1 {
            return Err(self.error(
                raw.version.span(),
                "version",
                format!(
                    "unsupported policy version {}; this sandboxer reads version 1",
                    raw.version.get_ref()
                ),
            ));
        }
        let base = match raw.base.get_ref().as_str() {
            "open" => Base::Open,
            "closed" => Base::Closed,
            other => {
                return Err(self.error(
                    raw.base.span(),
                    "base",
                    format!("unknown base {other:?}; expected \"open\" or \"closed\""),
                ));
            }
        };

        let mut protected = Vec::new();
        for (i, p) in raw.protected.iter().enumerate() {
            let field = format!("protected[{i}].path");
            let (path, _) = self.path(&p.path, &field)?;
            protected.push(Rule {
                path,
                origin: self.origin(&p.path.span(), &field),
                why: p.why.clone(),
            });
        }
        let ways_out = raw.linux.ways_out.unwrap_or(true);
        let macos_ways_out = raw.macos.ways_out.unwrap_or(true);
        // `opts.ways_out` is the list for `target` (see `crate::ways_out::load`).
        let ways_out_apply = match target {
            Target::Linux => ways_out,
            Target::Macos => macos_ways_out,
        };
        for (path, why) in self.opts.ways_out.iter().filter(|_| ways_out_apply) {
            let path = if self.opts.resolve_symlinks {
                canonicalize_existing_prefix(path).map_err(|e| {
                    option_error("ways_out", format!("cannot resolve {path:?}: {e}"))
                })?
            } else {
                path.clone()
            };
            protected.push(Rule {
                path,
                origin: Origin {
                    file: "(ways out)".into(),
                    line: 0,
                    field: "protected".into(),
                },
                why: Some(why.clone()),
            });
        }

        super::devices::protect(target, &mut protected);

        // Lookups by ancestor walk in hash maps keep loading linear in the number of rules
        // (times the path depth), not quadratic.
        let protected_index: HashMap<&Path, usize> = protected
            .iter()
            .enumerate()
            .map(|(i, p)| (p.path.as_path(), i))
            .collect();
        let mut grant_index: HashMap<PathBuf, usize> = HashMap::new();
        let mut grants: Vec<Grant> = Vec::new();
        for (i, g) in raw.grant.iter().enumerate() {
            let field = format!("grant[{i}].path");
            let (path, lexical) = self.path(&g.path, &field)?;
            let access = match g.access.get_ref().as_str() {
                "ro" => Access::Ro,
                "rw" => Access::Rw,
                other => {
                    return Err(self.error(
                        g.access.span(),
                        &format!("grant[{i}].access"),
                        format!("unknown access {other:?}; expected \"ro\" or \"rw\""),
                    ));
                }
            };
            let in_protected = path
                .ancestors()
                .find_map(|a| protected_index.get(a))
                .map(|&k| &protected[k]);
            if let Some(root) = in_protected
                && path != lexical
            {
                return Err(self.error(
                    g.path.span(),
                    &field,
                    format!(
                        "{:?} resolves through a symlink to {:?}, inside protected root {:?}; \
                         grant the real folder by its own path",
                        lexical, path, root.path
                    ),
                ));
            }
            if base == Base::Open && in_protected.is_none() {
                return Err(self.error(
                    g.path.span(),
                    &field,
                    format!(
                        "{path:?} is outside every protected root and the base is open, so the \
                         grant means nothing; protect its parent or remove it"
                    ),
                ));
            }
            if let Some(prev) = grant_index.get(&path).map(|&k| &grants[k]) {
                if prev.access != access {
                    return Err(self.error(
                        g.path.span(),
                        &field,
                        format!(
                            "{path:?} is granted twice with different access ({:?} at {})",
                            prev.access, prev.origin
                        ),
                    ));
                }
                continue;
            }
            grant_index.insert(path.clone(), grants.len());
            grants.push(Grant {
                path,
                access,
                origin: self.origin(&g.path.span(), &field),
                why: g.why.clone(),
            });
        }

        let mut refuse = Vec::new();
        for (i, r) in raw.refuse.iter().enumerate() {
            let field = format!("refuse[{i}].path");
            let (path, _) = self.path(&r.path, &field)?;
            if !path.ancestors().any(|a| grant_index.contains_key(a)) {
                return Err(self.error(
                    r.path.span(),
                    &field,
                    format!(
                        "{path:?} is outside every grant; refuse narrows a grant, so it must lie \
                         inside one (use [[protected]] to close a folder)"
                    ),
                ));
            }
            refuse.push(Rule {
                path,
                origin: self.origin(&r.path.span(), &field),
                why: r.why.clone(),
            });
        }

        super::devices::grant(target, &mut grants);

        let autorun_guard = raw.autorun.guard.unwrap_or(true);
        let mut guarded = self.guarded(&raw, autorun_guard)?;
        let beyond = match (&self.opts.repositories, autorun_guard) {
            (Some(settings), true) if target == Target::Linux => {
                repositories(settings, &self.opts.home, &protected, &grants, &mut guarded)
            }
            _ => Vec::new(),
        };

        let mut launchers = self.opts.launchers.clone();
        launchers.block = raw.launchers.block;
        for (i, e) in raw.launchers.extra.iter().enumerate() {
            let field = format!("launchers.extra[{i}]");
            let (path, _) = self.path(e, &field)?;
            launchers.exec.push(LauncherPath {
                path,
                why: format!("listed in {} {field}", self.file),
            });
        }

        let mut unix_sockets = Vec::new();
        for (i, e) in raw.unix_sockets.iter().enumerate() {
            let (path, _) = self.path(e, &format!("unix_sockets[{i}]"))?;
            if !unix_sockets.contains(&path) {
                unix_sockets.push(path);
            }
        }

        let (def_read, def_write) = closed_defaults(target);
        let closed = ClosedBase {
            read: self.folder_list(raw.closed.read.as_deref(), def_read, "closed.read")?,
            write: self.folder_list(raw.closed.write.as_deref(), def_write, "closed.write")?,
        };

        let mut deny_mach_services = Vec::new();
        for (i, s) in raw.macos.deny_mach_services.iter().enumerate() {
            let name = s.get_ref();
            let ok = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
            if !ok {
                return Err(self.error(
                    s.span(),
                    &format!("macos.deny_mach_services[{i}]"),
                    format!("{name:?} is not a Mach service name (letters, digits, '.', '-', '_')"),
                ));
            }
            deny_mach_services.push(name.clone());
        }

        let mut allow_mach_services = Vec::new();
        for (i, s) in raw.macos.allow_mach_services.iter().enumerate() {
            // Read only for a policy that names one: parsing the list costs every launch
            // otherwise, Linux's included.
            let refused_on_purpose = &crate::seatbelt::mach::embedded().refused;
            let name = s.get_ref();
            if !refused_on_purpose.iter().any(|r| r.name == *name) {
                let names: Vec<&str> = refused_on_purpose.iter().map(|r| r.name.as_str()).collect();
                return Err(self.error(
                    s.span(),
                    &format!("macos.allow_mach_services[{i}]"),
                    format!(
                        "{name:?} is not a service a policy may open: only those refused on \
                         purpose in profiles/macos/mach-services.toml ({}), each with its risk \
                         written there",
                        names.join(", ")
                    ),
                ));
            }
            allow_mach_services.push(name.clone());
        }

        let log_tag = match &raw.macos.log_tag {
            Some(t) => {
                let tag = t.get_ref();
                let ok = (1..=100).contains(&tag.len())
                    && tag
                        .chars()
                        .all(|c| c.is_ascii_graphic() && c != '"' && c != '\\');
                if !ok {
                    return Err(self.error(
                        t.span(),
                        "macos.log_tag",
                        format!(
                            "{tag:?}: 1 to 100 printable ASCII characters, no spaces, quotes or \
                             backslashes"
                        ),
                    ));
                }
                Some(tag.clone())
            }
            None => None,
        };

        let enforce = match raw
            .linux
            .enforce
            .as_ref()
            .map(|s| (s.get_ref().as_str(), s.span()))
        {
            None | Some(("auto", _)) => Enforce::Auto,
            Some(("masks", _)) => Enforce::Masks,
            Some(("landlock-only", _)) => Enforce::LandlockOnly,
            Some((other, span)) => {
                return Err(self.error(
                    span,
                    "linux.enforce",
                    format!(
                        "unknown enforcement {other:?}; expected \"auto\", \"masks\" or \
                         \"landlock-only\""
                    ),
                ));
            }
        };
        let mask_registry = match &raw.linux.mask_registry {
            Some(s) => Some(self.path(s, "linux.mask_registry")?.0),
            None => None,
        };

        let network = raw
            .network
            .as_ref()
            .map(|section| {
                network::rules(section, |span, field, message| {
                    self.error(span, field, message)
                })
            })
            .transpose()?;
        let network_proxy = match raw.network.as_ref().and_then(|n| n.proxy.as_ref()) {
            Some(p) => {
                let mode = network.as_ref().map(|r| r.mode);
                if !matches!(mode, Some(NetworkMode::Public | NetworkMode::Allowlist)) {
                    return Err(self.error(
                        p.span(),
                        "network.proxy",
                        "the proxy carries modes \"public\" and \"allowlist\"; in this mode it \
                         means nothing (remove it or change the mode)"
                            .to_string(),
                    ));
                }
                let endpoint = ProxyEndpoint::parse(p.get_ref(), target)
                    .map_err(|e| self.error(p.span(), "network.proxy", e.to_string()))?;
                if let ProxyEndpoint::Socket(path) = endpoint {
                    let spanned = Spanned::new(p.span(), path);
                    Some(ProxyEndpoint::Socket(
                        self.path(&spanned, "network.proxy")?.0,
                    ))
                } else {
                    Some(endpoint)
                }
            }
            None => None,
        };

        Ok(Policy {
            target,
            home: self.opts.home.clone(),
            base,
            protected,
            grants,
            refuse,
            guarded,
            autorun: AutorunKnobs {
                guard: autorun_guard,
                repositories_scanned: autorun_guard
                    && target == Target::Linux
                    && self.opts.repositories.is_some(),
                beyond,
                // One pattern on macOS covers every repository (see policy/guard.rs).
                repositories: self.opts.repositories.is_some()
                    && autorun_guard
                    && target == Target::Macos,
                project_settings: match (&self.opts.repositories, autorun_guard, target) {
                    (Some(settings), true, Target::Macos) => settings.project_settings.clone(),
                    _ => Vec::new(),
                },
            },
            launchers,
            closed,
            macos: MacosKnobs {
                deny_mach_services,
                allow_mach_services,
                ways_out: macos_ways_out,
                log_tag,
            },
            linux: LinuxKnobs {
                enforce,
                ways_out,
                nested_user_namespaces: raw.linux.nested_user_namespaces.unwrap_or(false),
                mask_registry,
            },
            unix_sockets,
            network,
            network_proxy,
        })
    }

    /// The policy's own `[[guard]]` entries, then (unless `[autorun] guard = false`) the
    /// autorun list's. A guarded path reached through a symlink is guarded at both paths: the
    /// file it names, and the link, which a rewrite could point elsewhere.
    fn guarded(&self, raw: &PolicyDocument, autorun: bool) -> Result<Vec<Guarded>, PolicyError> {
        let mut out: Vec<Guarded> = Vec::new();
        let mut resolver = Resolver::default();
        let mut known: std::collections::HashSet<PathBuf> = std::collections::HashSet::new();
        let mut push = |g: Guarded| {
            if known.insert(g.path.clone()) {
                out.push(g);
            }
        };
        for (i, g) in raw.guard.iter().enumerate() {
            let field = format!("guard[{i}].path");
            let (path, lexical) = self.path(&g.path, &field)?;
            let missing = match g.missing.as_ref().map(|m| (m.get_ref().as_str(), m.span())) {
                None | Some(("none", _)) => Missing::None,
                Some(("folder", _)) => Missing::Folder,
                Some(("file", _)) => Missing::File {
                    content: g.content.clone().unwrap_or_default(),
                },
                Some((other, span)) => {
                    return Err(self.error(
                        span,
                        &format!("guard[{i}].missing"),
                        format!(
                            "unknown value {other:?}; expected \"folder\", \"file\" or \"none\""
                        ),
                    ));
                }
            };
            if g.content.is_some() && !matches!(missing, Missing::File { .. }) {
                return Err(self.error(
                    g.path.span(),
                    &format!("guard[{i}].content"),
                    "content is only for missing = \"file\"",
                ));
            }
            let origin = self.origin(&g.path.span(), &field);
            let link = self.link_path(&mut resolver, &lexical)?;
            for l in self.links_above(&mut resolver, &lexical)? {
                push(link_on_the_way(l, &lexical, &origin));
            }
            for p in [link, path] {
                push(Guarded {
                    path: p,
                    origin: origin.clone(),
                    why: g.why.clone(),
                    missing: missing.clone(),
                    repository: false,
                });
            }
        }
        for e in self.opts.autorun.iter().filter(|_| autorun) {
            let resolved = if self.opts.resolve_symlinks {
                resolver.resolve(&e.path).map_err(|err| {
                    option_error("autorun", format!("cannot resolve {:?}: {err}", e.path))
                })?
            } else {
                e.path.clone()
            };
            let link = self.link_path(&mut resolver, &e.path)?;
            let origin = Origin {
                file: "(autorun)".into(),
                line: 0,
                field: e.origin.clone(),
            };
            for l in self.links_above(&mut resolver, &e.path)? {
                push(link_on_the_way(l, &e.path, &origin));
            }
            for p in [link, resolved] {
                push(Guarded {
                    path: p,
                    origin: origin.clone(),
                    why: Some(e.why.clone()),
                    missing: e.missing.clone(),
                    repository: false,
                });
            }
        }
        Ok(out)
    }

    /// The symlinks inside the home that a guarded `path` is reached through, above the entry
    /// itself (which [`Self::link_path`] gives): a dotfiles manager's `~/.config` linked into a
    /// repository. A chat that could point one elsewhere, or move it aside and make a real
    /// folder in its place, would make every guarded name beneath it anew; so each is guarded
    /// as itself.
    fn links_above(
        &self,
        resolver: &mut Resolver,
        path: &Path,
    ) -> Result<Vec<PathBuf>, PolicyError> {
        let Some(parent) = path.parent().filter(|_| self.opts.resolve_symlinks) else {
            return Ok(Vec::new());
        };
        let links = resolver
            .links_to(parent)
            .map_err(|e| option_error("guard", format!("cannot resolve {path:?}: {e}")))?;
        Ok(links
            .into_iter()
            .filter(|l| within(l, &self.opts.home))
            .collect())
    }

    /// `path` with every component but the last resolved: the path of the entry itself, which
    /// may be a symlink (a dotfile linked into a dotfiles repository). Both it and what it
    /// names are guarded: rewriting the link is a write too.
    fn link_path(&self, resolver: &mut Resolver, path: &Path) -> Result<PathBuf, PolicyError> {
        if !self.opts.resolve_symlinks {
            return Ok(path.to_path_buf());
        }
        resolver
            .resolve_parent(path)
            .map_err(|e| option_error("guard", format!("cannot resolve {path:?}: {e}")))
    }

    fn folder_list(
        &self,
        given: Option<&[Spanned<PathBuf>]>,
        defaults: &[&str],
        field: &str,
    ) -> Result<Vec<Rule>, PolicyError> {
        match given {
            None => Ok(defaults
                .iter()
                .map(|d| Rule {
                    path: self.opts.target.apply_aliases(Path::new(d)),
                    origin: Origin {
                        file: "(built-in)".into(),
                        line: 0,
                        field: field.into(),
                    },
                    why: None,
                })
                .collect()),
            Some(list) => list
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let f = format!("{field}[{i}]");
                    let (path, _) = self.path(s, &f)?;
                    Ok(Rule {
                        path,
                        origin: self.origin(&s.span(), &f),
                        why: None,
                    })
                })
                .collect(),
        }
    }

    /// Validates and resolves one path as written. Returns the resolved path and the lexical
    /// one (after `~` and aliases, before symlinks), so callers can tell a symlink was followed.
    fn path(&self, s: &Spanned<PathBuf>, field: &str) -> Result<(PathBuf, PathBuf), PolicyError> {
        let err = |m: String| self.error(s.span(), field, m);
        // Read from TOML, a path is text; only one built in code may not be.
        let Some(written) = s.get_ref().to_str() else {
            return Err(err(format!("{:?} is not valid UTF-8", s.get_ref())));
        };
        if written.is_empty() {
            return Err(err("the path is empty".into()));
        }
        if written.contains('\0') {
            return Err(err(format!("{written:?} contains a NUL byte")));
        }
        if self.opts.target == Target::Macos && written.chars().any(char::is_control) {
            return Err(err(format!(
                "{written:?} contains a control character; a Seatbelt profile cannot carry it \
                 safely"
            )));
        }
        let expanded = if written == "~" {
            self.opts.home.clone()
        } else if let Some(rest) = written.strip_prefix("~/") {
            self.opts.home.join(rest)
        } else if written.starts_with('~') {
            return Err(err(format!(
                "{written:?}: only \"~\" and \"~/...\" expand (to the home); \"~user\" does not"
            )));
        } else {
            PathBuf::from(written)
        };
        if !expanded.is_absolute() {
            return Err(err(format!(
                "{written:?} is a relative path; write it absolute or start it with \"~/\""
            )));
        }
        if expanded.components().any(|c| c == Component::ParentDir) {
            return Err(err(format!(
                "{written:?} contains '..'; write the folder it means"
            )));
        }
        let lexical = self
            .opts
            .target
            .apply_aliases(&normalize(&expanded).expect("absolute"));
        let resolved = if self.opts.resolve_symlinks {
            canonicalize_existing_prefix(&lexical)
                .map_err(|e| err(format!("cannot resolve {lexical:?}: {e}")))?
        } else {
            lexical.clone()
        };
        if self.opts.target == Target::Macos && resolved.to_str().is_none() {
            return Err(err(format!(
                "{resolved:?} is not valid UTF-8; a Seatbelt profile cannot name it"
            )));
        }
        if self.opts.target == Target::Macos
            && resolved.to_string_lossy().chars().any(char::is_control)
        {
            return Err(err(format!(
                "{resolved:?} contains a control character; a Seatbelt profile cannot carry it \
                 safely"
            )));
        }
        Ok((resolved, lexical))
    }
}
