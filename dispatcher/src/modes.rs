//! Modes. There is no unconfined mode: `full` runs the CLI's native tools inside the sandbox,
//! `bridge-only` turns its native tools off and leaves only the bridge. `auto` picks `full`
//! where the platform can enforce the policy and `bridge-only` elsewhere, and says why.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A launch's mode, as `--mode` takes it (the stored legacy spellings accepted too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Auto,
    #[value(alias = "full_unconfined")]
    Full,
    #[value(alias = "bridge_only")]
    BridgeOnly,
}

impl Mode {
    /// Parses a mode word, including stored legacy values: `full_unconfined` (from older
    /// saved chat settings) reads as `full` — confined, like every full launch.
    pub fn parse(word: &str) -> Option<Mode> {
        match word {
            "auto" => Some(Mode::Auto),
            "full" | "full_unconfined" => Some(Mode::Full),
            "bridge-only" | "bridge_only" => Some(Mode::BridgeOnly),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Full => "full",
            Mode::BridgeOnly => "bridge-only",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The chosen mode and why, as printed and recorded in the runtime.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModeDecision {
    pub requested: Mode,
    pub mode: Mode,
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_unconfined_reads_as_full() {
        assert_eq!(Mode::parse("full_unconfined"), Some(Mode::Full));
        assert_eq!(Mode::parse("unconfined"), None);
        assert_eq!(Mode::parse("none"), None);
    }
}
