//! The state root: the product's protected folder. Its layout is fixed here and nowhere else.
//!
//! ```text
//! <root>/config.json                    server token (0600), docs root, folder guard, open_url,
//!                                         autorun guard
//! <root>/state/auth/                    the product's own logins
//! <root>/state/chats/<chat>.json        a chat's saved settings (mode)
//! <root>/state/cli-runtimes/v1/<chat>/  each chat's runtime: cwd, CLI config homes, policy
//! <root>/state/events/<chat>.jsonl      each chat's event log (append-only)
//! <root>/state/guard-ledger.json        what every confined launch guarded (bridge-only reads it)
//! <root>/personal-mcp/                  the person's MCP config for the product (never given to a CLI)
//! <root>/tmux/                          the dispatcher's tmux server socket
//! <root>/workspace-docs/<workflow>/     workflows (unless config.json names another docs root)
//! ```
//!
//! Every command opens the root with [`StateRoot::open`], which refuses a folder that is not
//! one (no `config.json` of ours, someone else's folder, a file) instead of writing into it,
//! and a state root that is not the one `dispatcher init` anchored at that path (see
//! [`crate::anchor`]): a look-alike made there after the real one was moved away.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ids::{ChatId, WorkflowId};

pub mod error;
mod network;
mod secrets;
pub mod write;

use error::io_err;
pub use error::{ENV_STATE_ROOT, StateError};
pub use network::NetworkConfig;
pub use write::{write_atomic, write_regenerated};

/// `config.json`'s `kind`: how we know a folder is a state root.
pub const KIND: &str = "agentworks-state-root";

/// What the folder guard refuses inside every granted workflow, by relative path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FolderGuard {
    pub blocked: Vec<String>,
}

impl Default for FolderGuard {
    fn default() -> Self {
        FolderGuard {
            blocked: vec!["planning".into(), "workflow.db".into()],
        }
    }
}

/// `open_url` bridge tool: which URL prefixes the dispatcher opens for a chat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenUrl {
    pub allow: Vec<String>,
}

impl Default for OpenUrl {
    fn default() -> Self {
        OpenUrl {
            allow: vec!["https://".into()],
        }
    }
}

/// `autorun`: the autorun guard in every launch's policy (`profiles/autorun.toml` and the
/// programs the dispatcher runs outside a sandbox); on unless `"guard": false`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutorunConfig {
    pub guard: bool,
}

impl Default for AutorunConfig {
    fn default() -> Self {
        AutorunConfig { guard: true }
    }
}

impl AutorunConfig {
    fn is_default(&self) -> bool {
        *self == AutorunConfig::default()
    }
}

/// `config.json`. Readable only by the person (0600) and never by a confined process (the
/// state root is protected), so the server token is safe here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub kind: String,
    pub version: u32,
    pub server_token: String,
    /// The random id its anchor also records (see [`crate::anchor`]); missing only in a state
    /// root made before anchors, until `dispatcher init` adopts it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_id: Option<String>,
    /// Workflows live here; default `<root>/workspace-docs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docs_root: Option<PathBuf>,
    #[serde(default)]
    pub folder_guard: FolderGuard,
    #[serde(default)]
    pub open_url: OpenUrl,
    #[serde(default, skip_serializing_if = "AutorunConfig::is_default")]
    pub autorun: AutorunConfig,
    #[serde(default, skip_serializing_if = "NetworkConfig::is_default")]
    pub network: NetworkConfig,
}

/// An opened, validated state root.
#[derive(Debug, Clone)]
pub struct StateRoot {
    root: PathBuf,
    config: Config,
}

