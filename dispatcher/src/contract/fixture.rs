//! The contract's world: a fresh temporary folder holding a real state root (made with the
//! dispatcher's own code), a person's home, and the runner's fixtures outside the sandbox — a
//! tmux server, Unix-socket listeners, an outside process, a pty. Before every run the runner
//! makes each probe's preconditions true ([`Layout::prepare`]); everything it plants or
//! removes lies inside the temporary folder, which is removed at the end unless kept.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sandboxer::paths::normalize;
use sandboxer::probe::{Probe, ProbeOp, Setup};

use super::ContractError;
use super::vars::Kind;
use crate::ids::{ChatId, WorkflowId};
use crate::state::{ChatSettings, StateRoot};

/// The script an `exec` probe runs: writes its first argument into the file named by its
/// second.
pub const EXEC_SCRIPT: &str = "#!/bin/sh\nprintf '%s' \"$1\" > \"$2\"\n";

/// The environment variable holding the outside process's marker.
pub const OUTSIDE_MARKER_VAR: &str = "AGENTWORKS_CONTRACT_MARKER";

fn io_err(what: impl std::fmt::Display) -> impl FnOnce(io::Error) -> ContractError {
    let what = what.to_string();
    move |e| ContractError::Io(format!("{what}: {e}"))
}

/// Random hex from the kernel.
pub fn random_hex(bytes: usize) -> Result<String, ContractError> {
    crate::ids::random_hex(bytes).map_err(io_err("reading /dev/urandom"))
}

/// Which launch a set of variables describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// `chat-1` on `wf-main`.
    Chat,
    /// The agent step: a CLI launched for the step's chat on `wf-steps`.
    AgentStep,
    /// The scripted step `scripted` on `wf-steps`.
    ScriptedStep,
}

impl Variant {
    pub fn kind(self) -> Kind {
        match self {
            Variant::Chat => Kind::Chat,
            Variant::AgentStep | Variant::ScriptedStep => Kind::Step,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Variant::Chat => "chat",
            Variant::AgentStep => "agent step",
            Variant::ScriptedStep => "scripted step",
        }
    }
}

fn id<T>(r: Result<T, crate::ids::IdError>) -> T {
    r.expect("the contract's fixed ids are valid")
}

/// The temporary world of one contract run.
/// The folder guard's nested entry in the contract's world (`{workflow}/notes/private`).
pub const NESTED_REFUSED: &str = "notes/private";

pub struct Layout {
    pub root: PathBuf,
    pub home: PathBuf,
    pub state: StateRoot,
    pub chat: ChatId,
    pub other_chat: ChatId,
    pub step_chat: ChatId,
    pub workflow: WorkflowId,
    pub attached: WorkflowId,
    pub attached_rw: WorkflowId,
    pub other_workflow: WorkflowId,
    pub step_workflow: WorkflowId,
    pub scripted_step: WorkflowId,
    pub other_step: WorkflowId,
    pub xdg_runtime: PathBuf,
    pub tmux_tmpdir: PathBuf,
    pub outside_dir: PathBuf,
    pub outside_evidence: PathBuf,
    pub harness_dir: PathBuf,
    /// Random per contract invocation; markers and tokens carry it.
    pub invocation: String,
    known_markers: BTreeMap<PathBuf, String>,
    planted: BTreeMap<PathBuf, String>,
    inodes: BTreeMap<PathBuf, (u64, u64)>,
    /// Kernel settings a `sysctl-write` probe targets, with the value read before the run:
    /// written back after it (and when the world goes) where the run changed it.
    knobs: BTreeMap<PathBuf, String>,
    /// The machine-wide lock on those settings, held from planting to judging ([`knob_lock`]).
    knob_lock_held: Option<fs::File>,
    keep: bool,
}

impl Layout {
    /// Makes the world in a fresh folder under `tmp` (default `$TMPDIR`, else `/tmp`).
    pub fn create(tmp: Option<&Path>, keep: bool) -> Result<Layout, ContractError> {
        Layout::create_with_state(tmp, keep, None)
    }

