//! Live tests of the Linux enforcer and `sandboxer exec` against the running kernel.
//!
//! Every scenario runs twice: as root, and as the unprivileged user `sbx-test` (created by
//! `scripts/setup-test-env.sh`; when it is missing the unprivileged half fails under CI and is
//! skipped with a notice elsewhere). Each builds its own tree in a temp dir under /tmp, owned
//! by whoever runs the sandbox: a home, a protected state root holding `config.json` with a
//! unique marker token, a granted chat runtime beside another chat's, a granted workflow
//! holding a refused `planning/` and a refused `workflow.db` that does not exist at launch, and
//! a second protected root that does not exist at launch either.
//!
//! Verdicts are decided from errno, from the disk and from the marker token, never from what
//! a program says about itself; every denial has a positive control (the same operation
//! outside the sandbox succeeds, or a sibling operation inside does), so each test can fail.
//! Operations run in `tests/helpers/probe.py`; processes a test starts are stopped by their own
//! pid or socket.

#![cfg(target_os = "linux")]

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Write;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::{PermissionsExt, chown};
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sandboxer::linux::plan::{Gap, MountStep, Plan, Shape};
use serde_json::Value;

const PROBE_PY: &str = include_str!("helpers/probe.py");
const PYTHON: &str = "/usr/bin/python3";
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const TIMEOUT: Duration = Duration::from_secs(60);
/// A policy the landlock-only shape can enforce on any ABI: nothing protected, no ways out.
const OPEN_POLICY: &str =
    "version = 1\nbase = \"open\"\n[linux]\nways_out = false\n[autorun]\nguard = false\n";

// ---- who runs the sandbox ------------------------------------------------------------------

// Root, or the test user switched to from root, or (in a copy run again as the test user) this
// process's own user; a runner that cannot be had here fails the test.
use agentworks_test_user::{Runner, SETUP};

agentworks_test_user::live_scenarios!(
    masks_filesystem,
    masks_ways_out,
    masks_no_renesting,
    terminal_injection,
    process_passthrough,
    signals_forwarded,
    fail_closed_planner,
    fail_closed_enforcer,
    no_user_namespaces,
    landlock_only_shape,
    landlock_handles_only_what_it_refuses,
    masks_shared_placeholders,
    job_control,
    read_only_grants_in_the_open,
    threaded_caller,
    masks_pinned_ancestors,
    landlock_only_ancestors,
);

// ---- binaries --------------------------------------------------------------------------------

fn sandboxer_bin(r: &Runner) -> PathBuf {
    reachable(r, Path::new(env!("CARGO_BIN_EXE_sandboxer")))
}

/// The `exec-plan` example (tests/helpers/exec_plan.rs). Built here, once per test process,
/// rather than trusted to be there: `cargo test --test linux_live` does not build examples,
/// and a stale helper would test an old enforcer.
fn exec_plan_bin(r: &Runner) -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let bin = BUILT.get_or_init(|| {
        let out = Command::new(env!("CARGO"))
            .args([
                "build",
                "--quiet",
                "--example",
                "exec-plan",
                "--message-format=json",
            ])
            .arg("--manifest-path")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .stderr(Stdio::inherit())
            .output()
            .expect("running cargo to build the exec-plan example");
        assert!(
            out.status.success(),
            "building the exec-plan example failed"
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["reason"] == "compiler-artifact" && v["target"]["name"] == "exec-plan")
            .find_map(|v| v["executable"].as_str().map(PathBuf::from))
            .expect("cargo reported no exec-plan executable")
    });
    reachable(r, bin)
}

/// `bin` itself when the runner can execute it, else a copy it can (see
/// [`Runner::reachable`]).
fn reachable(r: &Runner, bin: &Path) -> PathBuf {
    r.reachable(bin)
}

// ---- the tree --------------------------------------------------------------------------------

/// One scenario's tree, owned by the runner.
struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    /// The protected state root.
    state: PathBuf,
    config: PathBuf,
    runtimes: PathBuf,
    /// This chat's runtime: granted rw, the command's working directory.
    runtime: PathBuf,
    chat2: PathBuf,
    /// This chat's workflow: granted rw.
    wf: PathBuf,
    planning: PathBuf,
    workflow_db: PathBuf,
    /// Another workflow: protected.
    wf2: PathBuf,
    /// A protected root that does not exist at launch (nor its parent).
    missing_root: PathBuf,
    /// $XDG_RUNTIME_DIR and $TMUX_TMPDIR for the run.
    xdg_runtime: PathBuf,
    tmux_tmpdir: PathBuf,
    probe: PathBuf,
    policy: PathBuf,
    marker: String,
    uid: u32,
    gid: u32,
    outputs: std::cell::Cell<u32>,
}

impl Fixture {
    fn new(r: &Runner) -> Fixture {
        let dir = tempfile::Builder::new()
            .prefix("sbx-live-")
            .tempdir_in("/tmp")
            .expect("temp dir under /tmp");
        let root = dir.path().to_path_buf();
        let home = root.join("home");
        let state = home.join(".local/share/agentworks");
        let runtimes = state.join("state/cli-runtimes/v1");
        let wf = state.join("workspace-docs/wf1");
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let fx = Fixture {
            config: state.join("config.json"),
            runtime: runtimes.join("chat-1"),
            chat2: runtimes.join("chat-2"),
            planning: wf.join("planning"),
            workflow_db: wf.join("workflow.db"),
            wf2: state.join("workspace-docs/wf2"),
            missing_root: home.join(".config/other-app"),
            xdg_runtime: root.join("xdg-runtime"),
            tmux_tmpdir: root.join("tmux"),
            probe: root.join("probe.py"),
            policy: root.join("policy.toml"),
            marker: format!("MARKER-{}-{nanos}", std::process::id()),
            uid: r.uid,
            gid: r.gid,
            outputs: std::cell::Cell::new(0),
            runtimes,
            wf,
            state,
            home,
            root,
            _dir: dir,
        };
        fx.build();
        fx
    }

    fn build(&self) {
        for d in [
            &self.runtime,
            &self.chat2,
            &self.planning,
            &self.wf2,
            &self.xdg_runtime,
            &self.tmux_tmpdir,
        ] {
            fs::create_dir_all(d).unwrap();
        }
        let m = &self.marker;
        fs::write(self.home.join("notes.txt"), "home-content\n").unwrap();
        fs::write(&self.config, format!("{{\"token\": \"{m}\"}}\n")).unwrap();
        fs::write(self.runtime.join("runtime.txt"), "runtime-content\n").unwrap();
        fs::write(self.chat2.join("secret.txt"), format!("chat-2 {m}\n")).unwrap();
        fs::write(self.wf.join("doc.md"), "workflow-doc\n").unwrap();
        fs::write(self.planning.join("plan.md"), format!("plan {m}\n")).unwrap();
        fs::write(self.wf2.join("other.md"), format!("other workflow {m}\n")).unwrap();
        fs::write(&self.probe, PROBE_PY).unwrap();
        fs::write(
            &self.policy,
            format!(
                "version = 1\nbase = \"open\"\n\n\
                 [[protected]]\npath = {state:?}\nwhy = \"the state root\"\n\n\
                 [[protected]]\npath = {missing:?}\nwhy = \"missing at launch\"\n\n\
                 [[grant]]\npath = {rt:?}\naccess = \"rw\"\n\n\
                 [[grant]]\npath = {wf:?}\naccess = \"rw\"\n\n\
                 [[refuse]]\npath = {planning:?}\n\n\
                 [[refuse]]\npath = {db:?}\n",
                state = self.state,
                missing = self.missing_root,
                rt = self.runtime,
                wf = self.wf,
                planning = self.planning,
                db = self.workflow_db,
            ),
        )
        .unwrap();
        fs::set_permissions(&self.xdg_runtime, fs::Permissions::from_mode(0o700)).unwrap();
        fs::set_permissions(&self.tmux_tmpdir, fs::Permissions::from_mode(0o700)).unwrap();
        chown_tree(&self.root, self.uid, self.gid);
    }

    fn env(&self) -> Vec<(&'static str, OsString)> {
        vec![
            ("HOME", self.home.clone().into()),
            ("PATH", PATH.into()),
            ("LANG", "C.UTF-8".into()),
            ("XDG_RUNTIME_DIR", self.xdg_runtime.clone().into()),
            ("TMUX_TMPDIR", self.tmux_tmpdir.clone().into()),
        ]
    }

    /// `argv` run as the runner, with the fixture's environment, from the runtime.
    fn as_runner(&self, r: &Runner, argv: &[OsString]) -> Command {
        let mut c = r.command(&argv[0]);
        c.args(&argv[1..])
            .envs(self.env())
            .current_dir(&self.runtime);
        c
    }

    /// The command line of `sandboxer exec` with the fixture's policy, home and runtime.
    fn exec_argv(&self, r: &Runner, options: &[&str], command: &[OsString]) -> Vec<OsString> {
        let mut v = argv([sandboxer_bin(r).into_os_string()]);
        v.extend(argv(["exec", "--policy"]));
        v.push(self.policy.clone().into());
        v.push("--home".into());
        v.push(self.home.clone().into());
        v.push("--cwd".into());
        v.push(self.runtime.clone().into());
        v.extend(argv(options.iter().copied()));
        v.push("--".into());
        v.extend_from_slice(command);
        v
    }

    fn exec(&self, r: &Runner, options: &[&str], command: &[OsString]) -> Command {
        self.as_runner(r, &self.exec_argv(r, options, command))
    }

