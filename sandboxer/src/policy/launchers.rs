//! The launcher list (`profiles/launchers.toml`, embedded): binaries, folders and Mach
//! services through which the OS would run code outside the sandbox.

use std::path::PathBuf;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::target::Target;

/// The embedded launcher list; `--profiles-dir` can override it.
pub const LAUNCHERS_TOML: &str = include_str!("../../../profiles/launchers.toml");

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LauncherPath {
    pub path: PathBuf,
    pub why: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachName {
    pub name: String,
    pub why: String,
}

/// What `[launchers] block = true` refuses on one target.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LauncherSet {
    /// Whether the policy blocks launchers at all (`[launchers] block`).
    #[serde(default)]
    pub block: bool,
    /// Exact executables whose exec is refused.
    #[serde(default)]
    pub exec: Vec<LauncherPath>,
    /// Folders where every operation is refused.
    #[serde(default)]
    pub read: Vec<LauncherPath>,
    /// Mach global names refused (macOS).
    #[serde(default)]
    pub mach_services: Vec<MachName>,
    /// Mach global-name prefixes refused (macOS).
    #[serde(default)]
    pub mach_prefixes: Vec<MachName>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LauncherFile {
    macos: LauncherSet,
    linux: LauncherSet,
}

impl LauncherSet {
    /// Parses a launcher list file and picks the target's section.
    pub fn from_toml(text: &str, target: Target) -> Result<LauncherSet, toml::de::Error> {
        let file: LauncherFile = toml::from_str(text)?;
        Ok(match target {
            Target::Macos => file.macos,
            Target::Linux => file.linux,
        })
    }

    /// The embedded list for `target`: parsed once per process (the dispatcher resolves
    /// policies many times), both targets in one go.
    pub fn embedded(target: Target) -> LauncherSet {
        static FILE: OnceLock<LauncherFile> = OnceLock::new();
        let file = FILE.get_or_init(|| {
            toml::from_str(LAUNCHERS_TOML)
                .expect("profiles/launchers.toml is valid (checked by a unit test)")
        });
        match target {
            Target::Macos => file.macos.clone(),
            Target::Linux => file.linux.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn embedded_list_parses_for_both_targets() {
        let mac = LauncherSet::embedded(Target::Macos);
        assert!(
            mac.exec
                .iter()
                .any(|l| l.path == Path::new("/usr/bin/open"))
        );
        assert!(
            mac.mach_services
                .iter()
                .any(|m| m.name == "com.apple.coreservices.launchservicesd")
        );
        let linux = LauncherSet::embedded(Target::Linux);
        assert!(linux.exec.is_empty());
    }
}
