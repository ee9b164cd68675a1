//! The cut into regions, on shapes where a mistake would open or close the wrong thing.
//! (Whole profiles are checked against `Policy::decide` in tests/seatbelt_differential.rs.)

use std::path::PathBuf;

use super::layout::{Key, Layout, layout};
use super::*;
use crate::policy::ResolveOptions;

/// The policy in `text` without the devices every macOS policy grants (policy/devices.rs;
/// their cut is `devices_are_a_protected_root_with_grants`), so each shape is cut alone.
fn mac(text: &str) -> Policy {
    let mut p = with_devices(text);
    let devices = |o: &crate::policy::Origin| o.file == "(devices)";
    p.protected.retain(|r| !devices(&r.origin));
    p.grants.retain(|g| !devices(&g.origin));
    p
}

fn with_devices(text: &str) -> Policy {
    let opts = ResolveOptions::new(Target::Macos, PathBuf::from("/Users/ada"), false).unwrap();
    Policy::from_toml(text, "p.toml", &opts).unwrap()
}

/// `/dev` is left out of the open base; each device is its own region, `/dev/fd` with what
/// lies beneath, and only the read-write ones are writable.
#[test]
fn devices_are_a_protected_root_with_grants() {
    let p: &'static Policy = Box::leak(Box::new(with_devices("version = 1\nbase = \"open\"\n")));
    let l = layout(p);
    assert!(l.read[0].region.except.contains(&k("/dev")));
    assert!(l.write[0].region.except.contains(&k("/dev")));
    for device in [
        "/dev/null",
        "/dev/tty",
        "/dev/ptmx",
        "/dev/fd",
        "/dev/urandom",
    ] {
        assert!(read_roots(&l).contains(&k(device)), "{device}");
    }
    for rw in [
        "/dev/null",
        "/dev/tty",
        "/dev/ptmx",
        "/dev/fd",
        "/dev/dtracehelper",
    ] {
        assert!(write_roots(&l).contains(&k(rw)), "{rw}");
    }
    assert!(!write_roots(&l).contains(&k("/dev/urandom")));
    assert!(l.traverse.contains(&k("/dev")));
}

fn k(s: &str) -> Key<'_> {
    s.as_bytes()
}

fn read_roots<'a>(l: &'a Layout<'_>) -> Vec<&'a [u8]> {
    l.read.iter().map(|t| t.region.root).collect()
}

fn write_roots<'a>(l: &'a Layout<'_>) -> Vec<&'a [u8]> {
    l.write.iter().map(|t| t.region.root).collect()
}

#[test]
fn embedded_template_parses() {
    assert_eq!(Templates::embedded().origin(), &TemplateOrigin::Embedded);
}

#[test]
fn operations_map_as_documented() {
    assert_eq!(operation_for(Op::Read), "file-read-data");
    assert_eq!(operation_for(Op::List), "file-read-data");
    assert_eq!(operation_for(Op::Write), "file-write-data");
    assert_eq!(operation_for(Op::Create), "file-write-create");
    assert_eq!(operation_for(Op::Delete), "file-write-unlink");
    assert_eq!(operation_for(Op::Rename), "file-write-unlink");
    assert_eq!(operation_for(Op::Exec), "process-exec");
    assert_eq!(operation_for(Op::ConnectUnix), "network-outbound");
}

/// Each grant speaks for its own part: an rw grant leaves out the ro grant inside it, which
/// leaves out the rw grant inside that.
#[test]
fn nested_grants_partition() {
    let p = mac(
        "version = 1\nbase = \"open\"\n[[protected]]\npath = \"/p\"\n[[grant]]\npath = \"/p/a\"\naccess = \"rw\"\n[[grant]]\npath = \"/p/a/ro\"\naccess = \"ro\"\n[[grant]]\npath = \"/p/a/ro/rw\"\naccess = \"rw\"\n",
    );
    let l = layout(&p);
    assert_eq!(
        read_roots(&l),
        [k("/"), k("/p/a"), k("/p/a/ro"), k("/p/a/ro/rw")]
    );
    assert_eq!(write_roots(&l), [k("/"), k("/p/a"), k("/p/a/ro/rw")]);
    let outer = &l.write[1];
    assert_eq!(outer.region.except, [k("/p/a/ro")]);
    assert_eq!(l.read[2].region.except, [k("/p/a/ro/rw")]);
    // /p/a and /p/a/ro hold deeper grants: writable, never deleted or renamed.
    assert_eq!(outer.keep, [k("/p/a")]);
    assert!(
        l.keep.contains(&k("/p/a")) && !l.keep.contains(&k("/p/a/ro")),
        "{:?}",
        l.keep
    );
}