impl StateRoot {
    /// The default location: `$XDG_DATA_HOME/agentworks` (Linux) or
    /// `~/Library/Application Support/AgentWorks` (macOS).
    pub fn default_path() -> Result<PathBuf, StateError> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        if cfg!(target_os = "macos") {
            return home
                .map(|h| h.join("Library/Application Support/AgentWorks"))
                .ok_or(StateError::NoDefault);
        }
        match std::env::var_os("XDG_DATA_HOME").map(PathBuf::from) {
            Some(x) if x.is_absolute() => Ok(x.join("agentworks")),
            _ => home
                .map(|h| h.join(".local/share/agentworks"))
                .ok_or(StateError::NoDefault),
        }
    }

    /// `--state-root`, else `$AGENTWORKS_STATE_ROOT`, else the default.
    pub fn locate(flag: Option<&Path>) -> Result<PathBuf, StateError> {
        if let Some(p) = flag {
            return Ok(p.to_path_buf());
        }
        match std::env::var_os(ENV_STATE_ROOT) {
            Some(p) if !p.is_empty() => Ok(PathBuf::from(p)),
            _ => StateRoot::default_path(),
        }
    }

    /// Creates a state root at `path` (or confirms one is there). Refuses a file, a non-empty
    /// folder that is not a state root, and someone else's folder.
    pub fn init(path: &Path, docs_root: Option<&Path>) -> Result<(StateRoot, bool), StateError> {
        match fs::symlink_metadata(path) {
            Ok(meta) => {
                if !meta.is_dir() {
                    return Err(StateError::NotAStateRoot {
                        path: path.into(),
                        why: "it is not a folder".into(),
                    });
                }
                if path.join("config.json").exists() {
                    return StateRoot::anchor(path, false).map(|s| (s, false));
                }
                let mut entries = fs::read_dir(path).map_err(io_err(path, "cannot list"))?;
                if entries.next().is_some() {
                    return Err(StateError::NotEmpty { path: path.into() });
                }
                check_owner(path, &meta)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(path).map_err(io_err(path, "cannot create"))?;
            }
            Err(e) => return Err(io_err(path, "cannot inspect")(e)),
        }
        let root = fs::canonicalize(path).map_err(io_err(path, "cannot resolve"))?;
        set_mode(&root, 0o700)?;
        let docs_root = match docs_root {
            Some(d) if !d.is_absolute() => {
                return Err(StateError::BadConfig {
                    path: root.join("config.json"),
                    field: "docs_root".into(),
                    why: format!("{d:?} must be an absolute path"),
                });
            }
            Some(d) => Some(d.to_path_buf()),
            None => None,
        };
        let config = Config {
            kind: KIND.into(),
            version: 1,
            server_token: random_token()?,
            root_id: Some(random_token()?),
            docs_root,
            folder_guard: FolderGuard::default(),
            open_url: OpenUrl::default(),
            autorun: AutorunConfig::default(),
            network: NetworkConfig::default(),
        };
        let state = StateRoot { root, config };
        for dir in state.layout_dirs() {
            fs::create_dir_all(&dir).map_err(io_err(&dir, "cannot create"))?;
            set_mode(&dir, 0o700)?;
        }
        // config.json last: its presence is what makes the folder a state root; then the
        // anchor, which makes it this path's.
        state.write_config()?;
        let id = state.config.root_id.clone().expect("set above");
        crate::anchor::write(&state.root, &id)?;
        Ok((state, true))
    }

    /// Opens the existing state root at `path` and anchors it when it has no anchor yet (a
    /// state root made before anchors) or, with `adopt`, when its anchor names another folder
    /// (the person moved or restored it). Run from inside a chat, writing the anchor fails:
    /// every launch protects it.
    pub fn anchor(path: &Path, adopt: bool) -> Result<StateRoot, StateError> {
        let mut state = StateRoot::open_unanchored(path)?;
        let anchor_path = crate::anchor::path_for(&state.root);
        if let Some(anchor) = crate::anchor::read(&anchor_path)? {
            let why =
                crate::anchor::mismatch(&anchor, &state.root, state.config.root_id.as_deref())?;
            match why {
                None => return Ok(state),
                Some(why) if !adopt => {
                    return Err(StateError::Stranger {
                        path: path.into(),
                        anchor: anchor_path,
                        why,
                    });
                }
                Some(_) => {}
            }
        }
        if state.config.root_id.is_none() {
            state.config.root_id = Some(random_token()?);
            state.write_config()?;
        }
        let id = state.config.root_id.clone().expect("set above");
        crate::anchor::write(&state.root, &id)?;
        Ok(state)
    }

    /// The anchor of this state root (see [`crate::anchor`]): every launch protects it.
    pub fn anchor_path(&self) -> PathBuf {
        crate::anchor::path_for(&self.root)
    }

    /// Opens an existing state root, or explains why `path` is not one, or not the one
    /// `dispatcher init` anchored there.
    pub fn open(path: &Path) -> Result<StateRoot, StateError> {
        let state = StateRoot::open_unanchored(path)?;
        let anchor_path = state.anchor_path();
        let Some(anchor) = crate::anchor::read(&anchor_path)? else {
            return Err(StateError::NotAnchored {
                path: path.into(),
                anchor: anchor_path,
            });
        };
        if let Some(why) =
            crate::anchor::mismatch(&anchor, &state.root, state.config.root_id.as_deref())?
        {
            return Err(StateError::Stranger {
                path: path.into(),
                anchor: anchor_path,
                why,
            });
        }
        Ok(state)
    }

    /// [`StateRoot::open`] without the anchor's check.
    fn open_unanchored(path: &Path) -> Result<StateRoot, StateError> {
        let not = |why: &str| StateError::NotAStateRoot {
            path: path.into(),
            why: why.into(),
        };
        let meta = fs::metadata(path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => not("it does not exist"),
            _ => io_err(path, "cannot inspect")(e),
        })?;
        if !meta.is_dir() {
            return Err(not("it is not a folder"));
        }
        check_owner(path, &meta)?;
        let root = fs::canonicalize(path).map_err(io_err(path, "cannot resolve"))?;
        let config_path = root.join("config.json");
        let cmeta = match fs::symlink_metadata(&config_path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(not("it has no config.json"));
            }
            Err(e) => return Err(io_err(&config_path, "cannot inspect")(e)),
        };
        if !cmeta.is_file() {
            return Err(not("config.json is not a regular file"));
        }
        check_owner(&config_path, &cmeta)?;
        if cmeta.mode() & 0o077 != 0 {
            return Err(StateError::BadConfig {
                path: config_path,
                field: "(mode)".into(),
                why: format!(
                    "mode {:o} lets others read the server token; expected 600 (chmod 600 it)",
                    cmeta.mode() & 0o777
                ),
            });
        }
        let mut text = String::new();
        File::open(&config_path)
            .and_then(|mut f| f.read_to_string(&mut text))
            .map_err(io_err(&config_path, "cannot read"))?;
        let config: Config = serde_json::from_str(&text).map_err(|e| StateError::BadConfig {
            path: config_path.clone(),
            field: format!("line {} column {}", e.line(), e.column()),
            why: e.to_string(),
        })?;
        if config.kind != KIND {
            return Err(not("config.json is not a state root's (wrong kind)"));
        }
        if config.version != 1 {
            return Err(StateError::BadConfig {
                path: config_path,
                field: "version".into(),
                why: format!("unsupported version {}", config.version),
            });
        }
        for (i, b) in config.folder_guard.blocked.iter().enumerate() {
            check_blocked(&config_path, i, b)?;
        }
        config.network.check(&config_path)?;
        if let Some(d) = &config.docs_root
            && !d.is_absolute()
        {
            return Err(StateError::BadConfig {
                path: config_path,
                field: "docs_root".into(),
                why: format!("{d:?} must be absolute"),
            });
        }
        Ok(StateRoot { root, config })
    }

    pub fn path(&self) -> &Path {
        &self.root
    }
    pub fn config(&self) -> &Config {
        &self.config
    }
    pub fn config_json(&self) -> PathBuf {
        self.root.join("config.json")
    }
    pub fn auth_dir(&self) -> PathBuf {
        self.root.join("state/auth")
    }
    pub fn personal_mcp(&self) -> PathBuf {
        self.root.join("personal-mcp")
    }
    pub fn chats_dir(&self) -> PathBuf {
        self.root.join("state/chats")
    }
    /// What the confined launches so far guarded (`launch::Ledger`).
    pub fn guard_ledger(&self) -> PathBuf {
        self.root.join("state/guard-ledger.json")
    }
    pub fn runtimes_dir(&self) -> PathBuf {
        self.root.join("state/cli-runtimes/v1")
    }
    pub fn events_dir(&self) -> PathBuf {
        self.root.join("state/events")
    }
    pub fn tmux_dir(&self) -> PathBuf {
        self.root.join("tmux")
    }
    pub fn docs_root(&self) -> PathBuf {
        self.config
            .docs_root
            .clone()
            .unwrap_or_else(|| self.root.join("workspace-docs"))
    }
    pub fn runtime(&self, chat: &ChatId) -> PathBuf {
        self.runtimes_dir().join(chat.as_str())
    }
    pub fn chat_settings(&self, chat: &ChatId) -> PathBuf {
        self.chats_dir().join(format!("{chat}.json"))
    }
    pub fn events(&self, chat: &ChatId) -> PathBuf {
        self.events_dir().join(format!("{chat}.jsonl"))
    }
    pub fn workflow(&self, wf: &WorkflowId) -> PathBuf {
        self.docs_root().join(wf.as_str())
    }

    fn layout_dirs(&self) -> Vec<PathBuf> {
        vec![
            self.auth_dir(),
            self.personal_mcp(),
            self.chats_dir(),
            self.runtimes_dir(),
            self.events_dir(),
            self.tmux_dir(),
            self.docs_root(),
        ]
    }

    /// Adds `rel` to the folder guard's list (refused inside every workflow) and saves it.
    pub fn block_in_workflows(&mut self, rel: &str) -> Result<(), StateError> {
        let blocked = &mut self.config.folder_guard.blocked;
        check_blocked(&self.root.join("config.json"), blocked.len(), rel)?;
        if !blocked.iter().any(|b| b == rel) {
            blocked.push(rel.to_string());
            self.write_config()?;
        }
        Ok(())
    }

    /// Replaces the server token with a fresh one (`dispatcher init --rotate-token`): for a
    /// token that may have been read. `config.json` is written anew by rename, so a hard link
    /// to the old file keeps the old token.
    pub fn rotate_token(&mut self) -> Result<(), StateError> {
        self.config.server_token = random_token()?;
        self.write_config()
    }

    fn write_config(&self) -> Result<(), StateError> {
        let mut text = serde_json::to_string_pretty(&self.config).expect("config serializes");
        text.push('\n');
        write_atomic(&self.config_json(), text.as_bytes(), 0o600)
    }

    /// Fails unless the chat exists (its runtime and settings).
    pub fn require_chat(&self, chat: &ChatId) -> Result<(), StateError> {
        if self.chat_settings(chat).is_file() && self.runtime(chat).is_dir() {
            Ok(())
        } else {
            Err(StateError::UnknownChat(chat.to_string()))
        }
    }

    pub fn require_workflow(&self, wf: &WorkflowId) -> Result<(), StateError> {
        if self.workflow(wf).is_dir() {
            Ok(())
        } else {
            Err(StateError::UnknownWorkflow(wf.to_string()))
        }
    }

    pub fn add_workflow(&self, wf: &WorkflowId) -> Result<PathBuf, StateError> {
        let dir = self.workflow(wf);
        create_new_dir(&dir, "workflow", wf.as_str())?;
        Ok(dir)
    }

    pub fn add_chat(&self, chat: &ChatId, settings: &ChatSettings) -> Result<PathBuf, StateError> {
        let settings_path = self.chat_settings(chat);
        if settings_path.exists() {
            return Err(StateError::Exists {
                kind: "chat",
                id: chat.to_string(),
            });
        }
        let runtime = self.runtime(chat);
        create_new_dir(&runtime, "chat", chat.as_str())?;
        self.save_chat(chat, settings)?;
        Ok(runtime)
    }

    pub fn save_chat(&self, chat: &ChatId, settings: &ChatSettings) -> Result<(), StateError> {
        let mut text = serde_json::to_string_pretty(settings).expect("settings serialize");
        text.push('\n');
        write_atomic(&self.chat_settings(chat), text.as_bytes(), 0o600)
    }

    pub fn load_chat(&self, chat: &ChatId) -> Result<ChatSettings, StateError> {
        self.require_chat(chat)?;
        let path = self.chat_settings(chat);
        let text = fs::read_to_string(&path).map_err(io_err(&path, "cannot read"))?;
        serde_json::from_str(&text).map_err(|e| StateError::BadConfig {
            path,
            field: format!("line {} column {}", e.line(), e.column()),
            why: e.to_string(),
        })
    }

    pub fn chats(&self) -> Result<Vec<ChatId>, StateError> {
        let dir = self.chats_dir();
        let mut out = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io_err(&dir, "cannot list"))? {
            let entry = entry.map_err(io_err(&dir, "cannot list"))?;
            let name = entry.file_name();
            if let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|n| ChatId::new(n).ok())
            {
                out.push(id);
            }
        }
        out.sort();
        Ok(out)
    }
}

