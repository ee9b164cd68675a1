//! A real MCP client (the MCP Inspector CLI) driving the shim as a separate process.

use std::path::{Path, PathBuf};

use dispatcher::bridge::CallVerdict;
use serde_json::{Value, json};

use crate::world::*;
use agentworks_e2e::inspector_js;

// ---- a real MCP client -----------------------------------------------------------------------

/// The shim as a program: the `bridge_shim` example (the same `run_shim` that
/// `dispatcher bridge` runs), built with the cargo that builds this test.
fn shim_program() -> PathBuf {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "-p",
            "dispatcher",
            "--example",
            "bridge_shim",
            "--message-format=json",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "cargo build --example bridge_shim: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "bridge_shim")
        .and_then(|m| m["executable"].as_str().map(PathBuf::from))
        .expect("cargo names the example's executable")
}

/// Runs the inspector's CLI against the shim; returns its exit code and the JSON `result`.
/// (It exits 0 for a result, 5 for a tool result with `isError: true`.)
fn run_inspector(w: &World, shim: &Path, socket: &Path, args: &[&str]) -> (i32, Value) {
    let scratch = w.dir.path().join("inspector-home");
    std::fs::create_dir_all(&scratch).unwrap();
    let out = std::process::Command::new("node")
        .arg(inspector_js())
        .args(["--cli", "--format", "json"])
        .args(args)
        .arg("--")
        .arg(shim)
        .arg("--socket")
        .arg(socket)
        // Its own files go to the scratch folder, never to the person's home.
        .env("HOME", &scratch)
        .env("MCP_CATALOG_PATH", scratch.join("catalog.json"))
        .env("MCP_CLIENT_CONFIG_PATH", scratch.join("client.json"))
        .current_dir(&scratch)
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "inspector {args:?} ({}): output is not JSON ({e}): {stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let result = v
        .get("result")
        .cloned()
        .unwrap_or_else(|| panic!("inspector {args:?}: no result: {v}"));
    (out.status.code().unwrap_or(-1), result)
}

/// One `tools/call` of `tool` through the inspector; `arg` is how its arguments are given
/// (`--tool-arg` with `name=value`, or `--tool-args-json` with an object).
fn call_inspector(
    w: &World,
    shim: &Path,
    socket: &Path,
    tool: &str,
    arg: [&str; 2],
) -> (i32, Value) {
    let call = ["--method", "tools/call", "--tool-name", tool];
    run_inspector(w, shim, socket, &[&call[..], &arg[..]].concat())
}

#[test]
fn the_mcp_inspector_drives_the_shim() {
    let inspector_present = inspector_js();
    assert!(inspector_present.is_file());
    let shim = shim_program();
    let w = World::new();
    let c = w.chat("c1", "w1", &[]);
    std::fs::write(c.workflow.join("doc.md"), "from the workflow").unwrap();

    for era in ["legacy", "auto"] {
        let (code, list) = run_inspector(
            &w,
            &shim,
            &c.socket,
            &["--protocol-era", era, "--method", "tools/list"],
        );
        assert_eq!(code, 0, "{era}: {list}");
        let names: Vec<_> = list["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{era}: {list}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["read_file", "write_file", "list_dir", "open_url"],
            "{era}: {list}"
        );
    }

    let inspect = |tool: &str, arg: [&str; 2]| call_inspector(&w, &shim, &c.socket, tool, arg);
    let read = |p: &Path| {
        inspect(
            "read_file",
            ["--tool-arg", &format!("path={}", p.display())],
        )
    };
    let doc = c.workflow.join("doc.md");
    let (code, read_doc) = read(&doc);
    assert_eq!(
        (code, &read_doc["content"][0]["text"]),
        (0, &json!("from the workflow")),
        "{read_doc}"
    );

    let new = c.workflow.join("by-inspector.md");
    let args =
        json!({"path": new, "content": "written by a real client", "create": true}).to_string();
    let (code, wrote) = inspect("write_file", ["--tool-args-json", &args]);
    assert_eq!((code, &wrote["isError"]), (0, &json!(false)), "{wrote}");
    assert_eq!(
        std::fs::read_to_string(&new).unwrap(),
        "written by a real client"
    );

    let config = w.state.config_json();
    let (code, refused) = read(&config);
    assert_eq!((code, &refused["isError"]), (5, &json!(true)), "{refused}");
    assert!(
        refused["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("refused: "),
        "{refused}"
    );

    let events = c.events.lock().unwrap();
    assert_eq!(
        events
            .iter()
            .map(|e| (e.tool.as_str(), e.verdict))
            .collect::<Vec<_>>(),
        [
            ("read_file", CallVerdict::Allow),
            ("write_file", CallVerdict::Allow),
            ("read_file", CallVerdict::Deny)
        ]
    );
    // The calls came from the shim process, not from this one.
    assert!(
        events
            .iter()
            .all(|e| e.peer.unwrap().pid != Some(std::process::id() as i32))
    );
}
