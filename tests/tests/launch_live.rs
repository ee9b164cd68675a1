//! `dispatcher launch` for real: the owner-testing cases from a chat's runtime, live on this
//! kernel as root and as the unprivileged user `sbx-test`, and in the macOS profile by the
//! SBPL evaluator; the real CLIs starting inside the sandbox; a real MCP client (the MCP
//! Inspector) using the bridge from inside a full-mode launch; bad input changing nothing.
#![cfg(target_os = "linux")]

use agentworks_e2e::{
    SH_ADAPTER, Who, as_root_and_user, as_test_user, chown_r, clis_dir, copy_binaries,
    dispatcher_bin, inspector_js, require_root, test_user_ids, text, world_dir,
};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const MARKER: &str = "MARKER-7f3a9c-PROTECTED";
/// What a wrapped CLI prints, from inside the sandbox, when the login file is out of its reach.
const CONFINED: &str = "confined: the login file is out of reach";

/// A private world for one test: a temp folder reachable by the runner, a home, a state root
/// with two chats and three workflows, marker tokens in protected files, the binaries copied
/// where the runner can execute them.
struct World {
    _tmp: tempfile::TempDir,
    who: Who,
    home: PathBuf,
    state: PathBuf,
    profiles: PathBuf,
    bin: PathBuf,
    sandboxer: PathBuf,
}

impl World {
    fn new(who: Who) -> World {
        require_root();
        let ids = match who {
            Who::Root => (0, 0),
            Who::User => test_user_ids(),
        };
        let tmp = world_dir("aw-launch-");
        let root = tmp.path().to_path_buf();
        let bin = root.join("bin");
        copy_binaries(&bin);
        let profiles = root.join("profiles");
        fs::create_dir_all(profiles.join("clis")).unwrap();
        fs::write(profiles.join("clis/sh.toml"), SH_ADAPTER).unwrap();
        let home = root.join("home");
        fs::create_dir(&home).unwrap();
        chown_r(&root, ids);
        let w = World {
            sandboxer: bin.join("sandboxer"),
            bin,
            who,
            home,
            state: root.join("state-root"),
            profiles,
            _tmp: tmp,
        };
        for args in [
            vec!["init"],
            vec!["workflow", "add", "wf-main"],
            vec!["workflow", "add", "wf-ref"],
            vec!["workflow", "add", "wf-other"],
            vec!["chat", "add", "chat-1"],
            vec!["chat", "add", "chat-2"],
        ] {
            let out = w.dispatcher(&args);
            assert!(out.status.success(), "{args:?}: {}", text(&out));
        }
        w.as_runner(&format!(
            "echo {MARKER} > {s}/state/cli-runtimes/v1/chat-2/secret.txt && \
             echo {MARKER} > {s}/state/auth/login.json && \
             echo {MARKER} > {s}/workspace-docs/wf-other/doc.md && \
             echo {MARKER} > {s}/personal-mcp/mcp.json && \
             mkdir {s}/workspace-docs/wf-main/planning && \
             echo {MARKER} > {s}/workspace-docs/wf-main/planning/plan.json && \
             echo shared > {s}/workspace-docs/wf-ref/ref.md && \
             echo home-ok > {h}/notes.txt",
            s = w.state.display(),
            h = w.home.display()
        ));
        w
    }

    fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = match self.who {
            Who::Root => Command::new(program),
            Who::User => as_test_user(program),
        };
        c.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &self.home)
            .env("SANDBOXER_BIN", &self.sandboxer)
            .env("XDG_RUNTIME_DIR", self.home.join(".run"))
            .current_dir(&self.home);
        c
    }

    fn dispatcher(&self, args: &[&str]) -> Output {
        self.dispatcher_on(&self.state)
            .arg("--profiles-dir")
            .arg(&self.profiles)
            .args(args)
            .output()
            .unwrap()
    }

    fn as_runner(&self, script: &str) {
        let out = self
            .command("/bin/sh")
            .args(["-c", script])
            .output()
            .unwrap();
        assert!(out.status.success(), "{script}: {}", text(&out));
    }

    /// Runs a shell script as the `sh` CLI inside chat-1's full-mode launch.
    fn inside(&self, script: &str) -> Output {
        self.launch_full("sh", &["-c", script])
    }

    /// Launches `cli` with `cli_args` for chat-1 on wf-main (wf-ref attached) in full mode.
    fn launch_full(&self, cli: &str, cli_args: &[&str]) -> Output {
        self.dispatcher(&chat_1_full(cli, &["--attach", "wf-ref"], cli_args))
    }

    /// The dispatcher as the runner, on the state root at `state`.
    fn dispatcher_on(&self, state: &Path) -> Command {
        let mut c = self.command(self.bin.join("dispatcher"));
        c.arg("--state-root").arg(state);
        c
    }
}

