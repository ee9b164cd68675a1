//! `sandboxer doctor`: what this machine can enforce, and what a policy would get here.
//!
//! Linux: the Landlock ABI and what it gives, whether user, mount and PID namespaces really
//! work (probed in a forked child, with the sysctl that blocks them and how to lift it),
//! `dev.tty.legacy_tiocsti`, and the plan the fallback rule picks for the policy — or the
//! refusal. macOS: whether `/usr/bin/sandbox-exec` exists and whether the Mac has more than
//! one real user account (that part is written for macOS and untested here).

use crate::ExitCode;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde::Serialize;

use crate::common::PolicyArgs;

#[derive(Args, Debug)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Test only: lower the detected Linux facts with a JSON file such as
    /// `{"user_namespaces": false}` (never raises them; see docs/linux.md).
    #[arg(long, value_name = "FILE", hide = true)]
    pub assume_facts: Option<PathBuf>,
}

/// Everything `doctor` found; `--json` prints it as is.
#[derive(Debug, Serialize)]
pub struct DoctorReport {
    /// `linux` or `macos`.
    pub platform: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub linux: Option<LinuxReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub macos: Option<sandboxer::macos::MacosFacts>,
}

#[derive(Debug, Serialize)]
pub struct LinuxReport {
    /// What detection found, with the evidence.
    pub probe: sandboxer::linux::facts::Probe,
    /// The test-only file that lowered the facts, if one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assumed_facts: Option<PathBuf>,
    /// The facts the planner used (the probe's, lowered by `assumed_facts`).
    pub facts: sandboxer::linux::plan::Facts,
    /// What the policy gets here.
    pub enforcement: Enforcement,
}

#[derive(Debug, Serialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum Enforcement {
    /// The fallback rule found a plan: this is what `sandboxer exec` would apply.
    Confined {
        policy: String,
        shape: sandboxer::linux::plan::Shape,
        mounts: usize,
        landlock_abi: u32,
        landlock_rules: usize,
        gaps: Vec<sandboxer::linux::plan::Gap>,
    },
    /// No shape is good enough: the command would run bridge-only.
    Refused {
        policy: String,
        refusal: sandboxer::linux::planner::Refusal,
    },
    /// The policy could not be loaded.
    PolicyError { policy: String, message: String },
}

