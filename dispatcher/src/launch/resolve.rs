//! How a launch's policy is resolved: for this machine (what `sandboxer exec` enforces) or for
//! a Mac (the Seatbelt profile a Mac runs it under). Every launch — chat, server, step,
//! contract — resolves through [`resolve_options`], so they all get the same home, symlink
//! resolution and ways-out list.

use std::path::Path;

use anyhow::{Context, Result};
use sandboxer::Target;
use sandboxer::policy::ResolveOptions;
use sandboxer::ways_out::{self, Env};

/// How a policy for `target` is resolved for the person at `home`, with the ways-out list.
///
/// On the machine it runs on (`target` is the host): real symlink resolution and the list
/// for this process's user and environment — exactly as `sandboxer exec` resolves it, so the
/// mode decision and the bridge see the policy the sandbox enforces. For another OS (a Mac's
/// profile written elsewhere): the fixed aliases only, and the list for `uid` (default: this
/// process's) with the home's last component as the user name, without environment variables
/// (that machine's are unknown here).
pub fn resolve_options(target: Target, home: &Path, uid: Option<u32>) -> Result<ResolveOptions> {
    let mut opts = ResolveOptions::new(target, home.to_path_buf(), target.is_host())?;
    let env = Env::for_target(target, home, uid, None);
    opts.ways_out = ways_out::load(target, None, &env)?;
    Ok(opts)
}

/// [`resolve_options`] for this machine's own OS.
pub fn host_resolve_options(home: &Path) -> Result<ResolveOptions> {
    let target = Target::host().context("this OS has no sandbox backend")?;
    resolve_options(target, home, None)
}

/// Renders a policy text (named `file` in messages) as the Seatbelt profile a Mac runs it
/// under, resolved for the Mac user at `home` ([`resolve_options`]).
pub fn render_seatbelt(
    policy_text: &str,
    file: &Path,
    home: &Path,
    uid: Option<u32>,
) -> Result<String> {
    let opts = resolve_options(Target::Macos, home, uid)?;
    let policy = sandboxer::Policy::from_toml(policy_text, &file.display().to_string(), &opts)?;
    Ok(sandboxer::seatbelt::render(&policy)?)
}
