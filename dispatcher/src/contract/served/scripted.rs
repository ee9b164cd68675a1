//! Part 3 with the scripted model (`crate::scripted_model`) on loopback: the CLI is pointed at
//! it through the launch's `model_endpoint`, so its own shell tool runs the harness script and
//! its own write tool writes a file with no login and nothing off the machine.
//!
//! The verdicts come from the disk and from the model's record, never from what the CLI says:
//! the harness's report, the written file, and each tool's result arriving in the next
//! request. A CLI that never asks the endpoint it was pointed at is named as such.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::Check;
use crate::contract::sh_quote;
use crate::scripted_model::{Action, Recorded, ScriptedModel, prompt};

/// The line the harness script prints last: its arrival in a later request shows the shell
/// tool's result went back to the model.
pub(super) fn ran_line(run_id: &str) -> String {
    format!("AGENTWORKS-HARNESS-RAN-{run_id}")
}

/// One attempt's scripted model: its server, its record, the file its write tool is to make.
pub(super) struct ScriptedRun {
    pub(super) model: ScriptedModel,
    pub(super) record: PathBuf,
    pub(super) written: PathBuf,
    pub(super) content: String,
    pub(super) run_id: String,
}

impl ScriptedRun {
    /// Starts the model for one attempt; `written` is a file the chat may write (its
    /// workflow folder: Gemini's `write_file` writes only inside its workspace).
    pub(super) fn start(record: PathBuf, written: PathBuf, run_id: &str) -> Result<Self, String> {
        let model = ScriptedModel::start(&record).map_err(|e| e.to_string())?;
        Ok(ScriptedRun {
            model,
            record,
            written,
            content: format!("written-by-the-write-tool-{run_id}"),
            run_id: run_id.to_string(),
        })
    }

    /// The prompt: the shell tool runs the harness script, then the write tool writes.
    pub(super) fn prompt(&self, script: &Path) -> String {
        prompt(&[
            Action::Run {
                command: format!("sh {}", sh_quote(&script.display().to_string())),
            },
            Action::Write {
                path: self.written.display().to_string(),
                content: self.content.clone(),
            },
        ])
    }

    /// The launch body's `model_endpoint`.
    pub(super) fn endpoint(&self) -> Value {
        json!({ "url": self.model.base_url() })
    }

    fn requests(&self) -> Vec<Recorded> {
        Recorded::read_all(&self.record).unwrap_or_default()
    }

    /// Why there is no report, as far as the record says: the CLI never asked, or asked and
    /// did not run the step.
    pub(super) fn no_report(&self) -> Option<String> {
        let asked = self.requests().iter().filter(|r| r.wire.is_some()).count();
        (asked == 0).then(|| {
            format!(
                "the CLI never asked the model endpoint {} it was pointed at (no request in {})",
                self.model.base_url(),
                self.record.display()
            )
        })
    }

    /// The facts of a run that produced a report.
    pub(super) fn checks(&self) -> Vec<Check> {
        let requests = self.requests();
        let ran = ran_line(&self.run_id);
        let mut out = Vec::new();
        let asked = requests.iter().filter(|r| r.wire.is_some()).count();
        out.push(fact(
            "endpoint-asked",
            asked > 0,
            format!("{asked} request(s) to {}", self.model.base_url()),
        ));
        let shell_back = requests
            .iter()
            .any(|r| r.tool_results.iter().any(|t| t.contains(&ran)));
        out.push(fact(
            "shell-result-returned",
            shell_back,
            if shell_back {
                format!("a later request carried the script's last line {ran}")
            } else {
                format!("no request carried {ran}: the shell tool's result never reached the model")
            },
        ));
        let on_disk = std::fs::read_to_string(&self.written).unwrap_or_default();
        let wrote = on_disk.trim_end() == self.content;
        out.push(fact(
            "write-tool-wrote",
            wrote,
            if wrote {
                format!(
                    "{} holds what the write tool was given",
                    self.written.display()
                )
            } else {
                format!(
                    "{} does not hold {:?}: {on_disk:?}",
                    self.written.display(),
                    self.content
                )
            },
        ));
        let steps = requests.iter().map(|r| r.step).max().unwrap_or(0);
        out.push(fact(
            "write-result-returned",
            steps >= 2,
            format!("the last request carried {steps} tool result(s) (2 due)"),
        ));
        out
    }
}

impl ScriptedRun {
    /// Whether the model's requests went through the chat's egress proxy: an `egress` event
    /// of the launch allowed the model's address (the sandbox has no other way to it).
    pub(super) fn through_the_proxy(&self, events: &[serde_json::Value]) -> Check {
        let port = self.model.addr().port();
        let allowed = events
            .iter()
            .filter(|e| e["event"] == "egress" && e["verdict"] == "allow")
            .filter(|e| e["port"] == port)
            .count();
        fact(
            "through-the-proxy",
            allowed > 0,
            format!(
                "{allowed} connection(s) to the model's port {port} allowed by the chat's egress proxy"
            ),
        )
    }
}

fn fact(check: &str, pass: bool, detail: String) -> Check {
    Check {
        check: check.into(),
        pass,
        detail,
    }
}
