use std::path::{Path, PathBuf};

use super::*;

/// The product's shape on macOS (shared with tests/seatbelt_render.rs).
pub(crate) const PRODUCT: &str = include_str!("../../tests/fixtures/product.toml");

fn mac(text: &str) -> Result<Policy, PolicyError> {
    let opts = ResolveOptions::new(Target::Macos, PathBuf::from("/Users/ada"), false).unwrap();
    Policy::from_toml(text, "p.toml", &opts)
}

fn v(p: &Policy, op: Op, path: &str) -> Verdict {
    p.decide(op, Path::new(path)).verdict
}

#[test]
fn product_shape_decides_as_designed() {
    let p = mac(PRODUCT).unwrap();
    let app = "/Users/ada/Library/Application Support/AgentWorks";
    let docs = "/Users/ada/Documents/AgentWorks";
    use Verdict::*;
    assert_eq!(v(&p, Op::Read, "/Users/ada/.zshrc"), Allow);
    assert_eq!(v(&p, Op::Write, "/Users/ada/projects/x.rs"), Allow);
    assert_eq!(v(&p, Op::Read, &format!("{app}/config.json")), Deny);
    assert_eq!(
        v(
            &p,
            Op::Read,
            &format!("{app}/state/cli-runtimes/v1/chat-2/x")
        ),
        Deny
    );
    assert_eq!(
        v(
            &p,
            Op::Write,
            &format!("{app}/state/cli-runtimes/v1/chat-1/x")
        ),
        Allow
    );
    assert_eq!(
        v(
            &p,
            Op::Read,
            &format!("{app}/state/cli-runtimes/v1/chat-1/../../../../config.json")
        ),
        Deny
    );
    assert_eq!(
        v(&p, Op::Create, &format!("{app}/state/cli-runtimes/v1/new")),
        Deny
    );
    assert_eq!(v(&p, Op::Write, &format!("{docs}/wf-main/src.md")), Allow);
    assert_eq!(
        v(&p, Op::Read, &format!("{docs}/wf-main/planning/plan.json")),
        Deny
    );
    assert_eq!(v(&p, Op::Create, &format!("{docs}/wf-main/planning")), Deny);
    assert_eq!(
        v(&p, Op::Read, &format!("{docs}/wf-main/workflow.db")),
        Deny
    );
    assert_eq!(v(&p, Op::Read, &format!("{docs}/wf-ref/a.md")), Allow);
    assert_eq!(v(&p, Op::Write, &format!("{docs}/wf-ref/a.md")), Deny);
    assert_eq!(v(&p, Op::Read, &format!("{docs}/wf-other/a.md")), Deny);
    assert_eq!(v(&p, Op::Exec, "/usr/bin/open"), Deny);
    assert_eq!(v(&p, Op::Exec, "/usr/bin/true"), Allow);
    // Ancestors of rule paths cannot be moved away.
    assert_eq!(v(&p, Op::Rename, "/Users/ada/Library"), Deny);
    assert_eq!(v(&p, Op::Rename, &format!("{docs}/wf-main")), Deny);
    assert_eq!(v(&p, Op::Rename, "/Users/ada/projects"), Allow);
    assert_eq!(
        v(
            &p,
            Op::ConnectUnix,
            &format!("{app}/state/cli-runtimes/v1/chat-2/bridge.sock")
        ),
        Deny
    );
    assert_eq!(v(&p, Op::Read, "relative/path"), Deny);
}

#[test]
fn aliases_apply_on_macos() {
    let p = mac("version = 1\nbase = \"open\"\n[[protected]]\npath = \"/tmp/secret\"\n").unwrap();
    assert_eq!(p.protected[0].path, Path::new("/private/tmp/secret"));
}

fn err(text: &str) -> PolicyError {
    mac(text).unwrap_err()
}