    /// As [`Layout::create`], with the state root made at `state_at` when given (a new or
    /// empty folder, never an existing state root: the runner plants markers in it and
    /// rewrites what it needs). That folder is left in place afterwards, for inspection.
    pub fn create_with_state(
        tmp: Option<&Path>,
        keep: bool,
        state_at: Option<&Path>,
    ) -> Result<Layout, ContractError> {
        if let Some(dir) = state_at {
            match fs::read_dir(dir).map(|mut entries| entries.next().is_some()) {
                Ok(true) => {
                    return Err(ContractError::Load(format!(
                        "--state-root {}: not empty; give a new or empty folder (the test plants markers in it, so it never uses an existing state root)",
                        dir.display()
                    )));
                }
                Ok(false) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(ContractError::Io(format!("{}: {e}", dir.display())));
                }
            }
        }
        let base = match tmp {
            Some(t) => t.to_path_buf(),
            None => std::env::var_os("TMPDIR")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .unwrap_or_else(|| PathBuf::from("/tmp")),
        };
        let invocation = random_hex(6)?;
        // Short: socket paths below it must fit in a sockaddr_un where possible.
        let root = base.join(format!("awc-{invocation}"));
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&root)
            .map_err(io_err(format!("creating {}", root.display())))?;
        let root =
            fs::canonicalize(&root).map_err(io_err(format!("resolving {}", root.display())))?;
        let mkdir = |p: &Path| {
            fs::DirBuilder::new()
                .mode(0o700)
                .recursive(true)
                .create(p)
                .map_err(io_err(format!("creating {}", p.display())))
        };
        let home = root.join("home");
        let xdg_runtime = root.join("xdg-runtime");
        let tmux_tmpdir = root.join("tmux-tmpdir");
        let outside_dir = root.join("outside");
        let harness_dir = root.join("harness");
        for d in [
            &home,
            &xdg_runtime,
            &tmux_tmpdir,
            &outside_dir,
            &harness_dir,
        ] {
            mkdir(d)?;
        }
        let state_path = match state_at {
            Some(dir) => {
                std::path::absolute(dir).map_err(io_err(format!("resolving {}", dir.display())))?
            }
            None => root.join("state"),
        };
        let (mut state, _) = StateRoot::init(&state_path, None)?;
        // A refused path below a folder of its own, whose ancestors a chat must not move.
        state.block_in_workflows(NESTED_REFUSED)?;
        let chat = id(ChatId::new("chat-1"));
        let other_chat = id(ChatId::new("chat-2"));
        let step_chat = id(ChatId::new("step-agent"));
        let workflow = id(WorkflowId::new("wf-main"));
        let attached = id(WorkflowId::new("wf-attached"));
        let attached_rw = id(WorkflowId::new("wf-attached-rw"));
        let other_workflow = id(WorkflowId::new("wf-other"));
        let step_workflow = id(WorkflowId::new("wf-steps"));
        for w in [
            &workflow,
            &attached,
            &attached_rw,
            &other_workflow,
            &step_workflow,
        ] {
            state.add_workflow(w)?;
        }
        for c in [&chat, &other_chat, &step_chat] {
            state.add_chat(
                c,
                &ChatSettings {
                    mode: "auto".into(),
                },
            )?;
        }
        let outside_evidence = state.path().join("contract-evidence");
        mkdir(&outside_evidence)?;
        let mut known_markers = BTreeMap::new();
        known_markers.insert(state.config_json(), state.config().server_token.clone());
        Ok(Layout {
            root,
            home,
            state,
            chat,
            other_chat,
            step_chat,
            workflow,
            attached,
            attached_rw,
            other_workflow,
            step_workflow,
            scripted_step: id(WorkflowId::new("scripted")),
            other_step: id(WorkflowId::new("other-step")),
            xdg_runtime,
            tmux_tmpdir,
            outside_dir,
            outside_evidence,
            harness_dir,
            invocation,
            known_markers,
            planted: BTreeMap::new(),
            inodes: BTreeMap::new(),
            knobs: BTreeMap::new(),
            knob_lock_held: None,
            keep,
        })
    }

    /// The runtime of the launch a variant describes.
    pub fn runtime(&self, v: Variant) -> PathBuf {
        match v {
            Variant::Chat => self.state.runtime(&self.chat),
            Variant::AgentStep => self.state.runtime(&self.step_chat),
            Variant::ScriptedStep => {
                crate::step::runtime(&self.state, &self.step_workflow, &self.scripted_step)
            }
        }
    }

    /// Every template variable's value for `v`. `fx` gives the fixtures' values; without
    /// fixtures (evaluation only) they are descriptive placeholders that no macOS probe uses
    /// as a path.
    pub fn vars(&self, v: Variant, fx: Option<&Fixtures>) -> BTreeMap<String, String> {
        let s = |p: &Path| p.display().to_string();
        let runtime = self.runtime(v);
        let workflow = match v {
            Variant::Chat => &self.workflow,
            _ => &self.step_workflow,
        };
        let mut m = BTreeMap::new();
        let mut put = |k: &str, val: String| {
            m.insert(k.to_string(), val);
        };
        put("home", s(&self.home));
        put("runtime", s(&runtime));
        put("launch_dir", s(&runtime.join(crate::grants::LAUNCH_DIR)));
        put("chat", self.chat.to_string());
        put("other_chat", self.other_chat.to_string());
        put("other_runtime", s(&self.state.runtime(&self.other_chat)));
        put(
            "other_step_runtime",
            s(&crate::step::runtime(
                &self.state,
                &self.step_workflow,
                &self.other_step,
            )),
        );
        put("workflow", s(&self.state.workflow(workflow)));
        put("attached", s(&self.state.workflow(&self.attached)));
        put("attached_rw", s(&self.state.workflow(&self.attached_rw)));
        put(
            "other_workflow",
            s(&self.state.workflow(&self.other_workflow)),
        );
        put("state_root", s(self.state.path()));
        put("config_json", s(&self.state.config_json()));
        put("auth_dir", s(&self.state.auth_dir()));
        put("personal_mcp", s(&self.state.personal_mcp()));
        put("events_db", s(&self.state.events(&self.other_chat)));
        put("own_events_db", s(&self.state.events(&self.chat)));
        put("outside_evidence", s(&self.outside_evidence));
        put("xdg_runtime_dir", s(&self.xdg_runtime));
        put("session_bus", s(&self.xdg_runtime.join("bus")));
        put("tmux_socket", s(&self.tmux_socket()));
        put(
            "abstract_socket",
            format!("agentworks-contract-{}", self.invocation),
        );
        match fx {
            Some(fx) => {
                put("outside_pid", fx.outside.pid.to_string());
                put("tty", s(&fx.pty.path));
                #[cfg(target_os = "linux")]
                {
                    put("sysv_shm", fx.shared.shm_id.to_string());
                    put("dev_shm_file", s(&fx.shared.dev_shm_file));
                    put("session_key", fx.shared.key_description.clone());
                }
                #[cfg(not(target_os = "linux"))]
                {
                    put("sysv_shm", "(Linux only)".into());
                    put("dev_shm_file", "(Linux only)".into());
                    put("session_key", "(Linux only)".into());
                }
            }
            None => {
                put("outside_pid", "(a process outside the sandbox)".into());
                put("tty", "(the caller's terminal)".into());
                put("sysv_shm", "(a System V segment the runner makes)".into());
                put(
                    "dev_shm_file",
                    "(a file the runner makes in /dev/shm)".into(),
                );
                put(
                    "session_key",
                    "(a key in the runner's session keyring)".into(),
                );
            }
        }
        m
    }

    /// Where tmux puts its default socket for `$TMUX_TMPDIR` = [`Layout::tmux_tmpdir`].
    pub fn tmux_socket(&self) -> PathBuf {
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        self.tmux_tmpdir.join(format!("tmux-{uid}")).join("default")
    }

    /// The marker a file or folder holds: a product secret (`config.json`'s token), or the one
    /// the runner planted.
    pub fn marker_for(&self, path: &Path) -> Option<&str> {
        let p = normalize(path)?;
        self.known_markers
            .get(&p)
            .or_else(|| self.planted.get(&p))
            .map(String::as_str)
    }

    /// How to name a marker in a report: a product secret is never printed.
    pub fn marker_label(&self, marker: &str) -> String {
        match self
            .known_markers
            .iter()
            .find(|(_, m)| m.as_str() == marker)
        {
            Some((p, _)) => format!(
                "the secret of {} (not shown)",
                p.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            ),
            None => marker.to_string(),
        }
    }

    /// The (device, inode) the file at `path` had when it was planted.
    pub fn planted_inode(&self, path: &Path) -> Option<(u64, u64)> {
        normalize(path).and_then(|p| self.inodes.get(&p).copied())
    }

    fn new_marker(&self, n: usize) -> String {
        format!("AWMARK-{}-{n}", self.invocation)
    }

    /// Makes every probe's preconditions true (see [`Setup`]). Paths are folded lexically and
    /// must lie inside the temporary folder; two probes may not need different things at one
    /// path, and a file probed destructively (delete, rename) is probed by no other probe.
    /// Probes the runner cannot prepare here (a macOS launcher's path) are returned with why,
    /// to be left to the evaluator; on Linux that is an error.
    pub fn prepare(
        &mut self,
        probes: &[Resolved<'_>],
        listeners: &mut Listeners,
    ) -> Result<BTreeMap<String, String>, ContractError> {
        self.end_run()?;
        for r in probes.iter().filter(|r| r.probe.op == ProbeOp::SysctlWrite) {
            self.remember_knob(Path::new(&r.target))?;
        }
        let mut wants: BTreeMap<PathBuf, (Setup, &str)> = BTreeMap::new();
        let mut unplantable = BTreeMap::new();
        let mut destructive: BTreeMap<PathBuf, &str> = BTreeMap::new();
        let mut used: BTreeMap<PathBuf, Vec<&str>> = BTreeMap::new();
        for r in probes {
            let (ts, as_) = r.probe.op.setup();
            let operands = [(ts, Some(r.target.as_str())), (as_, r.arg.as_deref())];
            for (setup, path) in operands {
                let (Some(path), true) = (path, setup != Setup::None) else {
                    continue;
                };
                let Some(p) = normalize(Path::new(path)) else {
                    return Err(ContractError::Probe(format!(
                        "{} ({}): {path:?} is not an absolute path",
                        r.probe.name, r.probe.origin
                    )));
                };
                if !p.starts_with(&self.root) {
                    unplantable.insert(
                        r.probe.name.clone(),
                        format!(
                            "{} is outside the runner's temporary folder: nothing can be planted there",
                            p.display()
                        ),
                    );
                    continue;
                }
                used.entry(p.clone()).or_default().push(&r.probe.name);
                if let Some((prev, who)) = wants.get(&p)
                    && *prev != setup
                {
                    return Err(ContractError::Probe(format!(
                        "{} ({}) needs {setup:?} at {}, but {who} needs {prev:?} there; give one of them another path",
                        r.probe.name,
                        r.probe.origin,
                        p.display()
                    )));
                }
                wants.insert(p, (setup, &r.probe.name));
            }
            // What a probe removes, moves or makes: no other probe may rely on that path.
            let mut changed: Vec<&str> = Vec::new();
            if matches!(
                r.probe.op,
                ProbeOp::Delete
                    | ProbeOp::ReadLate
                    | ProbeOp::Rename
                    | ProbeOp::RenameDir
                    | ProbeOp::Create
                    | ProbeOp::Mknod
            ) {
                changed.push(&r.target);
            }
            if as_ == Setup::Absent
                && let Some(a) = r.arg.as_deref()
            {
                changed.push(a);
            }
            for c in changed {
                if let Some(p) = normalize(Path::new(c)) {
                    destructive.insert(p, &r.probe.name);
                }
            }
        }
        for (p, who) in &destructive {
            if let Some(users) = used.get(p)
                && users.iter().any(|u| u != who)
            {
                return Err(ContractError::Probe(format!(
                    "{who} removes, moves or makes {}, which {} also use(s); give such probes their own path",
                    p.display(),
                    users
                        .iter()
                        .filter(|u| *u != who)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
        let mut n = self.planted.len();
        // A late read's target gets its marker now and its content from the runner later.
        for r in probes.iter().filter(|r| r.probe.op == ProbeOp::ReadLate) {
            if let Some(p) = normalize(Path::new(&r.target))
                && !self.planted.contains_key(&p)
            {
                n += 1;
                let m = self.new_marker(n);
                self.planted.insert(p, m);
            }
        }
        for (path, (setup, _)) in wants {
            match setup {
                Setup::File => {
                    match fs::symlink_metadata(&path) {
                        Ok(m) if m.is_file() => {}
                        Ok(m) if m.is_dir() => {
                            return Err(ContractError::Probe(format!(
                                "{} is a folder where a probe needs a file",
                                path.display()
                            )));
                        }
                        Ok(_) => {
                            fs::remove_file(&path)
                                .map_err(io_err(format!("removing {}", path.display())))?;
                            self.plant_file(&path, &mut n)?;
                        }
                        Err(_) => self.plant_file(&path, &mut n)?,
                    }
                    let m = fs::metadata(&path)
                        .map_err(io_err(format!("reading {}", path.display())))?;
                    self.inodes.insert(path.clone(), (m.dev(), m.ino()));
                }
                Setup::Absent => remove(&path)?,
                Setup::Dir => {
                    mkdir_p(&path)?;
                    let marker = match self.planted.get(&path) {
                        Some(m) => m.clone(),
                        None => {
                            n += 1;
                            let m = self.new_marker(n);
                            self.planted.insert(path.clone(), m.clone());
                            m
                        }
                    };
                    let entry = path.join(&marker);
                    if fs::symlink_metadata(&entry).is_err() {
                        fs::write(&entry, "")
                            .map_err(io_err(format!("creating {}", entry.display())))?;
                    }
                }
                Setup::Script => {
                    if let Some(parent) = path.parent() {
                        mkdir_p(parent)?;
                    }
                    if fs::symlink_metadata(&path).is_ok_and(|m| !m.is_file()) {
                        remove(&path)?;
                    }
                    fs::write(&path, EXEC_SCRIPT)
                        .map_err(io_err(format!("writing {}", path.display())))?;
                    fs::set_permissions(&path, fs::Permissions::from_mode(0o755))
                        .map_err(io_err(format!("chmod {}", path.display())))?;
                }
                Setup::Listener => listeners.ensure(&path)?,
                Setup::None => {}
            }
        }
        Ok(unplantable)
    }

    fn plant_file(&mut self, path: &Path, n: &mut usize) -> Result<(), ContractError> {
        if let Some(parent) = path.parent() {
            mkdir_p(parent)?;
        }
        let marker = match self.planted.get(path) {
            Some(m) => m.clone(),
            None => {
                *n += 1;
                let m = self.new_marker(*n);
                self.planted.insert(path.to_path_buf(), m.clone());
                m
            }
        };
        fs::write(path, format!("{marker}\n"))
            .map_err(io_err(format!("planting {}", path.display())))
    }

    pub fn keep(&self) -> bool {
        self.keep
    }

    /// What the runner writes during the run for the late reads among `probes`.
    pub fn late_writes(&self, probes: &[Resolved<'_>]) -> Vec<super::late::LateWrite> {
        probes
            .iter()
            .filter(|r| r.probe.op == ProbeOp::ReadLate)
            .filter_map(|r| {
                let target = normalize(Path::new(&r.target))?;
                let contents = format!("{}\n", self.planted.get(&target)?);
                Some(super::late::LateWrite {
                    refused: self.refused_in_a_workflow(&target),
                    target,
                    flag: PathBuf::from(r.arg.as_deref()?),
                    contents,
                })
            })
            .collect()
    }

    /// Whether the folder guard refuses `path` inside one of the world's workflows.
    fn refused_in_a_workflow(&self, path: &Path) -> bool {
        let docs = self.state.docs_root();
        let Ok(rest) = path.strip_prefix(&docs) else {
            return false;
        };
        let inside: PathBuf = rest.components().skip(1).collect();
        self.state
            .config()
            .folder_guard
            .blocked
            .iter()
            .any(|b| inside.starts_with(b))
    }

    /// The value a kernel setting held before the first run, and the value it holds now.
    pub fn knob(&self, path: &Path) -> Option<(&str, Result<String, String>)> {
        let before = self.knobs.get(path)?;
        let now = fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()));
        Some((before.as_str(), now))
    }

    fn remember_knob(&mut self, path: &Path) -> Result<(), ContractError> {
        if !path.starts_with("/proc/sys/") {
            return Err(ContractError::Probe(format!(
                "{} is not a kernel setting: a sysctl-write target lies under /proc/sys/",
                path.display()
            )));
        }
        // One lock a run (a second `flock` of this process on another descriptor would wait
        // for the first).
        if self.knob_lock_held.is_none() {
            self.knob_lock_held = Some(knob_lock()?);
        }
        // Read under the lock at every run: the value no other contract run is changing.
        let now =
            fs::read_to_string(path).map_err(io_err(format!("reading {}", path.display())))?;
        self.knobs.insert(path.to_path_buf(), now);
        Ok(())
    }

    /// After a run is judged: writes back every setting it changed and lets go of the locks.
    pub fn end_run(&mut self) -> Result<(), ContractError> {
        // Only under the lock: another run may be between its planting and its judging.
        if self.knob_lock_held.is_none() {
            return Ok(());
        }
        let restored = self.restore_knobs();
        self.knob_lock_held = None;
        restored
    }

    /// Writes back every setting a run changed: only root can have (anyone else's run could
    /// not change it, and has nothing to write back).
    fn restore_knobs(&self) -> Result<(), ContractError> {
        // SAFETY: geteuid has no failure and no memory effects.
        if unsafe { libc::geteuid() } != 0 {
            return Ok(());
        }
        for (path, before) in &self.knobs {
            if fs::read_to_string(path).is_ok_and(|now| now != *before) {
                fs::write(path, before)
                    .map_err(io_err(format!("writing back {}", path.display())))?;
            }
        }
        Ok(())
    }
}

impl Drop for Layout {
    fn drop(&mut self) {
        if let Err(e) = self.end_run() {
            eprintln!("dispatcher contract: {e}");
        }
        if !self.keep {
            let _ = fs::remove_dir_all(&self.root);
        }
    }
}

/// One lock for every contract run on this machine that probes kernel settings, whoever runs
/// it: settings are global, and a run must not see another's change (or write its own value
/// back) between planting and judging. A file in `/tmp`, opened without following links, and
/// made only if missing (an existing file of another user is opened read-only: `flock` needs
/// no more, and no `O_CREAT` meets `fs.protected_regular`).
fn knob_lock() -> Result<fs::File, ContractError> {
    const LOCK: &str = "/tmp/.agentworks-contract-settings.lock";
    let open = || {
        fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(LOCK)
    };
    let file = match open() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(LOCK)
            .or_else(|_| open()),
        other => other,
    }
    .map_err(io_err(format!("opening {LOCK}")))?;
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_EX) } != 0 {
        return Err(io_err(format!("locking {LOCK}"))(io::Error::last_os_error()));
    }
    Ok(file)
}

fn mkdir_p(p: &Path) -> Result<(), ContractError> {
    fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(p)
        .map_err(io_err(format!("creating {}", p.display())))
}

fn remove(p: &Path) -> Result<(), ContractError> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => {
            fs::remove_dir_all(p).map_err(io_err(format!("removing {}", p.display())))
        }
        Ok(_) => fs::remove_file(p).map_err(io_err(format!("removing {}", p.display()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ContractError::Io(format!("{}: {e}", p.display()))),
    }
}

/// A probe with its operands expanded for one run, and its token.
pub struct Resolved<'a> {
    pub probe: &'a Probe,
    pub target: String,
    pub arg: Option<String>,
    pub token: String,
}

