//! The three ways a chat could make the dispatcher itself run its code outside the sandbox,
//! each tried for real, as root and as the unprivileged `sbx-test`: a `~/.tmux.conf` the
//! dispatcher's tmux server would load, a CLI binary in the home that `dispatcher clis` would
//! run, a `sandboxer` in the home that the next launch would run as its enforcer. Every
//! refusal is paired with a control showing the same thing works unconfined.
#![cfg(target_os = "linux")]

use agentworks_e2e::{
    SH_ADAPTER, Who, as_root_and_user, as_test_user, chown_r, copy_binaries, require_root,
    test_user_ids, text, world_dir, write_script,
};
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A home, a state root with two chats on one workflow, the binaries where the runner can run
/// them, and `sandboxer` copied into the home (`$SANDBOXER_BIN`), as `cargo install` puts it.
struct World {
    _tmp: tempfile::TempDir,
    who: Who,
    root: PathBuf,
    home: PathBuf,
    state: PathBuf,
    profiles: PathBuf,
    dispatcher: PathBuf,
    sandboxer: PathBuf,
}

impl World {
    fn new(who: Who) -> World {
        require_root();
        let tmp = world_dir("aw-autorun-");
        let root = tmp.path().to_path_buf();
        let (dispatcher, sandboxer) = copy_binaries(&root.join("bin"));
        let home = root.join("home");
        let home_bin = home.join(".cargo/bin");
        fs::create_dir_all(&home_bin).unwrap();
        fs::copy(&sandboxer, home_bin.join("sandboxer")).unwrap();
        fs::create_dir(root.join("tmp")).unwrap();
        let profiles = root.join("profiles");
        fs::create_dir_all(profiles.join("clis")).unwrap();
        fs::write(profiles.join("clis/sh.toml"), SH_ADAPTER).unwrap();
        if who == Who::User {
            chown_r(&root, test_user_ids());
        }
        let w = World {
            _tmp: tmp,
            who,
            state: root.join("state-root"),
            sandboxer: home_bin.join("sandboxer"),
            root,
            home,
            profiles,
            dispatcher,
        };
        for args in [
            &["init"][..],
            &["workflow", "add", "wf"],
            &["chat", "add", "chat-1"],
            &["chat", "add", "chat-2"],
        ] {
            let out = w.dispatcher(args);
            assert!(out.status.success(), "{args:?}: {}", text(&out));
        }
        w
    }

    /// `program` as the runner, with the world's home, PATH and enforcer.
    fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = match self.who {
            Who::Root => Command::new(program),
            Who::User => as_test_user(program),
        };
        let path = format!(
            "{}:/usr/local/bin:/usr/bin:/bin",
            self.local_bin().display()
        );
        c.env_clear()
            .env("PATH", path)
            .env("HOME", &self.home)
            .env("SANDBOXER_BIN", &self.sandboxer)
            .env("TMPDIR", self.root.join("tmp"))
            .current_dir(&self.home);
        c
    }

    fn dispatcher(&self, args: &[&str]) -> Output {
        self.command(&self.dispatcher)
            .arg("--state-root")
            .arg(&self.state)
            .arg("--profiles-dir")
            .arg(&self.profiles)
            .args(args)
            .output()
            .unwrap()
    }

    /// `script` as the runner, unconfined: the controls.
    fn outside(&self, script: &str) -> Output {
        self.command("/bin/sh")
            .args(["-c", script])
            .output()
            .unwrap()
    }

    /// `script` run by `sh` inside a full-mode launch of `chat`.
    fn inside(&self, chat: &str, script: &str) -> Output {
        self.dispatcher(&launch(chat, &["--", "-c", script]))
    }

    /// `~/.local/bin`, first on the world's PATH.
    fn local_bin(&self) -> PathBuf {
        self.home.join(".local/bin")
    }

    fn give_to_runner(&self, path: &Path) {
        if self.who == Who::User {
            chown_r(path, test_user_ids());
        }
    }
}

/// A full-mode launch of the `sh` CLI for `chat` on the world's workflow, then `rest`.
fn launch<'a>(chat: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let head = [
        "launch",
        "--cli",
        "sh",
        "--chat",
        chat,
        "--workflow",
        "wf",
        "--mode",
        "full",
    ];
    [&head[..], rest].concat()
}

fn wait_for(path: &Path, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while !path.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    path.exists()
}

