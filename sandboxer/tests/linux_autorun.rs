//! Live tests of the autorun guard on Linux (`profiles/autorun.toml`, `MountStep::Guard`):
//! `sandboxer exec` with the embedded list, against the running kernel, as root and as the
//! unprivileged `sbx-test`.
//!
//! Each scenario builds a home under /tmp owned by the runner, holding one path of each kind
//! the guard knows: an existing file and folder, a missing file that gets a placeholder with
//! content (and whose folder is missing too), a missing folder, a missing file that gets none
//! (`missing = "none"`), a git repository outside every grant and a granted workflow. Every
//! denial has its control: the same operation on a fresh copy of the tree, unconfined,
//! succeeds. Verdicts come from errno and from the disk.

#![cfg(target_os = "linux")]

use std::fs;
use std::os::unix::fs::chown;
use std::path::{Path, PathBuf};
use std::process::Command;

use agentworks_test_user::{PATH, Runner, text};
use serde_json::Value;

const PROBE_PY: &str = include_str!("helpers/probe.py");

agentworks_test_user::live_scenarios!(
    guarded_entries_are_read_only,
    repositories_outside_grants_are_guarded,
    the_guard_turned_off_guards_nothing,
    guarded_paths_replaced_outside_are_guarded_again,
    a_sandbox_holding_a_replaced_file_open_is_stopped,
    a_guarded_file_with_another_name_refuses_the_launch,
    a_symlink_on_the_way_to_a_guarded_path_stays
);

/// A home with one path of each kind, owned by the runner.
struct Home {
    _dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    probe: PathBuf,
    policy: PathBuf,
}

fn home(r: &Runner, policy_extra: &str) -> Home {
    let dir = tempfile::Builder::new()
        .prefix("sbx-autorun-")
        .tempdir_in("/tmp")
        .unwrap();
    let root = dir.path().canonicalize().unwrap();
    let home = root.join("home");
    for d in [
        ".ssh",
        ".config",
        "src/outside",
        "work/wf",
        "dotfiles",
        "tools/bin",
    ] {
        fs::create_dir_all(home.join(d)).unwrap();
    }
    // A dotfile linked into a dotfiles folder (GNU stow's way).
    fs::write(home.join("dotfiles/tmux.conf"), "set -g mouse on\n").unwrap();
    std::os::unix::fs::symlink("dotfiles/tmux.conf", home.join(".tmux.conf")).unwrap();
    fs::write(home.join(".bashrc"), "original\n").unwrap();
    fs::write(home.join(".profile"), "profile\n").unwrap();
    fs::write(home.join(".ssh/config"), "Host *\n").unwrap();
    fs::write(home.join("notes.txt"), "notes\n").unwrap();
    let probe = root.join("probe.py");
    fs::write(&probe, PROBE_PY).unwrap();
    let policy = root.join("policy.toml");
    fs::write(
        &policy,
        format!(
            "version = 1\nbase = \"open\"\n[[protected]]\npath = \"~/work\"\n\
             [[grant]]\npath = \"~/work/wf\"\naccess = \"rw\"\n[linux]\nways_out = false\n\
             {policy_extra}"
        ),
    )
    .unwrap();
    git(&home.join("src/outside"), &["init", "-q"]);
    // Project settings a CLI obeys in a folder it trusts.
    fs::create_dir_all(home.join("src/outside/.claude")).unwrap();
    fs::write(home.join("src/outside/.claude/settings.json"), "{}\n").unwrap();
    fs::write(home.join("src/outside/.mcp.json"), "{}\n").unwrap();
    chown_tree(&root, r.uid, r.gid);
    fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    Home {
        _dir: dir,
        root,
        home,
        probe,
        policy,
    }
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", text(&out));
}

fn chown_tree(path: &Path, uid: u32, gid: u32) {
    chown(path, Some(uid), Some(gid)).unwrap();
    if path.is_dir() && !path.is_symlink() {
        for e in fs::read_dir(path).unwrap() {
            chown_tree(&e.unwrap().path(), uid, gid);
        }
    }
}

