//! The Linux planner: plans for the product-shaped policy (snapshots), the fallback rule and
//! its refusals, and the property that a plan's own model (`Plan::decide`) agrees with the
//! policy's (`Policy::decide`) everywhere except where a gap the plan lists explains it.
//!
//! Everything runs against an in-memory tree (`MemFs`) under a fixed fake home, never the
//! real one.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use sandboxer::linux::facts::Blocker;
use sandboxer::linux::plan::{Facts, FsRight, LandlockRule, MountStep, Plan, Shape};
use sandboxer::linux::planner::{
    Decider, EntryKind, GapKind, MemFs, MountEffect, Refusal, RefusalId, WAYS_OUT_ORIGIN,
    choose_with, classify, plan_with,
};
use sandboxer::policy::{Enforce, ResolveOptions};
use sandboxer::ways_out::{self, Env};
use sandboxer::{Op, Policy, Target, Verdict};

const HOME: &str = "/home/ada";

/// The product's shape (`tests/fixtures/product.toml`) with Linux paths: the state
/// root under XDG_DATA_HOME, the workspace documents, one chat's runtime and two workflows.
const PRODUCT_LINUX: &str = r#"
version = 1
base = "open"

[[protected]]
path = "~/.local/share/agentworks"
why = "the dispatcher's state root"
[[protected]]
path = "~/Documents/AgentWorks"
why = "the workspace documents"

[[grant]]
path = "~/.local/share/agentworks/state/cli-runtimes/v1/chat-1"
access = "rw"
[[grant]]
path = "~/Documents/AgentWorks/wf-main"
access = "rw"
[[grant]]
path = "~/Documents/AgentWorks/wf-ref"
access = "ro"

[[refuse]]
path = "~/Documents/AgentWorks/wf-main/planning"
[[refuse]]
path = "~/Documents/AgentWorks/wf-main/workflow.db"
"#;

fn env() -> Env {
    Env {
        uid: 1000,
        user: "ada".into(),
        home: PathBuf::from(HOME),
        vars: Default::default(),
        extra: Vec::new(),
    }
}

fn product() -> Policy {
    let mut opts = ResolveOptions::new(Target::Linux, PathBuf::from(HOME), false).unwrap();
    opts.ways_out =
        ways_out::expand(Target::Linux, ways_out::embedded(Target::Linux), &env()).unwrap();
    Policy::from_toml(PRODUCT_LINUX, "product.toml", &opts).unwrap()
}

/// A small Linux machine: the person's home with the product's state, a session bus, an X
/// server, Docker, and the system folders.
fn machine() -> MemFs {
    let mut fs = MemFs::new();
    for d in [
        "/usr/bin",
        "/etc",
        "/dev/pts",
        "/proc",
        "/tmp",
        "/run/user/1000",
        "/home/ada/projects/site",
        "/home/ada/.config",
        "/home/ada/.local/bin",
        "/home/ada/.local/share/agentworks/state/cli-runtimes/v1/chat-1",
        "/home/ada/.local/share/agentworks/state/cli-runtimes/v1/chat-2",
        "/home/ada/.local/share/agentworks/personal-mcp",
        "/home/ada/Documents/AgentWorks/wf-main/planning",
        "/home/ada/Documents/AgentWorks/wf-ref",
        "/home/ada/Documents/AgentWorks/wf-other",
        "/home/ada/Documents/notes",
    ] {
        fs.dir(d);
    }
    for f in [
        "/usr/bin/bash",
        "/etc/passwd",
        "/home/ada/.bashrc",
        "/home/ada/.Xauthority",
        "/home/ada/.local/share/agentworks/config.json",
        "/home/ada/Documents/AgentWorks/wf-main/src.md",
        "/home/ada/Documents/AgentWorks/wf-ref/a.md",
    ] {
        fs.file(f);
    }
    for s in [
        "/run/user/1000/bus",
        "/tmp/.X11-unix/X0",
        "/run/docker.sock",
        "/run/dbus/system_bus_socket",
        "/dev/null",
    ] {
        fs.add(s, EntryKind::Other);
    }
    for ro in ["/", "/run", "/run/user", "/usr", "/usr/bin", "/etc", "/dev"] {
        fs.read_only(ro);
    }
    fs
}

fn facts(abi: u32, userns: bool) -> Facts {
    Facts {
        landlock_abi: abi,
        user_namespaces: userns,
        mount_pid_namespaces: userns,
        uid: 1000,
        gid: 1000,
        namespaces_blocked_by: (!userns).then_some(Blocker::AppArmorRestriction),
    }
}

fn gap_ids(plan: &Plan) -> Vec<&str> {
    plan.gaps.iter().map(|g| g.id.as_str()).collect()
}

/// The product policy on this file system, with Landlock ABI `abi` and user namespaces or
/// not, in the shape `Enforce::Auto` chooses.
fn choose_product(abi: u32, userns: bool) -> Result<Plan, Refusal> {
    choose_with(&product(), &facts(abi, userns), &machine(), Enforce::Auto)
}

/// The refusal's message says `what`.
#[track_caller]
fn assert_says(err: &Refusal, what: &str) {
    assert!(err.message.contains(what), "{}", err.message);
}

/// A temporary folder (removed when the first value drops) and its real path, to serve as
/// the home a policy resolves `~` to.
fn temp_home() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let home = std::fs::canonicalize(dir.path()).unwrap();
    (dir, home)
}

fn v(plan: &Plan, op: Op, path: &str) -> Verdict {
    plan.decide(op, Path::new(path)).verdict
}

#[test]
fn product_masks_plan_snapshot() {
    let plan = choose_product(7, true).unwrap();
    assert_eq!(plan.shape, Shape::Masks);
    insta::assert_yaml_snapshot!("product_masks_abi7", plan);
}

#[test]
fn product_landlock_only_plan_snapshot() {
    let plan = plan_with(
        &product(),
        &facts(9, false),
        Shape::LandlockOnly,
        &machine(),
    )
    .unwrap();
    insta::assert_yaml_snapshot!("product_landlock_only_abi9", plan);
}

