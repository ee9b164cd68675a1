//! `config.json`'s `network`: what every launch's sandbox may reach (docs/network.md).

use std::path::Path;

use sandboxer::network::{HostPattern, NetworkMode};
use serde::{Deserialize, Serialize};

use super::error::StateError;

/// `network`: the mode of every full-mode launch (`public` unless set) and, for
/// `allowlist`, the hosts allowed besides each adapter's own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkConfig {
    pub mode: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            mode: NetworkMode::Public.as_str().into(),
            allow: Vec::new(),
        }
    }
}

impl NetworkConfig {
    pub(super) fn is_default(&self) -> bool {
        *self == NetworkConfig::default()
    }

    /// The mode, checked when the state root is opened.
    pub fn mode(&self) -> NetworkMode {
        NetworkMode::parse(&self.mode).unwrap_or(NetworkMode::None)
    }

    pub(super) fn check(&self, config_path: &Path) -> Result<(), StateError> {
        let bad = |field: String, why: String| StateError::BadConfig {
            path: config_path.to_path_buf(),
            field,
            why,
        };
        if NetworkMode::parse(&self.mode).is_none() {
            return Err(bad(
                "network.mode".into(),
                format!(
                    "{:?}: expected \"public\", \"allowlist\", \"none\" or \"open\"",
                    self.mode
                ),
            ));
        }
        for (i, entry) in self.allow.iter().enumerate() {
            HostPattern::parse(entry)
                .map_err(|e| bad(format!("network.allow[{i}]"), format!("{entry:?}: {e}")))?;
        }
        Ok(())
    }
}
