//! `sandboxer exec`: confine one command on this machine (Linux) and run it.
//!
//! Policy → platform facts → plan (the planner's fallback rule) → enforcer. A refusal (no
//! shape can enforce the policy here) or a step the enforcer cannot apply ends with exit 125
//! and nothing run; otherwise sandboxer exits with the command's status (128+N for signal N).
//! In the landlock-only shape it becomes the command instead (see `exec::launch_or_become`).

use crate::ExitCode;
use std::ffi::OsString;
use std::path::PathBuf;

#[cfg(target_os = "linux")]
use anyhow::Context;
use anyhow::{Result, bail};
use clap::Args;
use sandboxer::Target;
use sandboxer::policy::Enforce;

use crate::common::PolicyArgs;

#[derive(Args, Debug)]
pub struct ExecArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// How to confine: auto (masks when user namespaces work, else Landlock alone, else
    /// refuse), masks, or landlock-only. Default: the policy's `[linux] enforce`.
    #[arg(long, value_name = "HOW", value_parser = parse_enforce)]
    pub enforce: Option<Enforce>,
    /// The command's working directory, entered inside the sandbox. Default: the current one.
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Print the plan as JSON and exit without running anything.
    #[arg(long)]
    pub print_plan: bool,
    /// Test only: lower the detected platform facts with a JSON file such as
    /// `{"user_namespaces": false}` (never raises them; the enforcer re-checks the kernel).
    #[arg(long, value_name = "FILE", hide = true)]
    pub assume_facts: Option<PathBuf>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

fn parse_enforce(s: &str) -> Result<Enforce, String> {
    match s {
        "auto" => Ok(Enforce::Auto),
        "masks" => Ok(Enforce::Masks),
        "landlock-only" => Ok(Enforce::LandlockOnly),
        other => Err(format!(
            "unknown enforcement {other:?}; expected auto, masks or landlock-only"
        )),
    }
}

pub fn exec(args: ExecArgs) -> Result<ExitCode> {
    let target = args.policy.target()?;
    if target != Target::Linux {
        bail!("exec confines a command on this machine; the target must be linux, not {target}");
    }
    run(args)
}

#[cfg(target_os = "linux")]
fn run(args: ExecArgs) -> Result<ExitCode> {
    use std::io::Write as _;

    use linux::*;
    use sandboxer::linux::exec::{self, Ended};

    let command = command(&args)?;
    // Printing a plan, or lowering the facts for a test, starts from the namespace probe.
    let probed = args.print_plan || args.assume_facts.is_some();
    // A launch makes the masks shape's namespaces while the policy is read and planned.
    let ahead = match probed {
        true => None,
        false => exec::start_ahead(args.enforce, &command),
    };
    let policy = load_policy(&args.policy, &command)?;
    let how = args.enforce.unwrap_or(policy.linux.enforce);
    if probed {
        let facts = probed_facts(args.assume_facts.as_deref())?;
        let ended = match planner::choose_with(&policy, &facts, &HostFs, how) {
            Ok(plan) if args.print_plan => {
                let text = serde_json::to_string_pretty(&plan)?;
                writeln!(std::io::stdout().lock(), "{text}").context("writing the plan")?;
                return Ok(ExitCode::SUCCESS);
            }
            Ok(plan) => exec::run_plan(&plan, &command),
            Err(refusal) => Ended::Refused(refusal),
        };
        return Ok(report(ended));
    }
    // The namespace probe forks twice and waits for namespaces to be torn down (milliseconds
    // per launch), so a launch plans as if they work and lets the enforcer find out by doing;
    // only when that fails does it probe and plan again (in the library: `exec::launch`).
    Ok(report(exec::launch_or_become(
        ahead,
        &policy,
        &exec::unprobed_facts(),
        how,
        &command,
    )))
}

#[cfg(target_os = "linux")]
mod linux {
    use crate::ExitCode;
    use std::path::Path;

    use anyhow::{Context, Result};
    use sandboxer::Policy;
    pub use sandboxer::linux::enforce::Command;
    use sandboxer::linux::exec::Ended;
    use sandboxer::linux::facts::{self, AssumedFacts};
    use sandboxer::linux::plan::Facts;
    pub use sandboxer::linux::planner::{self, HostFs};
    use sandboxer::policy::default_policy;

    use super::ExecArgs;
    use crate::common::PolicyArgs;

    /// The policy, with this person's ways out (`profiles/linux/ways-out.toml`) as protected
    /// roots.
    ///
    /// The ways-out list (a passwd lookup, the templates expanded) is only used when the
    /// policy's `[linux] ways_out` is on, the default; the autorun list (parsed, and the
    /// programs looked up on `$PATH`) only when its `[autorun] guard` is, with `command`'s
    /// program among the programs guarded. A policy whose text mentions `ways_out` or
    /// `autorun` is first loaded without the lists, to read those two switches; then loaded
    /// again with the lists it wants. The file is read once either way.
    pub fn load_policy(args: &PolicyArgs, command: &Command) -> Result<Policy> {
        let mut opts = args.resolve_options()?;
        let (text, label) = match &args.policy {
            Some(path) => match std::fs::read_to_string(path) {
                Ok(text) => (std::borrow::Cow::Owned(text), path.display().to_string()),
                // The loader says what is wrong with the file, as every command does.
                Err(_) => return args.load_with(&opts),
            },
            None => (
                std::borrow::Cow::Borrowed(default_policy(opts.target)),
                "(embedded default policy)".to_string(),
            ),
        };
        let switches = ["ways_out", "autorun"]
            .iter()
            .any(|s| text.contains(s))
            .then(|| Policy::from_toml(&text, &label, &opts))
            .transpose()?;
        if switches.as_ref().is_none_or(|p| p.linux.ways_out) {
            opts.add_ways_out(args.profiles_dir.as_deref(), None, None)
                .context("loading the ways-out list")?;
        }
        if switches.as_ref().is_none_or(|p| p.autorun.guard) {
            args.fill_autorun(&mut opts, &[command.program.as_os_str()])?;
        }
        Ok(Policy::from_toml(&text, &label, &opts)?)
    }

    pub fn command(args: &ExecArgs) -> Result<Command> {
        let cwd = match &args.cwd {
            Some(dir) => std::path::absolute(dir)
                .with_context(|| format!("--cwd {}: cannot make it absolute", dir.display()))?,
            None => std::env::current_dir().context("reading the current directory; pass --cwd")?,
        };
        let (program, rest) = args
            .command
            .split_first()
            .context("no command given after --")?;
        Ok(Command {
            program: program.clone(),
            args: rest.to_vec(),
            cwd,
        })
    }

    /// This machine's facts, probed, then lowered by an `--assume-facts` file.
    pub fn probed_facts(assume: Option<&Path>) -> Result<Facts> {
        let detected = facts::detect();
        Ok(match assume {
            Some(file) => AssumedFacts::load(file)?.apply(&detected),
            None => detected,
        })
    }

    /// The exit status for how the launch ended, with what went wrong on stderr.
    pub fn report(ended: Ended) -> ExitCode {
        if let Some(message) = ended.message() {
            eprintln!("{message}");
        }
        ExitCode::from(ended.exit_code())
    }
}

#[cfg(not(target_os = "linux"))]
fn run(_args: ExecArgs) -> Result<ExitCode> {
    bail!("exec enforces Linux plans and runs on Linux only")
}