impl<'a> Resolved<'a> {
    pub fn new(
        probe: &'a Probe,
        vars: &BTreeMap<String, String>,
        run_id: &str,
    ) -> Result<Resolved<'a>, ContractError> {
        let err =
            |e: String| ContractError::Probe(format!("{} ({}): {e}", probe.name, probe.origin));
        Ok(Resolved {
            probe,
            target: probe.target.expand(vars).map_err(err)?,
            arg: probe
                .arg
                .as_ref()
                .map(|a| a.expand(vars))
                .transpose()
                .map_err(err)?,
            token: sandboxer::probe::token(run_id, &probe.name),
        })
    }
}

/// The runner's Unix-socket listeners: at the paths of connect-unix probes, and one abstract
/// socket. Connections queue in the backlog while the harness runs and are read afterwards.
pub struct Listeners {
    paths: BTreeMap<PathBuf, UnixListener>,
    abstract_name: String,
    abstract_listener: Option<UnixListener>,
}

impl Listeners {
    pub fn new(abstract_name: &str) -> Result<Listeners, ContractError> {
        Ok(Listeners {
            paths: BTreeMap::new(),
            abstract_name: abstract_name.to_string(),
            abstract_listener: bind_abstract(abstract_name)?,
        })
    }

    fn ensure(&mut self, path: &Path) -> Result<(), ContractError> {
        let alive = self.paths.contains_key(path)
            && fs::symlink_metadata(path).is_ok_and(|m| {
                use std::os::unix::fs::FileTypeExt;
                m.file_type().is_socket()
            });
        if alive {
            return Ok(());
        }
        self.paths.remove(path);
        remove(path)?;
        if let Some(parent) = path.parent() {
            mkdir_p(parent)?;
        }
        let l = bind_path(path).map_err(io_err(format!("listening on {}", path.display())))?;
        l.set_nonblocking(true)
            .map_err(io_err(format!("listening on {}", path.display())))?;
        self.paths.insert(path.to_path_buf(), l);
        Ok(())
    }

