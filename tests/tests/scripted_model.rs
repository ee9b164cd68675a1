//! The five real CLIs against the scripted model, unconfined: each one's own shell tool runs
//! `echo` into a marker file and its own write tool writes a file. The verdict comes from the
//! disk (both files, with the right content) and from the model's record (each tool's result
//! reached the next request), never from what the CLI prints.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentworks_e2e::{clis_dir, dispatcher_bin};
use dispatcher::scripted_model::{Action, DONE_TEXT, Recorded, ScriptedModel, prompt};

/// A run that takes longer is stuck (a CLI waiting for approval, retrying a refused request).
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// One CLI's run: its own home, its working folder, the record of its requests.
struct Run {
    dir: tempfile::TempDir,
    model: ScriptedModel,
}

impl Run {
    fn new() -> Run {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("home")).unwrap();
        fs::create_dir_all(dir.path().join("work")).unwrap();
        let model = ScriptedModel::start(&dir.path().join("model.jsonl")).unwrap();
        Run { dir, model }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn base(&self) -> String {
        self.model.base_url()
    }

    /// The prompt: the shell writes `marker.txt`, the write tool `written.txt`.
    fn prompt(&self) -> String {
        let work = self.path("work");
        prompt(&[
            Action::Run {
                command: format!("echo shell-ok > {}", work.join("marker.txt").display()),
            },
            Action::Write {
                path: work.join("written.txt").display().to_string(),
                content: "write-ok".into(),
            },
        ])
    }

    /// `cli` with a clean environment: the real CLIs first on PATH, HOME the run's own.
    fn command(&self, cli: &str) -> Command {
        let bin = clis_dir();
        let mut cmd = Command::new(bin.join(cli));
        cmd.env_clear()
            .env(
                "PATH",
                format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()),
            )
            .env("HOME", self.path("home"))
            .env("LANG", "C.UTF-8")
            .current_dir(self.path("work"))
            .stdin(Stdio::null());
        cmd
    }

    fn write(&self, rel: &str, text: &str) {
        let path = self.path(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    /// Runs the CLI to its end and checks the disk and the record.
    fn check(
        self,
        cli: &str,
        mut cmd: Command,
        shell_tool: &str,
        write_tool: &str,
    ) -> Vec<Recorded> {
        let log = self.path("cli.log");
        let out = fs::File::create(&log).unwrap();
        cmd.stdout(out.try_clone().unwrap()).stderr(out);
        let started = Instant::now();
        let status = wait(cmd.spawn().unwrap(), RUN_TIMEOUT);
        eprintln!("{cli}: {:.2} s", started.elapsed().as_secs_f64());
        let output = fs::read_to_string(&log).unwrap_or_default();
        let record = Recorded::read_all(&self.path("model.jsonl")).unwrap_or_default();
        let context = format!("{cli} ({status:?}); its output:\n{output}\nthe record: {record:#?}");
        assert_eq!(status, Some(0), "{context}");

        let marker = fs::read_to_string(self.path("work/marker.txt"));
        assert_eq!(marker.ok().as_deref(), Some("shell-ok\n"), "{context}");
        let written = fs::read_to_string(self.path("work/written.txt"));
        // Codex's patch ends the file with a newline; the other write tools write it as given.
        assert_eq!(
            written.ok().as_deref().map(str::trim_end),
            Some("write-ok"),
            "{context}"
        );

        // Step N is a request carrying N tool results; a model router's request or a title
        // request (no tools) may come between, so the turns are looked for, not counted.
        let turn = |step: usize, tool: Option<&str>| {
            record
                .iter()
                .any(|r| r.step == step && r.tool.as_deref() == tool)
        };
        assert!(
            turn(0, Some(shell_tool)),
            "no {shell_tool} call at step 0: {context}"
        );
        assert!(
            turn(1, Some(write_tool)),
            "the shell's result did not reach a {write_tool} call: {context}"
        );
        let done = record
            .iter()
            .any(|r| r.step == 2 && r.tool.is_none() && r.answer == DONE_TEXT);
        assert!(
            done,
            "the write's result did not reach the final turn: {context}"
        );
        record
    }
}

/// The exit code, or `None` when killed at the timeout or by a signal.
fn wait(mut child: std::process::Child, timeout: Duration) -> Option<i32> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn claude_code_runs_bash_and_write() {
    let run = Run::new();
    let mut cmd = run.command("claude");
    cmd.env("ANTHROPIC_BASE_URL", run.base())
        .env("ANTHROPIC_API_KEY", "dummy")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .args(["-p", &run.prompt(), "--allowedTools", "Bash", "Write"]);
    run.check("claude", cmd, "Bash", "Write");
}

#[test]
fn codex_runs_exec_command_and_apply_patch() {
    let run = Run::new();
    // A catalog model slug: Codex declares apply_patch only for the models it knows.
    run.write(
        "codex/config.toml",
        &format!(
            r#"model = "gpt-5.5"
model_provider = "scripted"

[model_providers.scripted]
name = "scripted"
base_url = "{}/v1"
wire_api = "responses"
env_key = "SCRIPTED_MODEL_KEY"
supports_websockets = false

[features]
plugins = false
"#,
            run.base()
        ),
    );
    let mut cmd = run.command("codex");
    cmd.env("CODEX_HOME", run.path("codex"))
        .env("SCRIPTED_MODEL_KEY", "dummy")
        .args(["exec", "--skip-git-repo-check"])
        .arg("--dangerously-bypass-approvals-and-sandbox")
        .arg(run.prompt());
    run.check("codex", cmd, "exec_command", "apply_patch");
}

#[test]
fn gemini_cli_runs_run_shell_command_and_write_file() {
    let run = Run::new();
    run.write(
        "home/.gemini/settings.json",
        r#"{"security": {"auth": {"selectedType": "gemini-api-key"}}}"#,
    );
    let mut cmd = run.command("gemini");
    cmd.env("GOOGLE_GEMINI_BASE_URL", run.base())
        .env("GEMINI_API_KEY", "dummy")
        .args(["-p", &run.prompt(), "--yolo", "--skip-trust"]);
    let record = run.check("gemini", cmd, "run_shell_command", "write_file");
    // Its default model `auto` asks a router first (`…:generateContent`, a JSON schema).
    assert!(
        record.iter().any(|r| r.path.ends_with(":generateContent")),
        "{record:#?}"
    );
}

#[test]
fn pi_runs_bash_and_write() {
    let run = Run::new();
    run.write(
        "pi/models.json",
        &format!(
            r#"{{"providers": {{"scripted": {{"baseUrl": "{}/v1", "api": "openai-completions",
                "apiKey": "dummy", "models": [{{"id": "scripted"}}]}}}}}}"#,
            run.base()
        ),
    );
    let mut cmd = run.command("pi");
    cmd.env("PI_CODING_AGENT_DIR", run.path("pi"))
        .args(["--offline", "--provider", "scripted", "--model", "scripted"])
        .args(["-p", &run.prompt()]);
    run.check("pi", cmd, "bash", "write");
}

