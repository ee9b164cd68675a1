//! The dispatcher's side of a chat's bridge: one listening socket per chat, one thread per
//! connection, every call decided with the chat's own policy and logged.

use std::collections::HashMap;
use std::io::BufReader;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use sandboxer::{Op, Policy, ResolveOptions};
use serde_json::{Map, Value, json};

use super::mcp::{self, INVALID_PARAMS, INVALID_REQUEST, Incoming, METHOD_NOT_FOUND, RpcError};
use super::peer::{Peer, peer_of};
use super::tools::{self, Opener, ToolContext};
use super::wire::{Frame, MAX_MESSAGE, read_frame, write_frame};
use super::{BridgeError, BridgeEvent, CallVerdict, io_error};
use crate::ids::ChatId;
use crate::state::StateRoot;

/// The socket's name inside a chat's runtime (what launches give the shim as `--socket`).
pub const SOCKET_NAME: &str = "bridge.sock";
/// Most connections one chat's bridge holds at once; more are closed at once (and logged), so
/// a confined process cannot exhaust the dispatcher's threads or descriptors.
pub const MAX_CONNECTIONS: usize = 32;
/// A reply the peer does not take within this time closes the connection.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Everything a chat's bridge decides with. Built once, before the chat's CLI starts.
#[derive(Debug, Clone)]
pub struct ChatContext {
    pub chat: ChatId,
    /// The chat's runtime: the socket must be bound directly inside it.
    pub runtime: PathBuf,
    /// The chat's resolved policy: every call is decided with its `decide`.
    pub policy: Policy,
    /// `config.json`'s `open_url.allow`.
    pub open_url_allow: Vec<String>,
    pub opener: Opener,
}

impl ChatContext {
    pub fn new(
        chat: ChatId,
        runtime: PathBuf,
        policy: Policy,
        open_url_allow: Vec<String>,
    ) -> ChatContext {
        ChatContext {
            chat,
            runtime,
            policy,
            open_url_allow,
            opener: Opener::System,
        }
    }

    /// Loads the chat's policy from `<runtime>/policy.toml` (as the launch wrote it) and the
    /// allow-list from `config.json`.
    ///
    /// Call it before the chat's CLI starts: the runtime is the CLI's to write, so a policy
    /// read from it later is only as trustworthy as the CLI. Where the launch's policy text is
    /// at hand, [`ChatContext::from_toml`] avoids the file altogether. Fails closed when the
    /// file is not a regular file (a symlink included), and as `from_toml` does.
    pub fn load(
        state: &StateRoot,
        chat: &ChatId,
        opts: &ResolveOptions,
    ) -> Result<ChatContext, BridgeError> {
        state.require_chat(chat)?;
        let path = state.runtime(chat).join("policy.toml");
        let meta =
            std::fs::symlink_metadata(&path).map_err(io_error(format!("{}", path.display())))?;
        if !meta.file_type().is_file() {
            return Err(BridgeError::BadPolicy {
                chat: chat.clone(),
                why: format!("{} is not a regular file", path.display()),
            });
        }
        let text = std::fs::read_to_string(&path)
            .map_err(io_error(format!("cannot read {}", path.display())))?;
        ChatContext::from_toml(state, chat, &text, &path.display().to_string(), opts)
    }

    /// Builds the context from the chat's policy text (`LaunchGrants::policy_toml`, what the
    /// launch writes and `sandboxer` enforces); `file` names it in errors. Fails closed when
    /// `opts` is not for this machine, or when the policy lets the state root's `config.json`
    /// be read (it is not a chat's policy then).
    pub fn from_toml(
        state: &StateRoot,
        chat: &ChatId,
        text: &str,
        file: &str,
        opts: &ResolveOptions,
    ) -> Result<ChatContext, BridgeError> {
        if !opts.target.is_host() {
            return Err(BridgeError::BadPolicy {
                chat: chat.clone(),
                why: format!(
                    "the policy must be resolved for this machine, not for {}",
                    opts.target
                ),
            });
        }
        let policy = Policy::from_toml(text, file, opts).map_err(|source| BridgeError::Policy {
            chat: chat.clone(),
            source,
        })?;
        ChatContext::from_policy(state, chat, policy, file)
    }

    /// [`ChatContext::from_toml`] for a policy already resolved for this machine (with
    /// `ResolveOptions::for_host`); the same checks.
    pub fn from_policy(
        state: &StateRoot,
        chat: &ChatId,
        policy: Policy,
        file: &str,
    ) -> Result<ChatContext, BridgeError> {
        state.require_chat(chat)?;
        let bad = |why: String| BridgeError::BadPolicy {
            chat: chat.clone(),
            why,
        };
        if !policy.target.is_host() {
            return Err(bad(format!(
                "the policy must be resolved for this machine, not for {}",
                policy.target
            )));
        }
        let config = state.config_json();
        if policy.decide(Op::Read, &config).allowed() {
            return Err(bad(format!(
                "its policy {file} lets {} be read",
                config.display()
            )));
        }
        Ok(ChatContext::new(
            chat.clone(),
            state.runtime(chat),
            policy,
            state.config().open_url.allow.clone(),
        ))
    }

