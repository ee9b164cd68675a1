//! `sandboxer`: render, check, explain and enforce sandbox policies.

mod common;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

const AFTER_HELP: &str = "\
Exit codes:
  0    success (explain: the operation is allowed)
  1    explain: the operation is denied
  2    bad input: usage, an invalid policy or profile, an unreadable file
  3    explain: the evaluator cannot tell (a construct whose meaning it does not know)
  125  exec: the sandbox could not be set up as planned; nothing was run (fail closed)
  other exec: the confined command's own exit status (128+N when killed by signal N)

Policies are TOML (version = 1); see docs/policy.md. Without --policy the embedded default
policy is used: home open, the product's state roots protected, launchers blocked.";

#[derive(Parser)]
#[command(name = "sandboxer", version, about = "Policy → Seatbelt profile / Linux plan → enforcement", after_help = AFTER_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Load and validate a policy; print the resolved policy.
    Check(common::CheckArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(args) => common::check(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sandboxer: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