    /// Everything received since the last call, by listener (`@name` for the abstract one).
    pub fn drain(&mut self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (p, l) in &self.paths {
            out.insert(p.display().to_string(), drain_one(l));
        }
        if let Some(l) = &self.abstract_listener {
            out.insert(format!("@{}", self.abstract_name), drain_one(l));
        }
        out
    }
}

/// Binds a listener at `path`; a path too long for `sockaddr_un` is bound from its folder by
/// name (the runner is single-threaded while it prepares a run).
fn bind_path(path: &Path) -> io::Result<UnixListener> {
    use sandboxer::probe::harness::{SOCKET_PATH_MAX, in_folder};
    if path.as_os_str().len() <= SOCKET_PATH_MAX {
        return UnixListener::bind(path);
    }
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => in_folder(dir, || UnixListener::bind(name)),
        _ => UnixListener::bind(path),
    }
}

fn drain_one(l: &UnixListener) -> String {
    let mut text = String::new();
    while let Ok((mut s, _)) = l.accept() {
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(Duration::from_millis(300)));
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        text.push_str(&String::from_utf8_lossy(&buf));
        text.push('\n');
    }
    text
}

#[cfg(target_os = "linux")]
fn bind_abstract(name: &str) -> Result<Option<UnixListener>, ContractError> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
        .map_err(io_err("abstract socket name"))?;
    let l = UnixListener::bind_addr(&addr).map_err(io_err(format!("listening on @{name}")))?;
    l.set_nonblocking(true)
        .map_err(io_err(format!("listening on @{name}")))?;
    Ok(Some(l))
}

