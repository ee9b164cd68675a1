//! `sandboxer render`: policy → Seatbelt profile, to stdout or atomically to a file.

use crate::ExitCode;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use sandboxer::Target;
use sandboxer::seatbelt::{self, Templates};

use crate::common::PolicyArgs;

#[derive(Args, Debug)]
pub struct RenderArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Write the profile to FILE (replaced atomically; untouched on error) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

pub fn render(args: RenderArgs) -> Result<ExitCode> {
    check_target(args.policy.target)?;
    if !Target::Macos.is_host() && args.policy.home.is_none() {
        // This machine's $HOME means nothing on the Mac the profile is for: never guess.
        bail!(
            "rendering a macOS profile on another OS needs --home (the Mac home, e.g. /Users/NAME)"
        );
    }
    let policy = args.policy.load()?;
    let from_dir;
    let templates = match &args.policy.profiles_dir {
        Some(dir) => {
            from_dir = Templates::from_profiles_dir(dir)
                .with_context(|| format!("loading the Seatbelt template from {}", dir.display()))?;
            &from_dir
        }
        None => Templates::embedded(),
    };
    let profile =
        seatbelt::render_with(&policy, templates).context("rendering the Seatbelt profile")?;
    match &args.out {
        Some(path) => write_atomically(path, profile.as_bytes())
            .with_context(|| format!("writing the profile to {}", path.display()))?,
        None => {
            let mut stdout = std::io::stdout().lock();
            stdout
                .write_all(profile.as_bytes())
                .and_then(|()| stdout.flush())
                .context("writing the profile to stdout")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A Seatbelt profile only means something on macOS: say so before loading anything, rather
/// than resolving the policy for this machine and failing later.
fn check_target(target: Option<Target>) -> Result<()> {
    match target {
        Some(Target::Macos) => Ok(()),
        Some(other) => bail!(
            "a Seatbelt profile is for macOS; --target {other} has none (pass --target macos)"
        ),
        None if Target::host() == Some(Target::Macos) => Ok(()),
        None => bail!(
            "a Seatbelt profile needs --target macos (this machine is {}; pass --home too, \
             e.g. --home /Users/NAME)",
            Target::host().map_or("not a supported OS", Target::as_str)
        ),
    }
}

/// Writes `bytes` to a new file beside `path`, syncs it, then renames it over `path`: a
/// reader sees the old profile or the new one, never half of one, and an error leaves
/// `path` as it was.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .with_context(|| format!("{} names no file", path.display()))?;
    // Unique per process and moment, so a leftover from a crashed run cannot block this one.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp-{}-{nanos}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        file.write_all(bytes)
            .and_then(|()| file.sync_all())
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
    })();
    if result.is_err() {
        // Best effort: the temp file is ours (create_new) and useless now.
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