/// Runs `program args` as the runner with HOME set, confined by `sandboxer exec` or not.
fn run(r: &Runner, h: &Home, confined: bool, program: &str, args: &[&str]) -> std::process::Output {
    let mut c = if confined {
        let mut c = r.command(r.reachable(Path::new(env!("CARGO_BIN_EXE_sandboxer"))));
        c.arg("exec")
            .arg("--policy")
            .arg(&h.policy)
            .arg("--")
            .arg(program);
        c
    } else {
        r.command(program)
    };
    // A folder of the home on $PATH, as ~/.local/bin or ~/go/bin often are.
    let path = format!("{}:{PATH}", h.home.join("tools/bin").display());
    c.args(args)
        .env("HOME", &h.home)
        .env("PATH", path)
        .env("LANG", "C.UTF-8")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .current_dir(&h.root)
        .output()
        .unwrap()
}

/// (op, args) → the probe's verdict: Ok(()) or the errno name.
fn probe(
    r: &Runner,
    h: &Home,
    confined: bool,
    ops: &[(String, Vec<PathBuf>)],
) -> Vec<Result<(), String>> {
    let spec: Vec<Value> = ops
        .iter()
        .map(|(op, args)| {
            let mut v = vec![Value::from(op.as_str())];
            v.extend(args.iter().map(|a| Value::from(a.to_str().unwrap())));
            Value::from(v)
        })
        .collect();
    let spec = serde_json::to_string(&spec).unwrap();
    let out = run(
        r,
        h,
        confined,
        "/usr/bin/python3",
        &[h.probe.to_str().unwrap(), &spec],
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(
        lines.len(),
        ops.len(),
        "the probe did not run every op: {}",
        text(&out)
    );
    lines
        .iter()
        .map(|l| match l["ok"].as_bool() {
            Some(true) => Ok(()),
            _ => Err(l["err"].as_str().unwrap_or("?").to_string()),
        })
        .collect()
}

/// What stands at the guarded paths missing at launch while the sandbox runs: the control
/// home gets the same, so that each refused operation meets the same kind of entry outside.
fn stand_ins(h: &Home) {
    fs::write(h.home.join(".bash_profile"), "").unwrap();
    fs::create_dir_all(h.home.join(".claude")).unwrap();
    fs::write(h.home.join(".claude/settings.json"), "{}\n").unwrap();
    fs::create_dir_all(h.home.join(".config/fish")).unwrap();
    fs::create_dir_all(h.home.join(".config/git")).unwrap();
    fs::create_dir_all(h.home.join(".local/bin")).unwrap();
    fs::create_dir_all(h.home.join(".local/share/applications")).unwrap();
    fs::create_dir_all(h.home.join(".cargo")).unwrap();
    fs::create_dir_all(h.home.join(".kube")).unwrap();
}

type Case<'a> = (bool, &'a str, &'a [&'a str]);

/// The probe's operations for `cases` in `h`. An argument starting with `=` is a value, not a
/// path in the home.
fn ops(h: &Home, cases: &[Case]) -> Vec<(String, Vec<PathBuf>)> {
    let arg = |a: &&str| match a.strip_prefix('=') {
        Some(value) => PathBuf::from(value),
        None => h.home.join(a),
    };
    cases
        .iter()
        .map(|(_, op, args)| (op.to_string(), args.iter().map(arg).collect()))
        .collect()
}

/// Runs `cases` confined in one home: each op the guard must refuse is refused, each it must
/// allow succeeds. Each refused op is also the control's: alone, unconfined, in a fresh home
/// of its own with the stand-ins, it succeeds.
fn check(r: &Runner, policy_extra: &str, cases: &[Case]) -> Home {
    let stand_ins_outside = |h: &Home, control: bool| {
        if control {
            stand_ins(h);
            chown_tree(&h.home, r.uid, r.gid);
        }
    };
    check_in(r, policy_extra, cases, &stand_ins_outside)
}