#[test]
fn errors_name_line_column_and_field() {
    let e = err("version = 1\nbase = \"open\"\n[[protected]]\npath = \"rel/x\"\n");
    assert_eq!((e.line, e.field.as_str()), (4, "protected[0].path"));
    assert!(e.message.contains("relative"), "{e}");
    assert_eq!(e.column, 8);

    let e = err("version = 2\nbase = \"open\"\n");
    assert_eq!((e.line, e.field.as_str()), (1, "version"));

    let e = err("version = 1\nbase = \"ajar\"\n");
    assert_eq!((e.line, e.field.as_str()), (2, "base"));

    let e = err("version = 1\nbase = \"open\"\ncolour = 3\n");
    assert_eq!((e.line, e.field.as_str()), (3, "colour"), "{e}");

    let e = err(
        "version = 1\nbase = \"open\"\n[[protected]]\npath = \"/x\"\n[[grant]]\npath = \"/x/y\"\naccess = \"rwx\"\n",
    );
    assert_eq!((e.line, e.field.as_str()), (7, "grant[0].access"));

    let e = err("version = 1\nbase = \"open\"\n[[protected]]\npath = \"/x\\u0000y\"\n");
    assert!(e.message.contains("NUL"), "{e}");

    let e = err("version = 1\nbase = \"open\"\n[[protected]]\npath = \"/x/../y\"\n");
    assert!(e.message.contains(".."), "{e}");

    let e = err("version = 1\nbase = \"open\"\n[[protected]]\npath = \"/x\\ny\"\n");
    assert!(e.message.contains("control"), "{e}");

    let e = err("version = 1\nbase = \"open\"\n[[protected]]\npath = \"~bob/x\"\n");
    assert!(e.message.contains("~user"), "{e}");

    let e = err("version = 1\nbase = \"open\"\n[[grant]]\npath = \"/x\"\naccess = \"rw\"\n");
    assert!(e.message.contains("outside every protected root"), "{e}");

    let e = err(
        "version = 1\nbase = \"open\"\n[[protected]]\npath = \"/x\"\n[[grant]]\npath = \"/x/g\"\naccess = \"rw\"\n[[refuse]]\npath = \"/y\"\n",
    );
    assert_eq!(e.field, "refuse[0].path");
    assert!(e.message.contains("outside every grant"), "{e}");

    let e = err(
        "version = 1\nbase = \"open\"\n[[protected]]\npath = \"/x\"\n[[grant]]\npath = \"/x/g\"\naccess = \"rw\"\n[[grant]]\npath = \"/x/g\"\naccess = \"ro\"\n",
    );
    assert!(e.message.contains("twice"), "{e}");

    let e = err("version = 1\n[[protected]\n");
    assert_eq!(e.line, 2, "{e}");

    let e = err("base = \"open\"\n");
    assert!(e.message.contains("version"), "{e}");
}

#[test]
fn grant_through_symlink_into_protected_root_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    std::fs::create_dir_all(root.join("state/chat-b")).unwrap();
    std::fs::create_dir_all(root.join("home")).unwrap();
    // A grant written inside the protected root whose real target is another chat.
    std::os::unix::fs::symlink(root.join("state/chat-b"), root.join("state/chat-a")).unwrap();
    let text = format!(
        "version = 1\nbase = \"open\"\n[[protected]]\npath = \"{0}/state\"\n[[grant]]\npath = \"{0}/state/chat-a\"\naccess = \"rw\"\n",
        root.display()
    );
    let opts = ResolveOptions::new(Target::Linux, root.join("home"), true).unwrap();
    let e = Policy::from_toml(&text, "p.toml", &opts).unwrap_err();
    assert_eq!(e.field, "grant[0].path");
    assert!(e.message.contains("symlink"), "{e}");
}

#[test]
fn deepest_grant_decides_nested_access() {
    let p = mac("version = 1\nbase = \"open\"\n[[protected]]\npath = \"/p\"\n[[grant]]\npath = \"/p/a\"\naccess = \"rw\"\n[[grant]]\npath = \"/p/a/ro\"\naccess = \"ro\"\n[[grant]]\npath = \"/p/a/ro/rw\"\naccess = \"rw\"\n").unwrap();
    assert_eq!(v(&p, Op::Write, "/p/a/x"), Verdict::Allow);
    assert_eq!(v(&p, Op::Write, "/p/a/ro/x"), Verdict::Deny);
    assert_eq!(v(&p, Op::Read, "/p/a/ro/x"), Verdict::Allow);
    assert_eq!(v(&p, Op::Write, "/p/a/ro/rw/x"), Verdict::Allow);
}

