//! `sandboxer`: render, check, explain and enforce sandbox policies.
//!
//! The entry point is a C `main` instead of Rust's (see [`main`]): `sandboxer exec` runs in
//! front of every confined command, and the Rust runtime's start-up was a measurable share of
//! it.

#![cfg_attr(not(test), no_main)]
// The unit tests' harness brings its own `main`, from which the commands are not reached.
#![cfg_attr(test, allow(dead_code))]

// The unwinder (`_Unwind_*`, for panics) linked in from GCC's static `libgcc_eh.a`, which the C
// compiler that links Rust programs ships, instead of loaded from `libgcc_s.so.1`: the same
// code, minus a shared library to map and relocate and its constructor, which asks the CPU
// for its features (`cpuid`, which traps to the hypervisor on a VM: 0.1-0.2 ms of every
// launch here). Our objects need `_Unwind_Resume` before the standard library's are read, so
// the linker takes these members first and `--as-needed` drops `libgcc_s`.
#[link(name = "gcc_eh", kind = "static", modifiers = "-bundle")]
unsafe extern "C" {}

mod apparmor;
mod common;
mod doctor;
mod exec;
mod explain;
mod probe;
mod render;

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
  137  exec: sandboxer stopped the sandbox while the command ran, because a layer could no
       longer hold (the message says which), or the command was killed by SIGKILL
  other exec: the confined command's own exit status (128+N when killed by signal N; with
       --enforce landlock-only sandboxer becomes the command, so it is killed by N itself)

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
    /// The AppArmor profile that lets this sandbox make user namespaces where AppArmor
    /// restricts them (Ubuntu 23.10+); prints it, or installs and loads it (--install, root).
    Apparmor(apparmor::AppArmorArgs),
}

/// The process's entry point, without the Rust runtime's start-up: that reads
/// `/proc/self/maps` to place a guard for stack overflows and sets up an alternate signal
/// stack, about 0.1 ms of every launch here (measured: an empty Rust program against the same
/// with `#![no_main]`). Arguments and the environment still reach `std::env` (glibc hands them
/// to the standard library at load time). Kept from the runtime: standard descriptors 0-2 are
/// open (on `/dev/null` if they were not, so that no file opened later takes their place)
/// and `SIGPIPE` is ignored; a panic ends with 101, and stdout is flushed before the end. Lost:
/// the message on a stack overflow, which ends in a plain `SIGSEGV`.
#[cfg(not(test))]
#[unsafe(no_mangle)]
extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    standard_fds_open();
    // SAFETY: installs the ignore disposition, no handler code.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let ExitCode(code) = std::panic::catch_unwind(run).unwrap_or(ExitCode(101));
    let _ = std::io::Write::flush(&mut std::io::stdout());
    std::process::exit(i32::from(code))
}

/// How the process ends (`std::process::ExitCode`, whose value only the runtime's own `main`
/// can read on stable Rust).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExitCode(u8);

impl ExitCode {
    pub const SUCCESS: ExitCode = ExitCode(0);
}

impl From<u8> for ExitCode {
    fn from(code: u8) -> ExitCode {
        ExitCode(code)
    }
}

/// Opens `/dev/null` on any of descriptors 0, 1 and 2 that is closed.
#[cfg(not(test))]
fn standard_fds_open() {
    for fd in 0..3 {
        // SAFETY: F_GETFD only reads the descriptor's flags.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::EBADF)
        {
            // SAFETY: a plain open; the lowest free descriptor, `fd`, is the one it takes.
            let opened = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
            if opened != fd {
                // Nothing sensible can run without its standard descriptors.
                // SAFETY: ends the process at once.
                unsafe { libc::_exit(125) };
            }
        }
    }
}

fn run() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(args) => common::check(args),
        Command::Render(args) => render::render(args),
        Command::Explain(args) => explain::explain(args),
        Command::Exec(args) => exec::exec(args),
        Command::Doctor(args) => doctor::doctor(args),
        Command::Probe(args) => probe::probe(args),
        Command::Apparmor(args) => apparmor::apparmor(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sandboxer: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