#[test]
fn product_masks_plan_decides_like_the_policy() {
    let policy = product();
    let plan = choose_with(&policy, &facts(7, true), &machine(), Enforce::Auto).unwrap();
    let app = "/home/ada/.local/share/agentworks";
    let docs = "/home/ada/Documents/AgentWorks";
    use Verdict::*;
    for (op, path, want) in [
        (Op::Read, "/home/ada/.bashrc".to_string(), Allow),
        (Op::Create, "/home/ada/new.txt".into(), Allow),
        (Op::List, "/home/ada".into(), Allow),
        (Op::Read, format!("{app}/config.json"), Deny),
        (Op::List, app.into(), Deny),
        (
            Op::Read,
            format!("{app}/state/cli-runtimes/v1/chat-2/x"),
            Deny,
        ),
        (
            Op::Write,
            format!("{app}/state/cli-runtimes/v1/chat-1/x"),
            Allow,
        ),
        (Op::Create, format!("{app}/state/cli-runtimes/v1/new"), Deny),
        (Op::Write, format!("{docs}/wf-main/src.md"), Allow),
        (Op::Read, format!("{docs}/wf-main/planning/plan.json"), Deny),
        (Op::Create, format!("{docs}/wf-main/workflow.db"), Deny),
        (Op::Read, format!("{docs}/wf-ref/a.md"), Allow),
        (Op::Write, format!("{docs}/wf-ref/a.md"), Deny),
        (Op::Read, format!("{docs}/wf-other/a.md"), Deny),
        (Op::ConnectUnix, "/run/user/1000/bus".into(), Deny),
        (Op::ConnectUnix, "/tmp/.X11-unix/X0".into(), Deny),
        (Op::ConnectUnix, "/run/docker.sock".into(), Deny),
        (Op::ConnectUnix, "/run/dbus/system_bus_socket".into(), Deny),
        (Op::Read, "/home/ada/.Xauthority".into(), Deny),
        (Op::Write, "/dev/null".into(), Allow),
        (Op::Exec, "/usr/bin/bash".into(), Allow),
    ] {
        assert_eq!(
            v(&plan, op, &path),
            want,
            "{op} {path}: {}",
            plan.decide(op, Path::new(&path))
        );
        assert_eq!(
            policy.decide(op, Path::new(&path)).verdict,
            want,
            "the policy itself: {op} {path}"
        );
    }
    // A socket in the read-only grant (no resolve-unix at ABI 7): the socket broker refuses
    // it, as every pathname socket off the policy's `unix_sockets`.
    let d = plan.decide(Op::ConnectUnix, Path::new(&format!("{docs}/wf-ref/s.sock")));
    assert_eq!(d.verdict, Deny);
    assert!(matches!(d.by, Decider::SocketBroker));
    assert!(!gap_ids(&plan).contains(&"read-only-grant-sockets"));
    assert!(plan.breaking_gaps().next().is_none(), "{:#?}", plan.gaps);
}

#[test]
fn decisions_name_the_deciding_mask_or_rule() {
    let plan = choose_product(7, true).unwrap();
    let home = "/home/ada";
    let docs = "/home/ada/Documents/AgentWorks";
    for (op, path, says) in [
        (
            Op::Read,
            format!("{home}/.local/share/agentworks/config.json"),
            format!("deny: mount step 14 covers {home}/.local/share/agentworks"),
        ),
        (
            Op::Write,
            format!("{docs}/wf-ref/a.md"),
            format!("deny: mount step 16 binds read-only {docs}/wf-ref"),
        ),
        (
            Op::Read,
            format!("{home}/.bashrc"),
            "allow: Landlock rule 0 on / grants read-file".into(),
        ),
        (
            Op::Read,
            "relative".into(),
            "deny: the path is not absolute".into(),
        ),
    ] {
        assert_eq!(plan.decide(op, Path::new(&path)).to_string(), says);
    }
    let d = plan.decide(Op::Delete, Path::new(&format!("{docs}/wf-main")));
    assert!(
        matches!(
            d.by,
            Decider::Mount {
                effect: MountEffect::MountPoint,
                ..
            }
        ),
        "{d}"
    );
}

#[test]
fn abi_9_masks_close_sockets_in_read_only_grants_by_hole_punching() {
    let plan = choose_product(9, true).unwrap();
    assert_eq!(plan.shape, Shape::Masks);
    let sock = "/home/ada/Documents/AgentWorks/wf-ref/s.sock";
    let d = plan.decide(Op::ConnectUnix, Path::new(sock));
    assert_eq!(d.verdict, Verdict::Deny, "{d}");
    assert!(
        !gap_ids(&plan).contains(&"read-only-grant-sockets"),
        "{:?}",
        gap_ids(&plan)
    );
    // Elsewhere Landlock lets sockets be reached (siblings along the way got resolve-unix
    // back); the socket broker still refuses what the policy's `unix_sockets` does not list.
    let d = plan.decide(
        Op::ConnectUnix,
        Path::new("/home/ada/projects/site/dev.sock"),
    );
    assert!(matches!(d.by, Decider::SocketBroker), "{d}");
    assert!(plan.landlock.narrowed.contains(&PathBuf::from("/home/ada")));
    // The rule on `/` has every right except resolve-unix.
    let root = &plan.landlock.rules[0];
    assert_eq!(root.path, Path::new("/"));
    assert!(!root.rights.contains(&FsRight::ResolveUnix));
    assert_eq!(root.rights.len(), plan.landlock.handled.len() - 1);
    insta::assert_yaml_snapshot!("product_masks_abi9_landlock", plan.landlock);
}

#[test]
fn fallback_without_user_namespaces_is_a_refusal_that_says_why() {
    let err = choose_product(7, false).unwrap_err();
    assert_eq!(err.id, RefusalId::NoUserNamespaces);
    assert_says(&err, "kernel.apparmor_restrict_unprivileged_userns=0");
    assert_says(&err, "apparmor --install");
    // Pathname sockets are closed by the socket broker on every ABI.
    assert!(!err.message.contains("pathname-sockets"), "{}", err.message);
    assert_says(&err, "metadata-unguarded");
    assert_says(&err, "bridge-only");
    insta::assert_yaml_snapshot!("refusal_abi7_no_userns", err);

    // ABI 9 closes pathname sockets, but metadata of protected files stays open: still refused.
    let err = choose_product(9, false).unwrap_err();
    assert_eq!(err.id, RefusalId::NoUserNamespaces);
    assert!(!err.message.contains("pathname-sockets"), "{}", err.message);
    assert_says(&err, "metadata-unguarded");
}

#[test]
fn no_landlock_and_old_landlock_are_refused() {
    let err = choose_product(0, true).unwrap_err();
    assert_eq!(err.id, RefusalId::NoLandlock);
    assert_says(&err, "Landlock is missing");
    insta::assert_yaml_snapshot!("refusal_abi0", err);

    // Masks alone do not reach abstract sockets: ABI 5 is not enough, and says so.
    let err = choose_product(5, true).unwrap_err();
    assert_eq!(err.id, RefusalId::LandlockTooOld);
    assert_says(&err, "abstract-unix-sockets");
    let masks = plan_with(&product(), &facts(5, true), Shape::Masks, &machine()).unwrap();
    let breaking: Vec<&str> = masks.breaking_gaps().map(|g| g.id.as_str()).collect();
    assert_eq!(breaking, ["abstract-unix-sockets"]);
    // ...and ABI 6 is (the documented minimum).
    assert_eq!(choose_product(6, true).unwrap().shape, Shape::Masks);
    assert_eq!(sandboxer::linux::planner::MIN_ABI_MASKS, 6);
}

