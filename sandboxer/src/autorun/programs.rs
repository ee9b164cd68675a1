//! Programs run outside a sandbox later: the coding CLIs, tmux, `sandboxer` and `dispatcher`.
//! A confined process that rewrites one (a CLI in `~/.local/bin`, a `sandboxer` from `cargo
//! install`) gets its code run unconfined the next time the person, or the dispatcher, starts
//! it. Each is found on `$PATH` and guarded as three paths: the name on `$PATH` (a symlink
//! re-pointed elsewhere is a rewrite too), the file it resolves to, and its package folder
//! (the nearest folder above holding a `package.json`, for a CLI installed by npm: the script
//! it runs is a file of that folder).

use std::path::{Path, PathBuf};

use super::list::{Entry, Missing};

/// How far above the resolved file a `package.json` is looked for (`lib/node_modules/@scope/
/// pkg/dist/bin/cli.js` is four folders up).
const PACKAGE_DEPTH: usize = 5;

/// The guarded paths of each program in `names` found on `path_var` (a `$PATH` value), and of
/// each file in `files` (programs the caller knows by path: its own binary). Relative `$PATH`
/// entries are skipped: what they name depends on the cwd.
pub fn entries(
    names: &[String],
    path_var: Option<&std::ffi::OsStr>,
    files: &[PathBuf],
) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    let dirs: Vec<PathBuf> = path_var
        .map(|p| {
            std::env::split_paths(p)
                .filter(|d| d.is_absolute())
                .collect()
        })
        .unwrap_or_default();
    for name in names {
        if let Some(found) = dirs.iter().map(|d| d.join(name)).find(|p| is_executable(p)) {
            push_program(&mut out, name, &found);
        }
    }
    for file in files {
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        push_program(&mut out, &name, file);
    }
    out
}

/// Every absolute `$PATH` folder inside `home` (path_var a `$PATH` value), guarded as a folder:
/// a program a chat drops there shadows the system's in the person's next shell.
pub fn path_folders(path_var: Option<&std::ffi::OsStr>, home: &Path) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    for dir in path_var.map(std::env::split_paths).into_iter().flatten() {
        let Some(dir) = crate::paths::normalize(&dir) else {
            continue; // relative: what it names depends on the cwd
        };
        if dir == home || !crate::paths::within(&dir, home) || out.iter().any(|e| e.path == dir) {
            continue;
        }
        out.push(Entry {
            why: "a folder of $PATH in the home: a program a chat drops there shadows the \
                  system's in the person's next shell"
                .into(),
            missing: Missing::None,
            origin: format!("(programs) $PATH {}", dir.display()),
            path: dir,
        });
    }
    out
}

/// What the symlinks in the guarded `$PATH` folders of the home (`folders`, from
/// [`path_folders`]) lead to, when it lies in the home outside those folders: the resolved file
/// and its package folder ([`package_folder`]). Guarding a folder guards the names in it; a
/// link there into `~/tools/venv/bin` or an npm prefix runs what that tree holds. At most
/// [`MAX_LINKS_PER_FOLDER`] links are followed per folder.
pub fn path_folder_targets(folders: &[Entry], home: &Path) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    for folder in folders {
        let Ok(listing) = std::fs::read_dir(&folder.path) else {
            continue;
        };
        let links = listing
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_symlink()))
            .take(MAX_LINKS_PER_FOLDER);
        for link in links {
            let Ok(resolved) = std::fs::canonicalize(link.path()) else {
                continue;
            };
            let in_a_folder = folders
                .iter()
                .any(|f| crate::paths::within(&resolved, &f.path));
            if in_a_folder || !crate::paths::within(&resolved, home) {
                continue;
            }
            let name = link.file_name().to_string_lossy().into_owned();
            let mut add = |path: PathBuf, what: &str| {
                let why = format!(
                    "{what} that `{name}` in {} runs, outside a sandbox later",
                    folder.path.display()
                );
                let origin = format!("(programs) $PATH {}", folder.path.display());
                push_new(&mut out, path, why, origin);
            };
            add(resolved.clone(), "the file");
            if let Some(package) = package_folder(&resolved) {
                add(package, "the package folder");
            }
        }
    }
    out
}

/// How many symlinks of one `$PATH` folder are followed (each costs a `realpath`).
const MAX_LINKS_PER_FOLDER: usize = 500;

/// Adds a guarded path that no entry of `out` holds yet (missing: nothing made).
fn push_new(out: &mut Vec<Entry>, path: PathBuf, why: String, origin: String) {
    if !out.iter().any(|e| e.path == path) {
        out.push(Entry {
            path,
            why,
            missing: Missing::None,
            origin,
        });
    }
}