/// [`check`] in homes that `setup` changes first (`control`: the control's home).
fn check_in(r: &Runner, policy_extra: &str, cases: &[Case], setup: &dyn Fn(&Home, bool)) -> Home {
    let inside = home(r, policy_extra);
    setup(&inside, false);
    let got_in = probe(r, &inside, true, &ops(&inside, cases));
    let mut wrong = Vec::new();
    for (case, i) in cases.iter().zip(&got_in) {
        let (allowed, op, args) = case;
        if *allowed && i.is_err() {
            wrong.push(format!(
                "{op} {args:?}: refused inside ({i:?}), should be allowed"
            ));
        }
        if !allowed && i.is_ok() {
            wrong.push(format!("{op} {args:?}: allowed inside, should be refused"));
        }
        if !allowed {
            let outside = home(r, policy_extra);
            setup(&outside, true);
            let o = probe(
                r,
                &outside,
                false,
                &ops(&outside, std::slice::from_ref(case)),
            );
            if let Err(e) = &o[0] {
                wrong.push(format!("{op} {args:?}: control failed outside too ({e})"));
            }
        }
    }
    assert!(wrong.is_empty(), "as uid {}:\n{}", r.uid, wrong.join("\n"));
    inside
}

fn guarded_entries_are_read_only(r: &Runner) {
    let deny = false;
    let allow = true;
    let h = check(
        r,
        "",
        &[
            // An existing file: every kind of write refused, reading allowed.
            (allow, "read", &[".bashrc"]),
            (deny, "write", &[".bashrc"]),
            (deny, "truncate", &[".bashrc"]),
            (deny, "delete", &[".bashrc"]),
            (deny, "rename", &[".bashrc", "bashrc.moved"]),
            (deny, "chmod", &[".bashrc", "=600"]),
            (deny, "setxattr", &[".bashrc"]),
            (deny, "link", &[".bashrc", "bashrc.link"]),
            // An existing folder: nothing inside can be made or changed.
            (allow, "read", &[".ssh/config"]),
            (allow, "list", &[".ssh"]),
            (deny, "write", &[".ssh/config"]),
            (deny, "create", &[".ssh/rc"]),
            (deny, "mkdir", &[".ssh/new"]),
            // Missing at launch, a placeholder that reads as bash reads without one.
            (allow, "read", &[".bash_profile"]),
            (deny, "write", &[".bash_profile"]),
            (deny, "delete", &[".bash_profile"]),
            // Missing at launch with its folder: the placeholder `{}`; its folder is usable.
            (allow, "read", &[".claude/settings.json"]),
            (deny, "write", &[".claude/settings.json"]),
            (allow, "create", &[".claude/history.jsonl"]),
            // A missing folder.
            (deny, "create", &[".config/fish/config.fish"]),
            (deny, "mkdir", &[".config/fish/conf.d"]),
            (deny, "create", &[".config/git/config"]),
            // A guarded dotfile that is a symlink: the link stays, the file it names is guarded.
            (allow, "read", &[".tmux.conf"]),
            (deny, "delete", &[".tmux.conf"]),
            (deny, "rename", &[".tmux.conf", "tmux.moved"]),
            (deny, "write", &[".tmux.conf"]),
            (deny, "write", &["dotfiles/tmux.conf"]),
            (allow, "create", &["dotfiles/other"]),
            // The folders above a guarded path stay where they are.
            (deny, "rename", &[".config", "config.moved"]),
            (deny, "rename", &[".ssh", "ssh.moved"]),
            // Folders put on $PATH: a program dropped there would shadow the system's.
            (deny, "create", &[".local/bin/git"]),
            (deny, "create", &["tools/bin/git"]),
            // The tools that run a file of the home later, missing at launch: a package
            // manager's rc, a build tool's config in a folder missing too (the folder made
            // for it stays usable), a desktop entry that would replace an application's.
            (deny, "create", &[".npmrc"]),
            (deny, "create", &[".cargo/config.toml"]),
            (allow, "create", &[".cargo/credentials-note"]),
            (deny, "create", &[".kube/config"]),
            (allow, "mkdir", &[".kube/cache"]),
            (
                deny,
                "create",
                &[".local/share/applications/firefox.desktop"],
            ),
            // Ordinary files of the home stay writable.
            (allow, "write", &["notes.txt"]),
            (allow, "create", &["new.txt"]),
            (allow, "mkdir", &["newdir"]),
            // `missing = "none"`: no placeholder (listed as the gap autorun-unmasked).
            (allow, "create", &[".xsession"]),
        ],
    );
    // Nothing changed, and every placeholder is gone once the sandbox has ended.
    assert_eq!(
        fs::read_to_string(h.home.join(".bashrc")).unwrap(),
        "original\n"
    );
    for gone in [
        ".bash_profile",
        ".claude/settings.json",
        ".config/fish",
        ".config/git",
        ".zshrc",
        ".local",
        ".npmrc",
        ".kube/config",
    ] {
        assert!(
            !h.home.join(gone).exists(),
            "placeholder {gone} left behind"
        );
    }
    assert!(
        h.home.join(".claude/history.jsonl").exists(),
        "a file made inside is kept"
    );
}

