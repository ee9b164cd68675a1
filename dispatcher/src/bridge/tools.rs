//! The bridge's tools, run by the dispatcher (unconfined) for a confined CLI, each call checked
//! with the chat's own [`Policy::decide`] on the real path of what is actually opened.
//!
//! Paths must be absolute, without NUL and without `..` components (refused, never folded:
//! folding `..` lexically is wrong through symlinks, and resolving it by walking would reveal
//! what exists inside protected folders). Symlinks are followed by the kernel for
//! `read_file` and `list_dir` and the decision is made on where they lead; `write_file` never
//! follows a symlink at the last component. When a path cannot be opened, the refusal is
//! decided first on where it would resolve, so an error message never tells the caller
//! whether something exists inside a folder it may not see.
//!
//! Every path goes through one resolution ([`fsx::resolve`]): no `/proc` magic links (so
//! never into another process's mount namespace) and nothing on `/proc`; such a path is
//! refused before any policy decision, and the decision is always on the real path of the
//! object the dispatcher itself holds.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use sandboxer::{Op, Policy};
use serde_json::{Map, Value, json};

use super::CallVerdict;
use super::fsx::{self, Kind, Looked};
use super::mcp::tool_result;

/// Most bytes `read_file` returns per call (its `length` limit and default). Even if every
/// byte needed a six-byte JSON escape the reply stays under [`super::MAX_MESSAGE`].
pub const MAX_READ: u64 = 128 * 1024;
/// Most bytes of `content` one `write_file` takes.
pub const MAX_WRITE: usize = 512 * 1024;
/// Most entries `list_dir` returns.
pub const MAX_LIST_ENTRIES: usize = 2000;
/// Most bytes of text `list_dir` returns.
pub const MAX_LIST_TEXT: usize = 256 * 1024;
/// Longest path accepted, in bytes.
pub const MAX_PATH: usize = 4096;
/// Longest URL accepted, in bytes.
pub const MAX_URL: usize = 2048;

/// The tool names, as `tools/list` gives them.
pub const TOOL_NAMES: [&str; 4] = ["read_file", "write_file", "list_dir", "open_url"];

/// `tools/list`'s `tools`.
pub fn tool_list() -> Value {
    let path = json!({
        "type": "string",
        "description": "Absolute path. No '..' components; relative paths are refused."
    });
    json!([
        {
            "name": "read_file",
            "title": "Read a file",
            "description": format!(
                "Read a UTF-8 text file through the dispatcher, checked against this chat's \
                 sandbox policy. Returns at most {MAX_READ} bytes per call; use offset to read on."
            ),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "path": path,
                    "offset": { "type": "integer", "minimum": 0, "description": "Byte offset to start at (default 0)." },
                    "length": { "type": "integer", "minimum": 1, "maximum": MAX_READ, "description": format!("Most bytes to return (default and limit {MAX_READ}).") }
                },
                "required": ["path"],
                "additionalProperties": false
            },
            "annotations": { "readOnlyHint": true, "openWorldHint": false }
        },
        {
            "name": "write_file",
            "title": "Write a file",
            "description": format!(
                "Replace a file's content with UTF-8 text through the dispatcher, checked against \
                 this chat's sandbox policy. The file must exist unless create is true; its folder \
                 must exist. Never writes through a symbolic link. At most {MAX_WRITE} bytes."
            ),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "path": path,
                    "content": { "type": "string", "description": "The whole new content." },
                    "create": { "type": "boolean", "description": "Create the file if it does not exist (default false)." }
                },
                "required": ["path", "content"],
                "additionalProperties": false
            },
            "annotations": { "readOnlyHint": false, "destructiveHint": true, "idempotentHint": true, "openWorldHint": false }
        },
        {
            "name": "list_dir",
            "title": "List a folder",
            "description": "List a folder's entries through the dispatcher, checked against this chat's sandbox policy.",
            "inputSchema": {
                "type": "object",
                "properties": { "path": path },
                "required": ["path"],
                "additionalProperties": false
            },
            "annotations": { "readOnlyHint": true, "openWorldHint": false }
        },
        {
            "name": "open_url",
            "title": "Open a URL",
            "description": "Ask the dispatcher to open an http(s) URL in the person's browser, outside the sandbox. Only URLs under the configured allowed prefixes are opened.",
            "inputSchema": {
                "type": "object",
                "properties": { "url": { "type": "string", "description": "An http:// or https:// URL." } },
                "required": ["url"],
                "additionalProperties": false
            },
            "annotations": { "readOnlyHint": true, "openWorldHint": true }
        }
    ])
}

/// What opening a URL did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenOutcome {
    /// Handed to the opener (`with` names it).
    Opened { with: String },
    /// Not opened; `why` is said to the caller with the URL, so a person can open it.
    NotOpened { why: String },
}

