//! Assumed facts: a test-only file that lowers what detection found.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::blocker::Blocker;
use super::platform::Facts;

/// A test-only lowering of detected facts (`--assume-facts FILE.json`). Each field, when
/// given, can only take a capability away: the ABI is the lower of the two, a boolean is
/// true only if both are. So an assumed file can turn a working sandbox into a refusal,
/// never into weaker enforcement — and the enforcer checks the kernel again anyway.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssumedFacts {
    #[serde(default)]
    pub landlock_abi: Option<u32>,
    #[serde(default)]
    pub user_namespaces: Option<bool>,
    #[serde(default)]
    pub mount_pid_namespaces: Option<bool>,
}

/// An assumed-facts file that cannot be read or parsed.
#[derive(Debug, thiserror::Error)]
pub enum FactsError {
    #[error("{file}: cannot read the assumed facts: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}:{line}:{column}: invalid assumed facts: {message}")]
    Parse {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
}

impl AssumedFacts {
    /// Reads a JSON file such as `{"user_namespaces": false}`.
    pub fn load(path: &Path) -> Result<AssumedFacts, FactsError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| FactsError::Read {
            file: file.clone(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|e| FactsError::Parse {
            file,
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })
    }

    /// `detected`, lowered by what this file assumes; never raised.
    pub fn apply(&self, detected: &Facts) -> Facts {
        let mut out = detected.clone();
        if let Some(abi) = self.landlock_abi {
            out.landlock_abi = out.landlock_abi.min(abi);
        }
        if let Some(user) = self.user_namespaces {
            out.user_namespaces &= user;
        }
        if let Some(mp) = self.mount_pid_namespaces {
            out.mount_pid_namespaces &= mp;
        }
        // Without a user namespace there is nothing to create mount or PID namespaces in.
        out.mount_pid_namespaces &= out.user_namespaces;
        if out.user_namespaces != detected.user_namespaces
            || out.mount_pid_namespaces != detected.mount_pid_namespaces
        {
            out.namespaces_blocked_by.get_or_insert(Blocker::Assumed);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(abi: u32, userns: bool) -> Facts {
        Facts {
            landlock_abi: abi,
            user_namespaces: userns,
            mount_pid_namespaces: userns,
            uid: 1000,
            gid: 1000,
            namespaces_blocked_by: None,
        }
    }

    #[test]
    fn assumed_facts_only_lower() {
        let lower = AssumedFacts {
            landlock_abi: Some(9),
            user_namespaces: Some(true),
            mount_pid_namespaces: None,
        };
        // ABI 9 cannot raise 7; true cannot raise false.
        let got = lower.apply(&facts(7, false));
        assert_eq!(got.landlock_abi, 7);
        assert!(!got.user_namespaces && !got.mount_pid_namespaces);

        let off = AssumedFacts {
            landlock_abi: Some(0),
            user_namespaces: Some(false),
            mount_pid_namespaces: None,
        };
        let got = off.apply(&facts(7, true));
        assert_eq!(got.landlock_abi, 0);
        assert!(!got.user_namespaces);
        assert!(
            !got.mount_pid_namespaces,
            "no mount/PID namespaces without a user namespace"
        );
        assert_eq!(got.namespaces_blocked_by, Some(Blocker::Assumed));
    }

    #[test]
    fn assumed_facts_file_errors_name_the_place() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f.json");
        std::fs::write(&file, "{\n  \"landlock_abi\": 3,\n  \"userns\": false\n}").unwrap();
        let err = AssumedFacts::load(&file).unwrap_err().to_string();
        assert!(err.contains("f.json:3:"), "{err}");
        assert!(err.contains("userns"), "{err}");
        std::fs::write(&file, r#"{"user_namespaces": false}"#).unwrap();
        assert_eq!(
            AssumedFacts::load(&file).unwrap().user_namespaces,
            Some(false)
        );
    }
}