fn repositories_outside_grants_are_guarded(r: &Runner) {
    let (deny, allow) = (false, true);
    check(
        r,
        "",
        &[
            (deny, "create", &["src/outside/.git/hooks/pre-commit"]),
            (deny, "write", &["src/outside/.git/config"]),
            // Anything else that points git at other hooks and config, or a copy of the git
            // folder swapped in: the whole git folder is guarded.
            (deny, "create", &["src/outside/.git/commondir"]),
            (deny, "create", &["src/outside/.git/config.worktree"]),
            (deny, "mkdir", &["src/outside/.git/modules"]),
            (deny, "write", &["src/outside/.git/HEAD"]),
            (
                deny,
                "rename",
                &["src/outside/.git", "src/outside/git.moved"],
            ),
            (allow, "read", &["src/outside/.git/config"]),
            (allow, "read", &["src/outside/.git/HEAD"]),
            (allow, "create", &["src/outside/tracked.txt"]),
            // Its project settings that exist: hooks and MCP servers a CLI obeys there.
            (deny, "write", &["src/outside/.claude/settings.json"]),
            (deny, "create", &["src/outside/.claude/settings.local.json"]),
            (deny, "write", &["src/outside/.mcp.json"]),
            (allow, "read", &["src/outside/.mcp.json"]),
        ],
    );
    // git itself: outside the grants the history reads but does not change, and inside the
    // granted workflow a repository made in the sandbox takes a hook and a config change.
    let h = home(r, "");
    let script = "set -e
        cd \"$HOME/src/outside\" && echo a > a.txt && git status --short | grep -q a.txt
        if git add a.txt 2>/dev/null; then echo ADDED-OUTSIDE; fi
        if git config core.fsmonitor 'touch $HOME/fsmonitor-ran' 2>/dev/null; then echo FSMONITOR-SET; fi
        cd \"$HOME/work/wf\" && git init -q repo && cd repo
        printf '#!/bin/sh\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit
        git config core.fsmonitor false && echo b > b.txt && git add b.txt
        git -c user.name=t -c user.email=t@t commit -qm two && echo INSIDE-OK";
    let out = run(r, &h, true, "/bin/sh", &["-c", script]);
    let t = text(&out);
    assert!(t.contains("INSIDE-OK"), "as uid {}: {t}", r.uid);
    assert!(
        !t.contains("FSMONITOR-SET"),
        "core.fsmonitor was set outside the grants: {t}"
    );
    assert!(
        !t.contains("ADDED-OUTSIDE"),
        "the index of a repository outside the grants changed: {t}"
    );
    // The control: the same `git add` unconfined changes the index.
    let outside = run(
        r,
        &h,
        false,
        "/bin/sh",
        &[
            "-c",
            "cd \"$HOME/src/outside\" && git add a.txt && echo ADDED",
        ],
    );
    assert!(text(&outside).contains("ADDED"), "{}", text(&outside));
}

fn the_guard_turned_off_guards_nothing(r: &Runner) {
    let allow = true;
    check(
        r,
        "[autorun]\nguard = false\n",
        &[
            (allow, "write", &[".bashrc"]),
            (allow, "create", &[".config/fish"]),
            (allow, "create", &["src/outside/.git/hooks/pre-commit"]),
            (allow, "write", &["src/outside/.git/HEAD"]),
        ],
    );
}

