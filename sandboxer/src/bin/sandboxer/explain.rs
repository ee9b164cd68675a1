//! `sandboxer explain`: is one operation on one object allowed, and which rule says so?
//!
//! With `--profile FILE.sb` the SBPL evaluator answers for that profile (any profile, ours or
//! not). Otherwise a policy (`--policy`, or the embedded default) answers through its
//! reference meaning, `Policy::decide`, labelled as such; the backends' answers (rendered
//! profile, Linux plan) are to be added beside it.
//!
//! Exit codes: 0 allow, 1 deny, 3 unknown, 2 bad input (returned as an error to `main`).

use crate::ExitCode;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use sandboxer::sbpl::{self, Outcome, ProcessTarget, Query, QueryKind, RuleRef, VnodeType};
use sandboxer::{Op, Target, seatbelt};
use serde::Serialize;

use crate::common::PolicyArgs;

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// Evaluate this SBPL profile (any .sb file) instead of a policy.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["policy", "target", "home", "profiles_dir"]
    )]
    pub profile: Option<PathBuf>,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// A profile parameter, as `sandbox-exec -D KEY=VALUE` passes it (repeatable; --profile
    /// only). `(param "KEY")` returns VALUE as a string; it is never read as SBPL.
    #[arg(short = 'D', value_name = "KEY=VALUE", value_parser = parse_define, requires = "profile")]
    pub define: Vec<(String, String)>,
    /// The operation. With --profile an SBPL operation (file-read-data, file-write*,
    /// process-exec, mach-lookup, network-outbound, signal, lsopen, …); with a policy one of
    /// read, list, write, create, delete, rename, exec, connect-unix.
    #[arg(long, value_name = "OP")]
    pub op: String,
    /// The file's type, for profiles whose rules test it: REGULAR-FILE, DIRECTORY, SYMLINK,
    /// FIFO, SOCKET, BLOCK-DEVICE, CHARACTER-DEVICE (--profile only).
    #[arg(long, value_name = "TYPE", value_parser = parse_vnode_type, requires = "profile")]
    pub vnode_type: Option<VnodeType>,
    /// What the operation is on: a path as the kernel resolves it (file operations,
    /// process-exec, network-outbound to a Unix socket); an IP address and port
    /// (`127.0.0.1:3128`, `[::1]:53`) for network-outbound (connected to), network-bind and
    /// network-inbound (bound or listened on); a Mach service name (mach-lookup,
    /// mach-register); a process (signal, process-info-*): self, same-sandbox or outside.
    /// Omitted for operations on no object (process-fork, lsopen, …).
    #[arg(value_name = "PATH-OR-NAME")]
    pub object: Option<OsString>,
    /// Print one JSON object: {"outcome", "rule": {"line", "text"} | null, "why", "op",
    /// "query"}.
    #[arg(long)]
    pub json: bool,
}

/// What `explain` prints, in both forms.
#[derive(Serialize)]
struct Answer {
    outcome: Outcome,
    rule: Option<RuleRef>,
    why: String,
    op: String,
    /// The object as given; bytes that are not UTF-8 as `\xNN`, a backslash as `\\`.
    query: String,
    /// The policy's network mode (`open` without a `[network]` section); none for a profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    network: Option<String>,
}

pub fn explain(args: ExplainArgs) -> Result<ExitCode> {
    let answer = match &args.profile {
        Some(file) => explain_profile(file, &args)?,
        None => explain_policy(&args)?,
    };
    if args.json {
        println!("{}", serde_json::to_string(&answer)?);
    } else {
        print_text(&answer);
    }
    Ok(ExitCode::from(match answer.outcome {
        Outcome::Allow => 0,
        Outcome::Deny => 1,
        Outcome::Unknown => 3,
    }))
}