#[test]
fn enforce_knob_limits_the_shapes_tried() {
    let err = choose_with(&product(), &facts(7, false), &machine(), Enforce::Masks).unwrap_err();
    assert_eq!(err.id, RefusalId::NoUserNamespaces);
    assert_eq!(err.attempts.len(), 1);
    assert_says(&err, "asks for `masks` only");
    let err = choose_with(
        &product(),
        &facts(7, true),
        &machine(),
        Enforce::LandlockOnly,
    )
    .unwrap_err();
    assert_eq!(err.id, RefusalId::GapsBreakPolicy);
    assert_eq!(err.attempts[0].shape, Shape::LandlockOnly);
}

/// Every folder holding a masked or refused path is pinned (bound onto itself: renaming,
/// removing or replacing it fails with EBUSY), up to but not `/`; folders inside a cover are
/// not; a folder between a bound-back grant and a refused path inside it is pinned after the
/// bind-back (which would hide it otherwise) and before the refusal.
#[test]
fn pins_hold_every_folder_above_a_masked_or_refused_path() {
    let policy = product();
    let plan = choose_with(&policy, &facts(7, true), &machine(), Enforce::Auto).unwrap();
    let pins: Vec<&Path> = plan
        .mounts
        .iter()
        .filter_map(|m| match m {
            MountStep::Pin { path, .. } => Some(path.as_path()),
            _ => None,
        })
        .collect();
    for p in [
        "/home",
        "/home/ada",
        "/home/ada/.local",
        "/home/ada/.local/share",
        "/home/ada/Documents",
        "/tmp",
        "/run",
        "/run/user",
    ] {
        assert!(pins.contains(&Path::new(p)), "{p} not pinned: {pins:?}");
        for op in [Op::Delete, Op::Rename] {
            let d = plan.decide(op, Path::new(p));
            assert!(
                matches!(
                    d.by,
                    Decider::Mount {
                        effect: MountEffect::MountPoint,
                        ..
                    }
                ),
                "{op} {p}: {d}"
            );
        }
        assert_eq!(v(&plan, Op::Write, &format!("{p}/x")), Verdict::Allow);
        assert_eq!(v(&plan, Op::Create, &format!("{p}/x")), Verdict::Allow);
    }
    assert!(!pins.contains(&Path::new("/")));
    // Inside the state root's cover, the folders above the bound-back chat are not pinned.
    assert!(
        !pins
            .iter()
            .any(|p| p.starts_with("/home/ada/.local/share/agentworks"))
    );
    let moved = plan.gaps.iter().find(|g| g.id == "ancestor-move");
    assert!(
        moved.is_none_or(|g| !g.paths.iter().any(|p| pins.contains(&p.as_path()))),
        "{moved:?}"
    );

    // A grant bound back into a cover, a refused path two levels inside it.
    let policy = linux_policy(
        "version = 1\nbase = \"open\"\n[linux]\nways_out = false\n\
         [[protected]]\npath = \"~/Documents\"\n\
         [[grant]]\npath = \"~/Documents/notes\"\naccess = \"rw\"\n\
         [[refuse]]\npath = \"~/Documents/notes/wf/private\"\n",
        &[],
    );
    let mut fs = machine();
    fs.dir("/home/ada/Documents/notes/wf/private");
    let plan = choose_with(&policy, &facts(7, true), &fs, Enforce::Auto).unwrap();
    let at = |want: &str| {
        plan.mounts
            .iter()
            .position(|m| m.path() == Path::new(want))
            .unwrap_or_else(|| panic!("no step on {want}: {:#?}", plan.mounts))
    };
    let (grant, pin, refuse) = (
        at("/home/ada/Documents/notes"),
        at("/home/ada/Documents/notes/wf"),
        at("/home/ada/Documents/notes/wf/private"),
    );
    assert!(matches!(plan.mounts[pin], MountStep::Pin { .. }));
    assert!(grant < pin && pin < refuse, "{:#?}", plan.mounts);
    for (op, rest, want) in [
        (Op::Rename, "", Verdict::Deny),
        (Op::Read, "/a.md", Verdict::Allow),
        (Op::Write, "/a.md", Verdict::Allow),
        (Op::Read, "/private/a.md", Verdict::Deny),
    ] {
        let path = format!("/home/ada/Documents/notes/wf{rest}");
        assert_eq!(v(&plan, op, &path), want, "{path}");
    }
}

fn linux_policy(text: &str, ways_out: &[(&str, &str)]) -> Policy {
    let mut opts = ResolveOptions::new(Target::Linux, PathBuf::from(HOME), false).unwrap();
    opts.ways_out = ways_out
        .iter()
        .map(|(p, w)| (PathBuf::from(p), w.to_string()))
        .collect();
    Policy::from_toml(text, "p.toml", &opts).unwrap()
}

#[test]
fn landlock_only_serves_a_closed_base_without_protected_roots() {
    let policy = linux_policy(
        "version = 1\nbase = \"closed\"\n[linux]\nways_out = false\n\
         [[grant]]\npath = \"~/projects/site\"\naccess = \"rw\"\n",
        &[],
    );
    let plan = choose_with(&policy, &facts(7, false), &machine(), Enforce::Auto).unwrap();
    assert_eq!(plan.shape, Shape::LandlockOnly);
    assert!(plan.mounts.is_empty() && !plan.namespaces);
    assert_eq!(
        v(&plan, Op::Write, "/home/ada/projects/site/x"),
        Verdict::Allow
    );
    assert_eq!(v(&plan, Op::Read, "/home/ada/.bashrc"), Verdict::Deny);
    assert_eq!(v(&plan, Op::Read, "/usr/bin/bash"), Verdict::Allow);
    assert_eq!(v(&plan, Op::Write, "/usr/bin/bash"), Verdict::Deny);
    assert_eq!(v(&plan, Op::Write, "/dev/null"), Verdict::Allow);
    let ids = gap_ids(&plan);
    assert!(
        ids.contains(&"unix-socket-allowlist") && ids.contains(&"closed-base-metadata"),
        "{ids:?}"
    );
    assert!(
        plan.landlock.narrowed.is_empty(),
        "a closed base needs no hole punching here"
    );
    // Without Landlock the same policy is refused: nothing else enforces a closed base.
    let err = choose_with(&policy, &facts(0, true), &machine(), Enforce::Auto).unwrap_err();
    assert_eq!(err.id, RefusalId::NoLandlock);
}

