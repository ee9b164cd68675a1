//! Verdicts from evidence. After a run the runner looks at the disk, at the markers in what
//! the harness read, at its own listeners, outside process and terminal, and decides whether
//! each operation happened. The harness's own account is only cross-checked: for an operation
//! with a side effect, "done" without the effect, or the effect with "failed", makes the probe
//! fail as inconsistent. A harness that lies "denied" everywhere fails every allow-probe (no
//! evidence appears); one that lies "done" everywhere fails every side-effect deny-probe.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use sandboxer::Verdict;
use sandboxer::probe::{Claim, Evidence, ProbeOutcome};

use super::fixture::{Layout, Resolved};

/// What the runner's own fixtures saw during one run.
#[derive(Debug, Default)]
pub struct Observed {
    /// Received text by listener (`/path` or `@name`).
    pub listeners: BTreeMap<String, String>,
    /// What was waiting in the terminal's input queue.
    pub tty: String,
    pub signalled: Option<String>,
    pub traced: Option<String>,
    /// The marker in the outside process's environment.
    pub env_marker: String,
    /// The marker in the kernel objects the runner shares with the outside (empty where
    /// there are none).
    pub shared_marker: String,
}

/// The decision for one probe in one run.
#[derive(Debug, Clone)]
pub struct Decided {
    /// `None`: the evidence cannot be gathered (no marker known for the file, …).
    pub got: Option<Verdict>,
    /// Why the harness's account is not believed, when it is not.
    pub inconsistent: Option<String>,
    /// What was seen, in words.
    pub evidence: String,
}