/// A chat writes `~/.tmux.conf` with a `run-shell` line: the write is refused (the autorun
/// guard), and a `~/.tmux.conf` planted from outside is not loaded either by the dispatcher's
/// tmux server, which `dispatcher launch --tmux` of another chat starts. Control: tmux started
/// the ordinary way with the same home runs the line.
fn tmux_conf(who: Who) {
    let w = World::new(who);
    let ran = w.root.join("TMUX-CONF-RAN");
    let conf = w.home.join(".tmux.conf");
    let line = format!("run-shell 'touch {}'", ran.display());
    // Both exist: the chat's write changes a file, as an agent's would; the control is an
    // ordinary file beside it.
    let made = w.outside(&format!(
        "touch {c} {h}/notes.txt",
        c = conf.display(),
        h = w.home.display()
    ));
    assert!(made.status.success(), "{}", text(&made));
    let out = w.inside(
        "chat-1",
        &format!(
            "echo \"{line}\" > {c} && echo BAD-TMUX-CONF-WRITTEN; \
             echo ok > $HOME/notes.txt && echo OK-HOME-WRITE; exit 0",
            c = conf.display()
        ),
    );
    let written = text(&out);
    assert!(written.contains("OK-HOME-WRITE"), "control: {written}");

    // Planted from outside all the same: the control loads it, the dispatcher's server not.
    let planted = w.outside(&format!("echo \"{line}\" > {}", conf.display()));
    assert!(planted.status.success(), "{}", text(&planted));
    let control_socket = w.root.join("control.sock");
    let control = w.outside(&format!(
        "tmux -S {s} new-session -d 'sleep 30'",
        s = control_socket.display()
    ));
    assert!(control.status.success(), "{}", text(&control));
    let loaded = wait_for(&ran, Duration::from_secs(5));
    w.outside(&format!("tmux -S {} kill-server", control_socket.display()));
    assert!(loaded, "control: tmux did not load ~/.tmux.conf");
    fs::remove_file(&ran).unwrap();

    let started = w.dispatcher(&launch("chat-2", &["--tmux", "--", "-c", "sleep 5"]));
    assert!(started.status.success(), "{}", text(&started));
    let socket = w.state.join("tmux/default");
    assert!(socket.exists(), "{}", text(&started));
    let loaded = wait_for(&ran, Duration::from_millis(500));
    w.outside(&format!("tmux -S {} kill-server", socket.display()));
    assert!(
        !loaded,
        "the dispatcher's tmux server loaded ~/.tmux.conf and ran it outside"
    );
    assert!(
        !written.contains("BAD-TMUX-CONF-WRITTEN"),
        "a chat wrote ~/.tmux.conf:\n{written}"
    );
}

as_root_and_user!(tmux_conf => tmux_conf_as_root, tmux_conf_as_user);