fn push_program(out: &mut Vec<Entry>, name: &str, found: &Path) {
    let mut add = |path: PathBuf, what: &str| {
        let why = format!("{what} of `{name}`, run outside a sandbox later");
        push_new(out, path, why, format!("(programs) {name}"));
    };
    add(found.to_path_buf(), "the command on $PATH");
    let Ok(resolved) = std::fs::canonicalize(found) else {
        return;
    };
    if resolved != found {
        add(resolved.clone(), "the file");
    }
    if let Some(package) = package_folder(&resolved) {
        add(package, "the package folder");
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The nearest folder above `file` (within [`PACKAGE_DEPTH`]) holding a `package.json` whose
/// parent is a `node_modules` folder (or a scope inside one): an npm package; or a
/// `pyvenv.cfg`: a Python virtual environment, whose `site-packages` its commands import.
fn package_folder(file: &Path) -> Option<PathBuf> {
    for dir in file.ancestors().skip(1).take(PACKAGE_DEPTH) {
        if dir.join("pyvenv.cfg").is_file() {
            return Some(dir.to_path_buf());
        }
        if !dir.join("package.json").is_file() {
            continue;
        }
        let parent = dir.parent()?;
        let in_modules = parent.file_name() == Some("node_modules".as_ref())
            || parent.parent().and_then(Path::file_name) == Some("node_modules".as_ref());
        return in_modules.then(|| dir.to_path_buf());
    }
    None
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt, symlink};

    use super::*;

    #[test]
    fn an_npm_cli_is_guarded_as_link_script_and_package() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        let pkg = root.join("lib/node_modules/@acme/cli");
        std::fs::create_dir_all(pkg.join("dist")).unwrap();
        std::fs::write(pkg.join("package.json"), "{}").unwrap();
        let script = pkg.join("dist/cli.js");
        std::fs::write(&script, "#!/usr/bin/env node\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::create_dir(root.join("bin")).unwrap();
        symlink(
            "../lib/node_modules/@acme/cli/dist/cli.js",
            root.join("bin/acme"),
        )
        .unwrap();
        let path = std::env::join_paths(["relative/bin".into(), root.join("bin")]).unwrap();
        let e = entries(&["acme".into(), "absent".into()], Some(&path), &[]);
        let got: Vec<&Path> = e.iter().map(|e| e.path.as_path()).collect();
        assert_eq!(got, [root.join("bin/acme").as_path(), &script, &pkg]);
        assert!(e.iter().all(|e| e.origin == "(programs) acme"));
    }

    #[test]
    fn a_plain_binary_is_guarded_as_itself_and_a_non_executable_is_no_program() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        let bin = root.join("tool");
        std::fs::write(&bin, "x").unwrap();
        let path = root.as_os_str().to_owned();
        assert!(entries(&["tool".into()], Some(&path), &[]).is_empty());
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = entries(&["tool".into()], Some(&path), &[root.join("own")]);
        let got: Vec<&Path> = e.iter().map(|e| e.path.as_path()).collect();
        assert_eq!(got, [bin.as_path(), root.join("own").as_path()]);
    }

    #[test]
    fn links_in_path_folders_guard_what_they_lead_to_in_the_home() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().canonicalize().unwrap();
        let bin = home.join(".local/bin");
        let venv = home.join("tools/venv");
        let pkg = home.join(".npm-global/lib/node_modules/tool");
        for d in [&bin, &venv.join("bin"), &pkg.join("bin")] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        std::fs::write(venv.join("bin/black"), "#!python\n").unwrap();
        std::fs::write(pkg.join("package.json"), "{}").unwrap();
        std::fs::write(pkg.join("bin/tool.js"), "#!node\n").unwrap();
        std::fs::write(bin.join("plain"), "#!/bin/sh\n").unwrap();
        symlink(venv.join("bin/black"), bin.join("black")).unwrap();
        symlink(
            "../../.npm-global/lib/node_modules/tool/bin/tool.js",
            bin.join("tool"),
        )
        .unwrap();
        symlink("plain", bin.join("inside")).unwrap();
        symlink("/bin/sh", bin.join("system")).unwrap();
        symlink("missing", bin.join("dangling")).unwrap();
        let path = std::env::join_paths([&bin]).unwrap();
        let folders = path_folders(Some(&path), &home);
        let mut got: Vec<PathBuf> = path_folder_targets(&folders, &home)
            .into_iter()
            .map(|e| e.path)
            .collect();
        got.sort();
        let mut want = vec![
            venv.join("bin/black"),
            venv.clone(),
            pkg.join("bin/tool.js"),
            pkg.clone(),
        ];
        want.sort();
        assert_eq!(
            got, want,
            "the links inside the folder and out of the home lead nowhere new"
        );
    }

    #[test]
    fn path_folders_in_the_home_are_guarded_and_others_not() {
        let home = Path::new("/home/ada");
        let path = std::env::join_paths([
            "/home/ada/.local/bin",
            "/usr/bin",
            "relative/bin",
            "/home/ada",
            "/home/adam/bin",
            "/home/ada/.local/bin/",
            "/home/ada/go/bin",
        ])
        .unwrap();
        let got: Vec<PathBuf> = path_folders(Some(&path), home)
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(
            got,
            [
                PathBuf::from("/home/ada/.local/bin"),
                PathBuf::from("/home/ada/go/bin")
            ]
        );
    }
}
