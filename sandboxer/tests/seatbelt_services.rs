//! What the Seatbelt profile allows besides files, checked with the SBPL evaluator on the
//! default policy's profile and the product's (launchers blocked and allowed): Mach services
//! are an allowlist (services that run code outside the sandbox refused, XPC services
//! included), every sysctl but `kern.procargs*` is readable, System V IPC works, and the
//! macOS ways out (Docker Desktop, SSH agents, terminal control sockets, at/cron) are
//! refused, with `[macos] ways_out = false` as the control. The adapters' and a workflow
//! step's profiles are checked the same way in dispatcher/tests/seatbelt_launches.rs.

use std::collections::BTreeMap;
use std::path::Path;

use sandboxer::policy::{ResolveOptions, default_policy};
use sandboxer::sbpl::{self, Action, FilterKind, Outcome, Query};
use sandboxer::seatbelt::mach;
use sandboxer::{Policy, Target, seatbelt};

const PRODUCT: &str = include_str!("fixtures/product.toml");
const HOME: &str = "/Users/ada";

/// As a launch resolves a policy for the Mac user `ada` (uid 501): ways-out and autorun lists.
fn mac(text: &str) -> Policy {
    let opts = ResolveOptions::for_target(Target::Macos, Path::new(HOME), Some(501)).unwrap();
    Policy::from_toml(text, "policy.toml", &opts).unwrap()
}

