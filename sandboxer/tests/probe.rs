//! `sandboxer probe`, the contract's harness: it loads query files against a vars file (load
//! errors name the file, line and field), runs each probe in its own process and reports raw
//! facts only; inside `sandboxer exec` the facts change as the policy says. Verdicts are not
//! its business (the dispatcher's contract runner decides from evidence).
#![cfg(target_os = "linux")]

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn sandboxer() -> &'static str {
    env!("CARGO_BIN_EXE_sandboxer")
}

fn write_vars(dir: &Path, vars: &[(&str, String)]) -> std::path::PathBuf {
    let map: serde_json::Map<String, Value> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(v.clone())))
        .collect();
    let p = dir.join("vars.json");
    fs::write(
        &p,
        serde_json::json!({"run_id": "t1", "vars": map}).to_string(),
    )
    .unwrap();
    p
}

/// `sandboxer probe --json` of `queries` with `vars`, added to `c`.
fn probe_args<'a>(c: &'a mut Command, queries: &Path, vars: &Path) -> &'a mut Command {
    c.args(["probe", "--json", "--queries"])
        .arg(queries)
        .arg("--vars")
        .arg(vars)
}

fn probe(queries: &Path, vars: &Path) -> Output {
    probe_args(&mut Command::new(sandboxer()), queries, vars)
        .output()
        .unwrap()
}

/// The report of a probe run that succeeded.
fn report(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The stderr of a probe run refused with exit 2.
fn refused(queries: &Path, vars: &Path) -> String {
    let out = probe(queries, vars);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    err
}

const QUERIES: &str = r#"version = 1

[[probe]]
name = "open-read"
op = "read"
target = "{dir}/open/file.txt"
linux = { expect = "allow", why = "open" }

[[probe]]
name = "secret-read"
op = "read"
target = "{dir}/secret/file.txt"
linux = { expect = "deny", why = "protected" }

[[probe]]
name = "secret-create"
op = "create"
target = "{dir}/secret/new.txt"
linux = { expect = "deny", why = "protected" }

[[probe]]
name = "open-create"
op = "create"
target = "{dir}/open/new.txt"
linux = { expect = "allow", why = "open" }

[[probe]]
name = "mac-only"
op = "lsopen"
target = "{dir}/open/file.txt"
macos = { expect = "deny", why = "launchers" }
"#;

fn world() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let t = tempfile::Builder::new()
        .prefix("aw-probe-")
        .tempdir_in("/tmp")
        .unwrap();
    let dir = fs::canonicalize(t.path()).unwrap();
    for d in ["open", "secret"] {
        fs::create_dir(dir.join(d)).unwrap();
        fs::write(dir.join(d).join("file.txt"), format!("MARK-{d}\n")).unwrap();
    }
    let q = dir.join("q.toml");
    fs::write(&q, QUERIES).unwrap();
    let v = write_vars(&dir, &[("dir", dir.display().to_string())]);
    (t, q, v)
}

fn result<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("{name} not reported: {report}"))
}

#[test]
fn unconfined_it_reports_what_happened() {
    let (_t, q, v) = world();
    let out = probe(&q, &v);
    let r = report(&out);
    assert_eq!(r["run_id"], "t1");
    assert_eq!(result(&r, "secret-read")["claim"], "done");
    assert_eq!(result(&r, "secret-read")["output"], "MARK-secret\n");
    assert_eq!(result(&r, "open-create")["claim"], "done");
    let made = fs::read_to_string(q.parent().unwrap().join("open/new.txt")).unwrap();
    assert_eq!(made, "AWTOKEN-t1-open-create\n");
    // A macOS mechanism is not run on Linux; the report says so instead of guessing.
    assert_eq!(result(&r, "mac-only")["claim"], "skipped");
    // No verdict anywhere in the report: only claims and facts.
    assert!(!String::from_utf8_lossy(&out.stdout).contains("\"verdict\""));
}

#[test]
fn inside_sandboxer_exec_the_facts_follow_the_policy() {
    let (_t, q, v) = world();
    let dir = q.parent().unwrap();
    let policy = dir.join("policy.toml");
    fs::write(
        &policy,
        format!(
            "version = 1\nbase = \"open\"\n[[protected]]\npath = \"{}\"\n[linux]\nways_out = false\n",
            dir.join("secret").display()
        ),
    )
    .unwrap();
    let mut exec = Command::new(sandboxer());
    exec.args(["exec", "--policy"])
        .arg(&policy)
        .arg("--cwd")
        .arg(dir)
        .arg("--")
        .arg(sandboxer());
    let out = probe_args(&mut exec, &q, &v)
        .env("HOME", dir)
        .output()
        .unwrap();
    let r = report(&out);
    let secret = result(&r, "secret-read");
    assert_eq!(secret["claim"], "failed", "{secret}");
    assert!(secret["errno"].as_i64().is_some());
    assert!(!secret.to_string().contains("MARK-secret"));
    assert_eq!(result(&r, "secret-create")["claim"], "failed");
    assert!(!dir.join("secret/new.txt").exists());
    assert_eq!(result(&r, "open-read")["output"], "MARK-open\n");
    assert_eq!(result(&r, "open-create")["claim"], "done");
}

#[test]
fn bad_queries_and_vars_are_refused_with_file_line_and_field() {
    let (_t, q, v) = world();
    let dir = q.parent().unwrap();
    let bad = dir.join("bad.toml");
    fs::write(
        &bad,
        QUERIES.replace(
            "op = \"create\"\ntarget = \"{dir}/open",
            "op = \"unlink\"\ntarget = \"{dir}/open",
        ),
    )
    .unwrap();
    let err = refused(&bad, &v);
    assert!(
        err.contains("bad.toml:23:6: probe[3].op: unknown operation \"unlink\""),
        "{err}"
    );

    // A variable the vars file does not define is unknown.
    let v2 = write_vars(dir, &[("home", "/h".into())]);
    let err = refused(&q, &v2);
    assert!(
        err.contains("q.toml:6:10: probe[0].target: unknown template variable {dir}"),
        "{err}"
    );

    fs::write(
        dir.join("garbage.json"),
        "{\"run_id\": \"x y\", \"vars\": {}}",
    )
    .unwrap();
    let out = probe(&q, &dir.join("garbage.json"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("run_id"));
}
