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
    confinement_resolving(target, policy_text, home, &mut None)
}

/// What the mode decision worked out on Linux, kept for the launch it decided.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The launch's policy text as this machine resolved it.
    pub policy: sandboxer::Policy,
    /// The facts it was planned with (the namespace probe's).
    pub facts: sandboxer::linux::plan::Facts,
}

/// [`confinement`], keeping in `resolved` the policy as this machine resolved it to decide and
/// the facts it planned with (Linux), so that the launch need not work them out again.
pub fn confinement_resolving(
    target: Target,
    policy_text: &str,
    home: &Path,
    resolved: &mut Option<Resolved>,
) -> Confinement {
    if !target.is_host() {
        return Ok(format!("computed for {target}; enforced there"));
    }
    match target {
        Target::Linux => linux_confinement(policy_text, home, resolved),
        Target::Macos => macos_confinement(),
    }
}

/// Plans the policy under the fallback rule, with this machine's facts.
///
/// The namespace probe forks twice and waits for the namespaces to be torn down (about 1 ms
/// here, mostly waiting), so it runs in a thread while the policy is resolved and planned as
/// if the namespaces work (the probe's child makes only async-signal-safe calls, so forking
/// from a second thread is sound). When the probe then finds the facts planned with, that plan
/// stands; otherwise the policy is planned again with what the probe found. Either way the
/// answer is the one the probed facts give.
#[cfg(target_os = "linux")]
fn linux_confinement(
    policy_text: &str,
    home: &Path,
    resolved: &mut Option<Resolved>,
) -> Confinement {
    use sandboxer::linux::{exec, facts, planner};
    let probe = std::thread::spawn(facts::detect);
    let planned = (|| -> Result<_, String> {
        let opts =
            host_resolve_options(home).map_err(|e| format!("cannot resolve the policy: {e}"))?;
        let policy = sandboxer::Policy::from_toml(policy_text, "launch policy", &opts)
            .map_err(|e| format!("the launch policy is invalid: {e}"))?;
        let plan = planner::choose(&policy, &exec::unprobed_facts());
        Ok((policy, plan))
    })();
    // Joined before any answer, so the probe's children are reaped whatever happens.
    let probed = probe.join();
    let (policy, plan) = planned?;
    let facts = probed.map_err(|_| "the namespace probe failed".to_string())?;
    let plan = exec::replan(&policy, policy.linux.enforce, &facts).unwrap_or(plan);
    *resolved = Some(Resolved {
        policy,
        facts: facts.clone(),
    });
    match plan {
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
fn linux_confinement(_: &str, _: &Path, _: &mut Option<Resolved>) -> Confinement {
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
    let env = Env::for_target(Target::Macos, home, uid, None);
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
/// `started` runs once the launch's process exists, while it starts (the caller flushes the
/// `started` event then, instead of before).
pub fn run_foreground(launch: &Launch, started: impl FnOnce()) -> Result<u8> {
    let mut cmd = command(launch)?;
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {}", launch.argv[0]))?;
    started();
    let status = child
        .wait()
        .with_context(|| format!("waiting for {}", launch.argv[0]))?;
    use std::os::unix::process::ExitStatusExt;
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(s)) => 128u8.saturating_add(s as u8),
        _ => 1,
    })
}

/// Runs a confined Linux launch in the foreground in this process, through the sandboxer
/// library ([`sandboxer::linux::exec::launch`]: the fallback rule and the fail-closed exits of
/// `sandboxer exec`, which `launch.argv` names and tmux and server launches run), and returns
/// its exit code: the CLI's (128+N for signal N), 125 when the sandbox could not be set up
/// (nothing was run, the reason on stderr), 126/127 when the CLI could not be executed.
/// Starting `sandboxer exec` instead would cost its process start, loading the policy again
/// and the ways-out list, about 2 ms a launch.
///
/// `resolved` is the mode decision's: the launch's own policy text as resolved on this
/// machine, and the probed facts. The launch's files are written by now, and the policy is
/// planned again for them (a plan depends on what the filesystem holds). `beside` runs in a
/// thread of its own while the sandbox starts. The caller must have applied the launch's
/// environment to this process ([`apply_env`]): the CLI inherits it.
#[cfg(target_os = "linux")]
pub fn run_confined_here(
    launch: &Launch,
    resolved: &Resolved,
    beside: impl FnOnce() + Send + 'static,
) -> Result<u8> {
    use sandboxer::linux::{enforce, exec};
    check_cli(launch)?;
    let (program, args) = launch
        .cli_argv
        .split_first()
        .context("the launch has no CLI")?;
    let command = enforce::Command {
        program: program.into(),
        args: args.iter().map(Into::into).collect(),
        cwd: launch.cwd.clone(),
    };
    let beside = with_waited_signals_blocked(|| std::thread::spawn(beside));
    let ended = exec::launch(
        &resolved.policy,
        &resolved.facts,
        resolved.policy.linux.enforce,
        &command,
    );
    let _ = beside.join();
    if let Some(message) = ended.message() {
        eprintln!("{message}");
    }
    Ok(ended.exit_code())
}

