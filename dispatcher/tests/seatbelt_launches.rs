//! The Seatbelt profiles the dispatcher writes, read by the SBPL evaluator: the default
//! policy's, every adapter's in every mode, and a workflow step's, for the Mac user `zoë`
//! (uid 501; a non-ASCII home, so that its names have NFC and NFD spellings).
//!
//! - Names reserved in every spelling: another case or Unicode form of a protected root, a
//!   refused path or a way out is never created (`wf/Planning`, `/private/tmp/TMUX-501`);
//!   the name's own neighbours are (`wf/planning2`).
//! - Devices: only null, zero, random, urandom, tty, ptmx, fd/ and dtracehelper; another
//!   terminal's `/dev/ttys*` is neither read nor written unless this sandbox opened it (the
//!   `com.apple.sandbox.pty` extension); ioctl on a pty held open is allowed.
//! - Bun: the folders above the working folder inside the state root give their metadata
//!   and their names, never a file in them (docs/seatbelt.md, "Bun").
//!
//! - The network: the default policy's profile (no `[network]`) reaches IP as the person's
//!   programs do; every adapter's (the state root's default, `public`) only the egress proxy's
//!   port on 127.0.0.1 and ::1 (not another loopback port, an outside address, port 53 or a
//!   bind), and neither the resolver's socket nor its Mach services; a step's (`none`) no IP.
//!
//! Every denial has its control: the same operation allowed on a neighbour.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dispatcher::adapter;
use dispatcher::ids::{ChatId, WorkflowId};
use dispatcher::launch::{self, LaunchRequest, Tools};
use dispatcher::state::{ChatSettings, StateRoot};
use dispatcher::step::{self, StepRequest};
use sandboxer::policy::{ResolveOptions, default_policy};
use sandboxer::sbpl::{self, Outcome, Query, VnodeType};
use sandboxer::{Policy, Target, seatbelt};

const HOME: &str = "/Users/zo\u{eb}";
/// The same home in NFD, as a caller may spell it.
const HOME_NFD: &str = "/Users/zoe\u{308}";
const PTY: &str = "com.apple.sandbox.pty";

/// One profile to check: its name for messages, the parsed profile, and where its launch
/// runs (None for the default policy, which grants nothing).
struct Subject {
    name: String,
    profile: sbpl::Profile,
    /// The uid whose ways out the profile refuses (`/private/tmp/tmux-UID`).
    uid: u32,
    state: Option<PathBuf>,
    workflow: Option<PathBuf>,
    cwd: Option<PathBuf>,
    /// What its policy's `[network]` says: `None` for no section, else the mode and the
    /// proxy's loopback port.
    network: Option<(String, Option<u16>)>,
}

/// The mode and proxy port a launch's policy text names.
fn network_of(policy: &str) -> Option<(String, Option<u16>)> {
    let doc = sandboxer::PolicyDocument::from_toml(policy, "policy.toml").unwrap();
    doc.network.map(|n| {
        let port = n.proxy.map(|p| {
            let p = p.into_inner();
            p.strip_prefix("127.0.0.1:")
                .unwrap_or_else(|| panic!("a Mac's proxy is a loopback port, not {p}"))
                .parse()
                .unwrap()
        });
        (n.mode.into_inner(), port)
    })
}

fn parse(name: &str, text: &str) -> sbpl::Profile {
    sbpl::parse(text, &BTreeMap::new()).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"))
}

fn mac(path: &Path) -> PathBuf {
    Target::Macos.apply_aliases(path)
}