/// Inside: tries to kill the sandbox's own helpers (each refused), says it is ready, waits until
/// the driver outside has replaced the files and each target is a mount point again, then
/// tries to write each target (a file appended to, a folder created in) and prints the
/// verdicts and what `~/.bashrc` holds, as JSON.
const AFTER_REPLACEMENT_PY: &str = r#"
import errno, json, os, sys, time
home, sync, targets = sys.argv[1], sys.argv[2], sys.argv[3:]
kills = []
for p in os.listdir("/proc"):
    if not p.isdigit() or int(p) in (1, os.getpid()):
        continue
    try:
        comm = open(f"/proc/{p}/comm").read().strip()
    except OSError:
        continue
    if comm.startswith("sandboxer"):
        try:
            os.kill(int(p), 9)
            kills.append("killed")
        except OSError as e:
            kills.append(errno.errorcode[e.errno])
open(f"{sync}/ready", "w").close()
deadline = time.time() + 20
def mount_points():
    return {line.split(" ")[4] for line in open("/proc/self/mountinfo")}
while not os.path.exists(f"{sync}/replaced") or not set(targets) <= mount_points():
    if time.time() > deadline:
        print("TIMEOUT", os.path.exists(f"{sync}/replaced"), sorted(set(targets) - mount_points()))
        sys.exit(3)
    time.sleep(0.01)
