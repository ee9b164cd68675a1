//! Part 3 of the served contract: the CLI's model runs the harness through the server — the
//! scripted model by default, the CLI's own logged-in model when asked for.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;

use super::ModelPart;
use super::api::{launch_body, launch_events};
use super::checks::tail;
use super::scripted::{ScriptedRun, ran_line};
use crate::adapter::Adapter;
use crate::contract::fixture::{Fixtures, Variant};
use crate::contract::report::{Column, How};
use crate::contract::{HarnessOutput, Runner, sh_quote};
use crate::modes::Mode;
use crate::server::client::Client;

/// How often the model is asked to run the harness before the part fails.
pub(super) const MODEL_ATTEMPTS: usize = 3;
/// How long one run of a real model may take.
const MODEL_TIMEOUT: Duration = Duration::from_secs(600);
/// How long one run against the scripted model may take: its turns are instant, so a run
/// that takes longer is stuck (a CLI waiting for an approval, retrying a refused request).
const SCRIPTED_TIMEOUT: Duration = Duration::from_secs(120);

/// How the CLI is logged in here, if it is.
#[derive(Debug, Clone)]
pub(super) enum Login {
    No,
    /// The person's login files (absolute) and where they go below the world's home.
    Files(Vec<(PathBuf, PathBuf)>),
    /// A variable of the adapter's `login_env`, and its value (handed to the server only).
    Env(String, String),
}

/// Decided from the adapter's data: a `config_home.login` file present in the person's
/// home, else a `login_env` variable set. Nothing is read from the files.
pub(super) fn login_state(a: &Adapter, home: &Path) -> Login {
    let mut files = Vec::new();
    for l in &a.config_home.login {
        // Validated at load: every `from` starts with "{home}/". A keychain login (a Mac's)
        // is not looked for here: it shows only as the copy a launch writes.
        let Some(rel) = l
            .from
            .as_ref()
            .and_then(|f| f.get_ref().strip_prefix("{home}/"))
        else {
            continue;
        };
        if rel.contains('{') {
            continue;
        }
        let p = home.join(rel);
        if p.is_file() {
            files.push((p, PathBuf::from(rel)));
        }
    }
    if !files.is_empty() {
        return Login::Files(files);
    }
    for v in a.login_env.iter().flat_map(|v| v.get_ref().iter()) {
        if let Ok(val) = std::env::var(v)
            && !val.is_empty()
        {
            return Login::Env(v.clone(), val);
        }
    }
    Login::No
}

/// Who plays the model in part 3.
#[derive(Debug, Clone)]
pub(super) enum Driver {
    /// The scripted model on loopback, the CLI pointed at it (`scripted.rs`).
    Scripted,
    /// The CLI's own login and its real model.
    Login(Login),
}

