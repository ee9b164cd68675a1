//! `sandboxer apparmor`: print or install the AppArmor profile that gives the sandbox's
//! binaries their user namespaces where AppArmor restricts them (see
//! `sandboxer::linux::apparmor` and docs/linux.md).

use crate::ExitCode;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use sandboxer::linux::apparmor;

#[derive(Args, Debug)]
#[command(after_help = "\
Without --binary the profile covers this sandboxer and the `dispatcher` beside it, if any
(both make the sandbox's namespaces). Examples:
  sandboxer apparmor                      # print the profile
  sudo sandboxer apparmor --install       # write /etc/apparmor.d/agentworks and load it
  sandboxer doctor                        # then: masks shape available again")]
pub struct AppArmorArgs {
    /// A binary to cover (absolute; symlinks are resolved). Repeatable.
    #[arg(long, value_name = "PATH")]
    pub binary: Vec<PathBuf>,
    /// Write the profile to /etc/apparmor.d/agentworks and load it with `apparmor_parser -r`
    /// (as root).
    #[arg(long)]
    pub install: bool,
}

pub fn apparmor(args: AppArmorArgs) -> Result<ExitCode> {
    let binaries = if args.binary.is_empty() {
        apparmor::default_binaries().context("finding this program's own path")?
    } else {
        args.binary
            .iter()
            .map(|b| {
                b.canonicalize()
                    .with_context(|| format!("--binary {}: resolving it", b.display()))
            })
            .collect::<Result<Vec<_>>>()?
    };
    let text = apparmor::render(&binaries)?;
    if !args.install {
        std::io::stdout().write_all(text.as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    // SAFETY: geteuid has no failure mode and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "--install writes {} and loads it: run it as root (sudo)",
            apparmor::INSTALL_PATH
        );
    }
    // Written beside and renamed over, so a failed write never leaves half a profile.
    let tmp = format!("{}.tmp", apparmor::INSTALL_PATH);
    std::fs::write(&tmp, &text).with_context(|| format!("writing {tmp}"))?;
    std::fs::rename(&tmp, apparmor::INSTALL_PATH)
        .with_context(|| format!("renaming {tmp} to {}", apparmor::INSTALL_PATH))?;
    let status = std::process::Command::new("apparmor_parser")
        .args(["-r", apparmor::INSTALL_PATH])
        .status()
        .context("running apparmor_parser -r (is the apparmor package installed?)")?;
    if !status.success() {
        bail!(
            "apparmor_parser -r {} failed ({status})",
            apparmor::INSTALL_PATH
        );
    }
    for b in &binaries {
        println!("installed: {} may make user namespaces", b.display());
    }
    Ok(ExitCode::SUCCESS)
}