writes = {}
for t in targets:
    try:
        if os.path.isdir(t):
            fd = os.open(os.path.join(t, "planted"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o755)
        else:
            fd = os.open(t, os.O_WRONLY | os.O_APPEND)
        os.write(fd, b"planted\n")
        os.close(fd)
        writes[t] = "written"
    except OSError as e:
        writes[t] = errno.errorcode[e.errno]
print(json.dumps({"kills": kills, "writes": writes, "bashrc": open(home + "/.bashrc").read()}))
"#;

/// Starts `program args` confined in `h` (in the background), waits for it to create
/// `<sync>/ready`, runs `outside` (a shell script) unconfined as the runner with `SYNC` set,
/// and returns how the confined program ended.
fn while_confined(
    r: &Runner,
    h: &Home,
    program: &str,
    args: &[&str],
    outside: &str,
) -> std::process::Output {
    let sync = h.root.join("sync");
    fs::create_dir_all(&sync).unwrap();
    chown(&sync, Some(r.uid), Some(r.gid)).unwrap();
    let mut c = r.command(r.reachable(Path::new(env!("CARGO_BIN_EXE_sandboxer"))));
    c.arg("exec")
        .arg("--policy")
        .arg(&h.policy)
        .arg("--")
        .arg(program)
        .args(args)
        .env("HOME", &h.home)
        .env("PATH", PATH)
        .env("LANG", "C.UTF-8")
        .env("SYNC", &sync)
        .current_dir(&h.root)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = c.spawn().unwrap();
    let started = std::time::Instant::now();
    while !sync.join("ready").exists() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the confined program never got ready: {}",
            text(&child.wait_with_output().unwrap())
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let driver = r
        .command("/bin/sh")
        .args(["-c", outside])
        .env("HOME", &h.home)
        .env("PATH", PATH)
        .env("SYNC", &sync)
        .output()
        .unwrap();
    assert!(
        driver.status.success(),
        "the driver outside failed: {}",
        text(&driver)
    );
    child.wait_with_output().unwrap()
}

/// A program outside that saves a guarded file the usual way (a new file renamed over it),
/// replaces a guarded folder, removes a guarded file or replaces a placeholder detaches the
/// guard's mount on that path in every mount namespace; the sandbox's guard watcher puts a
/// guard back on what is there now, so the command still cannot write any of them, and the
/// sandbox's own helpers cannot be killed from inside. Afterwards the person's new files are
/// theirs (and writable to them: the control), and what stood in for the removed file is gone.
fn guarded_paths_replaced_outside_are_guarded_again(r: &Runner) {
    let h = home(r, "");
    let script = h.root.join("after.py");
    fs::write(&script, AFTER_REPLACEMENT_PY).unwrap();
    let hm = |p: &str| h.home.join(p).to_str().unwrap().to_string();
    let targets = [
        hm(".bashrc"),
        hm(".ssh"),
        hm(".profile"),
        hm(".claude/settings.json"),
    ];
    let mut args = vec![script.to_str().unwrap(), h.home.to_str().unwrap(), ""];
    let sync = h.root.join("sync");
    args[2] = sync.to_str().unwrap();
    args.extend(targets.iter().map(String::as_str));
    let outside = r#"set -e
        cd "$HOME"
        printf 'new bashrc\n' > .bashrc.tmp && mv .bashrc.tmp .bashrc
        mv .ssh .ssh.old && mkdir -p .ssh
        printf 'Host *\n' > .ssh/config
        rm .profile
        printf '{"theme": "dark"}\n' > .claude/settings.tmp
        mv .claude/settings.tmp .claude/settings.json
        touch "$SYNC/replaced""#;
    let out = while_confined(r, &h, "/usr/bin/python3", &args, outside);
    let t = text(&out);
    assert!(out.status.success(), "as uid {}: {t}", r.uid);
    let report: Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no report: {t}"));
    for kill in report["kills"].as_array().unwrap() {
        assert_eq!(
            kill, "EPERM",
            "a helper of the sandbox was killed from inside: {t}"
        );
    }
    for target in &targets {
        assert_eq!(
            report["writes"][target], "EROFS",
            "as uid {}: {target} after its replacement outside: {t}",
            r.uid
        );
    }
    assert_eq!(
        report["bashrc"],
        "new bashrc
",
        "the sandbox reads the new file"
    );
    // Afterwards: the person's files as they left them, the stand-in for the removed one gone.
    assert_eq!(
        fs::read_to_string(h.home.join(".claude/settings.json")).unwrap(),
        "{\"theme\": \"dark\"}\n"
    );
    assert!(
        !h.home.join(".profile").exists(),
        "the stand-in for ~/.profile was left behind"
    );
    assert!(!h.home.join(".ssh/planted").exists());
    // The control: unconfined, the same writes succeed.
    let control = r
        .command("/bin/sh")
        .args([
            "-c",
            r#"echo planted >> "$HOME/.bashrc" && echo planted > "$HOME/.ssh/planted" && echo planted >> "$HOME/.claude/settings.json""#,
        ])
        .env("HOME", &h.home)
        .output()
        .unwrap();
    assert!(control.status.success(), "control: {}", text(&control));
}

/// A command that holds a file open for writing when a program outside moves that file onto a
/// guarded path (the command opened the outside program's temporary file) could write it from
/// then on: the sandbox is stopped (137) with the reason. So is one whose guarded path is
/// removed outside where nothing may stand in for it (a symlinked dotfile).
fn a_sandbox_holding_a_replaced_file_open_is_stopped(r: &Runner) {
    let h = home(r, "");
    let held = while_confined(
        r,
        &h,
        "/bin/sh",
        &[
            "-c",
            r#"exec 3>>"$HOME/bashrc.tmp"; touch "$SYNC/ready"; sleep 20; echo NOT-STOPPED"#,
        ],
        r#"mv "$HOME/bashrc.tmp" "$HOME/.bashrc""#,
    );
    let t = text(&held);
    assert_eq!(held.status.code(), Some(137), "as uid {}: {t}", r.uid);
    assert!(
        t.contains(".bashrc") && t.contains("open for writing") && !t.contains("NOT-STOPPED"),
        "{t}"
    );
    let h = home(r, "");
    let removed = while_confined(
        r,
        &h,
        "/bin/sh",
        &["-c", r#"touch "$SYNC/ready"; sleep 20; echo NOT-STOPPED"#],
        r#"rm "$HOME/.tmux.conf""#,
    );
    let t = text(&removed);
    assert_eq!(removed.status.code(), Some(137), "as uid {}: {t}", r.uid);
    assert!(
        t.contains(".tmux.conf") && t.contains("nothing may stand in"),
        "{t}"
    );
}

/// A guarded dotfile that is a hard link of a file elsewhere in the home (a dotfile manager's
/// way): the sandbox could write it through the other name, so the launch is refused (125,
/// naming the gap and the file) and nothing runs; the control, the same home without the
/// second name, runs. The escape itself, unconfined: writing the other name changes
/// `~/.bashrc`.
fn a_guarded_file_with_another_name_refuses_the_launch(r: &Runner) {
    let h = home(r, "");
    let ran = run(r, &h, true, "/bin/sh", &["-c", "echo RAN"]);
    assert!(text(&ran).contains("RAN"), "control: {}", text(&ran));
    fs::hard_link(h.home.join(".bashrc"), h.home.join("dotfiles/bashrc")).unwrap();
    let refused = run(
        r,
        &h,
        true,
        "/bin/sh",
        &["-c", "echo RAN >> \"$HOME/dotfiles/bashrc\""],
    );
    let t = text(&refused);
    assert_eq!(refused.status.code(), Some(125), "as uid {}: {t}", r.uid);
    assert!(
        t.contains("autorun-hard-links") && t.contains(".bashrc"),
        "{t}"
    );
    assert_eq!(
        fs::read_to_string(h.home.join(".bashrc")).unwrap(),
        "original\n",
        "nothing ran"
    );
    let outside = run(
        r,
        &h,
        false,
        "/bin/sh",
        &["-c", "echo RAN >> \"$HOME/dotfiles/bashrc\""],
    );
    assert!(outside.status.success(), "{}", text(&outside));
    assert!(
        fs::read_to_string(h.home.join(".bashrc"))
            .unwrap()
            .contains("RAN")
    );
}

/// `~/.config` a symlink into a dotfiles folder (GNU stow's, chezmoi's way): the guarded paths
/// beneath it are guarded where the link leads, and the link itself cannot be pointed
/// elsewhere or moved aside for a real folder in which they would be made anew.
fn a_symlink_on_the_way_to_a_guarded_path_stays(r: &Runner) {
    let linked = |h: &Home| {
        fs::remove_dir(h.home.join(".config")).unwrap();
        fs::create_dir_all(h.home.join("dotfiles/config/git")).unwrap();
        fs::write(h.home.join("dotfiles/config/git/config"), "[user]\n").unwrap();
        std::os::unix::fs::symlink("dotfiles/config", h.home.join(".config")).unwrap();
        chown_tree(&h.root, r.uid, r.gid);
    };
    let (deny, allow) = (false, true);
    let cases: &[Case] = &[
        (allow, "read", &[".config/git/config"]),
        (allow, "create", &[".config/notes.txt"]),
        (deny, "write", &[".config/git/config"]),
        (deny, "rename", &[".config", "config.moved"]),
        (deny, "delete", &[".config"]),
        (deny, "exchange", &[".config", "notes.txt"]),
    ];
    let inside = check_in(r, "", cases, &|h, _| linked(h));
    assert!(
        inside.home.join(".config").is_symlink(),
        "the link is still there"
    );
}

/// A policy that turns the guard off does not read the autorun list at all: a list that could
/// not be loaded stops only the policies that apply it.
#[test]
fn a_policy_without_the_guard_does_not_read_the_list() {
    let dir = tempfile::tempdir().unwrap();
    let profiles = dir.path().join("profiles");
    fs::create_dir_all(&profiles).unwrap();
    fs::write(
        profiles.join("autorun.toml"),
        "version = 1\n[[guard]]\npath = 3\n",
    )
    .unwrap();
    let run = |extra: &str| {
        let policy = dir.path().join("policy.toml");
        fs::write(
            &policy,
            format!("version = 1\nbase = \"open\"\n[linux]\nways_out = false\n{extra}"),
        )
        .unwrap();
        Command::new(env!("CARGO_BIN_EXE_sandboxer"))
            .arg("exec")
            .arg("--profiles-dir")
            .arg(&profiles)
            .arg("--policy")
            .arg(&policy)
            .args(["--", "/bin/true"])
            .env("HOME", dir.path())
            .output()
            .unwrap()
    };
    let guarded = run("");
    assert!(!guarded.status.success(), "the broken list was not read");
    assert!(
        String::from_utf8_lossy(&guarded.stderr).contains("autorun.toml"),
        "{}",
        text(&guarded)
    );
    let off = run("[autorun]\nguard = false\n");
    assert!(off.status.success(), "{}", text(&off));
}