fn explain_profile(file: &Path, args: &ExplainArgs) -> Result<Answer> {
    let text = read_profile(file)?;
    let mut params = BTreeMap::new();
    for (key, value) in &args.define {
        if params.insert(key.clone(), value.clone()).is_some() {
            bail!("-D {key} is given twice");
        }
    }
    let profile =
        sbpl::parse(&text, &params).map_err(|e| anyhow::anyhow!("{}:{e}", file.display()))?;
    let op = args.op.as_str();
    let Some(kind) = sbpl::query_kind(op) else {
        bail!(
            "`{op}` is not an SBPL operation this tool knows (the list, with sources, is in \
             docs/sbpl-evaluator.md)"
        );
    };
    if args.vnode_type.is_some() && kind != QueryKind::Path {
        bail!(
            "--vnode-type applies to file operations only; `{op}` is checked against {}",
            kind.as_str()
        );
    }
    let object = args.object.as_ref();
    let ip = object
        .filter(|_| sbpl::ip_side(op).is_some())
        .and_then(|o| o.to_str())
        .and_then(|o| o.parse::<std::net::SocketAddr>().ok());
    let evaluation = match (kind, object) {
        _ if let Some(addr) = ip => profile.evaluate(op, &Query::Ip(addr)),
        (QueryKind::NoObject, None) => profile.evaluate(op, &Query::NoObject),
        (QueryKind::NoObject, Some(_)) => {
            bail!("`{op}` is checked against no object the evaluator models; drop PATH-OR-NAME")
        }
        (_, None) => bail!("`{op}` needs PATH-OR-NAME: {}", kind.as_str()),
        (QueryKind::Path, Some(p)) => {
            let path = absolute(p)?;
            profile.evaluate(
                op,
                &Query::Path {
                    path,
                    vnode: args.vnode_type,
                },
            )
        }
        (QueryKind::UnixSocket, Some(p)) => profile.evaluate(op, &Query::UnixSocket(absolute(p)?)),
        (QueryKind::Ip, Some(o)) => {
            bail!("`{op}` needs an IP address and port (127.0.0.1:3128, [::1]:53), not {o:?}")
        }
        (QueryKind::MachName, Some(name)) => {
            let name = name
                .to_str()
                .with_context(|| format!("the Mach service name {name:?} is not UTF-8"))?;
            profile.evaluate(op, &Query::MachName(name))
        }
        (QueryKind::Sysctl, Some(name)) => {
            let name = name
                .to_str()
                .with_context(|| format!("the sysctl name {name:?} is not UTF-8"))?;
            profile.evaluate(op, &Query::Sysctl(name))
        }
        (QueryKind::Process, Some(word)) => {
            let target = word
                .to_str()
                .and_then(ProcessTarget::parse)
                .with_context(|| {
                    format!("target process {word:?}: expected self, same-sandbox or outside")
                })?;
            profile.evaluate(op, &Query::Process(target))
        }
    };
    Ok(Answer {
        outcome: evaluation.outcome,
        rule: evaluation.rule,
        why: evaluation.why,
        op: args.op.clone(),
        query: object
            .map(|o| display_bytes(o.as_bytes()))
            .unwrap_or_default(),
        network: None,
    })
}

/// A policy answers through the backend that enforces it for the target — the rendered
/// Seatbelt profile read by the SBPL evaluator (macOS), or the Linux plan chosen for this
/// machine — and the answer is checked against the reference `decide`. A disagreement is
/// printed, and reported as "unknown": it is a bug, never a verdict to rely on.
fn explain_policy(args: &ExplainArgs) -> Result<Answer> {
    let Some(op) = Op::parse(&args.op) else {
        let all: Vec<&str> = Op::ALL.iter().map(|o| o.as_str()).collect();
        bail!(
            "`{}` is not a policy operation; expected one of {} (or pass --profile to ask a \
             Seatbelt profile about an SBPL operation)",
            args.op,
            all.join(", ")
        );
    };
    let Some(object) = args.object.as_ref() else {
        bail!("`{op}` needs a PATH");
    };
    let path = absolute(object)?;
    let policy = args.policy.load()?;
    let reference = policy.decide(op, path);
    let backend = match policy.target {
        Target::Macos => seatbelt_answer(&policy, op, path, args)?,
        Target::Linux => linux_answer(&policy, op, path)?,
    };
    let agree = matches!(
        (backend.outcome, reference.verdict),
        (Outcome::Allow, sandboxer::Verdict::Allow) | (Outcome::Deny, sandboxer::Verdict::Deny)
    );
    let why = if backend.runs_nothing {
        format!(
            "{}; the policy itself: {}: {}",
            backend.why, reference.verdict, reference.reason
        )
    } else if agree || backend.outcome == Outcome::Unknown {
        format!(
            "{}; reference decide: {}: {}",
            backend.why, reference.verdict, reference.reason
        )
    } else {
        format!(
            "{}; DISAGREES with the reference decide ({}: {}) — please report this",
            backend.why, reference.verdict, reference.reason
        )
    };
    Ok(Answer {
        outcome: if agree || backend.runs_nothing {
            backend.outcome
        } else {
            Outcome::Unknown
        },
        rule: backend.rule,
        why,
        op: op.as_str().to_string(),
        query: display_bytes(object.as_bytes()),
        network: Some(
            policy
                .network
                .as_ref()
                .map_or("open", |n| n.mode.as_str())
                .to_string(),
        ),
    })
}

struct BackendAnswer {
    outcome: Outcome,
    rule: Option<RuleRef>,
    why: String,
    /// The backend refuses to run anything under this policy here (no Linux plan): every
    /// operation is denied because nothing runs, which is no disagreement with the policy.
    runs_nothing: bool,
}

