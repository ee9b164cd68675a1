//! The product writing while a sandbox runs, for `read-late` probes: when the harness
//! reaches such a probe it makes a flag file and waits; the runner, outside, writes the
//! probe's target the way the product writes a refused path while chats run
//! (`sandboxer::refused::write`: masked in every running sandbox first, then moved into
//! place), and removes the flag; the harness then reads the target. A marker read there means
//! the sandbox sees what the product wrote after it started. A write that fails is an error of
//! the run: the product must be able to write every refused path while chats run.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// One late write: the target, the harness's flag, what to write, and whether the target is
/// a refused path (written as the product writes those; any other path is written plainly).
pub struct LateWrite {
    pub target: PathBuf,
    pub flag: PathBuf,
    pub contents: String,
    pub refused: bool,
}

/// The writer thread, running while the harness runs.
pub struct LateWriter {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Vec<String>>>,
}

impl LateWriter {
    /// Starts answering the flags of `writes`; `registry` is the state root's mask registry.
    pub fn start(writes: Vec<LateWrite>, registry: PathBuf) -> LateWriter {
        let stop = Arc::new(AtomicBool::new(false));
        if writes.is_empty() {
            return LateWriter { stop, handle: None };
        }
        let stopping = Arc::clone(&stop);
        let handle = std::thread::spawn(move || answer(writes, &registry, &stopping));
        LateWriter {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops the thread once the run has ended; the product's failed writes, if any.
    pub fn finish(mut self) -> Result<(), String> {
        self.stop.store(true, Ordering::Relaxed);
        let errors = match self.handle.take() {
            Some(h) => h
                .join()
                .unwrap_or_else(|_| vec!["the late writer panicked".into()]),
            None => Vec::new(),
        };
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

fn answer(mut pending: Vec<LateWrite>, registry: &Path, stop: &AtomicBool) -> Vec<String> {
    let mut errors = Vec::new();
    while !pending.is_empty() && !stop.load(Ordering::Relaxed) {
        pending.retain(|w| {
            if std::fs::symlink_metadata(&w.flag).is_err() {
                return true;
            }
            if let Err(e) = product_write(registry, w) {
                errors.push(format!(
                    "the product could not write {} while the sandbox ran: {e}",
                    w.target.display()
                ));
            }
            // Released either way: the harness reads what is there.
            if let Err(e) = std::fs::remove_file(&w.flag) {
                errors.push(format!("removing {}: {e}", w.flag.display()));
            }
            false
        });
        std::thread::sleep(Duration::from_millis(2));
    }
    errors
}

fn product_write(registry: &Path, w: &LateWrite) -> Result<(), String> {
    if let Some(parent) = w.target.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    #[cfg(target_os = "linux")]
    if w.refused {
        return sandboxer::refused::write(registry, &w.target, w.contents.as_bytes())
            .map_err(|e| e.to_string());
    }
    let _ = registry;
    std::fs::write(&w.target, &w.contents).map_err(|e| e.to_string())
}