#[cfg(not(target_os = "linux"))]
fn bind_abstract(_: &str) -> Result<Option<UnixListener>, ContractError> {
    Ok(None)
}

/// The runner's live fixtures.
pub struct Fixtures {
    pub outside: Outside,
    pub tmux: Option<Tmux>,
    pub pty: Pty,
    pub listeners: Listeners,
    /// Kernel objects shared with the outside, each holding a marker.
    #[cfg(target_os = "linux")]
    pub shared: super::shared::Shared,
}

impl Fixtures {
    pub fn start(layout: &Layout, dispatcher: &Path) -> Result<Fixtures, ContractError> {
        let marker = format!("AWMARK-{}-environ", layout.invocation);
        Ok(Fixtures {
            outside: Outside::start(dispatcher, &layout.outside_dir, &marker)?,
            tmux: Tmux::start(layout)?,
            pty: Pty::open()?,
            listeners: Listeners::new(&format!("agentworks-contract-{}", layout.invocation))?,
            #[cfg(target_os = "linux")]
            shared: super::shared::Shared::create(&layout.invocation)?,
        })
    }
}

/// A process outside the sandbox (`dispatcher contract --outside-process DIR`): it records a
/// SIGUSR1 and being traced (its `TracerPid`, polled every loop, one 3 ms sleep per loop) as
/// files in DIR, and carries a marker in its environment.
pub struct Outside {
    pub pid: u32,
    pub marker: String,
    dir: PathBuf,
    child: Child,
}

