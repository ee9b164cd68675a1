//! A step's verdict, from the disk, the evidence folder and the model's record only.

use std::collections::BTreeMap;
use std::fs;

use super::scenario::Judge;
use super::{Concrete, StepResult};
use crate::contract::served::checks::tail;

/// What the runner put in place before a run, to judge against.
#[derive(Default)]
pub(super) struct Planted {
    /// By step: the content planted in a `seen` step's target.
    pub(super) seen: BTreeMap<String, String>,
    /// By step: a `written` step's target as it was once everything was planted (`None`:
    /// absent). Taken after planting, as two steps may share a target.
    before: BTreeMap<String, Option<String>>,
}

impl Planted {
    pub(super) fn snapshot(&mut self, steps: &[Concrete<'_>]) {
        for c in steps.iter().filter(|c| c.step.judge == Judge::Written) {
            let now = c.target.as_ref().and_then(|t| fs::read_to_string(t).ok());
            self.before.insert(c.step.name.clone(), now);
        }
    }
}

/// The step's outcome: `got` is `allow` when the operation took effect, `deny` when it did
/// not; `pass` is left to the caller (a control must be allowed, a launch must match the
/// expectation). `text` is what the CLI's tools returned (the whole record, or the control's
/// output) and `result` the step's own tool result, shown in the detail.
pub(super) fn judge(
    c: &Concrete<'_>,
    planted: &Planted,
    text: &str,
    result: Option<&str>,
) -> StepResult {
    let (allowed, mut detail) = match c.step.judge {
        Judge::Seen => {
            let content = planted.seen.get(&c.step.name).cloned().unwrap_or_default();
            if !content.is_empty() && text.contains(&content) {
                (true, "the planted file's content came back".to_string())
            } else {
                (
                    false,
                    "the planted file's content appears nowhere".to_string(),
                )
            }
        }
        Judge::Written => {
            let target = c.target.as_ref().expect("checked at load");
            let now = fs::read_to_string(target).ok();
            let before = planted.before.get(&c.step.name).cloned().flatten();
            if now.as_deref().map(str::trim_end) == Some(c.marker.as_str()) {
                (true, format!("{} holds what was written", target.display()))
            } else if now != before {
                (
                    true,
                    format!(
                        "{} changed: {:?}",
                        target.display(),
                        tail(now.as_deref().unwrap_or("(removed)"), 80)
                    ),
                )
            } else {
                (
                    false,
                    format!(
                        "{} {}",
                        target.display(),
                        if now.is_some() {
                            "unchanged"
                        } else {
                            "not on disk"
                        }
                    ),
                )
            }
        }
        Judge::Evidence => {
            let evidence = c.evidence.as_ref().expect("checked at load");
            let now = fs::read_to_string(evidence).unwrap_or_default();
            if now.trim() == c.marker {
                (
                    true,
                    format!("{} was written from outside", evidence.display()),
                )
            } else {
                (false, format!("no {}", evidence.display()))
            }
        }
    };
    if let Some(r) = result {
        detail.push_str(&format!(
            "; the tool said: {:?}",
            tail(&r.replace('\n', " "), 120)
        ));
    }
    StepResult {
        step: c.step.name.clone(),
        tool: c.step.tool,
        expected: c.step.expect,
        got: if allowed { "allow" } else { "deny" }.into(),
        pass: false,
        detail,
    }
}