#[test]
fn absent_paths_get_placeholders_only_where_safe() {
    let policy = linux_policy(
        "version = 1\nbase = \"open\"\n\
         [[protected]]\npath = \"~/state\"\n\
         [[protected]]\npath = \"/srv/aw\"\n\
         [[grant]]\npath = \"~/state/chat\"\naccess = \"rw\"\n",
        &[("/tmp/tmux-1000", "tmux")],
    );
    let plan = choose_with(&policy, &facts(7, true), &machine(), Enforce::Auto).unwrap();
    // ~/state is missing under a writable home: a placeholder folder, covered.
    assert!(
        plan.mounts.iter().any(|m| matches!(m,
            MountStep::Cover { path, existed: false, is_dir: true, .. }
                if path == Path::new("/home/ada/state"))),
        "{:#?}",
        plan.mounts
    );
    // /srv does not exist and `/` is not writable: nobody inside can make it, so no
    // placeholder and no Landlock narrowing of `/`; listed as out of reach.
    let srv = plan
        .absent
        .iter()
        .find(|a| a.path == Path::new("/srv/aw"))
        .expect("absent");
    assert!(!srv.creatable && !srv.ways_out);
    assert!(
        plan.landlock.narrowed.is_empty(),
        "{:?}",
        plan.landlock.narrowed
    );
    assert_eq!(
        classify(&plan, &policy, Op::Create, Path::new("/srv/aw")),
        Some(GapKind::AbsentOutOfReach)
    );
    // In landlock-only nothing is placeholdered: the creatable ~/state is kept uncreatable by
    // narrowing the home instead.
    let ll = plan_with(&policy, &facts(9, false), Shape::LandlockOnly, &machine()).unwrap();
    let state = ll
        .absent
        .iter()
        .find(|a| a.path == Path::new("/home/ada/state"))
        .unwrap();
    assert!(state.creatable);
    assert_eq!(v(&ll, Op::Create, "/home/ada/state"), Verdict::Deny);
    assert!(ll.landlock.narrowed.contains(&PathBuf::from("/home/ada")));
    // A missing ways-out entry is left alone (a daemon may want it later) and listed.
    assert!(
        !plan
            .mounts
            .iter()
            .any(|m| m.path() == Path::new("/tmp/tmux-1000"))
    );
    let gap = plan
        .gaps
        .iter()
        .find(|g| g.id == "absent-ways-out")
        .expect("listed");
    assert!(!gap.breaks_policy);
    assert!(gap.paths.contains(&PathBuf::from("/tmp/tmux-1000")));
    // The grant inside the placeholder did not exist: stricter, listed.
    assert!(gap_ids(&plan).contains(&"absent-at-launch"));
    assert_eq!(
        policy
            .protected
            .iter()
            .find(|r| r.path == Path::new("/tmp/tmux-1000"))
            .unwrap()
            .origin
            .file,
        WAYS_OUT_ORIGIN,
        "the loader marks ways-out entries the way the planner expects"
    );
}

#[test]
fn launcher_exec_paths_are_closed_by_landlock_in_masks() {
    let policy = linux_policy(
        "version = 1\nbase = \"open\"\n[launchers]\nextra = [\"/usr/bin/bash\"]\n",
        &[],
    );
    let plan = choose_with(&policy, &facts(7, true), &machine(), Enforce::Auto).unwrap();
    assert_eq!(plan.shape, Shape::Masks);
    assert_eq!(v(&plan, Op::Exec, "/usr/bin/bash"), Verdict::Deny);
    assert_eq!(v(&plan, Op::Read, "/usr/bin/bash"), Verdict::Allow);
    assert_eq!(v(&plan, Op::Exec, "/etc/passwd"), Verdict::Allow);
    assert!(plan.breaking_gaps().next().is_none(), "{:#?}", plan.gaps);
}

#[test]
fn symlinked_rule_paths_are_plan_errors() {
    let policy = linux_policy(
        "version = 1\nbase = \"open\"\n[[protected]]\npath = \"~/state\"\n",
        &[],
    );
    let mut fs = machine();
    fs.add("/home/ada/state", EntryKind::Symlink);
    let err = plan_with(&policy, &facts(7, true), Shape::Masks, &fs).unwrap_err();
    assert!(err.to_string().contains("is a symlink"), "{err}");
    let refusal = choose_with(&policy, &facts(7, true), &fs, Enforce::Auto).unwrap_err();
    assert_eq!(refusal.id, RefusalId::PlanFailed);
}

#[test]
fn host_filesystem_listing_feeds_hole_punching() {
    let (_dir, home) = temp_home();
    std::fs::create_dir_all(home.join("state/chat")).unwrap();
    std::fs::create_dir(home.join("projects")).unwrap();
    std::fs::write(home.join("notes.txt"), "x").unwrap();
    std::os::unix::fs::symlink("/etc", home.join("link")).unwrap();
    let opts = ResolveOptions::new(Target::Linux, home.clone(), true).unwrap();
    let policy = Policy::from_toml(
        "version = 1\nbase = \"open\"\n[linux]\nways_out = false\n\
         [[protected]]\npath = \"~/state\"\n",
        "p.toml",
        &opts,
    )
    .unwrap();
    let plan =
        sandboxer::linux::planner::plan(&policy, &facts(9, false), Shape::LandlockOnly).unwrap();
    let rule_paths: Vec<&Path> = plan
        .landlock
        .rules
        .iter()
        .map(|r| r.path.as_path())
        .collect();
    assert!(
        rule_paths.contains(&home.join("projects").as_path()),
        "{rule_paths:?}"
    );
    let notes = plan
        .landlock
        .rules
        .iter()
        .find(|r| r.path == home.join("notes.txt"))
        .unwrap();
    assert!(!notes.is_dir && notes.rights.iter().all(|r| r.applies_to_files()));
    assert!(
        !rule_paths.contains(&home.join("link").as_path()),
        "never a rule on a symlink"
    );
    assert!(!rule_paths.contains(&home.join("state").as_path()));
    assert_eq!(
        v(&plan, Op::Read, &home.join("state/x").to_string_lossy()),
        Verdict::Deny
    );
    assert_eq!(
        v(&plan, Op::Write, &home.join("projects/x").to_string_lossy()),
        Verdict::Allow
    );
}

// ---- the ruleset the kernel gets -----------------------------------------------------------------

/// `plan` with its Landlock layer as the enforcer gives it to the kernel
/// (`LandlockPlan::kernel_ruleset`), so that `Plan::decide` can tell whether it means the same.
fn as_the_kernel_gets_it(plan: &Plan) -> Plan {
    let mut out = plan.clone();
    if plan.landlock.abi == 0 {
        return out;
    }
    let kernel = plan.landlock.kernel_ruleset(plan.mounts_blocked());
    out.landlock.handled = kernel.handled.clone();
    out.landlock.rules = kernel
        .rules
        .iter()
        .map(|k| LandlockRule {
            rights: k.rights.clone(),
            ..k.rule.clone()
        })
        .collect();
    out
}

