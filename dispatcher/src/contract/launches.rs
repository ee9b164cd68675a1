//! The live columns: the harness inside each CLI's launch (chat and agent step) and inside a
//! scripted step.

use std::path::{Path, PathBuf};
use std::time::Instant;

use sandboxer::Target;
use sandboxer::probe::Probe;

use crate::adapter::Adapter;
use crate::launch::{self, Decide};
use crate::modes::Mode;
use crate::platform;

use super::fixture::Variant;
use super::report::{Column, How, ProbeResult};

use super::live;
use super::runner::{Runner, sh_quote};

impl Runner<'_> {
    /// A CLI's launch, run live with the harness in place of the CLI.
    pub(super) fn live_cli(
        &mut self,
        a: &Adapter,
        variant: Variant,
        mode: Mode,
        probes: &[Probe],
        queries: &[PathBuf],
    ) -> Column {
        let started = Instant::now();
        let host = self.host.expect("live");
        let col = self.column(&a.name, variant, host, mode.as_str(), How::Live);
        filled(
            col,
            started,
            self.live_cli_inner(a, variant, mode, probes, queries),
        )
    }

    fn live_cli_inner(
        &mut self,
        a: &Adapter,
        variant: Variant,
        mode: Mode,
        probes: &[Probe],
        queries: &[PathBuf],
    ) -> Result<(String, Vec<ProbeResult>), String> {
        let host = self.host.expect("live");
        let mut planned = self.plan_launch(a, variant, mode, host, Vec::new())?;
        let launch = planned.launch();
        if !launch.confined || launch.mode.mode != mode {
            return Err(format!(
                "the launch is not confined in {mode} mode here: {}",
                launch.mode.reason
            ));
        }
        self.mutate_launch(&mut planned)?;
        self.write_launch(&planned)?;
        let launch = planned.launch();
        let sandboxer = PathBuf::from(&launch.argv[0]);
        let sandboxer = match host {
            Target::Linux => sandboxer,
            Target::Macos => platform::locate_sandboxer(&self.opts.dispatcher),
        };
        let run_id = self.next_run_id();
        let (hargv, vars_path) = self.harness_argv(&run_id, queries, &sandboxer);
        let mut argv = live::wrapper(&launch.argv, &launch.cli_argv).map_err(|e| e.to_string())?;
        argv.extend(hargv);
        let mut env = self.base_env();
        env.extend(launch.env_set.clone());
        let live = self.live_probes(probes);
        // Its egress proxy, as the dispatcher serves one for every launch that names one.
        let _egress = self.serve_egress(launch)?;
        let judged = self.live_run(
            variant,
            &live,
            &run_id,
            &vars_path,
            argv,
            &env,
            &launch.env_removed,
            &launch.cwd,
        )?;
        Ok((launch.mode.reason.clone(), self.results(variant, judged)))
    }

    /// The scripted step, run live: `dispatcher step run`'s launch, its script the harness.
    pub(super) fn live_script(&mut self, probes: &[Probe], queries: &[PathBuf]) -> Column {
        let started = Instant::now();
        let host = self.host.expect("live");
        let col = self.column("scripted-step", Variant::ScriptedStep, host, "-", How::Live);
        filled(col, started, self.live_script_inner(probes, queries))
    }

    fn live_script_inner(
        &mut self,
        probes: &[Probe],
        queries: &[PathBuf],
    ) -> Result<(String, Vec<ProbeResult>), String> {
        let host = self.host.expect("live");
        let sandboxer = platform::locate_sandboxer(&self.opts.dispatcher);
        let run_id = self.next_run_id();
        let (hargv, vars_path) = self.harness_argv(&run_id, queries, &sandboxer);
        let script = self.layout.harness_dir.join(format!("step-{run_id}.sh"));
        let text = format!(
            "#!/bin/sh\n# The contract's scripted step: the harness, run as the step's script.\nexec {}\n",
            hargv
                .iter()
                .map(|w| sh_quote(w))
                .collect::<Vec<_>>()
                .join(" ")
        );
        std::fs::write(&script, text).map_err(|e| format!("{}: {e}", script.display()))?;
        let mut step = self.plan_step(host, script, &sandboxer)?;
        crate::step::write_files(&self.layout.state, &step).map_err(|e| e.to_string())?;
        let env = self.base_env();
        let live = self.live_probes(probes);
        let argv = std::mem::take(&mut step.argv);
        let judged = self.live_run(
            Variant::ScriptedStep,
            &live,
            &run_id,
            &vars_path,
            argv,
            &env,
            &step.env_removed,
            &step.cwd,
        )?;
        Ok((
            step.confinement.clone(),
            self.results(Variant::ScriptedStep, judged),
        ))
    }

    pub(super) fn plan_step(
        &self,
        target: Target,
        script: PathBuf,
        sandboxer: &Path,
    ) -> Result<crate::step::StepLaunch, String> {
        let req = crate::step::StepRequest {
            workflow: self.layout.step_workflow.clone(),
            step: self.layout.scripted_step.clone(),
            script,
            args: Vec::new(),
            attach: Vec::new(),
        };
        let home = self.layout.home.clone();
        let mut step = crate::step::plan(
            &self.layout.state,
            &req,
            target,
            &home,
            sandboxer,
            |policy| Decide::ThisMachine.confinement(target, policy, &home, sandboxer, &mut None),
        )
        .map_err(|e| e.to_string())?;
        if self.opts.mutation.is_some() {
            self.mutate_text(&mut step.policy_text)?;
            if target == Target::Macos {
                step.profile = Some(
                    launch::render_seatbelt(&step.policy_text, &step.policy_path, &home, None)
                        .map_err(|e| format!("{e:#}"))?,
                );
            }
        }
        Ok(step)
    }
}

/// A live column with what its run gave: how it was confined and its results, or the error.
fn filled(
    mut col: Column,
    started: Instant,
    ran: Result<(String, Vec<ProbeResult>), String>,
) -> Column {
    match ran {
        Ok((how, results)) => {
            col.confinement = how;
            col.results = results;
        }
        Err(e) => col.error = Some(e),
    }
    col.elapsed_ms = started.elapsed().as_millis() as u64;
    col
}