/// A fake `claude` first on PATH, in the home, as a chat of an unguarded run could have left
/// it: it reads the state root's config.json (the server token) and plants a file in the state
/// root. `dispatcher clis` asks it its version inside the sandbox: it runs (its version line is
/// shown) and does neither. Control: run outside, it does both. And a chat cannot rewrite it.
fn rewritten_cli(who: Who) {
    let w = World::new(who);
    fs::create_dir_all(w.local_bin()).unwrap();
    let pwned = w.state.join("PWNED");
    let fake = w.local_bin().join("claude");
    write_script(
        &fake,
        &format!(
            "#!/bin/sh\nhead -c 40 {s}/config.json 2>/dev/null | tr -d '\\n'\ntouch {p} 2>/dev/null\necho\necho fake-claude 9.9.9\n",
            s = w.state.display(),
            p = pwned.display()
        ),
    );
    fs::write(w.local_bin().join("other"), "").unwrap();
    w.give_to_runner(&w.local_bin());

    let control = w.outside(fake.to_str().unwrap());
    assert!(pwned.exists(), "control: {}", text(&control));
    assert!(
        text(&control).contains("agentworks-state-root") || text(&control).contains('{'),
        "control: the fake could not read config.json outside: {}",
        text(&control)
    );
    fs::remove_file(&pwned).unwrap();

    let out = w.dispatcher(&["clis", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let claude = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "claude")
        .unwrap();
    assert_eq!(claude["binary"].as_str(), fake.to_str(), "{claude}");
    assert_eq!(
        claude["version"], "fake-claude 9.9.9",
        "the fake did not run, or read config.json: {claude}"
    );
    assert!(
        !pwned.exists(),
        "dispatcher clis ran the home's claude outside the sandbox"
    );

    // From inside a chat (claude is on the launch's PATH, so guarded), it cannot be rewritten,
    // nor can a program be dropped beside it (~/.local/bin is a folder of $PATH); an ordinary
    // file of the home is written (the control).
    let home = w
        .local_bin()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let out = w.inside(
        "chat-1",
        &format!(
            "echo x >> {f} && echo BAD-CLI-REWRITTEN; \
             echo x > {d}/other && echo BAD-PATH-FOLDER-WRITE; \
             echo x > {h}/ordinary.txt && echo OK-HOME-WRITE; exit 0",
            f = fake.display(),
            d = w.local_bin().display(),
            h = home.display()
        ),
    );
    let all = text(&out);
    assert!(all.contains("OK-HOME-WRITE"), "control: {all}");
    assert!(
        !all.contains("BAD-CLI-REWRITTEN"),
        "a chat rewrote a CLI:\n{all}"
    );
    assert!(
        !all.contains("BAD-PATH-FOLDER-WRITE"),
        "a chat dropped a program into ~/.local/bin:\n{all}"
    );
}

as_root_and_user!(rewritten_cli => rewritten_cli_as_root, rewritten_cli_as_user);

/// `sandboxer` in the home (`$SANDBOXER_BIN`): where a chat could have replaced it —
/// group-writable, or the autorun guard off — `full` is refused with the reason, and nothing
/// runs; otherwise a launch with it runs confined, and a chat cannot rewrite or move it.
fn replaced_sandboxer(who: Who) {
    let w = World::new(who);
    let s = w.sandboxer.display();
    let beside = w.outside(&format!("touch {s}.beside"));
    assert!(beside.status.success(), "{}", text(&beside));
    // In the chat's workflow, which a confined launch may write.
    let ran = w.state.join("workspace-docs/wf/RAN");
    let script = format!("touch {}", ran.display());
    let full = |w: &World| w.dispatcher(&launch("chat-2", &["--", "-c", &script]));

    // Writable by a group others share (root's: every gid-0 account); a group of its owner
    // alone would not count (dispatcher/src/programs.rs, `private_group`).
    std::os::unix::fs::chown(&w.sandboxer, None, Some(0)).unwrap();
    fs::set_permissions(&w.sandboxer, fs::Permissions::from_mode(0o775)).unwrap();
    let out = full(&w);
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(
        all.contains("the launch is refused") && all.contains("group- or world-writable"),
        "{all}"
    );
    assert!(
        all.contains(&s.to_string()),
        "the reason names the file: {all}"
    );
    assert!(!ran.exists(), "the refused launch ran its CLI");
    // `auto` does not fall back to running the CLI unconfined: a chat that can make the
    // enforcer untrusted (its folder `chmod 777`) would turn its own next launch unconfined.
    let mut auto = launch("chat-2", &["--", "-c", &script]);
    auto.retain(|a| *a != "--mode" && *a != "full");
    let out = w.dispatcher(&auto);
    let all = text(&out);
    assert!(!out.status.success(), "auto: {all}");
    assert!(
        all.contains("the launch is refused") && !all.contains("bridge-only mode"),
        "auto: {all}"
    );
    assert!(!ran.exists(), "the refused auto launch ran its CLI");
    // `dispatcher doctor` says so ahead of a launch, and how to fix it.
    let doctor = w.dispatcher(&["doctor"]);
    let said = text(&doctor);
    assert!(!doctor.status.success(), "{said}");
    assert!(
        said.contains("FAIL  enforcer (sandboxer)")
            && said.contains("group- or world-writable")
            && said.contains("fix: install it into a folder owned by root or by you"),
        "{said}"
    );
    fs::set_permissions(&w.sandboxer, fs::Permissions::from_mode(0o755)).unwrap();
    let doctor = w.dispatcher(&["doctor"]);
    assert!(doctor.status.success(), "control: {}", text(&doctor));

    let config = w.state.join("config.json");
    let mut c: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&config).unwrap()).unwrap();
    c["autorun"] = serde_json::json!({"guard": false});
    fs::write(&config, c.to_string()).unwrap();
    let out = full(&w);
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(
        all.contains("full mode refused") && all.contains("lets a chat write"),
        "{all}"
    );
    assert!(!ran.exists(), "the refused launch ran its CLI");

    // Control: the guard on again, the same launch runs, confined.
    c["autorun"] = serde_json::json!({"guard": true});
    fs::write(&config, c.to_string()).unwrap();
    let out = full(&w);
    assert!(out.status.success(), "{}", text(&out));
    assert!(ran.exists(), "{}", text(&out));

    // The attack itself: from inside a chat, the enforcer cannot be rewritten or moved.
    let out = w.inside(
        "chat-1",
        &format!(
            "echo x >> {s} && echo BAD-ENFORCER-WRITE; \
             mv {s} {s}.away && echo BAD-ENFORCER-MOVE; \
             echo x > {s}.beside && echo OK-FOLDER-WRITE; exit 0"
        ),
    );
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(all.contains("OK-FOLDER-WRITE"), "control: {all}");
    for bad in ["BAD-ENFORCER-WRITE", "BAD-ENFORCER-MOVE"] {
        assert!(
            !all.contains(bad),
            "{bad}: a chat replaced the enforcer:\n{all}"
        );
    }
    let control = w.outside(&format!("echo x >> {s}.beside && echo OK-OUTSIDE"));
    assert!(text(&control).contains("OK-OUTSIDE"), "{}", text(&control));
}

as_root_and_user!(
    replaced_sandboxer => replaced_sandboxer_as_root, replaced_sandboxer_as_user
);
