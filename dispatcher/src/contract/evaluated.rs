//! The macOS columns: every probe decided by the SBPL evaluator against the exact profile a
//! launch writes.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use sandboxer::probe::{self, Probe};
use sandboxer::{Target, Verdict};

use crate::adapter::Adapter;
use crate::launch;
use crate::modes::Mode;

use super::fixture::Variant;
use super::report::{Column, How, ProbeResult};

use super::runner::Runner;

impl Runner<'_> {
    /// A CLI's macOS launch, decided by the evaluator against its exact profile.
    pub(super) fn evaluate_cli(
        &self,
        a: &Adapter,
        variant: Variant,
        mode: Mode,
        probes: &[Probe],
    ) -> Column {
        let started = Instant::now();
        let mut col = self.column(
            &a.name,
            variant,
            Target::Macos,
            mode.as_str(),
            How::Evaluated,
        );
        let profile = self
            .plan_launch(a, variant, mode, Target::Macos, Vec::new())
            .and_then(|mut l| {
                self.mutate_launch(&mut l)?;
                launch::seatbelt_profile(l.launch(), &self.layout.home, None)
                    .map_err(|e| format!("{e:#}"))
            });
        self.evaluate_into(&mut col, variant, profile, probes);
        col.elapsed_ms = started.elapsed().as_millis() as u64;
        col
    }

    pub(super) fn evaluate_script(&self, probes: &[Probe]) -> Column {
        let started = Instant::now();
        let mut col = self.column(
            "scripted-step",
            Variant::ScriptedStep,
            Target::Macos,
            "-",
            How::Evaluated,
        );
        let script = self.layout.harness_dir.join("step-evaluated.sh");
        let profile = self
            .plan_step(Target::Macos, script, Path::new("sandboxer"))
            .and_then(|s| {
                s.profile
                    .ok_or_else(|| "the step has no profile".to_string())
            });
        self.evaluate_into(&mut col, Variant::ScriptedStep, profile, probes);
        col.elapsed_ms = started.elapsed().as_millis() as u64;
        col
    }

    pub(super) fn evaluate_into(
        &self,
        col: &mut Column,
        variant: Variant,
        profile: Result<String, String>,
        probes: &[Probe],
    ) {
        let text = match profile {
            Ok(t) => t,
            Err(e) => {
                col.error = Some(e);
                return;
            }
        };
        let parsed = match sandboxer::sbpl::parse(&text, &BTreeMap::new()) {
            Ok(p) => p,
            Err(e) => {
                col.error = Some(format!("the rendered profile does not parse: {e}"));
                return;
            }
        };
        col.confinement = format!(
            "the Seatbelt profile `dispatcher profile` writes ({} lines)",
            text.lines().count()
        );
        let vars = self.layout.vars(variant, None);
        for p in probes {
            let Some(expect) = p.macos.as_ref() else {
                continue;
            };
            let (got, target, evidence) = match probe::evaluate(&parsed, p, &vars) {
                Ok(e) => {
                    let got = match e.outcome {
                        sandboxer::sbpl::Outcome::Allow => Some(Verdict::Allow),
                        sandboxer::sbpl::Outcome::Deny => Some(Verdict::Deny),
                        sandboxer::sbpl::Outcome::Unknown => None,
                    };
                    let why = e
                        .deciding()
                        .map(|c| format!("{}: {}", c.check, c.rule))
                        .unwrap_or_default();
                    (got, e.target.clone(), why)
                }
                Err(e) => (None, p.target.as_str().to_string(), e),
            };
            col.results.push(ProbeResult {
                probe: p.name.clone(),
                op: p.op.to_string(),
                target,
                expected: expect.expect,
                pass: got == Some(expect.expect),
                got,
                evidence,
                vacuous: false,
            });
        }
    }
}