/// The arguments of a full-mode `launch` of `cli` for chat-1 on wf-main: `options` before
/// `--`, `cli_args` after.
fn chat_1_full<'a>(cli: &'a str, options: &[&'a str], cli_args: &[&'a str]) -> Vec<&'a str> {
    let chat = [
        "launch",
        "--cli",
        cli,
        "--chat",
        "chat-1",
        "--workflow",
        "wf-main",
    ];
    [&chat[..], options, &["--mode", "full", "--"], cli_args].concat()
}

/// The owner-testing cases: from the runtime, `..` reaches neither another chat's runtime,
/// nor config.json, nor state/auth, nor a new file beside the runtimes. Each refusal is
/// paired with a positive control in the same launch.
fn owner_cases(who: Who) {
    let w = World::new(who);
    let s = w.state.display();
    let script = format!(
        "pwd; \
         echo OK-RUNTIME > ./own.txt && cat ./own.txt; \
         echo OK-WORKFLOW > {s}/workspace-docs/wf-main/out.md && cat {s}/workspace-docs/wf-main/out.md; \
         cat {s}/workspace-docs/wf-ref/ref.md && echo OK-ATTACHED-READ; \
         echo x > {s}/workspace-docs/wf-ref/new.md && echo BAD-ATTACHED-WRITE; \
         cat \"$HOME/notes.txt\" && echo OK-HOME; \
         cat ../chat-2/secret.txt; \
         cat ../../../../config.json; \
         ls ../../../auth; cat ../../../auth/login.json; \
         cat {s}/workspace-docs/wf-other/doc.md; \
         cat {s}/workspace-docs/wf-main/planning/plan.json; \
         cat {s}/personal-mcp/mcp.json; \
         touch ../beside.txt && echo BAD-BESIDE; \
         touch {s}/workspace-docs/wf-main/workflow.db && echo BAD-REFUSED-CREATE; \
         exit 0"
    );
    let out = w.inside(&script);
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    for ok in ["OK-RUNTIME", "OK-WORKFLOW", "OK-ATTACHED-READ", "OK-HOME"] {
        assert!(all.contains(ok), "missing positive control {ok}:\n{all}");
    }
    assert!(!all.contains(MARKER), "a protected marker leaked:\n{all}");
    for bad in ["BAD-ATTACHED-WRITE", "BAD-BESIDE", "BAD-REFUSED-CREATE"] {
        assert!(!all.contains(bad), "{bad} succeeded:\n{all}");
    }
    let token = fs::read_to_string(w.state.join("config.json")).unwrap();
    let token = token.split("\"server_token\": \"").nth(1).unwrap()[..64].to_string();
    assert!(!all.contains(&token), "the server token leaked");
    // Disk-side evidence: nothing was created where it was refused, the allowed write landed.
    assert!(!w.state.join("state/cli-runtimes/v1/beside.txt").exists());
    assert!(!w.state.join("workspace-docs/wf-ref/new.md").exists());
    assert!(!w.state.join("workspace-docs/wf-main/workflow.db").exists());
    assert!(w.state.join("workspace-docs/wf-main/out.md").exists());
    // The positive control for the markers: outside the sandbox they are readable.
    let plain = w
        .command("/bin/cat")
        .arg(w.state.join("state/auth/login.json"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&plain.stdout).contains(MARKER));
}

as_root_and_user!(owner_cases => owner_cases_as_root, owner_cases_as_user);