    /// A policy file of `text` beside the fixture's, owned by the runner.
    fn policy_file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.root.join(name);
        fs::write(&path, text).unwrap();
        chown(&path, Some(self.uid), Some(self.gid)).unwrap();
        path
    }

    /// [`Fixture::exec_argv`] with another policy file.
    fn exec_argv_with(
        &self,
        r: &Runner,
        policy: &Path,
        options: &[&str],
        command: &[OsString],
    ) -> Vec<OsString> {
        let mut v = self.exec_argv(r, options, command);
        assert_eq!(v[2], "--policy");
        v[3] = policy.into();
        v
    }

    /// The same command without any sandbox (a positive control).
    fn bare(&self, r: &Runner, command: &[OsString]) -> Command {
        self.as_runner(r, command)
    }

    /// The plan `sandboxer exec --print-plan` makes for this fixture.
    fn plan(&self, r: &Runner, options: &[&str]) -> Plan {
        let mut opts = vec!["--print-plan"];
        opts.extend_from_slice(options);
        let out = self.run(self.exec(r, &opts, &argv(["true"])), None);
        assert_eq!(out.code, Some(0), "--print-plan failed: {out:?}");
        serde_json::from_str(&out.stdout).expect("plan JSON")
    }

    /// The command line running the hand-written `plan` through the exec-plan helper.
    fn exec_plan_argv(&self, r: &Runner, plan: &Plan, command: &[OsString]) -> Vec<OsString> {
        let file = self.root.join(format!("plan-{}.json", self.n()));
        fs::write(&file, serde_json::to_string_pretty(plan).unwrap()).unwrap();
        chown(&file, Some(self.uid), Some(self.gid)).unwrap();
        let mut v = argv([exec_plan_bin(r).into_os_string(), file.into_os_string()]);
        v.push("--cwd".into());
        v.push(self.runtime.clone().into());
        v.push("--".into());
        v.extend_from_slice(command);
        v
    }

    fn exec_plan(&self, r: &Runner, plan: &Plan, command: &[OsString]) -> Command {
        self.as_runner(r, &self.exec_plan_argv(r, plan, command))
    }

    fn n(&self) -> u32 {
        self.outputs.set(self.outputs.get() + 1);
        self.outputs.get()
    }

    /// Runs `cmd` to completion (killed after [`TIMEOUT`]), stdout and stderr captured.
    fn run(&self, cmd: Command, stdin: Option<&[u8]>) -> Ran {
        let child = self.start(cmd, stdin);
        child.wait()
    }

    fn start(&self, mut cmd: Command, stdin: Option<&[u8]>) -> Running {
        let n = self.n();
        let out = self.root.join(format!("out-{n}"));
        let err = self.root.join(format!("err-{n}"));
        cmd.stdout(fs::File::create(&out).unwrap())
            .stderr(fs::File::create(&err).unwrap())
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            });
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
        if let Some(data) = stdin {
            let mut pipe = child.stdin.take().unwrap();
            pipe.write_all(data).unwrap();
        }
        Running {
            child,
            out,
            err,
            what: format!("{cmd:?}"),
        }
    }

    fn probe_argv(&self, ops: &[Vec<String>]) -> Vec<OsString> {
        argv([
            PYTHON.to_string(),
            self.probe.display().to_string(),
            serde_json::to_string(ops).unwrap(),
        ])
    }

    /// Asserts the marker token appears nowhere in `ran`'s output.
    fn assert_no_marker(&self, ran: &Ran) {
        assert!(
            !ran.stdout.contains(&self.marker) && !ran.stderr.contains(&self.marker),
            "the protected marker leaked into the output: {ran:?}"
        );
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

fn argv<S: Into<OsString>>(items: impl IntoIterator<Item = S>) -> Vec<OsString> {
    items.into_iter().map(Into::into).collect()
}

fn p(path: &Path) -> String {
    path.display().to_string()
}

struct Running {
    child: Child,
    out: PathBuf,
    err: PathBuf,
    what: String,
}

#[derive(Debug)]
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// A test that fails while a sandbox is still running must not leave it behind (a command
/// waiting for a file that never comes would run forever): the caller is killed, and with it
/// the sandbox (its processes die with their parent).
impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Running {
    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    fn stdout(&self) -> String {
        fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Waits until stdout contains `text`, or panics after [`TIMEOUT`].
    fn wait_for_output(&mut self, text: &str) {
        let deadline = Instant::now() + TIMEOUT;
        while !self.stdout().contains(text) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{} ended ({status}) before printing {text:?}: {:?}",
                    self.what,
                    self.read(status.code())
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} never printed {text:?}",
                self.what
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn wait(mut self) -> Ran {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return self.read(status.code());
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("{} timed out: {:?}", self.what, self.read(None));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn read(&self, code: Option<i32>) -> Ran {
        Ran {
            code,
            stdout: self.stdout(),
            stderr: fs::read_to_string(&self.err).unwrap_or_default(),
        }
    }
}

// ---- probes ----------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    Allow,
    Deny,
}

/// One operation and what the sandbox must answer.
struct Case {
    op: Vec<String>,
    expect: Expect,
}

fn case(expect: Expect, op: &str, args: &[&Path]) -> Case {
    let mut v = vec![op.to_string()];
    v.extend(args.iter().map(|a| p(a)));
    Case { op: v, expect }
}

fn case_s(expect: Expect, op: &str, args: &[&str]) -> Case {
    let mut v = vec![op.to_string()];
    v.extend(args.iter().map(|a| a.to_string()));
    Case { op: v, expect }
}

#[derive(Debug)]
struct Probed {
    ok: bool,
    err: Option<String>,
    out: String,
}

fn parse_probes(stdout: &str) -> Vec<Probed> {
    stdout
        .lines()
        // Under a pty, a character pushed with TIOCSTI is echoed in front of the next line.
        .filter_map(|l| l.find('{').map(|at| l[at..].trim_end_matches('\r')))
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}"));
            Probed {
                ok: v["ok"].as_bool().unwrap(),
                err: v["err"].as_str().map(str::to_string),
                out: v["out"].as_str().unwrap_or_default().to_string(),
            }
        })
        .collect()
}

/// Checks each probe result against its case; all mismatches are reported together.
fn check_cases(what: &str, cases: &[Case], ran: &Ran) -> Vec<Probed> {
    let results = parse_probes(&ran.stdout);
    assert_eq!(
        results.len(),
        cases.len(),
        "{what}: expected {} probe results: {ran:?}",
        cases.len()
    );
    let wrong: Vec<String> = cases
        .iter()
        .zip(&results)
        .filter(|(c, r)| r.ok != (c.expect == Expect::Allow))
        .map(|(c, r)| {
            format!(
                "  {:?}: expected {:?}, got ok={} err={:?}",
                c.op, c.expect, r.ok, r.err
            )
        })
        .collect();
    assert!(wrong.is_empty(), "{what}:\n{}\n{ran:?}", wrong.join("\n"));
    results
}

fn ops(cases: &[Case]) -> Vec<Vec<String>> {
    cases.iter().map(|c| c.op.clone()).collect()
}

// ---- scenarios: the masks shape ----------------------------------------------------------------

fn masks_filesystem(r: &Runner) {
    use Expect::{Allow, Deny};
    let fx = Fixture::new(r);
    assert_eq!(
        fx.plan(r, &[]).shape,
        Shape::Masks,
        "this machine plans the masks shape"
    );
    let rt = &fx.runtime;
    let config_before = fs::read_to_string(&fx.config).unwrap();
    // The missing protected root's parent exists, so that only the sandbox can stand in the
    // way of creating it (the control below creates it).
    let missing_parent = fx.missing_root.parent().unwrap().to_path_buf();
    fs::create_dir(&missing_parent).unwrap();
    chown(&missing_parent, Some(r.uid), Some(r.gid)).unwrap();
    let cases = vec![
        // The open home and the grants work.
        case(Allow, "read", &[&fx.home.join("notes.txt")]),
        case(Allow, "write", &[&fx.home.join("notes.txt")]),
        case(Allow, "create", &[&fx.home.join("new-in-home.txt")]),
        case(Allow, "read", &[&rt.join("runtime.txt")]),
        case(Allow, "write", &[&rt.join("runtime.txt")]),
        case(Allow, "create", &[&rt.join("created.txt")]),
        case(Allow, "list", &[rt]),
        case(Allow, "mkdir", &[&rt.join("sub")]),
        case(Allow, "delete", &[&rt.join("created.txt")]),
        case(Allow, "read", &[&fx.wf.join("doc.md")]),
        case(Allow, "write", &[&fx.wf.join("doc.md")]),
        case(Allow, "create", &[&fx.wf.join("new.md")]),
        // The protected file: every way to reach it.
        case(Deny, "read", &[&fx.config]),
        case(Deny, "write", &[&fx.config]),
        case(Deny, "list", &[&fx.state]),
        case(Deny, "delete", &[&fx.config]),
        case(Deny, "rename", &[&fx.config, &rt.join("stolen.json")]),
        case(Deny, "link", &[&fx.config, &rt.join("linked.json")]),
        case(
            Deny,
            "symlink-read",
            &[&fx.config, &rt.join("link-to-config")],
        ),
        case_s(Deny, "read", &["../../../../config.json"]),
        // The other chat, also through `..` from the runtime; nothing new beside runtimes.
        case(Deny, "read", &[&fx.chat2.join("secret.txt")]),
        case(Deny, "list", &[&fx.chat2]),
        case_s(Deny, "read", &["../chat-2/secret.txt"]),
        case(Deny, "read", &[&rt.join("../chat-2/secret.txt")]),
        case(Deny, "create", &[&fx.runtimes.join("new.txt")]),
        case(Deny, "mkdir", &[&fx.runtimes.join("chat-3")]),
        // The cover's folders belong to the person inside: only read-only keeps them closed.
        case_s(Deny, "chmod", &[&p(&fx.runtimes), "777"]),
        case_s(Deny, "chmod", &[&p(&fx.state), "777"]),
        // The other workflow.
        case(Deny, "read", &[&fx.wf2.join("other.md")]),
        // Refused inside the granted workflow: existing folder, and a file missing at launch.
        case(Deny, "read", &[&fx.planning.join("plan.md")]),
        case(Deny, "list", &[&fx.planning]),
        case(Deny, "create", &[&fx.planning.join("new.md")]),
        case(Deny, "delete", &[&fx.planning]),
        case(
            Deny,
            "rename",
            &[&fx.planning, &fx.wf.join("planning-moved")],
        ),
        case(Deny, "read", &[&fx.workflow_db]),
        case(Deny, "create", &[&fx.workflow_db]),
        case(Deny, "write", &[&fx.workflow_db]),
        case(Deny, "mkdir", &[&fx.workflow_db.join("x")]),
        // A protected root missing at launch cannot be created from inside either.
        case(Deny, "mkdir", &[&fx.missing_root]),
        case(Deny, "create", &[&fx.missing_root.join("x")]),
        // The grant itself cannot be moved away from its rules.
        case(Deny, "rename", &[&fx.wf, &rt.join("wf-moved")]),
    ];
    let ran = fx.run(fx.exec(r, &[], &fx.probe_argv(&ops(&cases))), None);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let results = check_cases("inside the sandbox", &cases, &ran);
    fx.assert_no_marker(&ran);
    // The missing root's refusals are the sandbox's (its placeholder: it exists, and is not
    // writable), not a missing parent's.
    let missing_root = p(&fx.missing_root);
    for (c, got) in cases.iter().zip(&results) {
        if c.op[1].starts_with(&missing_root) {
            let err = got.err.as_deref().unwrap_or_default();
            assert!(
                ["EEXIST", "EACCES", "EPERM", "EROFS"].contains(&err),
                "{:?} inside: refused with {err}, not by the sandbox: {ran:?}",
                c.op
            );
        }
    }

    // From the disk: nothing protected changed, the grants did.
    assert_eq!(fs::read_to_string(&fx.config).unwrap(), config_before);
    for gone in [
        rt.join("stolen.json"),
        rt.join("linked.json"),
        fx.runtimes.join("new.txt"),
        fx.runtimes.join("chat-3"),
        fx.wf.join("planning-moved"),
        rt.join("wf-moved"),
        fx.workflow_db.clone(),
        // Placeholders are gone once the sandbox has ended.
        fx.missing_root.clone(),
    ] {
        assert!(!gone.exists(), "{} exists after the run", gone.display());
    }
    assert_eq!(
        fs::read_dir(&missing_parent).unwrap().count(),
        0,
        "the missing root's parent is as it was"
    );
    assert!(fx.planning.join("plan.md").exists() && !fx.planning.join("new.md").exists());
    assert!(rt.join("sub").is_dir() && !rt.join("created.txt").exists());
    assert!(
        fs::read_to_string(fx.home.join("new-in-home.txt"))
            .unwrap()
            .contains("created-by-probe")
    );
    assert!(
        fs::read_to_string(fx.wf.join("doc.md"))
            .unwrap()
            .contains("written-by-probe")
    );

    // Positive controls: the same reads outside the sandbox reach the protected content.
    let controls = vec![
        case(Allow, "read", &[&fx.config]),
        case(Allow, "list", &[&fx.state]),
        case(Allow, "read", &[&fx.chat2.join("secret.txt")]),
        case(Allow, "read", &[&fx.planning.join("plan.md")]),
        case(Allow, "read", &[&fx.wf2.join("other.md")]),
    ];
    let bare = fx.run(fx.bare(r, &fx.probe_argv(&ops(&controls))), None);
    let results = check_cases("outside the sandbox", &controls, &bare);
    assert!(
        results[0].out.contains(&fx.marker),
        "control read of config.json: {bare:?}"
    );

    // Control: without the sandbox, the same user creates the missing protected root, and a
    // file in it.
    let creates = vec![
        case(Allow, "mkdir", &[&fx.missing_root]),
        case(Allow, "create", &[&fx.missing_root.join("x")]),
    ];
    let bare = fx.run(fx.bare(r, &fx.probe_argv(&ops(&creates))), None);
    check_cases(
        "creating the missing root outside the sandbox",
        &creates,
        &bare,
    );
    assert!(fx.missing_root.join("x").is_file(), "{bare:?}");
}