#[test]
fn closed_base_opens_only_system_and_grants() {
    let p = mac("version = 1\nbase = \"closed\"\n[[grant]]\npath = \"~/proj\"\naccess = \"rw\"\n")
        .unwrap();
    assert_eq!(v(&p, Op::Read, "/usr/lib/libc.dylib"), Verdict::Allow);
    assert_eq!(v(&p, Op::Write, "/usr/lib/libc.dylib"), Verdict::Deny);
    assert_eq!(v(&p, Op::Read, "/Users/ada/.ssh/id_rsa"), Verdict::Deny);
    assert_eq!(v(&p, Op::Write, "/Users/ada/proj/a"), Verdict::Allow);
    assert_eq!(v(&p, Op::Write, "/dev/null"), Verdict::Allow);
    assert_eq!(
        v(&p, Op::Read, "/etc/passwd"),
        Verdict::Deny,
        "/etc is /private/etc on macOS"
    );
    assert_eq!(v(&p, Op::Read, "/private/etc/passwd"), Verdict::Allow);
}

#[test]
fn launchers_unblocked_allow_exec() {
    let p = mac("version = 1\nbase = \"open\"\n[launchers]\nblock = false\n").unwrap();
    assert_eq!(v(&p, Op::Exec, "/usr/bin/open"), Verdict::Allow);
}

#[test]
fn default_policy_loads_for_both_targets() {
    for t in [Target::Macos, Target::Linux] {
        let opts = ResolveOptions::new(t, PathBuf::from("/home/ada"), false).unwrap();
        let p = Policy::from_toml(default_policy(t), "default.toml", &opts).unwrap();
        assert_eq!(p.base, Base::Open);
        assert!(p.launchers.block);
    }
}

#[test]
fn bad_home_is_refused() {
    for h in ["relative", "/", "/a/../b"] {
        assert!(
            ResolveOptions::new(Target::Macos, PathBuf::from(h), false).is_err(),
            "{h}"
        );
    }
}

/// `[macos] ways_out` takes a boolean; anything else is an error at its place, and an
/// unknown key beside it too.
#[test]
fn macos_ways_out_must_be_a_boolean() {
    let e = err("version = 1\nbase = \"open\"\n[macos]\nways_out = \"yes\"\n");
    assert_eq!((e.line, e.column), (4, 12), "{e}");
    assert!(e.message.contains("expected a boolean"), "{e}");
    let e = err("version = 1\nbase = \"open\"\n[macos]\nways_outs = true\n");
    assert_eq!((e.line, e.field.as_str()), (4, "ways_outs"), "{e}");
    let p = mac("version = 1\nbase = \"open\"\n[macos]\nways_out = false\n").unwrap();
    assert!(!p.macos.ways_out);
}

/// `[linux] nested_user_namespaces` takes a boolean, off unless the policy says so.
#[test]
fn nested_user_namespaces_is_a_boolean_off_by_default() {
    let linux = |text: &str| {
        let opts = ResolveOptions::new(Target::Linux, PathBuf::from("/home/ada"), false).unwrap();
        Policy::from_toml(text, "p.toml", &opts)
    };
    let e = err("version = 1\nbase = \"open\"\n[linux]\nnested_user_namespaces = 1\n");
    assert_eq!((e.line, e.column), (4, 26), "{e}");
    assert!(e.message.contains("expected a boolean"), "{e}");
    let p = linux("version = 1\nbase = \"open\"\n").unwrap();
    assert!(!p.linux.nested_user_namespaces);
    let p =
        linux("version = 1\nbase = \"open\"\n[linux]\nnested_user_namespaces = true\n").unwrap();
    assert!(p.linux.nested_user_namespaces);
}

/// The same policy for Linux, where names are bytes and no device or listing rule is added.
fn linux(text: &str) -> Policy {
    let opts = ResolveOptions::new(Target::Linux, PathBuf::from("/home/ada"), false).unwrap();
    Policy::from_toml(text, "p.toml", &opts).unwrap()
}