/// A chat's saved settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatSettings {
    /// The stored mode word: `auto`, `full`, `bridge-only`; the legacy `full_unconfined`
    /// reads as `full` (there is no unconfined mode).
    pub mode: String,
}

fn check_owner(path: &Path, meta: &fs::Metadata) -> Result<(), StateError> {
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(StateError::NotOwner {
            path: path.into(),
            owner: meta.uid(),
            me,
        });
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> Result<(), StateError> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(io_err(path, "cannot chmod"))
}

fn create_new_dir(dir: &Path, kind: &'static str, id: &str) -> Result<(), StateError> {
    match fs::create_dir(dir) {
        Ok(()) => set_mode(dir, 0o700),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(StateError::Exists {
            kind,
            id: id.into(),
        }),
        Err(e) => Err(io_err(dir, "cannot create")(e)),
    }
}

/// 32 random bytes from the OS, hex-encoded.
fn random_token() -> Result<String, StateError> {
    crate::ids::random_hex(32).map_err(io_err(Path::new("/dev/urandom"), "cannot read"))
}

/// A folder guard entry is a relative path inside a workflow, without `..`.
fn check_blocked(config_path: &Path, i: usize, b: &str) -> Result<(), StateError> {
    let p = Path::new(b);
    let ok = !b.is_empty()
        && !b.contains('\0')
        && p.is_relative()
        && p.components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    if ok {
        return Ok(());
    }
    Err(StateError::BadConfig {
        path: config_path.to_path_buf(),
        field: format!("folder_guard.blocked[{i}]"),
        why: format!("{b:?} must be a relative path inside a workflow, without '..'"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_creates_layout_and_private_config() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("sr");
        let (s, created) = StateRoot::init(&root, None).unwrap();
        assert!(created);
        let meta = fs::metadata(s.config_json()).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert_eq!(s.config().server_token.len(), 64);
        for dir in s.layout_dirs() {
            assert!(dir.is_dir(), "{}", dir.display());
        }
        // Idempotent: a second init opens the same root and keeps the token.
        let (again, created) = StateRoot::init(&root, None).unwrap();
        assert!(!created);
        assert_eq!(again.config().server_token, s.config().server_token);
    }

    #[test]
    fn refuses_what_is_not_a_state_root() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("file");
        fs::write(&file, "x").unwrap();
        assert!(matches!(
            StateRoot::open(&file),
            Err(StateError::NotAStateRoot { .. })
        ));
        assert!(matches!(
            StateRoot::init(&file, None),
            Err(StateError::NotAStateRoot { .. })
        ));

        let busy = d.path().join("busy");
        fs::create_dir(&busy).unwrap();
        fs::write(busy.join("notes.txt"), "mine").unwrap();
        assert!(matches!(
            StateRoot::init(&busy, None),
            Err(StateError::NotEmpty { .. })
        ));
        assert!(matches!(
            StateRoot::open(&busy),
            Err(StateError::NotAStateRoot { .. })
        ));
        assert_eq!(fs::read_dir(&busy).unwrap().count(), 1, "nothing written");

        assert!(matches!(
            StateRoot::open(&d.path().join("missing")),
            Err(StateError::NotAStateRoot { .. })
        ));
    }

    #[test]
    fn refuses_a_world_readable_config() {
        let d = tempfile::tempdir().unwrap();
        let (s, _) = StateRoot::init(d.path(), None).unwrap();
        fs::set_permissions(s.config_json(), fs::Permissions::from_mode(0o644)).unwrap();
        let e = StateRoot::open(d.path()).unwrap_err();
        assert!(e.to_string().contains("chmod 600"), "{e}");
    }

    #[test]
    fn regenerated_files_are_rewritten_only_when_they_differ() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("policy.toml");
        write_regenerated(&p, b"one", 0o600).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"one");
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        let ino = fs::metadata(&p).unwrap().ino();
        // The same bytes again: the file is left as it is.
        write_regenerated(&p, b"one", 0o600).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().ino(), ino);
        // Other bytes, another mode, or a second link: replaced.
        write_regenerated(&p, b"two", 0o600).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
        write_regenerated(&p, b"two", 0o600).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        let other = d.path().join("other-name");
        fs::hard_link(&p, &other).unwrap();
        write_regenerated(&p, b"two", 0o600).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().nlink(), 1);
        assert_eq!(fs::metadata(&other).unwrap().nlink(), 1);
        assert_eq!(
            fs::read_dir(d.path()).unwrap().count(),
            2,
            "no temporary left"
        );
    }

    #[test]
    fn a_regenerated_file_replaces_a_symlink_or_fifo_without_following_it() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("elsewhere");
        fs::write(&target, "same").unwrap();
        fs::set_permissions(&target, fs::Permissions::from_mode(0o600)).unwrap();
        let p = d.path().join("config.json");
        std::os::unix::fs::symlink(&target, &p).unwrap();
        // Even with the very bytes behind it, a symlink is replaced by a file of ours.
        write_regenerated(&p, b"same", 0o600).unwrap();
        assert!(fs::symlink_metadata(&p).unwrap().is_file());
        assert_eq!(
            fs::read(&target).unwrap(),
            b"same",
            "the link's target is untouched"
        );

        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: c is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        write_regenerated(&fifo, b"x", 0o600).unwrap();
        assert_eq!(fs::read(&fifo).unwrap(), b"x");
    }

    #[test]
    fn chats_and_workflows_are_created_once() {
        let d = tempfile::tempdir().unwrap();
        let (s, _) = StateRoot::init(d.path(), None).unwrap();
        let c = ChatId::new("c1").unwrap();
        let w = WorkflowId::new("w1").unwrap();
        assert!(matches!(
            s.require_chat(&c),
            Err(StateError::UnknownChat(_))
        ));
        s.add_chat(
            &c,
            &ChatSettings {
                mode: "auto".into(),
            },
        )
        .unwrap();
        s.add_workflow(&w).unwrap();
        s.require_chat(&c).unwrap();
        s.require_workflow(&w).unwrap();
        assert!(matches!(s.add_workflow(&w), Err(StateError::Exists { .. })));
        assert_eq!(s.chats().unwrap(), vec![c]);
    }
}