/// The default policy's profile, and every adapter's and a step's on one state root.
fn subjects() -> (tempfile::TempDir, Vec<Subject>) {
    let opts = ResolveOptions::for_target(Target::Macos, Path::new(HOME), Some(501)).unwrap();
    let default = Policy::from_toml(default_policy(Target::Macos), "default.toml", &opts).unwrap();
    let mut out = vec![Subject {
        name: "default".into(),
        profile: parse("default", &seatbelt::render(&default).unwrap()),
        uid: 501,
        state: None,
        workflow: None,
        cwd: None,
        network: None,
    }];

    let dir = tempfile::tempdir().unwrap();
    let (state, _) = StateRoot::init(&dir.path().join("state-root"), None).unwrap();
    let chat = ChatId::new("c1").unwrap();
    let wf = WorkflowId::new("w1").unwrap();
    let settings = ChatSettings {
        mode: "auto".into(),
    };
    state.add_chat(&chat, &settings).unwrap();
    state.add_workflow(&wf).unwrap();
    let root = mac(state.path());
    let workflow = mac(&state.workflow(&wf));
    for a in adapter::load_all(None).unwrap() {
        for mode in a.modes.clone() {
            let req = LaunchRequest {
                cli: a.name.clone(),
                chat: chat.clone(),
                workflow: wf.clone(),
                attach: vec![],
                mode: Some(mode),
                headless: false,
                cwd: None,
                target: Target::Macos,
                home: PathBuf::from(HOME),
                cli_args: vec![],
                model_endpoint: None,
            };
            let tools = Tools {
                cli_binary: PathBuf::from(format!("/opt/clis/bin/{}", a.binary)),
                sandboxer: PathBuf::from("/opt/agentworks/bin/sandboxer"),
                dispatcher: PathBuf::from("/opt/agentworks/bin/dispatcher"),
                tmux: PathBuf::from("/opt/homebrew/bin/tmux"),
                clis: vec![],
                as_root: false,
                // A Mac's launch: the lists are resolved by the Mac's profile, not a wrapper.
                lists_env: Vec::new(),
            };
            let name = format!("{} {mode}", a.name);
            let l = launch::plan(&state, &a, &req, &tools, |_| Ok("test".into()))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            // Rendered at launch, from the planned policy, as the dispatcher does.
            let text = launch::seatbelt_profile(&l, Path::new(HOME), Some(501))
                .unwrap_or_else(|e| panic!("{name}: {e:#}"));
            out.push(Subject {
                profile: parse(&name, &text),
                name,
                uid: 501,
                state: Some(root.clone()),
                workflow: Some(workflow.clone()),
                cwd: Some(mac(&l.cwd)),
                network: network_of(l.policy_text().unwrap()),
            });
        }
    }

    let req = StepRequest {
        workflow: wf.clone(),
        step: WorkflowId::new("build").unwrap(),
        script: dir.path().join("build.sh"),
        args: vec![],
        attach: vec![],
    };
    let s = step::plan(
        &state,
        &req,
        Target::Macos,
        Path::new(HOME),
        Path::new("/opt/agentworks/bin/sandboxer"),
        |_| Ok("test".into()),
    )
    .unwrap();
    out.push(Subject {
        name: "step".into(),
        profile: parse("step", s.profile.as_deref().unwrap()),
        // A step's profile is for the person running the dispatcher: this process's uid.
        uid: std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(dir.path()).unwrap()),
        state: Some(root),
        workflow: Some(workflow),
        cwd: Some(mac(&s.cwd)),
        network: network_of(&s.policy_text),
    });
    assert!(out.len() > 8, "every adapter's profile is checked");
    (dir, out)
}

fn ask(profile: &sbpl::Profile, op: &str, path: &str) -> Outcome {
    let e = profile.evaluate(
        op,
        &Query::Path {
            path: Path::new(path),
            vnode: None,
        },
    );
    assert_ne!(e.outcome, Outcome::Unknown, "{op} {path}: {}", e.why);
    e.outcome
}

/// [`expect`] for a query that says what kind of object is at `path`.
fn expect_as(s: &Subject, op: &str, path: &Path, vnode: VnodeType, want: Outcome) {
    let e = s.profile.evaluate(
        op,
        &Query::Path {
            path,
            vnode: Some(vnode),
        },
    );
    assert_eq!(
        e.outcome, want,
        "{}: {op} {path:?} ({vnode:?}): {}",
        s.name, e.why
    );
}

fn expect(s: &Subject, op: &str, path: &str, want: Outcome) {
    assert_eq!(ask(&s.profile, op, path), want, "{}: {op} {path:?}", s.name);
}

fn create(s: &Subject, path: &str, want: Outcome) {
    expect(s, "file-write-create", path, want);
}