/// The control for the ancestor moves: on a fresh copy of the tree, outside any sandbox, every
/// one succeeds. Returns that tree, moved.
fn ancestor_moves_work_outside(r: &Runner) -> Fixture {
    let fresh = Fixture::new(r);
    let fresh_notes = ancestor_layout(&fresh);
    let controls: Vec<Case> = ancestor_moves(&fresh, &fresh_notes)
        .into_iter()
        .map(|c| Case {
            expect: Expect::Allow,
            ..c
        })
        .collect();
    let bare = fresh.run(fresh.bare(r, &fresh.probe_argv(&ops(&controls))), None);
    check_cases("the same moves outside", &controls, &bare);
    fresh
}

/// The moves that would carry a mask away from its path: swapping a look-alike in for a folder
/// that holds the state root (`RENAME_EXCHANGE`, both ways), renaming such folders away at
/// every level, and renaming away a folder between a grant and a refused path in it (`nested`).
/// The look-alike is made by [`ancestor_layout`]: a masks sandbox cannot rename across its pins
/// (EXDEV would hide the EBUSY), and landlock-only cannot create entries beside a rule path.
fn ancestor_moves(fx: &Fixture, nested: &Path) -> Vec<Case> {
    use Expect::Deny;
    let local = fx.home.join(".local");
    let share = local.join("share");
    let fake = local.join("look-alike");
    vec![
        case(Deny, "exchange", &[&share, &fake]),
        case(Deny, "exchange", &[&fake, &share]),
        case(Deny, "rename", &[nested, &nested.with_extension("moved")]),
        case(Deny, "rename", &[&share, &local.join("share-moved")]),
        case(Deny, "rename", &[&local, &fx.home.join(".local-moved")]),
        case(Deny, "rename", &[&fx.home, &fx.root.join("home-moved")]),
    ]
}

/// The fixture's tree plus a refused `notes/private` (holding the marker) in the workflow and
/// the look-alike beside `share`.
fn ancestor_layout(fx: &Fixture) -> PathBuf {
    let notes = fx.wf.join("notes");
    fs::create_dir_all(notes.join("private")).unwrap();
    fs::write(notes.join("private/secret.md"), &fx.marker).unwrap();
    fs::create_dir_all(fx.home.join(".local/look-alike")).unwrap();
    chown_tree(&fx.root, fx.uid, fx.gid);
    notes
}

/// No process inside can rename, replace or remove a folder that holds a protected root or a
/// refused path: each is a mount point of the sandbox's namespace (a pin), so the kernel
/// answers EBUSY; the same moves outside, on a fresh copy of the tree, succeed. Also a refused
/// path two levels inside a grant (`notes/private` in the workflow): renaming `notes/` would
/// carry the mask away and let `notes/private` be made anew.
fn masks_pinned_ancestors(r: &Runner) {
    use Expect::{Allow, Deny};
    let fx = Fixture::new(r);
    let notes = ancestor_layout(&fx);
    let private = notes.join("private");
    let policy =
        fs::read_to_string(&fx.policy).unwrap() + &format!("\n[[refuse]]\npath = {private:?}\n");
    fs::write(&fx.policy, policy).unwrap();
    assert_eq!(fx.plan(r, &[]).shape, Shape::Masks);

    let share = fx.home.join(".local/share");
    let mut cases = ancestor_moves(&fx, &notes);
    let moves = cases.len();
    fs::write(fx.home.join("plain.txt"), "x").unwrap();
    chown(fx.home.join("plain.txt"), Some(fx.uid), Some(fx.gid)).unwrap();
    cases.extend([
        case(Deny, "delete", &[&share]),
        case(Deny, "delete", &[&notes]),
        case(Deny, "read", &[&private.join("secret.md")]),
        // Ordinary renames still work; across a pin they get EXDEV (mv copies instead).
        case(
            Allow,
            "rename",
            &[&fx.home.join("plain.txt"), &fx.home.join("moved.txt")],
        ),
        case(
            Deny,
            "rename",
            &[&fx.home.join("moved.txt"), &share.join("moved.txt")],
        ),
    ]);
    let ran = fx.run(fx.exec(r, &[], &fx.probe_argv(&ops(&cases))), None);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let results = check_cases("moving a folder that holds a mask, inside", &cases, &ran);
    fx.assert_no_marker(&ran);
    let errno = |i: usize| results[i].err.as_deref().unwrap_or("none");
    for i in (0..moves).chain([moves, moves + 1]) {
        assert_eq!(errno(i), "EBUSY", "{:?}: {ran:?}", cases[i].op);
    }
    assert_eq!(errno(cases.len() - 1), "EXDEV", "{ran:?}");
    assert!(fx.config.exists() && private.join("secret.md").exists());
    assert!(
        !fx.home.join(".local/share-moved").exists() && !notes.with_extension("moved").exists()
    );

    // Control: the same moves outside, on a fresh copy of the tree, succeed.
    let fresh = ancestor_moves_work_outside(r);
    assert!(
        fresh
            .root
            .join("home-moved/.local-moved/share-moved/agentworks")
            .is_dir()
    );
}

/// Landlock-only: the planner's plan grants each sibling along the way to a rule path rather
/// than its folder, so no folder on the way keeps a remove right: renaming, replacing or
/// removing one is refused (EACCES) without any mount. The plan is the planner's own for the
/// fixture's policy (run through the exec-plan helper: at ABI < 9 the fallback rule refuses
/// landlock-only for a policy with protected roots, for its pathname-socket gap).
fn landlock_only_ancestors(r: &Runner) {
    use Expect::Deny;
    use sandboxer::linux::planner::{HostFs, plan_with};
    use sandboxer::policy::ResolveOptions;
    let fx = Fixture::new(r);
    let notes = ancestor_layout(&fx);
    let text = fs::read_to_string(&fx.policy).unwrap()
        + &format!("\n[[refuse]]\npath = {:?}\n", notes.join("private"))
        + "[linux]\nways_out = false\n[autorun]\nguard = false\n";
    let opts = ResolveOptions::new(sandboxer::Target::Linux, fx.home.clone(), false).unwrap();
    let policy = sandboxer::Policy::from_toml(&text, "p.toml", &opts).unwrap();
    let facts = sandboxer::linux::plan::Facts {
        landlock_abi: 7,
        user_namespaces: false,
        mount_pid_namespaces: false,
        uid: r.uid,
        gid: r.gid,
        namespaces_blocked_by: None,
    };
    let mut plan = plan_with(&policy, &facts, Shape::LandlockOnly, &HostFs).unwrap();
    // Its breaking gaps (pathname sockets, metadata) are other classes; this test asks only
    // what its rules do to the folders on the way.
    plan.gaps.clear();
    // /tmp holds the fixture, so each of its entries got a rule of its own; other tests'
    // temp folders there may vanish before the rules are made. Dropping their rules only
    // makes the plan stricter where this test asks nothing.
    plan.landlock
        .rules
        .retain(|r| r.path.parent() != Some(Path::new("/tmp")) || r.path == fx.root);
    // The probe script lies beside the home; it must stay readable.
    plan.landlock
        .rules
        .push(sandboxer::linux::plan::LandlockRule {
            path: fx.probe.clone(),
            rights: vec![sandboxer::linux::plan::FsRight::ReadFile],
            is_dir: false,
            why: "the probe script".into(),
        });
    let mut cases = ancestor_moves(&fx, &notes);
    cases.push(case(Deny, "delete", &[&notes]));
    let ran = fx.run(fx.exec_plan(r, &plan, &fx.probe_argv(&ops(&cases))), None);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let results = check_cases(
        "Landlock-only: moving a folder that holds a rule path",
        &cases,
        &ran,
    );
    fx.assert_no_marker(&ran);
    for (c, got) in cases.iter().zip(&results) {
        assert_eq!(got.err.as_deref(), Some("EACCES"), "{:?}: {ran:?}", c.op);
    }
    assert!(fx.state.join("config.json").exists() && notes.join("private").is_dir());

    ancestor_moves_work_outside(r);
}