fn contains_file(path: &Path, needle: &str) -> Result<bool, String> {
    match fs::read(path) {
        Ok(b) => Ok(String::from_utf8_lossy(&b).contains(needle)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

fn exists(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok()
}

fn short(s: &str) -> String {
    if s.len() > 48 {
        let cut = (0..=40).rev().find(|i| s.is_char_boundary(*i)).unwrap_or(0);
        format!("{}…", &s[..cut])
    } else {
        s.to_string()
    }
}

/// Decides one probe of one run from the evidence.
pub fn decide(
    layout: &Layout,
    r: &Resolved<'_>,
    outcome: Option<&ProbeOutcome>,
    obs: &Observed,
) -> Decided {
    let op = r.probe.op;
    let target = Path::new(&r.target);
    let arg = r.arg.as_deref().map(Path::new);
    let output = outcome.and_then(|o| o.output.as_deref()).unwrap_or("");
    let marker_in_output = |path: &Path| -> Result<(bool, String), String> {
        let m = layout
            .marker_for(path)
            .ok_or_else(|| format!("no marker is known for {}", path.display()))?;
        let label = short(&layout.marker_label(m));
        Ok(if output.contains(m) {
            (true, format!("marker {label} in what was read"))
        } else {
            (false, format!("marker {label} not in what was read"))
        })
    };
    // A marker the runner keeps outside the sandbox, in what the harness read.
    let outside_marker_read = |marker: &str, what: &str| {
        let b = !marker.is_empty() && output.contains(marker);
        let not = if b { "" } else { "not " };
        (b, format!("{what} {not}in what was read"))
    };
    let seen: Result<(bool, String), String> = match op.evidence() {
        Evidence::TargetMarkerInOutput => marker_in_output(target),
        Evidence::ArgMarkerInOutput => marker_in_output(arg.unwrap_or(target)),
        Evidence::MarkerInListing => match layout.marker_for(target) {
            None => Err(format!("no marker entry is known for {}", target.display())),
            Some(m) => {
                let listed = outcome
                    .and_then(|o| o.entries.as_ref())
                    .is_some_and(|e| e.iter().any(|n| n == m));
                Ok((
                    listed,
                    format!(
                        "marker entry {} {}listed",
                        short(m),
                        if listed { "" } else { "not " }
                    ),
                ))
            }
        },
        Evidence::TokenInTarget => contains_file(target, &r.token).map(|b| {
            (
                b,
                format!(
                    "token {} in {}",
                    if b { "landed" } else { "absent" },
                    target.display()
                ),
            )
        }),
        Evidence::CreatedWithToken => contains_file(target, &r.token).map(|b| {
            let what = match (b, exists(target)) {
                (true, _) => "created, with the token",
                (false, true) => "exists, without the token",
                (false, false) => "does not exist",
            };
            (b, format!("{} {what}", target.display()))
        }),
        Evidence::TargetGone => {
            let gone = !exists(target);
            Ok((
                gone,
                format!(
                    "{} {}",
                    target.display(),
                    if gone { "is gone" } else { "is still there" }
                ),
            ))
        }
        Evidence::Moved => {
            let gone = !exists(target);
            let there = arg.is_some_and(exists);
            Ok((
                gone || there,
                format!(
                    "source {}, destination {}",
                    if gone { "gone" } else { "still there" },
                    if there { "exists" } else { "absent" }
                ),
            ))
        }
        Evidence::SameInode => match (layout.planted_inode(target), arg) {
            (Some(ino), Some(a)) => {
                let linked = fs::symlink_metadata(a).is_ok_and(|m| (m.dev(), m.ino()) == ino);
                Ok((
                    linked,
                    format!(
                        "{} {}",
                        a.display(),
                        if linked {
                            "is a link to the target"
                        } else {
                            "is not a link to the target"
                        }
                    ),
                ))
            }
            _ => Err(format!(
                "the inode of {} was not recorded",
                target.display()
            )),
        },
        Evidence::TokenInArg => match arg {
            Some(a) => contains_file(a, &r.token).map(|b| {
                (
                    b,
                    format!(
                        "token {} in {}",
                        if b { "written" } else { "absent" },
                        a.display()
                    ),
                )
            }),
            None => Err("no arg".into()),
        },
        Evidence::ListenerGotToken => {
            let key = match op {
                sandboxer::probe::ProbeOp::ConnectAbstract => format!("@{}", r.target),
                _ => sandboxer::probe::normalize(target)
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            };
            match obs.listeners.get(&key) {
                None => Err(format!("no listener at {key}")),
                Some(text) => {
                    let got = text.contains(&r.token);
                    Ok((
                        got,
                        format!(
                            "listener {} {}",
                            short(&key),
                            if got {
                                "received the token"
                            } else {
                                "received nothing"
                            }
                        ),
                    ))
                }
            }
        }
        Evidence::OutsideSignalled => Ok(match &obs.signalled {
            Some(s) => (true, format!("outside process: {}", s.trim())),
            None => (false, "outside process received no signal".into()),
        }),
        Evidence::OutsideTraced => Ok(match &obs.traced {
            Some(s) => (true, format!("outside process: {}", s.trim())),
            None => (false, "outside process was never traced".into()),
        }),
        Evidence::SharedMarkerInOutput => Ok(outside_marker_read(
            &obs.shared_marker,
            "the shared object's marker",
        )),
        Evidence::KnobChanged => match layout.knob(target) {
            None => Err(format!("{} was not read before the run", target.display())),
            Some((_, Err(e))) => Err(e),
            Some((before, Ok(now))) => Ok((
                now != before,
                format!(
                    "{} {} ({:?} before the run)",
                    target.display(),
                    if now != before {
                        format!("changed to {:?}", now.trim())
                    } else {
                        "unchanged".to_string()
                    },
                    before.trim()
                ),
            )),
        },
        Evidence::DeviceNodeMade => {
            use std::os::unix::fs::FileTypeExt;
            let made = fs::symlink_metadata(target).is_ok_and(|m| m.file_type().is_char_device());
            Ok((
                made,
                format!(
                    "{} device node at {}",
                    if made { "a" } else { "no" },
                    target.display()
                ),
            ))
        }
        Evidence::OutsideEnvMarkerInOutput => Ok(outside_marker_read(
            &obs.env_marker,
            "outside environment marker",
        )),
        Evidence::TokenFromTerminal => {
            let b = obs.tty.contains(&r.token);
            Ok((
                b,
                format!(
                    "token {} the terminal's input",
                    if b { "arrived in" } else { "not in" }
                ),
            ))
        }
        Evidence::EvaluatedOnly => Err("decided by evaluation only".into()),
    };
    let (seen, mut evidence) = match seen {
        Ok(s) => s,
        Err(why) => {
            return Decided {
                got: None,
                inconsistent: None,
                evidence: why,
            };
        }
    };
    let claim = outcome.map(|o| o.claim);
    let failure = outcome
        .and_then(|o| o.error.as_deref())
        .map(|e| e.chars().take(160).collect::<String>())
        .unwrap_or_default();
    let inconsistent = match (claim, seen) {
        (None, _) => Some("the harness did not report this probe".to_string()),
        (Some(Claim::Done), false) if op.has_side_effect() => {
            Some("the harness says it was done, but there is no evidence".to_string())
        }
        (Some(Claim::Done), false)
            if matches!(
                op.evidence(),
                Evidence::TargetMarkerInOutput
                    | Evidence::ArgMarkerInOutput
                    | Evidence::OutsideEnvMarkerInOutput
                    | Evidence::SharedMarkerInOutput
            ) && outcome.and_then(|o| o.bytes).unwrap_or(0) > 0 =>
        {
            Some("the harness says it read bytes, but not the marker".to_string())
        }
        (Some(Claim::Failed | Claim::Skipped), true) => Some(format!(
            "the evidence shows it happened, but the harness reports {:?}",
            claim.expect("some")
        )),
        (Some(Claim::Skipped), false) => Some(format!("the harness skipped it: {failure}")),
        _ => None,
    };
    if !failure.is_empty() && (claim == Some(Claim::Failed) || inconsistent.is_some()) {
        evidence.push_str(&format!(" ({failure})"));
    }
    Decided {
        got: Some(if seen { Verdict::Allow } else { Verdict::Deny }),
        inconsistent,
        evidence,
    }
}
