//! `dispatcher contract`, live: the whole contract passes for every CLI on this kernel as root
//! and as the unprivileged user `sbx-test` (and for macOS by the evaluator); deliberately
//! broken policies fail on exactly the probes that should catch them; a lying harness cannot
//! make a probe pass; the committed permission map is current.
//!
//! Contract runs are serialised across test processes with a lock file, so their timings
//! (the whole Linux contract must stay under 60 s) are not skewed by each other.
#![cfg(target_os = "linux")]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use agentworks_e2e::{
    TEST_USER, Who, as_root_and_user, as_test_user, copy_binaries, dispatcher_bin, repo,
    require_root, test_user_ids, world_dir,
};
use serde_json::Value;

/// One contract run at a time, across test processes.
struct Serial {
    _lock: fs::File,
}

fn serial() -> Serial {
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(std::env::temp_dir().join("agentworks-contract-tests.lock"))
        .unwrap();
    // SAFETY: flock on a descriptor we own; released when the file is closed.
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
    Serial { _lock: f }
}

/// The binaries copied where the runner can execute them (a temp folder, mode 0755), and
/// the folder the contract makes its own temporary folder in, owned by the runner.
struct Bins {
    _tmp: tempfile::TempDir,
    dispatcher: PathBuf,
    tmp: PathBuf,
    who: Who,
}