/// Part 3: the real CLI, launched headless through the server, is asked to run the harness
/// script with its own shell tool (and, with the scripted model, to write a file with its own
/// write tool); up to [`MODEL_ATTEMPTS`] attempts while it does not. Its answer is never read
/// for a verdict: the report the harness wrote, the disk, the fixtures and the scripted
/// model's record decide.
#[allow(clippy::too_many_arguments)]
pub(super) fn model_part(
    r: &mut Runner<'_>,
    a: &Adapter,
    client: &Client,
    probes: &[sandboxer::probe::Probe],
    queries: &[PathBuf],
    sandboxer: &Path,
    driver: &Driver,
    harness: &Column,
) -> ModelPart {
    let detail = match driver {
        Driver::Scripted => {
            "the scripted model on 127.0.0.1 (no login; --real-model asks the CLI's own)"
                .to_string()
        }
        Driver::Login(Login::Files(f)) => format!(
            "logged in: {}",
            f.iter()
                .map(|(p, _)| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Driver::Login(Login::Env(k, _)) => format!("logged in: ${k} is set"),
        Driver::Login(Login::No) => unreachable!("only called when logged in"),
    };
    let mut part = ModelPart {
        status: "failed".into(),
        detail,
        attempts: Vec::new(),
        checks: Vec::new(),
        column: None,
        differs_from_harness: Vec::new(),
    };
    let host = r.host.expect("live");
    let chat = r.layout.chat.to_string();
    let runtime = r.layout.state.runtime(&r.layout.chat);
    let workflow = r.layout.state.workflow(&r.layout.workflow);
    let live = r.live_probes(probes);
    for attempt in 1..=MODEL_ATTEMPTS {
        let started = Instant::now();
        let run_id = r.next_run_id();
        let (hargv, vars_path) = r.harness_argv(&run_id, queries, sandboxer);
        // The report goes where the chat may write: its runtime.
        let report = runtime.join(format!(".contract-report-{run_id}.json"));
        let script = r.layout.harness_dir.join(format!("model-{run_id}.sh"));
        let text = format!(
            "#!/bin/sh\n# The sandbox contract's harness, run by the CLI's own shell tool.\n{} > {}\necho {}\n",
            hargv
                .iter()
                .map(|w| sh_quote(w))
                .collect::<Vec<_>>()
                .join(" "),
            sh_quote(&report.display().to_string()),
            ran_line(&run_id)
        );
        if let Err(e) = fs::write(&script, text)
            .and_then(|_| fs::set_permissions(&script, fs::Permissions::from_mode(0o755)))
        {
            part.attempts.push(format!("{}: {e}", script.display()));
            break;
        }
        let scripted = match driver {
            Driver::Scripted => match ScriptedRun::start(
                r.layout.root.join(format!("model-{run_id}.jsonl")),
                workflow.join(format!("model-write-{run_id}.txt")),
                &run_id,
            ) {
                Ok(s) => Some(s),
                Err(e) => {
                    part.attempts
                        .push(format!("the scripted model did not start: {e}"));
                    break;
                }
            },
            Driver::Login(_) => None,
        };
        let (prompt, timeout) = match &scripted {
            Some(s) => (s.prompt(&script), SCRIPTED_TIMEOUT),
            None => (model_prompt(&script), MODEL_TIMEOUT),
        };
        let mut body = launch_body(r, a, "structured", vec![prompt]);
        if let Some(s) = &scripted {
            body["model_endpoint"] = s.endpoint();
        }
        let mut ran_it = false;
        let mut never_asked = false;
        let mut how = String::new();
        let mut seen: Vec<serde_json::Value> = Vec::new();
        let result = r.live_run_with(
            Variant::Chat,
            &live,
            &run_id,
            &vars_path,
            &mut |_fx: &mut Fixtures| {
                let _ = fs::remove_file(&report);
                let v = client
                    .call("POST", "/v1/chats/launch", Some(&body))
                    .and_then(|r| r.ok())
                    .map_err(|e| format!("launching the model run: {e:#}"))?;
                let launch = v["launch"].as_str().unwrap_or("").to_string();
                how = wait_for_end(client, &chat, &launch, timeout);
                seen = launch_events(client, &chat, &launch).unwrap_or_default();
                let output = seen
                    .iter()
                    .filter(|e| e["event"] == "output")
                    .filter_map(|e| e["text"].as_str())
                    .collect::<String>();
                match fs::read_to_string(&report) {
                    Ok(t) => {
                        ran_it = true;
                        Ok(HarnessOutput {
                            report: Ok(t),
                            stderr: output,
                        })
                    }
                    Err(_) => {
                        let why = scripted.as_ref().and_then(ScriptedRun::no_report);
                        never_asked = why.is_some();
                        Ok(HarnessOutput {
                            report: Err(format!(
                                "{} (no {}; the chat {how}; its output ends: {})",
                                why.unwrap_or_else(|| "the CLI did not run the harness".into()),
                                report.display(),
                                tail(&output, 300)
                            )),
                            stderr: String::new(),
                        })
                    }
                }
            },
        );
        match result {
            Ok(judged) => {
                let mut col =
                    r.column(&a.name, Variant::Chat, host, Mode::Full.as_str(), How::Live);
                col.confinement = format!(
                    "run by the CLI's own shell tool in a chat launched by the server (attempt {attempt}; the chat {how})"
                );
                col.results = r.results(Variant::Chat, judged);
                col.elapsed_ms = started.elapsed().as_millis() as u64;
                part.differs_from_harness = col
                    .results
                    .iter()
                    .filter(|m| {
                        harness
                            .results
                            .iter()
                            .find(|h| h.probe == m.probe)
                            .is_some_and(|h| h.got != m.got)
                    })
                    .map(|m| m.probe.clone())
                    .collect();
                part.checks = scripted
                    .as_ref()
                    .map(|run| {
                        let mut checks = run.checks();
                        checks.push(run.through_the_proxy(&seen));
                        checks
                    })
                    .unwrap_or_default();
                part.status = "ran".into();
                part.column = Some(col);
                break;
            }
            Err(e) => {
                part.attempts.push(e);
                // A run the model made but that failed is a finding, not a reason to ask
                // again; so is a CLI that never asks the endpoint it was pointed at.
                if ran_it || never_asked {
                    break;
                }
            }
        }
    }
    part
}

/// The prompt: run one script with the shell tool, nothing else.
pub(super) fn model_prompt(script: &Path) -> String {
    format!(
        "This is an automated test of the sandbox you run in. Use your shell tool to run exactly \
         this one command, once, and wait for it to finish: sh {}\n\
         Do not run any other command, do not read or change any other file, and do not try to \
         work around errors. When it has finished, answer with the single word DONE.",
        sh_quote(&script.display().to_string())
    )
}

/// Waits until the chat's launch is no longer running (stopping it after `timeout`), and says
/// how it ended.
pub(super) fn wait_for_end(client: &Client, chat: &str, launch: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        match client
            .call("GET", &format!("/v1/chats/{chat}"), None)
            .and_then(|r| r.ok())
        {
            Ok(v)
                if v["launch"] == launch
                    && v["state"] != "running"
                    && v["state"] != "launching" =>
            {
                return v["ended"]["how"].as_str().unwrap_or("ended").to_string();
            }
            Ok(_) => {}
            Err(e) => return format!("could not be watched: {e:#}"),
        }
        if Instant::now() > deadline {
            let _ = client.call(
                "POST",
                &format!("/v1/chats/{chat}/stop"),
                Some(&json!({"grace_seconds": 2})),
            );
            return format!("was stopped after {} s", timeout.as_secs());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter;

    #[test]
    fn login_is_decided_from_the_adapters_data() {
        let all = adapter::load_all(None).unwrap();
        let claude = adapter::find(&all, "claude").unwrap();
        let home = tempfile::tempdir().unwrap();
        // Only without the adapter's variables in this environment is the answer "no".
        let env_login = ["ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"]
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
        if !env_login {
            assert!(matches!(login_state(&claude, home.path()), Login::No));
        }
        fs::create_dir_all(home.path().join(".claude")).unwrap();
        fs::write(home.path().join(".claude/.credentials.json"), "{}").unwrap();
        match login_state(&claude, home.path()) {
            Login::Files(f) => assert_eq!(f[0].1, PathBuf::from(".claude/.credentials.json")),
            other => panic!("{other:?}"),
        }
        // agy names no login at all: never logged in.
        let agy = adapter::find(&all, "agy").unwrap();
        assert!(matches!(login_state(&agy, home.path()), Login::No));
    }
}
