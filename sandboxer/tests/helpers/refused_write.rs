//! Test helper (built as an example, never shipped): writes a refused path the way the product
//! does while sandboxes run ([`sandboxer::linux::refused`]), as whoever runs it.
//!
//! Usage: `refused-write REGISTRY PATH CONTENT` (a file), or
//! `refused-write --folder REGISTRY PATH NAME CONTENT` (a folder holding the file NAME).
//! Exit status 0 when written, 1 with the error on stderr otherwise.

use std::process::ExitCode;

#[cfg(target_os = "linux")]
fn main() -> ExitCode {
    use std::path::Path;

    use sandboxer::linux::refused;

    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [registry, path, content] => {
            refused::write(Path::new(registry), Path::new(path), content.as_bytes())
        }
        ["--folder", registry, path, name, content] => refused::replace_folder(
            Path::new(registry),
            Path::new(path),
            &mut |staged: &Path| std::fs::write(staged.join(name), content),
        ),
        _ => {
            eprintln!("usage: refused-write [--folder] REGISTRY PATH [NAME] CONTENT");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("refused-write: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn main() -> ExitCode {
    eprintln!("refused-write: Linux only");
    ExitCode::from(2)
}
