//! The checks of the CLIs themselves: the real binary starts inside its launch, and its own
//! sandbox is off.

use std::process::Stdio;

use sandboxer::Target;

use crate::adapter::{self, Adapter};
use crate::modes::Mode;

use super::fixture::Variant;
use super::report::{CheckStatus, CliCheck};

use super::runner::Runner;
use super::{live, own_sandbox};

impl Runner<'_> {
    /// Whether the real CLI starts inside its launch (`--version`), and its own sandbox is
    /// off (statically, and by asking it where it can say so). Returns the checks and the
    /// version line of an installed CLI.
    pub(super) fn cli_checks(
        &mut self,
        a: &Adapter,
        own: &own_sandbox::Statement,
    ) -> (Vec<CliCheck>, Option<String>) {
        let host = self.host.expect("live");
        let check = |name: &str, status, detail: String| CliCheck {
            cli: a.name.clone(),
            platform: host,
            check: name.to_string(),
            status,
            detail,
        };
        let mut out = Vec::new();
        let installed = adapter::locate_binary(a);
        let mut version = None;
        match &installed {
            None => out.push(check(
                "starts",
                CheckStatus::Skipped,
                format!(
                    "{} is not installed here (scripts/install-clis.sh, or AGENTWORKS_CLI_{})",
                    a.binary,
                    a.name.to_ascii_uppercase()
                ),
            )),
            Some(_) => match self.run_cli(a, a.version_args.clone()) {
                Ok(ran)
                    if ran.success()
                        && !(ran.stdout.trim().is_empty() && ran.stderr.trim().is_empty()) =>
                {
                    // Some CLIs (pi) print their version on stderr.
                    let text = if ran.stdout.trim().is_empty() {
                        &ran.stderr
                    } else {
                        &ran.stdout
                    };
                    let line = text.trim().lines().next().unwrap_or_default().to_string();
                    version = Some(line.clone());
                    out.push(check(
                        "starts",
                        CheckStatus::Pass,
                        format!(
                            "`{} {}` inside the launch printed {line:?}",
                            a.binary,
                            a.version_args.join(" ")
                        ),
                    ));
                }
                Ok(ran) => out.push(check(
                    "starts",
                    CheckStatus::Fail,
                    format!(
                        "{} inside the launch: {}",
                        ran.status(),
                        ran.stderr.trim().lines().last().unwrap_or("")
                    ),
                )),
                Err(e) => out.push(check("starts", CheckStatus::Fail, e)),
            },
        }
        let statically = self
            .plan_launch(a, Variant::Chat, Mode::Full, host, Vec::new())
            .and_then(|l| own_sandbox::check_static(own, l.launch()));
        let observed = match (&own.observe, &installed) {
            (Some(obs), Some(_)) => Some(match self.run_cli(a, obs.args.clone()) {
                Ok(ran) if ran.stdout.contains(&obs.stdout_contains) => Ok(format!(
                    "`{} {}` inside the launch says {:?}",
                    a.binary,
                    obs.args.join(" "),
                    obs.stdout_contains
                )),
                Ok(ran) => Err(format!(
                    "`{} {}` inside the launch ({}) does not say {:?}",
                    a.binary,
                    obs.args.join(" "),
                    ran.status(),
                    obs.stdout_contains
                )),
                Err(e) => Err(e),
            }),
            (Some(_), None) => Some(Ok("(its own answer not asked: not installed)".to_string())),
            (None, _) => None,
        };
        let (status, detail) = match (statically, observed) {
            (Err(e), _) | (Ok(_), Some(Err(e))) => (CheckStatus::Fail, e),
            (Ok(s), Some(Ok(o))) => (CheckStatus::Pass, format!("{s}; {o}")),
            (Ok(s), None) => (CheckStatus::Pass, s),
        };
        out.push(check("own-sandbox-off", status, detail));
        (out, version)
    }

    /// Runs the real CLI inside its full-mode chat launch with `cli_args` after the adapter's.
    pub(super) fn run_cli(
        &mut self,
        a: &Adapter,
        cli_args: Vec<String>,
    ) -> Result<live::Ran, String> {
        let host = self.host.expect("live");
        let planned = self.plan_launch(a, Variant::Chat, Mode::Full, host, cli_args)?;
        let launch = planned.launch();
        if !launch.confined {
            return Err(format!(
                "the launch is not confined here: {}",
                launch.mode.reason
            ));
        }
        self.write_launch(&planned)?;
        let mut env = self.base_env();
        env.extend(launch.env_set.clone());
        // Its egress proxy, as for every launch: the sandbox hands its listeners to it before
        // the CLI starts, and refuses to start without it.
        let _egress = self.serve_egress(launch)?;
        live::run(live::Spawn {
            argv: launch.argv.clone(),
            env: &env,
            env_removed: &launch.env_removed,
            cwd: &launch.cwd,
            stdin: Stdio::null(),
            controlling_tty: false,
            timeout: live::RUN_TIMEOUT,
        })
        .map_err(|e| e.to_string())
    }

    pub(super) fn macos_own_sandbox(&self, a: &Adapter, own: &own_sandbox::Statement) -> CliCheck {
        let (status, detail) = match self
            .plan_launch(a, Variant::Chat, Mode::Full, Target::Macos, Vec::new())
            .and_then(|l| own_sandbox::check_static(own, l.launch()))
        {
            Ok(s) => (CheckStatus::Pass, s),
            Err(e) => (CheckStatus::Fail, e),
        };
        CliCheck {
            cli: a.name.clone(),
            platform: Target::Macos,
            check: "own-sandbox-off".into(),
            status,
            detail,
        }
    }
}