fn bins(who: Who) -> Bins {
    require_root();
    if who == Who::User {
        test_user_ids();
    }
    let t = world_dir("aw-contract-test-");
    let (dispatcher, _) = copy_binaries(&t.path().join("bin"));
    let tmp = t.path().join("tmp");
    fs::create_dir(&tmp).unwrap();
    if who == Who::User {
        let st = Command::new("chown")
            .args([&format!("{TEST_USER}:{TEST_USER}"), tmp.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(st.success());
    }
    Bins {
        dispatcher,
        tmp,
        who,
        _tmp: t,
    }
}

impl Bins {
    /// `dispatcher contract ARGS` as the runner, with a clean environment and the real CLIs
    /// on PATH when they are installed (scripts/install-clis.sh).
    fn contract(&self, args: &[&str]) -> Output {
        let mut c = match self.who {
            Who::Root => Command::new(&self.dispatcher),
            Who::User => as_test_user(&self.dispatcher),
        };
        let clis = repo().join(".tools/clis/bin");
        let path = format!("{}:/usr/local/bin:/usr/bin:/bin", clis.display());
        c.env_clear()
            .env("PATH", path)
            .env("HOME", &self.tmp)
            .env(
                "USER",
                if self.who == Who::Root {
                    "root"
                } else {
                    TEST_USER
                },
            )
            .env("TMPDIR", &self.tmp)
            .current_dir(&self.tmp)
            .arg("contract")
            .args(args);
        c.output().unwrap()
    }

    fn json(&self, args: &[&str]) -> (Value, Output) {
        let mut a = args.to_vec();
        a.push("--json");
        let out = self.contract(&a);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "not a JSON report ({e}); status {:?}\nstderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (v, out)
    }
}

fn str_of<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str().unwrap_or_else(|| panic!("{k} in {v}"))
}

/// Failing probe names per (launch, platform, how), every column of the group agreeing.
/// The failing probes of a report by (launch, platform, how).
type Failures = BTreeMap<(String, String, String), BTreeSet<String>>;

fn failures(report: &Value) -> Failures {
    let mut out: Failures = BTreeMap::new();
    let mut seen: BTreeMap<(String, String, String), String> = BTreeMap::new();
    for c in report["columns"].as_array().unwrap() {
        let key = (
            str_of(c, "launch").to_string(),
            str_of(c, "platform").to_string(),
            str_of(c, "how").to_string(),
        );
        assert!(
            c["error"].is_null(),
            "{key:?} {}: {}",
            str_of(c, "cli"),
            c["error"]
        );
        let names: BTreeSet<String> = c["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| !r["pass"].as_bool().unwrap())
            .map(|r| str_of(r, "probe").to_string())
            .collect();
        let who = format!("{} {}", str_of(c, "cli"), str_of(c, "mode"));
        if let Some(prev) = out.get(&key) {
            assert_eq!(
                prev, &names,
                "{key:?}: {who} fails otherwise than {}",
                seen[&key]
            );
        }
        seen.insert(key.clone(), who);
        out.insert(key, names);
    }
    out
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// Exactly `chat` fails for the chat and exactly `step` for both steps, live on Linux and
/// evaluated for macOS alike.
#[track_caller]
fn assert_fail_alike(f: &Failures, chat: &BTreeSet<String>, step: &BTreeSet<String>) {
    assert_eq!(&f[&key("chat", "linux", "live")], chat);
    assert_eq!(&f[&key("chat", "macos", "evaluated")], chat);
    for launch in ["agent-step", "scripted-step"] {
        assert_eq!(&f[&key(launch, "linux", "live")], step, "{launch}");
        assert_eq!(&f[&key(launch, "macos", "evaluated")], step, "{launch}");
    }
}

fn key(launch: &str, platform: &str, how: &str) -> (String, String, String) {
    (launch.into(), platform.into(), how.into())
}

fn adapters() -> Vec<String> {
    dispatcher::adapter::load_all(None)
        .unwrap()
        .into_iter()
        .map(|a| a.name)
        .collect()
}

fn installed_clis() -> Vec<String> {
    let dir = repo().join(".tools/clis/bin");
    adapters()
        .into_iter()
        .filter(|n| {
            let a = dispatcher::adapter::find(&dispatcher::adapter::load_all(None).unwrap(), n)
                .unwrap();
            dir.join(&a.binary).exists()
        })
        .collect()
}

/// Whether `sbx-test` can execute the installed CLI (the checkout may be private to root).
fn user_can_run(name: &str) -> bool {
    let all = dispatcher::adapter::load_all(None).unwrap();
    let a = dispatcher::adapter::find(&all, name).unwrap();
    let bin = repo().join(".tools/clis/bin").join(&a.binary);
    as_test_user("test")
        .arg("-x")
        .arg(&bin)
        .status()
        .is_ok_and(|s| s.success())
}

fn whole_contract_passes(who: Who) {
    let b = bins(who);
    let _serial = serial();
    let (r, out) = b.json(&["--all"]);
    let elapsed = r["elapsed_ms"].as_u64().unwrap();
    eprintln!(
        "{who:?}: the whole contract (every CLI, chat and step, Linux live + macOS evaluated) took {elapsed} ms"
    );
    if !r["passed"].as_bool().unwrap() {
        panic!(
            "the contract failed as {who:?}:\n{}\nfailed probes: {:?}\n{}",
            serde_json::to_string_pretty(&r["errors"]).unwrap(),
            failures(&r),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(out.status.success());
    assert!(r["errors"].as_array().unwrap().is_empty());
    assert!(r["test_hooks"].as_array().unwrap().is_empty());
    assert!(
        elapsed < 60_000,
        "the whole contract took {elapsed} ms (limit 60 s)"
    );
    let cols = r["columns"].as_array().unwrap();
    for name in adapters() {
        for (launch, platform, how) in [
            ("chat", "linux", "live"),
            ("chat", "macos", "evaluated"),
            ("agent-step", "linux", "live"),
            ("agent-step", "macos", "evaluated"),
        ] {
            let c = cols
                .iter()
                .find(|c| {
                    str_of(c, "cli") == name
                        && str_of(c, "launch") == launch
                        && str_of(c, "platform") == platform
                        && str_of(c, "mode") == "full"
                })
                .unwrap_or_else(|| panic!("no {launch} {platform} column for {name}"));
            assert_eq!(str_of(c, "how"), how);
            assert!(
                !c["results"].as_array().unwrap().is_empty(),
                "{name} {launch} {platform}"
            );
        }
    }
    for platform in ["linux", "macos"] {
        assert!(
            cols.iter().any(
                |c| str_of(c, "launch") == "scripted-step" && str_of(c, "platform") == platform
            )
        );
    }
    // No deny on this machine is vacuous: every probe's operation succeeded unconfined. The
    // probes of a root caller's sandbox (kernel settings, device nodes, the kernel log) are
    // the one exception, and only for a person: run as root they must not be vacuous either.
    let expectations = linux_probe_expectations();
    let needs_root = |probe: &str| {
        expectations.get(probe).is_some_and(|(_, op)| {
            sandboxer::probe::ProbeOp::parse(op).is_some_and(|op| op.needs_root())
        })
    };
    let vacuous: BTreeSet<String> = cols
        .iter()
        .flat_map(|c| c["results"].as_array().unwrap().iter())
        .filter(|p| p["vacuous"].as_bool().unwrap())
        .map(|p| str_of(p, "probe").to_string())
        .collect();
    let unexpected: Vec<&String> = vacuous
        .iter()
        .filter(|p| who == Who::Root || !needs_root(p))
        .collect();
    assert!(
        unexpected.is_empty(),
        "vacuous here as {who:?}: {unexpected:?}"
    );
    if who == Who::User {
        let root_only: BTreeSet<String> = expectations
            .keys()
            .filter(|p| needs_root(p))
            .cloned()
            .collect();
        assert!(
            !root_only.is_empty(),
            "the queries probe a root caller's sandbox"
        );
        assert!(
            root_only.is_subset(&vacuous),
            "a root-only probe did not come out vacuous as a person: {:?}",
            root_only.difference(&vacuous).collect::<Vec<_>>()
        );
    }
    // Every probe with a Linux expectation ran live for the chat of each CLI.
    let chat_live: BTreeSet<&str> = cols
        .iter()
        .filter(|c| str_of(c, "launch") == "chat" && str_of(c, "platform") == "linux")
        .flat_map(|c| {
            c["results"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| str_of(p, "probe"))
        })
        .collect();
    for must in [
        "tiocsti-inherited-terminal",
        "ptrace-outside",
        "tmux-server",
        "session-bus",
        "config-json-read",
        "home-write",
    ] {
        assert!(chat_live.contains(must), "{must} did not run live");
    }
    // The installed CLIs start inside their launch; every CLI's own sandbox is off.
    let checks = r["checks"].as_array().unwrap();
    let check = |cli: &str, platform: &str, what: &str| -> &str {
        let c = checks
            .iter()
            .find(|c| {
                str_of(c, "cli") == cli
                    && str_of(c, "platform") == platform
                    && str_of(c, "check") == what
            })
            .unwrap_or_else(|| panic!("no {what} check for {cli} on {platform}"));
        str_of(c, "status")
    };
    for name in installed_clis() {
        if who == Who::User && !user_can_run(&name) {
            eprintln!(
                "{name} is installed but not reachable by {TEST_USER}; its start is not checked as that user"
            );
            continue;
        }
        assert_eq!(check(&name, "linux", "starts"), "pass", "{name}");
    }
    for name in adapters() {
        assert_eq!(check(&name, "linux", "own-sandbox-off"), "pass", "{name}");
        assert_eq!(check(&name, "macos", "own-sandbox-off"), "pass", "{name}");
    }
}

as_root_and_user!(
    whole_contract_passes =>
    the_whole_contract_passes_for_every_cli_as_root,
    the_whole_contract_passes_for_every_cli_as_sbx_test
);

/// The probes that guard the state root outside the chat's grants (chat contract), as the
/// macOS evaluation of a widened grant fails them.
const CHAT_PROTECTED: &[&str] = &[
    "other-workflow-read",
    "other-workflow-write",
    "other-workflow-list",
    "other-workflow-create",
    "other-workflow-exec",
    "other-runtime-read",
    "other-runtime-write",
    "other-runtime-list",
    "other-runtime-read-dotdot",
    "other-runtime-create-dotdot",
    "beside-runtimes-create",
    "config-json-read",
    "config-json-read-dotdot",
    "config-json-write",
    "auth-read",
    "auth-list",
    "personal-mcp-read",
    "events-db-read",
    "events-db-write",
    "own-events-db-write",
    // Not state-root-list: on macOS the state root gives its names as a folder above the
    // chat's own (docs/seatbelt.md, "Bun"), with or without the widened grant.
    "state-root-create",
    "symlink-to-other-runtime",
    "symlink-to-config-json",
    "hardlink-other-runtime",
    "hardlink-config-json",
    "rename-other-runtime-file",
    "unix-socket-other-runtime",
];

const STEP_PROTECTED: &[&str] = &[
    "step-other-workflow-read",
    "step-other-workflow-write",
    "step-chat-runtime-read",
    "step-other-step-read",
    "step-config-json-read",
    "step-auth-read",
    "step-events-db-write",
    "step-beside-runtime-create",
];

fn broken(b: &Bins, how: &str) -> Value {
    let (r, out) = b.json(&["--all", "--cli", "claude", "--break-policy", how]);
    assert_eq!(out.status.code(), Some(1), "a broken policy never passes");
    assert!(!r["passed"].as_bool().unwrap());
    assert_eq!(str_of(&r, "mutation"), how);
    r
}

#[test]
fn broken_policies_fail_on_the_right_probes() {
    let b = bins(Who::Root);
    let _serial = serial();

    // The workflow grant widened to every workflow: exactly the other-workflow probes fail,
    // live on Linux and evaluated for macOS, chat and steps alike.
    let r = broken(&b, "widen-workflow-grant");
    let f = failures(&r);
    let chat = set(&[
        "other-workflow-read",
        "other-workflow-write",
        "other-workflow-list",
        "other-workflow-create",
        "other-workflow-exec",
    ]);
    let step = set(&["step-other-workflow-read", "step-other-workflow-write"]);
    assert_fail_alike(&f, &chat, &step);

    // The refuse list emptied: exactly the planning/ and workflow.db probes fail, present or
    // absent at launch, direct or through a link or a rename, the move of an ancestor of the
    // folder guard's nested entry, and what the product writes there while the chat runs.
    let r = broken(&b, "empty-refuse");
    let f = failures(&r);
    let chat = set(&[
        "plan-json-read",
        "plan-json-write",
        "plan-json-delete",
        "planning-list",
        "planning-create",
        "workflow-db-read",
        "workflow-db-write",
        "absent-plan-json-create",
        "absent-workflow-db-create",
        "hardlink-plan-json",
        "rename-out-of-planning",
        "rename-refused-path-ancestor",
        "product-write-refused-missing-at-launch",
    ]);
    let step = set(&["step-planning-create", "step-workflow-db-create"]);
    assert_fail_alike(&f, &chat, &step);

    // Launchers unblocked: every macOS launcher probe fails; Linux has no launcher binaries,
    // so nothing changes there (its ways out are a separate switch, below).
    let r = broken(&b, "unblock-launchers");
    let f = failures(&r);
    assert_eq!(
        f[&key("chat", "macos", "evaluated")],
        set(&[
            "exec-open",
            "exec-osascript",
            "exec-osacompile",
            "exec-automator",
            "exec-shortcuts",
            "copied-open",
            "apple-event",
            "lsopen",
            "launchservices-lookup",
            "appleevents-lookup",
            "launcher-component-read",
        ])
    );
    for launch in ["agent-step", "scripted-step"] {
        assert_eq!(
            f[&key(launch, "macos", "evaluated")],
            set(&["step-exec-osascript", "step-lsopen"])
        );
        assert!(f[&key(launch, "linux", "live")].is_empty(), "{launch}");
    }
    assert!(f[&key("chat", "linux", "live")].is_empty());

    // The Linux ways-out list off: nothing masks the session bus's and the tmux server's
    // folders, yet the servers stay out of reach (the socket broker refuses every pathname
    // socket off the allowlist), and so do abstract sockets, signals, ptrace, /proc and
    // TIOCSTI (other layers).
    let r = broken(&b, "open-ways-out");
    let f = failures(&r);
    assert!(f[&key("chat", "linux", "live")].is_empty());
    for launch in ["agent-step", "scripted-step"] {
        assert!(f[&key(launch, "linux", "live")].is_empty(), "{launch}");
        assert!(f[&key(launch, "macos", "evaluated")].is_empty());
    }
    assert!(f[&key("chat", "macos", "evaluated")].is_empty());

    // The runtime grant widened to the whole state root: for macOS exactly the probes that
    // guard the state root fail. On Linux the enforcer refuses to run that policy at all (a
    // read-only grant nested in a grant that is a whole protected root cannot be enforced
    // here: gaps-break-policy; nor can the refused-path keeper, whose registry would lie open),
    // so nothing runs — closed, and reported as a failure.
    let (r, out) = b.json(&["--all", "--cli", "claude", "--break-policy", "widen-grant"]);
    assert_eq!(out.status.code(), Some(1));
    let cols = r["columns"].as_array().unwrap();
    for c in cols {
        let platform = str_of(c, "platform");
        let launch = str_of(c, "launch");
        let failing: BTreeSet<String> = c["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| !p["pass"].as_bool().unwrap())
            .map(|p| str_of(p, "probe").to_string())
            .collect();
        match platform {
            "linux" => {
                let e = c["error"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{launch}: ran: {c}"));
                // Refused by the planner (gaps-break-policy) or, before it, by the check
                // that the mask registry lies under a protected root (the widened grant
                // opens the whole state root): either way nothing ran.
                assert!(
                    (e.contains("refused") || e.contains("lies under no protected root"))
                        && e.contains("nothing was run"),
                    "{launch}: {e}"
                );
            }
            _ if launch == "chat" => assert_eq!(failing, set(CHAT_PROTECTED)),
            _ => assert_eq!(failing, set(STEP_PROTECTED), "{launch}"),
        }
    }
}

/// A fake harness (TEST ONLY): claims `claim` for every probe of its query files.
fn fake_harness(dir: &Path, claim: &str) -> PathBuf {
    let p = dir.join(format!("fake-harness-{claim}"));
    // Inside an awk string literal: quotes escaped.
    let extra = if claim == "done" {
        r#",\"bytes\":42"#
    } else {
        r#",\"errno\":13,\"error\":\"Permission denied (os error 13)\""#
    };
    fs::write(
        &p,
        format!(
            r#"#!/bin/sh
# TEST ONLY: a harness that lies. It claims "{claim}" for every probe and does nothing.
files=""
while [ $# -gt 0 ]; do
  case "$1" in
    --queries) files="$files $2"; shift 2 ;;
    --vars) shift 2 ;;
    *) shift ;;
  esac
done
printf '{{"version":1,"platform":"linux","run_id":"fake","pid":1,"uid":0,"cwd":"/","results":['
awk '/^name = "/ {{ split($0, a, "\""); name = a[2] }}
     /^op = "/ {{ split($0, a, "\""); printf "%s{{\"name\":\"%s\",\"op\":\"%s\",\"target\":\"\",\"claim\":\"{claim}\"{extra}}}", sep, name, a[2]; sep = "," }}' $files
printf ']}}\n'
"#
        ),
    )
    .unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn linux_probe_expectations() -> BTreeMap<String, (String, String)> {
    // name -> (linux expectation, op), from the query files themselves.
    let mut out = BTreeMap::new();
    for f in ["contract.toml", "escapes.toml", "steps.toml"] {
        let text = fs::read_to_string(repo().join("queries").join(f)).unwrap();
        let v: toml::Table = toml::from_str(&text).unwrap();
        for p in v["probe"].as_array().unwrap() {
            if let Some(l) = p.get("linux") {
                out.insert(
                    p["name"].as_str().unwrap().to_string(),
                    (
                        l["expect"].as_str().unwrap().to_string(),
                        p["op"].as_str().unwrap().to_string(),
                    ),
                );
            }
        }
    }
    out
}

/// Runs every probe for claude with a fake harness that reports `verdict` for each; checks
/// the run fails and no live column errs, and returns the live columns' results.
fn live_results_with_harness(b: &Bins, verdict: &str) -> Vec<Value> {
    let fake = fake_harness(b._tmp.path(), verdict);
    let harness = fake.to_str().unwrap();
    let (r, out) = b.json(&["--all", "--cli", "claude", "--harness", harness]);
    assert_eq!(out.status.code(), Some(1));
    let mut results = Vec::new();
    for c in r["columns"].as_array().unwrap() {
        if str_of(c, "how") == "live" {
            assert!(c["error"].is_null(), "{}", c["error"]);
            results.extend(c["results"].as_array().unwrap().iter().cloned());
        }
    }
    results
}

#[test]
fn a_harness_that_lies_cannot_make_a_probe_pass() {
    let b = bins(Who::Root);
    let _serial = serial();
    let expectations = linux_probe_expectations();

    // Lying "denied" everywhere: no evidence appears, so exactly the allow-probes fail, each
    // with got = deny; the deny-probes pass (it did nothing), and nothing is inconsistent.
    for p in &live_results_with_harness(&b, "failed") {
        let name = str_of(p, "probe");
        let (expect, _) = &expectations[name];
        assert_eq!(str_of(p, "got"), "deny", "{name}");
        assert_eq!(
            p["pass"].as_bool().unwrap(),
            expect == "deny",
            "{name}: {p}"
        );
    }

    // Lying "done" everywhere: no evidence appears either. Every probe with a side effect
    // fails as inconsistent — the deny-probes among them included — and so does every read
    // that claims bytes without the marker. Only listings (which a mask legitimately empties)
    // are judged by the marker alone: they come out deny. Nothing is ever allowed.
    for p in &live_results_with_harness(&b, "done") {
        let name = str_of(p, "probe");
        let (expect, op) = &expectations[name];
        assert_ne!(p["got"].as_str(), Some("allow"), "{name}");
        let should_pass = expect == "deny" && op == "list";
        assert_eq!(p["pass"].as_bool().unwrap(), should_pass, "{name}: {p}");
        if expect == "deny" && op != "list" {
            let ev = str_of(p, "evidence");
            assert!(
                ev.contains("no evidence") || ev.contains("but not the marker"),
                "{name}: {ev}"
            );
        }
    }
}

#[test]
fn the_permission_map_is_current() {
    let b = bins(Who::Root);
    let _serial = serial();
    let out = b.contract(&["--all", "--markdown"]);
    let fresh = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let committed = fs::read_to_string(repo().join("docs/permission-map.md")).unwrap();
    let (a, b) = (
        dispatcher::contract::report::normalise_map(&committed),
        dispatcher::contract::report::normalise_map(&fresh),
    );
    if a != b {
        let diff: Vec<String> = a
            .lines()
            .zip(b.lines())
            .filter(|(x, y)| x != y)
            .take(5)
            .map(|(x, y)| format!("- {x}\n+ {y}"))
            .collect();
        panic!(
            "docs/permission-map.md is stale; regenerate it with\n  dispatcher contract --all --markdown > docs/permission-map.md\nfirst differences:\n{}",
            diff.join("\n")
        );
    }
}

/// Runs `dispatcher contract --no-live` on a queries folder holding only `steps.toml` with
/// one probe whose `op` and `target` are given; checks it exits 2 and returns its stderr.
fn bad_query_file(dir: &Path, op: &str, target: &str) -> String {
    fs::write(
        dir.join("steps.toml"),
        format!(
            "version = 1\n\n[[probe]]\nname = \"x\"\nop = \"{op}\"\ntarget = \"{target}\"\nlinux = {{ expect = \"deny\", why = \"w\" }}\n"
        ),
    )
    .unwrap();
    let out = Command::new(dispatcher_bin())
        .args(["contract", "--no-live", "--cli", "pi", "--queries-dir"])
        .arg(dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    err
}

#[test]
fn a_bad_query_file_is_refused_with_file_line_and_field() {
    let t = tempfile::tempdir().unwrap();
    let err = bad_query_file(t.path(), "read", "{attached}/doc");
    assert!(
        err.contains("steps.toml:6:10: probe[0].target: unknown template variable {attached}"),
        "{err}"
    );

    let err = bad_query_file(t.path(), "teleport", "{home}/doc");
    assert!(
        err.contains("steps.toml:5:6: probe[0].op: unknown operation \"teleport\""),
        "{err}"
    );
}

#[test]
fn evaluation_alone_decides_every_macos_probe() {
    // --no-live: no fixture, nothing run; every macOS probe still decided (none unknown).
    let out = Command::new(dispatcher_bin())
        .args(["contract", "--no-live", "--all", "--json"])
        .env("TMPDIR", std::env::temp_dir())
        .output()
        .unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cols = r["columns"].as_array().unwrap();
    assert!(
        cols.iter()
            .all(|c| str_of(c, "how") == "evaluated" && str_of(c, "platform") == "macos")
    );
    let all = dispatcher::adapter::load_all(None).unwrap();
    let chat_columns: usize = all.iter().map(|a| a.modes.len()).sum();
    assert_eq!(
        cols.len(),
        chat_columns + all.len() + 1,
        "chat modes + agent steps + the scripted step"
    );
    for c in cols {
        for p in c["results"].as_array().unwrap() {
            assert!(p["got"].is_string(), "{}: {p}", str_of(c, "cli"));
        }
    }
}

#[test]
fn a_scripted_step_runs_confined_with_its_workflow_rw() {
    let b = bins(Who::Root);
    let state = b.tmp.join("state");
    let d = |args: &[&str]| {
        Command::new(&b.dispatcher)
            .arg("--state-root")
            .arg(&state)
            .args(args)
            .env("HOME", &b.tmp)
            .output()
            .unwrap()
    };
    assert!(d(&["init"]).status.success());
    assert!(d(&["workflow", "add", "wf"]).status.success());
    assert!(d(&["workflow", "add", "other"]).status.success());
    fs::write(
        state.join("workspace-docs/other/secret.md"),
        "SECRET-OTHER\n",
    )
    .unwrap();
    let token = fs::read_to_string(state.join("config.json")).unwrap();
    let script = b.tmp.join("step.sh");
    fs::write(
        &script,
        "#!/bin/sh\n\
         echo made-by-step > result.txt\n\
         cat \"$1/config.json\" > leaked-config.txt 2>/dev/null\n\
         cat \"$1/workspace-docs/other/secret.md\" > leaked-other.txt 2>/dev/null\n\
         mkdir planning 2>/dev/null; echo x > planning/plan.json 2>/dev/null\n\
         exit 7\n",
    )
    .unwrap();
    let out = d(&[
        "step",
        "run",
        "--workflow",
        "wf",
        "--step",
        "build",
        "--script",
        script.to_str().unwrap(),
        "--",
        state.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wf = state.join("workspace-docs/wf");
    assert_eq!(
        fs::read_to_string(wf.join("result.txt")).unwrap(),
        "made-by-step\n"
    );
    let leaked = fs::read_to_string(wf.join("leaked-config.txt")).unwrap_or_default();
    assert!(
        leaked.is_empty() && !token.is_empty(),
        "config.json leaked: {leaked}"
    );
    assert!(
        fs::read_to_string(wf.join("leaked-other.txt"))
            .unwrap_or_default()
            .is_empty()
    );
    assert!(!wf.join("planning/plan.json").exists());
    let copy = state.join("state/step-runtimes/v1/wf/build/.agentworks/step-script");
    assert_eq!(fs::read(&copy).unwrap(), fs::read(&script).unwrap());
}
