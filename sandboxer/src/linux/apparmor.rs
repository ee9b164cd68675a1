//! The AppArmor profile that gives our binaries back their user namespaces where AppArmor
//! restricts them (`kernel.apparmor_restrict_unprivileged_userns = 1`, Ubuntu 23.10 and later,
//! where every other program gets capability-less namespaces and the masks shape cannot be
//! built). The profile text is data (`profiles/linux/apparmor.tera`); this module is the one
//! place a binary's path becomes profile text, and it refuses any path AppArmor would read as
//! more than one literal path (a quote, a backslash, a glob or variable character, a control
//! character), so a hostile install path cannot widen the profile.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// The embedded template.
pub const TEMPLATE: &str = include_str!("../../../profiles/linux/apparmor.tera");

/// Where `sandboxer apparmor --install` writes the profile.
pub const INSTALL_PATH: &str = "/etc/apparmor.d/agentworks";

/// A binary path that cannot go into the profile, or a template that does not render.
#[derive(Debug, thiserror::Error)]
pub enum AppArmorError {
    #[error("{path:?} is not absolute: AppArmor attaches a profile by absolute path")]
    Relative { path: PathBuf },
    #[error(
        "{path:?} contains {what}, which AppArmor would not read as part of a literal path; \
         install the binary under a plain path"
    )]
    Unsafe { path: PathBuf, what: String },
    #[error("{path:?} is not valid UTF-8; AppArmor profiles are text")]
    NotUtf8 { path: PathBuf },
    #[error("no binary to write a profile for")]
    Empty,
    #[error("rendering the AppArmor template: {0}")]
    Template(String),
}

#[derive(Serialize)]
struct Entry {
    name: String,
    path: String,
}

/// The profile text for `binaries` (absolute paths of the installed `sandboxer` and
/// `dispatcher`, as the kernel will see them at `exec`: resolve symlinks first).
pub fn render(binaries: &[PathBuf]) -> Result<String, AppArmorError> {
    if binaries.is_empty() {
        return Err(AppArmorError::Empty);
    }
    let mut entries: Vec<Entry> = Vec::new();
    for path in binaries {
        let text = checked(path)?;
        let name = unique_name(path, &entries);
        entries.push(Entry { name, path: text });
    }
    let mut context = tera::Context::new();
    context.insert("profiles", &entries);
    tera::Tera::one_off(TEMPLATE, &context, false)
        .map_err(|e| AppArmorError::Template(format!("{e}: {:?}", std::error::Error::source(&e))))
}

/// The path as profile text, or why it cannot be.
fn checked(path: &Path) -> Result<String, AppArmorError> {
    if !path.is_absolute() {
        return Err(AppArmorError::Relative { path: path.into() });
    }
    let Some(text) = path.to_str() else {
        return Err(AppArmorError::NotUtf8 { path: path.into() });
    };
    let unsafe_char = text.chars().find(|c| {
        c.is_control()
            || matches!(
                c,
                '"' | '\\' | '*' | '?' | '[' | ']' | '{' | '}' | '^' | '@'
            )
    });
    if let Some(c) = unsafe_char {
        return Err(AppArmorError::Unsafe {
            path: path.into(),
            what: format!("{c:?}"),
        });
    }
    Ok(text.to_owned())
}

/// `agentworks-<file name>`, with only the characters a profile name may hold, made unique
/// among `taken` by a number.
fn unique_name(path: &Path, taken: &[Entry]) -> String {
    let stem: String = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let base = format!("agentworks-{stem}");
    let mut name = base.clone();
    let mut n = 2;
    while taken.iter().any(|e| e.name == name) {
        name = format!("{base}-{n}");
        n += 1;
    }
    name
}

/// The binaries a profile is for by default: this program and a `sandboxer` and `dispatcher`
/// beside it (both make the sandbox's namespaces: the dispatcher links the sandboxer in),
/// each with symlinks resolved.
pub fn default_binaries() -> std::io::Result<Vec<PathBuf>> {
    let me = std::env::current_exe()?.canonicalize()?;
    let mut out = vec![me.clone()];
    if let Some(dir) = me.parent() {
        for name in ["sandboxer", "dispatcher"] {
            if let Ok(p) = dir.join(name).canonicalize()
                && !out.contains(&p)
                && p.is_file()
            {
                out.push(p);
            }
        }
    }
    Ok(out)
}

/// The command that installs the profile for the `sandboxer` binary beside this program (or
/// this program), for messages that tell a person how to lift the restriction.
pub(crate) fn install_command() -> String {
    let exe = std::env::current_exe()
        .ok()
        .and_then(|me| {
            let beside = me.with_file_name("sandboxer");
            if beside.is_file() { Some(beside) } else { None }
        })
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "sandboxer".into());
    format!("sudo {exe} apparmor --install")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_one_profile_per_binary_with_unique_names() {
        let text = render(&[
            PathBuf::from("/usr/local/bin/sandboxer"),
            PathBuf::from("/opt/a b/dispatcher"),
            PathBuf::from("/opt/other/sandboxer"),
        ])
        .unwrap();
        assert!(text.contains("profile agentworks-sandboxer \"/usr/local/bin/sandboxer\""));
        assert!(text.contains("profile agentworks-dispatcher \"/opt/a b/dispatcher\""));
        assert!(text.contains("profile agentworks-sandboxer-2 \"/opt/other/sandboxer\""));
        assert_eq!(text.matches("\n  userns,\n").count(), 3);
    }

    #[test]
    fn refuses_paths_that_are_not_one_literal() {
        for bad in [
            "/opt/x\"/sandboxer",
            "/opt/x\\/sandboxer",
            "/opt/*/sandboxer",
            "/opt/{a,b}/sandboxer",
            "/opt/@{HOME}/sandboxer",
            "/opt/x\n}/sandboxer",
            "/opt/[ab]/sandboxer",
        ] {
            let err = render(&[PathBuf::from(bad)]).unwrap_err();
            assert!(
                matches!(err, AppArmorError::Unsafe { .. }),
                "{bad:?}: {err}"
            );
        }
        assert!(matches!(
            render(&[PathBuf::from("bin/sandboxer")]),
            Err(AppArmorError::Relative { .. })
        ));
        assert!(matches!(render(&[]), Err(AppArmorError::Empty)));
    }
}
