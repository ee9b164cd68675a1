//! Parts 1 and 2 of the served contract: the chat launched through the API, its checks, and
//! the chat contract's probes run inside the wrapper the server recorded.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::json;

use super::ServerPart;
use super::api::{launch_body, launch_events};
use super::checks::{
    bridge_own_namespace, bridge_served, check, cli_confined, events_check, policy_identical,
    squatter_learns_nothing,
};
use super::server::Server;
use crate::adapter::Adapter;
use crate::contract::fixture::Variant;
use crate::contract::report::{Column, How};
use crate::contract::{Runner, sh_quote};
use crate::modes::Mode;
use crate::server::client::Client;
use crate::server::journal::Record;

/// Parts 1 and 2.
#[allow(clippy::too_many_arguments)]
pub(super) fn server_and_harness(
    r: &mut Runner<'_>,
    a: &Adapter,
    client: &Client,
    server: &Server,
    probes: &[sandboxer::probe::Probe],
    queries: &[PathBuf],
    sandboxer: &Path,
    part: &mut ServerPart,
) -> Column {
    let started = Instant::now();
    let host = r.host.expect("live");
    let mut col = r.column(&a.name, Variant::Chat, host, Mode::Full.as_str(), How::Live);
    let chat = r.layout.chat.to_string();
    let checks = &mut part.checks;

    // Launched through the API, in the server's tmux: an interactive CLI waits there (for a
    // prompt or a login) so its process, namespaces and bridge can be looked at while it runs.
    let body = launch_body(r, a, "tmux", Vec::new());
    let view = match client.call("POST", "/v1/chats/launch", Some(&body)) {
        Ok(reply) if reply.status == 201 => reply.body,
        Ok(reply) => {
            let msg = reply.body["error"]["message"]
                .as_str()
                .unwrap_or("")
                .to_string();
            check(
                checks,
                "launched",
                Err(format!("the server answered {}: {msg}", reply.status)),
            );
            col.error = Some("no chat was launched: nothing to run the harness under".into());
            return col;
        }
        Err(e) => {
            check(checks, "launched", Err(format!("{e:#}")));
            col.error = Some("no chat was launched: nothing to run the harness under".into());
            return col;
        }
    };
    let launch = view["launch"].as_str().unwrap_or("").to_string();
    part.launch = Some(launch.clone());
    check(
        checks,
        "launched",
        if view["state"] == "running" && view["mode"] == "full" && view["confined"] == true {
            Ok(format!(
                "201: running in full mode, confined ({})",
                view["reason"].as_str().unwrap_or("")
            ))
        } else {
            Err(format!("201, but the view says {view}"))
        },
    );
    check(
        checks,
        "listed",
        match client.call("GET", "/v1/chats", None).and_then(|r| r.ok()) {
            Ok(list) => {
                let me = list["chats"]
                    .as_array()
                    .and_then(|cs| cs.iter().find(|c| c["chat"] == chat.as_str()).cloned());
                match me {
                    Some(c) if c["state"] == "running" && c["launch"] == launch.as_str() => {
                        Ok(format!(
                            "GET /v1/chats: {chat} running, launch {launch}, {} supervision",
                            c["supervision"].as_str().unwrap_or("?")
                        ))
                    }
                    Some(c) => Err(format!("GET /v1/chats lists {c}")),
                    None => Err(format!("GET /v1/chats does not list {chat}")),
                }
            }
            Err(e) => Err(format!("{e:#}")),
        },
    );

    // What the server recorded: the started argv (the wrapper) and the journal's policy.
    let argv: Vec<String> = match launch_events(client, &chat, &launch) {
        Ok(evs) => evs
            .iter()
            .find(|e| e["event"] == "started")
            .and_then(|e| serde_json::from_value(e["argv"].clone()).ok())
            .unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    let record = Record::load(&Record::path(&r.layout.state, &r.layout.chat));
    let runtime = r.layout.state.runtime(&r.layout.chat);
    let policy_file = record.as_ref().ok().map(|rec| rec.policy_file.clone());
    check(
        checks,
        "policy-identical",
        policy_identical(&record, &argv, &runtime),
    );
    check(
        checks,
        "bridge-served",
        bridge_served(&runtime.join(crate::bridge::SOCKET_NAME)),
    );
    let confined = cli_confined(&r.layout.state, &r.layout.chat, server.pid);
    let cli_pid = confined.as_ref().ok().map(|(_, pid)| *pid);
    check(checks, "cli-confined", confined.map(|(d, _)| d));
    check(
        checks,
        "squatter-learns-nothing",
        squatter_learns_nothing(&r.layout.state),
    );
    check(
        checks,
        "bridge-own-namespace",
        match cli_pid {
            Some(pid) => bridge_own_namespace(
                &runtime.join(crate::bridge::SOCKET_NAME),
                pid,
                &r.layout.state.config_json(),
                &runtime,
            ),
            None => Err("no confined CLI process to look through".into()),
        },
    );

    // Part 2: the harness inside the server's own wrapper.
    match harness_in_server_wrapper(
        r,
        a,
        &argv,
        policy_file.as_deref(),
        probes,
        queries,
        sandboxer,
    ) {
        Ok((how, results)) => {
            col.confinement = how;
            col.results = results;
        }
        Err(e) => col.error = Some(e),
    }

    // Stopped through the API; its end must be in the log.
    check(
        checks,
        "stopped",
        match client
            .call(
                "POST",
                &format!("/v1/chats/{chat}/stop"),
                Some(&json!({"grace_seconds": 2})),
            )
            .and_then(|r| r.ok())
        {
            Ok(v) if v["state"] == "exited" => Ok(format!(
                "POST …/stop: exited ({})",
                v["ended"]["how"].as_str().unwrap_or("?")
            )),
            Ok(v) => Err(format!("POST …/stop answered {v}")),
            Err(e) => Err(format!("{e:#}")),
        },
    );
    check(checks, "events", events_check(client, &chat, &launch));
    col.elapsed_ms = started.elapsed().as_millis() as u64;
    col
}

/// The harness inside the wrapper the server recorded (everything of its argv before the
/// CLI's own command line), so it runs under the server's policy file. The environment is
/// the launch's as `launch::plan` computes it (variables only; no grant comes from it).
pub(super) fn harness_in_server_wrapper(
    r: &mut Runner<'_>,
    a: &Adapter,
    argv: &[String],
    policy_file: Option<&Path>,
    probes: &[sandboxer::probe::Probe],
    queries: &[PathBuf],
    sandboxer: &Path,
) -> Result<(String, Vec<super::super::report::ProbeResult>), String> {
    let host = r.host.expect("live");
    if argv.is_empty() {
        return Err("the server recorded no `started` argv: nothing to run under".into());
    }
    // The Linux wrapper ends with `--`; what follows is the CLI's command line.
    let cut = argv.iter().position(|w| w == "--").ok_or_else(|| {
        format!("the server's argv has no `sandboxer exec … --` wrapper: {argv:?}")
    })?;
    let wrapper = argv[..=cut].to_vec();
    if !wrapper
        .windows(2)
        .any(|w| w[0] == "--policy" && Some(Path::new(&w[1])) == policy_file)
    {
        return Err(format!(
            "the server's wrapper {wrapper:?} does not enforce the journal's policy file"
        ));
    }
    let planned = r
        .plan_launch(a, Variant::Chat, Mode::Full, host, Vec::new())?
        .into_launch();
    let run_id = r.next_run_id();
    let (hargv, vars_path) = r.harness_argv(&run_id, queries, sandboxer);
    let mut full = wrapper.clone();
    full.extend(hargv);
    let mut env = r.base_env();
    env.extend(planned.env_set.clone());
    let live = r.live_probes(probes);
    let cwd = planned.cwd.clone();
    let _egress = r.serve_egress(&planned)?;
    let judged = r.live_run(
        Variant::Chat,
        &live,
        &run_id,
        &vars_path,
        full,
        &env,
        &planned.env_removed,
        &cwd,
    )?;
    let how = format!(
        "the server's wrapper: {}",
        wrapper
            .iter()
            .map(|w| if w.contains(' ') {
                sh_quote(w)
            } else {
                w.clone()
            })
            .collect::<Vec<_>>()
            .join(" ")
    );
    Ok((how, r.results(Variant::Chat, judged)))
}
