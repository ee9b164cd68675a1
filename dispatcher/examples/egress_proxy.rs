//! Benchmark fixture: a chat's egress proxy served exactly as a launch serves it
//! (`dispatcher::launch::serve_egress`: the rules read from the policy's `[network]`, each
//! connection an `egress` event in the chat's log), without the launch around it, so that
//! `scripts/bench-network.sh` can time `sandboxer exec` through it. Prints `ready` once the
//! socket listens; serves until its stdin closes. Not installed.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use dispatcher::events::EventLog;
use dispatcher::ids::ChatId;
use dispatcher::state::StateRoot;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [sr_flag, root, chat_flag, chat, policy_flag, policy] = args.as_slice() else {
        return usage();
    };
    if (sr_flag.as_str(), chat_flag.as_str(), policy_flag.as_str())
        != ("--state-root", "--chat", "--policy")
    {
        return usage();
    }
    match serve(PathBuf::from(root), chat, PathBuf::from(policy)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("egress_proxy: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage() -> ExitCode {
    eprintln!("usage: egress_proxy --state-root DIR --chat CHAT --policy POLICY.toml");
    ExitCode::from(2)
}

fn serve(root: PathBuf, chat: &str, policy: PathBuf) -> Result<(), String> {
    let state = StateRoot::open(&root).map_err(|e| e.to_string())?;
    let chat = ChatId::new(chat).map_err(|e| e.to_string())?;
    let events = EventLog::open(&state, &chat).map_err(|e| e.to_string())?;
    let text =
        std::fs::read_to_string(&policy).map_err(|e| format!("{}: {e}", policy.display()))?;
    let Some(_proxy) =
        dispatcher::launch::serve_egress(&text, &chat, &events).map_err(|e| e.to_string())?
    else {
        return Err(format!("{} names no proxy", policy.display()));
    };
    println!("ready");
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    // Until the script closes our stdin (or ends).
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    Ok(())
}