/// Opens allowed URLs. `System` runs `open` (macOS) or `xdg-open` (Linux) outside the
/// sandbox; `Custom` is for tests and embedders, so nothing is ever opened by a test.
#[derive(Clone)]
pub enum Opener {
    System,
    Custom(Arc<dyn Fn(&str) -> OpenOutcome + Send + Sync>),
}

impl std::fmt::Debug for Opener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Opener::System => "Opener::System",
            Opener::Custom(_) => "Opener::Custom",
        })
    }
}

impl Opener {
    /// Opens `url` for a chat with `policy`. The system opener is used only when the chat's
    /// sandbox cannot change which program handles URLs ([`exposed_handler_settings`]).
    pub fn open(&self, policy: &Policy, url: &str) -> OpenOutcome {
        match self {
            Opener::Custom(f) => f(url),
            Opener::System => {
                if let Some(p) = exposed_handler_settings(policy, |k| std::env::var_os(k)) {
                    return OpenOutcome::NotOpened {
                        why: format!(
                            "the URL handler settings {} can be changed from inside the sandbox, \
                             so the system opener could be made to run anything",
                            p.display()
                        ),
                    };
                }
                match system_opener() {
                    None => OpenOutcome::NotOpened {
                        why: "no opener".into(),
                    },
                    Some(bin) => open_with(&bin, url),
                }
            }
        }
    }
}

/// Where the program that handles `http(s):` is chosen. Whoever can write there picks what
/// `xdg-open` / `open` runs, outside the sandbox: a confined CLI (whose home is open) could
/// register its own "browser". Linux: the per-user `mimeapps.list` and `.desktop` folder
/// (`$XDG_CONFIG_HOME`, `$XDG_DATA_HOME` or their defaults); macOS: the LaunchServices
/// handler preferences.
fn handler_settings(home: &Path, env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Vec<PathBuf> {
    let xdg = |var: &str, default: &str| {
        env(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| home.join(default))
    };
    if cfg!(target_os = "macos") {
        vec![home.join("Library/Preferences/com.apple.LaunchServices")]
    } else {
        vec![
            xdg("XDG_CONFIG_HOME", ".config").join("mimeapps.list"),
            xdg("XDG_DATA_HOME", ".local/share").join("applications"),
        ]
    }
}

/// The first URL-handler setting the chat's policy lets be created or written, if any.
pub fn exposed_handler_settings(
    policy: &Policy,
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Option<PathBuf> {
    handler_settings(&policy.home, env)
        .into_iter()
        .find(|p| policy.decide(Op::Create, p).allowed() || policy.decide(Op::Write, p).allowed())
}

/// Where the opener may live. Never a folder on the dispatcher's `PATH` that the person (and
/// so a confined CLI, whose home is open) can write: a planted `~/.local/bin/xdg-open` would
/// run unconfined.
#[cfg(target_os = "macos")]
const OPENER_CANDIDATES: &[&str] = &["/usr/bin/open"];
#[cfg(target_os = "linux")]
const OPENER_CANDIDATES: &[&str] = &[
    "/usr/bin/xdg-open",
    "/bin/xdg-open",
    "/usr/local/bin/xdg-open",
];

/// The `PATH` the opener runs with: `xdg-open` is a script that looks up helpers (`gio`,
/// `x-www-browser`, …) on it, and those must not come from a folder in the home either.
const OPENER_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

fn system_opener() -> Option<PathBuf> {
    OPENER_CANDIDATES
        .iter()
        .map(PathBuf::from)
        .find(|p| trusted_program(p))
}

/// A program only root can have put there: a regular file, and it and every folder above it
/// owned by root and not writable by group or others.
fn trusted_program(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    if !meta.is_file() {
        return false;
    }
    path.ancestors()
        .all(|p| match std::fs::symlink_metadata(p) {
            Ok(m) => m.uid() == 0 && m.mode() & 0o022 == 0,
            Err(_) => p.as_os_str().is_empty(),
        })
}

fn open_with(bin: &Path, url: &str) -> OpenOutcome {
    let name = bin.display().to_string();
    // The URL is one argv element: no shell, and it starts with "http", never with '-'.
    match std::process::Command::new(bin)
        .arg(url)
        .env("PATH", OPENER_PATH)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(mut child) => {
            // Reap it whenever it ends (xdg-open may wait for the browser); never block the call.
            std::thread::spawn(move || {
                let _ = child.wait();
            });
            OpenOutcome::Opened { with: name }
        }
        Err(e) => OpenOutcome::NotOpened {
            why: format!("cannot run {name}: {e}"),
        },
    }
}

/// The result of one tool call, with what the log records.
#[derive(Debug)]
pub struct Outcome {
    /// The MCP tool result (`content`, `isError`).
    pub result: Value,
    /// The path or URL as asked.
    pub target: Option<String>,
    /// The real path the decision was made on.
    pub resolved: Option<PathBuf>,
    pub verdict: CallVerdict,
    pub reason: String,
}

/// What a tool needs from its chat.
pub struct ToolContext<'a> {
    pub policy: &'a Policy,
    /// The policy compared without case ([`case_folded`]), where file names are
    /// case-insensitive: a call must be allowed by both.
    pub folded: Option<&'a Policy>,
    pub open_url_allow: &'a [String],
    pub opener: &'a Opener,
}

