//! A Mac's Seatbelt profile for a launch's policy, resolved for the Mac user
//! ([`sandboxer::ResolveOptions::for_target`]: the same home, symlink resolution and ways-out
//! list as every launch, chat, server, step and contract alike).

use std::path::Path;

use anyhow::Result;
use sandboxer::{ResolveOptions, Target};

/// Renders a policy text (named `file` in messages) as the Seatbelt profile a Mac runs it
/// under, resolved for the Mac user at `home` with `uid` (default: this process's).
pub fn render_seatbelt(
    policy_text: &str,
    file: &Path,
    home: &Path,
    uid: Option<u32>,
) -> Result<String> {
    let opts = ResolveOptions::for_target(Target::Macos, home, uid)?;
    let policy = sandboxer::Policy::from_toml(policy_text, &file.display().to_string(), &opts)?;
    Ok(sandboxer::seatbelt::render(&policy)?)
}