/// A test adapter whose "CLI" is the MCP Inspector's command-line client: its private config
/// home gets the same MCP config as Claude Code's adapter (the bridge as the only server), and
/// it is pointed at that file, so the client, the shim it starts and the config all come from
/// a real full-mode launch.
const MCP_CLIENT_ADAPTER: &str = r#"
version = 1
name = "mcp-client"
display_name = "MCP Inspector CLI (tests)"
binary = "{bin}/mcp-client"
install = "scripts/install-mcp-inspector.sh"
checked_version = "2.12.0"
modes = ["full", "bridge-only"]
prompt_note_how = "not passed"
bridge_only_how = "not meaningful for an MCP client; tests only"
[config_home]
env = "MCP_CLIENT_TEST_HOME"
[[config_home.files]]
path = "mcp.json"
format = "json"
[config_home.files.content.mcpServers.agentworks]
command = "{bridge_command}"
args = ["bridge", "--socket", "{bridge_socket}"]
[args]
full = []
bridge_only = []
mcp = ["--config", "{config_home}/mcp.json", "--server", "agentworks"]
"#;

/// The MCP Inspector, started as a CLI by `dispatcher launch` in full mode: inside the real
/// sandbox it starts the bridge shim from its adapter-written MCP config, lists the tools and
/// calls them; the foreground dispatcher serves the chat's socket and decides each call.
fn mcp_client_inside_the_sandbox(who: Who) {
    let js = inspector_js();
    let w = World::new(who);
    let auth = w.state.join("state/auth/login.json");
    // The wrapper first shows it runs confined (the login file, readable outside, is not
    // readable here), then becomes the Inspector (with `--config`, it writes no catalog).
    let wrapper = w.bin.join("mcp-client");
    fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n\
             if cat '{auth}' >/dev/null 2>&1; then echo 'NOT CONFINED' >&2; exit 99; fi\n\
             exec node '{js}' --cli --format json \"$@\"\n",
            auth = auth.display(),
            js = js.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(
        w.profiles.join("clis/mcp-client.toml"),
        MCP_CLIENT_ADAPTER.replace("{bin}", &w.bin.display().to_string()),
    )
    .unwrap();

    let call = |args: &[&str]| -> (Option<i32>, serde_json::Value) {
        let out = w.launch_full("mcp-client", args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        // The Inspector prints one JSON document; the dispatcher's own lines come first.
        let json = stdout
            .find("\n{")
            .map(|i| &stdout[i + 1..])
            .or_else(|| stdout.starts_with('{').then_some(&stdout[..]))
            .unwrap_or_else(|| panic!("{args:?}: no JSON from the client\n{}", text(&out)));
        let v: serde_json::Value = serde_json::from_str(json.trim())
            .unwrap_or_else(|e| panic!("{args:?}: {e}\n{}", text(&out)));
        let result = v
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("{args:?}: no result\n{}", text(&out)));
        (out.status.code(), result)
    };
    let tool = |name: &str, json_args: serde_json::Value| {
        call(&[
            "--method",
            "tools/call",
            "--tool-name",
            name,
            "--tool-args-json",
            &json_args.to_string(),
        ])
    };
    let text_of =
        |r: &serde_json::Value| r["content"][0]["text"].as_str().unwrap_or("").to_string();

    let (code, list) = call(&["--method", "tools/list"]);
    assert_eq!(code, Some(0), "{list}");
    let names: Vec<_> = list["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["read_file", "write_file", "list_dir", "open_url"]);

    // Inside the grants: the attached workflow is readable, the chat's own is writable.
    let docs = w.state.join("workspace-docs");
    let (code, read) = tool(
        "read_file",
        serde_json::json!({"path": docs.join("wf-ref/ref.md")}),
    );
    assert_eq!((code, text_of(&read).trim()), (Some(0), "shared"), "{read}");
    let new = docs.join("wf-main/by-inspector.md");
    let (code, wrote) = tool(
        "write_file",
        serde_json::json!({"path": new, "content": "written through the sandbox", "create": true}),
    );
    assert_eq!(
        (code, &wrote["isError"]),
        (Some(0), &serde_json::json!(false)),
        "{wrote}"
    );
    assert_eq!(
        fs::read_to_string(&new).unwrap(),
        "written through the sandbox"
    );

    // Outside the grants: a clear MCP tool error, nothing read or written.
    let runtime = w.state.join("state/cli-runtimes/v1/chat-1");
    let refused = [
        ("read_file", serde_json::json!({"path": auth})),
        (
            "read_file",
            serde_json::json!({"path": runtime.join("../chat-2/secret.txt")}),
        ),
        (
            "list_dir",
            serde_json::json!({"path": w.state.join("state/auth")}),
        ),
        (
            "write_file",
            serde_json::json!({"path": docs.join("wf-ref/ref.md"), "content": "x"}),
        ),
        (
            "write_file",
            serde_json::json!({"path": docs.join("wf-other/new.md"), "content": "x", "create": true}),
        ),
    ];
    for (name, args) in refused {
        let (code, r) = tool(name, args.clone());
        assert_eq!(
            (code, &r["isError"]),
            (Some(5), &serde_json::json!(true)),
            "{name} {args}: {r}"
        );
        let msg = text_of(&r);
        assert!(msg.starts_with("refused: "), "{name} {args}: {r}");
        assert!(!msg.contains(MARKER), "{name} {args}: {r}");
    }
    assert_eq!(
        fs::read_to_string(docs.join("wf-ref/ref.md"))
            .unwrap()
            .trim(),
        "shared"
    );
    assert!(!docs.join("wf-other/new.md").exists());

    // Every call reached the dispatcher and is in the chat's event log with its verdict.
    let log = fs::read_to_string(w.state.join("state/events/chat-1.jsonl")).unwrap();
    let verdicts: Vec<(String, String)> = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["event"] == "bridge")
        .map(|e| {
            (
                e["call"]["tool"].as_str().unwrap().to_string(),
                e["call"]["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        verdicts
            .iter()
            .map(|(t, v)| format!("{t}:{v}"))
            .collect::<Vec<_>>(),
        [
            "read_file:allow",
            "write_file:allow",
            "read_file:deny",
            "read_file:deny",
            "list_dir:deny",
            "write_file:deny",
            "write_file:deny"
        ],
        "{log}"
    );
}

as_root_and_user!(
    mcp_client_inside_the_sandbox =>
    mcp_client_inside_the_sandbox_as_root,
    mcp_client_inside_the_sandbox_as_user
);

/// The same cases, for the macOS profile `dispatcher profile` writes, by the SBPL evaluator.
#[test]
fn owner_cases_in_the_macos_profile() {
    use sandboxer::sbpl::{self, Outcome, Query};
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("sr");
    let profiles = tmp.path().join("profiles");
    fs::create_dir_all(profiles.join("clis")).unwrap();
    fs::write(profiles.join("clis/sh.toml"), SH_ADAPTER).unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(dispatcher_bin())
            .arg("--state-root")
            .arg(&state)
            .arg("--profiles-dir")
            .arg(&profiles)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    run(&["init"]);
    run(&["workflow", "add", "wf-main"]);
    run(&["chat", "add", "chat-1"]);
    let out = tmp.path().join("chat.sb");
    run(&[
        "profile",
        "--cli",
        "sh",
        "--chat",
        "chat-1",
        "--workflow",
        "wf-main",
        "--target-os",
        "macos",
        "--user",
        "ada",
        "--uid",
        "501",
        "--out",
        out.to_str().unwrap(),
    ]);
    let profile = sbpl::parse(&fs::read_to_string(&out).unwrap(), &BTreeMap::new()).unwrap();
    let sr = fs::canonicalize(&state).unwrap();
    let sr = sandboxer::Target::Macos.apply_aliases(&sr);
    let runtime = sr.join("state/cli-runtimes/v1/chat-1");
    // The kernel resolves `..` before Seatbelt sees a path; so does the query.
    let check = |op: &str, p: PathBuf, want: Outcome| {
        let p = sandboxer::paths::normalize(&p).unwrap();
        let got = profile.evaluate(
            op,
            &Query::Path {
                path: &p,
                vnode: None,
            },
        );
        assert_eq!(got.outcome, want, "{op} {}: {}", p.display(), got.why);
    };
    check("file-write-data", runtime.join("own.txt"), Outcome::Allow);
    check(
        "file-read-data",
        runtime.join("../chat-2/secret.txt"),
        Outcome::Deny,
    );
    check("file-read-data", sr.join("config.json"), Outcome::Deny);
    check(
        "file-read-data",
        sr.join("state/auth/login.json"),
        Outcome::Deny,
    );
    check(
        "file-write-create",
        sr.join("state/cli-runtimes/v1/beside.txt"),
        Outcome::Deny,
    );
    check(
        "file-read-data",
        PathBuf::from("/Users/ada/notes.txt"),
        Outcome::Allow,
    );
    let sock = sr.join("state/cli-runtimes/v1/chat-2/bridge.sock");
    let got = profile.evaluate("network-outbound", &Query::UnixSocket(&sock));
    assert_eq!(got.outcome, Outcome::Deny, "{}", got.why);
    // The Mac's ways out, for --user ada --uid 501: the person's tmux server and Docker
    // Desktop's socket are refused; another uid's tmux folder is not theirs to protect.
    for (sock, want) in [
        ("/private/tmp/tmux-501/default", Outcome::Deny),
        ("/Users/ada/.docker/run/docker.sock", Outcome::Deny),
        ("/private/tmp/tmux-502/default", Outcome::Allow),
    ] {
        let got = profile.evaluate("network-outbound", &Query::UnixSocket(Path::new(sock)));
        assert_eq!(got.outcome, want, "{sock}: {}", got.why);
    }
}

/// Bad input: each a clear error, exit 2, nothing written.
#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("sr");
    let d = |args: &[&str]| {
        Command::new(dispatcher_bin())
            .env("HOME", tmp.path())
            .arg("--state-root")
            .arg(&state)
            .args(args)
            .output()
            .unwrap()
    };
    assert!(d(&["init"]).status.success());
    assert!(d(&["workflow", "add", "w"]).status.success());
    assert!(d(&["chat", "add", "c"]).status.success());
    let snapshot = || {
        let out = Command::new("find")
            .arg(&state)
            .arg("-printf")
            .arg("%p %s\n")
            .output()
            .unwrap();
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(String::from)
            .collect();
        lines.sort();
        lines
    };
    let before = snapshot();
    // `VERB --cli CLI --chat CHAT --workflow WF`, then `rest`.
    let cmd = |verb, cli, chat, wf, rest: &[&'static str]| {
        let named: [&'static str; 7] = [verb, "--cli", cli, "--chat", chat, "--workflow", wf];
        [&named[..], rest].concat()
    };
    let launch = |chat, wf, rest: &[&'static str]| cmd("launch", "claude", chat, wf, rest);
    let uid = ["--target-os", "macos", "--user", "ada", "--uid=-1"];
    let profile = cmd("profile", "claude", "c", "w", &uid);
    let nope = cmd("launch", "nope", "c", "w", &["--dry-run"]);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (profile, "invalid value '-1' for '--uid <N>'"),
        (nope, "unknown CLI \"nope\""),
        (launch("zz", "w", &[]), "unknown chat \"zz\""),
        (launch("c", "zz", &[]), "unknown workflow \"zz\""),
        (launch("../c", "w", &[]), "invalid chat id"),
        (launch("c", ".w", &[]), "invalid workflow id"),
        (launch("c", "w", &["--attach", "w2:rwx"]), "unknown access"),
        (launch("c", "w", &["--mode", "unconfined"]), "--mode"),
        (vec!["chat", "add", "a/b"], "invalid chat id"),
        (vec!["workflow", "add", "x y"], "invalid workflow id"),
    ];
    for (args, want) in &cases {
        let out = d(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: expected {want:?} in:\n{err}");
    }
    assert_eq!(
        snapshot(),
        before,
        "a refused command wrote into the state root"
    );

    // A state root that is a file, or someone's folder with content: refused, untouched.
    let file = tmp.path().join("file");
    fs::write(&file, "mine").unwrap();
    let out = Command::new(dispatcher_bin())
        .arg("--state-root")
        .arg(&file)
        .args(["chat", "list"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a state root"));
    let folder = tmp.path().join("docs");
    fs::create_dir(&folder).unwrap();
    fs::write(folder.join("essay.txt"), "mine").unwrap();
    for args in [&["init"][..], &["chat", "add", "c"][..]] {
        let out = Command::new(dispatcher_bin())
            .arg("--state-root")
            .arg(&folder)
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    }
    assert_eq!(
        fs::read_dir(&folder).unwrap().count(),
        1,
        "nothing written into the folder"
    );

    // An adapter with an error names file, line and field; nothing is written.
    let profiles = tmp.path().join("profiles");
    fs::create_dir_all(profiles.join("clis")).unwrap();
    fs::write(
        profiles.join("clis/sh.toml"),
        SH_ADAPTER.replace("full = []", "full = [\"{secret}\"]"),
    )
    .unwrap();
    let out = Command::new(dispatcher_bin())
        .arg("--state-root")
        .arg(&state)
        .arg("--profiles-dir")
        .arg(&profiles)
        .args(["launch", "--cli", "sh", "--chat", "c", "--workflow", "w"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("sh.toml:") && err.contains("args.full[0]") && err.contains("{secret}"),
        "{err}"
    );
    assert_eq!(snapshot(), before);
}

/// The real CLIs (installed by scripts/install-clis.sh) start inside the Linux sandbox in full
/// mode through `dispatcher launch`, read their private config home, and that home holds the
/// pre-trust and only our MCP server — never the person's own, planted in the test home.
#[test]
fn real_clis_start_confined() {
    let clis = clis_dir();
    let w = World::new(Who::Root);
    // The person's own MCP servers, which must never reach a chat.
    fs::create_dir_all(w.home.join(".codex")).unwrap();
    fs::write(
        w.home.join(".codex/config.toml"),
        "[mcp_servers.personal]\ncommand = \"/bin/false\"\n",
    )
    .unwrap();
    fs::write(
        w.home.join(".claude.json"),
        r#"{"mcpServers":{"personal":{"command":"/bin/false"}}}"#,
    )
    .unwrap();
    // Each CLI is reached through a wrapper of its name, first on PATH, that reports from
    // inside whether the login file (which the control below reads) is out of its reach, then
    // becomes the CLI: "confined" is that evidence, never the dispatcher's own banner, printed
    // before sandboxer starts.
    let auth = w.state.join("state/auth/login.json");
    let wrapped = w.bin.join("wrapped");
    fs::create_dir(&wrapped).unwrap();
    for cli in ["claude", "codex", "gemini", "pi", "opencode"] {
        let wrapper = wrapped.join(cli);
        fs::write(
            &wrapper,
            format!(
                "#!/bin/sh
                 if err=$(cat '{auth}' 2>&1 >/dev/null); then echo 'NOT CONFINED'; exit 99; fi
                 echo \"{CONFINED}: $err\"
                 exec '{real}' \"$@\"
",
                auth = auth.display(),
                real = clis.join(cli).display(),
            ),
        )
        .unwrap();
        fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).unwrap();
    }
    // The control: unconfined, the same user reads the login file.
    w.as_runner(&format!("grep -q {MARKER} '{}'", auth.display()));
    let path = format!(
        "{}:{}:/usr/local/bin:/usr/bin:/bin",
        wrapped.display(),
        clis.display()
    );
    // `must_succeed: false` is for a CLI that reads its config and then stops for want of a
    // login (Gemini exits 41 without one): its message is the evidence it read the private home.
    let launch_with = |cli: &str, args: &[&str], must_succeed: bool| {
        let out = w
            .dispatcher_on(&w.state)
            .env("PATH", &path)
            .args(chat_1_full(cli, &[], args))
            .output()
            .unwrap();
        let all = text(&out);
        assert!(
            !must_succeed || out.status.success(),
            "{cli} {args:?}: {all}"
        );
        assert!(
            all.contains("in full mode"),
            "{cli}: not in full mode:\n{all}"
        );
        assert!(
            all.contains(CONFINED) && !all.contains(MARKER),
            "{cli}: not confined:\n{all}"
        );
        all
    };
    let launch = |cli: &str, args: &[&str]| launch_with(cli, args, true);
    for (cli, version) in [
        ("claude", "2.1.332"),
        ("codex", "0.171.0"),
        ("gemini", "0.61.0"),
        ("pi", "0.73.1"),
        ("opencode", "1.18.33"),
    ] {
        let all = launch(cli, &["--version"]);
        assert!(all.contains(version), "{cli} --version:\n{all}");
    }
    let runtime = w.state.join("state/cli-runtimes/v1/chat-1");
    // Each reads its private config home: what it reports comes from there.
    let codex = launch("codex", &["mcp", "list"]);
    assert!(
        codex.contains("agentworks") && !codex.contains("personal"),
        "{codex}"
    );
    let claude = launch("claude", &["mcp", "list"]);
    assert!(!claude.contains("personal"), "{claude}");
    let gemini = launch_with("gemini", &["--list-extensions"], false);
    assert!(
        gemini.contains(&runtime.join("cli-home/gemini").display().to_string()),
        "{gemini}"
    );

    // The private config homes: pre-trusted, and the bridge as the only MCP server.
    let codex_cfg = fs::read_to_string(runtime.join("cli-home/codex/config.toml")).unwrap();
    assert!(
        codex_cfg.contains("trust_level = \"trusted\""),
        "{codex_cfg}"
    );
    assert_eq!(codex_cfg.matches("[mcp_servers.").count(), 1, "{codex_cfg}");
    assert!(codex_cfg.contains("[mcp_servers.agentworks]"));
    let claude_json = fs::read_to_string(runtime.join("cli-home/claude/.claude.json")).unwrap();
    assert!(
        claude_json.contains("hasTrustDialogAccepted"),
        "{claude_json}"
    );
    let claude_mcp: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(runtime.join("cli-home/claude/mcp.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        claude_mcp["mcpServers"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["agentworks"]
    );
    let trusted =
        fs::read_to_string(runtime.join("cli-home/gemini/.gemini/trustedFolders.json")).unwrap();
    assert!(
        trusted.contains(&runtime.display().to_string()),
        "{trusted}"
    );
}

/// The state root's identity: a look-alike at its path (the real one moved away, another
/// state root made elsewhere and moved in, as a confined process could have done had it been
/// able to move the folder) is refused by every command with an error that names the path and
/// what to do; the real one works again once back; a state root without an anchor is refused
/// until `dispatcher init` adopts it; and from inside a chat the anchor can be neither read
/// nor written nor moved (controls: outside it can).
fn state_root_identity(who: Who) {
    let w = World::new(who);
    let anchor = w.state.with_file_name(format!(
        ".{}.anchor",
        w.state.file_name().unwrap().to_str().unwrap()
    ));
    assert!(anchor.is_file(), "dispatcher init anchors the state root");
    let a = anchor.display();
    let inside = w.inside(&format!(
        "cat {a} && echo BAD-ANCHOR-READ; \
         echo x >> {a} && echo BAD-ANCHOR-WRITE; \
         mv {a} {a}.moved && echo BAD-ANCHOR-MOVE; \
         rm -f {a} && echo BAD-ANCHOR-REMOVE; \
         echo OK-INSIDE; exit 0"
    ));
    let all = text(&inside);
    assert!(all.contains("OK-INSIDE"), "{all}");
    for bad in [
        "BAD-ANCHOR-READ",
        "BAD-ANCHOR-WRITE",
        "BAD-ANCHOR-MOVE",
        "BAD-ANCHOR-REMOVE",
    ] {
        assert!(
            !all.contains(bad),
            "{bad} succeeded from inside a chat:\n{all}"
        );
    }
    assert!(!all.contains("agentworks-state-root-anchor"), "{all}");
    let before = fs::read_to_string(&anchor).unwrap();
    assert!(before.contains("agentworks-state-root-anchor"));
    // Control: outside, the same write works (undone at once).
    w.as_runner(&format!(
        "cp {a} {a}.bak && echo x >> {a} && mv {a}.bak {a}"
    ));
    assert_eq!(fs::read_to_string(&anchor).unwrap(), before);

    let list = w.dispatcher(&["chat", "list"]);
    assert!(
        list.status.success(),
        "the real state root works: {}",
        text(&list)
    );

    // A look-alike: the real root moved away, another made elsewhere and moved in.
    let s = w.state.display();
    let fake = w.state.with_file_name("look-alike");
    let real = w.state.with_file_name("real-moved");
    w.as_runner(&format!("mv {s} {}", real.display()));
    let made = w
        .dispatcher_on(&fake)
        .args(["--profiles-dir"])
        .arg(&w.profiles)
        .args(["init"])
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", text(&made));
    w.as_runner(&format!(
        "mv {f} {s} && {d} --state-root {s} chat add chat-1 >/dev/null 2>&1; true",
        f = fake.display(),
        d = w.bin.join("dispatcher").display()
    ));
    for args in [
        vec!["chat", "list"],
        chat_1_full("sh", &[], &["-c", "echo BAD-LAUNCHED"]),
    ] {
        let out = w.dispatcher(&args);
        let all = text(&out);
        assert!(!out.status.success(), "{args:?} used the look-alike: {all}");
        assert!(!all.contains("BAD-LAUNCHED"), "{all}");
        assert!(
            all.contains(&format!(
                "{s} is not the state root `dispatcher init` made here"
            )) && all.contains("--adopt"),
            "{args:?}: the error names the path and what to do: {all}"
        );
    }
    assert_eq!(
        fs::read_to_string(&anchor).unwrap(),
        before,
        "the anchor is untouched"
    );

    // The real one back: it works again.
    w.as_runner(&format!("rm -rf {s} && mv {} {s}", real.display()));
    let list = w.dispatcher(&["chat", "list"]);
    assert!(list.status.success(), "{}", text(&list));

    // Without an anchor (a state root from before anchors): refused until `init` adopts it.
    fs::remove_file(&anchor).unwrap();
    let out = w.dispatcher(&["chat", "list"]);
    assert!(
        !out.status.success() && text(&out).contains("has no anchor"),
        "{}",
        text(&out)
    );
    let init = w.dispatcher(&["init"]);
    assert!(init.status.success(), "{}", text(&init));
    let list = w.dispatcher(&["chat", "list"]);
    assert!(list.status.success(), "{}", text(&list));
}

as_root_and_user!(
    state_root_identity =>
    state_root_identity_as_root,
    state_root_identity_as_user
);

/// A second hard link to `config.json` (made outside any sandbox, say before the state root
/// was protected) would hand the server token to every chat: the launch is refused with an
/// error naming the file and the fix, and runs nothing; once the link is gone and the token
/// rotated it launches again, and the old link holds only the old token.
fn linked_secret_refuses_the_launch(who: Who) {
    let w = World::new(who);
    let config = w.state.join("config.json");
    let link = w.home.join("token-link.json");
    w.as_runner(&format!("ln {} {}", config.display(), link.display()));
    let launch = chat_1_full("sh", &[], &["-c", "echo LAUNCHED"]);
    let out = w.dispatcher(&launch);
    let all = text(&out);
    assert!(
        !out.status.success(),
        "launched with a linked secret: {all}"
    );
    assert!(!all.contains("LAUNCHED"), "{all}");
    assert!(
        all.contains(&format!("{} has 2 hard links", config.display()))
            && all.contains("--rotate-token"),
        "the error names the file and the fix: {all}"
    );
    let old = fs::read_to_string(&config).unwrap();
    fs::remove_file(&link).unwrap();
    let rotated = w.dispatcher(&["init", "--rotate-token"]);
    assert!(rotated.status.success(), "{}", text(&rotated));
    assert_ne!(fs::read_to_string(&config).unwrap(), old);
    // Control: the same launch runs once the link is gone.
    let out = w.dispatcher(&launch);
    assert!(
        out.status.success() && text(&out).contains("LAUNCHED"),
        "{}",
        text(&out)
    );
}

as_root_and_user!(
    linked_secret_refuses_the_launch =>
    linked_secret_refuses_the_launch_as_root,
    linked_secret_refuses_the_launch_as_user
);
