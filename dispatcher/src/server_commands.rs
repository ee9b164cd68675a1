//! The command line of the server and its clients: `dispatcher serve`, `dispatcher stop`,
//! `dispatcher chats …`. Part of the `dispatcher` binary (declared in `main.rs`, which only
//! dispatches here): the library's typed errors get their context here, at the edge.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use dispatcher::server::client::Client;
use dispatcher::server::{Ident, ServeOptions};
use dispatcher::state::StateRoot;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The port on 127.0.0.1 (0: any free port; the bound one is printed and written to
    /// <state-root>/server.json).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// The address to listen on: only 127.0.0.1 is accepted.
    #[arg(long, default_value = "127.0.0.1", value_name = "ADDR")]
    pub bind: String,
}

#[derive(Args, Debug)]
pub struct StopArgs {
    /// The port of the server to stop (on 127.0.0.1).
    #[arg(long)]
    pub port: u16,
    /// Stop its running chats too (default: they keep running and the next server adopts them).
    #[arg(long)]
    pub stop_chats: bool,
}

#[derive(Subcommand, Debug)]
pub enum ChatsCmd {
    /// Every chat and its state: running (pid or tmux session), exited, failed, never.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Launch a chat through the server.
    Launch(LaunchArgs),
    /// Stop a running chat: SIGTERM to its process group, SIGKILL after the grace time.
    Stop {
        chat: String,
        /// Seconds between SIGTERM and SIGKILL (default 5, at most 60).
        #[arg(long)]
        grace: Option<f64>,
        #[arg(long)]
        json: bool,
    },
    /// A chat's event log.
    Events {
        chat: String,
        /// Skip the first N events.
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// One JSON object per line (JSONL) instead of the one-line summaries.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
pub struct LaunchArgs {
    #[arg(long)]
    pub cli: String,
    #[arg(long)]
    pub chat: String,
    #[arg(long)]
    pub workflow: String,
    /// Attach another workflow: W (read-only) or W:rw. Repeatable.
    #[arg(long, value_name = "W[:rw]")]
    pub attach: Vec<String>,
    /// auto, full or bridge-only (default: the chat's saved mode).
    #[arg(long)]
    pub mode: Option<String>,
    /// Run in tmux (default: structured, headless with output recorded as events).
    #[arg(long)]
    pub tmux: bool,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub endpoint: crate::endpoint_args::EndpointArgs,
    /// Arguments passed to the CLI after the adapter's.
    #[arg(last = true)]
    pub cli_args: Vec<String>,
}

/// `dispatcher serve`.
pub fn serve(state: StateRoot, profiles_dir: Option<PathBuf>, args: ServeArgs) -> Result<ExitCode> {
    let home = dispatcher::platform::home()?;
    let root = state.path().to_path_buf();
    dispatcher::server::run(
        ServeOptions {
            state,
            port: args.port,
            bind: args.bind,
            profiles_dir,
            home,
        },
        |info| {
            println!(
                "dispatcher serve: listening on 127.0.0.1:{} (pid {}, state root {})",
                info.port,
                info.pid,
                root.display()
            );
            let _ = std::io::stdout().flush();
        },
    )?;
    eprintln!("dispatcher serve: stopped");
    Ok(ExitCode::SUCCESS)
}

/// `dispatcher stop --port N`: asks the server on that port, once it has proved that it holds
/// this state root's token, to shut down, and waits for its process to end. Never signals
/// anything by name.
pub fn stop(state: &StateRoot, args: StopArgs) -> Result<ExitCode> {
    let client = Client::for_port(state, args.port)?;
    let reply = client.call(
        "POST",
        "/v1/shutdown",
        Some(&json!({ "stop_chats": args.stop_chats })),
    )?;
    if reply.status == 401 {
        bail!(
            "the server on 127.0.0.1:{} refused this state root's proof: it is not {}'s server; nothing was stopped",
            args.port,
            state.path().display()
        );
    }
    let body = reply.ok()?;
    let pid = body["pid"]
        .as_i64()
        .and_then(|p| i32::try_from(p).ok())
        .filter(|p| *p > 0)
        .context("the server did not say its pid")?;
    let deadline = Instant::now() + Duration::from_secs(if args.stop_chats { 90 } else { 30 });
    // Known by its start time too, so a reused pid is not waited for; a zombie has ended.
    let ident = Ident::of(pid);
    while ident.as_ref().is_some_and(|i| i.alive()) {
        if Instant::now() > deadline {
            bail!("the server (pid {pid}) agreed to stop but is still running");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("stopped the server on 127.0.0.1:{} (pid {pid})", args.port);
    Ok(ExitCode::SUCCESS)
}

/// `dispatcher chats …`.
pub fn chats(state: &StateRoot, cmd: ChatsCmd) -> Result<ExitCode> {
    let client = Client::for_state_root(state)?;
    match cmd {
        ChatsCmd::List { json } => {
            let body = client.call("GET", "/v1/chats", None)?.ok()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&body)?);
            } else {
                println!(
                    "{:<20} {:<9} {:<12} {:<11} {:<24} REASON / END",
                    "CHAT", "STATE", "MODE", "HOW", "PID / TMUX"
                );
                for c in body["chats"].as_array().into_iter().flatten() {
                    print_chat_row(c);
                }
            }
        }
        ChatsCmd::Launch(a) => {
            let body = json!({
                "cli": a.cli,
                "chat": a.chat,
                "workflow": a.workflow,
                "attach": a.attach,
                "mode": a.mode,
                "supervision": if a.tmux { "tmux" } else { "structured" },
                "cli_args": a.cli_args,
                "model_endpoint": a.endpoint.endpoint()?.map(|e| json!({
                    "url": e.url,
                    "key": e.key,
                    "model": e.model,
                })),
            });
            let v = client.call("POST", "/v1/chats/launch", Some(&body))?.ok()?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!(
                    "launched chat {} ({}; {} mode: {})",
                    v["chat"].as_str().unwrap_or("?"),
                    v["launch"].as_str().unwrap_or("?"),
                    v["mode"].as_str().unwrap_or("?"),
                    v["reason"].as_str().unwrap_or("?")
                );
                if let Some(attach) = v["tmux_attach"].as_str() {
                    println!("attach: {attach}");
                } else if let Some(pid) = v["pid"].as_i64() {
                    println!("pid {pid}; output: dispatcher chats events {}", a.chat);
                }
            }
        }
        ChatsCmd::Stop { chat, grace, json } => {
            let body = grace.map(|g| json!({ "grace_seconds": g }));
            let v = client
                .call("POST", &format!("/v1/chats/{chat}/stop"), body.as_ref())?
                .ok()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!(
                    "chat {chat}: {}",
                    v["ended"]["how"].as_str().unwrap_or("stopped")
                );
            }
        }
        ChatsCmd::Events { chat, after, json } => {
            for e in client.events(&chat, after)? {
                if json {
                    println!("{e}");
                } else {
                    println!("{}", summarize_event(&e));
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_chat_row(c: &Value) {
    let s = |k: &str| c[k].as_str().unwrap_or("-").to_string();
    let how = if c["launch"].is_null() {
        "-".to_string()
    } else {
        s("supervision")
    };
    let at = match (c["pid"].as_i64(), c["tmux_session"].as_str()) {
        (_, Some(t)) => format!("tmux {t}"),
        (Some(p), _) => format!("pid {p}"),
        _ => "-".into(),
    };
    let detail = c["ended"]["how"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| s("reason"));
    println!(
        "{:<20} {:<9} {:<12} {:<11} {:<24} {}",
        s("chat"),
        s("state"),
        s("mode"),
        how,
        at,
        detail
    );
}

fn summarize_event(e: &Value) -> String {
    let kind = e["event"].as_str().unwrap_or("?");
    let detail = match kind {
        "started" => format!(
            "{} in {} mode ({})",
            e["cli"].as_str().unwrap_or("?"),
            e["mode"].as_str().unwrap_or("?"),
            e["reason"].as_str().unwrap_or("")
        ),
        "exited" => format!("status {}", e["code"]),
        "bridge" => {
            let c = &e["call"];
            format!(
                "{} {} {}: {}",
                c["tool"].as_str().unwrap_or("?"),
                c["target"].as_str().unwrap_or(""),
                c["verdict"].as_str().unwrap_or("?"),
                c["reason"].as_str().unwrap_or("")
            )
        }
        "sandbox_denial" => format!(
            "{}({}) {} {}",
            e["process"].as_str().unwrap_or("?"),
            e["pid"],
            e["operation"].as_str().unwrap_or("?"),
            e["target"].as_str().unwrap_or("")
        ),
        "output" => format!(
            "{}: {}",
            e["stream"].as_str().unwrap_or("?"),
            e["text"].as_str().unwrap_or("").trim_end()
        ),
        _ => {
            let mut rest = e.clone();
            if let Some(m) = rest.as_object_mut() {
                for k in ["ts_ms", "chat", "event"] {
                    m.remove(k);
                }
            }
            rest.to_string()
        }
    };
    format!("{} {kind:<14} {detail}", e["ts_ms"])
}
