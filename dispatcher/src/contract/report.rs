//! What a contract run found, and its three renderings: a table per launch (text), JSON, and
//! the permission map (Markdown, `docs/permission-map.md`).

use std::fmt::Write as _;
use std::path::PathBuf;

use sandboxer::{Target, Verdict};
use serde::Serialize;

use super::fixture::Variant;
use super::mutate::Mutation;

/// Where the numbers come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum How {
    /// Run inside the real launch on this machine, decided from evidence.
    Live,
    /// Decided by the SBPL evaluator against the exact profile the launch runs under.
    Evaluated,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProbeResult {
    pub probe: String,
    pub op: String,
    pub target: String,
    pub expected: Verdict,
    /// `None`: undecided (unknown to the evaluator, or no evidence could be gathered).
    pub got: Option<Verdict>,
    pub pass: bool,
    pub evidence: String,
    /// A deny that proves little here: the operation did not succeed even unconfined.
    pub vacuous: bool,
}

/// One launch's results: a CLI (or the scripted step) × platform × mode.
#[derive(Clone, Debug, Serialize)]
pub struct Column {
    /// The CLI, or `scripted-step`.
    pub cli: String,
    pub launch: Variant,
    pub platform: Target,
    pub mode: String,
    pub how: How,
    /// How the launch was confined (the mode decision's reason, or the profile).
    pub confinement: String,
    pub results: Vec<ProbeResult>,
    /// The launch could not be run or evaluated at all.
    pub error: Option<String>,
    pub elapsed_ms: u64,
}

impl Column {
    pub fn passed(&self) -> bool {
        self.error.is_none() && self.results.iter().all(|r| r.pass)
    }

    pub fn failures(&self) -> impl Iterator<Item = &ProbeResult> {
        self.results.iter().filter(|r| !r.pass)
    }

    /// The column's probe table (or why it has none), indented under its heading.
    pub fn table(&self, s: &mut String) {
        if let Some(e) = &self.error {
            let _ = writeln!(s, "   FAILED: {e}");
            return;
        }
        let _ = writeln!(
            s,
            "   {:<34} {:<8} {:<8} {:<5} EVIDENCE",
            "PROBE", "EXPECTED", "GOT", "PASS"
        );
        for r in &self.results {
            let _ = writeln!(
                s,
                "   {:<34} {:<8} {:<8} {:<5} {}{}",
                r.probe,
                r.expected.to_string(),
                cell(r.got),
                if r.pass { "ok" } else { "FAIL" },
                r.evidence,
                if r.vacuous {
                    " [vacuous: not possible even unconfined here]"
                } else {
                    ""
                }
            );
        }
    }