const WORKFLOW: &str = "version = 1\nbase = \"open\"\n[[protected]]\npath = \"/w\"\n\
    [[grant]]\npath = \"/w/wf\"\naccess = \"rw\"\n[[refuse]]\npath = \"/w/wf/planning\"\n";

/// macOS: another spelling of a refused or protected name is never created; its own
/// spelling's neighbours are, and on Linux (bytes) the other spellings are other names.
#[test]
fn names_are_reserved_in_every_spelling_on_macos_only() {
    use Verdict::*;
    let p = mac(WORKFLOW).unwrap();
    // Inside the protected root by its bytes, another spelling of the grant is refused anyway.
    assert_eq!(v(&p, Op::Create, "/w/WF/x"), Deny);
    for taken in ["/w/wf/Planning", "/w/wf/PLANNING/x", "/W", "/W/wf/x"] {
        assert_eq!(v(&p, Op::Create, taken), Deny, "{taken}");
        assert!(matches!(
            p.decide(Op::Create, Path::new(taken)).reason,
            Reason::Respelled { .. }
        ));
    }
    assert_eq!(v(&p, Op::Create, "/w/wf/planning2"), Allow);
    assert_eq!(
        v(&p, Op::Write, "/w/wf/Planning/x"),
        Allow,
        "an entry that exists"
    );
    let l = linux(WORKFLOW);
    assert_eq!(v(&l, Op::Create, "/w/wf/Planning"), Allow);
    assert_eq!(v(&l, Op::Create, "/w/wf/planning"), Deny);
    let nfc = mac(&WORKFLOW.replace("planning", "caf\u{e9}")).unwrap();
    assert_eq!(v(&nfc, Op::Create, "/w/wf/cafe\u{301}"), Deny);
    assert_eq!(v(&nfc, Op::Create, "/w/wf/cafe"), Allow);
}

/// macOS: `/dev` holds only the listed devices; Linux is unchanged.
#[test]
fn macos_devices_are_a_list() {
    use Verdict::*;
    let p = mac(WORKFLOW).unwrap();
    assert_eq!(v(&p, Op::Write, "/dev/null"), Allow);
    assert_eq!(v(&p, Op::Write, "/dev/fd/1"), Allow);
    assert_eq!(v(&p, Op::Read, "/dev/urandom"), Allow);
    assert_eq!(v(&p, Op::Write, "/dev/urandom"), Deny);
    assert_eq!(v(&p, Op::Read, "/dev/ttys003"), Deny);
    assert_eq!(v(&p, Op::Read, "/dev/disk0"), Deny);
    assert_eq!(v(&linux(WORKFLOW), Op::Read, "/dev/disk0"), Allow);
}

/// macOS: a folder above a grant inside a protected root gives its names (Bun opens every
/// folder above its working folder: docs/seatbelt.md, "Bun") and nothing else: no file in it,
/// no sibling folder. Linux reaches grants through its own mounts and lists nothing.
#[test]
fn folders_above_a_grant_give_their_names_on_macos_only() {
    use Verdict::*;
    let p = mac(WORKFLOW).unwrap();
    assert_eq!(v(&p, Op::List, "/w"), Allow);
    assert!(matches!(
        p.decide(Op::List, Path::new("/w")).reason,
        Reason::AboveGrant { .. }
    ));
    for op in [
        Op::Read,
        Op::Write,
        Op::Create,
        Op::Delete,
        Op::Rename,
        Op::Exec,
    ] {
        assert_eq!(v(&p, op, "/w"), Deny, "{op:?}");
    }
    assert_eq!(v(&p, Op::Read, "/w/config.json"), Deny);
    assert_eq!(v(&p, Op::List, "/w/other"), Deny);
    assert_eq!(v(&p, Op::List, "/w/wf"), Allow);
    assert_eq!(v(&p, Op::List, "/w/wf/planning"), Deny);
    // Where the rules allow the listing anyway, they keep their own reason.
    assert!(matches!(
        p.decide(Op::List, Path::new("/")).reason,
        Reason::BaseOpen
    ));
    assert_eq!(v(&linux(WORKFLOW), Op::List, "/w"), Deny);
}