#[test]
fn opencode_runs_bash_and_write() {
    let run = Run::new();
    run.write(
        "home/.config/opencode/opencode.json",
        &format!(
            r#"{{"provider": {{"scripted": {{"npm": "@ai-sdk/openai-compatible",
                "name": "scripted", "options": {{"baseURL": "{}/v1", "apiKey": "dummy"}},
                "models": {{"scripted": {{"name": "scripted"}}}}}}}},
                "model": "scripted/scripted"}}"#,
            run.base()
        ),
    );
    let mut cmd = run.command("opencode");
    cmd.env("OPENCODE_DISABLE_PROJECT_CONFIG", "1").args([
        "run",
        "-m",
        "scripted/scripted",
        &run.prompt(),
    ]);
    let record = run.check("opencode", cmd, "bash", "write");
    // Its title request comes first, without tools: answered with a text.
    assert!(
        record.iter().any(|r| r.answer == "Scripted run"),
        "{record:#?}"
    );
}

/// The record is where a test reads a run's turns; it must name the wire of each request.
#[test]
fn the_record_names_each_request_s_wire() {
    let run = Run::new();
    let body = r#"{"model": "m", "stream": false, "messages": [{"role": "user",
        "content": "Go.\nAGENTWORKS-RUN: true\nEnd."}],
        "tools": [{"type": "function", "function": {"name": "bash",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]}"#;
    let answer = post(&run.model, "/v1/chat/completions", body);
    assert!(answer.contains(r#"\"command\":\"true\""#), "{answer}");
    let missing = post(&run.model, "/v1/unknown", "{}");
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
    let record = Recorded::read_all(&run.path("model.jsonl")).unwrap();
    let wires: Vec<Option<&str>> = record.iter().map(|r| r.wire.as_deref()).collect();
    assert_eq!(wires, vec![Some("chat"), None]);
}

fn post(model: &ScriptedModel, path: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(model.addr()).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// `dispatcher scripted-model`: the bound address is the first line on stdout; an address
/// off loopback is refused by name.
#[test]
fn the_command_prints_its_address_and_refuses_other_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("model.jsonl");
    let refused = Command::new(dispatcher_bin())
        .args(["scripted-model", "--listen", "0.0.0.0:0", "--record"])
        .arg(&record)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("0.0.0.0:0 is not a loopback address"),
        "{stderr}"
    );

    let mut server = Command::new(dispatcher_bin())
        .args(["scripted-model", "--record"])
        .arg(&record)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.take().unwrap()),
        &mut first,
    )
    .unwrap();
    let addr: std::net::SocketAddr = first.trim().parse().unwrap();
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{first}");
    let answer = std::net::TcpStream::connect(addr).map(|_| ());
    server.kill().unwrap();
    server.wait().unwrap();
    answer.unwrap();
}