#[test]
fn the_kernel_handles_only_rights_some_path_is_refused() {
    // Base open, masks: the rule on `/` grants everything, and the command can never mount
    // (no nested user namespace, no capability), so the kernel handles no filesystem right:
    // the domain only scopes.
    let masks7 = choose_product(7, true).unwrap();
    assert!(masks7.mounts_blocked());
    let k = masks7.landlock.kernel_ruleset(masks7.mounts_blocked());
    assert_eq!(k.handled, []);
    assert!(k.rules.is_empty());
    assert!(masks7.landlock.scope_abstract_unix && masks7.landlock.scope_signal);

    // The same with nested user namespaces allowed: the command could hold capabilities in
    // one of its own, so the domain must keep it from mounting: `refer` stays handled (which
    // also lets files move between folders).
    let nested = linux_policy(
        "version = 1\nbase = \"open\"\n[linux]\nnested_user_namespaces = true\n",
        &[],
    );
    let masks7n = choose_with(&nested, &facts(7, true), &machine(), Enforce::Auto).unwrap();
    assert!(masks7n.nested_user_namespaces && !masks7n.mounts_blocked());
    let k = masks7n.landlock.kernel_ruleset(masks7n.mounts_blocked());
    assert_eq!(k.handled, [FsRight::Refer]);
    assert_eq!(k.rules.len(), 1);
    assert_eq!(k.rules[0].rule.path, Path::new("/"));
    assert_eq!(k.rules[0].rights, [FsRight::Refer]);

    // ABI 9: resolve-unix is refused in the read-only grant, so it stays handled, with the
    // rules that grant it around the grant.
    let masks9 = choose_product(9, true).unwrap();
    let k = masks9.landlock.kernel_ruleset(masks9.mounts_blocked());
    assert_eq!(k.handled, [FsRight::Refer, FsRight::ResolveUnix]);
    assert_eq!(k.rules[0].rights, [FsRight::Refer]);
    assert!(
        k.rules[1..]
            .iter()
            .all(|r| r.rights == [FsRight::ResolveUnix])
    );
    assert_eq!(k.rules.len(), masks9.landlock.rules.len());

    // A closed base grants little on `/`: nearly everything stays handled.
    let closed = linux_policy(
        "version = 1\nbase = \"closed\"\n[closed]\nread = [\"/usr\"]\n",
        &[],
    );
    let plan = plan_with(&closed, &facts(7, false), Shape::LandlockOnly, &machine()).unwrap();
    let k = plan.landlock.kernel_ruleset(plan.mounts_blocked());
    assert!(k.handled.contains(&FsRight::ReadFile));
    assert!(k.handled.contains(&FsRight::Refer));
    assert_eq!(k.handled, plan.landlock.handled);

    // Below ABI 2 there is no `refer`: one cheap right stays handled, so that the domain
    // still may not mount.
    let open = linux_policy(
        "version = 1\nbase = \"open\"\n[linux]\nways_out = false\n",
        &[],
    );
    let plan = plan_with(&open, &facts(1, false), Shape::LandlockOnly, &machine()).unwrap();
    let k = plan.landlock.kernel_ruleset(plan.mounts_blocked());
    assert_eq!(k.handled, [FsRight::MakeBlock]);
    assert_eq!(k.rules.len(), 1);
    assert_eq!(k.rules[0].rights, [FsRight::MakeBlock]);

    // Each means what the plan says, everywhere.
    for plan in [&masks7, &masks7n, &masks9, &plan] {
        let kernel = as_the_kernel_gets_it(plan);
        for path in universe_of(&machine()) {
            for op in Op::ALL {
                assert_eq!(
                    kernel.decide(op, &path).verdict,
                    plan.decide(op, &path).verdict,
                    "{op} {}",
                    path.display()
                );
            }
        }
    }
}

/// Every path of a test machine, and a new entry in each folder.
fn universe_of(fs: &MemFs) -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("/")];
    for (path, _) in fs_entries(fs, Path::new("/")) {
        out.push(path.join("sbx-new"));
        out.push(path);
    }
    out
}

fn fs_entries(fs: &MemFs, dir: &Path) -> Vec<(PathBuf, EntryKind)> {
    use sandboxer::linux::planner::FsView;
    let mut out = Vec::new();
    for (path, kind) in fs.list(dir).unwrap() {
        if kind == EntryKind::Dir {
            out.extend(fs_entries(fs, &path));
        }
        out.push((path, kind));
    }
    out
}

// ---- the property -----------------------------------------------------------------------------

/// Cases: PROPTEST_CASES, else 10 000 (the CI value).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

/// Paths of one to three components from a small alphabet, so rules collide often.
const NAMES: [&str; 3] = ["a", "b", "c"];

fn universe() -> Vec<String> {
    let mut out = Vec::new();
    for a in NAMES {
        out.push(format!("/{a}"));
        for b in NAMES {
            out.push(format!("/{a}/{b}"));
            for c in NAMES {
                out.push(format!("/{a}/{b}/{c}"));
            }
        }
    }
    out
}

fn path_strategy() -> impl Strategy<Value = String> {
    let u = universe();
    (0..u.len()).prop_map(move |i| u[i].clone())
}

/// A suffix of zero to two components (for grants inside protected roots, refusals inside
/// grants).
fn suffix() -> impl Strategy<Value = String> {
    proptest::collection::vec(0..NAMES.len(), 0..3)
        .prop_map(|v| v.into_iter().map(|i| format!("/{}", NAMES[i])).collect())
}

#[derive(Debug, Clone)]
struct Case {
    text: String,
    ways_out: Vec<String>,
    fs_kinds: Vec<u8>,
    read_only: Vec<bool>,
    abi: u32,
    userns: bool,
    queries: Vec<String>,
}

