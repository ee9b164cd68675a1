//! Live: the product creates, rewrites and atomically replaces refused paths while a confined
//! chat runs, and the chat never sees a byte of it (`sandboxer::linux::refused`, the masks
//! shape's mask keeper; and the landlock-only shape, where a new inode beneath a folder with
//! no Landlock rule stays refused).
//!
//! Each scenario runs as root and as the unprivileged user `sbx-test` (a missing user fails the
//! test). The tree, owned by whoever runs the sandbox, is a protected state root holding a
//! mask registry, a granted runtime (the chat's working directory) and a granted workflow whose
//! refused `workflow.db` and `planning/` do not exist at launch. The chat
//! (`tests/helpers/refused_reader.py`) loops opening, reading, listing and stat-ing them and
//! tries to create, remove or rename them, while the product (`tests/helpers/refused_write.rs`,
//! run as the same user) writes them again and again; each write is checked outside by an
//! unconfined reader (the control), and the chat proves it was running by reading a granted
//! file on every round.

#![cfg(target_os = "linux")]

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentworks_test_user::{Runner, Who, as_root_and_user, require_root};
use sandboxer::Target;
use sandboxer::linux::plan::{Facts, Shape};
use sandboxer::linux::planner::{self, HostFs};
use sandboxer::policy::{Policy, ResolveOptions};
use serde_json::Value;

const READER_PY: &str = include_str!("helpers/refused_reader.py");
const PYTHON: &str = "/usr/bin/python3";
/// How often the product writes each refused path while the chat runs.
const ROUNDS: usize = 5;

/// Root, or the test user (these live tests run as root and switch to it).
fn runner(who: Who) -> Runner {
    require_root();
    Runner::new(who)
}

/// An example binary of this crate, built once, copied where the runner can execute it.
fn example(name: &str, r: &Runner) -> PathBuf {
    let out = Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "--example",
            name,
            "--message-format=json",
        ])
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .stderr(Stdio::inherit())
        .output()
        .expect("running cargo");
    assert!(out.status.success(), "building the {name} example failed");
    let bin = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact" && v["target"]["name"] == name)
        .find_map(|v| v["executable"].as_str().map(PathBuf::from))
        .expect("cargo reported no executable");
    reachable(&bin, r)
}

fn reachable(bin: &Path, r: &Runner) -> PathBuf {
    if r.switch_to.is_none() {
        return bin.to_path_buf();
    }
    let dir = tempfile::Builder::new()
        .prefix("sbx-rr-bin-")
        .tempdir_in("/tmp")
        .unwrap()
        .keep();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    let copy = dir.join(bin.file_name().unwrap());
    fs::copy(bin, &copy).unwrap();
    fs::set_permissions(&copy, fs::Permissions::from_mode(0o755)).unwrap();
    copy
}

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    state: PathBuf,
    registry: PathBuf,
    runtime: PathBuf,
    wf: PathBuf,
    db: PathBuf,
    planning: PathBuf,
    reader: PathBuf,
}

impl Fixture {
    fn new(r: &Runner) -> Fixture {
        let dir = tempfile::Builder::new()
            .prefix("sbx-rr-")
            .tempdir_in("/tmp")
            .unwrap();
        let root = dir.path().to_path_buf();
        let home = root.join("home");
        let state = home.join("state");
        let wf = state.join("wf");
        let fx = Fixture {
            registry: state.join("state/masks"),
            runtime: state.join("rt"),
            db: wf.join("workflow.db"),
            planning: wf.join("planning"),
            reader: root.join("reader.py"),
            wf,
            state,
            home,
            root,
            _dir: dir,
        };
        fs::create_dir_all(&fx.runtime).unwrap();
        fs::create_dir_all(&fx.wf).unwrap();
        fs::write(fx.runtime.join("control.txt"), "granted\n").unwrap();
        fs::write(fx.state.join("config.json"), "{}\n").unwrap();
        fs::write(&fx.reader, READER_PY).unwrap();
        chown_tree(&fx.root, r.uid, r.gid);
        fx
    }

    fn policy(&self, r: &Runner, shape: Shape) -> PathBuf {
        // In the closed base the reader script needs a grant; in the open one it is readable.
        let reader = format!("[[grant]]\npath = {:?}\naccess = \"ro\"\n", self.reader);
        let (head, protected) = match shape {
            Shape::Masks => (
                format!(
                    "base = \"open\"\n[linux]\nways_out = false\nenforce = \"masks\"\n\
                     mask_registry = {:?}\n",
                    self.registry
                ),
                format!(
                    "[[protected]]\npath = {:?}\nwhy = \"the state root\"\n",
                    self.state
                ),
            ),
            Shape::LandlockOnly => (
                "base = \"closed\"\n[linux]\nways_out = false\nenforce = \"landlock-only\"\n"
                    .to_string(),
                reader,
            ),
        };
        let text = format!(
            "version = 1\n{head}\n{protected}\n\
             [[grant]]\npath = {rt:?}\naccess = \"rw\"\n\n\
             [[grant]]\npath = {wf:?}\naccess = \"rw\"\n\n\
             [[refuse]]\npath = {db:?}\n\n[[refuse]]\npath = {planning:?}\n",
            rt = self.runtime,
            wf = self.wf,
            db = self.db,
            planning = self.planning,
        );
        let path = self.root.join(format!("policy-{shape}.toml"));
        fs::write(&path, text).unwrap();
        chown(&path, Some(r.uid), Some(r.gid)).unwrap();
        path
    }