impl Outside {
    fn start(dispatcher: &Path, dir: &Path, marker: &str) -> Result<Outside, ContractError> {
        let mut cmd = Command::new(dispatcher);
        cmd.args(["contract", "--outside-process"])
            .arg(dir)
            .env_clear()
            .env(OUTSIDE_MARKER_VAR, marker)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let child = cmd.spawn().map_err(io_err(format!(
            "starting the outside process {}",
            dispatcher.display()
        )))?;
        let mut o = Outside {
            pid: child.id(),
            marker: marker.to_string(),
            dir: dir.to_path_buf(),
            child,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !dir.join("ready").exists() {
            if let Ok(Some(status)) = o.child.try_wait() {
                return Err(ContractError::Io(format!(
                    "the outside process exited at start ({status})"
                )));
            }
            if Instant::now() > deadline {
                return Err(ContractError::Io(
                    "the outside process did not start in 10 s".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        o.clear()?;
        Ok(o)
    }

    /// Forgets what it recorded (before a run).
    pub fn clear(&mut self) -> Result<(), ContractError> {
        for f in ["signal", "traced"] {
            remove(&self.dir.join(f))?;
        }
        Ok(())
    }

    pub fn signalled(&self) -> Option<String> {
        fs::read_to_string(self.dir.join("signal")).ok()
    }

    pub fn traced(&self) -> Option<String> {
        fs::read_to_string(self.dir.join("traced")).ok()
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        // Our own child, stopped by its pid.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The outside process's body. Never returns.
pub fn outside_process(dir: &Path) -> ! {
    use std::sync::atomic::{AtomicBool, Ordering};
    static SIGNALLED: AtomicBool = AtomicBool::new(false);
    extern "C" fn on_usr1(_: libc::c_int) {
        SIGNALLED.store(true, Ordering::SeqCst);
    }
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with constant arguments; dies with the runner.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGUSR1, on_usr1 as *const () as libc::sighandler_t);
    }
    let ready = dir.join("ready");
    if let Err(e) = fs::write(&ready, std::process::id().to_string()) {
        eprintln!("dispatcher: outside process: {}: {e}", ready.display());
        std::process::exit(2);
    }
    loop {
        // SAFETY: getppid cannot fail.
        if unsafe { libc::getppid() } == 1 {
            std::process::exit(0);
        }
        if SIGNALLED.swap(false, Ordering::SeqCst) {
            let _ = fs::write(dir.join("signal"), "SIGUSR1 received\n");
        }
        if let Ok(status) = fs::read_to_string("/proc/self/status")
            && let Some(tracer) = status
                .lines()
                .find_map(|l| l.strip_prefix("TracerPid:"))
                .map(str::trim)
            && tracer != "0"
        {
            let _ = fs::write(dir.join("traced"), format!("traced by pid {tracer}\n"));
        }
        std::thread::sleep(Duration::from_millis(3));
    }
}

/// A real tmux server, its socket where `$TMUX_TMPDIR` puts it.
pub struct Tmux {
    pub socket: PathBuf,
    pid: Option<libc::pid_t>,
}

impl Tmux {
    /// Starts one, or `None` when tmux is not installed (the tmux probes then cannot
    /// succeed even unconfined, and the contract says so).
    fn start(layout: &Layout) -> Result<Option<Tmux>, ContractError> {
        let socket = layout.tmux_socket();
        let base = |c: &mut Command| {
            c.env_remove("TMUX")
                .env("TMUX_TMPDIR", &layout.tmux_tmpdir)
                .env("HOME", &layout.home)
                .stdin(Stdio::null());
        };
        let mut cmd = Command::new("tmux");
        base(&mut cmd);
        cmd.args([
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "contract",
            "sleep",
            "86400",
        ]);
        let out = match cmd.output() {
            Ok(o) => o,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(ContractError::Io(format!("starting tmux: {e}"))),
        };
        if !out.status.success() {
            return Err(ContractError::Io(format!(
                "tmux new-session failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let mut q = Command::new("tmux");
        base(&mut q);
        q.arg("-S")
            .arg(&socket)
            .args(["display-message", "-p", "#{pid}"]);
        let pid = q
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok());
        Ok(Some(Tmux { socket, pid }))
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        if let Some(pid) = self.pid {
            // The server we started, stopped by its own pid.
            // SAFETY: kill has no memory effects.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
    }
}

/// The slave's path of a pty master.
#[cfg(target_os = "linux")]
fn pts_name(master: libc::c_int) -> Option<PathBuf> {
    let mut buf = [0 as libc::c_char; 256];
    // SAFETY: the buffer outlives the call and its length is passed.
    if unsafe { libc::ptsname_r(master, buf.as_mut_ptr(), buf.len()) } != 0 {
        return None;
    }
    // SAFETY: ptsname_r wrote a NUL-terminated string into buf.
    let name = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    Some(PathBuf::from(name.to_string_lossy().into_owned()))
}

/// The slave's path of a pty master (macOS has no `ptsname_r`; the runner is single-threaded
/// while it opens its pty).
#[cfg(not(target_os = "linux"))]
fn pts_name(master: libc::c_int) -> Option<PathBuf> {
    // SAFETY: ptsname returns a static buffer, copied at once.
    let p = unsafe { libc::ptsname(master) };
    if p.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated string owned by libc.
    let name = unsafe { std::ffi::CStr::from_ptr(p) };
    Some(PathBuf::from(name.to_string_lossy().into_owned()))
}

/// A pty: the sandbox runs with its slave as stdin and controlling terminal (as a CLI run in
/// a person's terminal does); the runner reads back what was pushed into its input queue.
pub struct Pty {
    _master: OwnedFd,
    reader: fs::File,
    pub path: PathBuf,
}

impl Pty {
    fn open() -> Result<Pty, ContractError> {
        let err = |what: &str| ContractError::Io(format!("{what}: {}", io::Error::last_os_error()));
        // SAFETY: plain libc calls on a descriptor we own; the buffer outlives ptsname_r.
        unsafe {
            let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
            if m < 0 {
                return Err(err("posix_openpt"));
            }
            let master = OwnedFd::from_raw_fd(m);
            if libc::grantpt(m) != 0 || libc::unlockpt(m) != 0 {
                return Err(err("grantpt/unlockpt"));
            }
            let path = pts_name(m).ok_or_else(|| err("ptsname"))?;
            let reader = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK)
                .open(&path)
                .map_err(io_err(format!("opening {}", path.display())))?;
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(reader.as_raw_fd(), &mut t) != 0 {
                return Err(err("tcgetattr"));
            }
            libc::cfmakeraw(&mut t);
            t.c_cc[libc::VMIN] = 0;
            t.c_cc[libc::VTIME] = 0;
            if libc::tcsetattr(reader.as_raw_fd(), libc::TCSANOW, &t) != 0 {
                return Err(err("tcsetattr"));
            }
            Ok(Pty {
                _master: master,
                reader,
                path,
            })
        }
    }

    /// A fresh descriptor of the slave for a child's stdin.
    pub fn stdin(&self) -> Result<Stdio, ContractError> {
        let f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY)
            .open(&self.path)
            .map_err(io_err(format!("opening {}", self.path.display())))?;
        Ok(Stdio::from(f))
    }

    /// Whatever is waiting in the terminal's input queue.
    pub fn drain(&mut self) -> String {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match self.reader.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}
