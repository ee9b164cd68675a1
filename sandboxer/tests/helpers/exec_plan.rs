//! Test helper (built as an example, never shipped): runs a command under a hand-written Linux
//! plan, so the enforcer can be tested live on plans the planner would never make (an ABI the
//! kernel lacks, a gap that breaks the policy, another uid).
//!
//! Usage: `exec-plan PLAN.json [--cwd DIR] -- CMD ARGS…`. Exit status as `sandboxer exec`:
//! the command's, or 125/126/127 with the enforcer's message on stderr.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

#[cfg(target_os = "linux")]
fn main() -> ExitCode {
    use sandboxer::linux::enforce::{Command, run};
    use sandboxer::linux::plan::Plan;

    let mut args = std::env::args_os().skip(1);
    let Some(plan_file) = args.next() else {
        eprintln!("usage: exec-plan PLAN.json [--cwd DIR] -- CMD ARGS…");
        return ExitCode::from(2);
    };
    let mut cwd = std::env::current_dir().expect("current directory");
    let mut rest: Vec<OsString> = Vec::new();
    while let Some(arg) = args.next() {
        if arg == "--cwd" {
            cwd = PathBuf::from(args.next().expect("--cwd DIR"));
        } else if arg == "--" {
            rest.extend(args.by_ref());
        } else {
            eprintln!("exec-plan: unexpected argument {arg:?}");
            return ExitCode::from(2);
        }
    }
    let text = std::fs::read_to_string(&plan_file).expect("reading the plan");
    let plan: Plan = serde_json::from_str(&text).expect("parsing the plan");
    let Some((program, args)) = rest.split_first() else {
        eprintln!("exec-plan: no command after --");
        return ExitCode::from(2);
    };
    let command = Command {
        program: program.clone(),
        args: args.to_vec(),
        cwd,
    };
    match run(&plan, &command) {
        Ok(outcome) => ExitCode::from(outcome.exit_code()),
        Err(e) => {
            eprintln!("sandboxer: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn main() -> ExitCode {
    eprintln!("exec-plan: Linux only");
    ExitCode::from(2)
}
