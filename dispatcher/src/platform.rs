//! What the dispatcher asks of this machine: where the tools are, whether the platform can
//! confine a policy (asked of the `sandboxer` library, never decided here), and how a
//! computed launch is started (foreground or tmux).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use sandboxer::Target;
use serde::Serialize;

use crate::adapter::{self, Adapter};
use crate::launch::{Confinement, Launch, Tools};
use crate::modes::Mode;
use crate::state::StateRoot;

/// The person's home, from `$HOME`.
pub fn home() -> Result<PathBuf> {
    let home = std::env::var_os("HOME").context("HOME is not set")?;
    let home = PathBuf::from(home);
    if !home.is_absolute() {
        bail!("HOME={} is not an absolute path", home.display());
    }
    Ok(home)
}

pub fn as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Finds the tools a launch needs. The CLI binary may be missing for a dry run (its name is
/// shown then); a real launch checks it.
pub fn tools(adapter: &Adapter, target: Target) -> Result<Tools> {
    let dispatcher = std::env::current_exe().context("cannot find the dispatcher's own binary")?;
    let cli_binary = match adapter::locate_binary(adapter) {
        Some(p) if target.is_host() => p,
        _ => PathBuf::from(&adapter.binary),
    };
    Ok(Tools {
        cli_binary,
        sandboxer: locate_sandboxer(&dispatcher),
        dispatcher,
        as_root: as_root(),
    })
}

/// `$SANDBOXER_BIN`, else `sandboxer` beside the dispatcher binary, else on `PATH`, else the
/// bare name (the launch then fails with a clear error when it runs).
pub fn locate_sandboxer(dispatcher: &Path) -> PathBuf {
    if let Some(p) = std::env::var_os("SANDBOXER_BIN").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    if let Some(dir) = dispatcher.parent() {
        let sibling = dir.join("sandboxer");
        if sibling.is_file() {
            return sibling;
        }
        // Test binaries live in target/<profile>/deps; the tools one level up.
        if let Some(up) = dir.parent().map(|d| d.join("sandboxer"))
            && up.is_file()
        {
            return up;
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&path) {
            let p = d.join("sandboxer");
            if p.is_file() {
                return p;
            }
        }
    }
    PathBuf::from("sandboxer")
}

/// Can this platform enforce `policy_text` (a launch's policy) for the person at `home`?
/// `Ok(how)` or `Err(why not)`. For another OS's target the answer is about that OS's
/// mechanism, which only a launch there can check.
pub fn confinement(target: Target, policy_text: &str, home: &Path) -> Confinement {
    if !target.is_host() {
        return Ok(format!("computed for {target}; enforced there"));
    }
    match target {
        Target::Linux => linux_confinement(policy_text, home),
        Target::Macos => macos_confinement(),
    }
}

#[cfg(target_os = "linux")]
fn linux_confinement(policy_text: &str, home: &Path) -> Confinement {
    use sandboxer::linux::{facts, planner};
    let opts = host_resolve_options(home).map_err(|e| format!("cannot resolve the policy: {e}"))?;
    let policy = sandboxer::Policy::from_toml(policy_text, "launch policy", &opts)
        .map_err(|e| format!("the launch policy is invalid: {e}"))?;
    let facts = facts::detect();
    match planner::choose(&policy, &facts) {
        Ok(plan) => Ok(format!(
            "sandboxer {} plan (Landlock ABI {})",
            match plan.shape {
                sandboxer::linux::plan::Shape::Masks => "masks",
                sandboxer::linux::plan::Shape::LandlockOnly => "landlock-only",
            },
            facts.landlock_abi
        )),
        Err(refusal) => Err(refusal.to_string()),
    }
}

#[cfg(not(target_os = "linux"))]
fn linux_confinement(_: &str, _: &Path) -> Confinement {
    Err("not running on Linux".into())
}

fn macos_confinement() -> Confinement {
    sandboxer::macos::detect().can_confine()?;
    Ok("sandbox-exec with this chat's Seatbelt profile".into())
}

/// How a policy is resolved on this machine for the person at `home`: the host target, real
/// symlink resolution, and the host's ways-out list — exactly as `sandboxer exec` resolves
/// it, so the mode decision and the bridge see the policy the sandbox enforces.
pub fn host_resolve_options(home: &Path) -> Result<sandboxer::policy::ResolveOptions> {
    let target = Target::host().context("this OS has no sandbox backend")?;
    let mut opts = sandboxer::policy::ResolveOptions::new(target, home.to_path_buf(), true)?;
    let env = sandboxer::ways_out::Env::from_process(home);
    opts.ways_out = sandboxer::ways_out::load(target, None, &env)?;
    Ok(opts)
}

/// How a policy is resolved for a Mac, for the person at `home`: on a Mac, real symlink
/// resolution and the ways-out list for this process's user and environment; elsewhere (a
/// Mac's profile checked off-host), the fixed aliases only and the list for `uid` (default:
/// this process's) with the home's last component as the user name, without environment
/// variables (the Mac's are unknown here).
pub fn macos_resolve_options(
    home: &Path,
    uid: Option<u32>,
) -> Result<sandboxer::policy::ResolveOptions> {
    use sandboxer::ways_out::{self, Env};
    let on_a_mac = Target::Macos.is_host();
    let mut opts =
        sandboxer::policy::ResolveOptions::new(Target::Macos, home.to_path_buf(), on_a_mac)?;
    let mut env = if on_a_mac {
        Env::from_process(home)
    } else {
        let user = home
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // SAFETY: getuid cannot fail.
        Env::for_other_machine(unsafe { libc::getuid() }, &user, home)
    };
    if let Some(uid) = uid {
        env.uid = uid;
    }
    opts.ways_out = ways_out::load(Target::Macos, None, &env)?;
    Ok(opts)
}

/// Renders the launch's policy as the Seatbelt profile a Mac runs it under (resolved by
/// [`macos_resolve_options`]).
pub fn seatbelt_profile(launch: &Launch, home: &Path, uid: Option<u32>) -> Result<String> {
    let policy_text = launch
        .policy_text()
        .context("the launch has no policy file")?;
    let opts = macos_resolve_options(home, uid)?;
    let policy = sandboxer::Policy::from_toml(
        policy_text,
        &launch.policy_path.display().to_string(),
        &opts,
    )?;
    Ok(sandboxer::seatbelt::render(&policy)?)
}

/// Runs the launch in the foreground and returns its exit code (128+N for signal N).
pub fn run_foreground(launch: &Launch) -> Result<u8> {
    let mut cmd = command(launch)?;
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {}", launch.argv[0]))?;
    use std::os::unix::process::ExitStatusExt;
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(s)) => 128u8.saturating_add(s as u8),
        _ => 1,
    })
}