#[test]
fn names_are_reserved_in_every_spelling() {
    let (_dir, subjects) = subjects();
    for s in &subjects {
        // tmux's socket folder, a way out that may not exist yet.
        let uid = s.uid;
        create(s, &format!("/private/tmp/TMUX-{uid}"), Outcome::Deny);
        create(
            s,
            &format!("/private/tmp/Tmux-{uid}/default"),
            Outcome::Deny,
        );
        create(s, &format!("/private/tmp/tmux-{uid}"), Outcome::Deny);
        create(s, &format!("/private/tmp/tmux-{uid}0"), Outcome::Allow);
        // Ways out under the home, in NFD and in other cases.
        create(s, &format!("{HOME_NFD}/.Xauthority"), Outcome::Deny);
        create(s, &format!("{HOME_NFD}/.SCREEN"), Outcome::Deny);
        create(s, "/Users/ZO\u{cb}/.screen", Outcome::Deny);
        create(s, &format!("{HOME}/.Xauthority2"), Outcome::Allow);
        create(s, &format!("{HOME_NFD}/.Xauthority2"), Outcome::Allow);
        // The devices folder.
        create(s, "/DEV", Outcome::Deny);
        let Some(state) = &s.state else {
            // The default policy's state root.
            let root = format!("{HOME}/Library/Application Support/AgentWorks");
            create(s, &root.to_uppercase(), Outcome::Deny);
            create(
                s,
                &format!("{HOME_NFD}/Library/Application Support/AgentWorks"),
                Outcome::Deny,
            );
            create(s, &format!("{root}2"), Outcome::Allow);
            continue;
        };
        let state = state.to_str().unwrap();
        create(s, &state.to_uppercase(), Outcome::Deny);
        create(
            s,
            &format!("{}/config.json", state.to_uppercase()),
            Outcome::Deny,
        );
        create(s, &format!("{state}2"), Outcome::Allow);
        // The workflow's refused names, which the dispatcher makes later.
        let wf = s.workflow.as_ref().unwrap().to_str().unwrap();
        for taken in [
            "Planning",
            "PLANNING/x",
            "planning",
            "Workflow.db",
            "WORKFLOW.DB",
        ] {
            create(s, &format!("{wf}/{taken}"), Outcome::Deny);
        }
        for free in ["planning2", "notes", "Planning2/x"] {
            create(s, &format!("{wf}/{free}"), Outcome::Allow);
        }
    }
}

#[test]
fn only_the_listed_devices_and_own_ptys_are_open() {
    let (_dir, subjects) = subjects();
    for s in &subjects {
        // Read-write, read-only, and refused: another Terminal tab's pty, disks, packet
        // capture.
        let (yes, no) = (Outcome::Allow, Outcome::Deny);
        for (device, read, write) in [
            ("/dev/null", yes, yes),
            ("/dev/zero", yes, yes),
            ("/dev/tty", yes, yes),
            ("/dev/ptmx", yes, yes),
            ("/dev/fd/3", yes, yes),
            ("/dev/dtracehelper", yes, yes),
            ("/dev/random", yes, no),
            ("/dev/urandom", yes, no),
            ("/dev/ttys003", no, no),
            ("/dev/disk0", no, no),
            ("/dev/rdisk0", no, no),
            ("/dev/bpf0", no, no),
            ("/dev/pf", no, no),
        ] {
            expect(s, "file-read-data", device, read);
            expect(s, "file-write-data", device, write);
        }
        // The same pty opened by this sandbox through /dev/ptmx: the control.
        let held = |op, class| {
            let q = Query::HeldPath {
                path: Path::new("/dev/ttys003"),
                extension: class,
            };
            s.profile.evaluate(op, &q).outcome
        };
        for op in ["file-read-data", "file-write-data"] {
            assert_eq!(held(op, PTY), Outcome::Allow, "{}: {op}", s.name);
            assert_eq!(
                held(op, "com.apple.app-sandbox.read"),
                Outcome::Deny,
                "{}",
                s.name
            );
        }
        // ioctl on a pty held open (the inherited terminal): isatty, raw mode, window size.
        expect(s, "file-ioctl", "/dev/ttys003", Outcome::Allow);
        expect(s, "file-ioctl", "/dev/disk0", Outcome::Deny);
        // /dev itself: stat and list, never more.
        expect(s, "file-read-metadata", "/dev", Outcome::Allow);
        expect(s, "file-write-create", "/dev/x", Outcome::Deny);
    }
}