/// A Unix socket listener the test process owns, counting who connected.
struct Listener {
    socket: UnixListener,
}

impl Listener {
    fn path(path: &Path) -> Listener {
        let socket = UnixListener::bind(path).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(0o777)).unwrap();
        socket.set_nonblocking(true).unwrap();
        Listener { socket }
    }

    fn abstract_name(name: &str) -> Listener {
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let socket = UnixListener::bind_addr(&addr).unwrap();
        socket.set_nonblocking(true).unwrap();
        Listener { socket }
    }

    fn connections(&self) -> usize {
        std::iter::from_fn(|| self.socket.accept().ok()).count()
    }
}

/// A real tmux server outside the sandbox, stopped through its own socket.
struct Tmux<'a> {
    fx: &'a Fixture,
    runner: &'a Runner,
}

impl<'a> Tmux<'a> {
    fn start(fx: &'a Fixture, runner: &'a Runner) -> Tmux<'a> {
        let tmux = Tmux { fx, runner };
        let out = tmux.run(&["-f", "/dev/null", "new-session", "-d", "-s", "sbx", "sh"]);
        assert_eq!(
            out.code,
            Some(0),
            "starting tmux (install it: {SETUP}): {out:?}"
        );
        tmux
    }

    fn run(&self, args: &[&str]) -> Ran {
        let mut c = self.runner.command("tmux");
        c.args(args).envs(self.fx.env()).current_dir(&self.fx.root);
        self.fx.run(c, None)
    }

    fn socket(&self) -> PathBuf {
        self.fx
            .tmux_tmpdir
            .join(format!("tmux-{}", self.fx.uid))
            .join("default")
    }

    fn windows(&self) -> usize {
        let out = self.run(&["list-windows", "-t", "sbx"]);
        assert_eq!(out.code, Some(0), "{out:?}");
        out.stdout.lines().count()
    }
}

impl Drop for Tmux<'_> {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// Waits up to [`TIMEOUT`] for `path` to appear.
fn appears(path: &Path) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn masks_ways_out(r: &Runner) {
    use Expect::{Allow, Deny};
    let fx = Fixture::new(r);
    let bus_path = fx.xdg_runtime.join("bus");
    let bus = Listener::path(&bus_path);
    let abstract_name = format!("sbx-live-{}", fx.root.display());
    let abstract_sock = Listener::abstract_name(&abstract_name);
    let tmux = Tmux::start(&fx, r);
    let mut victim_cmd = r.command("sleep");
    victim_cmd
        .arg("600")
        .envs([("SBX_VICTIM", fx.marker.as_str())]);
    let victim = fx.start(victim_cmd, None);
    let pid = victim.pid().to_string();

    let cases = |expect: Expect| {
        vec![
            case(expect, "connect", &[&bus_path]),
            case_s(expect, "connect-abstract", &[&abstract_name]),
            case(expect, "connect", &[&tmux.socket()]),
            case_s(expect, "kill", &[&pid, "0"]),
            case_s(expect, "ptrace", &[&pid]),
            case_s(expect, "proc-root", &[&pid]),
            case_s(expect, "proc-environ", &[&pid]),
        ]
    };
    let inside = cases(Deny);
    let ran = fx.run(fx.exec(r, &[], &fx.probe_argv(&ops(&inside))), None);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    check_cases("ways out inside the sandbox", &inside, &ran);
    fx.assert_no_marker(&ran);

    // tmux from inside: the server outside must not run anything nor grow a window.
    let pwned = fx.root.join("pwned-send-keys");
    let pwned2 = fx.root.join("pwned-new-window");
    let script = format!(
        "tmux send-keys -t sbx 'touch {}' Enter; echo send-keys=$?; \
         tmux new-window -t sbx 'touch {}'; echo new-window=$?",
        p(&pwned),
        p(&pwned2)
    );
    let ran = fx.run(fx.exec(r, &[], &argv(["sh", "-c", &script])), None);
    assert!(
        !ran.stdout.contains("send-keys=0") && !ran.stdout.contains("new-window=0"),
        "tmux reached the outside server: {ran:?}"
    );
    assert_eq!(
        tmux.windows(),
        1,
        "a window appeared in the outside tmux server"
    );

    // Positive controls, outside: the same connections, signal, ptrace and /proc reads work,
    // and the tmux server runs what it is sent.
    let outside = cases(Allow);
    let bare = fx.run(fx.bare(r, &fx.probe_argv(&ops(&outside))), None);
    let results = check_cases("ways out outside the sandbox", &outside, &bare);
    assert!(
        results[6].out.contains(&fx.marker),
        "control read of the victim's environ: {bare:?}"
    );
    let control = fx.root.join("control-send-keys");
    let sent = tmux.run(&[
        "send-keys",
        "-t",
        "sbx",
        &format!("touch {}", p(&control)),
        "Enter",
    ]);
    assert_eq!(sent.code, Some(0), "{sent:?}");
    assert!(
        appears(&control),
        "the outside tmux server did not run the control command"
    );
    assert!(
        !pwned.exists() && !pwned2.exists(),
        "a command sent from inside ran outside"
    );
    assert_eq!(
        bus.connections(),
        1,
        "only the control reached the session bus"
    );
    assert_eq!(
        abstract_sock.connections(),
        1,
        "only the control reached the abstract socket"
    );

    // A tmux server on a socket of its own (`tmux -S`): masked when it is the server this
    // process runs under ($TMUX names it); with nothing naming it, it is an unknown socket
    // in an open folder (the control).
    let custom_dir = fx.root.join("own-tmux");
    fs::create_dir(&custom_dir).unwrap();
    chown(&custom_dir, Some(fx.uid), Some(fx.gid)).unwrap();
    let custom = custom_dir.join("sock");
    let own_tmux = |args: &[&str]| {
        let mut c = r.command("tmux");
        c.arg("-S")
            .arg(&custom)
            .args(args)
            .envs(fx.env())
            .current_dir(&fx.root);
        fx.run(c, None)
    };
    let started = own_tmux(&["-f", "/dev/null", "new-session", "-d", "-s", "own", "sh"]);
    assert_eq!(started.code, Some(0), "{started:?}");
    let under_tmux = [case(Deny, "connect", &[&custom])];
    let mut cmd = fx.exec(r, &[], &fx.probe_argv(&ops(&under_tmux)));
    cmd.env("TMUX", format!("{},4242,0", p(&custom)));
    let ran = fx.run(cmd, None);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    check_cases("the tmux server named by $TMUX", &under_tmux, &ran);
    // Unnamed, no mask is on it, but the socket broker refuses every pathname socket off the
    // policy's `unix_sockets` (tests/linux_unix_sockets.rs).
    let unnamed = [case(Deny, "connect", &[&custom])];
    let ran = fx.run(fx.exec(r, &[], &fx.probe_argv(&ops(&unnamed))), None);
    check_cases("the same server, unnamed", &unnamed, &ran);
    let _ = own_tmux(&["kill-server"]);

    let mut victim = victim;
    victim.child.kill().unwrap();
    victim.child.wait().unwrap();
}

fn masks_no_renesting(r: &Runner) {
    let fx = Fixture::new(r);
    let state = p(&fx.state);
    let rt = p(&fx.runtime);
    // Every attempt prints its status; a 0 anywhere would mean a mask came off or a mount
    // went on.
    let script = format!(
        "unshare -Urm --propagation unchanged sh -c \
           'umount -l {state}; echo nested-umount=$?; cat {state}/config.json; ls -a {state}; \
            mount -t tmpfs none {rt}; echo nested-mount=$?'; \
         echo unshare=$?; \
         umount -l {state}; echo umount=$?; \
         umount -l {planning}; echo umount-refused=$?; \
         mount -t tmpfs none {rt}; echo mount=$?; \
         mount -o remount,rw {state}; echo remount=$?; \
         cat {state}/config.json; echo cat=$?",
        planning = p(&fx.planning),
    );
    // By default the sandbox allows no user namespace beneath its own, so the nested attempt
    // stops at `unshare`; with `[linux] nested_user_namespaces = true` it gets its namespace,
    // and the Landlock domain still refuses every mount and umount in it.
    let text = fs::read_to_string(&fx.policy).unwrap();
    let nested = fx.policy_file(
        "nested.toml",
        &format!("{text}\n[linux]\nnested_user_namespaces = true\n"),
    );
    for (policy, nested_allowed) in [(&fx.policy, false), (&nested, true)] {
        let exec = fx.exec_argv_with(r, policy, &[], &argv(["sh", "-c", &script]));
        let ran = fx.run(fx.as_runner(r, &exec), None);
        fx.assert_no_marker(&ran);
        for attempt in [
            "nested-umount",
            "nested-mount",
            "umount",
            "umount-refused",
            "mount",
            "remount",
            "cat",
        ] {
            assert!(
                !ran.stdout.lines().any(|l| l == format!("{attempt}=0")),
                "{attempt} succeeded inside the sandbox: {ran:?}"
            );
        }
        assert!(
            ran.stdout.contains("cat="),
            "the script did not run to its end: {ran:?}"
        );
        // ENOSPC: the sandbox's limit of user namespaces beneath it.
        let limited = ran.stderr.contains("No space left on device");
        assert_eq!(limited, !nested_allowed, "nested user namespace: {ran:?}");
        // Root inside (no CAP_SETFCAP) may not map root into a namespace of its own (Linux
        // >= 5.12), so only the unprivileged user gets as far as the nested mounts.
        if nested_allowed && r.uid != 0 {
            assert!(ran.stdout.contains("nested-umount="), "{ran:?}");
        }
    }
    // Control: the same read outside shows the marker.
    let bare = fx.run(fx.bare(r, &argv(["cat", &p(&fx.config)])), None);
    assert!(bare.stdout.contains(&fx.marker), "{bare:?}");
}

