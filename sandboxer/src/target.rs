//! Which operating system a policy is resolved for, and how that OS spells paths.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The OS a policy is resolved and rendered for. It need not be the OS we run on:
/// a macOS profile can be rendered (and evaluated) on Linux.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    Macos,
    Linux,
}

impl Target {
    /// The OS this binary runs on, if it is one we can target.
    pub fn host() -> Option<Target> {
        if cfg!(target_os = "macos") {
            Some(Target::Macos)
        } else if cfg!(target_os = "linux") {
            Some(Target::Linux)
        } else {
            None
        }
    }

    pub fn is_host(self) -> bool {
        Target::host() == Some(self)
    }

    pub fn parse(word: &str) -> Option<Target> {
        match word {
            "macos" => Some(Target::Macos),
            "linux" => Some(Target::Linux),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Target::Macos => "macos",
            Target::Linux => "linux",
        }
    }

    /// Top-level symlinks the kernel resolves before any rule sees the path. On macOS `/tmp`,
    /// `/var` and `/etc` live under `/private`: a Seatbelt rule on `/tmp` matches nothing.
    pub fn root_aliases(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Target::Macos => &[
                ("/tmp", "/private/tmp"),
                ("/var", "/private/var"),
                ("/etc", "/private/etc"),
            ],
            Target::Linux => &[],
        }
    }

    /// Rewrites a lexically normal absolute path through [`Target::root_aliases`].
    pub fn apply_aliases(self, path: &Path) -> PathBuf {
        for (alias, real) in self.root_aliases() {
            if let Ok(rest) = path.strip_prefix(alias) {
                return if rest.as_os_str().is_empty() {
                    PathBuf::from(real)
                } else {
                    Path::new(real).join(rest)
                };
            }
        }
        path.to_path_buf()
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
