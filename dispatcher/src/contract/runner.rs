//! The runner: the world, its fixtures and the launch being probed, and what every run
//! shares (run ids, the harness's command line and environment, the launch request).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sandboxer::probe::{self, Probe, ProbeOp};
use sandboxer::{Target, Verdict};

use crate::adapter::Adapter;
use crate::launch::{self, Decide, LaunchRequest, Planned};
use crate::modes::Mode;

use super::fixture::{Fixtures, Layout, Variant};

use super::{Options, evidence, live};

pub(super) struct Runner<'o> {
    pub(super) opts: &'o Options,
    /// Dropped before the layout: its processes are stopped before their folder goes.
    pub(super) fixtures: Option<Fixtures>,
    pub(super) layout: Layout,
    pub(super) host: Option<Target>,
    pub(super) runs: u32,
    /// Per launch variant: which probes succeeded unconfined (the control run).
    pub(super) controls: BTreeMap<&'static str, BTreeMap<String, bool>>,
    pub(super) errors: Vec<String>,
    pub(super) harness_files: BTreeMap<String, PathBuf>,
}

/// What one harness run gave: its JSON report (or why there is none) and its stderr.
pub(super) struct HarnessOutput {
    pub(super) report: Result<String, String>,
    pub(super) stderr: String,
}

/// One probe of one live run, judged.
pub(super) struct Judged {
    pub(super) name: String,
    pub(super) op: ProbeOp,
    pub(super) target: String,
    pub(super) expected: Verdict,
    pub(super) decided: evidence::Decided,
}

/// The `sh` spelling of one word.
pub(super) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

impl Runner<'_> {
    pub(super) fn next_run_id(&mut self) -> String {
        self.runs += 1;
        format!("{}-{}", self.layout.invocation, self.runs)
    }

    pub(super) fn base_env(&self) -> BTreeMap<String, String> {
        live::base_env(
            &self.layout.home,
            &self.layout.xdg_runtime,
            &self.layout.tmux_tmpdir,
        )
    }

    /// The harness's command line for a run, and its vars file.
    pub(super) fn harness_argv(
        &self,
        run_id: &str,
        queries: &[PathBuf],
        sandboxer: &Path,
    ) -> (Vec<String>, PathBuf) {
        let program = match &self.opts.harness {
            Some(h) => vec![h.display().to_string()],
            None => vec![sandboxer.display().to_string(), "probe".into()],
        };
        let vars_path = self.layout.harness_dir.join(format!("vars-{run_id}.json"));
        (live::harness_argv(&program, queries, &vars_path), vars_path)
    }

    /// The probes a live run on this host decides.
    pub(super) fn live_probes<'p>(&self, probes: &'p [Probe]) -> Vec<&'p Probe> {
        let host = self.host.expect("live runs have a host");
        probes
            .iter()
            .filter(|p| p.expectation(host).is_some() && probe::supported_live(p.op, host))
            .collect()
    }

    pub(super) fn chat_and_workflow(
        &self,
        v: Variant,
    ) -> (
        crate::ids::ChatId,
        crate::ids::WorkflowId,
        Vec<crate::grants::Attach>,
    ) {
        match v {
            Variant::Chat => (
                self.layout.chat.clone(),
                self.layout.workflow.clone(),
                vec![
                    crate::grants::Attach {
                        workflow: self.layout.attached.clone(),
                        access: sandboxer::Access::Ro,
                    },
                    crate::grants::Attach {
                        workflow: self.layout.attached_rw.clone(),
                        access: sandboxer::Access::Rw,
                    },
                ],
            ),
            _ => (
                self.layout.step_chat.clone(),
                self.layout.step_workflow.clone(),
                Vec::new(),
            ),
        }
    }

    /// Plans a CLI's launch for `target` (confinement asked of this machine for the host,
    /// assumed for another OS), as `dispatcher launch` and the server do.
    pub(super) fn plan_launch(
        &self,
        a: &Adapter,
        v: Variant,
        mode: Mode,
        target: Target,
        cli_args: Vec<String>,
    ) -> Result<Planned, String> {
        let (chat, workflow, attach) = self.chat_and_workflow(v);
        let req = LaunchRequest {
            cli: a.name.clone(),
            chat,
            workflow,
            attach,
            mode: Some(mode),
            headless: false,
            cwd: None,
            target,
            home: self.layout.home.clone(),
            cli_args,
            model_endpoint: None,
        };
        launch::prepare(&self.layout.state, a, &req, Decide::ThisMachine).map_err(|e| e.to_string())
    }

    /// Serves a launch's egress proxy while its harness runs, its events in the chat's log.
    pub(super) fn serve_egress(
        &self,
        launch: &crate::launch::Launch,
    ) -> Result<Option<crate::egress::ProxyHandle>, String> {
        let text = launch.policy_text().ok_or("the launch has no policy")?;
        let events = crate::events::EventLog::open(&self.layout.state, &launch.chat)
            .map_err(|e| e.to_string())?;
        crate::launch::serve_egress(text, &launch.chat, &events).map_err(|e| e.to_string())
    }

    /// Writes a planned launch's files (its Seatbelt profile on a Mac).
    pub(super) fn write_launch(&self, planned: &Planned) -> Result<(), String> {
        planned
            .files(&self.layout.home)
            .and_then(|f| f.write())
            .map_err(|e| e.to_string())
    }

    /// TEST ONLY: breaks the launch's policy text as `--break-policy` says.
    pub(super) fn mutate_text(&self, text: &mut String) -> Result<(), String> {
        if let Some(m) = self.opts.mutation {
            *text = m.apply(text)?;
        }
        Ok(())
    }

    /// TEST ONLY: breaks the launch's policy as `--break-policy` says.
    pub(super) fn mutate_launch(&self, planned: &mut Planned) -> Result<(), String> {
        match self.opts.mutation {
            Some(m) => m.apply_to_launch(planned.launch_mut()),
            None => Ok(()),
        }
    }
}