/// The launch's command (wrapper and CLI), its cwd and environment, after checking that its
/// binaries are there. Callers choose how it runs (foreground, spawned and supervised).
pub fn command(launch: &Launch) -> Result<Command> {
    let program = Path::new(&launch.argv[0]);
    if program.is_absolute() && !program.is_file() {
        bail!("{} is not installed here", program.display());
    }
    let cli = Path::new(&launch.cli_argv[0]);
    if !cli.is_absolute() {
        bail!(
            "{} is not installed (not on PATH; set AGENTWORKS_CLI_{} to its path)",
            launch.cli_argv[0],
            launch.cli.to_ascii_uppercase()
        );
    }
    let mut cmd = Command::new(program);
    cmd.args(&launch.argv[1..]).current_dir(&launch.cwd);
    for k in &launch.env_removed {
        cmd.env_remove(k);
    }
    cmd.envs(&launch.env_set);
    Ok(cmd)
}

/// A tmux session started for a launch.
#[derive(Debug, Serialize)]
pub struct TmuxSession {
    pub socket: PathBuf,
    pub name: String,
}

/// Starts the launch in a detached tmux session on the dispatcher's own server, whose socket
/// lives inside the state root (protected: no confined process can reach it).
pub fn start_tmux(state: &StateRoot, launch: &Launch) -> Result<TmuxSession> {
    let socket = state.tmux_dir().join("default");
    let name = format!("chat-{}", launch.chat);
    let base = command(launch)?; // validates the binaries
    let mut cmd = Command::new("tmux");
    cmd.arg("-S")
        .arg(&socket)
        .args(["new-session", "-d", "-s", &name, "-c"]);
    cmd.arg(&launch.cwd);
    for (k, v) in &launch.env_set {
        cmd.arg("-e").arg(format!("{k}={v}"));
    }
    cmd.arg("--")
        .args(tmux_command_args(base.get_program(), base.get_args()));
    for k in &launch.env_removed {
        cmd.env_remove(k);
    }
    let out = cmd.output().context("cannot run tmux (is it installed?)")?;
    if !out.status.success() {
        bail!(
            "tmux new-session failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(TmuxSession { socket, name })
}

/// A command line as tmux must be given it so that it runs exactly `program args…`.
///
/// tmux splits its own command line at every argument that *ends* in `;` (even after `--`):
/// an argument `x;` would end `new-session`, and the arguments after it would run as tmux
/// commands (`run-shell …`, unconfined). A trailing `;` is written `\;`, which tmux turns back
/// into `;`. And tmux runs a command of a single argument through `sh -c`; that one argument
/// is shell-quoted so the shell runs exactly it.
pub fn tmux_command_args<'a>(
    program: &'a std::ffi::OsStr,
    args: impl Iterator<Item = &'a std::ffi::OsStr>,
) -> Vec<std::ffi::OsString> {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let argv: Vec<&std::ffi::OsStr> = std::iter::once(program).chain(args).collect();
    if argv.len() == 1 {
        let mut quoted = b"'".to_vec();
        for &b in program.as_bytes() {
            if b == b'\'' {
                quoted.extend_from_slice(b"'\\''");
            } else {
                quoted.push(b);
            }
        }
        quoted.push(b'\'');
        return vec![tmux_escape(std::ffi::OsString::from_vec(quoted))];
    }
    argv.into_iter()
        .map(|a| tmux_escape(a.to_os_string()))
        .collect()
}

fn tmux_escape(arg: std::ffi::OsString) -> std::ffi::OsString {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let bytes = arg.as_bytes();
    if bytes.last() != Some(&b';') {
        return arg;
    }
    let mut out = bytes[..bytes.len() - 1].to_vec();
    out.extend_from_slice(b"\\;");
    std::ffi::OsString::from_vec(out)
}

/// One row of `dispatcher clis`.
#[derive(Debug, Serialize)]
pub struct CliStatus {
    pub name: String,
    pub display_name: String,
    pub installed: bool,
    pub binary: Option<PathBuf>,
    pub version: Option<String>,
    pub checked_version: String,
    pub modes: Vec<Mode>,
    /// The modes a launch can get on this machine.
    pub modes_here: Vec<String>,
}

pub fn cli_status(adapters: &[Adapter]) -> Vec<CliStatus> {
    let host = Target::host();
    let can_confine = host
        .zip(home().ok())
        .map(|(t, h)| confinement(t, default_check_policy(t), &h).is_ok())
        .unwrap_or(false);
    adapters
        .iter()
        .map(|a| {
            let binary = adapter::locate_binary(a);
            let version = binary.as_ref().and_then(|b| {
                let out = Command::new(b).args(&a.version_args).output().ok()?;
                let text = String::from_utf8_lossy(&out.stdout);
                text.lines()
                    .next()
                    .map(|l| l.trim().to_string())
                    .filter(|l| !l.is_empty())
            });
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
    sandboxer::policy::default_policy(target)
}

/// Serves the chat's bridge socket for a launch, logging every call to the chat's events.
/// The context is built from the launch's own policy text (not re-read from the runtime).
pub fn serve_bridge(
    state: &StateRoot,
    launch: &Launch,
    home: &Path,
    events: crate::events::EventLog,
) -> Result<crate::bridge::BridgeHandle> {
    let policy_text = launch
        .policy_text()
        .context("the launch has no policy file")?
        .to_string();
    let opts = host_resolve_options(home)?;
    let ctx = crate::bridge::ChatContext::from_toml(
        state,
        &launch.chat,
        &policy_text,
        &launch.policy_path.display().to_string(),
        &opts,
    )?;
    let socket = launch.runtime.join(crate::bridge::SOCKET_NAME);
    let chat = launch.chat.clone();
    let handle = crate::bridge::serve(&socket, ctx, move |call| {
        if let Err(e) = events.append(&crate::events::Event::bridge(&chat, &call)) {
            eprintln!("dispatcher: bridge event not recorded: {e}");
        }
    })?;
    Ok(handle)
}