fn seatbelt_answer(
    policy: &sandboxer::Policy,
    op: Op,
    path: &Path,
    args: &ExplainArgs,
) -> Result<BackendAnswer> {
    let text = match &args.policy.profiles_dir {
        Some(dir) => seatbelt::render_with(policy, &seatbelt::Templates::from_profiles_dir(dir)?)?,
        None => seatbelt::render(policy)?,
    };
    let profile = sbpl::parse(&text, &BTreeMap::new())
        .map_err(|e| anyhow::anyhow!("the rendered profile does not parse: {e}"))?;
    let sbpl_op = seatbelt::operation_for(op);
    let query = seatbelt::query_for(op, path);
    let e = profile.evaluate(sbpl_op, &query);
    Ok(BackendAnswer {
        outcome: e.outcome,
        rule: e.rule,
        why: format!("rendered Seatbelt profile, {sbpl_op}: {}", e.why),
        runs_nothing: false,
    })
}

#[cfg(target_os = "linux")]
fn linux_answer(policy: &sandboxer::Policy, op: Op, path: &Path) -> Result<BackendAnswer> {
    use sandboxer::linux::{facts, planner};
    if !Target::Linux.is_host() {
        bail!("a Linux plan is made on the Linux machine that enforces it");
    }
    let facts = facts::detect();
    let plan = match planner::choose(policy, &facts) {
        Ok(plan) => plan,
        Err(refusal) => {
            return Ok(BackendAnswer {
                outcome: Outcome::Deny,
                rule: None,
                why: format!(
                    "no Linux plan here ({}): {}; nothing would run",
                    refusal.id.as_str(),
                    refusal.message
                ),
                runs_nothing: true,
            });
        }
    };
    let d = plan.decide(op, path);
    let gap = planner::classify(&plan, policy, op, path)
        .map(|g| format!(" (known gap: {})", g.id()))
        .unwrap_or_default();
    let beyond: Vec<&str> = plan
        .gaps
        .iter()
        .map(|g| g.id.as_str())
        .filter(|id| planner::GapKind::BEYOND_PATHS.iter().any(|k| k.id() == *id))
        .collect();
    let beyond = if beyond.is_empty() {
        String::new()
    } else {
        format!(
            "; beyond paths, this plan leaves shared: {} (`sandboxer doctor` says what each \
             means)",
            beyond.join(", ")
        )
    };
    Ok(BackendAnswer {
        outcome: if d.allowed() {
            Outcome::Allow
        } else {
            Outcome::Deny
        },
        rule: None,
        why: format!("Linux {} plan: {}{gap}{beyond}", plan.shape, d.by),
        runs_nothing: false,
    })
}

#[cfg(not(target_os = "linux"))]
fn linux_answer(_: &sandboxer::Policy, _: Op, _: &Path) -> Result<BackendAnswer> {
    bail!("a Linux plan is made on the Linux machine that enforces it")
}

fn print_text(answer: &Answer) {
    let object = if answer.query.is_empty() {
        String::new()
    } else {
        format!(" {}", answer.query)
    };
    println!("{}: {}{object}", answer.outcome.as_str(), answer.op);
    if let Some(rule) = &answer.rule {
        let text = rule.text.replace('\n', "\n    ");
        println!("  rule (line {}): {text}", rule.line);
    }
    println!("  why: {}", answer.why);
    if let Some(mode) = &answer.network {
        println!("  network: {mode} (docs/network.md)");
    }
}

/// The profile as text: SBPL is read as UTF-8, and a file that is not is refused with the
/// line of the first bad byte.
fn read_profile(file: &Path) -> Result<String> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    String::from_utf8(bytes).map_err(|e| {
        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = valid.iter().filter(|b| **b == b'\n').count() + 1;
        anyhow::anyhow!("{}:{line}: the profile is not UTF-8", file.display())
    })
}

fn absolute(p: &OsString) -> Result<&Path> {
    let path = Path::new(p);
    if !path.is_absolute() {
        bail!(
            "{} is not an absolute path (give the path as the kernel resolves it, e.g. \
             /private/tmp/x for /tmp/x on macOS)",
            path.display()
        );
    }
    Ok(path)
}

fn parse_define(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("{s:?}: expected KEY=VALUE")),
    }
}

fn parse_vnode_type(s: &str) -> Result<VnodeType, String> {
    VnodeType::parse(&s.to_ascii_uppercase()).ok_or_else(|| {
        let all: Vec<&str> = VnodeType::ALL.iter().map(|v| v.as_str()).collect();
        format!(
            "unknown vnode type {s:?}; expected one of {}",
            all.join(", ")
        )
    })
}

/// Bytes for display: UTF-8 as is, other bytes as `\xNN`, `\` as `\\` (so the two cannot be
/// confused).
fn display_bytes(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.utf8_chunks() {
        out.push_str(&chunk.valid().replace('\\', "\\\\"));
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_bytes_is_unambiguous() {
        assert_eq!(display_bytes(b"/a/b"), "/a/b");
        assert_eq!(display_bytes(b"/a\\xFF"), "/a\\\\xFF");
        assert_eq!(display_bytes(b"/a\xff"), "/a\\xFF");
    }

    #[test]
    fn defines() {
        assert_eq!(parse_define("K=a=b"), Ok(("K".into(), "a=b".into())));
        assert!(parse_define("=x").is_err());
        assert!(parse_define("K").is_err());
    }
}
