//! The ways-out lists (`profiles/linux/ways-out.toml`, `profiles/macos/ways-out.toml`,
//! embedded): sockets and folders through which a confined process could get code run outside
//! the sandbox — a terminal multiplexer's server, X11, a container engine's API, an agent's
//! socket. Expanded for one person ([`Env`]) into absolute paths with why, which the loader
//! adds as protected roots (`ResolveOptions::ways_out`) when the policy's `[linux] ways_out` /
//! `[macos] ways_out` is true (the default). On Linux the masks hide them; on macOS the
//! profile refuses reading, writing and connecting to them, as for any protected root.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::Target;
use crate::located::LineIndex;
use crate::paths::normalize;
use crate::template::{Template, TemplateError};

/// The embedded list for `target`; `--profiles-dir DIR` reads `DIR/<target>/ways-out.toml`
/// instead.
pub fn embedded(target: Target) -> &'static str {
    match target {
        Target::Linux => include_str!("../../profiles/linux/ways-out.toml"),
        Target::Macos => include_str!("../../profiles/macos/ways-out.toml"),
    }
}

/// The environment variables the templates read.
pub const ENV_VARS: [&str; 10] = [
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "ZDOTDIR",
    "TMUX_TMPDIR",
    "XAUTHORITY",
    "DOCKER_HOST",
    "SSH_AUTH_SOCK",
    "DISPLAY",
    "TMUX",
    "VSCODE_IPC_HOOK_CLI",
];

/// Whose ways out: the person's uid, name and home, the environment variables in
/// [`ENV_VARS`] that are set, and extra socket paths or folders the caller wants masked
/// too — the dispatcher's own sockets outside the chat (its server, other chats' bridges)
/// when they live outside its protected state root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Env {
    pub uid: u32,
    pub user: String,
    pub home: PathBuf,
    pub vars: BTreeMap<String, String>,
    pub extra: Vec<(PathBuf, String)>,
}

impl Env {
    /// This process's uid, user name (from the password database, else `$USER`) and the
    /// relevant environment variables, for the given home.
    #[cfg(unix)]
    pub fn from_process(home: &Path) -> Env {
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        let user = user_name(uid)
            .or_else(|| std::env::var("USER").ok())
            .unwrap_or_else(|| uid.to_string());
        let vars = ENV_VARS
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| ((*k).to_string(), v)))
            .collect();
        Env {
            uid,
            user,
            home: home.to_path_buf(),
            vars,
            extra: Vec::new(),
        }
    }

    /// Whose ways out a policy for `target` gets: on this machine, this process's user and
    /// environment ([`Env::from_process`]); for another machine (a Mac's profile rendered
    /// elsewhere), `uid` (default: this process's) and `user` (default: the home's last
    /// component) and no environment variables — that machine's are unknown here, so the
    /// entries that need one are left out. `uid` and `user` override the process's too.
    #[cfg(unix)]
    pub fn for_target(target: Target, home: &Path, uid: Option<u32>, user: Option<&str>) -> Env {
        let mut env = if target.is_host() {
            Env::from_process(home)
        } else {
            Env {
                // SAFETY: getuid cannot fail.
                uid: unsafe { libc::getuid() },
                user: home
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                home: home.to_path_buf(),
                vars: BTreeMap::new(),
                extra: Vec::new(),
            }
        };
        if let Some(uid) = uid {
            env.uid = uid;
        }
        if let Some(user) = user {
            env.user = user.to_string();
        }
        env
    }

    /// A set, non-empty variable. Programs treat an empty value as unset, and so do we.
    fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

#[cfg(unix)]
fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: passwd is plain data filled by getpwuid_r; buf outlives the read of pw_name.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr().cast(), buf.len(), &mut out);
        if rc != 0 || out.is_null() || pwd.pw_name.is_null() {
            return None;
        }
        let name = std::ffi::CStr::from_ptr(pwd.pw_name);
        name.to_str().ok().map(str::to_string)
    }
}