/// Runs tool `name`; `None` when there is no such tool.
pub fn call(cx: &ToolContext<'_>, name: &str, args: &Map<String, Value>) -> Option<Outcome> {
    let mut call = Call {
        target: None,
        resolved: None,
    };
    let policies = Policies {
        exact: cx.policy,
        folded: cx.folded,
    };
    let result = match name {
        "read_file" => call.read_file(&policies, args),
        "write_file" => call.write_file(&policies, args),
        "list_dir" => call.list_dir(&policies, args),
        "open_url" => call.open_url(cx, args),
        _ => return None,
    };
    let (result, verdict, reason) = match result {
        Ok(Done { text, note, reason }) => {
            let mut result = tool_result(text, false);
            if let Some(note) = note {
                result["content"]
                    .as_array_mut()
                    .expect("tool_result has content")
                    .push(json!({ "type": "text", "text": note }));
            }
            (result, CallVerdict::Allow, reason)
        }
        Err(Stop::Deny { message, reason }) => {
            (tool_result(message, true), CallVerdict::Deny, reason)
        }
        Err(Stop::Fail(message)) => (
            tool_result(message.clone(), true),
            CallVerdict::Error,
            message,
        ),
    };
    Some(Outcome {
        result,
        target: call.target,
        resolved: call.resolved,
        verdict,
        reason,
    })
}

struct Done {
    text: String,
    /// A second text block about the result (e.g. where to read on), kept apart from content.
    note: Option<String>,
    reason: String,
}

impl Done {
    fn new(text: String, reason: String) -> Done {
        Done {
            text,
            note: None,
            reason,
        }
    }
}

#[derive(Debug)]
enum Stop {
    /// Refused: by the policy, by the allow-list, or by a path rule. `reason` is the log's.
    Deny { message: String, reason: String },
    /// Allowed (or not decidable) but failed: bad arguments, missing file, not text, I/O.
    Fail(String),
}

fn deny(message: impl Into<String>) -> Stop {
    let message = message.into();
    Stop::Deny {
        reason: message.clone(),
        message: format!("refused: {message}"),
    }
}

fn fail(message: impl Into<String>) -> Stop {
    Stop::Fail(message.into())
}

struct Call {
    target: Option<String>,
    resolved: Option<PathBuf>,
}

struct Policies<'a> {
    exact: &'a Policy,
    folded: Option<&'a Policy>,
}

/// The policy with every rule's path lowercased. On a case-insensitive file system (macOS's
/// default) `/Users/me/LIBRARY/...` is the folder `/Users/me/Library/...`, and the real path
/// the kernel reports for an open file may carry the case the caller used; deciding again on
/// the lowercased path with this policy closes that gap (it can only refuse more).
pub fn case_folded(policy: &Policy) -> Policy {
    let mut p = policy.clone();
    p.protected.iter_mut().for_each(|r| r.path = fold(&r.path));
    p.grants.iter_mut().for_each(|g| g.path = fold(&g.path));
    p.refuse.iter_mut().for_each(|r| r.path = fold(&r.path));
    p.closed
        .read
        .iter_mut()
        .for_each(|r| r.path = fold(&r.path));
    p.closed
        .write
        .iter_mut()
        .for_each(|r| r.path = fold(&r.path));
    p.launchers
        .exec
        .iter_mut()
        .for_each(|l| l.path = fold(&l.path));
    p.launchers
        .read
        .iter_mut()
        .for_each(|l| l.path = fold(&l.path));
    p
}

fn fold(path: &Path) -> PathBuf {
    PathBuf::from(path.to_string_lossy().to_lowercase())
}

// ---- arguments ---------------------------------------------------------------------------

fn only_keys(args: &Map<String, Value>, allowed: &[&str]) -> Result<(), Stop> {
    match args.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(fail(format!(
            "unknown argument {k:?}; this tool takes: {}",
            allowed.join(", ")
        ))),
        None => Ok(()),
    }
}

fn string_arg<'a>(args: &'a Map<String, Value>, key: &str) -> Result<&'a str, Stop> {
    match args.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(fail(format!("argument {key:?} must be a string"))),
        None => Err(fail(format!("missing required argument {key:?}"))),
    }
}

fn u64_arg(args: &Map<String, Value>, key: &str) -> Result<Option<u64>, Stop> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| fail(format!("argument {key:?} must be a non-negative integer"))),
    }
}

fn bool_arg(args: &Map<String, Value>, key: &str) -> Result<Option<bool>, Stop> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(fail(format!("argument {key:?} must be true or false"))),
    }
}

