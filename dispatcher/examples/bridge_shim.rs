//! Test fixture: the bridge shim on stdio, exactly as `dispatcher bridge --socket PATH` runs it
//! (`tests/tests/bridge/inspector.rs` drives it with a real MCP client). Not installed.

use std::io::{stdin, stdout};
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let socket = match args.as_slice() {
        [flag, path] if flag == "--socket" => PathBuf::from(path),
        _ => {
            eprintln!("usage: bridge_shim --socket PATH");
            return ExitCode::from(2);
        }
    };
    match dispatcher::bridge::run_shim(&socket, stdin().lock(), stdout().lock()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bridge: {e}");
            ExitCode::FAILURE
        }
    }
}