    /// Replaces the opener (tests: never open anything).
    pub fn with_opener(mut self, opener: Opener) -> ChatContext {
        self.opener = opener;
        self
    }
}

struct Shared {
    ctx: ChatContext,
    /// `ctx.policy` compared without case, where file names are case-insensitive (macOS).
    folded: Option<Policy>,
    log: Box<dyn Fn(BridgeEvent) + Send + Sync>,
    uid: u32,
    stop: AtomicBool,
    next_conn: AtomicU64,
    /// Live connections (a clone of each stream, to shut them down on stop).
    conns: Mutex<HashMap<u64, UnixStream>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Shared {
    fn event(
        &self,
        peer: Option<Peer>,
        tool: &str,
        verdict: CallVerdict,
        reason: impl Into<String>,
    ) {
        (self.log)(BridgeEvent {
            chat: self.ctx.chat.clone(),
            peer,
            tool: tool.into(),
            target: None,
            resolved: None,
            verdict,
            reason: reason.into(),
        });
    }
}

/// A chat's running bridge. Dropping it (or [`BridgeHandle::shutdown`]) stops accepting,
/// closes every connection, waits for their threads and removes the socket.
pub struct BridgeHandle {
    shared: Arc<Shared>,
    socket: PathBuf,
    /// (dev, ino) of the socket we bound: only that file is removed at the end.
    socket_id: (u64, u64),
    wake: Option<UnixStream>,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for BridgeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridgeHandle")
            .field("chat", &self.shared.ctx.chat)
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

impl BridgeHandle {
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn chat(&self) -> &ChatId {
        &self.shared.ctx.chat
    }

    /// Stops the bridge; returns once every connection thread has ended.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(accept) = self.accept.take() else {
            return;
        };
        self.shared.stop.store(true, Ordering::SeqCst);
        // Closing our end of the wake pair makes the accept loop's poll return.
        drop(self.wake.take());
        let _ = accept.join();
        for (_, s) in self
            .shared
            .conns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
        {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        let threads = std::mem::take(
            &mut *self
                .shared
                .threads
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for t in threads {
            let _ = t.join();
        }
        if let Ok(m) = std::fs::symlink_metadata(&self.socket)
            && (m.dev(), m.ino()) == self.socket_id
        {
            let _ = std::fs::remove_file(&self.socket);
        }
    }
}

impl Drop for BridgeHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(target_os = "linux")]
const SUN_PATH_MAX: usize = 108;
#[cfg(target_os = "macos")]
const SUN_PATH_MAX: usize = 104;

/// Serves `chat`'s bridge on `socket` (normally `<runtime>/bridge.sock`) until the handle is
/// dropped. `log` receives every call and every refused connection; it is called from the
/// connection threads.
///
/// The socket is bound under a temporary name, set to mode 0600, then renamed into place, so
/// it is never reachable with a wider mode. A stale socket (nobody listening) or any other
/// non-folder at the path is replaced; a live one is left alone ([`BridgeError::AlreadyServing`]).
pub fn serve(
    socket: &Path,
    chat: ChatContext,
    log: impl Fn(BridgeEvent) + Send + Sync + 'static,
) -> Result<BridgeHandle, BridgeError> {
    let runtime = std::fs::canonicalize(&chat.runtime).map_err(io_error(format!(
        "chat {}: runtime {}",
        chat.chat,
        chat.runtime.display()
    )))?;
    let outside = || BridgeError::SocketOutsideRuntime {
        socket: socket.to_path_buf(),
        runtime: runtime.clone(),
    };
    let (Some(parent), Some(name)) = (socket.parent(), socket.file_name()) else {
        return Err(outside());
    };
    let parent = std::fs::canonicalize(parent).map_err(|_| outside())?;
    if parent != runtime {
        return Err(outside());
    }
    let socket = runtime.join(name);
    // Unique per process and call, so two serves in one process never share a temporary.
    static NEXT_TMP: AtomicU64 = AtomicU64::new(0);
    let tmp = runtime.join(format!(
        ".bridge-{}-{}.tmp",
        std::process::id(),
        NEXT_TMP.fetch_add(1, Ordering::SeqCst)
    ));
    for p in [&socket, &tmp] {
        let len = p.as_os_str().len();
        if len >= SUN_PATH_MAX {
            return Err(BridgeError::SocketPathTooLong {
                path: p.clone(),
                len,
                max: SUN_PATH_MAX,
            });
        }
    }
    match std::fs::symlink_metadata(&socket) {
        Ok(m) if m.is_dir() => {
            return Err(BridgeError::Io {
                what: format!("{}", socket.display()),
                source: std::io::Error::other("a folder is in the way of the bridge socket"),
            });
        }
        Ok(m) if m.file_type().is_socket() && UnixStream::connect(&socket).is_ok() => {
            return Err(BridgeError::AlreadyServing(socket));
        }
        _ => {}
    }
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_error(format!("{}", tmp.display()))(e)),
    }
    let listener =
        UnixListener::bind(&tmp).map_err(io_error(format!("cannot bind {}", tmp.display())))?;
    let placed = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| std::fs::rename(&tmp, &socket))
        .and_then(|()| std::fs::symlink_metadata(&socket));
    let meta = match placed {
        Ok(m) => m,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_error(format!("cannot place {}", socket.display()))(e));
        }
    };
    listener
        .set_nonblocking(true)
        .map_err(io_error("cannot set the listener non-blocking"))?;
    let (wake_tx, wake_rx) = UnixStream::pair().map_err(io_error("cannot create a wake pair"))?;
    let folded = cfg!(target_os = "macos").then(|| tools::case_folded(&chat.policy));
    let shared = Arc::new(Shared {
        ctx: chat,
        folded,
        log: Box::new(log),
        uid: unsafe { libc::geteuid() },
        stop: AtomicBool::new(false),
        next_conn: AtomicU64::new(0),
        conns: Mutex::new(HashMap::new()),
        threads: Mutex::new(Vec::new()),
    });
    let accept = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name(format!("bridge-{}", shared.ctx.chat))
            .spawn(move || accept_loop(&shared, &listener, &wake_rx))
            .map_err(io_error("cannot start the bridge thread"))?
    };
    Ok(BridgeHandle {
        shared,
        socket,
        socket_id: (meta.dev(), meta.ino()),
        wake: Some(wake_tx),
        accept: Some(accept),
    })
}