/// Quotes `s` for `sh`.
fn sh_quote(s: &OsStr) -> String {
    format!("'{}'", s.to_string_lossy().replace('\'', r"'\''"))
}

fn terminal_injection(r: &Runner) {
    let fx = Fixture::new(r);
    other_terminals(&fx, r);
    let probe = fx.probe_argv(&[vec!["tiocsti".into(), "0".into()], vec!["open-tty".into()]]);
    // Under a real pty (script(1) makes one, with the pty as the child's controlling terminal).
    let under_pty = |inner: &[OsString]| {
        let line: Vec<String> = inner.iter().map(|a| sh_quote(a)).collect();
        fx.as_runner(r, &argv(["script", "-qec", &line.join(" "), "/dev/null"]))
    };
    let ran = fx.run(under_pty(&probe), None);
    let control = parse_probes(&ran.stdout);
    assert_eq!(control.len(), 2, "control under script(1): {ran:?}");
    if !control[0].ok {
        let legacy = fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti").unwrap_or_default();
        assert_eq!(
            legacy.trim(),
            "0",
            "TIOCSTI fails even outside the sandbox: {control:?}"
        );
        // Without a control that works, a refusal inside would prove nothing.
        agentworks_test_user::missing(
            "TIOCSTI outside the sandbox (dev.tty.legacy_tiocsti = 0 turns it off for everyone; \
             `sysctl -w dev.tty.legacy_tiocsti=1` turns it on)",
        );
    }
    assert!(
        control[1].ok,
        "the control has a controlling terminal: {control:?}"
    );

    // `sandboxer exec --enforce landlock-only` becomes the command itself where it can: as a
    // shell's child it takes a new session; as a job of an interactive shell (a process-group
    // leader, which cannot) it gives up the terminal with TIOCNOTTY; as the session's leader
    // it cannot do either and starts the command in a new session as before. A policy
    // landlock-only can enforce on this ABI: nothing protected.
    let open = fx.policy_file("open.toml", OPEN_POLICY);
    let in_place = fx.exec_argv_with(r, &open, &["--enforce", "landlock-only"], &probe);
    let line = in_place
        .iter()
        .map(|a| sh_quote(a))
        .collect::<Vec<_>>()
        .join(" ");
    let script = |shell_line: String| {
        fx.as_runner(
            r,
            &argv(["script", "-qec", shell_line.as_str(), "/dev/null"]),
        )
    };
    let inside = [
        ("masks", under_pty(&fx.exec_argv(r, &[], &probe))),
        (
            "landlock-only",
            under_pty(&fx.exec_plan_argv(r, &landlock_only_plan(&fx, r), &probe)),
        ),
        (
            "landlock-only in place, new session",
            script(format!("{line}; true")),
        ),
        (
            "landlock-only in place, a job (TIOCNOTTY)",
            script(format!(
                "sh -ic {}",
                sh_quote(OsStr::new(&format!("{line}; true")))
            )),
        ),
        (
            "landlock-only as the session leader",
            script(format!("exec {line}")),
        ),
    ];
    for (shape, command) in inside {
        let ran = fx.run(command, None);
        let results = parse_probes(&ran.stdout);
        assert_eq!(results.len(), 2, "{shape}: {ran:?}");
        assert!(
            !results[0].ok,
            "{shape}: TIOCSTI into the caller's terminal worked: {ran:?}"
        );
        assert!(
            !results[1].ok,
            "{shape}: /dev/tty opened (still a controlling terminal): {ran:?}"
        );
    }
}

/// Another terminal of the person's (a pty they own, as every terminal window is): from the
/// masks shape it is not there (the sandbox has its own `/dev/pts`), while ptys made inside
/// work. Outside, the same probe writes to it (the control).
fn other_terminals(fx: &Fixture, r: &Runner) {
    use std::os::fd::AsRawFd;
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let slave = fs::read_link(format!("/proc/self/fd/{}", pty.slave.as_raw_fd())).unwrap();
    chown(&slave, Some(r.uid), Some(r.gid)).unwrap();
    let probe = fx.probe_argv(&[vec!["tty-write".into(), p(&slave)], vec!["new-pty".into()]]);
    let drain = || {
        let mut buf = [0u8; 256];
        nix::fcntl::fcntl(
            &pty.master,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )
        .unwrap();
        match nix::unistd::read(&pty.master, &mut buf) {
            Ok(n) => String::from_utf8_lossy(&buf[..n]).into_owned(),
            Err(_) => String::new(),
        }
    };

    let ran = fx.run(fx.bare(r, &probe), None);
    let control = parse_probes(&ran.stdout);
    assert!(
        control.len() == 2 && control[0].ok && control[1].ok,
        "control: {ran:?}"
    );
    assert!(
        drain().contains("written-by-probe"),
        "control: nothing arrived"
    );

    let ran = fx.run(fx.exec(r, &[], &probe), None);
    let inside = parse_probes(&ran.stdout);
    assert_eq!(inside.len(), 2, "{ran:?}");
    assert!(
        !inside[0].ok,
        "another terminal was written from inside: {ran:?}"
    );
    assert!(inside[1].ok, "a pty made inside does not work: {ran:?}");
    assert_eq!(drain(), "", "something reached the other terminal");
}

/// Read-only grants where no cover lies above them are bound onto themselves read-only, so
/// that writes and metadata changes (chmod: EROFS) stop there too, which Landlock alone
/// cannot do; a read-write grant inside one opens its part again. Two shapes of policy that
/// were refused before for want of it (`metadata-unguarded`): a closed base with a read-only
/// grant, and a file of the open home protected and granted back read-only (as a shell rc
/// file would be).
fn read_only_grants_in_the_open(r: &Runner) {
    use Expect::{Allow, Deny};
    let fx = Fixture::new(r);
    let area = fx.root.join("ro-area");
    let inner = area.join("inner");
    fs::create_dir_all(&inner).unwrap();
    fs::write(area.join("f"), "ro\n").unwrap();
    fs::write(inner.join("g"), "rw\n").unwrap();
    let rc = fx.home.join(".rc-file");
    fs::write(&rc, "# rc\n").unwrap();
    chown_tree(&area, fx.uid, fx.gid);
    chown_tree(&rc, fx.uid, fx.gid);

    let closed = format!(
        "version = 1\nbase = \"closed\"\n\
         [[grant]]\npath = {root:?}\naccess = \"ro\"\n\
         [[grant]]\npath = {inner:?}\naccess = \"rw\"\n\
         [linux]\nways_out = false\n[autorun]\nguard = false\n",
        root = fx.root,
        inner = inner,
    );
    fs::write(&fx.policy, closed).unwrap();
    let cases = [
        case(Allow, "read", &[&area.join("f")]),
        case(Deny, "write", &[&area.join("f")]),
        case_s(Deny, "chmod", &[&p(&area.join("f")), "666"]),
        case(Deny, "create", &[&area.join("new")]),
        case(Allow, "write", &[&inner.join("g")]),
        case(Allow, "create", &[&inner.join("new")]),
    ];
    let ran = fx.run(
        fx.exec(r, &["--enforce", "masks"], &fx.probe_argv(&ops(&cases))),
        None,
    );
    assert_eq!(ran.code, Some(0), "{ran:?}");
    check_cases("closed base, read-only grant", &cases, &ran);

    let open = format!(
        "version = 1\nbase = \"open\"\n\
         [[protected]]\npath = {rc:?}\n\
         [[grant]]\npath = {rc:?}\naccess = \"ro\"\n\
         [linux]\nways_out = false\n[autorun]\nguard = false\n",
    );
    fs::write(&fx.policy, open).unwrap();
    let cases = [
        case(Allow, "read", &[&rc]),
        case(Deny, "write", &[&rc]),
        case_s(Deny, "chmod", &[&p(&rc), "666"]),
        case(Deny, "delete", &[&rc]),
        case(Deny, "rename", &[&rc, &fx.home.join("rc-moved")]),
    ];
    let ran = fx.run(
        fx.exec(r, &["--enforce", "masks"], &fx.probe_argv(&ops(&cases))),
        None,
    );
    assert_eq!(ran.code, Some(0), "{ran:?}");
    check_cases("a home file granted back read-only", &cases, &ran);
    assert_eq!(fs::read_to_string(&rc).unwrap(), "# rc\n");
    assert_eq!(fs::read_to_string(area.join("f")).unwrap(), "ro\n");

    // Control: outside, the same chmod works.
    let control = [case_s(Allow, "chmod", &[&p(&rc), "644"])];
    let ran = fx.run(fx.bare(r, &fx.probe_argv(&ops(&control))), None);
    check_cases("outside", &control, &ran);
}

// ---- scenarios: the process ------------------------------------------------------------------

