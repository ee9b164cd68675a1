//! Opening an allowed URL in the person's browser, outside the sandbox: only with a program
//! only root can have put there, and only while the chat's sandbox cannot change which
//! program handles URLs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sandboxer::{Op, Policy};

/// What opening a URL did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenOutcome {
    /// Handed to the opener (`with` names it).
    Opened { with: String },
    /// Not opened; `why` is said to the caller with the URL, so a person can open it.
    NotOpened { why: String },
}

/// Opens allowed URLs. `System` runs `open` (macOS) or `xdg-open` (Linux) outside the
/// sandbox; `Custom` is for tests and embedders, so nothing is ever opened by a test.
#[derive(Clone)]
pub enum Opener {
    System,
    Custom(Arc<dyn Fn(&str) -> OpenOutcome + Send + Sync>),
}

impl std::fmt::Debug for Opener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Opener::System => "Opener::System",
            Opener::Custom(_) => "Opener::Custom",
        })
    }
}

impl Opener {
    /// Opens `url` for a chat with `policy`. The system opener is used only when the chat's
    /// sandbox cannot change which program handles URLs ([`exposed_handler_settings`]).
    pub fn open(&self, policy: &Policy, url: &str) -> OpenOutcome {
        match self {
            Opener::Custom(f) => f(url),
            Opener::System => {
                if let Some(p) = exposed_handler_settings(policy, |k| std::env::var_os(k)) {
                    return OpenOutcome::NotOpened {
                        why: format!(
                            "the URL handler settings {} can be changed from inside the sandbox, \
                             so the system opener could be made to run anything",
                            p.display()
                        ),
                    };
                }
                match system_opener() {
                    None => OpenOutcome::NotOpened {
                        why: "no opener".into(),
                    },
                    Some(bin) => open_with(&bin, url),
                }
            }
        }
    }
}

/// Where the program that handles `http(s):` is chosen. Whoever can write there picks what
/// `xdg-open` / `open` runs, outside the sandbox: a confined CLI (whose home is open) could
/// register its own "browser". Linux: the per-user `mimeapps.list` and `.desktop` folder
/// (`$XDG_CONFIG_HOME`, `$XDG_DATA_HOME` or their defaults); macOS: the LaunchServices
/// handler preferences.
fn handler_settings(home: &Path, env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Vec<PathBuf> {
    let xdg = |var: &str, default: &str| {
        env(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| home.join(default))
    };
    if cfg!(target_os = "macos") {
        vec![home.join("Library/Preferences/com.apple.LaunchServices")]
    } else {
        vec![
            xdg("XDG_CONFIG_HOME", ".config").join("mimeapps.list"),
            xdg("XDG_DATA_HOME", ".local/share").join("applications"),
        ]
    }
}

/// The first URL-handler setting the chat's policy lets be created or written, if any.
pub fn exposed_handler_settings(
    policy: &Policy,
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Option<PathBuf> {
    handler_settings(&policy.home, env)
        .into_iter()
        .find(|p| policy.decide(Op::Create, p).allowed() || policy.decide(Op::Write, p).allowed())
}

/// Where the opener may live. Never a folder on the dispatcher's `PATH` that the person (and
/// so a confined CLI, whose home is open) can write: a planted `~/.local/bin/xdg-open` would
/// run unconfined.
#[cfg(target_os = "macos")]
const OPENER_CANDIDATES: &[&str] = &["/usr/bin/open"];
#[cfg(target_os = "linux")]
const OPENER_CANDIDATES: &[&str] = &[
    "/usr/bin/xdg-open",
    "/bin/xdg-open",
    "/usr/local/bin/xdg-open",
];

/// The `PATH` the opener runs with: `xdg-open` is a script that looks up helpers (`gio`,
/// `x-www-browser`, …) on it, and those must not come from a folder in the home either.
const OPENER_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

fn system_opener() -> Option<PathBuf> {
    OPENER_CANDIDATES
        .iter()
        .map(PathBuf::from)
        .find(|p| trusted_program(p))
}

/// A program only root can have put there: a regular file, and it and every folder above it
/// owned by root and not writable by group or others.
fn trusted_program(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    if !meta.is_file() {
        return false;
    }
    path.ancestors()
        .all(|p| match std::fs::symlink_metadata(p) {
            Ok(m) => m.uid() == 0 && m.mode() & 0o022 == 0,
            Err(_) => p.as_os_str().is_empty(),
        })
}

fn open_with(bin: &Path, url: &str) -> OpenOutcome {
    let name = bin.display().to_string();
    // The URL is one argv element: no shell, and it starts with "http", never with '-'.
    match std::process::Command::new(bin)
        .arg(url)
        .env("PATH", OPENER_PATH)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(mut child) => {
            // Reap it whenever it ends (xdg-open may wait for the browser); never block the call.
            std::thread::spawn(move || {
                let _ = child.wait();
            });
            OpenOutcome::Opened { with: name }
        }
        Err(e) => OpenOutcome::NotOpened {
            why: format!("cannot run {name}: {e}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_root_owned_program_in_root_owned_folders_opens_urls() {
        assert!(!trusted_program(Path::new("/no/such/xdg-open")));
        let d = tempfile::tempdir().unwrap();
        let planted = d.path().join("xdg-open");
        std::fs::write(&planted, "#!/bin/sh\n").unwrap();
        // Under /tmp (world-writable) or owned by a normal user: never trusted.
        assert!(!trusted_program(&planted));
        assert!(!trusted_program(d.path()), "a folder is not a program");
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        use std::os::unix::fs::MetadataExt;
        if std::fs::metadata(&sh).unwrap().uid() == 0 {
            assert!(trusted_program(&sh), "{}", sh.display());
        }
        for c in OPENER_CANDIDATES {
            assert!(Path::new(c).is_absolute());
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_system_opener_waits_until_url_handlers_are_protected() {
        let opts =
            sandboxer::ResolveOptions::new(sandboxer::Target::Linux, "/home/me".into(), false)
                .unwrap();
        let policy = |protected: &[&str]| {
            let mut text = String::from("version = 1\nbase = \"open\"\n");
            for p in protected {
                text.push_str(&format!("[[protected]]\npath = \"{p}\"\n"));
            }
            Policy::from_toml(&text, "policy.toml", &opts).unwrap()
        };
        let no_env = |_: &str| None;
        let open_home = policy(&[]);
        assert_eq!(
            exposed_handler_settings(&open_home, no_env),
            Some(PathBuf::from("/home/me/.config/mimeapps.list"))
        );
        let half = policy(&["~/.config/mimeapps.list"]);
        assert_eq!(
            exposed_handler_settings(&half, no_env),
            Some(PathBuf::from("/home/me/.local/share/applications"))
        );
        let both = policy(&["~/.config/mimeapps.list", "~/.local/share"]);
        assert_eq!(exposed_handler_settings(&both, no_env), None);
        // $XDG_CONFIG_HOME moves the file the opener reads; the policy must cover that one.
        let moved = |k: &str| (k == "XDG_CONFIG_HOME").then(|| "/home/me/cfg".into());
        assert_eq!(
            exposed_handler_settings(&both, moved),
            Some(PathBuf::from("/home/me/cfg/mimeapps.list"))
        );
        // With the home open, the system opener never runs: the URL is handed back.
        let url = "https://docs.example.com/";
        match Opener::System.open(&open_home, url) {
            OpenOutcome::NotOpened { why } => {
                assert!(why.contains("URL handler settings"), "{why}")
            }
            other => panic!("{other:?}"),
        }
    }
}
