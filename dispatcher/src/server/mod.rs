//! `dispatcher serve`: the long-running dispatcher. It launches chats (structured or in tmux),
//! serves each chat's bridge for as long as the chat runs, records everything in the chats'
//! event logs, and answers a small JSON API on 127.0.0.1, authenticated by a proof of the state
//! root's server token that never sends the token (`auth.rs`). `docs/server.md` is the full
//! description.
//!
//! ```text
//! <state-root>/server.json                       port and pid of the running server (0600)
//! <state-root>/state/server/lock                 held (flock) by the one server of this root
//! <state-root>/state/server/chats/<chat>.json    the launch journal: each chat's current/last launch
//! <state-root>/state/server/chats/<chat>.<launch>.ident   a structured chat's process identity
//! <state-root>/state/server/output/<chat>.<launch>.stdout|stderr   captured before it becomes events
//! ```
//!
//! The HTTP side is hand-written on `std::net` (see `http.rs`): one request per connection,
//! `Content-Length` bodies only, strict limits, a fixed pool of worker threads behind a bounded
//! queue. A crate would bring keep-alive, chunked bodies and upgrades this API has no use for,
//! in the one process that runs unconfined; what is here is small enough to read whole.

mod api;
pub mod auth;
pub mod client;
mod error;
mod http;
pub mod journal;
pub(crate) mod proc;
mod supervisor;
pub mod tmux;

use std::fs::{File, OpenOptions};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::state::{StateRoot, write_atomic};

pub use crate::test_hooks::{BREAK_POLICY_ENV, CRASH_AT_ENV};
pub use api::MAX_EVENTS_PER_PAGE;
pub use error::{ServeError, ServerFileError};
pub use http::{MAX_BODY_BYTES, MAX_HEADER_BYTES, REQUEST_TIMEOUT};
pub use proc::Ident;
pub use supervisor::{DEFAULT_GRACE, LaunchBody, MAX_GRACE};

/// `<state-root>/server.json`'s name.
pub const SERVER_FILE: &str = "server.json";
/// Threads answering requests.
pub const WORKERS: usize = 8;
/// Accepted connections waiting for a worker, at most; more are answered 503 at once.
pub const QUEUE: usize = 64;

/// `server.json`: how clients find the server of a state root. The token is not here (it is
/// in `config.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerFile {
    pub pid: u32,
    pub port: u16,
    pub started_ms: u64,
}

pub fn server_file(state: &StateRoot) -> PathBuf {
    state.path().join(SERVER_FILE)
}

impl ServerFile {
    pub fn read(state: &StateRoot) -> Result<ServerFile, ServerFileError> {
        let path = server_file(state);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                serde_json::from_str(&text).map_err(|json| ServerFileError::Invalid { path, json })
            }
            Err(io) => Err(ServerFileError::Unreadable { path, io }),
        }
    }
}

pub struct ServeOptions {
    pub state: StateRoot,
    /// 0: any free port (the bound one is reported).
    pub port: u16,
    /// Must be 127.0.0.1: anything else is refused.
    pub bind: String,
    pub profiles_dir: Option<PathBuf>,
    /// The person's home (policies are resolved for it).
    pub home: PathBuf,
}

static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALLED.store(true, Ordering::SeqCst);
}