fn process_passthrough(r: &Runner) {
    let fx = Fixture::new(r);
    let sh = |script: &str| argv(["sh", "-c", script]);

    let ran = fx.run(fx.exec(r, &[], &sh("exit 7")), None);
    assert_eq!(ran.code, Some(7), "{ran:?}");
    let ran = fx.run(fx.exec(r, &[], &sh("kill -TERM $$; sleep 5")), None);
    assert_eq!(ran.code, Some(128 + 15), "killed by SIGTERM: {ran:?}");
    let ran = fx.run(fx.exec(r, &[], &sh("kill -KILL $$; sleep 5")), None);
    assert_eq!(ran.code, Some(128 + 9), "killed by SIGKILL: {ran:?}");

    let mut cmd = fx.exec(
        r,
        &[],
        &sh("cat; echo \"$SBX_LIVE_VAR\"; echo to-stderr >&2; pwd; exit 5"),
    );
    cmd.env("SBX_LIVE_VAR", "passed-through");
    let ran = fx.run(cmd, Some(b"from-stdin\n"));
    assert_eq!(ran.code, Some(5), "{ran:?}");
    assert_eq!(
        ran.stdout,
        format!("from-stdin\npassed-through\n{}\n", p(&fx.runtime)),
        "{ran:?}"
    );
    assert!(ran.stderr.contains("to-stderr"), "{ran:?}");

    // Signal dispositions pass through as a shell would leave them: no standard signal
    // ignored that is not ignored outside (the Rust runtime ignores SIGPIPE in the sandboxer
    // itself). Signals 32 and up are left out: glibc's posix_spawn sets its own internal
    // ones (32, 33) to ignored in children, depending on this test process's handlers.
    let ignored = |ran: &Ran| {
        let hex = ran
            .stdout
            .trim()
            .strip_prefix("SigIgn:")
            .unwrap_or_else(|| panic!("{ran:?}"))
            .trim();
        u64::from_str_radix(hex, 16).unwrap() & 0x7fff_ffff
    };
    let status = "grep '^SigIgn:' /proc/self/status";
    let outside = fx.run(fx.bare(r, &sh(status)), None);
    let inside = fx.run(fx.exec(r, &[], &sh(status)), None);
    assert_eq!(
        ignored(&inside),
        ignored(&outside),
        "{inside:?} vs {outside:?}"
    );
    let ran = fx.run(fx.exec(r, &[], &sh("yes | head -n 1")), None);
    assert_eq!((ran.code, ran.stderr.as_str()), (Some(0), ""), "{ran:?}");

    // The CPUs the command may use are the caller's, in both shapes, although the sandbox's
    // first process is moved to another CPU while the caller plans: without a restriction,
    // and under `taskset` to the last CPU (so that "another CPU" is outside what it allows).
    // Landlock-only runs a policy it can enforce on any ABI: nothing protected.
    let open = fx.policy_file("open.toml", OPEN_POLICY);
    let cpus = sh("grep '^Cpus_allowed_list:' /proc/self/status");
    let last = (std::thread::available_parallelism().map_or(1, |n| n.get()) - 1).to_string();
    let pinned = |command: Vec<OsString>| {
        let mut a = argv(["taskset", "-c", last.as_str()]);
        a.extend(command);
        fx.as_runner(r, &a)
    };
    for shape in ["masks", "landlock-only"] {
        let policy = if shape == "landlock-only" {
            &open
        } else {
            &fx.policy
        };
        let exec = fx.exec_argv_with(r, policy, &["--enforce", shape], &cpus);
        let outside = fx.run(fx.bare(r, &cpus), None);
        let inside = fx.run(fx.as_runner(r, &exec), None);
        assert_eq!(
            (inside.code, &inside.stdout),
            (Some(0), &outside.stdout),
            "{shape}: {inside:?}"
        );
        let outside = fx.run(pinned(cpus.clone()), None);
        let inside = fx.run(pinned(exec), None);
        assert_eq!(
            outside.stdout,
            format!("Cpus_allowed_list:\t{last}\n"),
            "{outside:?}"
        );
        assert_eq!(
            (inside.code, &inside.stdout),
            (Some(0), &outside.stdout),
            "{shape}: {inside:?}"
        );
    }

    // Not found: 127, and the sandbox says so.
    let ran = fx.run(fx.exec(r, &[], &argv(["/nonexistent/program"])), None);
    assert_eq!(ran.code, Some(127), "{ran:?}");
    assert!(ran.stderr.contains("/nonexistent/program"), "{ran:?}");

    // A fresh /proc: only PID 1, its guard watcher (the policy guards the autorun list) and
    // the command itself.
    let ran = fx.run(
        fx.exec(r, &[], &sh("for p in /proc/[0-9]*; do cat $p/comm; done")),
        None,
    );
    assert_eq!(
        ran.stdout.lines().collect::<Vec<_>>(),
        ["sandboxer", "guard-watcher", "sh"],
        "{ran:?}"
    );

    // The command runs as the person, with no capability, in its own PID namespace.
    let ran = fx.run(fx.exec(r, &[], &sh("id -u; id -g; echo ppid=$PPID; grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status")), None);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let lines: Vec<&str> = ran.stdout.lines().collect();
    assert_eq!(lines[0], r.uid.to_string(), "{ran:?}");
    assert_eq!(lines[1], r.gid.to_string(), "{ran:?}");
    assert_eq!(lines[2], "ppid=1", "the command is PID 1's child: {ran:?}");
    for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(
            ran.stdout.contains(&format!("{cap}:\t0000000000000000")),
            "{cap}: {ran:?}"
        );
    }
    assert!(ran.stdout.contains("NoNewPrivs:\t1"), "{ran:?}");
}

fn signals_forwarded(r: &Runner) {
    let fx = Fixture::new(r);
    let program = "import signal, sys, time\n\
                   def got(s, f):\n    print('got', s, flush=True); sys.exit(3)\n\
                   for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):\n    signal.signal(s, got)\n\
                   print('ready', flush=True)\n\
                   time.sleep(60)\n";
    for sig in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGUSR1,
    ] {
        let mut running = fx.start(fx.exec(r, &[], &argv([PYTHON, "-c", program])), None);
        running.wait_for_output("ready");
        kill(running.pid(), sig).unwrap();
        let ran = running.wait();
        assert_eq!(ran.code, Some(3), "{sig}: {ran:?}");
        assert!(
            ran.stdout.contains(&format!("got {}", sig as i32)),
            "{sig}: {ran:?}"
        );
    }
}