fn accept_loop(shared: &Arc<Shared>, listener: &UnixListener, wake: &UnixStream) {
    let mut fds = [
        libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: `fds` holds two valid pollfd entries for live descriptors.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if shared.stop.load(Ordering::SeqCst) || fds[1].revents != 0 {
            return;
        }
        if n < 0 {
            continue; // EINTR
        }
        loop {
            match listener.accept() {
                Ok((stream, _)) => admit(shared, stream),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors or similar: say so, and give the system a moment
                    // instead of spinning.
                    shared.event(
                        None,
                        "(connect)",
                        CallVerdict::Error,
                        format!("accept failed: {e}"),
                    );
                    std::thread::sleep(Duration::from_millis(50));
                    break;
                }
            }
        }
    }
}

/// Checks who connected and starts its thread, or closes the connection.
fn admit(shared: &Arc<Shared>, stream: UnixStream) {
    let peer = match peer_of(&stream) {
        Ok(p) => p,
        Err(e) => {
            shared.event(
                None,
                "(connect)",
                CallVerdict::Deny,
                format!("cannot read the caller's credentials: {e}"),
            );
            return;
        }
    };
    if peer.uid != shared.uid {
        shared.event(
            Some(peer),
            "(connect)",
            CallVerdict::Deny,
            format!(
                "caller uid {} is not the dispatcher's uid {}",
                peer.uid, shared.uid
            ),
        );
        return;
    }
    // BSD sockets inherit the listener's O_NONBLOCK; connection threads block.
    if stream.set_nonblocking(false).is_err()
        || stream.set_write_timeout(Some(WRITE_TIMEOUT)).is_err()
    {
        return;
    }
    let Ok(clone) = stream.try_clone() else {
        return;
    };
    let id = shared.next_conn.fetch_add(1, Ordering::SeqCst);
    {
        let mut conns = shared.conns.lock().unwrap_or_else(PoisonError::into_inner);
        if conns.len() >= MAX_CONNECTIONS {
            drop(conns);
            shared.event(
                Some(peer),
                "(connect)",
                CallVerdict::Deny,
                format!("more than {MAX_CONNECTIONS} connections at once"),
            );
            return;
        }
        conns.insert(id, clone);
    }
    let mut threads = shared
        .threads
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    threads.retain(|t| !t.is_finished());
    let worker = shared.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("bridge-{}-{id}", shared.ctx.chat))
        .spawn(move || {
            // Frees the slot however the thread ends (a panicking log callback included).
            struct Slot<'a>(&'a Shared, u64);
            impl Drop for Slot<'_> {
                fn drop(&mut self) {
                    if let Ok(mut conns) = self.0.conns.lock() {
                        conns.remove(&self.1);
                    }
                }
            }
            let _slot = Slot(&worker, id);
            serve_connection(&worker, stream, peer);
        });
    match spawned {
        Ok(t) => threads.push(t),
        Err(e) => {
            drop(threads);
            shared
                .conns
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
            shared.event(
                Some(peer),
                "(connect)",
                CallVerdict::Error,
                format!("cannot start a thread: {e}"),
            );
        }
    }
}

