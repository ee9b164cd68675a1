//! The Seatbelt renderer: snapshots of whole profiles for the product's policy shapes, the
//! profile's invariants (allow-only, no ways out), errors, template overrides, and the
//! `sandboxer render` command.
//!
//! Snapshots live in tests/snapshots/; review a change with `cargo insta review` (or set
//! INSTA_UPDATE=always and read the diff) — a profile change is a security change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use sandboxer::policy::{Grant, Origin, ResolveOptions};
use sandboxer::sbpl::{self, Action};
use sandboxer::seatbelt::{self, RenderError, Templates};
use sandboxer::{Access, Op, Policy, Target, Verdict};

/// The product's shape: home open; the app folder and the workspace documents protected;
/// this chat's runtime and its workflow rw, an attached workflow ro; the workflow's planning
/// folder and raw database refused; launchers blocked (the default).
const PRODUCT: &str = include_str!("fixtures/product.toml");

const CLOSED: &str = r#"
version = 1
base = "closed"

[[protected]]
path = "~/Library/Application Support/AgentWorks"

[[grant]]
path = "~/Library/Application Support/AgentWorks/state/cli-runtimes/v1/chat-1"
access = "rw"
[[grant]]
path = "~/projects/site"
access = "rw"
[[grant]]
path = "~/projects/site/vendor"
access = "ro"

[[refuse]]
path = "~/projects/site/.env"

[macos]
deny_mach_services = ["com.example.agent"]
"#;

fn opts() -> ResolveOptions {
    ResolveOptions::new(Target::Macos, PathBuf::from("/Users/ada"), false).unwrap()
}

fn mac(text: &str) -> Policy {
    Policy::from_toml(text, "policy.toml", &opts()).unwrap()
}

/// As the CLI resolves a policy for a Mac named by `--home /Users/ada --uid 501`: the macOS
/// ways-out and autorun lists for that person, without environment variables (the Mac's are
/// unknown).
fn mac_with_ways_out(text: &str) -> Policy {
    use sandboxer::ways_out::{self, Env};
    let mut opts = opts();
    let env = Env::for_target(
        Target::Macos,
        Path::new("/Users/ada"),
        Some(501),
        Some("ada"),
    );
    opts.ways_out = ways_out::load(Target::Macos, None, &env).unwrap();
    opts.add_autorun(None, Some(501), Some("ada")).unwrap();
    Policy::from_toml(text, "policy.toml", &opts).unwrap()
}

/// The macOS ways out (a tmux server, X11, the container engines' sockets, screen) are refused
/// like any protected root, missing or not; `[macos] ways_out = false` opens them again.
#[test]
fn macos_ways_out_are_refused() {
    let on = parse(&seatbelt::render(&mac_with_ways_out(PRODUCT)).unwrap());
    let off_text = format!("{PRODUCT}\n[macos]\nways_out = false\n");
    let off = parse(&seatbelt::render(&mac_with_ways_out(&off_text)).unwrap());
    for (op, path) in [
        (Op::ConnectUnix, "/private/tmp/tmux-501/default"),
        (Op::Read, "/private/tmp/tmux-501/default"),
        (Op::Create, "/private/tmp/tmux-501/evil"),
        (Op::ConnectUnix, "/private/tmp/.X11-unix/X0"),
        (Op::ConnectUnix, "/private/var/run/docker.sock"),
        (Op::ConnectUnix, "/Users/ada/.docker/run/docker.sock"),
        (Op::ConnectUnix, "/Users/ada/.colima/default/docker.sock"),
        (Op::ConnectUnix, "/Users/ada/.orbstack/run/docker.sock"),
        (
            Op::ConnectUnix,
            "/private/tmp/uscreens/S-ada/123.ttys000.mac",
        ),
        (Op::Read, "/Users/ada/.Xauthority"),
    ] {
        let path = Path::new(path);
        assert_eq!(
            evaluate(&on, op, path),
            Some(Verdict::Deny),
            "{op:?} {path:?}"
        );
        assert_eq!(
            evaluate(&off, op, path),
            Some(Verdict::Allow),
            "off: {op:?} {path:?}"
        );
    }
    // Another user's tmux folder is not this person's way out (their own server refuses
    // other uids anyway), and the rest of /private/tmp stays open.
    for (op, path) in [
        (Op::ConnectUnix, "/private/tmp/tmux-502/default"),
        (Op::Create, "/private/tmp/scratch.txt"),
        (Op::Read, "/Users/ada/.docker/config.json"),
    ] {
        let path = Path::new(path);
        assert_eq!(
            evaluate(&on, op, path),
            Some(Verdict::Allow),
            "{op:?} {path:?}"
        );
    }
}