// ---- paths and decisions -------------------------------------------------------------------

/// A requested path, checked for the tricks that are refused outright.
fn checked_path(raw: &str) -> Result<PathBuf, Stop> {
    if raw.contains('\0') {
        return Err(deny(format!("{raw:?} contains a NUL byte")));
    }
    if raw.len() > MAX_PATH {
        return Err(fail(format!("the path is longer than {MAX_PATH} bytes")));
    }
    let path = Path::new(raw);
    if !path.is_absolute() {
        return Err(deny(format!(
            "{raw:?} is not an absolute path; the bridge takes absolute paths only"
        )));
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(deny(format!(
            "{raw:?} contains '..'; give the path it means without '..'"
        )));
    }
    Ok(path.to_path_buf())
}

/// Where `path` would resolve: the longest prefix that resolves (through [`fsx::resolve`],
/// so a prefix through a magic link or on /proc is refused, never followed), plus the rest as
/// written. Used only to decide on a path that could not be opened, so that a refusal is said
/// before any "not found".
fn resolve_prefix(path: &Path) -> Result<PathBuf, fsx::Refused> {
    let mut rest: Vec<&OsStr> = Vec::new();
    let mut cur = path;
    loop {
        match fsx::real_of(cur) {
            Ok(real) => return Ok(rest.iter().rev().fold(real, |p, part| p.join(part))),
            Err(fsx::OpenError::Refused(r)) => return Err(r),
            Err(fsx::OpenError::Io(_)) => {}
        }
        match (cur.file_name(), cur.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                cur = parent;
            }
            // Only "/" has neither, and it always resolves; fall back to the path as written.
            _ => return Ok(path.to_path_buf()),
        }
    }
}

fn shown(requested: &Path, real: &Path) -> String {
    if requested == real {
        requested.display().to_string()
    } else {
        format!("{} (really {})", requested.display(), real.display())
    }
}

impl Call {
    fn set_target(&mut self, raw: &str) {
        self.target = Some(raw.to_string());
    }

    /// Decides `op` on the real path; a refusal names the deciding rule.
    fn decide(
        &mut self,
        policy: &Policies<'_>,
        op: Op,
        requested: &Path,
        real: &Path,
    ) -> Result<String, Stop> {
        self.resolved = Some(real.to_path_buf());
        let d = policy.exact.decide(op, real);
        if !d.allowed() {
            return Err(deny(format!(
                "{op} of {}: {}",
                shown(requested, real),
                d.reason
            )));
        }
        if let Some(folded) = policy.folded {
            let f = folded.decide(op, &fold(real));
            if !f.allowed() {
                return Err(deny(format!(
                    "{op} of {}: {} (file names are compared without case here)",
                    shown(requested, real),
                    f.reason
                )));
            }
        }
        Ok(d.reason.to_string())
    }

    /// A path that could not be opened: refused at resolution, or refused if where it leads
    /// is refused, else say why. `opened` is what failed to open: the path itself, or its
    /// folder for a write.
    fn open_failed(
        &mut self,
        policy: &Policies<'_>,
        op: Op,
        requested: &Path,
        opened: &Path,
        e: fsx::OpenError,
    ) -> Stop {
        let e = match e {
            fsx::OpenError::Refused(r) => return refused(op, requested, r),
            fsx::OpenError::Io(e) => e,
        };
        let resolved = match resolve_prefix(requested) {
            Ok(p) => p,
            Err(r) => return refused(op, requested, r),
        };
        match self.decide(policy, op, requested, &resolved) {
            Err(refusal) => refusal,
            Ok(_) => fail(format!(
                "cannot open {}: {}",
                opened.display(),
                describe(&e)
            )),
        }
    }
}

fn refused(op: Op, requested: &Path, r: fsx::Refused) -> Stop {
    deny(format!("{op} of {}: {r}", requested.display()))
}

impl Call {}

fn describe(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "it does not exist".into(),
        io::ErrorKind::PermissionDenied => "permission denied by the system".into(),
        _ if e.raw_os_error() == Some(libc::ENOTDIR) => "a part of the path is not a folder".into(),
        _ => e.to_string(),
    }
}

// ---- the tools -----------------------------------------------------------------------------

