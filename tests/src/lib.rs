//! What the end-to-end tests share: the binaries under test, a private world folder for each
//! test with those binaries in it, the fake CLIs of `fixtures/`, the real CLIs and the MCP
//! Inspector that `scripts/test.sh` installs, and the test user ([`agentworks_test_user`]).
//!
//! A prerequisite that is missing fails the test (see [`missing`]): an end-to-end test that
//! cannot run is never reported as passed.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

pub use agentworks_test_user::*;

/// The fake CLIs of `fixtures/`: a shell script and its adapter, named `fake`.
#[derive(Clone, Copy, Debug)]
pub enum FakeCli {
    /// The server tests' CLI: its adapter passes `--no-tools` (bridge-only) or `--all-tools`
    /// (full), then `--bridge DISPATCHER SOCKET`, then the launch's `cli_args`: an action and
    /// its arguments.
    Tools,
    /// A CLI whose "model" does what it is asked: in headless runs the prompt is its last
    /// argument; it refuses the first time (the retry), then runs the script the prompt names
    /// with its shell, as a CLI's shell tool would. Without a prompt (the tmux shape) it waits
    /// like an interactive CLI. Its adapter logs in with `FAKE_MODEL_KEY`.
    Model,
}

impl FakeCli {
    fn files(self) -> (&'static str, &'static str) {
        match self {
            FakeCli::Tools => (
                include_str!("../fixtures/fake-cli.sh"),
                include_str!("../fixtures/fake-cli.toml"),
            ),
            FakeCli::Model => (
                include_str!("../fixtures/fake-model-cli.sh"),
                include_str!("../fixtures/fake-model-cli.toml"),
            ),
        }
    }

    /// Writes the script to `dir/fake-cli` and its adapter into `profiles/clis/fake.toml`
    /// (for `--profiles-dir profiles`).
    pub fn install(self, dir: &Path, profiles: &Path) {
        let (script, adapter) = self.files();
        let fake = dir.join("fake-cli");
        write_script(&fake, script);
        fs::create_dir_all(profiles.join("clis")).unwrap();
        let adapter = adapter.replace("{fake_cli}", &fake.display().to_string());
        fs::write(profiles.join("clis/fake.toml"), adapter).unwrap();
    }
}

/// The workspace's root folder.
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// A binary of the workspace, built beside this test binary (`target/<profile>/deps/…`):
/// `cargo nextest run --workspace` builds both with the tests that use them. Cargo builds
/// another package's binaries only when that package is tested too, so a binary older than a
/// file it was built from (cargo's dep-info beside it) fails the test rather than test old
/// code.
fn workspace_bin(name: &str) -> PathBuf {
    const REBUILD: &str = "run the tests with `cargo nextest run --workspace` (or `cargo build \
                           --workspace --bins` first)";
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let bin = profile_dir.join(name);
    let built = fs::metadata(&bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| panic!("{} is not built: {REBUILD}", bin.display()));
    // A test run again as the test user may not read a checkout under /root: the first run
    // has checked.
    let dep_info = fs::read_to_string(profile_dir.join(format!("{name}.d"))).unwrap_or_default();
    for source in dep_info_sources(&dep_info) {
        let changed = fs::metadata(&source).and_then(|m| m.modified());
        if let Ok(changed) = changed {
            assert!(
                changed <= built,
                "{} is older than {}: {REBUILD}",
                bin.display(),
                source.display()
            );
        }
    }
    bin
}

/// The files a dep-info line (`target: a b\ c …`) names.
fn dep_info_sources(dep_info: &str) -> Vec<PathBuf> {
    let Some((_, sources)) = dep_info.lines().next().and_then(|l| l.split_once(": ")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut current = String::new();
    let mut chars = sources.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => current.extend(chars.next()),
            ' ' => out
                .extend((!current.is_empty()).then(|| PathBuf::from(std::mem::take(&mut current)))),
            c => current.push(c),
        }
    }
    out.extend((!current.is_empty()).then(|| PathBuf::from(current)));
    out
}

