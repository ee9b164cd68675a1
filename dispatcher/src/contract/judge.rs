//! One live run of the harness and its verdicts: planting, the late writer, the run itself,
//! the evidence, and the unconfined control run that keeps a deny from being vacuous.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sandboxer::probe::{self, HarnessReport, Probe};
use sandboxer::{Target, Verdict};

use super::evidence::Observed;
use super::fixture::{Fixtures, Resolved, Variant};
use super::report::{Column, How, ProbeResult};

use super::runner::{HarnessOutput, Judged, Runner};
use super::{evidence, late, live};

impl Runner<'_> {
    /// Plants, runs `argv` under the runner's pty, gathers the evidence, judges every probe.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn live_run(
        &mut self,
        variant: Variant,
        probes: &[&Probe],
        run_id: &str,
        vars_path: &Path,
        argv: Vec<String>,
        env: &BTreeMap<String, String>,
        env_removed: &[String],
        cwd: &Path,
    ) -> Result<Vec<Judged>, String> {
        self.live_run_with(variant, probes, run_id, vars_path, &mut |fx| {
            let stdin = fx.pty.stdin().map_err(|e| e.to_string())?;
            let ran = live::run(live::Spawn {
                argv: argv.clone(),
                env,
                env_removed,
                cwd,
                stdin,
                controlling_tty: true,
                timeout: live::RUN_TIMEOUT,
            })
            .map_err(|e| e.to_string())?;
            Ok(HarnessOutput {
                report: if ran.success() {
                    Ok(ran.stdout)
                } else {
                    Err(format!("it ended with {}", ran.status()))
                },
                stderr: ran.stderr,
            })
        })
    }

    /// Plants, lets `run` start the harness however it is started (inside a launch here, or
    /// by a CLI's model through the server), gathers the evidence, judges every probe.
    pub(super) fn live_run_with(
        &mut self,
        variant: Variant,
        probes: &[&Probe],
        run_id: &str,
        vars_path: &Path,
        run: &mut dyn FnMut(&mut Fixtures) -> Result<HarnessOutput, String>,
    ) -> Result<Vec<Judged>, String> {
        let host = self.host.expect("live");
        let fx = self.fixtures.as_mut().expect("live runs have fixtures");
        let vars = self.layout.vars(variant, Some(fx));
        let resolved: Vec<Resolved<'_>> = probes
            .iter()
            .map(|p| Resolved::new(p, &vars, run_id))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        let unplantable = self
            .layout
            .prepare(&resolved, &mut fx.listeners)
            .map_err(|e| e.to_string())?;
        if host == Target::Linux
            && let Some((name, why)) = unplantable.iter().next()
        {
            return Err(format!("probe {name} cannot be prepared: {why}"));
        }
        let vf = probe::VarsFile {
            run_id: run_id.to_string(),
            vars: vars.clone(),
        };
        std::fs::write(
            vars_path,
            serde_json::to_string_pretty(&vf).expect("serializes"),
        )
        .map_err(|e| format!("{}: {e}", vars_path.display()))?;
        fx.outside.clear().map_err(|e| e.to_string())?;
        fx.listeners.drain();
        fx.pty.drain();
        let writer = late::LateWriter::start(
            self.layout.late_writes(&resolved),
            crate::grants::mask_registry(self.layout.state.path()),
        );
        let ran = run(fx);
        writer.finish()?;
        let ran = ran?;
        let report: Result<HarnessReport, String> = ran.report.and_then(|text| {
            serde_json::from_str(text.trim())
                .map_err(|e| format!("its output is not a report: {e}"))
        });
        let failure = report.as_ref().err().map(|e| {
            format!(
                "the harness run failed: {e}; stderr: {}",
                ran.stderr
                    .trim()
                    .chars()
                    .rev()
                    .take(600)
                    .collect::<String>()
                    .chars()
                    .rev()
                    .collect::<String>()
            )
        });
        let outcomes: BTreeMap<&str, &probe::ProbeOutcome> = report
            .as_ref()
            .map(|r| r.results.iter().map(|o| (o.name.as_str(), o)).collect())
            .unwrap_or_default();
        // Signals and traces are recorded by the outside process a moment later.
        // Each claimed one is waited for: the first to appear says nothing of the other.
        let claimed = |op: &str| {
            outcomes
                .values()
                .any(|o| o.op == op && o.claim == probe::Claim::Done)
        };
        let (signal_claimed, trace_claimed) = (claimed("signal"), claimed("ptrace"));
        if signal_claimed || trace_claimed {
            let deadline = Instant::now() + Duration::from_secs(1);
            while Instant::now() < deadline
                && ((signal_claimed && fx.outside.signalled().is_none())
                    || (trace_claimed && fx.outside.traced().is_none()))
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let observed = Observed {
            listeners: fx.listeners.drain(),
            tty: fx.pty.drain(),
            signalled: fx.outside.signalled(),
            traced: fx.outside.traced(),
            env_marker: fx.outside.marker.clone(),
            #[cfg(target_os = "linux")]
            shared_marker: fx.shared.marker.clone(),
            #[cfg(not(target_os = "linux"))]
            shared_marker: String::new(),
        };
        let mut judged = Vec::new();
        for r in &resolved {
            if unplantable.contains_key(&r.probe.name) {
                continue;
            }
            let mut decided = evidence::decide(
                &self.layout,
                r,
                outcomes.get(r.probe.name.as_str()).copied(),
                &observed,
            );
            if let (Some(f), None) = (&failure, &decided.inconsistent) {
                decided.inconsistent = Some(f.clone());
            }
            judged.push(Judged {
                name: r.probe.name.clone(),
                op: r.probe.op,
                target: r.target.clone(),
                expected: r.probe.expectation(host).expect("filtered").expect,
                decided,
            });
        }
        self.layout.end_run().map_err(|e| e.to_string())?;
        super::links::unlink_secret_copies(&self.layout)?;
        if let Some(f) = failure {
            return Err(f);
        }
        Ok(judged)
    }

    /// The unconfined control run: which probes can succeed at all on this machine.
    pub(super) fn control(
        &mut self,
        variant: Variant,
        probes: &[Probe],
        queries: &[PathBuf],
        sandboxer: &Path,
    ) {
        let probes = self.live_probes(probes);
        let run_id = self.next_run_id();
        let (argv, vars_path) = self.harness_argv(&run_id, queries, sandboxer);
        let cwd = self.layout.runtime(variant);
        if let Err(e) = std::fs::create_dir_all(&cwd) {
            self.errors.push(format!(
                "control ({}): {}: {e}",
                variant.as_str(),
                cwd.display()
            ));
            return;
        }
        let env = self.base_env();
        match self.live_run(variant, &probes, &run_id, &vars_path, argv, &env, &[], &cwd) {
            Ok(judged) => {
                let mut seen = BTreeMap::new();
                for j in judged {
                    if let Some(inc) = &j.decided.inconsistent {
                        self.errors.push(format!(
                            "control run ({}), unconfined: {}: {inc} ({})",
                            variant.as_str(),
                            j.name,
                            j.decided.evidence
                        ));
                    }
                    seen.insert(j.name, j.decided.got == Some(Verdict::Allow));
                }
                self.controls.insert(variant.as_str(), seen);
            }
            Err(e) => self.errors.push(format!(
                "control run ({}), unconfined: {e}",
                variant.as_str()
            )),
        }
    }

    pub(super) fn results(&self, variant: Variant, judged: Vec<Judged>) -> Vec<ProbeResult> {
        let control = self.controls.get(variant.as_str());
        judged
            .into_iter()
            .map(|j| {
                let reachable = control.and_then(|c| c.get(&j.name)).copied();
                let ev = j.decided.evidence.clone();
                let (pass, evidence, vacuous) = match (j.decided.got, &j.decided.inconsistent) {
                    (None, _) => (false, format!("undecided: {ev}"), false),
                    (Some(_), Some(inc)) => (false, format!("{inc} ({ev})"), false),
                    (Some(got), None) if got != j.expected => {
                        let broken = if j.expected == Verdict::Allow && reachable == Some(false) {
                            "; not possible even unconfined: the probe or its fixture is broken"
                        } else {
                            ""
                        };
                        (false, format!("{ev}{broken}"), false)
                    }
                    (Some(_), None) => (
                        true,
                        ev,
                        j.expected == Verdict::Deny && reachable == Some(false),
                    ),
                };
                ProbeResult {
                    probe: j.name,
                    op: j.op.to_string(),
                    target: j.target,
                    expected: j.expected,
                    got: j.decided.got,
                    pass,
                    evidence,
                    vacuous,
                }
            })
            .collect()
    }

    pub(super) fn column(
        &self,
        cli: &str,
        variant: Variant,
        platform: Target,
        mode: &str,
        how: How,
    ) -> Column {
        Column {
            cli: cli.to_string(),
            launch: variant,
            platform,
            mode: mode.to_string(),
            how,
            confinement: String::new(),
            results: Vec::new(),
            error: None,
            elapsed_ms: 0,
        }
    }
}
