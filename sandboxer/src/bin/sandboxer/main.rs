//! `sandboxer`: render, check, explain and enforce sandbox policies.

mod common;
mod doctor;
mod exec;
mod explain;
mod probe;
mod render;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

const AFTER_HELP: &str = "\
Exit codes:
  0    success (explain: the operation is allowed)
  1    explain: the operation is denied
  2    bad input: usage, an invalid policy or profile, an unreadable file
  3    explain: the evaluator cannot tell (a construct whose meaning it does not know)
  125  exec: the sandbox could not be set up as planned; nothing was run (fail closed)
  126  exec: the command was found but could not be executed inside the sandbox
  127  exec: the command was not found inside the sandbox
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
    /// Render a policy as a macOS Seatbelt profile (usable alone with `sandbox-exec -f`).
    Render(render::RenderArgs),
    /// Is one operation on one path or name allowed, and by which rule? Evaluates an SBPL
    /// profile (--profile) or a policy's reference meaning.
    Explain(explain::ExplainArgs),
    /// Run a command confined by a policy on this machine (Linux): namespaces, masks and
    /// Landlock, as planned for this kernel; exits with the command's status.
    Exec(exec::ExecArgs),
    /// What this machine can enforce (Landlock ABI, namespaces, Seatbelt) and what a policy
    /// would get here: the plan's shape and gaps, or the refusal and how to fix it.
    Doctor(doctor::DoctorArgs),
    /// The contract's harness: run the probes of query files inside this process (start it
    /// inside the sandbox under test) and report raw facts (errno, bytes, entries) as JSON.
    /// Verdicts are the runner's (`dispatcher contract`), decided from evidence.
    Probe(probe::ProbeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(args) => common::check(args),
        Command::Render(args) => render::render(args),
        Command::Explain(args) => explain::explain(args),
        Command::Exec(args) => exec::exec(args),
        Command::Doctor(args) => doctor::doctor(args),
        Command::Probe(args) => probe::probe(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sandboxer: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
