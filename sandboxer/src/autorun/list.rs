//! The autorun list as data (`profiles/autorun.toml`, embedded): its entries expanded for one
//! person, with errors that name the file, line and field.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::repos::ScanLimits;
use crate::Target;
use crate::located::{DataFileError, LineIndex, toml_field_and_message};
use crate::ways_out::{Env, checked_path, expand_template};

/// The embedded list; `--profiles-dir DIR` reads `DIR/autorun.toml` instead.
pub const EMBEDDED: &str = include_str!("../../../profiles/autorun.toml");

/// What the Linux masks put at a guarded path that does not exist at launch, so that it
/// cannot be created from inside (see `profiles/autorun.toml`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Missing {
    /// An empty folder.
    Folder,
    /// A file with this content: only where such a file means what no file meant.
    File { content: String },
    /// Nothing: any new file there changes what happens. A gap on Linux (`autorun-absent`).
    None,
}

impl Missing {
    pub fn as_str(&self) -> &'static str {
        match self {
            Missing::Folder => "folder",
            Missing::File { .. } => "file",
            Missing::None => "none",
        }
    }
}

/// One guarded path, expanded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub path: PathBuf,
    pub why: String,
    pub missing: Missing,
    /// Where it came from: `autorun.toml:42 guard[3].path`, `(programs) claude`.
    pub origin: String,
}

/// How repositories under the home are looked for (`[repositories]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepositorySettings {
    /// Names in a working tree (`.claude`, `.mcp.json`, `.vscode`, …) whose project settings a
    /// CLI or editor the person runs there later obeys once it trusts the folder.
    pub project_settings: Vec<String>,
    pub limits: ScanLimits,
}