fn parse(policy: &Policy) -> sbpl::Profile {
    let text = seatbelt::render(policy).unwrap();
    sbpl::parse(&text, &BTreeMap::new()).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// The default policy's, the product's, and the product's with launchers allowed.
fn profiles() -> Vec<(&'static str, sbpl::Profile)> {
    vec![
        ("default", parse(&mac(default_policy(Target::Macos)))),
        ("product", parse(&mac(PRODUCT))),
        (
            "unblocked",
            parse(&mac(&format!("{PRODUCT}\n[launchers]\nblock = false\n"))),
        ),
    ]
}

fn lookup(profile: &sbpl::Profile, name: &str) -> Outcome {
    profile
        .evaluate("mach-lookup", &Query::MachName(name))
        .outcome
}

/// Services that would run code, or act, outside the sandbox on a chat's behalf.
const OUTSIDE_THE_SANDBOX: &[&str] = &[
    "com.apple.foundation.UserScriptService",
    "com.apple.automator.runner",
    "com.apple.Automator.xpc.runner",
    "com.apple.shortcuts.xpc",
    "com.apple.siriactionsd",
    "com.apple.CoreSimulator.CoreSimulatorService",
    "com.apple.CoreSimulator.SimDevice.x",
    "com.apple.coreservices.sharedfilelistd.xpc",
    "com.apple.sharedfilelistd",
    "com.apple.windowserver.active",
    "com.apple.dock.server",
    "com.apple.dock.fullscreen",
    "com.apple.pasteboard.1",
    "com.apple.xpc.launchd.domain.system",
    "com.docker.vmnetd",
    "com.docker.helper",
];

#[test]
fn mach_services_are_an_allowlist() {
    for (name, profile) in profiles() {
        for s in &mach::embedded().services {
            assert_eq!(
                lookup(&profile, &s.name),
                Outcome::Allow,
                "{name}: {}",
                s.name
            );
        }
        for refused in OUTSIDE_THE_SANDBOX {
            assert_eq!(
                lookup(&profile, refused),
                Outcome::Deny,
                "{name}: {refused}"
            );
        }
        // No rule allows mach-lookup without a name filter, and none names an XPC service:
        // an XPC lookup (`xpc-service-name`) matches no allow and falls to `(deny default)`.
        for rule in profile.rules() {
            if rule.action == Action::Allow && rule.operations.iter().any(|o| o.starts_with("mach"))
            {
                assert!(
                    !rule.filters.is_empty()
                        || rule.operations == ["mach-host*"]
                        || rule.operations == ["mach-register"],
                    "{name}: {}",
                    rule.text
                );
                assert!(!rule.text.contains("xpc-service"), "{name}: {}", rule.text);
            }
        }
    }
}

/// The launcher services stay refused while blocked (LaunchServices, Apple Events, launchd's
/// own names are not on the list); `deny_mach_services` wins over the allowlist and over the
/// launcher prefixes when launchers are allowed.
#[test]
fn refusals_hold_over_the_allowlist() {
    let blocked = mac(PRODUCT);
    let profile = parse(&blocked);
    for m in &blocked.launchers.mach_services {
        assert_eq!(lookup(&profile, &m.name), Outcome::Deny, "{}", m.name);
    }
    assert_eq!(lookup(&profile, "com.apple.lsd.modifydb"), Outcome::Deny);
    let text = format!(
        "{PRODUCT}\n[launchers]\nblock = false\n[macos]\ndeny_mach_services = \
         [\"com.apple.logd\", \"com.apple.lsd.modifydb\"]\n"
    );
    let unblocked = mac(&text);
    let profile = parse(&unblocked);
    assert_eq!(lookup(&profile, "com.apple.logd"), Outcome::Deny);
    assert_eq!(lookup(&profile, "com.apple.lsd.modifydb"), Outcome::Deny);
    // The control: the same names without the refusal.
    assert_eq!(lookup(&profile, "com.apple.lsd.icons"), Outcome::Allow);
    assert_eq!(lookup(&profile, "com.apple.system.logger"), Outcome::Allow);
    for m in &unblocked.launchers.mach_services {
        assert_eq!(lookup(&profile, &m.name), Outcome::Allow, "{}", m.name);
    }
}

#[test]
fn every_sysctl_but_process_arguments_is_readable() {
    for (name, profile) in profiles() {
        for readable in [
            "hw.cachelinesize",
            "hw.ncpu",
            "kern.boottime",
            "kern.iossupportversion",
            "sysctl.proc_translated",
            "kern.proc.pid.123",
        ] {
            let e = profile.evaluate("sysctl-read", &Query::Sysctl(readable));
            assert_eq!(e.outcome, Outcome::Allow, "{name}: {readable}: {}", e.why);
        }
        for refused in ["kern.procargs", "kern.procargs2", "kern.procargs2.123"] {
            let e = profile.evaluate("sysctl-read", &Query::Sysctl(refused));
            assert_eq!(e.outcome, Outcome::Deny, "{name}: {refused}: {}", e.why);
        }
        assert_eq!(
            profile
                .evaluate("sysctl-write", &Query::Sysctl("kern.maxproc"))
                .outcome,
            Outcome::Deny,
            "{name}"
        );
    }
}

#[test]
fn system_v_ipc_is_allowed() {
    for (name, profile) in profiles() {
        for op in ["ipc-sysv-sem", "ipc-sysv-shm", "ipc-posix-sem"] {
            assert_eq!(
                profile.evaluate(op, &Query::NoObject).outcome,
                Outcome::Allow,
                "{name}: {op}"
            );
        }
    }
}

/// The macOS ways out added for Docker Desktop's real socket folder, the SSH agents of
/// 1Password and Secretive, WezTerm's and iTerm2's control sockets and Emacs's server files
/// (at/cron's /private/var/at is the autorun guard's: seatbelt_guard.rs): connecting, reading and creating are refused, and allowed with the list off.
#[test]
fn the_new_ways_out_are_refused() {
    let on = parse(&mac(PRODUCT));
    let off = parse(&mac(&format!("{PRODUCT}\n[macos]\nways_out = false\n")));
    let sockets = [
        "/Users/ada/Library/Containers/com.docker.docker/Data/docker.raw.sock",
        "/Users/ada/Library/Containers/com.docker.docker/Data/backend.sock",
        "/Users/ada/Library/Group Containers/2BUA8C4S2C.com.1password/t/agent.sock",
        "/Users/ada/.1password/agent.sock",
        "/Users/ada/Library/Containers/com.maxgoedjen.Secretive.SecretAgent/Data/socket.ssh",
        "/Users/ada/.local/share/wezterm/gui-sock-4242",
        "/Users/ada/Library/Application Support/iTerm2/private/socket",
    ];
    for s in sockets {
        let q = Query::UnixSocket(Path::new(s));
        assert_eq!(
            on.evaluate("network-outbound", &q).outcome,
            Outcome::Deny,
            "{s}"
        );
        assert_eq!(
            off.evaluate("network-outbound", &q).outcome,
            Outcome::Allow,
            "{s}"
        );
    }
    for (op, path) in [
        ("file-read-data", "/Users/ada/.emacs.d/server/server"),
        ("file-write-create", "/Users/ada/.emacs.d/server/planted"),
    ] {
        let q = Query::Path {
            path: Path::new(path),
            vnode: None,
        };
        assert_eq!(on.evaluate(op, &q).outcome, Outcome::Deny, "{op} {path}");
        assert_eq!(off.evaluate(op, &q).outcome, Outcome::Allow, "{op} {path}");
    }
}

/// The evaluator models the sysctl filters the template uses: the allowlist and the refusal
/// are decided, never unknown.
#[test]
fn the_sysctl_rule_is_modelled() {
    let profile = parse(&mac(PRODUCT));
    let rule = profile
        .rules()
        .iter()
        .find(|r| r.operations == ["sysctl-read"])
        .expect("a sysctl-read rule");
    assert!(
        matches!(&rule.filters[..], [f] if matches!(&f.kind, FilterKind::RequireNot(inner) if matches!(&inner.kind, FilterKind::SysctlNamePrefix(p) if p == "kern.procargs"))),
        "{}",
        rule.text
    );
    assert!(
        profile
            .unknown_constructs()
            .iter()
            .all(|c| !c.text.contains("sysctl"))
    );
}

/// `[macos] log_tag`: every deny rule of the profile carries it as its message (how the
/// dispatcher finds a chat's denials in the unified log); the profile decides exactly as
/// without it; a tag that a Seatbelt string or a log predicate could misread is refused,
/// naming the field.
#[test]
fn every_denial_carries_the_log_tag() {
    let tag = "[agentworks:chat-1]";
    let plain = mac(PRODUCT);
    let tagged = mac(&format!("{PRODUCT}\n[macos]\nlog_tag = \"{tag}\"\n"));
    let (a, b) = (parse(&plain), parse(&tagged));
    let denies: Vec<&sbpl::Rule> = b
        .rules()
        .iter()
        .filter(|r| r.action == Action::Deny)
        .collect();
    assert!(denies.len() >= 2, "the default denial and the guard's");
    for d in &denies {
        assert!(
            d.modifiers
                .iter()
                .any(|m| m.name == "message" && m.text == format!("(with message \"{tag}\")")),
            "a deny rule without the tag: {}",
            d.text
        );
    }
    assert!(!seatbelt::render(&plain).unwrap().contains("with message"));
    for (op, q) in [
        (
            "file-read-data",
            Query::Path {
                path: Path::new("/Users/ada/.ssh/id_rsa"),
                vnode: None,
            },
        ),
        (
            "file-write-data",
            Query::Path {
                path: Path::new("/Users/ada/.zshrc"),
                vnode: None,
            },
        ),
        (
            "file-write-data",
            Query::Path {
                path: Path::new("/Users/ada/notes.txt"),
                vnode: None,
            },
        ),
        ("mach-lookup", Query::MachName("com.apple.dock.server")),
    ] {
        assert_eq!(
            a.evaluate(op, &q).outcome,
            b.evaluate(op, &q).outcome,
            "{op} {q:?}"
        );
    }
    for bad in ["", "a b", "a\\\"b", "x\\\\y", "ü"] {
        let opts = ResolveOptions::for_target(Target::Macos, Path::new(HOME), Some(501)).unwrap();
        let e = Policy::from_toml(
            &format!("{PRODUCT}\n[macos]\nlog_tag = \"{bad}\"\n"),
            "policy.toml",
            &opts,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("macos.log_tag"), "{bad:?}: {e}");
    }
}

/// The services refused on purpose stay refused unless the policy opens one by name
/// (`[macos] allow_mach_services`), and only those: another name is a load error naming the
/// field, and `deny_mach_services` still wins.
#[test]
fn a_policy_opens_only_what_is_refused_on_purpose() {
    let pasteboard = "com.apple.pasteboard.1";
    assert!(
        mach::embedded()
            .refused
            .iter()
            .any(|r| r.name == pasteboard)
    );
    for (name, p) in profiles() {
        assert_eq!(lookup(&p, pasteboard), Outcome::Deny, "{name}");
    }
    let opened = format!("{PRODUCT}\n[macos]\nallow_mach_services = [\"{pasteboard}\"]\n");
    let p = parse(&mac(&opened));
    assert_eq!(lookup(&p, pasteboard), Outcome::Allow);
    assert_eq!(lookup(&p, "com.apple.FSEvents"), Outcome::Deny);
    let both = format!(
        "{PRODUCT}\n[macos]\nallow_mach_services = [\"{pasteboard}\"]\n\
         deny_mach_services = [\"{pasteboard}\"]\n"
    );
    assert_eq!(lookup(&parse(&mac(&both)), pasteboard), Outcome::Deny);
    let opts = ResolveOptions::for_target(Target::Macos, Path::new(HOME), Some(501)).unwrap();
    for bad in [
        "com.apple.coreservices.launchservicesd",
        "com.apple.foundation.UserScriptService",
    ] {
        let text = format!("{PRODUCT}\n[macos]\nallow_mach_services = [\"{bad}\"]\n");
        let e = Policy::from_toml(&text, "policy.toml", &opts).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("macos.allow_mach_services[0]") && msg.contains("policy.toml:"),
            "{msg}"
        );
    }
}