/// `--uid` takes a number: anything else is refused before anything is rendered or written.
#[test]
fn cli_refuses_a_bad_uid() {
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("p.sb");
    for bad in ["abc", "-1", "4294967296"] {
        let uid = format!("--uid={bad}");
        let out = sandboxer(&[
            "render",
            "--target",
            "macos",
            "--home",
            "/Users/ada",
            &uid,
            "--out",
            out_file.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--uid"), "{bad}: {err}");
        assert!(!out_file.exists(), "{bad}: a profile was written");
    }
}

fn unblocked(text: &str) -> String {
    format!("{text}\n[launchers]\nblock = false\n")
}

fn parse(profile: &str) -> sbpl::Profile {
    sbpl::parse(profile, &BTreeMap::new()).unwrap_or_else(|e| panic!("{e}\n{profile}"))
}

#[test]
fn product_profile() {
    let text = seatbelt::render(&mac(PRODUCT)).unwrap();
    // Snapshots ignore surrounding blank lines; the file itself starts with its header.
    assert!(
        text.starts_with(";; Seatbelt profile rendered by sandboxer: open base"),
        "{text}"
    );
    insta::assert_snapshot!("product", text);
}

#[test]
fn closed_base_profile() {
    insta::assert_snapshot!("closed", seatbelt::render(&mac(CLOSED)).unwrap());
}

#[test]
fn launchers_unblocked_profile() {
    insta::assert_snapshot!(
        "unblocked",
        seatbelt::render(&mac(&unblocked(PRODUCT))).unwrap()
    );
}

/// The product's policy with its network through the proxy (a Mac's launch: `public`, the
/// proxy's loopback port and a model endpoint's), and with none.
#[test]
fn network_profiles() {
    let public = format!(
        "{PRODUCT}\n[network]\nmode = \"public\"\nloopback = [8080]\nproxy = \"127.0.0.1:49152\"\n"
    );
    insta::assert_snapshot!("network_public", seatbelt::render(&mac(&public)).unwrap());
    let none = format!("{PRODUCT}\n[network]\nmode = \"none\"\n");
    insta::assert_snapshot!("network_none", seatbelt::render(&mac(&none)).unwrap());
}

/// rw ⊃ ro ⊃ rw: each grant speaks for its own part only.
#[test]
fn nested_grants_profile() {
    let policy = mac(r#"
version = 1
base = "open"
[[protected]]
path = "/p"
[[grant]]
path = "/p/a"
access = "rw"
[[grant]]
path = "/p/a/ro"
access = "ro"
[[grant]]
path = "/p/a/ro/rw"
access = "rw"
"#);
    insta::assert_snapshot!("nested", seatbelt::render(&policy).unwrap());
}

/// Without the autorun guard (seatbelt_guard.rs), `(deny default)` is the only deny besides
/// the names reserved in every spelling (creating another spelling of a protected root or
/// refused path), which comes last: the profile is a union of allow rules.
#[test]
fn profiles_are_allow_only() {
    for text in [PRODUCT, CLOSED, &unblocked(PRODUCT), &unblocked(CLOSED)] {
        let profile = parse(&seatbelt::render(&mac(text)).unwrap());
        let denies: Vec<_> = profile
            .rules()
            .iter()
            .filter(|r| r.action == Action::Deny)
            .collect();
        assert_eq!(
            denies.len(),
            2,
            "{:?}",
            denies.iter().map(|r| &r.text).collect::<Vec<_>>()
        );
        assert_eq!(denies[0].operations, ["default"]);
        assert_eq!(denies[1].operations, ["file-write-create"]);
        assert!(std::ptr::eq(denies[1], profile.rules().last().unwrap()));
        assert!(denies[0].filters.is_empty());
        assert_eq!(
            profile.rules()[0].text,
            "(deny default)",
            "deny default comes first"
        );
    }
}

/// No way out: with launchers blocked the profile never names lsopen or appleevent-send;
/// file-mount is never named, blocked or not.
#[test]
fn ways_out_are_never_allowed() {
    for text in [PRODUCT, CLOSED] {
        let profile = parse(&seatbelt::render(&mac(text)).unwrap());
        let ops = profile.operations();
        for never in [
            "lsopen",
            "appleevent-send",
            "file-mount",
            "file*",
            "default",
        ] {
            let allowed = profile
                .rules()
                .iter()
                .any(|r| r.action == Action::Allow && r.operations.iter().any(|o| o == never));
            assert!(!allowed, "{never} is allowed");
        }
        assert!(
            !ops.contains("lsopen") && !ops.contains("appleevent-send"),
            "{ops:?}"
        );
    }
    let profile = parse(&seatbelt::render(&mac(&unblocked(PRODUCT))).unwrap());
    let ops = profile.operations();
    assert!(
        ops.contains("lsopen") && ops.contains("appleevent-send"),
        "{ops:?}"
    );
    assert!(!ops.contains("file-mount"));
}

/// The same policy renders to the same text whatever order its rules were listed in.
#[test]
fn rendering_is_deterministic_and_order_free() {
    let a = mac(PRODUCT);
    let mut b = a.clone();
    b.grants.reverse();
    b.protected.reverse();
    b.refuse.reverse();
    assert_eq!(seatbelt::render(&a).unwrap(), seatbelt::render(&b).unwrap());
}

#[test]
fn a_linux_policy_is_refused() {
    let opts = ResolveOptions::new(Target::Linux, PathBuf::from("/home/ada"), false).unwrap();
    let policy = Policy::from_toml("version = 1\nbase = \"open\"\n", "p.toml", &opts).unwrap();
    let e = seatbelt::render(&policy).unwrap_err();
    assert!(
        matches!(
            e,
            RenderError::NotMacos {
                target: Target::Linux
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("--target macos"), "{e}");
}

fn origin() -> Origin {
    Origin {
        file: "hand.toml".into(),
        line: 3,
        field: "grant[0].path".into(),
    }
}

fn with_grant(path: &str) -> Policy {
    let mut p = mac("version = 1\nbase = \"open\"\n[[protected]]\npath = \"/p\"\n");
    p.grants.push(Grant {
        path: PathBuf::from(path),
        access: Access::Rw,
        origin: origin(),
        why: None,
    });
    p
}

/// A hand-built policy gets what the loader would have refused refused here, naming the rule.
#[test]
fn unrenderable_paths_fail_closed_naming_the_rule() {
    for (path, words) in [
        ("/p/a\nb", "control character"),
        ("p/relative", "absolute"),
        ("/p/../etc", "'..'"),
    ] {
        let e = seatbelt::render(&with_grant(path)).unwrap_err().to_string();
        assert!(
            e.contains(words) && e.contains("hand.toml:3 grant[0].path"),
            "{path:?}: {e}"
        );
    }
    let long = format!("/p/{}", "x".repeat(1100));
    let e = seatbelt::render(&with_grant(&long))
        .unwrap_err()
        .to_string();
    assert!(e.contains("string literals only up to"), "{e}");
    // Through the loader, a path too long for Seatbelt is an error too, not a broken profile.
    let text = format!(
        "version = 1\nbase = \"open\"\n[[protected]]\npath = \"/p\"\n[[grant]]\npath = \"{long}\"\naccess = \"ro\"\n"
    );
    assert!(seatbelt::render(&mac(&text)).is_err());
}

/// `.` and trailing slashes are spelled away: Seatbelt sees the path the kernel reports.
#[test]
fn paths_are_spelled_as_the_kernel_reports_them() {
    let profile = seatbelt::render(&with_grant("/p/./a/")).unwrap();
    assert!(profile.contains("(subpath \"/p/a\")"), "{profile}");
    assert!(!profile.contains("/p/./a"));
}

#[test]
fn templates_override_from_a_profiles_dir() {
    let dir = tempfile::tempdir().unwrap();
    let t = Templates::from_profiles_dir(dir.path()).unwrap();
    assert_eq!(t.origin(), &seatbelt::TemplateOrigin::Embedded);

    std::fs::create_dir(dir.path().join("seatbelt")).unwrap();
    let file = dir.path().join("seatbelt/profile.sb.tera");
    std::fs::write(
        &file,
        "(version 1)\n(deny default)\n; {{ base }} {{ home }}\n",
    )
    .unwrap();
    let t = Templates::from_profiles_dir(dir.path()).unwrap();
    assert_eq!(t.origin(), &seatbelt::TemplateOrigin::File(file.clone()));
    let out = seatbelt::render_with(&mac(PRODUCT), &t).unwrap();
    assert_eq!(out, "(version 1)\n(deny default)\n; open \"/Users/ada\"\n");

    std::fs::write(&file, "(version 1)\n{{ no_such_value }}\n").unwrap();
    let t = Templates::from_profiles_dir(dir.path()).unwrap();
    let e = seatbelt::render_with(&mac(PRODUCT), &t)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&file.display().to_string()) && e.contains("no_such_value"),
        "{e}"
    );

    std::fs::write(&file, "{% if %}").unwrap();
    let e = Templates::from_profiles_dir(dir.path())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains(&file.display().to_string()), "{e}");
}

/// The profile says what `decide` says for the product's own questions (the property test
/// in seatbelt_differential.rs covers random policies).
#[test]
fn product_profile_decides_like_the_policy() {
    let policy = mac(PRODUCT);
    let profile = parse(&seatbelt::render(&policy).unwrap());
    let app = "/Users/ada/Library/Application Support/AgentWorks";
    let docs = "/Users/ada/Documents/AgentWorks";
    let paths = [
        "/Users/ada/.zshrc".to_string(),
        format!("{app}/config.json"),
        format!("{app}/state/cli-runtimes/v1/chat-1/x"),
        format!("{app}/state/cli-runtimes/v1/chat-2/bridge.sock"),
        format!("{app}/state/cli-runtimes/v1"),
        format!("{docs}/wf-main/src.md"),
        format!("{docs}/wf-main/planning"),
        format!("{docs}/wf-main/planning/plan.json"),
        format!("{docs}/wf-main/workflow.db"),
        format!("{docs}/wf-main"),
        format!("{docs}/wf-ref/a.md"),
        format!("{docs}/wf-other/a.md"),
        "/Users/ada/Library".into(),
        "/Users/ada/Documents".into(),
        "/usr/bin/open".into(),
        "/usr/bin/true".into(),
        "/System/Library/Components/AppleScript.component/Contents".into(),
        "/".into(),
    ];
    for path in &paths {
        for op in Op::ALL {
            let want = policy.decide(op, Path::new(path)).verdict;
            let got = evaluate(&profile, op, Path::new(path));
            assert_eq!(got, Some(want), "{op} {path}");
        }
    }
}

fn evaluate(profile: &sbpl::Profile, op: Op, path: &Path) -> Option<Verdict> {
    let query = seatbelt::query_for(op, path);
    match profile
        .evaluate(seatbelt::operation_for(op), &query)
        .outcome
    {
        sbpl::Outcome::Allow => Some(Verdict::Allow),
        sbpl::Outcome::Deny => Some(Verdict::Deny),
        sbpl::Outcome::Unknown => None,
    }
}

// ---- `sandboxer render` ----------------------------------------------------------------

fn sandboxer(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sandboxer"))
        .args(args)
        // Never the real home: every run names its home, and HOME points nowhere useful.
        .env("HOME", "/nonexistent-home-for-tests")
        .output()
        .unwrap()
}

#[test]
fn cli_renders_to_stdout_and_to_a_file_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, PRODUCT).unwrap();
    let base = [
        "render",
        "--target",
        "macos",
        "--home",
        "/Users/ada",
        "--uid",
        "501",
        "--policy",
    ];

    let out = sandboxer(&[&base[..], &[policy.to_str().unwrap()]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stdout,
        seatbelt::render(&mac_with_ways_out(PRODUCT)).unwrap()
    );

    let target = dir.path().join("profile.sb");
    let out = sandboxer(
        &[
            &base[..],
            &[policy.to_str().unwrap(), "--out", target.to_str().unwrap()],
        ]
        .concat(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), stdout);

    // An invalid policy: exit 2, a message naming the place, and the old profile untouched.
    std::fs::write(&policy, "version = 1\nbase = \"ajar\"\n").unwrap();
    let out = sandboxer(
        &[
            &base[..],
            &[policy.to_str().unwrap(), "--out", target.to_str().unwrap()],
        ]
        .concat(),
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("policy.toml:2") && stderr.contains("base"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), stdout);
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 2, "no temporary file is left behind: {left:?}");
}

#[test]
fn cli_asks_for_target_macos() {
    let out = sandboxer(&["render", "--target", "linux", "--home", "/home/ada"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--target macos"));
    if Target::host() != Some(Target::Macos) {
        let out = sandboxer(&["render", "--home", "/Users/ada"]);
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("needs --target macos"), "{stderr}");
        // This machine's $HOME is no Mac home: --home is required, not guessed.
        let out = sandboxer(&["render", "--target", "macos"]);
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("needs --home"), "{stderr}");
    }
}

#[test]
fn cli_uses_the_profiles_dir_template() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("seatbelt")).unwrap();
    std::fs::write(
        dir.path().join("seatbelt/profile.sb.tera"),
        "(version 1)\n(deny default)\n",
    )
    .unwrap();
    let out = sandboxer(&[
        "render",
        "--target",
        "macos",
        "--home",
        "/Users/ada",
        "--profiles-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "(version 1)\n(deny default)\n"
    );
}
