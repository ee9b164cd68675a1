//! `dispatcher clis`: the CLI adapters, whether each is installed here, its version, and the
//! modes a launch of it gets on this machine.
//!
//! The version is asked of the CLI inside the sandbox, never outside: the binary found on
//! `$PATH` may lie in the open home (`~/.local/bin/claude`), where an earlier chat could have
//! rewritten it, and run outside it would run that chat's code with the person's rights. The
//! probe runs through the same `sandboxer` a launch runs (its enforcer check included), under a
//! policy of the product's own — the default policy's shape, the state root protected, the
//! programs the dispatcher runs outside guarded — with a throwaway home, so that nothing it
//! writes lands in the person's. Where nothing can confine it, the version is not asked.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use sandboxer::{Base, PathRule, PolicyDocument, Target};
use serde::Serialize;

use crate::adapter::{self, Adapter};
use crate::launch::{confinement, render_seatbelt, wrapper_argv, wrapper_command};
use crate::modes::Mode;
use crate::platform::{self, home};

/// `sandboxer exec`'s exit code when it could not set the sandbox up (nothing was run).
const SANDBOX_NOT_SET_UP: i32 = 125;

/// One row of `dispatcher clis`.
#[derive(Debug, Serialize)]
pub struct CliStatus {
    pub name: String,
    pub display_name: String,
    pub installed: bool,
    pub binary: Option<PathBuf>,
    pub version: Option<String>,
    /// Why the version was not asked (nothing here confines the probe), when it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version_not_asked: Option<String>,
    pub checked_version: String,
    pub modes: Vec<Mode>,
    /// The modes a launch can get on this machine.
    pub modes_here: Vec<String>,
}

/// The rows for `adapters`; `state_root` (the state root's path, existing or not) is
/// protected from the version probes.
pub fn cli_status(adapters: &[Adapter], state_root: Option<&Path>) -> Vec<CliStatus> {
    let host = Target::host();
    let can_confine = host
        .zip(home().ok())
        .map(|(t, h)| confinement(t, default_check_policy(t), &h, None).is_ok())
        .unwrap_or(false);
    adapters
        .iter()
        .map(|a| {
            let binary = adapter::locate_binary(a);
            let asked = binary.as_ref().map(|b| confined_version(a, b, state_root));
            let (version, version_not_asked) = match asked {
                Some(Ok(v)) => (v, None),
                Some(Err(why)) => (None, Some(why)),
                None => (None, None),
            };
            let modes_here = a
                .modes
                .iter()
                .filter(|m| **m != Mode::Full || can_confine)
                .map(|m| m.to_string())
                .collect();
            CliStatus {
                name: a.name.clone(),
                display_name: a.display_name.clone(),
                installed: binary.is_some(),
                binary,
                version,
                version_not_asked,
                checked_version: a.checked_version.clone(),
                modes: a.modes.clone(),
                modes_here,
            }
        })
        .collect()
}

/// The policy `dispatcher clis` checks confinement with: the product's shape, with nothing
/// granted.
fn default_check_policy(target: Target) -> &'static str {
    sandboxer::default_policy(target)
}

/// The first line the CLI at `binary` prints for its version arguments (stdout, else stderr:
/// some print it there), run confined; `Err(why)` when it cannot be confined here.
fn confined_version(
    a: &Adapter,
    binary: &Path,
    state_root: Option<&Path>,
) -> Result<Option<String>, String> {
    let target = Target::host().ok_or("this OS has no sandbox backend")?;
    let home = home().map_err(|e| e.to_string())?;
    let dispatcher = std::env::current_exe().map_err(|e| e.to_string())?;
    let sandboxer = platform::locate_sandboxer(&dispatcher);
    let scratch = tempfile::Builder::new()
        .prefix("agentworks-clis-")
        .tempdir()
        .map_err(|e| format!("cannot make the probe's private home: {e}"))?;
    let root = scratch
        .path()
        .canonicalize()
        .map_err(|e| format!("cannot resolve the probe's private home: {e}"))?;
    let programs = [
        binary.to_path_buf(),
        sandboxer.clone(),
        dispatcher,
        crate::programs::tmux().to_path_buf(),
    ];
    let text = probe_policy(state_root, &programs);
    let policy_path = root.join("policy.toml");
    std::fs::write(&policy_path, &text).map_err(|e| e.to_string())?;
    confinement(target, &text, &home, Some(&sandboxer)).map_err(|e| e.to_string())?;
    let profile_path = (target == Target::Macos).then(|| root.join("sandbox.sb"));
    if let Some(p) = &profile_path {
        let profile =
            render_seatbelt(&text, &policy_path, &home, None).map_err(|e| format!("{e:#}"))?;
        std::fs::write(p, profile).map_err(|e| e.to_string())?;
    }
    let mut cli = vec![binary.display().to_string()];
    cli.extend(a.version_args.iter().cloned());
    let argv = wrapper_argv(
        target,
        &sandboxer,
        &policy_path,
        profile_path.as_deref(),
        &root,
        &cli,
        &crate::launch::person_lists_env(),
    );
    let private = root.join("home");
    std::fs::create_dir(&private).map_err(|e| e.to_string())?;
    let mut cmd = wrapper_command(&argv);
    cmd.current_dir(&root)
        .stdin(Stdio::null())
        .env("HOME", &private)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("XDG_STATE_HOME")
        .env_remove("XDG_CACHE_HOME");
    if let Some(var) = &a.config_home.env {
        cmd.env(var, private.join(".config-home"));
    }
    for k in crate::launch::ENV_REMOVED {
        cmd.env_remove(k);
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {}: {e}", argv[0]))?;
    let line = |b: &[u8]| {
        String::from_utf8_lossy(b)
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(str::to_string)
    };
    if out.status.code() == Some(SANDBOX_NOT_SET_UP) {
        return Err(line(&out.stderr).unwrap_or_else(|| "the sandbox was not set up".into()));
    }
    Ok(line(&out.stdout).or_else(|| line(&out.stderr)))
}

/// The version probe's policy: open base (its private home is writable as the rest of the
/// open home is), the state root protected, the programs run outside guarded.
fn probe_policy(state_root: Option<&Path>, programs: &[PathBuf]) -> String {
    let mut doc = PolicyDocument::new(Base::Open);
    doc.protected = state_root
        .map(|s| PathRule::new(s, "the dispatcher's state root"))
        .into_iter()
        .collect();
    doc.guard = crate::programs::guard_rules(programs);
    let mut text = String::from("# Written by `dispatcher clis` for one version probe.\n");
    text.push_str(&doc.to_toml().expect("policy document serializes"));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_policy_protects_the_state_root_and_guards_the_programs() {
        let text = probe_policy(Some(Path::new("/s")), &[PathBuf::from("/opt/bin/claude")]);
        let v: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(v["protected"][0]["path"].as_str(), Some("/s"));
        assert_eq!(v["guard"][0]["path"].as_str(), Some("/opt/bin/claude"));
    }
}
