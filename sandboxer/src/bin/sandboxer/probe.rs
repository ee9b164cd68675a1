//! `sandboxer probe`: the contract's harness. Runs the probes of one or more query files inside
//! this very process (start it inside the sandbox under test) and reports what happened —
//! errno, bytes read, entries listed — raw facts only. It decides no verdict: the runner
//! (`dispatcher contract`) does, from evidence the harness cannot forge.
//!
//! Exit status 0 when every probe was attempted (whatever happened to it), 2 on bad input.

use crate::ExitCode;
use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use sandboxer::probe::{self, Claim, VarsFile};

#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// A query file (TOML; see docs/contract.md). Repeatable: names are unique across files.
    #[arg(long = "queries", value_name = "FILE", required = true)]
    pub queries: Vec<PathBuf>,
    /// The run's variables: JSON `{"run_id": "...", "vars": {"home": "/...", ...}}`. A query
    /// using a variable this file does not define is refused.
    #[arg(long, value_name = "FILE")]
    pub vars: PathBuf,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn probe(args: ProbeArgs) -> Result<ExitCode> {
    let text = std::fs::read_to_string(&args.vars)
        .with_context(|| format!("reading the vars file {}", args.vars.display()))?;
    let vars: VarsFile = serde_json::from_str(&text).with_context(|| {
        format!(
            "{}: not a vars file ({{\"run_id\", \"vars\"}})",
            args.vars.display()
        )
    })?;
    if vars.run_id.is_empty()
        || !vars
            .run_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        anyhow::bail!(
            "{}: run_id {:?} must be letters, digits and '-'",
            args.vars.display(),
            vars.run_id
        );
    }
    let mut files = Vec::new();
    for q in &args.queries {
        let text = std::fs::read_to_string(q)
            .with_context(|| format!("reading the query file {}", q.display()))?;
        files.push((q.display().to_string(), text));
    }
    let probes = probe::load_all(&files, &|v| vars.vars.contains_key(v))?;
    let report = probe::run(&probes, &vars);
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string(&report)?).context("writing the report")?;
    } else {
        writeln!(
            out,
            "harness pid {} uid {} cwd {} ({})",
            report.pid, report.uid, report.cwd, report.platform
        )?;
        for r in &report.results {
            let what = match r.claim {
                Claim::Done => match (r.bytes, &r.exit_status) {
                    (Some(b), _) => format!("done ({b} bytes/entries)"),
                    (None, Some(s)) => format!("done (exit {s})"),
                    _ => "done".to_string(),
                },
                Claim::Failed => {
                    format!("failed: {}", r.error.as_deref().unwrap_or("(no message)"))
                }
                Claim::Skipped => {
                    format!("skipped: {}", r.error.as_deref().unwrap_or("(no reason)"))
                }
            };
            writeln!(out, "{:<32} {:<16} {:<60} {what}", r.name, r.op, r.target)?;
        }
        writeln!(
            out,
            "(raw facts only: verdicts are decided by the runner from evidence, see docs/contract.md)"
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