/// Runs the server until `POST /v1/shutdown`, SIGTERM or SIGINT. `ready` is called once the
/// server takes requests, with what `server.json` says.
pub fn run(opts: ServeOptions, ready: impl FnOnce(&ServerFile)) -> Result<(), ServeError> {
    let hooks = crate::test_hooks::ServerHooks::from_env()?;
    let ip: Ipv4Addr = opts
        .bind
        .parse()
        .ok()
        .filter(|ip: &Ipv4Addr| *ip == Ipv4Addr::LOCALHOST)
        .ok_or_else(|| ServeError::Bind(opts.bind.clone()))?;
    let state = opts.state;
    let server_dir = journal::server_dir(&state);
    std::fs::create_dir_all(&server_dir).map_err(ServeError::io(format!(
        "cannot create {}",
        server_dir.display()
    )))?;
    let _lock = lock_state_root(&state)?;
    let listener = TcpListener::bind(SocketAddr::from((ip, opts.port))).map_err(ServeError::io(
        format!("cannot listen on {ip}:{}", opts.port),
    ))?;
    let port = listener.local_addr()?.port();

    let sup = Arc::new(supervisor::Supervisor::new(
        state.clone(),
        opts.home,
        opts.profiles_dir,
        hooks,
    ));
    for line in sup.reconcile()? {
        eprintln!("dispatcher serve: reconciled: {line}");
    }
    let info = ServerFile {
        pid: std::process::id(),
        port,
        started_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
    };
    let mut text = serde_json::to_string_pretty(&info).expect("server.json serializes");
    text.push('\n');
    write_atomic(&server_file(&state), text.as_bytes(), 0o600)?;

    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    let monitor = {
        let sup = sup.clone();
        std::thread::Builder::new()
            .name("monitor".into())
            .spawn(move || sup.monitor())?
    };
    let api = Arc::new(api::Api {
        sup: sup.clone(),
        handshakes: auth::Handshakes::new(state.config().server_token.clone(), port),
        port,
    });
    let shutdown: Arc<Mutex<Option<bool>>> = Arc::new(Mutex::new(None));
    let (tx, rx): (SyncSender<TcpStream>, Receiver<TcpStream>) = sync_channel(QUEUE);
    let rx = Arc::new(Mutex::new(rx));
    let mut workers = Vec::new();
    for i in 0..WORKERS {
        let (api, rx, shutdown) = (api.clone(), rx.clone(), shutdown.clone());
        workers.push(
            std::thread::Builder::new()
                .name(format!("http-{i}"))
                .spawn(move || worker(&api, &rx, &shutdown))?,
        );
    }
    ready(&info);

    listener.set_nonblocking(true)?;
    let stop_chats = loop {
        if SIGNALLED.load(Ordering::SeqCst) {
            break false;
        }
        if let Some(stop_chats) = *shutdown.lock().unwrap_or_else(|p| p.into_inner()) {
            break stop_chats;
        }
        let mut fds = [libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: one valid pollfd for a live descriptor.
        unsafe { libc::poll(fds.as_mut_ptr(), 1, 100) };
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    let _ = stream.set_nonblocking(false);
                    let _ = stream.set_nodelay(true);
                    match tx.try_send(stream) {
                        Ok(()) => {}
                        Err(TrySendError::Full(mut s)) | Err(TrySendError::Disconnected(mut s)) => {
                            http::write_response(
                                &mut s,
                                &http::Response::error(
                                    503,
                                    "busy",
                                    "too many requests at once; retry",
                                ),
                                false,
                            );
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    eprintln!("dispatcher serve: accept failed: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    break;
                }
            }
        }
    };
    // Stop taking requests, finish the ones in hand, then stop watching.
    drop(listener);
    drop(tx);
    for w in workers {
        let _ = w.join();
    }
    sup.begin_shutdown(stop_chats);
    let _ = monitor.join();
    sup.close_bridges();
    if ServerFile::read(&state).is_ok_and(|f| f.pid == std::process::id()) {
        let _ = std::fs::remove_file(server_file(&state));
    }
    Ok(())
}

fn worker(api: &api::Api, rx: &Mutex<Receiver<TcpStream>>, shutdown: &Mutex<Option<bool>>) {
    loop {
        let stream = match rx.lock().unwrap_or_else(|p| p.into_inner()).recv() {
            Ok(s) => s,
            Err(_) => return,
        };
        let mut stream = stream;
        match http::read_request(&mut stream) {
            Ok(req) => {
                let (resp, after) =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| api.handle(&req)))
                        .unwrap_or_else(|_| {
                            (
                                http::Response::error(
                                    500,
                                    "internal",
                                    "the request failed unexpectedly (a bug)",
                                ),
                                api::After::Continue,
                            )
                        });
                http::write_response(&mut stream, &resp, false);
                if let api::After::Shutdown { stop_chats } = after {
                    let mut s = shutdown.lock().unwrap_or_else(|p| p.into_inner());
                    // The first request decides; stopping chats is never taken back.
                    *s = Some(s.unwrap_or(false) || stop_chats);
                }
            }
            Err(Some(resp)) => http::write_response(&mut stream, &resp, true),
            Err(None) => {}
        }
    }
}

/// Holds `state/server/lock` (flock) for the server's life: one server per state root. The
/// kernel releases it when the process ends, however it ends.
fn lock_state_root(state: &StateRoot) -> Result<File, ServeError> {
    let path = journal::server_dir(state).join("lock");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(ServeError::io(format!("cannot open {}", path.display())))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let other = ServerFile::read(state)
            .map(|f| format!(" (pid {}, port {})", f.pid, f.port))
            .unwrap_or_default();
        return Err(ServeError::AlreadyServed {
            root: state.path().to_path_buf(),
            other,
        });
    }
    Ok(file)
}