/// The list for one target and person.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct List {
    pub entries: Vec<Entry>,
    pub repositories: RepositorySettings,
    /// Command names resolved on `$PATH` at launch ([`super::programs`]).
    pub programs: Vec<String>,
    /// Whether every `$PATH` folder inside the home is guarded.
    pub path_folders_in_home: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    version: Spanned<i64>,
    #[serde(default)]
    guard: Vec<RawEntry>,
    repositories: RawRepositories,
    programs: RawPrograms,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    path: Spanned<String>,
    #[serde(default)]
    on: Option<Spanned<Vec<String>>>,
    missing: Spanned<String>,
    #[serde(default)]
    content: Option<Spanned<String>>,
    why: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRepositories {
    #[serde(default)]
    project_settings: Vec<Spanned<String>>,
    max_depth: usize,
    max_dirs: usize,
    budget_ms: u64,
    skip: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrograms {
    path_folders_in_home: bool,
    names: Vec<Spanned<String>>,
}

/// Reads `profiles_dir/autorun.toml` when given and present, else the embedded list, and
/// expands it for `env` on `target`.
pub fn load(target: Target, profiles_dir: Option<&Path>, env: &Env) -> Result<List, DataFileError> {
    if let Some(dir) = profiles_dir {
        let file = dir.join("autorun.toml");
        if file.exists() {
            let label = file.display().to_string();
            let text = std::fs::read_to_string(&file).map_err(|e| DataFileError {
                file: label.clone(),
                line: 0,
                column: 0,
                field: "(file)".into(),
                message: format!("cannot read the autorun list: {e}"),
            })?;
            return parse(target, &text, &label, env);
        }
    }
    parse(target, EMBEDDED, "(embedded autorun.toml)", env)
}

/// Expands the list in `text` (named `file` in errors) for `env` on `target`: entries for other
/// targets and entries whose optional variable is unset are left out; duplicates are dropped.
pub fn parse(target: Target, text: &str, file: &str, env: &Env) -> Result<List, DataFileError> {
    let lines = LineIndex::new(text);
    let err = |offset: usize, field: &str, message: String| {
        let (line, column) = lines.line_col(offset);
        DataFileError {
            file: file.into(),
            line,
            column,
            field: field.into(),
            message,
        }
    };
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let (field, message) = toml_field_and_message(&e);
        err(e.span().map_or(0, |s| s.start), &field, message)
    })?;
    if *raw.version.get_ref() != 1 {
        return Err(err(
            raw.version.span().start,
            "version",
            format!(
                "unsupported autorun list version {}; this sandboxer reads version 1",
                raw.version.get_ref()
            ),
        ));
    }
    let mut entries: Vec<Entry> = Vec::new();
    let mut seen: std::collections::HashSet<std::ffi::OsString> = Default::default();
    for (i, e) in raw.guard.iter().enumerate() {
        let field = |f: &str| format!("guard[{i}].{f}");
        if let Some(on) = &e.on {
            for t in on.get_ref() {
                if t != "linux" && t != "macos" {
                    return Err(err(
                        on.span().start,
                        &field("on"),
                        format!("unknown target {t:?}; known: \"linux\", \"macos\""),
                    ));
                }
            }
            if !on.get_ref().iter().any(|t| *t == target.to_string()) {
                continue;
            }
        }
        let missing = match (e.missing.get_ref().as_str(), &e.content) {
            ("folder", None) => Missing::Folder,
            ("none", None) => Missing::None,
            ("file", content) => Missing::File {
                content: content
                    .as_ref()
                    .map(|c| c.get_ref().clone())
                    .unwrap_or_default(),
            },
            ("folder" | "none", Some(c)) => {
                return Err(err(
                    c.span().start,
                    &field("content"),
                    format!(
                        "content is only for missing = \"file\", not {:?}",
                        e.missing.get_ref()
                    ),
                ));
            }
            (other, _) => {
                return Err(err(
                    e.missing.span().start,
                    &field("missing"),
                    format!("unknown value {other:?}; known: \"folder\", \"file\", \"none\""),
                ));
            }
        };
        let at = e.path.span().start;
        let Some(expanded) = expand_template(target, e.path.get_ref(), env)
            .map_err(|m| err(at, &field("path"), m))?
        else {
            continue;
        };
        let path = checked_path(Path::new(&expanded)).map_err(|m| err(at, &field("path"), m))?;
        // Normal paths: the same path is the same bytes.
        if !seen.insert(path.as_os_str().to_owned()) {
            continue;
        }
        let (line, _) = lines.line_col(at);
        entries.push(Entry {
            path,
            why: e.why.clone(),
            missing,
            origin: format!("{file}:{line} {}", field("path")),
        });
    }
    let r = &raw.repositories;
    for (i, n) in r.project_settings.iter().enumerate() {
        let name = n.get_ref();
        if name.is_empty()
            || name.contains('/')
            || name.contains('\0')
            || name == "."
            || name == ".."
        {
            return Err(err(
                n.span().start,
                &format!("repositories.project_settings[{i}]"),
                format!("{name:?} must be one name in a working tree, like \".claude\""),
            ));
        }
    }
    let mut programs = Vec::new();
    for (i, n) in raw.programs.names.iter().enumerate() {
        let name = n.get_ref();
        if name.is_empty() || name.contains('/') || name.contains('\0') {
            return Err(err(
                n.span().start,
                &format!("programs.names[{i}]"),
                format!("{name:?} must be a command name, without '/'"),
            ));
        }
        if !programs.contains(name) {
            programs.push(name.clone());
        }
    }
    Ok(List {
        entries,
        repositories: RepositorySettings {
            project_settings: r
                .project_settings
                .iter()
                .map(|n| n.get_ref().clone())
                .collect(),
            limits: ScanLimits {
                max_depth: r.max_depth,
                max_dirs: r.max_dirs,
                budget: Duration::from_millis(r.budget_ms),
                skip: r.skip.clone(),
            },
        },
        programs,
        path_folders_in_home: raw.programs.path_folders_in_home,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn env(vars: &[(&str, &str)]) -> Env {
        Env {
            uid: 501,
            user: "ada".into(),
            home: PathBuf::from("/Users/ada"),
            vars: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
            extra: Vec::new(),
        }
    }

    fn paths(list: &List) -> Vec<String> {
        list.entries
            .iter()
            .map(|e| e.path.display().to_string())
            .collect()
    }

    #[test]
    fn the_embedded_list_expands_per_target() {
        let mac = load(Target::Macos, None, &env(&[])).unwrap();
        let linux = load(Target::Linux, None, &env(&[])).unwrap();
        let (mac, linux) = (paths(&mac), paths(&linux));
        for both in [
            "/Users/ada/.zshrc",
            "/Users/ada/.ssh",
            "/Users/ada/.config/git",
        ] {
            assert!(mac.contains(&both.to_string()) && linux.contains(&both.to_string()));
        }
        assert!(mac.contains(&"/Users/ada/Library/LaunchAgents".to_string()));
        assert!(!linux.contains(&"/Users/ada/Library/LaunchAgents".to_string()));
        assert!(linux.contains(&"/Users/ada/.config/autostart".to_string()));
        assert!(!mac.contains(&"/Users/ada/.config/autostart".to_string()));
        // {zdotdir} is optional: left out when unset, there when set.
        assert!(!linux.iter().any(|p| p.contains("zdot")));
        let set = load(Target::Linux, None, &env(&[("ZDOTDIR", "/Users/ada/zdot")])).unwrap();
        assert!(paths(&set).contains(&"/Users/ada/zdot".to_string()));
    }

    #[test]
    fn xdg_config_home_moves_the_config_entries() {
        let list = load(
            Target::Linux,
            None,
            &env(&[("XDG_CONFIG_HOME", "/Users/ada/cfg")]),
        )
        .unwrap();
        let p = paths(&list);
        assert!(p.contains(&"/Users/ada/cfg/git".to_string()), "{p:?}");
        assert!(!p.contains(&"/Users/ada/.config/git".to_string()));
        let bad = load(Target::Linux, None, &env(&[("XDG_CONFIG_HOME", "cfg")])).unwrap_err();
        assert!(bad.message.contains("not an absolute path"), "{bad}");
    }

    #[test]
    fn the_bash_profile_placeholder_reads_what_bash_reads_without_one() {
        let list = load(Target::Linux, None, &env(&[])).unwrap();
        let e = list
            .entries
            .iter()
            .find(|e| e.path.ends_with(".bash_profile"))
            .unwrap();
        let Missing::File { content } = &e.missing else {
            panic!("{:?}", e.missing)
        };
        assert!(content.contains(". ~/.bash_login") && content.contains(". ~/.profile"));
    }

    fn bad(text: &str) -> DataFileError {
        parse(Target::Linux, text, "t.toml", &env(&[])).unwrap_err()
    }

    const TAIL: &str = "[repositories]\nmax_depth=1\nmax_dirs=1\nbudget_ms=1\nskip=[]\n[programs]\npath_folders_in_home=true\nnames=[]\n";

    #[test]
    fn bad_lists_name_the_line_and_field() {
        let e = bad(&format!(
            "version = 1\n[[guard]]\npath = \"{{home}}/x\"\nmissing = \"maybe\"\nwhy = \"w\"\n{TAIL}"
        ));
        assert_eq!((e.line, e.field.as_str()), (4, "guard[0].missing"), "{e}");
        let e = bad(&format!(
            "version = 1\n[[guard]]\npath = \"{{nope}}/x\"\nmissing = \"file\"\nwhy = \"w\"\n{TAIL}"
        ));
        assert_eq!((e.line, e.field.as_str()), (3, "guard[0].path"), "{e}");
        assert!(e.message.contains("unknown variable"), "{e}");
        let e = bad(&format!(
            "version = 1\n[[guard]]\npath = \"{{home}}/../x\"\nmissing = \"file\"\nwhy = \"w\"\n{TAIL}"
        ));
        assert!(e.message.contains("'..'"), "{e}");
        let e = bad(&format!(
            "version = 1\n[[guard]]\npath = \"{{home}}/x\"\nmissing = \"folder\"\ncontent = \"a\"\nwhy = \"w\"\n{TAIL}"
        ));
        assert_eq!(e.field, "guard[0].content", "{e}");
        let e = bad(&format!(
            "version = 1\n[[guard]]\npath = \"{{home}}/x\"\non = [\"windows\"]\nmissing = \"file\"\nwhy = \"w\"\n{TAIL}"
        ));
        assert_eq!(e.field, "guard[0].on", "{e}");
        let e = bad(&format!("version = 2\n{TAIL}"));
        assert_eq!((e.line, e.field.as_str()), (1, "version"), "{e}");
        let e = bad("version = 1\n[[guard]]\npath = \"{home}/x\"\nwhy = \"w\"\n");
        assert!(e.message.contains("missing"), "{e}");
        let e = bad(&format!(
            "version = 1\n{}",
            TAIL.replace("[repositories]\n", "[repositories]\nguard=[\"hooks\"]\n")
        ));
        assert!(
            e.message.contains("guard"),
            "an unknown field is refused: {e}"
        );
        let e = bad(&format!(
            "version = 1\n{}",
            TAIL.replace("names=[]", "names=[\"a/b\"]")
        ));
        assert_eq!(e.field, "programs.names[0]", "{e}");
    }
}