impl Call {
    fn read_file(
        &mut self,
        policy: &Policies<'_>,
        args: &Map<String, Value>,
    ) -> Result<Done, Stop> {
        only_keys(args, &["path", "offset", "length"])?;
        let raw = string_arg(args, "path")?;
        self.set_target(raw);
        let path = checked_path(raw)?;
        let offset = u64_arg(args, "offset")?.unwrap_or(0);
        let length = u64_arg(args, "length")?.unwrap_or(MAX_READ);
        if length == 0 || length > MAX_READ {
            return Err(fail(format!("length must be between 1 and {MAX_READ}")));
        }
        let looked = Looked::lookup(&path)
            .map_err(|e| self.open_failed(policy, Op::Read, &path, &path, e))?;
        let reason = self.decide(policy, Op::Read, &path, &looked.real)?;
        let meta = looked.meta;
        match meta.kind {
            Kind::File => {}
            Kind::Dir => {
                return Err(fail(format!(
                    "{} is a folder; use list_dir",
                    path.display()
                )));
            }
            _ => return Err(fail(format!("{} is not a regular file", path.display()))),
        }
        if meta.nlink == 0 {
            return Err(fail(format!(
                "{} was removed while it was being opened",
                path.display()
            )));
        }
        if meta.nlink > 1 {
            return Err(deny(format!(
                "{} has {} hard links; the bridge reads only files with one name, since a second \
                 name may lie in a folder it may not read",
                path.display(),
                meta.nlink
            )));
        }
        let file = looked
            .into_reader()
            .map_err(|e| fail(format!("cannot read {}: {e}", path.display())))?;
        let size = meta.size;
        if offset > size {
            return Err(fail(format!(
                "offset {offset} is past the end of the file ({size} bytes)"
            )));
        }
        let want = length.min(size - offset) as usize;
        let mut buf = vec![0u8; want];
        let mut got = 0;
        while got < want {
            match file.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(fail(format!("cannot read {}: {e}", path.display()))),
            }
        }
        buf.truncate(got);
        let end_of_file = offset + got as u64 >= size;
        let text = match std::str::from_utf8(&buf) {
            Ok(t) => t.to_string(),
            // A chunk cut inside a character: return up to its start, read on from there.
            Err(e) if e.error_len().is_none() && !end_of_file && e.valid_up_to() > 0 => {
                buf.truncate(e.valid_up_to());
                String::from_utf8(buf).expect("valid up to here")
            }
            Err(e) => {
                let at = offset + e.valid_up_to() as u64;
                return Err(fail(format!(
                    "{} is not UTF-8 text (at byte {at}){}; the bridge reads text only",
                    path.display(),
                    if e.valid_up_to() == 0 && offset > 0 {
                        ", or offset is inside a character"
                    } else {
                        ""
                    }
                )));
            }
        };
        let next = offset + text.len() as u64;
        let note = (next < size).then(|| {
            format!(
                "[read_file: bytes {offset}..{next} of {size}; call read_file with offset {next} for more]"
            )
        });
        Ok(Done { text, note, reason })
    }

    fn write_file(
        &mut self,
        policy: &Policies<'_>,
        args: &Map<String, Value>,
    ) -> Result<Done, Stop> {
        only_keys(args, &["path", "content", "create"])?;
        let raw = string_arg(args, "path")?;
        self.set_target(raw);
        let content = string_arg(args, "content")?;
        let create = bool_arg(args, "create")?.unwrap_or(false);
        let path = checked_path(raw)?;
        if content.len() > MAX_WRITE {
            return Err(fail(format!(
                "content is {} bytes; write_file takes at most {MAX_WRITE}",
                content.len()
            )));
        }
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(fail(format!("{raw:?} names no file")));
        };
        if raw.ends_with('/') {
            return Err(fail(format!(
                "{raw:?} ends with '/': it names a folder, not a file"
            )));
        }
        let op = if create { Op::Create } else { Op::Write };
        let fsx::Resolved {
            fd: dir,
            real: real_parent,
        } = fsx::open_dir(parent).map_err(|e| self.open_failed(policy, op, &path, parent, e))?;
        let real = real_parent.join(name);
        let mut reason = self.decide(policy, Op::Write, &path, &real)?;
        let mut created = false;
        let mut attempts = 0;
        let mut file = loop {
            attempts += 1;
            let entry = fsx::stat_at(dir.as_fd(), name)
                .map_err(|e| fail(format!("cannot inspect {}: {e}", path.display())))?;
            match entry {
                None if !create => {
                    return Err(fail(format!(
                        "{} does not exist; pass create: true to create it",
                        path.display()
                    )));
                }
                None => {
                    reason = self.decide(policy, Op::Create, &path, &real)?;
                    match fsx::create_at(dir.as_fd(), name) {
                        Ok(f) => {
                            created = true;
                            break f;
                        }
                        // Something appeared in between: look again, once.
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempts < 2 => {
                            continue;
                        }
                        Err(e) => {
                            return Err(fail(format!("cannot create {}: {e}", path.display())));
                        }
                    }
                }
                Some(m) => match m.kind {
                    Kind::Symlink => {
                        return Err(deny(format!(
                            "{} is a symbolic link; the bridge never writes through a link \
                             (write to the file's real path)",
                            path.display()
                        )));
                    }
                    Kind::Dir => return Err(fail(format!("{} is a folder", path.display()))),
                    Kind::Other => {
                        return Err(fail(format!("{} is not a regular file", path.display())));
                    }
                    Kind::File if m.nlink > 1 => {
                        return Err(deny(format!(
                            "{} has {} hard links; the bridge writes only files with one name, \
                             since a second name may lie in a folder it may not write",
                            path.display(),
                            m.nlink
                        )));
                    }
                    Kind::File => {
                        let f = fsx::open_write_at(dir.as_fd(), name).map_err(|e| {
                            fail(format!("cannot open {}: {}", path.display(), describe(&e)))
                        })?;
                        let now = fsx::meta_fd(f.as_fd()).map_err(|e| fail(e.to_string()))?;
                        if !now.same_file(&m) || now.kind != Kind::File || now.nlink != 1 {
                            return Err(fail(format!(
                                "{} changed while it was being opened",
                                path.display()
                            )));
                        }
                        break f;
                    }
                },
            }
        };
        file.set_len(0)
            .and_then(|()| file.write_all(content.as_bytes()))
            .map_err(|e| fail(format!("cannot write {}: {e}", path.display())))?;
        Ok(Done::new(
            format!(
                "{} {} bytes to {}",
                if created { "created, wrote" } else { "wrote" },
                content.len(),
                real.display()
            ),
            reason,
        ))
    }

    fn list_dir(&mut self, policy: &Policies<'_>, args: &Map<String, Value>) -> Result<Done, Stop> {
        only_keys(args, &["path"])?;
        let raw = string_arg(args, "path")?;
        self.set_target(raw);
        let path = checked_path(raw)?;
        let looked = Looked::lookup(&path)
            .map_err(|e| self.open_failed(policy, Op::List, &path, &path, e))?;
        let reason = self.decide(policy, Op::List, &path, &looked.real)?;
        if looked.meta.kind != Kind::Dir {
            return Err(fail(format!("{} is not a folder", path.display())));
        }
        if looked.meta.nlink == 0 {
            return Err(fail(format!(
                "{} was removed while it was being opened",
                path.display()
            )));
        }
        let real = looked.real.clone();
        let dir = looked
            .into_dir()
            .map_err(|e| fail(format!("cannot open {}: {e}", path.display())))?;
        let (mut names, mut more) = fsx::dir_names(dir.as_fd(), MAX_LIST_ENTRIES)
            .map_err(|e| fail(format!("cannot list {}: {e}", path.display())))?;
        names.sort();
        let mut text = format!("{}:\n", real.display());
        if names.is_empty() {
            text.push_str("(empty)\n");
        }
        for name in &names {
            if text.len() > MAX_LIST_TEXT {
                more = true;
                break;
            }
            let shown_name = display_name(name);
            let line = match fsx::stat_at(dir.as_fd(), name) {
                Ok(Some(m)) => match m.kind {
                    Kind::Dir => format!("dir   {shown_name}/"),
                    Kind::File => format!("file  {shown_name}  ({} bytes)", m.size),
                    Kind::Symlink => match fsx::read_link_at(dir.as_fd(), name) {
                        Ok(t) => format!("link  {shown_name} -> {}", display_name(&t)),
                        Err(_) => format!("link  {shown_name}"),
                    },
                    Kind::Other => format!("other {shown_name}"),
                },
                // Removed since it was listed.
                Ok(None) => continue,
                Err(_) => format!("?     {shown_name}"),
            };
            text.push_str(&line);
            text.push('\n');
        }
        if more {
            let _ = writeln!(text, "[list_dir: more entries not shown]");
        }
        Ok(Done::new(text, reason))
    }

    fn open_url(&mut self, cx: &ToolContext<'_>, args: &Map<String, Value>) -> Result<Done, Stop> {
        only_keys(args, &["url"])?;
        let url = string_arg(args, "url")?;
        self.set_target(url);
        let normal = check_url(url).map_err(deny)?;
        let Some(prefix) = cx.open_url_allow.iter().find(|p| prefix_allows(p, &normal)) else {
            return Err(deny(format!(
                "{url} is not under an allowed prefix (open_url.allow in config.json: {})",
                if cx.open_url_allow.is_empty() {
                    "empty".to_string()
                } else {
                    cx.open_url_allow.join(", ")
                }
            )));
        };
        let reason = format!("allowed by open_url.allow prefix {prefix:?}");
        match cx.opener.open(cx.policy, url) {
            OpenOutcome::Opened { with } => {
                Ok(Done::new(format!("opened {url} with {with}"), reason))
            }
            OpenOutcome::NotOpened { why } => Ok(Done::new(
                format!("not opened: {why}; URL: {url}"),
                format!("{reason}; not opened: {why}"),
            )),
        }
    }
}