/// Bun's ancestors: the folders above the working folder inside the state root give their
/// metadata (realpath) and their names (Bun opens each), never a file in them nor a sibling
/// folder (docs/seatbelt.md, "Bun"); the working folder itself is listed.
#[test]
fn folders_above_the_working_folder_give_their_names_only() {
    let (_dir, subjects) = subjects();
    for s in subjects.iter().filter(|s| s.cwd.is_some()) {
        let cwd = s.cwd.as_ref().unwrap();
        let state = s.state.as_ref().unwrap();
        expect(s, "file-read-data", cwd.to_str().unwrap(), Outcome::Allow);
        let above: Vec<&Path> = cwd
            .ancestors()
            .skip(1)
            .filter(|a| a.starts_with(state))
            .collect();
        assert!(!above.is_empty(), "{}: {}", s.name, cwd.display());
        for a in above {
            let name = a.to_str().unwrap();
            expect(s, "file-read-metadata", name, Outcome::Allow);
            expect_as(s, "file-read-data", a, VnodeType::Directory, Outcome::Allow);
            expect_as(
                s,
                "file-read-data",
                a,
                VnodeType::RegularFile,
                Outcome::Deny,
            );
            // A folder beside the way down is another chat's or the product's own.
            let beside = a.join("beside");
            expect_as(
                s,
                "file-read-data",
                &beside,
                VnodeType::Directory,
                Outcome::Deny,
            );
        }
        let config = state.join("config.json");
        expect_as(
            s,
            "file-read-data",
            &config,
            VnodeType::RegularFile,
            Outcome::Deny,
        );
        expect(
            s,
            "file-read-metadata",
            config.to_str().unwrap(),
            Outcome::Deny,
        );
    }
}

fn ip(s: &Subject, op: &str, addr: &str) -> Outcome {
    let e = s.profile.evaluate(op, &Query::Ip(addr.parse().unwrap()));
    assert_ne!(
        e.outcome,
        Outcome::Unknown,
        "{}: {op} {addr}: {}",
        s.name,
        e.why
    );
    e.outcome
}

fn unix(s: &Subject, path: &str) -> Outcome {
    let e = s
        .profile
        .evaluate("network-outbound", &Query::UnixSocket(Path::new(path)));
    assert_ne!(e.outcome, Outcome::Unknown, "{}: {path}: {}", s.name, e.why);
    e.outcome
}

fn lookup(s: &Subject, name: &str) -> Outcome {
    let e = s.profile.evaluate("mach-lookup", &Query::MachName(name));
    assert_ne!(e.outcome, Outcome::Unknown, "{}: {name}: {}", s.name, e.why);
    e.outcome
}

const RESOLVER_SOCKET: &str = "/private/var/run/mDNSResponder";