    pub fn header(&self) -> String {
        format!(
            "{} · {} · {} · {} · {}",
            self.cli,
            self.launch.as_str(),
            self.platform,
            self.mode,
            match self.how {
                How::Live => "live",
                How::Evaluated => "evaluated",
            }
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckStatus {
    Pass,
    Fail,
    /// Not applicable here (the CLI is not installed).
    Skipped,
}

/// A check about the CLI itself rather than the sandbox.
#[derive(Clone, Debug, Serialize)]
pub struct CliCheck {
    pub cli: String,
    pub platform: Target,
    /// `starts` (the real binary runs inside the launch) or `own-sandbox-off`.
    pub check: String,
    pub status: CheckStatus,
    pub detail: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub os: String,
    pub kernel: String,
    pub landlock_abi: u32,
    pub uid: u32,
    pub user: String,
    /// Installed CLIs and the first line of their `--version`.
    pub installed: Vec<(String, String)>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub machine: Machine,
    pub elapsed_ms: u64,
    pub columns: Vec<Column>,
    pub checks: Vec<CliCheck>,
    /// Failures of the run itself (a fixture, a control run).
    pub errors: Vec<String>,
    /// TEST ONLY hooks that were active; a run with any never passes.
    pub test_hooks: Vec<String>,
    pub mutation: Option<Mutation>,
    /// Every probe, launch and check passed (test hooks aside).
    pub results_passed: bool,
    pub passed: bool,
    /// The temporary folder, when kept.
    pub kept: Option<PathBuf>,
}

fn cell(v: Option<Verdict>) -> &'static str {
    match v {
        Some(Verdict::Allow) => "allow",
        Some(Verdict::Deny) => "deny",
        None => "unknown",
    }
}

impl Report {
    /// The text rendering: a table per launch, then the checks and a summary.
    pub fn text(&self) -> String {
        let mut s = String::new();
        for h in &self.test_hooks {
            let _ = writeln!(s, "TEST ONLY: {h}");
        }
        for c in &self.columns {
            let _ = writeln!(
                s,
                "== {} ({}, {} ms)",
                c.header(),
                c.confinement,
                c.elapsed_ms
            );
            c.table(&mut s);
        }
        if !self.checks.is_empty() {
            let _ = writeln!(s, "== checks of the CLIs themselves");
            for c in &self.checks {
                let _ = writeln!(
                    s,
                    "   {:<10} {:<6} {:<16} {:<7} {}",
                    c.cli,
                    c.platform.to_string(),
                    c.check,
                    match c.status {
                        CheckStatus::Pass => "ok",
                        CheckStatus::Fail => "FAIL",
                        CheckStatus::Skipped => "skipped",
                    },
                    c.detail
                );
            }
        }
        for e in &self.errors {
            let _ = writeln!(s, "ERROR: {e}");
        }
        let probes: usize = self.columns.iter().map(|c| c.results.len()).sum();
        let failed: usize = self.columns.iter().map(|c| c.failures().count()).sum();
        let broken = self.columns.iter().filter(|c| c.error.is_some()).count();
        let checks_failed = self
            .checks
            .iter()
            .filter(|c| c.status == CheckStatus::Fail)
            .count();
        let _ = writeln!(
            s,
            "contract: {} launches, {probes} probe results, {failed} failed, {broken} launches not run, {checks_failed} CLI checks failed, {} errors; {:.1} s: {}",
            self.columns.len(),
            self.errors.len(),
            self.elapsed_ms as f64 / 1000.0,
            if self.passed { "PASS" } else { "FAIL" }
        );
        if let Some(k) = &self.kept {
            let _ = writeln!(s, "kept: {}", k.display());
        }
        s
    }

    /// The permission map. Everything that depends on the machine (kernel, user, installed
    /// CLIs, timings, the CLI checks) sits between `<!-- machine-specific:begin -->` and
    /// `<!-- machine-specific:end -->`; the rest is the same on every machine where the
    /// contract passes.
    pub fn markdown(&self, probes: &[(&str, Vec<ProbeRow>)]) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# Permission map\n");
        let _ = writeln!(
            s,
            "Generated by `dispatcher contract --all --markdown > docs/permission-map.md`; do not edit by hand \
             (`tests/tests/contract.rs` fails when it is stale). Rows are the probes of `queries/*.toml`; \
             columns are each CLI's launch × platform × mode. A cell is what happened: **L** measured live on \
             Linux inside the real launch, decided from evidence (markers, tokens on disk, the runner's listeners \
             and outside process); **E** evaluated by the SBPL evaluator against the exact Seatbelt profile the \
             dispatcher writes for that launch (run live on a Mac by `scripts/mac-selftest.sh`). `—`: the probe \
             has no expectation on that platform. ✗ marks a result that contradicts the expectation. How it works: \
             `docs/contract.md`.\n"
        );
        let _ = writeln!(s, "<!-- machine-specific:begin -->");
        let m = &self.machine;
        let _ = writeln!(
            s,
            "Measured on {} {} (Landlock ABI {}) as {} (uid {}) in {:.1} s. Installed CLIs: {}.\n",
            m.os,
            m.kernel,
            m.landlock_abi,
            m.user,
            m.uid,
            self.elapsed_ms as f64 / 1000.0,
            if m.installed.is_empty() {
                "none".to_string()
            } else {
                m.installed
                    .iter()
                    .map(|(n, v)| format!("{n} ({v})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        );
        let vacuous: Vec<String> = self
            .columns
            .iter()
            .flat_map(|c| {
                c.results
                    .iter()
                    .filter(|r| r.vacuous)
                    .map(move |r| format!("{} ({})", r.probe, c.cli))
            })
            .collect();
        if !vacuous.is_empty() {
            let _ = writeln!(
                s,
                "Vacuous here (not possible even unconfined): {}.\n",
                vacuous.join(", ")
            );
        }
        if !self.checks.is_empty() {
            let _ = writeln!(
                s,
                "| CLI | platform | check | result | detail |\n|---|---|---|---|---|"
            );
            for c in &self.checks {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} |",
                    c.cli,
                    c.platform,
                    c.check,
                    match c.status {
                        CheckStatus::Pass => "ok",
                        CheckStatus::Fail => "FAIL",
                        CheckStatus::Skipped => "skipped",
                    },
                    c.detail.replace('|', "\\|").replace('\n', " ")
                );
            }
            let _ = writeln!(s);
        }
        let _ = writeln!(s, "<!-- machine-specific:end -->\n");
        for (title, rows) in probes {
            let cols: Vec<&Column> = self
                .columns
                .iter()
                .filter(|c| match *title {
                    "Chat contract" => c.launch == Variant::Chat,
                    _ => c.launch != Variant::Chat,
                })
                .collect();
            if cols.is_empty() {
                continue;
            }
            let _ = writeln!(s, "## {title}\n");
            let _ = write!(s, "| probe | op | expected (linux / macos) |");
            for c in &cols {
                let who = match c.launch {
                    Variant::Chat => c.cli.clone(),
                    Variant::AgentStep => format!("{} agent step", c.cli),
                    Variant::ScriptedStep => "scripted step".to_string(),
                };
                let _ = write!(s, " {who}<br>{} {} |", c.platform, c.mode);
            }
            let _ = write!(s, "\n|---|---|---|");
            for _ in &cols {
                let _ = write!(s, "---|");
            }
            let _ = writeln!(s);
            for row in rows {
                let _ = write!(
                    s,
                    "| `{}` | {} | {} / {} |",
                    row.name,
                    row.op,
                    row.linux.map_or("—", |v| cell(Some(v))),
                    row.macos.map_or("—", |v| cell(Some(v)))
                );
                for c in &cols {
                    let text = match c.results.iter().find(|r| r.probe == row.name) {
                        None => "—".to_string(),
                        Some(r) => format!(
                            "{}{} {}",
                            if r.pass { "" } else { "✗ " },
                            cell(r.got),
                            match c.how {
                                How::Live => "L",
                                How::Evaluated => "E",
                            }
                        ),
                    };
                    let _ = write!(s, " {text} |");
                }
                let _ = writeln!(s);
            }
            let _ = writeln!(s);
        }
        s
    }
}

/// A probe as a row of the map.
pub struct ProbeRow {
    pub name: String,
    pub op: String,
    pub linux: Option<Verdict>,
    pub macos: Option<Verdict>,
}

/// Cuts the machine-specific block out of a map (for comparing maps across machines).
pub fn normalise_map(text: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in text.lines() {
        if line.trim() == "<!-- machine-specific:begin -->" {
            inside = true;
            continue;
        }
        if line.trim() == "<!-- machine-specific:end -->" {
            inside = false;
            continue;
        }
        if !inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}