/// A name for display: control characters and invalid UTF-8 escaped, so one entry is one line.
fn display_name(name: &OsStr) -> String {
    let lossy = String::from_utf8_lossy(name.as_bytes());
    if lossy.chars().any(char::is_control) {
        lossy.escape_debug().to_string()
    } else {
        lossy.into_owned()
    }
}

/// Checks a URL and returns it with scheme and authority lowercased, for prefix matching.
/// Only plain http(s) URLs pass: printable ASCII (no spaces, controls, backslashes or
/// non-ASCII look-alikes), a host, no user info (`https://good.example@evil.example/`).
pub fn check_url(url: &str) -> Result<String, String> {
    if url.len() > MAX_URL {
        return Err(format!("the URL is longer than {MAX_URL} bytes"));
    }
    if let Some(c) = url.chars().find(|c| !c.is_ascii_graphic() || *c == '\\') {
        return Err(format!(
            "{:?} contains {c:?}; only printable ASCII without spaces or backslashes is opened",
            url
        ));
    }
    let Some((scheme, rest)) = url.split_once(':') else {
        return Err(format!("{url:?} is not a URL"));
    };
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(format!(
            "{url:?}: only http and https URLs are opened (not {scheme}:)"
        ));
    }
    let Some(rest) = rest.strip_prefix("//") else {
        return Err(format!("{url:?}: expected {scheme}://host"));
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.contains('@') {
        return Err(format!(
            "{url:?}: URLs with user info ('@' before the host) are refused"
        ));
    }
    let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
    if host.is_empty() {
        return Err(format!("{url:?} has no host"));
    }
    Ok(format!(
        "{scheme}://{}{tail}",
        authority.to_ascii_lowercase()
    ))
}