fn serve_connection(shared: &Shared, stream: UnixStream, peer: Peer) {
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut writer = stream;
    let mut line = Vec::new();
    loop {
        let reply = match read_frame(&mut reader, &mut line, MAX_MESSAGE) {
            Ok(Frame::Line) => handle_line(shared, peer, &line),
            Ok(Frame::TooLong) => {
                let why = format!("a message longer than {MAX_MESSAGE} bytes was dropped");
                shared.event(Some(peer), "(protocol)", CallVerdict::Error, why.clone());
                mcp::error_response(Value::Null, &RpcError::new(INVALID_REQUEST, why))
            }
            Ok(Frame::Eof) | Err(_) => return,
        };
        if write_frame(&mut writer, &reply).is_err() {
            return;
        }
    }
}

/// One request on the socket → one reply with its id.
fn handle_line(shared: &Shared, peer: Peer, line: &[u8]) -> Value {
    let protocol_error = |id: Value, error: RpcError| {
        shared.event(
            Some(peer),
            "(protocol)",
            CallVerdict::Error,
            error.message.clone(),
        );
        mcp::error_response(id, &error)
    };
    let (id, method, params) = match mcp::classify(line) {
        Incoming::Request { id, method, params } => (id, method, params),
        Incoming::Invalid { id, error } => return protocol_error(id, error),
        Incoming::Notification { .. } | Incoming::Response => {
            return protocol_error(
                Value::Null,
                RpcError::new(
                    INVALID_REQUEST,
                    "every message to the bridge is a request with an id",
                ),
            );
        }
    };
    match method.as_str() {
        "tools/list" => mcp::result_response(id, json!({ "tools": tools::tool_list() })),
        "tools/call" => call_tool(shared, peer, id, &params),
        other => protocol_error(
            id,
            RpcError::new(METHOD_NOT_FOUND, format!("method not found: {other:?}")),
        ),
    }
}

fn call_tool(shared: &Shared, peer: Peer, id: Value, params: &Value) -> Value {
    let invalid = |message: String| {
        shared.event(
            Some(peer),
            "(protocol)",
            CallVerdict::Error,
            message.clone(),
        );
        mcp::error_response(id.clone(), &RpcError::new(INVALID_PARAMS, message))
    };
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return invalid("tools/call needs params.name, a string".into());
    };
    let empty = Map::new();
    let args = match params.get("arguments") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(_) => return invalid("tools/call params.arguments must be an object".into()),
    };
    let cx = ToolContext {
        policy: &shared.ctx.policy,
        folded: shared.folded.as_ref(),
        open_url_allow: &shared.ctx.open_url_allow,
        opener: &shared.ctx.opener,
    };
    let Some(outcome) = tools::call(&cx, name, args) else {
        let known = tools::TOOL_NAMES.join(", ");
        (shared.log)(BridgeEvent {
            chat: shared.ctx.chat.clone(),
            peer: Some(peer),
            tool: name.to_string(),
            target: None,
            resolved: None,
            verdict: CallVerdict::Error,
            reason: "unknown tool".into(),
        });
        return mcp::error_response(
            id,
            &RpcError::new(
                INVALID_PARAMS,
                format!("Unknown tool: {name:?} (the bridge has: {known})"),
            ),
        );
    };
    (shared.log)(BridgeEvent {
        chat: shared.ctx.chat.clone(),
        peer: Some(peer),
        tool: name.to_string(),
        target: outcome.target,
        resolved: outcome.resolved,
        verdict: outcome.verdict,
        reason: outcome.reason,
    });
    let reply = mcp::result_response(id.clone(), outcome.result);
    // The tools' own limits keep replies far below the line limit; should one ever exceed
    // it, the shim would drop it, so say it plainly instead.
    match serde_json::to_vec(&reply) {
        Ok(bytes) if bytes.len() <= MAX_MESSAGE => reply,
        _ => mcp::result_response(
            id,
            mcp::tool_result(
                format!("the result is larger than {MAX_MESSAGE} bytes; ask for less"),
                true,
            ),
        ),
    }
}

// The server keeps handles in its own threads and maps: they must cross threads.
const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<BridgeHandle>();
    shareable::<ChatContext>();
};