#[test]
fn the_network_is_what_the_policy_says() {
    use Outcome::{Allow, Deny};
    let (_dir, subjects) = subjects();
    let resolvers = &sandboxer::seatbelt::mach::embedded().resolvers;
    assert!(!resolvers.is_empty());
    let (mut open, mut proxied, mut none) = (0, 0, 0);
    for s in &subjects {
        let out = |addr: &str| ip(s, "network-outbound", addr);
        let bind = |addr: &str| ip(s, "network-bind", addr);
        let inbound = |addr: &str| ip(s, "network-inbound", addr);
        // Unix sockets are decided as before: the chat's own runtime (a launch's) is open.
        if let Some(cwd) = &s.cwd {
            let own = cwd.join("x.sock");
            assert_eq!(unix(s, own.to_str().unwrap()), Allow, "{}", s.name);
        }
        match &s.network {
            // The default policy has no [network]: the old behaviour, IP and DNS open.
            None => {
                open += 1;
                for addr in ["127.0.0.1:3128", "[::1]:9", "203.0.113.5:443", "8.8.8.8:53"] {
                    assert_eq!(out(addr), Allow, "{}: {addr}", s.name);
                }
                assert_eq!(bind("127.0.0.1:8080"), Allow, "{}", s.name);
                assert_eq!(inbound("0.0.0.0:8080"), Allow, "{}", s.name);
                assert_eq!(unix(s, RESOLVER_SOCKET), Allow, "{}", s.name);
            }
            Some((mode, Some(port))) => {
                proxied += 1;
                assert_eq!(mode, "public", "{}: the state root's default", s.name);
                let at = |host: &str, p: u16| format!("{host}:{p}");
                // The proxy, on both loopback addresses: the control for every refusal.
                assert_eq!(out(&at("127.0.0.1", *port)), Allow, "{}", s.name);
                assert_eq!(out(&at("[::1]", *port)), Allow, "{}", s.name);
                let other = if *port == 65535 { port - 1 } else { port + 1 };
                for addr in [
                    at("127.0.0.1", other),
                    at("[::1]", other),
                    at("203.0.113.5", *port),
                    at("203.0.113.5", 443),
                    at("[2001:db8::1]", 443),
                    at("[::ffff:127.0.0.1]", *port),
                    "8.8.8.8:53".into(),
                    "127.0.0.1:53".into(),
                    "[::1]:53".into(),
                ] {
                    assert_eq!(out(&addr), Deny, "{}: {addr}", s.name);
                }
                for addr in [
                    at("127.0.0.1", *port),
                    at("0.0.0.0", 8080),
                    at("[::]", other),
                ] {
                    assert_eq!(bind(&addr), Deny, "{}: bind {addr}", s.name);
                    assert_eq!(inbound(&addr), Deny, "{}: inbound {addr}", s.name);
                }
                assert_eq!(unix(s, RESOLVER_SOCKET), Deny, "{}", s.name);
                // The control: the socket beside it is still reachable where writing is.
                assert_eq!(unix(s, "/private/var/run/other.sock"), Allow, "{}", s.name);
            }
            Some((mode, None)) => {
                none += 1;
                assert_eq!(mode, "none", "{}", s.name);
                for addr in [
                    "127.0.0.1:3128",
                    "[::1]:3128",
                    "203.0.113.5:443",
                    "8.8.8.8:53",
                ] {
                    assert_eq!(out(addr), Deny, "{}: {addr}", s.name);
                }
                assert_eq!(bind("127.0.0.1:8080"), Deny, "{}", s.name);
                assert_eq!(unix(s, RESOLVER_SOCKET), Deny, "{}", s.name);
            }
        }
        // The resolver's Mach services: refused unless the network is open; in the open
        // profile they are refused too (none is on the allowlist), so the control is a
        // listed service allowed in every profile.
        for name in resolvers {
            assert_eq!(lookup(s, name), Deny, "{}: {name}", s.name);
        }
        assert_eq!(
            lookup(s, "com.apple.system.opendirectoryd.libinfo"),
            Allow,
            "{}",
            s.name
        );
    }
    assert_eq!((open, none), (1, 1), "the default policy's and the step's");
    assert!(proxied > 8, "every adapter's profile, in every mode");
}

/// The Mach services refused on purpose (`[[refused]]` in profiles/macos/mach-services.toml:
/// FSEvents, diagnosticd, the pasteboard) are refused by every profile the dispatcher writes;
/// the control is a listed service, allowed by each, and the two network configuration
/// readers every resolver needs.
#[test]
fn refused_services_stay_refused() {
    let list = sandboxer::seatbelt::mach::embedded();
    let (_dir, subjects) = subjects();
    for s in &subjects {
        for r in &list.refused {
            assert_eq!(lookup(s, &r.name), Outcome::Deny, "{}: {}", s.name, r.name);
        }
        for name in [
            "com.apple.system.opendirectoryd.libinfo",
            "com.apple.SystemConfiguration.configd",
            "com.apple.SystemConfiguration.DNSConfiguration",
            "com.apple.lsd.mapdb",
        ] {
            assert_eq!(lookup(s, name), Outcome::Allow, "{}: {name}", s.name);
        }
    }
}