/// Job control: a `SIGTSTP` to the caller (what a terminal's Ctrl-Z sends its process group)
/// stops the command as well and then the caller, so the shell sees the job stopped; `SIGCONT`
/// resumes both. Once with a command that leaves `SIGTSTP` at its default, once with one that
/// catches it (as shells and editors do) and then stops itself.
fn job_control(r: &Runner) {
    let fx = Fixture::new(r);
    let ticker = "import os, signal, sys, time\n\
                  if sys.argv[1] == 'catch':\n\
                  \x20   def tstp(s, f):\n\
                  \x20       print('tstp', flush=True); os.kill(os.getpid(), signal.SIGSTOP)\n\
                  \x20   signal.signal(signal.SIGTSTP, tstp)\n\
                  i = 0\n\
                  while True:\n\
                  \x20   print(i, flush=True); i += 1; time.sleep(0.02)\n";
    let state = |pid: Pid| {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        stat.rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next())
            .unwrap_or('?')
    };
    let ticks = |running: &Running| running.stdout().lines().count();
    // The command is the caller's deepest descendant (caller → monitor → PID 1 → command), and
    // PID 1's last child (its guard watcher comes first).
    let deepest = |pid: Pid| {
        let mut at = pid.as_raw() as u32;
        loop {
            let kids =
                fs::read_to_string(format!("/proc/{at}/task/{at}/children")).unwrap_or_default();
            match kids.split_whitespace().last().and_then(|k| k.parse().ok()) {
                Some(k) => at = k,
                None => return Pid::from_raw(at as i32),
            }
        }
    };
    let until = |what: &str, ok: &dyn Fn() -> bool| {
        let deadline = Instant::now() + TIMEOUT;
        while !ok() {
            assert!(Instant::now() < deadline, "never: {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let landlock_only = landlock_only_plan(&fx, r);
    for how in ["default", "catch"] {
        let command = argv([PYTHON, "-c", ticker, how]);
        for (shape, cmd) in [
            ("masks", fx.exec(r, &[], &command)),
            ("landlock-only", fx.exec_plan(r, &landlock_only, &command)),
        ] {
            let mut running = fx.start(cmd, None);
            running.wait_for_output("3\n");
            let pid = running.pid();
            kill(pid, Signal::SIGTSTP).unwrap();
            until(&format!("{shape}/{how}: the caller stops"), &|| {
                state(pid) == 'T'
            });
            // A command that catches SIGTSTP stops itself from its handler, whenever it gets
            // to run it; a SIGCONT sent before that would be followed by the stop and leave
            // it stopped (as it would unconfined). So the resume waits for the command's stop.
            until(&format!("{shape}/{how}: the command stops"), &|| {
                state(deepest(pid)) == 'T'
            });
            std::thread::sleep(Duration::from_millis(100));
            let stopped_at = ticks(&running);
            std::thread::sleep(Duration::from_millis(300));
            assert_eq!(
                ticks(&running),
                stopped_at,
                "{shape}/{how}: the command kept running while the job was stopped"
            );
            kill(pid, Signal::SIGCONT).unwrap();
            until(&format!("{shape}/{how}: the command resumes"), &|| {
                ticks(&running) > stopped_at + 3
            });
            assert_ne!(state(pid), 'T', "{shape}/{how}");
            kill(pid, Signal::SIGTERM).unwrap();
            let ran = running.wait();
            assert_eq!(ran.code, Some(128 + 15), "{shape}/{how}: {ran:?}");
            assert_eq!(
                ran.stdout.contains("tstp"),
                how == "catch",
                "{shape}/{how}: the command's own handler {}: {ran:?}",
                if how == "catch" { "did not run" } else { "ran" }
            );
        }
    }
}

// ---- scenarios: fail closed ------------------------------------------------------------------

/// Two launches at once share the placeholder of a refused path missing at launch
/// (`workflow.db`). The first one ending must not remove it from under the second: removing a
/// folder that is a mount point in another mount namespace detaches that mount there, and the
/// second sandbox could then create the refused file. The last one out removes it.
fn masks_shared_placeholders(r: &Runner) {
    let fx = Fixture::new(r);
    let db = p(&fx.workflow_db);
    let a_go = fx.home.join("a-go");
    let b_go = fx.home.join("b-go");
    let wait_for = |go: &Path| {
        format!(
            "echo up; while [ ! -e {go} ]; do sleep 0.02; done; ",
            go = p(go)
        )
    };
    let mut a = fx.start(
        fx.exec(
            r,
            &["--enforce", "masks"],
            &argv(["/bin/sh", "-c", &wait_for(&a_go)]),
        ),
        None,
    );
    a.wait_for_output("up");
    assert!(
        fx.workflow_db.is_dir(),
        "the first launch made no placeholder"
    );
    let b_script = format!(
        "{}if echo x > {db} 2>/dev/null; then echo CREATED; else echo refused-create; fi; \
         if [ -e {db} ]; then echo masked; else echo unmasked; fi",
        wait_for(&b_go)
    );
    let mut b = fx.start(
        fx.exec(
            r,
            &["--enforce", "masks"],
            &argv(["/bin/sh", "-c", &b_script]),
        ),
        None,
    );
    b.wait_for_output("up");
    // The first launch ends while the second still runs.
    fs::write(&a_go, "").unwrap();
    let ran_a = a.wait();
    assert_eq!(ran_a.code, Some(0), "{ran_a:?}");
    assert!(
        fx.workflow_db.is_dir(),
        "the placeholder was removed while another sandbox still masks it"
    );
    fs::write(&b_go, "").unwrap();
    let ran_b = b.wait();
    assert_eq!(ran_b.code, Some(0), "{ran_b:?}");
    assert!(ran_b.stdout.contains("refused-create"), "{ran_b:?}");
    assert!(ran_b.stdout.contains("masked"), "{ran_b:?}");
    // The last launch out removed the placeholder it found (it bears the mark).
    assert!(
        !fx.workflow_db.exists(),
        "the placeholder outlived every launch using it"
    );

    // Many at once, starting and ending in every order: each one runs (none is refused for
    // a placeholder vanishing under it), none can create the refused file, and nothing is
    // left behind.
    let script =
        format!("sleep 0.0$(( $$ % 7 )); if echo x > {db} 2>/dev/null; then echo CREATED; fi");
    let running: Vec<Running> = (0..8)
        .map(|_| {
            fx.start(
                fx.exec(
                    r,
                    &["--enforce", "masks"],
                    &argv(["/bin/sh", "-c", &script]),
                ),
                None,
            )
        })
        .collect();
    for run in running {
        let ran = run.wait();
        assert_eq!(ran.code, Some(0), "{ran:?}");
        assert!(!ran.stdout.contains("CREATED"), "{ran:?}");
    }
    assert!(!fx.workflow_db.exists(), "a placeholder was left behind");
}

fn fail_closed_planner(r: &Runner) {
    let fx = Fixture::new(r);
    let marker_file = fx.root.join("ran");
    let touch = argv(["touch".into(), p(&marker_file)]);
    let facts = fx.root.join("no-userns.json");
    fs::write(&facts, r#"{"user_namespaces": false}"#).unwrap();
    chown(&facts, Some(fx.uid), Some(fx.gid)).unwrap();

    let ran = fx.run(
        fx.exec(
            r,
            &["--assume-facts", &p(&facts), "--enforce", "masks"],
            &touch,
        ),
        None,
    );
    assert_eq!(ran.code, Some(125), "{ran:?}");
    assert!(
        ran.stderr.contains("namespace"),
        "the refusal names the missing layer: {ran:?}"
    );
    assert!(
        !marker_file.exists(),
        "the command ran although the plan was refused"
    );

    // With the real facts, the Landlock-only shape of this policy is set up at once while its
    // gaps are computed (`enforce::run_checking`); they break the policy (protected data no
    // mask hides), so the command waiting at the gate never runs, and the refusal says why.
    let ran = fx.run(fx.exec(r, &["--enforce", "landlock-only"], &touch), None);
    assert_eq!(ran.code, Some(125), "{ran:?}");
    assert!(ran.stderr.contains("gaps-break-policy"), "{ran:?}");
    assert!(ran.stderr.contains("metadata-unguarded"), "{ran:?}");
    assert!(
        !marker_file.exists(),
        "the command ran although its plan's gaps break the policy"
    );

    // A launch starts the masks shape's namespaces before it reads the policy; a policy that
    // does not load (or a plan that is never made) leaves nothing behind: the command never
    // ran, and no process of that sandbox is left (their command lines hold the marker path).
    let broken = fx.policy_file(
        "broken.toml",
        "version = 1\nbase = \"open\"\n[[grant]]\npath = 3\n",
    );
    let exec = fx.exec_argv_with(r, &broken, &["--enforce", "masks"], &touch);
    let ran = fx.run(fx.as_runner(r, &exec), None);
    assert_eq!(ran.code, Some(2), "{ran:?}");
    assert!(ran.stderr.contains("broken.toml"), "{ran:?}");
    assert!(!marker_file.exists(), "the command ran without a policy");
    let left: Vec<String> = fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&p(&marker_file)))
        .collect();
    assert!(left.is_empty(), "sandbox processes left behind: {left:?}");

    // Control: the same command with the real facts runs.
    let ran = fx.run(fx.exec(r, &["--enforce", "masks"], &touch), None);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(marker_file.exists());
}

fn fail_closed_enforcer(r: &Runner) {
    let fx = Fixture::new(r);
    let marker_file = fx.root.join("ran");
    let touch = argv(["touch".into(), p(&marker_file)]);
    let good = fx.plan(r, &[]);

    let mut too_new = good.clone();
    too_new.landlock.abi = 99;
    let mut breaking = good.clone();
    breaking.gaps.push(Gap {
        id: "test-gap".into(),
        detail: "a gap that breaks the policy".into(),
        breaks_policy: true,
        paths: Vec::new(),
    });
    let mut other_uid = good.clone();
    other_uid.uid += 1;
    let mut uncovered = good.clone();
    uncovered
        .mounts
        .retain(|m| !matches!(m, MountStep::Cover { path, .. } if *path == fx.state));
    let mut symlinked = good.clone();
    let link = fx.root.join("link-to-home");
    std::os::unix::fs::symlink(&fx.home, &link).unwrap();
    symlinked.landlock.rules[0].path = link;

    for (plan, names) in [
        (&too_new, &["Landlock", "ABI 99"][..]),
        (&breaking, &["plan", "test-gap"][..]),
        (&other_uid, &["plan", "uid"][..]),
        (&uncovered, &["plan", "no earlier cover"][..]),
        (&symlinked, &["Landlock", "symlink"][..]),
    ] {
        let ran = fx.run(fx.exec_plan(r, plan, &touch), None);
        assert_eq!(ran.code, Some(125), "{ran:?}");
        for name in names {
            assert!(
                ran.stderr.contains(name),
                "the error names {name:?}: {ran:?}"
            );
        }
        assert!(
            !marker_file.exists(),
            "the command ran under a refused plan: {ran:?}"
        );
    }

    // Control: the unaltered plan runs the command.
    let ran = fx.run(fx.exec_plan(r, &good, &touch), None);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(marker_file.exists());
}

/// `argv` inside a user namespace whose own limit forbids creating another one: to the
/// sandbox, a machine with user namespaces disabled.
fn without_user_namespaces(command: Vec<OsString>) -> Vec<OsString> {
    let mut v = argv([
        "unshare",
        "-Ur",
        "sh",
        "-c",
        "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\"",
        "sh",
    ]);
    v.extend(command);
    v
}

fn no_user_namespaces(r: &Runner) {
    let fx = Fixture::new(r);
    let open = fx.policy_file("open.toml", OPEN_POLICY);
    let marker_file = fx.root.join("ran");
    let report = "echo ppid=$PPID; grep NoNewPrivs /proc/self/status";

    // The fixture's policy needs the masks: refused, nothing run, and the refusal says why.
    let touch = argv(["touch".into(), p(&marker_file)]);
    let ran = fx.run(
        fx.as_runner(r, &without_user_namespaces(fx.exec_argv(r, &[], &touch))),
        None,
    );
    assert_eq!(ran.code, Some(125), "{ran:?}");
    assert!(ran.stderr.contains("no-user-namespaces"), "{ran:?}");
    assert!(!marker_file.exists(), "the command ran without its sandbox");

    // A policy Landlock alone enforces: the launch falls back to the Landlock-only shape (no
    // PID namespace: the command is not PID 1's child), still confined.
    let open_exec = fx.exec_argv_with(r, &open, &[], &argv(["sh", "-c", report]));
    let ran = fx.run(
        fx.as_runner(r, &without_user_namespaces(open_exec.clone())),
        None,
    );
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(
        !ran.stdout.contains("ppid=1\n"),
        "ran in a PID namespace: {ran:?}"
    );
    assert!(ran.stdout.contains("NoNewPrivs:\t1"), "{ran:?}");

    // Control: with user namespaces, the same launch gets the masks shape.
    let ran = fx.run(fx.as_runner(r, &open_exec), None);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(ran.stdout.contains("ppid=1\n"), "{ran:?}");
}

// ---- scenarios: what the kernel's ruleset handles ---------------------------------------------

/// A right the rule on `/` grants is left unhandled (no per-access check), yet the domain
/// still handles `refer`: it may not mount, and moving or linking files between folders
/// works. For the fixture's masks plan and for a base-open Landlock-only policy.
fn landlock_handles_only_what_it_refuses(r: &Runner) {
    use sandboxer::linux::plan::FsRight;
    let fx = Fixture::new(r);
    let masks = fx.plan(r, &[]);
    assert_eq!(masks.shape, Shape::Masks);
    let root = &masks.landlock.rules[0];
    assert_eq!(root.path, Path::new("/"), "{masks:#?}");
    assert_eq!(root.rights, masks.landlock.handled, "{masks:#?}");
    // The masks shape forbids nested user namespaces, so the command can never mount: the
    // kernel's ruleset handles no filesystem right (it only scopes).
    assert!(masks.mounts_blocked(), "{masks:#?}");
    let kernel = masks.landlock.kernel_ruleset(masks.mounts_blocked());
    assert_eq!(kernel.handled, [], "{kernel:#?}");
    assert!(kernel.rules.is_empty(), "{kernel:#?}");
    // Files still move and link between folders, nothing mounts, no namespace is made.
    let script = format!(
        "unshare -Urm sh -c 'mount -t tmpfs none {rt}; echo mount=$?'; echo unshare=$?; \
         unshare -Urn true; echo unshare-net=$?; \
         mkdir -p {rt}/m-from {rt}/m-to && touch {rt}/m-from/f && mv {rt}/m-from/f {rt}/m-to/f \
         && echo moved=0; ln {rt}/m-to/f {rt}/m-from/g && echo linked=0",
        rt = p(&fx.runtime),
    );
    let ran = fx.run(fx.exec(r, &[], &argv(["sh", "-c", &script])), None);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    for refused in ["mount=0", "unshare=0", "unshare-net=0"] {
        assert!(
            !ran.stdout.lines().any(|l| l == refused),
            "{refused}: {ran:?}"
        );
    }
    for done in ["moved=0", "linked=0"] {
        assert!(ran.stdout.contains(done), "{done}: {ran:?}");
    }
    assert!(
        ran.stderr.contains("No space left on device"),
        "the namespace limit: {ran:?}"
    );

    let open = fx.policy_file("open.toml", OPEN_POLICY);
    let script = format!(
        "unshare -Urm sh -c 'mount -t tmpfs none {rt}; echo mount=$?'; echo unshare=$?; \
         mkdir -p {rt}/from {rt}/to && touch {rt}/from/f && mv {rt}/from/f {rt}/to/f && \
         echo moved=0; ln {rt}/to/f {rt}/from/g && echo linked=0",
        rt = p(&fx.runtime),
    );
    let mut v = argv([sandboxer_bin(r).into_os_string()]);
    v.extend(argv(["exec", "--enforce", "landlock-only", "--policy"]));
    v.push(open.clone().into());
    v.push("--home".into());
    v.push(fx.home.clone().into());
    let mut print = v.clone();
    print.extend(argv(["--print-plan", "--", "true"]));
    let printed = fx.run(fx.as_runner(r, &print), None);
    assert_eq!(printed.code, Some(0), "{printed:?}");
    let plan: Plan = serde_json::from_str(&printed.stdout).unwrap();
    assert_eq!(plan.shape, Shape::LandlockOnly);
    assert_eq!(
        plan.landlock.kernel_ruleset(plan.mounts_blocked()).handled,
        [FsRight::Refer],
        "{plan:#?}"
    );
    v.extend(argv(["--", "sh", "-c", &script]));
    let ran = fx.run(fx.as_runner(r, &v), None);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(
        !ran.stdout.lines().any(|l| l == "mount=0"),
        "a mount succeeded inside the Landlock domain: {ran:?}"
    );
    assert!(ran.stdout.contains("unshare="), "{ran:?}");
    for done in ["moved=0", "linked=0"] {
        assert!(ran.stdout.contains(done), "{done}: {ran:?}");
    }
    // Control: outside, the same mount works wherever user namespaces do.
    let bare = fx.run(
        fx.bare(
            r,
            &argv([
                "unshare",
                "-Urm",
                "sh",
                "-c",
                &format!("mount -t tmpfs none {}; echo mount=$?", p(&fx.runtime)),
            ]),
        ),
        None,
    );
    if bare.code == Some(0) {
        assert!(bare.stdout.contains("mount=0"), "{bare:?}");
    }
}

// ---- scenarios: the Landlock-only shape --------------------------------------------------------

/// A hand-written Landlock-only plan: the system read-only, the runtime read-write, nothing
/// else of the fixture (the planner itself refuses Landlock-only for a policy with protected
/// roots below ABI 9).
fn landlock_only_plan(fx: &Fixture, r: &Runner) -> Plan {
    use sandboxer::linux::plan::{FsRight, LandlockPlan, LandlockRule};
    let abi = 6;
    let all = FsRight::known_at(abi);
    let read: Vec<FsRight> = vec![FsRight::Execute, FsRight::ReadFile, FsRight::ReadDir];
    let mut rules: Vec<LandlockRule> = ["/usr", "/etc", "/proc"]
        .iter()
        .map(|d| LandlockRule {
            path: d.into(),
            rights: read.clone(),
            is_dir: true,
            why: "system".into(),
        })
        .collect();
    rules.push(LandlockRule {
        path: fx.probe.clone(),
        rights: vec![FsRight::ReadFile],
        is_dir: false,
        why: "the probe script".into(),
    });
    for rw in ["/dev".into(), fx.runtime.clone()] {
        rules.push(LandlockRule {
            path: rw,
            rights: all.clone(),
            is_dir: true,
            why: "read-write".into(),
        });
    }
    Plan {
        shape: Shape::LandlockOnly,
        uid: r.uid,
        gid: r.gid,
        namespaces: false,
        nested_user_namespaces: false,
        mounts: Vec::new(),
        landlock: LandlockPlan {
            abi,
            handled: all,
            rules,
            scope_abstract_unix: true,
            scope_signal: true,
            narrowed: Vec::new(),
        },
        absent: Vec::new(),
        socket_broker: None,
        gaps: Vec::new(),
        mask_registry: None,
        staging: Vec::new(),
        network: None,
    }
}

fn landlock_only_shape(r: &Runner) {
    use Expect::{Allow, Deny};
    let fx = Fixture::new(r);
    let abstract_name = format!("sbx-live-ll-{}", fx.root.display());
    let abstract_sock = Listener::abstract_name(&abstract_name);
    let mut victim_cmd = r.command("sleep");
    victim_cmd.arg("600");
    let mut victim = fx.start(victim_cmd, None);
    let pid = victim.pid().to_string();
    let cases = vec![
        case(Allow, "read", &[&fx.runtime.join("runtime.txt")]),
        case(Allow, "create", &[&fx.runtime.join("created.txt")]),
        case(Allow, "read", &[Path::new("/etc/passwd")]),
        case(Deny, "create", &[&fx.root.join("outside-the-rules.txt")]),
        case(Deny, "read", &[&fx.config]),
        case(Deny, "read", &[&fx.chat2.join("secret.txt")]),
        case_s(Deny, "connect-abstract", &[&abstract_name]),
        case_s(Deny, "kill", &[&pid, "0"]),
        case_s(Deny, "ptrace", &[&pid]),
        case_s(Deny, "proc-environ", &[&pid]),
    ];
    let ran = fx.run(
        fx.exec_plan(r, &landlock_only_plan(&fx, r), &fx.probe_argv(&ops(&cases))),
        None,
    );
    assert_eq!(ran.code, Some(0), "{ran:?}");
    check_cases("Landlock-only", &cases, &ran);
    fx.assert_no_marker(&ran);
    assert!(!fx.root.join("outside-the-rules.txt").exists());

    // The same process steps: no capability, no_new_privs, a session of its own.
    let status = fx.run(
        fx.exec_plan(
            r,
            &landlock_only_plan(&fx, r),
            &argv(["sh", "-c", "grep -E '^(CapPrm|CapEff|CapAmb|NoNewPrivs):' /proc/self/status; ps -o sid= -p $$; echo pid=$$"]),
        ),
        None,
    );
    assert_eq!(status.code, Some(0), "{status:?}");
    for line in [
        "CapPrm:\t0000000000000000",
        "CapEff:\t0000000000000000",
        "CapAmb:\t0000000000000000",
        "NoNewPrivs:\t1",
    ] {
        assert!(status.stdout.contains(line), "{line}: {status:?}");
    }
    let sid = status
        .stdout
        .lines()
        .rev()
        .nth(1)
        .unwrap()
        .trim()
        .to_string();
    let own_pid = status
        .stdout
        .lines()
        .last()
        .unwrap()
        .trim_start_matches("pid=")
        .to_string();
    assert_eq!(
        sid, own_pid,
        "the command leads its own session: {status:?}"
    );

    // Controls outside.
    let controls = vec![
        case(Allow, "read", &[&fx.config]),
        case_s(Allow, "connect-abstract", &[&abstract_name]),
        case_s(Allow, "kill", &[&pid, "0"]),
    ];
    let bare = fx.run(fx.bare(r, &fx.probe_argv(&ops(&controls))), None);
    check_cases("Landlock-only controls", &controls, &bare);
    assert_eq!(abstract_sock.connections(), 1, "only the control connected");
    victim.child.kill().unwrap();
    victim.child.wait().unwrap();
}

/// A multi-threaded caller (the dispatcher launches in its own process) gets the masks shape
/// through the monitor (`fork`, then new namespaces), never the raw `clone` a single-threaded
/// `sandboxer exec` uses: the same sandbox either way. In this process: as root, and as the
/// test user in a copy of the test binary run as that user.
fn threaded_caller(r: &Runner) {
    use sandboxer::linux::enforce::Command as Confined;
    use sandboxer::linux::exec::{launch, unprobed_facts};
    use sandboxer::policy::{Enforce, ResolveOptions};
    use sandboxer::{Policy, Target};
    if r.switch_to.is_some() {
        // It runs in this process: as the test user, in a copy of this test run as that user
        // (where the runner is that process's own user).
        agentworks_test_user::rerun_as_test_user(
            "threaded_caller::as_user",
            "SBX_THREADED_CALLER_AS_USER",
        );
        return;
    }
    let fx = Fixture::new(r);
    let out = fx.root.join("threaded.out");
    let opts = ResolveOptions::new(Target::Linux, fx.home.clone(), true).unwrap();
    let text = fs::read_to_string(&fx.policy).unwrap();
    let policy = Policy::from_toml(&text, "policy.toml", &opts).unwrap();
    // Another thread, alive for the whole launch: once the command runs, it looks at the
    // caller's child (the monitor: in this PID namespace only; PID 1 would have two pids),
    // then lets the command go on.
    let (ready, go) = (fx.root.join("ready"), fx.root.join("go"));
    let caller = nix::unistd::gettid();
    let watcher = {
        let (ready, go) = (ready.clone(), go.clone());
        std::thread::spawn(move || {
            let start = Instant::now();
            while !ready.exists() && start.elapsed() < TIMEOUT {
                std::thread::sleep(Duration::from_millis(10));
            }
            let children = fs::read_to_string(format!("/proc/self/task/{caller}/children"));
            let nspid = children.ok().and_then(|c| {
                let child = c.split_whitespace().next()?.to_string();
                let status = fs::read_to_string(format!("/proc/{child}/status")).ok()?;
                Some(
                    status
                        .lines()
                        .find(|l| l.starts_with("NSpid:"))?
                        .to_string(),
                )
            });
            fs::write(&go, "").unwrap();
            nspid
        })
    };
    let script = format!(
        "echo ppid=$PPID > {out}; touch {ready}; while [ ! -e {go} ]; do sleep 0.01; done; \
         cat {config} >> {out} 2>&1; exit 3",
        out = p(&out),
        ready = p(&ready),
        go = p(&go),
        config = p(&fx.config)
    );
    let command = Confined {
        program: "sh".into(),
        args: argv(["-c", script.as_str()]),
        cwd: fx.runtime.clone(),
    };
    let ended = launch(&policy, &unprobed_facts(), Enforce::Masks, &command);
    let nspid = watcher.join().unwrap();
    assert_eq!(ended.exit_code(), 3, "{ended:?}");
    let nspid = nspid.expect("the caller's child while the command ran");
    assert_eq!(
        nspid.split_whitespace().count(),
        2,
        "the caller's child is the monitor, outside the sandbox's PID namespace: {nspid}"
    );
    let text = fs::read_to_string(&out).unwrap();
    assert!(
        text.starts_with("ppid=1\n"),
        "the command is PID 1's child: {text}"
    );
    assert!(
        !text.contains(&fx.marker),
        "the protected file was read: {text}"
    );
    assert!(text.contains("No such file"), "{text}");
}