    /// The chat's argv in the masks shape: `sandboxer exec` of the masks policy (the binary
    /// where the runner reaches it), running the reader with stat counts.
    fn masks_chat(&self, r: &Runner) -> Vec<OsString> {
        let mut chat: Vec<OsString> = vec![
            reachable(Path::new(env!("CARGO_BIN_EXE_sandboxer")), r).into(),
            "exec".into(),
            "--policy".into(),
            self.policy(r, Shape::Masks).into(),
            "--home".into(),
            self.home.clone().into(),
            "--cwd".into(),
            self.runtime.clone().into(),
            "--".into(),
        ];
        chat.extend(self.reader_argv(true));
        chat
    }

    fn reader_argv(&self, stat_counts: bool) -> Vec<OsString> {
        let args = serde_json::json!({
            "file": self.db,
            "folder": self.planning,
            "staging": self.wf.join(".sandboxer-staging"),
            "control": self.runtime.join("control.txt"),
            "ready": self.runtime.join("ready"),
            "stop": self.runtime.join("stop"),
            "stat": stat_counts,
        });
        vec![
            PYTHON.into(),
            self.reader.clone().into(),
            args.to_string().into(),
        ]
    }
}

fn chown_tree(path: &Path, uid: u32, gid: u32) {
    chown(path, Some(uid), Some(gid)).unwrap();
    if fs::symlink_metadata(path).unwrap().is_dir() {
        for entry in fs::read_dir(path).unwrap() {
            chown_tree(&entry.unwrap().path(), uid, gid);
        }
    }
}

/// The chat: `argv` confined, started as the runner, waited for until it loops.
fn start_chat(fx: &Fixture, r: &Runner, argv: &[OsString]) -> Child {
    let mut c = r.command_with_path(&argv[0]);
    c.args(&argv[1..])
        .env("HOME", &fx.home)
        .current_dir(&fx.runtime)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("starting the chat");
    let ready = fx.runtime.join("ready");
    let started = Instant::now();
    while !ready.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "the chat ended before looping ({status}): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the chat never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn stop_chat(fx: &Fixture, r: &Runner, child: Child) -> Value {
    fs::write(fx.runtime.join("stop"), "").unwrap();
    chown(fx.runtime.join("stop"), Some(r.uid), Some(r.gid)).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the chat failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "chat output {:?}: {e}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The product's write, as the runner; then the unconfined control reads it back.
fn product_writes(r: &Runner, writer: &Path, registry: &Path, args: &[&Path], content: &str) {
    let mut c = r.command_with_path(writer);
    if args.len() == 2 {
        c.arg("--folder");
    }
    c.arg(registry).arg(args[0]);
    if args.len() == 2 {
        c.arg(args[1]);
    }
    let out = c.arg(content).output().unwrap();
    assert!(
        out.status.success(),
        "the product's write of {} failed: {}",
        args[0].display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let file = if args.len() == 2 {
        args[0].join(args[1])
    } else {
        args[0].to_path_buf()
    };
    let seen = r.command_with_path("/bin/cat").arg(&file).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&seen.stdout),
        content,
        "control: an unconfined reader sees the product's write to {} ({})",
        file.display(),
        String::from_utf8_lossy(&seen.stderr)
    );
}

/// Runs the chat while the product writes both refused paths [`ROUNDS`] times each, then
/// checks what the chat saw.
fn replace_while_running(fx: &Fixture, r: &Runner, chat: &[OsString]) {
    let writer = example("refused-write", r);
    let child = start_chat(fx, r, chat);
    for round in 0..ROUNDS {
        let secret = format!("SECRET-db-{round}-{}", std::process::id());
        product_writes(r, &writer, &fx.registry, &[&fx.db], &secret);
        std::thread::sleep(Duration::from_millis(150));
        let plan = format!("SECRET-plan-{round}-{}", std::process::id());
        product_writes(
            r,
            &writer,
            &fx.registry,
            &[&fx.planning, Path::new("plan.md")],
            &plan,
        );
        std::thread::sleep(Duration::from_millis(150));
    }
    let seen = stop_chat(fx, r, child);
    let iterations = seen["iterations"].as_u64().unwrap();
    assert!(iterations >= 10, "the chat barely ran: {seen}");
    assert_eq!(
        seen["control_ok"].as_u64(),
        Some(iterations),
        "control: the chat reads its granted file every round: {seen}"
    );
    assert_eq!(
        seen["leaks"],
        serde_json::json!([]),
        "the chat read what the product wrote"
    );
    assert_eq!(
        seen["changes"],
        serde_json::json!([]),
        "the chat changed a refused path"
    );
}