/// Sets the launch's environment in this process (its variables set, the terminal
/// multiplexer's removed), for a launch run here: the sandbox passes the environment through.
///
/// # Safety
///
/// No other thread may run in this process (changing the environment races with any thread
/// reading it).
pub unsafe fn apply_env(launch: &Launch) {
    for k in &launch.env_removed {
        // SAFETY: the caller guarantees this process runs one thread.
        unsafe { std::env::remove_var(k) };
    }
    for (k, v) in &launch.env_set {
        // SAFETY: as above.
        unsafe { std::env::set_var(k, v) };
    }
}

/// Runs `f` with the signals a launch run here waits for blocked on this thread, then unblocks
/// them: threads `f` starts inherit them blocked, so that a Ctrl-C or the CLI's `SIGCHLD`
/// reaches the thread that forwards and waits ([`sandboxer::linux::enforce::waited_signals`]).
pub fn with_waited_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sigset_t is plain data, filled by sigemptyset/sigaddset; pthread_sigmask
        // only changes this thread's mask, and the old mask is put back.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in sandboxer::linux::enforce::waited_signals() {
                libc::sigaddset(&mut set, s);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            let out = f();
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
            out
        }
    }
    #[cfg(not(target_os = "linux"))]
    f()
}

/// Fails unless the launch's CLI was found (an absolute path).
fn check_cli(launch: &Launch) -> Result<()> {
    let cli = Path::new(&launch.cli_argv[0]);
    if !cli.is_absolute() {
        bail!(
            "{} is not installed (not on PATH; set AGENTWORKS_CLI_{} to its path)",
            launch.cli_argv[0],
            launch.cli.to_ascii_uppercase()
        );
    }
    Ok(())
}

/// The launch's command (wrapper and CLI), its cwd and environment, after checking that its
/// binaries are there. Callers choose how it runs (foreground, spawned and supervised).
pub fn command(launch: &Launch) -> Result<Command> {
    let program = Path::new(&launch.argv[0]);
    if program.is_absolute() && !program.is_file() {
        bail!("{} is not installed here", program.display());
    }
    check_cli(launch)?;
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
    use crate::server::tmux;
    let socket = tmux::socket(state);
    tmux::run_new_session(tmux::new_session(&socket, launch)?)?;
    Ok(TmuxSession {
        socket,
        name: tmux::session_name(&launch.chat),
    })
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
/// The context is built from the launch's own policy text (not re-read from the runtime):
/// `resolved` is that text as the mode decision resolved it on this machine, else it is
/// resolved here.
pub fn serve_bridge(
    state: &StateRoot,
    launch: &Launch,
    home: &Path,
    resolved: Option<&Resolved>,
    events: crate::events::EventLog,
) -> Result<crate::bridge::BridgeHandle> {
    let policy_text = launch
        .policy_text()
        .context("the launch has no policy file")?;
    let file = launch.policy_path.display().to_string();
    // The decision resolved this very text with `host_resolve_options(home)`, before the
    // launch's files were written; writing them only creates real folders below the runtime
    // (symlinks there are refused), which resolve to the same paths, so resolving it again
    // would give the same policy.
    let ctx = match resolved {
        Some(r) => {
            crate::bridge::ChatContext::from_policy(state, &launch.chat, r.policy.clone(), &file)?
        }
        None => crate::bridge::ChatContext::from_toml(
            state,
            &launch.chat,
            policy_text,
            &file,
            &host_resolve_options(home)?,
        )?,
    };
    let socket = launch.runtime.join(crate::bridge::SOCKET_NAME);
    let chat = launch.chat.clone();
    let handle = crate::bridge::serve(&socket, ctx, move |call| {
        if let Err(e) = events.append(&crate::events::Event::bridge(&chat, &call)) {
            eprintln!("dispatcher: bridge event not recorded: {e}");
        }
    })?;
    Ok(handle)
}