/// Whether an allowed prefix covers a checked URL: a prefix that ends in `/` or `://` matches
/// anything it starts; otherwise the URL must end there or go on with `/`, `?` or `#`, so
/// `https://example.com` does not allow `https://example.com.evil.net/`.
pub fn prefix_allows(prefix: &str, normal_url: &str) -> bool {
    let prefix = normalize_prefix(prefix);
    let Some(after) = normal_url.strip_prefix(prefix.as_str()) else {
        return false;
    };
    prefix.ends_with('/') || after.is_empty() || after.starts_with(['/', '?', '#'])
}

fn normalize_prefix(prefix: &str) -> String {
    match prefix.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            let (authority, tail) = rest.split_at(end);
            format!(
                "{}://{}{tail}",
                scheme.to_ascii_lowercase(),
                authority.to_ascii_lowercase()
            )
        }
        None => prefix.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            check_url("HTTPS://Example.COM/A?b#c").unwrap(),
            "https://example.com/A?b#c"
        );
        for bad in [
            "file:///etc/passwd",
            "javascript:alert(1)",
            "ftp://example.com/",
            "https:example.com",
            "https://",
            "https://:443/",
            "https://good.example@evil.example/",
            "https://example.com/a b",
            "https://example.com\\@evil",
            "https://exämple.com/",
            "https://example.com/\n",
            "mailto:x@example.com",
            "",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn prefixes_match_on_boundaries() {
        let ok = |p: &str, u: &str| prefix_allows(p, &check_url(u).unwrap());
        assert!(ok("https://", "https://anything.example/x"));
        assert!(!ok("https://", "http://anything.example/x"));
        assert!(ok("https://example.com", "https://example.com"));
        assert!(ok("https://example.com", "https://EXAMPLE.com/path"));
        assert!(ok("https://Example.com", "https://example.com?q"));
        assert!(!ok("https://example.com", "https://example.com.evil.net/"));
        assert!(!ok("https://example.com", "https://example.com:8443/"));
        assert!(ok(
            "https://example.com/docs/",
            "https://example.com/docs/a"
        ));
        assert!(!ok(
            "https://example.com/docs",
            "https://example.com/docsevil"
        ));
        assert!(ok("https://example.com/docs", "https://example.com/docs/a"));
    }

    #[test]
    fn path_tricks_are_refused_before_any_lookup() {
        for raw in ["rel/path", "", "/a/../b", "/a/b/..", "/a\0b", "~/x"] {
            assert!(checked_path(raw).is_err(), "{raw:?}");
        }
        assert_eq!(checked_path("/a/./b").unwrap(), Path::new("/a/./b"));
    }

    #[test]
    fn case_folding_refuses_a_protected_root_spelled_in_another_case() {
        let opts = sandboxer::policy::ResolveOptions::new(
            sandboxer::Target::Macos,
            "/Users/me".into(),
            false,
        )
        .unwrap();
        let text = r#"
            version = 1
            base = "open"
            [[protected]]
            path = "~/Library/Application Support/AgentWorks"
            [[grant]]
            path = "~/Library/Application Support/AgentWorks/state/cli-runtimes/v1/c1"
            access = "rw"
            [[refuse]]
            path = "~/Library/Application Support/AgentWorks/state/cli-runtimes/v1/c1/Secret"
        "#;
        let exact = Policy::from_toml(text, "policy.toml", &opts).unwrap();
        let folded = case_folded(&exact);
        let both = Policies {
            exact: &exact,
            folded: Some(&folded),
        };
        let only_exact = Policies {
            exact: &exact,
            folded: None,
        };
        let mut call = Call {
            target: None,
            resolved: None,
        };
        let sneaky = Path::new("/Users/me/library/APPLICATION SUPPORT/agentworks/config.json");
        // Compared by case alone the path is outside every rule (and the base is open).
        assert!(call.decide(&only_exact, Op::Read, sneaky, sneaky).is_ok());
        match call.decide(&both, Op::Read, sneaky, sneaky) {
            Err(Stop::Deny { message, .. }) => {
                assert!(message.contains("without case"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        let runtime_file = Path::new(
            "/Users/me/Library/Application Support/AgentWorks/state/cli-runtimes/v1/C1/notes",
        );
        assert!(
            call.decide(&both, Op::Write, runtime_file, runtime_file)
                .is_err(),
            "grant in another case: protected"
        );
        let ok = Path::new(
            "/Users/me/Library/Application Support/AgentWorks/state/cli-runtimes/v1/c1/notes",
        );
        assert!(call.decide(&both, Op::Write, ok, ok).is_ok());
        let refused = Path::new(
            "/Users/me/Library/Application Support/AgentWorks/state/cli-runtimes/v1/c1/SECRET/x",
        );
        assert!(call.decide(&both, Op::Read, refused, refused).is_err());
    }

    #[test]
    fn only_a_root_owned_program_in_root_owned_folders_opens_urls() {
        assert!(!trusted_program(Path::new("/no/such/xdg-open")));
        let d = tempfile::tempdir().unwrap();
        let planted = d.path().join("xdg-open");
        std::fs::write(&planted, "#!/bin/sh\n").unwrap();
        // Under /tmp (world-writable) or owned by a normal user: never trusted.
        assert!(!trusted_program(&planted));
        assert!(!trusted_program(d.path()), "a folder is not a program");
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        use std::os::unix::fs::MetadataExt;
        if std::fs::metadata(&sh).unwrap().uid() == 0 {
            assert!(trusted_program(&sh), "{}", sh.display());
        }
        for c in OPENER_CANDIDATES {
            assert!(Path::new(c).is_absolute());
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_system_opener_waits_until_url_handlers_are_protected() {
        let opts = sandboxer::policy::ResolveOptions::new(
            sandboxer::Target::Linux,
            "/home/me".into(),
            false,
        )
        .unwrap();
        let policy = |protected: &[&str]| {
            let mut text = String::from("version = 1\nbase = \"open\"\n");
            for p in protected {
                text.push_str(&format!("[[protected]]\npath = \"{p}\"\n"));
            }
            Policy::from_toml(&text, "policy.toml", &opts).unwrap()
        };
        let no_env = |_: &str| None;
        let open_home = policy(&[]);
        assert_eq!(
            exposed_handler_settings(&open_home, no_env),
            Some(PathBuf::from("/home/me/.config/mimeapps.list"))
        );
        let half = policy(&["~/.config/mimeapps.list"]);
        assert_eq!(
            exposed_handler_settings(&half, no_env),
            Some(PathBuf::from("/home/me/.local/share/applications"))
        );
        let both = policy(&["~/.config/mimeapps.list", "~/.local/share"]);
        assert_eq!(exposed_handler_settings(&both, no_env), None);
        // $XDG_CONFIG_HOME moves the file the opener reads; the policy must cover that one.
        let moved = |k: &str| (k == "XDG_CONFIG_HOME").then(|| "/home/me/cfg".into());
        assert_eq!(
            exposed_handler_settings(&both, moved),
            Some(PathBuf::from("/home/me/cfg/mimeapps.list"))
        );
        // With the home open, the system opener never runs: the URL is handed back.
        let url = "https://docs.example.com/";
        match Opener::System.open(&open_home, url) {
            OpenOutcome::NotOpened { why } => {
                assert!(why.contains("URL handler settings"), "{why}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn resolve_prefix_keeps_the_missing_tail() {
        let d = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(d.path()).unwrap();
        std::os::unix::fs::symlink(&real, real.join("link")).unwrap();
        assert_eq!(
            resolve_prefix(&real.join("link/no/such")),
            Ok(real.join("no/such"))
        );
        std::fs::write(real.join("file"), "").unwrap();
        // Through a file (ENOTDIR), still resolved as far as it goes.
        assert_eq!(
            resolve_prefix(&real.join("link/file/x")),
            Ok(real.join("file/x"))
        );
        // Never through a magic link, never onto /proc, even for a path that does not exist.
        #[cfg(target_os = "linux")]
        assert_eq!(
            resolve_prefix(Path::new("/proc/self/no/such")),
            Err(fsx::Refused::Proc)
        );
        #[cfg(target_os = "linux")]
        assert_eq!(
            resolve_prefix(Path::new("/proc/self/root/no/such")),
            Err(fsx::Refused::MagicLink)
        );
    }
}