pub fn doctor(args: DoctorArgs) -> Result<ExitCode> {
    let report = build(&args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", human(&report));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(target_os = "linux")]
fn build(args: &DoctorArgs) -> Result<DoctorReport> {
    use sandboxer::Target;
    use sandboxer::linux::facts::{self, AssumedFacts};
    use sandboxer::linux::planner::{self, HostFs};

    if let Some(t) = args.policy.target
        && t != Target::Linux
    {
        bail!("doctor reports this machine, a linux one; --target {t} does not apply");
    }
    let probe = facts::probe();
    let facts = match &args.assume_facts {
        Some(file) => AssumedFacts::load(file)
            .context("--assume-facts (test only)")?
            .apply(&probe.facts),
        None => probe.facts.clone(),
    };
    let label = match &args.policy.policy {
        Some(p) => p.display().to_string(),
        None => "(embedded default policy)".to_string(),
    };
    let loaded = args.policy.resolve_options().and_then(|mut opts| {
        args.policy.fill_ways_out(&mut opts)?;
        args.policy.fill_autorun(&mut opts, &[])?;
        args.policy.load_with(&opts)
    });
    let enforcement = match loaded {
        Err(e) => Enforcement::PolicyError {
            policy: label,
            message: format!("{e:#}"),
        },
        Ok(policy) => match planner::choose_with(&policy, &facts, &HostFs, policy.linux.enforce) {
            Ok(plan) => Enforcement::Confined {
                policy: label,
                shape: plan.shape,
                mounts: plan.mounts.len(),
                landlock_abi: plan.landlock.abi,
                landlock_rules: plan.landlock.rules.len(),
                gaps: plan.gaps,
            },
            Err(refusal) => Enforcement::Refused {
                policy: label,
                refusal,
            },
        },
    };
    Ok(DoctorReport {
        platform: "linux",
        linux: Some(LinuxReport {
            probe,
            assumed_facts: args.assume_facts.clone(),
            facts,
            enforcement,
        }),
        macos: None,
    })
}

#[cfg(target_os = "macos")]
fn build(args: &DoctorArgs) -> Result<DoctorReport> {
    if args.assume_facts.is_some() {
        bail!("--assume-facts lowers Linux facts; this is a Mac");
    }
    Ok(DoctorReport {
        platform: "macos",
        linux: None,
        macos: Some(sandboxer::macos::detect()),
    })
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
fn build(_args: &DoctorArgs) -> Result<DoctorReport> {
    bail!("this OS has no sandbox backend")
}

/// The report for people.
fn human(r: &DoctorReport) -> String {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    if let Some(l) = &r.linux {
        let p = &l.probe;
        line(format!(
            "platform: linux, kernel {}, uid {} gid {}{}",
            p.kernel.as_deref().unwrap_or("(unknown)"),
            p.facts.uid,
            p.facts.gid,
            if p.running_as_root {
                " (root: the AppArmor and Debian user-namespace restrictions do not apply to it)"
            } else {
                ""
            }
        ));
        match (&p.landlock.error, p.landlock.abi) {
            (Some(e), _) => line(format!("landlock: unavailable: {e}")),
            (None, abi) => {
                let rights: Vec<&str> = p.landlock.rights.iter().map(|r| r.as_str()).collect();
                line(format!("landlock: ABI {abi}"));
                line(format!("  rights: {}", rights.join(", ")));
                line(format!(
                    "  scopes: {}",
                    if p.landlock.scopes.is_empty() {
                        "none (ABI 6 brings abstract-unix-socket and signal)".to_string()
                    } else {
                        p.landlock.scopes.join(", ")
                    }
                ));
                if abi < 9 {
                    line(
                        "  no resolve-unix (ABI 9): pathname sockets are closed by masks only"
                            .into(),
                    );
                }
                if let Some(errata) = p.landlock.errata {
                    line(format!("  fixed errata: {errata:#x}"));
                }
            }
        }
        let ns = &p.namespaces;
        line(format!(
            "namespaces: user {}, mount+PID {}",
            yes(ns.user),
            yes(ns.mount_pid)
        ));
        if let (Some(step), errno) = (&ns.failed_step, ns.errno) {
            line(format!(
                "  the probe failed at {step}{}",
                errno
                    .map(|e| format!(": {}", sandboxer::linux::facts::errno_text(e)))
                    .unwrap_or_default()
            ));
        }
        if let Some(b) = &p.facts.namespaces_blocked_by {
            line(format!("  cause: {}", b.cause()));
            line(format!("  fix: {}", b.fix()));
        }
        for s in &p.settings {
            line(format!("  {} = {}: {}", s.name, s.value, s.meaning));
        }
        if p.legacy_tiocsti.is_none() {
            line(
                "  dev.tty.legacy_tiocsti absent: TIOCSTI is available (kernel before 6.2); \
                  the sandbox's setsid keeps it from the caller's terminal"
                    .into(),
            );
        }
        if let Some(file) = &l.assumed_facts {
            line(format!(
                "assumed facts (test only) from {}: Landlock ABI {}, user namespaces {}, \
                 mount+PID {}",
                file.display(),
                l.facts.landlock_abi,
                yes(l.facts.user_namespaces),
                yes(l.facts.mount_pid_namespaces)
            ));
        }
        match &l.enforcement {
            Enforcement::Confined {
                policy,
                shape,
                mounts,
                landlock_abi,
                landlock_rules,
                gaps,
            } => {
                line(format!(
                    "enforcement for {policy}: {shape} ({mounts} mount steps, {landlock_rules} \
                     Landlock rules at ABI {landlock_abi})"
                ));
                for g in gaps {
                    line(format!("  gap {}: {}", g.id, g.detail));
                }
            }
            Enforcement::Refused { policy, refusal } => {
                line(format!(
                    "enforcement for {policy}: refused ({})",
                    refusal.id
                ));
                line(format!("  {}", refusal.message));
            }
            Enforcement::PolicyError { policy, message } => {
                line(format!(
                    "enforcement for {policy}: the policy does not load: {message}"
                ));
            }
        }
    }
    if let Some(m) = &r.macos {
        line(format!("platform: macos ({})", m.untested));
        line(format!(
            "sandbox-exec: {}",
            if m.sandbox_exec {
                "present (/usr/bin/sandbox-exec)"
            } else {
                "missing: no Seatbelt sandbox; CLIs run bridge-only"
            }
        ));
        match (&m.real_users, m.multi_user) {
            (Some(users), Some(multi)) => line(format!(
                "real users: {} ({})",
                users.join(", "),
                if multi {
                    "more than one: this Mac is shared, CLIs run bridge-only"
                } else {
                    "one"
                }
            )),
            _ => line("real users: unknown (dscl failed)".into()),
        }
    }
    out
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}
