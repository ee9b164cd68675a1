//! Deciding a probe on macOS without a Mac: the SBPL evaluator asked, for every Seatbelt
//! check the probe's operation needs ([`ProbeOp::seatbelt_checks`]), about the exact profile
//! a launch runs under. The probe is allowed only if every check is; an "unknown" anywhere
//! (and no deny) makes the probe unknown — never a guess.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::ops::{ProbeOp, SbplCheck};
use super::queries::Probe;
use crate::paths::normalize;
use crate::sbpl::{Outcome, ProcessTarget, Profile, Query};
use crate::target::Target;

/// One Seatbelt check and its answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CheckAnswer {
    /// `file-read-data /private/tmp/x`, `mach-lookup com.apple.…`, `lsopen`.
    pub check: String,
    pub outcome: Outcome,
    /// The deciding rule's line and text, or why there is none.
    pub rule: String,
}

/// A probe decided by the evaluator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Evaluated {
    pub outcome: Outcome,
    pub target: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arg: Option<String>,
    pub checks: Vec<CheckAnswer>,
}

impl Evaluated {
    /// The check that decided: the first deny, else the first unknown, else the last allow.
    pub fn deciding(&self) -> Option<&CheckAnswer> {
        self.checks
            .iter()
            .find(|c| c.outcome == Outcome::Deny)
            .or_else(|| self.checks.iter().find(|c| c.outcome == Outcome::Unknown))
            .or_else(|| self.checks.last())
    }
}

/// A path as Seatbelt sees it: `..` folded, `/tmp`, `/var`, `/etc` under `/private`.
pub fn macos_path(path: &str) -> Result<PathBuf, String> {
    let n = normalize(Path::new(path)).ok_or_else(|| format!("{path:?} is not absolute"))?;
    Ok(Target::Macos.apply_aliases(&n))
}

/// Evaluates `probe` (which must have a macOS expectation) against `profile`, with `vars`.
pub fn evaluate(
    profile: &Profile,
    probe: &Probe,
    vars: &BTreeMap<String, String>,
) -> Result<Evaluated, String> {
    let target = probe.target.expand(vars)?;
    let arg = probe.arg.as_ref().map(|a| a.expand(vars)).transpose()?;
    let checks = probe
        .op
        .seatbelt_checks(&target, arg.as_deref())
        .ok_or_else(|| format!("{} has no Seatbelt meaning", probe.op))?;
    let mut answers = Vec::new();
    for check in checks {
        answers.push(ask(profile, probe.op, check)?);
    }
    let outcome = if answers.iter().any(|a| a.outcome == Outcome::Deny) {
        Outcome::Deny
    } else if answers.iter().any(|a| a.outcome == Outcome::Unknown) {
        Outcome::Unknown
    } else {
        Outcome::Allow
    };
    Ok(Evaluated {
        outcome,
        target,
        arg,
        checks: answers,
    })
}

fn ask(profile: &Profile, op: ProbeOp, check: SbplCheck) -> Result<CheckAnswer, String> {
    let (label, e) = match check {
        SbplCheck::Path(sbpl_op, p, vnode) => {
            let p = macos_path(&p).map_err(|e| format!("{op}: {e}"))?;
            let e = profile.evaluate(sbpl_op, &Query::Path { path: &p, vnode });
            (format!("{sbpl_op} {}", p.display()), e)
        }
        SbplCheck::UnixSocket(p) => {
            let p = macos_path(&p).map_err(|e| format!("{op}: {e}"))?;
            let e = profile.evaluate("network-outbound", &Query::UnixSocket(&p));
            (format!("network-outbound unix-socket {}", p.display()), e)
        }
        SbplCheck::MachName(n) => {
            let e = profile.evaluate("mach-lookup", &Query::MachName(&n));
            (format!("mach-lookup {n}"), e)
        }
        SbplCheck::OutsideProcess(o) => {
            let e = profile.evaluate(o, &Query::Process(ProcessTarget::Outside));
            (format!("{o} (target outside)"), e)
        }
        SbplCheck::NoObject(o) => {
            let e = profile.evaluate(o, &Query::NoObject);
            (o.to_string(), e)
        }
    };
    let rule = match &e.rule {
        Some(r) => format!(
            "line {}: {}",
            r.line,
            r.text.lines().next().unwrap_or_default().trim()
        ),
        None => e.why.clone(),
    };
    Ok(CheckAnswer {
        check: label,
        outcome: e.outcome,
        rule,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::ResolveOptions;
    use crate::probe::queries::load;
    use crate::{Policy, sbpl, seatbelt};

    fn profile(policy: &str) -> Profile {
        let opts = ResolveOptions::new(Target::Macos, "/Users/ada".into(), false).unwrap();
        let p = Policy::from_toml(policy, "p.toml", &opts).unwrap();
        sbpl::parse(&seatbelt::render(&p).unwrap(), &BTreeMap::new()).unwrap()
    }

    const POLICY: &str = "version = 1\nbase = \"open\"\n[[protected]]\npath = \"/tmp/state\"\n[[grant]]\npath = \"/tmp/state/rt\"\naccess = \"rw\"\n";

    #[test]
    fn paths_take_macos_aliases_and_fold_dots() {
        assert_eq!(
            macos_path("/tmp/a/../b").unwrap(),
            Path::new("/private/tmp/b")
        );
        assert!(macos_path("rel").is_err());
    }

    #[test]
    fn probes_decide_through_the_profile() {
        let prof = profile(POLICY);
        let ps = load(
            "version = 1
[[probe]]
name = \"dotdot\"
op = \"read\"
target = \"{rt}/../other/x\"
macos = { expect = \"deny\", why = \"w\" }
[[probe]]
name = \"own\"
op = \"create\"
target = \"{rt}/x\"
macos = { expect = \"allow\", why = \"w\" }
[[probe]]
name = \"copy\"
op = \"open-copy\"
target = \"/Users/ada/a.command\"
arg = \"{rt}/open\"
macos = { expect = \"deny\", why = \"w\" }
",
            "t.toml",
            &|v| v == "rt",
        )
        .unwrap();
        let vars: BTreeMap<String, String> =
            [("rt".to_string(), "/tmp/state/rt".to_string())].into();
        let e = evaluate(&prof, &ps[0], &vars).unwrap();
        assert_eq!(e.outcome, Outcome::Deny, "{e:?}");
        assert_eq!(
            e.checks[0].check,
            "file-read-data /private/tmp/state/other/x"
        );
        assert_eq!(
            evaluate(&prof, &ps[1], &vars).unwrap().outcome,
            Outcome::Allow
        );
        let copy = evaluate(&prof, &ps[2], &vars).unwrap();
        assert_eq!(copy.outcome, Outcome::Deny, "{copy:?}");
        // Copying and running the copy are allowed; what refuses it is LaunchServices.
        assert_eq!(copy.checks[1].outcome, Outcome::Allow, "{copy:?}");
        assert!(
            copy.deciding().unwrap().check.contains("lsopen"),
            "{copy:?}"
        );
        let unblocked = profile(&format!("{POLICY}[launchers]\nblock = false\n"));
        assert_eq!(
            evaluate(&unblocked, &ps[2], &vars).unwrap().outcome,
            Outcome::Allow
        );
    }
}