/// A refused path at a grant's own path, or around it, kills the grant; one inside is left
/// out of the grant's part only.
#[test]
fn refused_paths_cut_grants() {
    let p = mac(
        "version = 1\nbase = \"open\"\n[[protected]]\npath = \"/p\"\n[[grant]]\npath = \"/p/a\"\naccess = \"rw\"\n[[grant]]\npath = \"/p/a/dead\"\naccess = \"rw\"\n[[grant]]\npath = \"/p/a/gone/inner\"\naccess = \"ro\"\n[[refuse]]\npath = \"/p/a/dead\"\n[[refuse]]\npath = \"/p/a/gone\"\n[[refuse]]\npath = \"/p/a/x\"\n",
    );
    let l = layout(&p);
    assert_eq!(read_roots(&l), [k("/"), k("/p/a")]);
    assert_eq!(
        l.read[1].region.except,
        [k("/p/a/dead"), k("/p/a/gone"), k("/p/a/x")]
    );
    // Only the live grant needs a way down; the dead one under /p/a/gone does not.
    assert_eq!(l.traverse, [k("/p")]);
}

/// Launcher folders are refused whatever holds them, binaries only for exec; unblocked,
/// neither is.
#[test]
fn launchers_in_the_cut() {
    let blocked = layout_of("version = 1\nbase = \"open\"\n");
    let base = &blocked.read[0];
    assert!(
        base.region
            .except
            .contains(&k("/System/Library/Components/AppleScript.component"))
    );
    assert!(base.exec_except.contains(&k("/usr/bin/open")));
    let unblocked = layout_of("version = 1\nbase = \"open\"\n[launchers]\nblock = false\n");
    assert!(unblocked.read[0].region.except.is_empty());
    assert!(unblocked.read[0].exec_except.is_empty());
}

fn layout_of(text: &str) -> Layout<'static> {
    let p: &'static Policy = Box::leak(Box::new(mac(text)));
    layout(p)
}

/// A closed base opens its folders (one term for nested ones) and leaves out what the
/// policy protects; nothing else.
#[test]
fn closed_base_folders() {
    let l = layout_of(
        "version = 1\nbase = \"closed\"\n[[protected]]\npath = \"/usr/local/secret\"\n[closed]\nread = [\"/usr\"]\nwrite = [\"/usr/local\", \"/usr/local/secret/x\"]\n",
    );
    assert_eq!(read_roots(&l), [k("/usr")]);
    assert_eq!(write_roots(&l), [k("/usr/local")]);
    assert_eq!(l.write[0].region.except, [k("/usr/local/secret")]);
    assert_eq!(l.read[0].region.except, [k("/usr/local/secret")]);
    // The protected root's ancestors inside a writable folder are kept.
    assert_eq!(l.write[0].keep, [k("/usr/local")]);
}

/// With nothing readable the filter lists are empty, and the template writes no rule (a
/// rule without filters would apply everywhere).
#[test]
fn empty_lists_write_no_rule() {
    let p = mac(
        "version = 1\nbase = \"closed\"\n[closed]\nread = []\nwrite = []\n[launchers]\nblock = false\n",
    );
    let text = render(&p).unwrap();
    // The rules the region lists feed (the ptys' rule has its own filters).
    for op in [
        "file-read* file-ioctl",
        "file-write* file-link",
        "process-exec",
        "network-outbound\n",
        "network-bind\n",
    ] {
        assert!(!text.contains(&format!("(allow {op}")), "{op} in\n{text}");
    }
    assert!(
        text.contains("(allow network-outbound (remote ip"),
        "IP stays open"
    );
}