/// A ways-out list that cannot be used, with where and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {field}: {message}")]
pub struct WaysOutError {
    pub file: String,
    /// 1-based; 0 when the error is not at a place in the file.
    pub line: usize,
    /// e.g. `way_out[3].path`.
    pub field: String,
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    version: Spanned<i64>,
    #[serde(default)]
    way_out: Vec<RawEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    path: Spanned<String>,
    why: String,
}

/// Expands the list in `text` for `env` on `target`: `(absolute path, why)` per entry,
/// entries whose optional variable is unset left out, then `env.extra`. Duplicates are
/// dropped.
pub fn expand(
    target: Target,
    text: &str,
    env: &Env,
) -> Result<Vec<(PathBuf, String)>, WaysOutError> {
    expand_file(target, text, "ways-out.toml", env)
}

/// [`expand`], naming the file `file` in errors.
pub(crate) fn expand_file(
    target: Target,
    text: &str,
    file: &str,
    env: &Env,
) -> Result<Vec<(PathBuf, String)>, WaysOutError> {
    let lines = LineIndex::new(text);
    let line_of = |offset: usize| lines.line(offset);
    let err = |line: usize, field: &str, message: String| WaysOutError {
        file: file.into(),
        line,
        field: field.into(),
        message,
    };
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(0, |s| line_of(s.start));
        err(line, "(syntax)", e.message().trim().to_string())
    })?;
    if *raw.version.get_ref() != 1 {
        return Err(err(
            line_of(raw.version.span().start),
            "version",
            format!(
                "unsupported ways-out version {}; this sandboxer reads version 1",
                raw.version.get_ref()
            ),
        ));
    }
    let mut out: Vec<(PathBuf, String)> = Vec::new();
    for (i, entry) in raw.way_out.iter().enumerate() {
        let field = format!("way_out[{i}].path");
        let line = line_of(entry.path.span().start);
        let expanded = match expand_template(target, entry.path.get_ref(), env) {
            Ok(Some(p)) => p,
            Ok(None) => continue,
            Err(message) => return Err(err(line, &field, message)),
        };
        let path = checked_path(Path::new(&expanded)).map_err(|m| err(line, &field, m))?;
        if !out.iter().any(|(p, _)| *p == path) {
            out.push((path, entry.why.clone()));
        }
    }
    for (i, (path, why)) in env.extra.iter().enumerate() {
        let path = checked_path(path).map_err(|m| err(0, &format!("extra[{i}]"), m))?;
        if !out.iter().any(|(p, _)| *p == path) {
            out.push((path, why.clone()));
        }
    }
    Ok(out)
}

/// Reads `target`'s list from `profiles_dir/<target>/ways-out.toml` when given and present,
/// else the embedded one, and expands it for `env`.
pub fn load(
    target: Target,
    profiles_dir: Option<&Path>,
    env: &Env,
) -> Result<Vec<(PathBuf, String)>, WaysOutError> {
    if let Some(dir) = profiles_dir {
        let file = dir.join(target.to_string()).join("ways-out.toml");
        if file.exists() {
            let label = file.display().to_string();
            let text = std::fs::read_to_string(&file).map_err(|e| WaysOutError {
                file: label.clone(),
                line: 0,
                field: "(file)".into(),
                message: format!("cannot read the ways-out list: {e}"),
            })?;
            return expand_file(target, &text, &label, env);
        }
    }
    let label = format!("(embedded {target}/ways-out.toml)");
    expand_file(target, embedded(target), &label, env)
}

/// The variables a template may use on `target` (the ways-out list and the autorun list
/// share them).
pub(crate) fn variables(target: Target) -> &'static [&'static str] {
    match target {
        Target::Linux => &[
            "uid",
            "user",
            "home",
            "xdg_config_home",
            "zdotdir",
            "xdg_runtime_dir",
            "tmux_tmpdir",
            "xauthority",
            "docker_host_socket",
            "ssh_auth_sock",
            "tmux_socket",
            "vscode_ipc_hook",
        ],
        Target::Macos => &[
            "uid",
            "user",
            "home",
            "xdg_config_home",
            "zdotdir",
            "tmux_tmpdir",
            "xauthority",
            "docker_host_socket",
            "ssh_auth_sock",
            "display_socket",
            "tmux_socket",
            "vscode_ipc_hook",
        ],
    }
}

