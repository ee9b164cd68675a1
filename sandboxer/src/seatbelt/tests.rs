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

/// The policy's `[network]` → what its profile reaches over IP, through the evaluator: the
/// proxy's port (and the named loopback ports) on 127.0.0.1 and ::1 only in the proxied
/// modes; nothing in `none` or without a proxy; everything in `open` and without a section.
#[test]
fn ip_reach_follows_the_network_section() {
    use crate::sbpl::{self, Outcome, Query};
    let net = |section: &str| {
        with_devices(&format!(
            "version = 1\nbase = \"open\"\n\n[network]\n{section}"
        ))
    };
    let public = net("mode = \"public\"\nloopback = [8080, 4000]\nproxy = \"127.0.0.1:4000\"\n");
    assert_eq!(
        IpReach::of(&public),
        IpReach::LoopbackPorts(vec![4000, 8080])
    );
    let bare = net("mode = \"allowlist\"\n");
    assert_eq!(IpReach::of(&bare), IpReach::Nothing);
    assert_eq!(IpReach::of(&net("mode = \"none\"\n")), IpReach::Nothing);
    assert_eq!(IpReach::of(&net("mode = \"open\"\n")), IpReach::Open);
    let absent = with_devices("version = 1\nbase = \"open\"\n");
    assert_eq!(IpReach::of(&absent), IpReach::Open);

    let ask = |p: &Policy, op: &str, addr: &str| {
        let profile = sbpl::parse(&render(p).unwrap(), &Default::default()).unwrap();
        profile
            .evaluate(op, &Query::Ip(addr.parse().unwrap()))
            .outcome
    };
    let out = "network-outbound";
    for addr in ["127.0.0.1:4000", "[::1]:4000", "127.0.0.1:8080"] {
        assert_eq!(ask(&public, out, addr), Outcome::Allow, "{addr}");
        assert_eq!(ask(&bare, out, addr), Outcome::Deny, "{addr}");
        assert_eq!(ask(&absent, out, addr), Outcome::Allow, "{addr}");
    }
    assert_eq!(ask(&public, out, "127.0.0.1:4001"), Outcome::Deny);
    assert_eq!(ask(&public, out, "192.0.2.1:4000"), Outcome::Deny);
    assert_eq!(
        ask(&public, "network-bind", "127.0.0.1:4000"),
        Outcome::Deny
    );
    assert_eq!(
        ask(&absent, "network-bind", "127.0.0.1:4000"),
        Outcome::Allow
    );
}

/// The resolver's services are left out unless the network is open, from the names and,
/// with launchers allowed, from under their prefixes; the resolver's socket likewise.
#[test]
fn the_resolver_is_closed_unless_the_network_is_open() {
    let list = mach::MachServices {
        services: vec![
            mach::MachService {
                name: "com.example.resolver".into(),
                why: "test".into(),
            },
            mach::MachService {
                name: "com.example.other".into(),
                why: "test".into(),
            },
        ],
        resolvers: vec!["com.example.resolver".into()],
        refused: Vec::new(),
    };
    let p = mac("version = 1\nbase = \"open\"\n\n[launchers]\nblock = false\n");
    let open = mach_lookups(&p, &list, true).unwrap();
    assert!(open.names.contains(&"\"com.example.resolver\"".to_string()));
    assert!(open.denied.is_empty());
    let closed = mach_lookups(&p, &list, false).unwrap();
    assert!(
        !closed
            .names
            .contains(&"\"com.example.resolver\"".to_string())
    );
    assert!(closed.names.contains(&"\"com.example.other\"".to_string()));
    assert_eq!(closed.denied, ["\"com.example.resolver\""]);

    let socket_rule = |p: &Policy| {
        let text = render(p).unwrap();
        text.contains(
            "(require-not (remote unix-socket (path-literal \"/private/var/run/mDNSResponder\")))",
        )
    };
    assert!(!socket_rule(&mac("version = 1\nbase = \"open\"\n")));
    assert!(socket_rule(&mac(
        "version = 1\nbase = \"open\"\n\n[network]\nmode = \"none\"\n"
    )));
}