fn case_strategy() -> impl Strategy<Value = Case> {
    let n = universe().len();
    (
        any::<bool>(),
        proptest::collection::vec(path_strategy(), 0..3),
        proptest::collection::vec((0..3usize, suffix(), any::<bool>()), 0..4),
        proptest::collection::vec((0..4usize, suffix()), 0..3),
        proptest::collection::vec(path_strategy(), 0..3),
        proptest::collection::vec(path_strategy(), 0..3),
        proptest::collection::vec(path_strategy(), 0..2),
        proptest::collection::vec(path_strategy(), 0..2),
    )
        .prop_flat_map(
            move |(open, protected, grants, refuse, cread, cwrite, extra, ways)| {
                (
                    Just((open, protected, grants, refuse, cread, cwrite, extra, ways)),
                    proptest::collection::vec(0u8..5, n),
                    proptest::collection::vec(any::<bool>(), n),
                    prop_oneof![
                        Just(0u32),
                        Just(1),
                        Just(2),
                        Just(3),
                        Just(5),
                        Just(6),
                        Just(7),
                        Just(9),
                        Just(10)
                    ],
                    any::<bool>(),
                    proptest::collection::vec((path_strategy(), suffix()), 1..8),
                )
            },
        )
        .prop_map(|(p, fs_kinds, read_only, abi, userns, q)| {
            let (open, protected, grants, refuse, cread, cwrite, extra, ways) = p;
            let mut text = format!(
                "version = 1\nbase = \"{}\"\n",
                if open { "open" } else { "closed" }
            );
            let mut roots = protected.clone();
            roots.extend(ways.iter().cloned());
            for p in &protected {
                text.push_str(&format!("[[protected]]\npath = \"{p}\"\n"));
            }
            let mut granted: Vec<(String, bool)> = Vec::new();
            for (i, s, rw) in &grants {
                let base = if open {
                    match roots.get(i % roots.len().max(1)) {
                        Some(r) => r.clone(),
                        None => continue,
                    }
                } else {
                    universe()[(i * 7) % 39].clone()
                };
                let path = format!("{base}{s}");
                if granted.iter().any(|(g, _)| *g == path) {
                    continue;
                }
                granted.push((path, *rw));
            }
            for (g, rw) in &granted {
                text.push_str(&format!(
                    "[[grant]]\npath = \"{g}\"\naccess = \"{}\"\n",
                    if *rw { "rw" } else { "ro" }
                ));
            }
            for (i, s) in &refuse {
                if let Some((g, _)) = granted.get(i % granted.len().max(1)) {
                    text.push_str(&format!("[[refuse]]\npath = \"{g}{s}\"\n"));
                }
            }
            let list = |v: &[String]| {
                v.iter()
                    .map(|p| format!("\"{p}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            text.push_str(&format!("[launchers]\nextra = [{}]\n", list(&extra)));
            if !open {
                text.push_str(&format!(
                    "[closed]\nread = [{}]\nwrite = [{}]\n",
                    list(&cread),
                    list(&cwrite)
                ));
            }
            let queries = q.into_iter().map(|(p, s)| format!("{p}{s}")).collect();
            Case {
                text,
                ways_out: ways,
                fs_kinds,
                read_only,
                abi,
                userns,
                queries,
            }
        })
}

fn build_fs(case: &Case) -> MemFs {
    let mut fs = MemFs::new();
    let mut kinds: std::collections::BTreeMap<String, EntryKind> = Default::default();
    for (i, p) in universe().iter().enumerate() {
        let parent = Path::new(p)
            .parent()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let parent_is_dir = parent == "/" || kinds.get(&parent) == Some(&EntryKind::Dir);
        let kind = match case.fs_kinds[i] {
            0 | 1 => None,
            2 => Some(EntryKind::Dir),
            3 => Some(EntryKind::File),
            _ => Some(EntryKind::Other),
        };
        if let (true, Some(k)) = (parent_is_dir, kind) {
            fs.add(p, k);
            kinds.insert(p.clone(), k);
        }
        if case.read_only[i] {
            fs.read_only(p);
        }
    }
    fs
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// For random policies, trees and facts: wherever the plan's model and the policy
    /// disagree, the plan lists the gap that explains it, with the right `breaks_policy`;
    /// a chosen plan has no breaking gap; and from ABI 3 on no difference is unexplained.
    #[test]
    fn plan_decide_matches_policy_except_listed_gaps(case in case_strategy()) {
        let mut opts = ResolveOptions::new(Target::Linux, PathBuf::from("/h"), false).unwrap();
        opts.ways_out = case.ways_out.iter().map(|p| (PathBuf::from(p), "test way out".to_string())).collect();
        let policy = match Policy::from_toml(&case.text, "case.toml", &opts) {
            Ok(p) => p,
            Err(e) => panic!("the generator made an invalid policy: {e}\n{}", case.text),
        };
        let fs = build_fs(&case);
        let facts = Facts {
            landlock_abi: case.abi,
            user_namespaces: case.userns,
            mount_pid_namespaces: case.userns,
            uid: 1000,
            gid: 1000,
            namespaces_blocked_by: None,
        };
        let mut queries: Vec<String> = universe();
        queries.extend(case.queries.iter().cloned());
        queries.extend(case.queries.iter().map(|q| format!("{q}/zz")));
        queries.push("/".into());
        let shapes: &[Shape] = if case.userns { &[Shape::Masks, Shape::LandlockOnly] } else { &[Shape::LandlockOnly] };
        for &shape in shapes {
            let plan = plan_with(&policy, &facts, shape, &fs)
                .unwrap_or_else(|e| panic!("{shape}: {e}\n{}", case.text));
            let kernel = as_the_kernel_gets_it(&plan);
            // Pins change nothing but deleting or renaming their own folder, and no pin is
            // hidden by a later step above it nor put on after a step beneath it.
            let unpinned = Plan {
                mounts: plan.mounts.iter().filter(|m| !matches!(m, MountStep::Pin { .. })).cloned().collect(),
                ..plan.clone()
            };
            for (i, m) in plan.mounts.iter().enumerate() {
                let MountStep::Pin { path, .. } = m else { continue };
                let above = |o: &MountStep| path.starts_with(o.path()) && path != o.path();
                let beneath = |o: &MountStep| o.path().starts_with(path) && path != o.path();
                prop_assert!(!plan.mounts[i + 1..].iter().any(above), "{shape}: pin {} hidden\n{}", path.display(), case.text);
                prop_assert!(!plan.mounts[..i].iter().any(beneath), "{shape}: pin {} over a mask\n{}", path.display(), case.text);
            }
            let has_pins = unpinned.mounts.len() != plan.mounts.len();
            for q in &queries {
                let pinned = plan.mounts.iter().any(|m| matches!(m, MountStep::Pin { path, .. } if path == Path::new(q)));
                for op in Op::ALL {
                    let pd = plan.decide(op, Path::new(q)).verdict;
                    prop_assert_eq!(
                        kernel.decide(op, Path::new(q)).verdict,
                        pd,
                        "{} {} {}: the kernel's ruleset decides otherwise\n{}", shape, op, q, case.text
                    );
                    if has_pins && !(pinned && matches!(op, Op::Delete | Op::Rename)) {
                        prop_assert_eq!(
                            unpinned.decide(op, Path::new(q)).verdict,
                            pd,
                            "{} {} {}: a pin changed it\n{}", shape, op, q, case.text
                        );
                    }
                    let differs = pd != policy.decide(op, Path::new(q)).verdict;
                    let kind = classify(&plan, &policy, op, Path::new(q));
                    prop_assert_eq!(differs, kind.is_some());
                    let Some(kind) = kind else { continue };
                    let gap = plan.gaps.iter().find(|g| g.id == kind.id());
                    prop_assert!(
                        gap.is_some(),
                        "{} {} {}: plan says {}, policy says {}, class {:?} not listed in {:?}\n{}",
                        shape, op, q,
                        plan.decide(op, Path::new(q)),
                        policy.decide(op, Path::new(q)).reason,
                        kind, plan.gaps.iter().map(|g| &g.id).collect::<Vec<_>>(), case.text
                    );
                    prop_assert_eq!(gap.unwrap().breaks_policy, kind.breaks_policy());
                    if case.abi >= 3 {
                        prop_assert!(kind != GapKind::Unenforced,
                            "{} {} {}: unexplained: plan {} / policy {:?}\n{}", shape, op, q,
                            plan.decide(op, Path::new(q)), policy.decide(op, Path::new(q)).reason, case.text);
                    }
                }
            }
        }
        if let Ok(plan) = choose_with(&policy, &facts, &fs, Enforce::Auto) {
            prop_assert!(plan.breaking_gaps().next().is_none());
            prop_assert!(plan.landlock.abi >= 1);
        }
    }
}

// ---- the doctor, live on this machine ---------------------------------------------------------

/// The JSON a `sandboxer` run that succeeded printed.
#[cfg(target_os = "linux")]
fn succeeded_json(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `sandboxer doctor --json` on this machine (CI: root on a 6.18 kernel with Landlock ABI 7):
/// a masks plan for a policy under a temporary home; with a test-only assumption that user
/// namespaces do not work, a refusal that names the fix — never weaker enforcement.
#[cfg(target_os = "linux")]
#[test]
fn doctor_reports_this_machine_and_the_policys_enforcement() {
    let (_dir, home) = temp_home();
    std::fs::create_dir_all(home.join("state/chat")).unwrap();
    let policy = home.join("p.toml");
    std::fs::write(
        &policy,
        "version = 1\nbase = \"open\"\n[[protected]]\npath = \"~/state\"\n\
         [[grant]]\npath = \"~/state/chat\"\naccess = \"rw\"\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandboxer"))
            .arg("doctor")
            .arg("--json")
            .arg("--home")
            .arg(&home)
            .arg("--policy")
            .arg(&policy)
            .args(extra)
            .output()
            .unwrap();
        succeeded_json(&out)
    };
    let report = run(&[]);
    let linux = &report["linux"];
    assert_eq!(report["platform"], "linux");
    assert!(
        linux["probe"]["landlock"]["abi"].as_u64().unwrap() >= 6,
        "{linux:#}"
    );
    assert_eq!(linux["probe"]["namespaces"]["user"], true, "{linux:#}");
    assert_eq!(linux["enforcement"]["result"], "confined", "{linux:#}");
    assert_eq!(linux["enforcement"]["shape"], "masks", "{linux:#}");

    let assume = home.join("assume.json");
    std::fs::write(&assume, r#"{"user_namespaces": false}"#).unwrap();
    let report = run(&["--assume-facts", assume.to_str().unwrap()]);
    let linux = &report["linux"];
    assert_eq!(linux["facts"]["user_namespaces"], false);
    assert_eq!(
        linux["probe"]["facts"]["user_namespaces"], true,
        "the probe itself is untouched"
    );
    assert_eq!(linux["enforcement"]["result"], "refused", "{linux:#}");
    assert_eq!(linux["enforcement"]["refusal"]["id"], "no-user-namespaces");

    // An assumption cannot raise what the kernel has.
    std::fs::write(&assume, r#"{"landlock_abi": 99}"#).unwrap();
    let report = run(&["--assume-facts", assume.to_str().unwrap()]);
    assert_eq!(
        report["linux"]["facts"]["landlock_abi"],
        report["linux"]["probe"]["landlock"]["abi"]
    );
}

/// The same probe as the unprivileged CI user `sbx-test` (root is exempt from the AppArmor and
/// Debian restrictions, so only a normal user shows what a person gets). Fails, saying so,
/// when not root or when the user does not exist (scripts/setup-test-env.sh creates it).
#[cfg(target_os = "linux")]
#[test]
fn doctor_probes_namespaces_for_an_unprivileged_user() {
    use agentworks_test_user::{as_test_user, require_root, test_user_ids};
    use std::os::unix::fs::PermissionsExt;
    require_root();
    let (uid, _) = test_user_ids();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("sandboxer");
    std::fs::copy(env!("CARGO_BIN_EXE_sandboxer"), &bin).unwrap();
    let out = as_test_user(&bin)
        .args(["doctor", "--json", "--home"])
        .arg(dir.path())
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let report = succeeded_json(&out);
    let probe = &report["linux"]["probe"];
    assert_eq!(probe["running_as_root"], false);
    assert_eq!(probe["facts"]["uid"], uid);
    assert_eq!(probe["namespaces"]["user"], true, "{probe:#}");
    assert_eq!(probe["namespaces"]["mount_pid"], true, "{probe:#}");
    assert_eq!(
        report["linux"]["enforcement"]["shape"], "masks",
        "{report:#}"
    );
}

/// `explain --policy` for a policy no Linux shape can enforce here: every operation is denied
/// because nothing would run. That is a refusal, not a disagreement with the policy: the
/// answer says what the policy itself decides and asks no one to report a bug.
#[cfg(target_os = "linux")]
#[test]
fn explain_of_a_refused_policy_is_no_disagreement() {
    let (_dir, home) = temp_home();
    std::fs::create_dir(home.join("secret")).unwrap();
    std::fs::write(home.join("secret/token"), "t").unwrap();
    std::fs::write(home.join("notes.txt"), "n").unwrap();
    let policy = home.join("p.toml");
    // Landlock-only, with existing protected data: its metadata stays changeable
    // (`metadata-unguarded`), so the only shape asked for is refused, whatever the machine.
    std::fs::write(
        &policy,
        "version = 1\nbase = \"open\"\n[[protected]]\npath = \"~/secret\"\n\
         [linux]\nways_out = false\nenforce = \"landlock-only\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandboxer"))
        .args(["explain", "--target", "linux", "--json", "--home"])
        .arg(&home)
        .arg("--policy")
        .arg(&policy)
        .args(["--op", "read"])
        .arg(home.join("notes.txt"))
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(v["outcome"], "deny", "{v:#}");
    let why = v["why"].as_str().unwrap();
    assert!(
        why.contains("no Linux plan here") && why.contains("nothing would run"),
        "{why}"
    );
    assert!(why.contains("the policy itself: allow"), "{why}");
    assert!(!why.contains("DISAGREES"), "{why}");
}

/// The product's Linux policy with the embedded autorun list (and the ways-out list).
fn product_with_autorun(ways_out: bool) -> Policy {
    let mut opts = ResolveOptions::new(Target::Linux, PathBuf::from(HOME), false).unwrap();
    if ways_out {
        opts.ways_out =
            ways_out::expand(Target::Linux, ways_out::embedded(Target::Linux), &env()).unwrap();
    }
    opts.autorun = sandboxer::autorun::list::parse(
        Target::Linux,
        sandboxer::autorun::list::EMBEDDED,
        "autorun.toml",
        &env(),
    )
    .unwrap()
    .entries;
    Policy::from_toml(PRODUCT_LINUX, "product.toml", &opts).unwrap()
}

/// The product's policy with the embedded autorun list on the small machine: every guarded
/// path becomes a guard step (a placeholder where it is missing and its entry says what stands
/// in), the folders above fixed entries are pinned, and the entries that get no placeholder
/// are the non-breaking gap `autorun-unmasked`.
#[test]
fn product_with_the_autorun_guard_plan_snapshot() {
    let policy = product_with_autorun(true);
    let plan = choose_with(&policy, &facts(7, true), &machine(), Enforce::Auto).unwrap();
    assert_eq!(plan.shape, Shape::Masks);
    use Verdict::*;
    for (op, path, want) in [
        (Op::Read, "/home/ada/.bashrc", Allow),
        (Op::Write, "/home/ada/.bashrc", Deny),
        (Op::Delete, "/home/ada/.bashrc", Deny),
        (Op::Create, "/home/ada/.ssh/config", Deny),
        (Op::Create, "/home/ada/.config/git/config", Deny),
        (Op::Rename, "/home/ada/.config", Deny),
        (
            Op::Write,
            "/home/ada/.local/share/agentworks/state/cli-runtimes/v1/chat-1/x",
            Allow,
        ),
        (Op::Create, "/home/ada/projects/site/index.html", Allow),
        // `missing = "none"`: nothing stands there (the gap autorun-unmasked).
        (Op::Create, "/home/ada/.xsession", Allow),
    ] {
        assert_eq!(
            v(&plan, op, path),
            want,
            "{op} {path}: {}",
            plan.decide(op, Path::new(path))
        );
        let policy_says = policy.decide(op, Path::new(path)).verdict;
        if path.ends_with(".xsession") {
            assert_eq!(policy_says, Deny);
        } else {
            assert_eq!(policy_says, want, "{op} {path}");
        }
    }
    let gaps: Vec<(&str, bool)> = plan
        .gaps
        .iter()
        .map(|g| (g.id.as_str(), g.breaks_policy))
        .collect();
    assert!(gaps.contains(&("autorun-unmasked", false)), "{gaps:?}");
    assert!(!gaps.iter().any(|(_, breaks)| *breaks), "{gaps:?}");
    let steps: Vec<&MountStep> = plan
        .mounts
        .iter()
        .filter(|m| matches!(m, MountStep::Guard { .. } | MountStep::Pin { .. }))
        .collect();
    insta::assert_yaml_snapshot!("product_with_the_autorun_guard", (steps, &plan.gaps));
}

/// A guarded file with another name (a hard link, as some dotfile managers make): a mask keeps
/// the path read-only, not the file, so the plan would let the sandbox write it through the
/// other name. The breaking gap `autorun-hard-links` refuses it, naming the file; the same
/// machine without the second name plans.
#[test]
fn a_guarded_file_with_another_name_is_refused() {
    let policy = product_with_autorun(false);
    let mut linked = machine();
    linked.links("/home/ada/.bashrc", 2);
    let err = choose_with(&policy, &facts(7, true), &linked, Enforce::Auto).unwrap_err();
    assert_eq!(err.id, RefusalId::GapsBreakPolicy, "{}", err.message);
    assert_says(&err, "autorun-hard-links");
    assert_says(&err, "/home/ada/.bashrc");
    let plan = choose_with(&policy, &facts(7, true), &machine(), Enforce::Auto).unwrap();
    assert!(!plan.gaps.iter().any(|g| g.id == "autorun-hard-links"));
}

/// Every entry of the embedded autorun list, missing on this machine or not, is read-only in
/// the plan as the policy says: nothing can be written or deleted at a guarded file, nothing
/// created in a guarded folder. The only exceptions are the entries that get no placeholder
/// (`missing = "none"`): the gap `autorun-unmasked`, which the policy's `decide` still refuses.
#[test]
fn every_linux_entry_of_the_list_is_read_only_in_the_plan() {
    use sandboxer::autorun::list::{self, Missing};
    let mut opts = ResolveOptions::new(Target::Linux, PathBuf::from(HOME), false).unwrap();
    opts.ways_out =
        ways_out::expand(Target::Linux, ways_out::embedded(Target::Linux), &env()).unwrap();
    let entries = list::parse(Target::Linux, list::EMBEDDED, "autorun.toml", &env())
        .unwrap()
        .entries;
    assert!(entries.len() > 100, "{}", entries.len());
    opts.autorun = entries.clone();
    let policy = Policy::from_toml(PRODUCT_LINUX, "product.toml", &opts).unwrap();
    let plan = choose_with(&policy, &facts(7, true), &machine(), Enforce::Auto).unwrap();
    // The control: the home around them stays open.
    assert_eq!(
        v(&plan, Op::Create, "/home/ada/projects/new.txt"),
        Verdict::Allow
    );
    assert_eq!(
        v(&plan, Op::Create, "/home/ada/.config/new.conf"),
        Verdict::Allow
    );
    let mut wrong = Vec::new();
    for e in &entries {
        let probes: Vec<(Op, PathBuf)> = match e.missing {
            Missing::Folder => vec![
                (Op::Create, e.path.join("planted")),
                (Op::Delete, e.path.clone()),
            ],
            Missing::File { .. } | Missing::None => vec![
                (Op::Write, e.path.clone()),
                (Op::Create, e.path.clone()),
                (Op::Delete, e.path.clone()),
            ],
        };
        for (op, path) in probes {
            let policy_says = policy.decide(op, &path).verdict;
            if policy_says != Verdict::Deny {
                wrong.push(format!(
                    "{op} {}: the policy says {policy_says:?}",
                    path.display()
                ));
                continue;
            }
            let plan_says = plan.decide(op, &path).verdict;
            if plan_says != Verdict::Deny && !matches!(e.missing, Missing::None) {
                wrong.push(format!(
                    "{op} {}: the plan says {plan_says:?} ({})",
                    path.display(),
                    e.origin
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let unmasked = plan.gaps.iter().find(|g| g.id == "autorun-unmasked");
    assert!(
        entries.iter().all(|e| !matches!(e.missing, Missing::None)) || unmasked.is_some(),
        "entries without a placeholder, and no gap naming them"
    );
}