fn masks(who: Who) {
    let r = runner(who);
    let fx = Fixture::new(&r);
    let chat = fx.masks_chat(&r);
    // What the product met before: the placeholder is a folder, so a plain write is refused.
    let child = start_chat(&fx, &r, &chat);
    let plain = r
        .command_with_path(PYTHON)
        .arg("-c")
        .arg(format!("open({:?}, 'w').write('x')", fx.db))
        .output()
        .unwrap();
    assert!(
        !plain.status.success() && String::from_utf8_lossy(&plain.stderr).contains("IsADirectory"),
        "a refused file missing at launch is a placeholder folder while the chat runs: {plain:?}"
    );
    stop_chat(&fx, &r, child);
    fs::remove_file(fx.runtime.join("stop")).unwrap();
    fs::remove_file(fx.runtime.join("ready")).unwrap();
    replace_while_running(&fx, &r, &chat);
}

fn landlock_only(who: Who) {
    let r = runner(who);
    let fx = Fixture::new(&r);
    let text = fs::read_to_string(fx.policy(&r, Shape::LandlockOnly)).unwrap();
    let opts = ResolveOptions::new(Target::Linux, fx.home.clone(), true).unwrap();
    let policy = Policy::from_toml(&text, "policy.toml", &opts).unwrap();
    let facts = Facts {
        landlock_abi: sandboxer::linux::enforce::kernel_landlock_abi(),
        user_namespaces: false,
        mount_pid_namespaces: false,
        uid: r.uid,
        gid: r.gid,
        namespaces_blocked_by: None,
    };
    // The plan as made, without its gaps: below ABI 9 landlock-only refuses any policy with a
    // refused path (pathname sockets there are not stopped), which is not what this tests.
    let unchecked = planner::prepare_with(&policy, &facts, Shape::LandlockOnly, &HostFs).unwrap();
    let mut plan = unchecked.plan().clone();
    plan.gaps.clear();
    let plan_file = fx.root.join("plan.json");
    fs::write(&plan_file, serde_json::to_string(&plan).unwrap()).unwrap();
    chown(&plan_file, Some(r.uid), Some(r.gid)).unwrap();
    let mut chat: Vec<OsString> = vec![
        example("exec-plan", &r).into(),
        plan_file.into(),
        "--cwd".into(),
        fx.runtime.clone().into(),
        "--".into(),
    ];
    chat.extend(fx.reader_argv(false));
    replace_while_running(&fx, &r, &chat);
}

as_root_and_user!(masks => masks_as_root, masks_as_user);

as_root_and_user!(landlock_only => landlock_only_as_root, landlock_only_as_user);

/// The children of `pid`.
fn children(pid: u32) -> Vec<u32> {
    fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn comm(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// A sandbox still running whose keeper no longer answers: the product's write fails, writes
/// nothing and leaves the path as it was; once the sandbox has ended, writing works again.
fn keeper_gone(who: Who) {
    let r = runner(who);
    let fx = Fixture::new(&r);
    let chat = fx.masks_chat(&r);
    let writer = example("refused-write", &r);
    let child = start_chat(&fx, &r, &chat);
    // caller (sandboxer exec) ── PID 1 ── {keeper, the chat}
    let pid1 = children(child.id());
    assert_eq!(pid1.len(), 1, "one PID 1 under the caller: {pid1:?}");
    let keepers: Vec<u32> = children(pid1[0])
        .into_iter()
        .filter(|p| comm(*p) == "sandboxer")
        .collect();
    assert_eq!(keepers.len(), 1, "one keeper beside the chat: {keepers:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(keepers[0] as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let out = r
        .command_with_path(&writer)
        .arg(&fx.registry)
        .arg(&fx.db)
        .arg("SECRET-unmasked")
        .output()
        .unwrap();
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("does not answer"),
        "a write while a sandbox runs without its keeper fails: {out:?}"
    );
    assert!(
        fx.db.is_dir() && fs::read_dir(&fx.db).unwrap().next().is_none(),
        "the refused path is still the empty placeholder"
    );
    let staging = fx.wf.join(".sandboxer-staging");
    assert_eq!(
        fs::read_dir(&staging).unwrap().count(),
        0,
        "nothing is left in staging"
    );
    let seen = stop_chat(&fx, &r, child);
    assert_eq!(seen["leaks"], serde_json::json!([]), "{seen}");
    // Control: the sandbox has ended, so its registration is stale and the write goes through.
    product_writes(&r, &writer, &fx.registry, &[&fx.db], "after the chat");
}

as_root_and_user!(keeper_gone => keeper_gone_as_root, keeper_gone_as_user);