/// `Ok(None)` when the template uses an optional variable that is unset.
pub(crate) fn expand_template(
    target: Target,
    template: &str,
    env: &Env,
) -> Result<Option<String>, String> {
    let known = variables(target);
    let template = Template::parse(template)
        .and_then(|t| t.known_by(|v| known.contains(&v)))
        .map_err(|e| match e {
            TemplateError::Unknown { name } => format!(
                "unknown variable {{{name}}} for {target}; known: {}",
                known
                    .iter()
                    .map(|v| format!("{{{v}}}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            e => e.to_string(),
        })?;
    // `Err(None)`: an optional variable is unset, and the entry is left out.
    let expanded = template.expand_with(|name| match variable(target, name, env) {
        Ok(Some(value)) => Ok(value),
        Ok(None) => Err(None),
        Err(message) => Err(Some(message)),
    });
    match expanded {
        Ok(path) => Ok(Some(path)),
        Err(None) => Ok(None),
        Err(Some(message)) => Err(message),
    }
}

/// The value of a variable of [`variables`]: `None` when it is optional and unset.
fn variable(target: Target, name: &str, env: &Env) -> Result<Option<String>, String> {
    let absolute = |var: &str, value: &str| -> Result<String, String> {
        if Path::new(value).is_absolute() {
            Ok(value.to_string())
        } else {
            Err(format!(
                "${var} is {value:?}, not an absolute path; the sandbox cannot tell what it \
                 names, so it refuses to guess (fix or unset it)"
            ))
        }
    };
    Ok(match name {
        "uid" => Some(env.uid.to_string()),
        "user" => Some(env.user.clone()),
        "home" => Some(env.home.to_string_lossy().into_owned()),
        "xdg_config_home" => Some(match env.var("XDG_CONFIG_HOME") {
            Some(v) => absolute("XDG_CONFIG_HOME", v)?,
            None => env.home.join(".config").to_string_lossy().into_owned(),
        }),
        "zdotdir" => env
            .var("ZDOTDIR")
            .map(|v| absolute("ZDOTDIR", v))
            .transpose()?,
        "xdg_runtime_dir" => Some(match env.var("XDG_RUNTIME_DIR") {
            Some(v) => absolute("XDG_RUNTIME_DIR", v)?,
            None => format!("/run/user/{}", env.uid),
        }),
        // tmux's own default, `/tmp` (on macOS the real folder is `/private/tmp`).
        "tmux_tmpdir" => Some(match env.var("TMUX_TMPDIR") {
            Some(v) => absolute("TMUX_TMPDIR", v)?,
            None if target == Target::Macos => "/private/tmp".into(),
            None => "/tmp".into(),
        }),
        // XQuartz sets $DISPLAY to its launchd socket's path
        // (`/private/tmp/com.apple.launchd.XXXX/org.xquartz:0`); a `host:0` display is TCP.
        "display_socket" => env
            .var("DISPLAY")
            .filter(|v| v.starts_with('/'))
            .map(str::to_string),
        "xauthority" => env
            .var("XAUTHORITY")
            .map(|v| absolute("XAUTHORITY", v))
            .transpose()?,
        "ssh_auth_sock" => env
            .var("SSH_AUTH_SOCK")
            .map(|v| absolute("SSH_AUTH_SOCK", v))
            .transpose()?,
        // Inside tmux, $TMUX is `SOCKET,PID,SESSION`: the server this process runs under,
        // wherever its socket is (`tmux -S PATH` puts it outside the usual folder).
        "tmux_socket" => env
            .var("TMUX")
            .and_then(|v| v.split(',').next())
            .filter(|p| !p.is_empty())
            .map(|p| absolute("TMUX", p))
            .transpose()?,
        // Set in VS Code's (and Cursor's) integrated terminal: the editor's IPC socket, through
        // which the `code` CLI opens folders and installs extensions that run unconfined.
        "vscode_ipc_hook" => env
            .var("VSCODE_IPC_HOOK_CLI")
            .map(|v| absolute("VSCODE_IPC_HOOK_CLI", v))
            .transpose()?,
        // Only a unix:// Docker host has a socket on this machine; tcp:// and ssh:// hosts
        // are network endpoints this list cannot mask.
        "docker_host_socket" => match env.var("DOCKER_HOST") {
            Some(v) => match v.strip_prefix("unix://") {
                Some(path) => Some(absolute("DOCKER_HOST", path)?),
                None => None,
            },
            None => None,
        },
        _ => unreachable!("every variable of `variables` is expanded above"),
    })
}

pub(crate) fn checked_path(path: &Path) -> Result<PathBuf, String> {
    if path.as_os_str().as_encoded_bytes().contains(&0) {
        return Err(format!("{path:?} contains a NUL byte"));
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(format!("{path:?} contains '..'"));
    }
    let normal = normalize(path).ok_or_else(|| format!("{path:?} is not an absolute path"))?;
    if normal == Path::new("/") {
        return Err(format!("{path:?} would mask the whole filesystem"));
    }
    Ok(normal)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Env {
        Env {
            uid: 1000,
            user: "ada".into(),
            home: PathBuf::from("/home/ada"),
            vars: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            extra: Vec::new(),
        }
    }

    fn paths(list: &[(PathBuf, String)]) -> Vec<String> {
        list.iter().map(|(p, _)| p.display().to_string()).collect()
    }

    #[test]
    fn macos_list_expands_with_its_own_defaults_and_variables() {
        let list = expand(Target::Macos, embedded(Target::Macos), &env(&[])).unwrap();
        let p = paths(&list);
        for want in [
            "/private/tmp/tmux-1000",
            "/private/tmp/uscreens/S-ada",
            "/private/tmp/.X11-unix",
            "/private/var/run/docker.sock",
            "/home/ada/.docker/run",
            "/home/ada/.colima",
        ] {
            assert!(p.contains(&want.to_string()), "{want} missing from {p:?}");
        }
        assert!(!p.iter().any(|x| x.contains('{') || x.starts_with("/run/")));
        let list = expand(
            Target::Macos,
            embedded(Target::Macos),
            &env(&[
                (
                    "DISPLAY",
                    "/private/tmp/com.apple.launchd.Ab1/org.xquartz:0",
                ),
                ("TMUX_TMPDIR", "/Users/ada/tmux"),
                (
                    "SSH_AUTH_SOCK",
                    "/private/tmp/com.apple.launchd.Cd2/Listeners",
                ),
            ]),
        )
        .unwrap();
        let p = paths(&list);
        for want in [
            "/private/tmp/com.apple.launchd.Ab1/org.xquartz:0",
            "/Users/ada/tmux/tmux-1000",
            "/private/tmp/tmux-1000",
            "/private/tmp/com.apple.launchd.Cd2/Listeners",
        ] {
            assert!(p.contains(&want.to_string()), "{want} missing from {p:?}");
        }
        // The editor's and the multiplexer's sockets this process was started under.
        let list = expand(
            Target::Macos,
            embedded(Target::Macos),
            &env(&[
                ("TMUX", "/Users/ada/socks/work,4242,0"),
                (
                    "VSCODE_IPC_HOOK_CLI",
                    "/private/var/folders/x/T/vscode-ipc-1.sock",
                ),
            ]),
        )
        .unwrap();
        let p = paths(&list);
        for want in [
            "/Users/ada/socks/work",
            "/private/var/folders/x/T/vscode-ipc-1.sock",
        ] {
            assert!(p.contains(&want.to_string()), "{want} missing from {p:?}");
        }
        let err = expand(
            Target::Linux,
            embedded(Target::Linux),
            &env(&[("TMUX", "socks/work,1,0")]),
        )
        .unwrap_err();
        assert!(err.message.contains("$TMUX"), "{err}");
        let err = expand(
            Target::Macos,
            embedded(Target::Macos),
            &env(&[("VSCODE_IPC_HOOK_CLI", "vscode-ipc.sock")]),
        )
        .unwrap_err();
        assert!(err.message.contains("$VSCODE_IPC_HOOK_CLI"), "{err}");
        // A TCP display (`host:0`) has no socket to refuse.
        let list = expand(
            Target::Macos,
            embedded(Target::Macos),
            &env(&[("DISPLAY", ":0")]),
        );
        assert!(!paths(&list.unwrap()).iter().any(|x| x.contains(":0")));
        // Linux-only variables are unknown on macOS, and the reverse.
        let one = |v: &str| format!("version = 1\n[[way_out]]\npath = \"{{{v}}}\"\nwhy = \"w\"\n");
        let err = expand(Target::Macos, &one("xdg_runtime_dir"), &env(&[])).unwrap_err();
        assert!(
            err.message
                .contains("unknown variable {xdg_runtime_dir} for macos"),
            "{err}"
        );
        let err = expand(Target::Linux, &one("display_socket"), &env(&[])).unwrap_err();
        assert!(
            err.message
                .contains("unknown variable {display_socket} for linux"),
            "{err}"
        );
    }

    #[test]
    fn embedded_list_expands_with_defaults() {
        let list = expand(Target::Linux, embedded(Target::Linux), &env(&[])).unwrap();
        let p = paths(&list);
        assert_eq!(
            p[0], "/run/user/1000",
            "XDG_RUNTIME_DIR unset: logind's folder"
        );
        // The second entry is the same folder: kept once.
        assert_eq!(p.iter().filter(|x| *x == "/run/user/1000").count(), 1);
        for want in [
            "/tmp/tmux-1000",
            "/run/screen/S-ada",
            "/var/run/screen/S-ada",
            "/home/ada/.screen",
            "/tmp/.X11-unix",
            "/home/ada/.Xauthority",
            "/var/run/docker.sock",
            "/run/docker.sock",
            "/run/containerd/containerd.sock",
            "/run/dbus",
            "/run/systemd/private",
        ] {
            assert!(p.contains(&want.to_string()), "{want} missing from {p:?}");
        }
        // Optional variables unset: their entries are left out, not expanded to garbage.
        assert!(!p.iter().any(|x| x.contains('{')));
        assert!(list.iter().all(|(_, why)| !why.is_empty()));
    }

    #[test]
    fn environment_variables_are_used() {
        let list = expand(
            Target::Linux,
            embedded(Target::Linux),
            &env(&[
                ("XDG_RUNTIME_DIR", "/run/user/77"),
                ("TMUX_TMPDIR", "/var/tmux"),
                ("XAUTHORITY", "/run/user/1000/gdm/Xauthority"),
                ("DOCKER_HOST", "unix:///run/user/1000/docker.sock"),
                ("SSH_AUTH_SOCK", "/tmp/ssh-XYZ/agent.42"),
            ]),
        )
        .unwrap();
        let p = paths(&list);
        assert_eq!(p[0], "/run/user/77");
        assert!(p.contains(&"/run/user/1000".to_string()));
        assert!(p.contains(&"/var/tmux/tmux-1000".to_string()));
        assert!(p.contains(&"/run/user/1000/gdm/Xauthority".to_string()));
        assert!(p.contains(&"/run/user/1000/docker.sock".to_string()));
        assert!(p.contains(&"/tmp/ssh-XYZ/agent.42".to_string()));
    }

    #[test]
    fn empty_variables_count_as_unset_and_tcp_docker_is_skipped() {
        let list = expand(
            Target::Linux,
            embedded(Target::Linux),
            &env(&[("TMUX_TMPDIR", ""), ("DOCKER_HOST", "tcp://10.0.0.1:2375")]),
        )
        .unwrap();
        let p = paths(&list);
        assert!(p.contains(&"/tmp/tmux-1000".to_string()));
        assert!(!p.iter().any(|x| x.contains("10.0.0.1")));
    }

    #[test]
    fn extra_sockets_are_appended() {
        let mut e = env(&[]);
        e.extra = vec![(
            PathBuf::from("/srv/aw/server.sock"),
            "the dispatcher's server".into(),
        )];
        let list = expand(Target::Linux, "version = 1\n", &e).unwrap();
        assert_eq!(
            list,
            vec![(
                PathBuf::from("/srv/aw/server.sock"),
                "the dispatcher's server".into()
            )]
        );
        e.extra = vec![(PathBuf::from("relative.sock"), "x".into())];
        let err = expand(Target::Linux, "version = 1\n", &e).unwrap_err();
        assert_eq!(err.field, "extra[0]");
        assert!(err.message.contains("not an absolute path"), "{err}");
    }

    #[test]
    fn unknown_variables_are_errors_with_line() {
        let text = "version = 1\n\n[[way_out]]\npath = \"/tmp/x\"\nwhy = \"a\"\n\n[[way_out]]\npath = \"{runtime}/bus\"\nwhy = \"b\"\n";
        let err = expand(Target::Linux, text, &env(&[])).unwrap_err();
        assert_eq!(err.line, 8);
        assert_eq!(err.field, "way_out[1].path");
        assert!(err.message.contains("unknown variable {runtime}"), "{err}");
        assert!(
            err.to_string()
                .starts_with("ways-out.toml:8: way_out[1].path:"),
            "{err}"
        );
    }

    #[test]
    fn malformed_templates_and_values_are_errors() {
        let one =
            |path: &str| format!("version = 1\n[[way_out]]\npath = \"{path}\"\nwhy = \"w\"\n");
        for (template, wanted) in [
            ("/tmp/{uid", "without a matching '}'"),
            ("/tmp/uid}", "without a matching '{'"),
            ("tmp/x", "not an absolute path"),
            ("/tmp/../etc", "contains '..'"),
            ("/", "whole filesystem"),
        ] {
            let err = expand(Target::Linux, &one(template), &env(&[])).unwrap_err();
            assert_eq!(err.line, 3, "{template}");
            assert!(err.message.contains(wanted), "{template}: {err}");
        }
        let err = expand(
            Target::Linux,
            &one("{xdg_runtime_dir}"),
            &env(&[("XDG_RUNTIME_DIR", "run/me")]),
        )
        .unwrap_err();
        assert!(
            err.message.contains("$XDG_RUNTIME_DIR is \"run/me\""),
            "{err}"
        );
    }

    #[test]
    fn file_errors_name_the_line() {
        let err = expand(
            Target::Linux,
            "version = 1\n[[way_out]]\npath = \"/x\"\n",
            &env(&[]),
        )
        .unwrap_err();
        assert!(err.message.contains("why"), "{err}");
        let err = expand(Target::Linux, "version = 2\n", &env(&[])).unwrap_err();
        assert_eq!((err.line, err.field.as_str()), (1, "version"));
        let err = expand(
            Target::Linux,
            "version = 1\n[[way_out]]\npath = \"/x\"\nwhy = \"w\"\nmode = 1\n",
            &env(&[]),
        )
        .unwrap_err();
        assert!(err.message.contains("mode"), "{err}");
        assert!(err.line >= 2, "{err}");
    }

    #[test]
    fn profiles_dir_overrides_the_embedded_list() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            load(Target::Linux, Some(dir.path()), &env(&[]))
                .unwrap()
                .len()
                > 5,
            "no file: embedded"
        );
        std::fs::create_dir(dir.path().join("linux")).unwrap();
        std::fs::write(
            dir.path().join("linux/ways-out.toml"),
            "version = 1\n[[way_out]]\npath = \"{home}/.sock\"\nwhy = \"mine\"\n",
        )
        .unwrap();
        let list = load(Target::Linux, Some(dir.path()), &env(&[])).unwrap();
        assert_eq!(
            list,
            vec![(PathBuf::from("/home/ada/.sock"), "mine".into())]
        );
    }
}