/// The dispatcher binary under test.
pub fn dispatcher_bin() -> PathBuf {
    workspace_bin("dispatcher")
}

/// The sandboxer binary under test.
pub fn sandboxer_bin() -> PathBuf {
    workspace_bin("sandboxer")
}

/// A private folder for one test under `/tmp`, which every user may traverse (0755): a
/// checkout under /root is not reachable by the test user, nor is a 0700 temp folder.
pub fn world_dir(prefix: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Copies the dispatcher and sandboxer binaries into `bin` (created), where the test user can
/// execute them; returns the two copies.
pub fn copy_binaries(bin: &Path) -> (PathBuf, PathBuf) {
    fs::create_dir_all(bin).unwrap();
    let copy = |src: PathBuf, name: &str| {
        let dst = bin.join(name);
        fs::copy(&src, &dst).unwrap();
        dst
    };
    (
        copy(dispatcher_bin(), "dispatcher"),
        copy(sandboxer_bin(), "sandboxer"),
    )
}

/// Gives `path` and everything under it to `uid:gid` (`chown -R`).
pub fn chown_r(path: &Path, (uid, gid): (u32, u32)) {
    let st = std::process::Command::new("chown")
        .arg("-R")
        .arg(format!("{uid}:{gid}"))
        .arg(path)
        .status()
        .unwrap();
    assert!(st.success());
}

/// A test adapter (`profiles/clis/sh.toml` of a world): `/bin/sh` as the CLI, so a launch can
/// run any check under exactly the policy, cwd and environment a real CLI gets.
pub const SH_ADAPTER: &str = r#"
version = 1
name = "sh"
display_name = "POSIX shell (tests)"
binary = "/bin/sh"
install = "the OS"
checked_version = "any"
modes = ["full", "bridge-only"]
prompt_note_how = "not passed"
bridge_only_how = "not meaningful for a shell; tests only"
[config_home]
env = "SH_TEST_HOME"
[args]
full = []
bridge_only = []
"#;

/// Writes `text` to `path` as an executable script.
pub fn write_script(path: &Path, text: &str) {
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// The folder of the real, pinned CLIs `scripts/install-clis.sh` installs; fails the test when
/// they are not there.
pub fn clis_dir() -> PathBuf {
    let clis = repo().join(".tools/clis/bin");
    if !clis.join("codex").is_file() || !clis.join("claude").is_file() {
        missing("the real CLIs (scripts/install-clis.sh installs them)");
    }
    fs::canonicalize(clis).unwrap()
}

/// The MCP Inspector's command-line client `scripts/install-mcp-inspector.sh` installs; fails
/// the test when it is not there.
pub fn inspector_js() -> PathBuf {
    let js = repo().join(
        ".tools/mcp-inspector/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js",
    );
    if !js.is_file() {
        missing("the MCP Inspector (scripts/install-mcp-inspector.sh installs it)");
    }
    fs::canonicalize(js).unwrap()
}

/// A command's stdout as JSON; the command's output in the message when it is not.
pub fn json_of(o: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", text(o)))
}

/// The probes of a contract column (`{"results": [{"probe", "pass"}, …]}`) that failed.
pub fn failing_probes(col: &serde_json::Value) -> std::collections::BTreeSet<String> {
    col["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["pass"] == false)
        .map(|r| r["probe"].as_str().unwrap().to_string())
        .collect()
}

/// One run of a `dispatcher test …` command driving the real CLIs: a private home and
/// temporary folder, readable by the runner, and the dispatcher it may run.
pub struct CliWorld {
    pub dir: tempfile::TempDir,
    pub dispatcher: PathBuf,
}

impl CliWorld {
    /// A world under a fresh folder named `prefix…`, owned by the runner.
    pub fn new(runner: &Runner, prefix: &str) -> CliWorld {
        let dir = world_dir(prefix);
        for sub in ["home", "tmp"] {
            fs::create_dir(dir.path().join(sub)).unwrap();
        }
        let dispatcher = match runner.switch_to {
            Some(_) => copy_binaries(&dir.path().join("bin")).0,
            None => dispatcher_bin(),
        };
        let st = std::process::Command::new("chown")
            .arg("-R")
            .arg(format!("{}:{}", runner.uid, runner.gid))
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(st.success());
        CliWorld { dir, dispatcher }
    }

    /// `dispatcher ARGS… --tmp-dir TMP` as the runner, in a clean environment with the real
    /// CLIs first on PATH.
    pub fn dispatcher(&self, runner: &Runner, args: &[&str]) -> std::process::Command {
        let mut c = runner.command(&self.dispatcher);
        c.env(
            "PATH",
            format!(
                "{}:/usr/local/bin:/usr/bin:/bin",
                runnable_clis(runner).display()
            ),
        )
        .env("HOME", self.dir.path().join("home"))
        .env("USER", runner.switch_to.unwrap_or("root"))
        .env("LANG", "C.UTF-8")
        .current_dir(self.dir.path())
        .args(args)
        .arg("--tmp-dir")
        .arg(self.dir.path().join("tmp"));
        c
    }
}

/// The five CLIs that speak a public wire API, which the scripted model drives.
pub const FIVE_CLIS: [&str; 5] = ["claude", "codex", "gemini", "pi", "opencode"];

/// `dispatcher test COMMAND --provider CLI --json` for the five at once, each in a
/// [`CliWorld`] of its own named `prefix…`. `check` judges one CLI's output (a panic is that
/// CLI's failure, and the others still run); each one's time and the total are printed. Fails
/// with the CLIs that failed, or when all five together took more than `limit`.
pub fn five_at_once(
    runner: &Runner,
    prefix: &str,
    command: &str,
    limit: std::time::Duration,
    check: impl Fn(&str, &std::process::Output),
) {
    let started = std::time::Instant::now();
    let runs: Vec<_> = FIVE_CLIS
        .iter()
        .map(|cli| {
            let world = CliWorld::new(runner, prefix);
            let mut c = world.dispatcher(runner, &["test", command, "--provider", cli, "--json"]);
            std::thread::spawn(move || {
                let t = std::time::Instant::now();
                let out = c.output().unwrap();
                (world, out, t.elapsed())
            })
        })
        .collect();
    let mut failures = Vec::new();
    for (cli, run) in FIVE_CLIS.iter().zip(runs) {
        let (_world, out, took) = run.join().unwrap();
        eprintln!("{cli}: {:.1} s", took.as_secs_f64());
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(cli, &out))).is_err() {
            failures.push(*cli);
        }
    }
    let total = started.elapsed();
    eprintln!("all five together: {:.1} s", total.as_secs_f64());
    assert!(failures.is_empty(), "failed: {failures:?}");
    assert!(total < limit, "{total:?}");
}

/// [`clis_dir`], which the runner must be able to run (fails the test otherwise).
pub fn runnable_clis(runner: &Runner) -> PathBuf {
    let dir = clis_dir();
    if runner.switch_to.is_some()
        && !runner
            .command("/usr/bin/test")
            .arg("-x")
            .arg(dir.join("codex"))
            .status()
            .unwrap()
            .success()
    {
        missing(&format!(
            "the real CLIs in {} where the test user can run them",
            dir.display()
        ));
    }
    dir
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dep_info_names_each_source_once_with_escaped_spaces() {
        let line = "/t/debug/dispatcher: /r/src/main.rs /r/My\\ Files/a.rs /r/b.toml\n";
        assert_eq!(
            dep_info_sources(line),
            [
                PathBuf::from("/r/src/main.rs"),
                PathBuf::from("/r/My Files/a.rs"),
                PathBuf::from("/r/b.toml")
            ]
        );
        assert!(dep_info_sources("").is_empty());
    }
}
