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
    /// What the autorun guard covers here and what it cannot (when the policy loads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autorun: Option<AutorunReport>,
    /// What the policy's network is here (when the policy loads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkReport>,
}

/// The policy's `[network]` on this machine (docs/network.md).
#[derive(Debug, Serialize)]
pub struct NetworkReport {
    /// `open` (also without a section), `public`, `allowlist` or `none`.
    pub mode: String,
    /// How it holds here: a network namespace of the sandbox's own, its relay's proxy, or why
    /// it cannot hold.
    pub how: String,
}

fn network_report(
    policy: &sandboxer::Policy,
    plan: Option<&sandboxer::linux::plan::Plan>,
) -> NetworkReport {
    let mode = policy
        .network
        .as_ref()
        .map_or("open", |n| n.mode.as_str())
        .to_string();
    let how = match plan.and_then(|p| p.network.as_ref().map(|n| (p, n))) {
        _ if mode == "open" => "the machine's network, as the person's own programs have it".into(),
        None => "not enforced: the plan is refused".into(),
        Some((p, _)) if !p.namespaces => {
            "cannot hold without a network namespace (gap network-not-isolated)".into()
        }
        Some((_, n)) => match &n.relay {
            Some(r) => format!(
                "a network namespace of the sandbox's own with only lo; 127.0.0.1:{} and the \
                 loopback ports {:?} relayed to the egress proxy at {}",
                r.port,
                r.loopback,
                r.proxy.display()
            ),
            None if mode == "none" => {
                "a network namespace of the sandbox's own with only lo".into()
            }
            None => "a network namespace with only lo and no proxy named: nothing is reachable \
                 (gap network-no-proxy)"
                .into(),
        },
    };
    NetworkReport { mode, how }
}

/// The autorun guard on this machine, for the policy `doctor` was given.
#[derive(Debug, Serialize)]
pub struct AutorunReport {
    /// `[autorun] guard`: the list is applied.
    pub guard: bool,
    /// Guarded paths, by where they come from: the list (`profiles/autorun.toml`), the
    /// programs found on PATH, the repositories found under the home, the policy's own.
    pub from_list: usize,
    pub from_programs: usize,
    pub from_repositories: usize,
    pub from_policy: usize,
    /// Guarded paths a mount makes read-only in the plan (placeholders included).
    pub masked: usize,
    /// Of them, missing now: a placeholder stands in while a sandbox runs.
    pub placeholders: usize,
    /// Guarded paths no mask makes read-only here (see the plan's `autorun-*` gaps).
    pub unmasked: Vec<PathBuf>,
    /// What the guard cannot cover here.
    pub cannot: Vec<String>,
}

fn autorun_report(
    policy: &sandboxer::Policy,
    plan: Option<&sandboxer::linux::plan::Plan>,
) -> AutorunReport {
    use sandboxer::linux::plan::MountStep;
    let count = |f: &dyn Fn(&sandboxer::policy::Guarded) -> bool| {
        policy.guarded.iter().filter(|g| f(g)).count()
    };
    let guards: Vec<(&std::path::Path, bool)> = plan
        .map(|p| {
            p.mounts
                .iter()
                .filter_map(|m| match m {
                    MountStep::Guard { path, existed, .. } => Some((path.as_path(), *existed)),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    let unmasked = plan
        .into_iter()
        .flat_map(|p| &p.gaps)
        .filter(|g| g.id.starts_with("autorun-") && g.id != "autorun-repositories-beyond")
        .flat_map(|g| g.paths.clone())
        .collect();
    let mut cannot = policy.autorun.beyond.clone();
    if policy.autorun.guard {
        cannot.extend([
            "a git repository made while a sandbox runs (git init, git clone) is not guarded \
             until the next launch finds it"
                .to_string(),
            "files the guarded start-up files read from elsewhere (a `source ~/dotfiles/x` \
             line) are guarded only when listed"
                .to_string(),
        ]);
        if plan.is_some() {
            cannot.push(
                "when a program outside replaces a guarded file (an atomic save: git config, an \
                 editor, a CLI rewriting its settings), the guard is put back on the new file at \
                 once and a sandbox holding it open for writing is stopped; a write made in \
                 that instant, or into the program's temporary file before it is moved into \
                 place, is not prevented"
                    .to_string(),
            );
            cannot.push(
                "a file inside a guarded folder, or a guarded program, that has another name \
                 (a hard link: a build's output, pnpm's store) can be written through that \
                 name; any other guarded file with another name refuses the launch \
                 (autorun-hard-links)"
                    .to_string(),
            );
        }
    } else {
        cannot.push(
            "the policy turns the autorun list off ([autorun] guard = false): only its own \
             [[guard]] entries are read-only"
                .to_string(),
        );
    }
    AutorunReport {
        guard: policy.autorun.guard,
        from_list: count(&|g| {
            g.origin.file == "(autorun)"
                && !g.repository
                && !g.origin.field.starts_with("(programs)")
        }),
        from_programs: count(&|g| g.origin.field.starts_with("(programs)")),
        from_repositories: count(&|g| g.repository),
        from_policy: count(&|g| g.origin.file != "(autorun)"),
        masked: guards.len(),
        placeholders: guards.iter().filter(|(_, existed)| !existed).count(),
        unmasked,
        cannot,
    }
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
    let mut autorun = None;
    let mut network = None;
    let enforcement = match loaded {
        Err(e) => Enforcement::PolicyError {
            policy: label,
            message: format!("{e:#}"),
        },
        Ok(policy) => match planner::choose_with(&policy, &facts, &HostFs, policy.linux.enforce) {
            Ok(plan) => {
                autorun = Some(autorun_report(&policy, Some(&plan)));
                network = Some(network_report(&policy, Some(&plan)));
                Enforcement::Confined {
                    policy: label,
                    shape: plan.shape,
                    mounts: plan.mounts.len(),
                    landlock_abi: plan.landlock.abi,
                    landlock_rules: plan.landlock.rules.len(),
                    gaps: plan.gaps,
                }
            }
            Err(refusal) => {
                autorun = Some(autorun_report(&policy, None));
                network = Some(network_report(&policy, None));
                Enforcement::Refused {
                    policy: label,
                    refusal,
                }
            }
        },
    };
    Ok(DoctorReport {
        platform: "linux",
        linux: Some(LinuxReport {
            probe,
            assumed_facts: args.assume_facts.clone(),
            facts,
            enforcement,
            autorun,
            network,
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
        if let Some(n) = &l.network {
            line(format!("network: {} ({})", n.mode, n.how));
        }
        if let Some(a) = &l.autorun {
            line(format!(
                "autorun guard: {} (files that make a program outside the sandbox run code \
                 later are read-only: profiles/autorun.toml; [autorun] guard = false turns the \
                 list off)",
                if a.guard { "on" } else { "off" }
            ));
            line(format!(
                "  guarded here: {} paths from the list, {} of programs on PATH, {} in git \
                 repositories under the home, {} from the policy",
                a.from_list, a.from_programs, a.from_repositories, a.from_policy
            ));
            line(format!(
                "  read-only by a mount: {} ({} missing now: a placeholder stands in while a \
                 sandbox runs)",
                a.masked, a.placeholders
            ));
            if !a.unmasked.is_empty() {
                let shown: Vec<String> =
                    a.unmasked.iter().map(|p| p.display().to_string()).collect();
                line(format!("  not read-only here: {}", shown.join(", ")));
            }
            for c in &a.cannot {
                line(format!("  cannot: {c}"));
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
