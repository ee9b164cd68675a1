//! Live tests: a confined process holds no power over the kernel's global state, and does not
//! share the kernel's objects with outside processes (enforce/kernel.rs), whoever launches it.
//!
//! Every class runs in both shapes (`sandboxer exec` as chosen, and `--enforce landlock-only`)
//! and as root and as the unprivileged user `sbx-test` (created by `scripts/setup-test-env.sh`).
//! These tests need root (to act as both and to make the outside objects); a missing
//! prerequisite fails the test. Where landlock-only leaves a class shared for a person, the test
//! asserts that it is really shared and that the plan names the gap, so the gap list cannot
//! drift from the kernel. Every denial has an outside control with the same probe. Objects made
//! outside (segments, keys, files, cgroups) are removed by guards, also when a test fails.

#![cfg(target_os = "linux")]

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Path, PathBuf};
use std::process::Command;

use agentworks_test_user::{Runner, Who, require_root};
use sandboxer::linux::plan::Plan;

const PROBE: &str = include_str!("helpers/kernel_probe.py");
const PYTHON: &str = "/usr/bin/python3";
const OPEN_POLICY: &str =
    "version = 1\nbase = \"open\"\n[linux]\nways_out = false\n[autorun]\nguard = false\n";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    /// Whatever `sandboxer exec` chooses here: the masks shape (asserted).
    Masks,
    LandlockOnly,
}

/// Runs `$class(&Fx)` as root and as the user, in both shapes.
macro_rules! kernel {
    ($($class:ident),* $(,)?) => {$(
        mod $class {
            use super::{Shape, Who, fixture};
            #[test]
            fn masks_as_root() { super::$class(&fixture(Who::Root, Shape::Masks)) }
            #[test]
            fn masks_as_user() { super::$class(&fixture(Who::User, Shape::Masks)) }
            #[test]
            fn landlock_only_as_root() { super::$class(&fixture(Who::Root, Shape::LandlockOnly)) }
            #[test]
            fn landlock_only_as_user() { super::$class(&fixture(Who::User, Shape::LandlockOnly)) }
        }
    )*};
}

kernel!(
    kernel_knobs,
    sysv_ipc,
    keyrings,
    dev_shm,
    cgroup_tree,
    devices
);

// ---- the fixture -------------------------------------------------------------------------------

struct Fx {
    dir: tempfile::TempDir,
    who: Who,
    runner: Runner,
    shape: Shape,
    uid: u32,
    gid: u32,
    bin: PathBuf,
    probe: PathBuf,
    policy: PathBuf,
}

fn fixture(who: Who, shape: Shape) -> Fx {
    // These tests run the sandbox as root and as the test user.
    require_root();
    let runner = Runner::new(who);
    let (uid, gid) = (runner.uid, runner.gid);
    let dir = tempfile::Builder::new()
        .prefix("sbx-kernel-")
        .tempdir_in("/tmp")
        .unwrap();
    let probe = dir.path().join("kernel_probe.py");
    let policy = dir.path().join("policy.toml");
    fs::write(&probe, PROBE).unwrap();
    fs::write(&policy, OPEN_POLICY).unwrap();
    for p in [dir.path(), &probe, &policy] {
        chown(p, Some(uid), Some(gid)).unwrap();
    }
    let fx = Fx {
        bin: reachable_bin(),
        dir,
        who,
        runner,
        shape,
        uid,
        gid,
        probe,
        policy,
    };
    if shape == Shape::Masks {
        let plan = fx.plan();
        assert_eq!(plan.shape.as_str(), "masks", "this machine plans {plan:?}");
    }
    fx
}

/// The sandboxer binary where the unprivileged user can execute it: a copy in a world-readable
/// folder (named as in linux_live.rs, so the two share it).
fn reachable_bin() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_sandboxer"));
    let stamp = fs::metadata(bin)
        .unwrap()
        .modified()
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = PathBuf::from(format!("/tmp/sbx-live-bin-{stamp}"));
    let copy = dir.join("sandboxer");
    if !copy.exists() {
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        let tmp = dir.join(format!(
            ".sandboxer.{}.{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        fs::copy(bin, &tmp).unwrap();
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755)).unwrap();
        fs::rename(&tmp, &copy).unwrap();
    }
    copy
}

impl Fx {
    fn home(&self) -> &Path {
        self.dir.path()
    }

    /// `argv` run as the fixture's user, with a small fixed environment.
    fn command(&self, argv: &[OsString]) -> Command {
        let mut c = self.runner.command_with_path(&argv[0]);
        c.args(&argv[1..])
            .env("HOME", self.home())
            .current_dir(self.home());
        c
    }

    /// `sandboxer exec` (in the fixture's shape) of `inner`.
    fn sandboxed(&self, options: &[&str], inner: &[OsString]) -> Vec<OsString> {
        let mut v: Vec<OsString> = vec![self.bin.clone().into(), "exec".into()];
        v.extend(["--policy".into(), self.policy.clone().into()]);
        v.extend(["--home".into(), self.home().into()]);
        v.extend(["--cwd".into(), self.home().into()]);
        if self.shape == Shape::LandlockOnly {
            v.extend(["--enforce".into(), "landlock-only".into()]);
        }
        v.extend(options.iter().map(OsString::from));
        v.push("--".into());
        v.extend_from_slice(inner);
        v
    }

    fn probe_argv(&self, ops: &[&[&str]]) -> Vec<OsString> {
        vec![
            PYTHON.into(),
            self.probe.clone().into(),
            serde_json::to_string(ops).unwrap().into(),
        ]
    }

    /// Runs `argv` to completion; its output's last line is the probe's JSON answer.
    fn answers(&self, argv: &[OsString]) -> Vec<String> {
        let out = self.command(argv).output().expect("spawning");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{argv:?} failed ({}): {stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let last = stdout.lines().last().unwrap_or_default();
        serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {stdout:?}"))
    }

    fn outside(&self, ops: &[&[&str]]) -> Vec<String> {
        self.answers(&self.probe_argv(ops))
    }

    fn inside(&self, ops: &[&[&str]]) -> Vec<String> {
        self.answers(&self.sandboxed(&[], &self.probe_argv(ops)))
    }

    fn plan(&self) -> Plan {
        let out = self
            .command(&self.sandboxed(&["--print-plan"], &["true".into()]))
            .output()
            .unwrap();
        assert!(out.status.success(), "--print-plan: {out:?}");
        serde_json::from_slice(&out.stdout).expect("plan JSON")
    }

    /// Whether this shape and user leave `gap` shared (landlock-only for a person; the user
    /// keyring for root too), asserting that the plan names it exactly then.
    /// Runs `ops` outside, where they must answer `open` (the control, said as `control`),
    /// and inside: `open` again where the plan names the gap `gap`, else `closed` (said as
    /// `why`).
    fn closed_inside_unless_gap(
        &self,
        ops: &[&[&str]],
        gap: &str,
        (open, control): (&str, &str),
        (closed, why): (&str, &str),
    ) {
        assert_eq!(self.outside(ops), [open], "control: {control}");
        let inside = self.inside(ops);
        if self.left_shared(gap) {
            assert_eq!(inside, [open], "the named gap is real");
        } else {
            assert_eq!(inside, [closed], "{why}");
        }
    }

    fn left_shared(&self, gap: &str) -> bool {
        let expected =
            self.shape == Shape::LandlockOnly && (gap == "user-keyring" || self.who == Who::User);
        let plan = self.plan();
        let named = plan.gaps.iter().any(|g| g.id == gap && !g.breaks_policy);
        assert_eq!(
            named, expected,
            "gap {gap} in the {:?} plan as {:?}: {:?}",
            self.shape, self.who, plan.gaps
        );
        expected
    }

    fn unique(&self, what: &str) -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        format!("sbx-kernel-{what}-{}-{nanos}", std::process::id())
    }
}

// ---- the classes -------------------------------------------------------------------------------

/// Sysctls, `/proc/sysrq-trigger`, `/proc/irq`, `/proc/bus` and `/sys`: read-only inside.
/// Root writes `kernel.core_pattern` back with its current value outside (harmless) and
/// cannot inside; `/proc/sysrq-trigger` is only ever opened, never written.
fn kernel_knobs(fx: &Fx) {
    let sys_file = [
        "/sys/kernel/mm/transparent_hugepage/enabled",
        "/sys/kernel/uevent_helper",
        "/sys/power/state",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists())
    .expect("a root-writable file under /sys");
    let ops: &[&[&str]] = &[
        &["write-back", "/proc/sys/kernel/core_pattern"],
        &["open-wronly", "/proc/sysrq-trigger"],
        &["open-wronly", sys_file],
        &["mount-flags", "/proc/sys"],
        &["mount-flags", "/proc/irq"],
        &["mount-flags", "/proc/bus"],
        &["mount-flags", "/sys"],
    ];
    let outside = fx.outside(ops);
    let inside = fx.inside(ops);
    let sysrq = Path::new("/proc/sysrq-trigger").exists();
    if fx.who == Who::Root {
        assert_eq!(
            outside[0], "ok",
            "control: root writes core_pattern outside"
        );
        assert_eq!(
            outside[2], "ok",
            "control: root opens {sys_file} for writing"
        );
        if sysrq {
            assert_eq!(outside[1], "ok", "control: root opens sysrq-trigger");
        }
    }
    assert_eq!(
        &outside[3..],
        ["rw"; 4],
        "control: outside the knobs are writable mounts"
    );
    assert_ne!(inside[0], "ok", "core_pattern writable inside: {inside:?}");
    assert_ne!(inside[2], "ok", "{sys_file} writable inside: {inside:?}");
    assert!(inside[1] != "ok", "sysrq-trigger opened for writing inside");
    if !sysrq {
        eprintln!("NOTE: this kernel has no /proc/sysrq-trigger (CONFIG_MAGIC_SYSRQ off)");
    }
    // Root meets the read-only mount; a person meets root's file permissions first.
    let refused = if fx.who == Who::Root {
        "EROFS"
    } else {
        "EACCES"
    };
    assert_eq!(inside[0], refused, "{inside:?}");
    if fx.shape == Shape::Masks || fx.who == Who::Root {
        assert_eq!(
            &inside[3..],
            ["ro"; 4],
            "read-only mounts inside: {inside:?}"
        );
    }
}

/// A System V shared memory segment made outside (mode 0666, attachable by anyone) cannot be
/// attached inside: the sandbox has its own IPC namespace.
fn sysv_ipc(fx: &Fx) {
    struct Segment(i32);
    impl Drop for Segment {
        fn drop(&mut self) {
            // SAFETY: removes the segment this test made; no memory is passed.
            unsafe { libc::shmctl(self.0, libc::IPC_RMID, std::ptr::null_mut()) };
        }
    }
    // SAFETY: plain system call.
    let id = unsafe { libc::shmget(libc::IPC_PRIVATE, 4096, libc::IPC_CREAT | 0o666) };
    assert!(id >= 0, "shmget: {}", std::io::Error::last_os_error());
    let _segment = Segment(id);
    let id = id.to_string();
    let ops: &[&[&str]] = &[&["shmat", &id]];
    fx.closed_inside_unless_gap(
        ops,
        "sysv-ipc",
        ("ok", "attached outside"),
        ("EINVAL", "no such segment inside"),
    );
}

/// Keys in the caller's session keyring are not the command's; keys in the user keyring are
/// not either, except in landlock-only (no user namespace: the `user-keyring` gap).
fn keyrings(fx: &Fx) {
    let desc = fx.unique("key");
    let ops: &[&[&str]] = &[
        &["key-search", "session", &desc],
        &["key-search", "user", &desc],
    ];
    let with_keys = |inner: Vec<OsString>| {
        let mut v: Vec<OsString> = vec![
            PYTHON.into(),
            fx.probe.clone().into(),
            "--with-keys".into(),
            desc.clone().into(),
            "--".into(),
        ];
        v.extend(inner);
        v
    };
    let outside = fx.answers(&with_keys(fx.probe_argv(ops)));
    assert_eq!(outside, ["found", "found"], "control: found outside");
    let inside = fx.answers(&with_keys(fx.sandboxed(&[], &fx.probe_argv(ops))));
    assert_eq!(
        inside[0], "ENOKEY",
        "the caller's session keyring inside: {inside:?}"
    );
    if fx.left_shared("user-keyring") {
        assert_eq!(inside[1], "found", "the named gap is real");
    } else {
        assert_eq!(
            inside[1], "ENOKEY",
            "the outside user keyring inside: {inside:?}"
        );
    }
}

/// A path a test made outside, removed (by the function given) when the test ends.
struct RemovedOnDrop(PathBuf, fn(&Path) -> std::io::Result<()>);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = (self.1)(&self.0);
    }
}

/// A file made outside in /dev/shm is not there inside.
fn dev_shm(fx: &Fx) {
    let file = Path::new("/dev/shm").join(fx.unique("shm"));
    fs::write(&file, "outside").unwrap();
    let _remove = RemovedOnDrop(file.clone(), |p| fs::remove_file(p));
    let path = file.to_str().unwrap();
    let ops: &[&[&str]] = &[&["exists", path]];
    fx.closed_inside_unless_gap(
        ops,
        "dev-shm",
        ("yes", "there outside"),
        ("ENOENT", "/dev/shm is the sandbox's own"),
    );
}

/// The sandbox's own `/dev` (enforce/devices.rs): the host's disks (which root opens by file
/// mode alone, and which hold every protected file beneath the masks) and kernel log are not
/// there; the devices a program needs are. Landlock-only as a person keeps the host's `/dev`,
/// whose disks the person cannot open anyway (asserted: the file mode refuses it).
fn devices(fx: &Fx) {
    let disk = fs::read_dir("/sys/block")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| Path::new("/dev").join(e.file_name()))
        .find(|d| d.exists())
        .expect("a block device under /dev (the test reads no byte of it)");
    let disk = disk.to_str().unwrap();
    let ops: &[&[&str]] = &[
        &["exists", disk],
        &["open-read", disk],
        &["exists", "/dev/kmsg"],
        &["open-read", "/dev/null"],
        &["open-read", "/dev/urandom"],
        &["exists", "/dev/fd/0"],
    ];
    let outside = fx.outside(ops);
    assert_eq!(outside[0], "yes", "control: {disk} is there outside");
    assert_eq!(outside[2], "yes", "control: /dev/kmsg is there outside");
    if fx.who == Who::Root {
        assert_eq!(outside[1], "open", "control: root opens {disk} outside");
    }
    let inside = fx.inside(ops);
    let own_dev = fx.shape == Shape::Masks || fx.who == Who::Root;
    if own_dev {
        assert_eq!(
            inside[..3],
            ["ENOENT", "ENOENT", "ENOENT"],
            "no disk and no kernel log in the sandbox's /dev: {inside:?}"
        );
    } else {
        assert_eq!(inside[..2], ["yes", "EACCES"], "{inside:?}");
    }
    assert_eq!(
        inside[3..],
        ["open", "open", "yes"],
        "the devices a program needs"
    );
}

/// A cgroup delegated to the runner (as systemd delegates `user@UID.service`): its
/// `cgroup.freeze` is writable outside and not inside.
fn cgroup_tree(fx: &Fx) {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let root = mountinfo
        .lines()
        .find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let rw = left.split(' ').nth(5)?.split(',').any(|o| o == "rw");
            (right.starts_with("cgroup2 ") && rw)
                .then(|| left.split(' ').nth(4).map(PathBuf::from))?
        })
        .expect("a read-write cgroup2 mount (delegation needs one)");
    let cgroup = root.join(fx.unique("cg"));
    fs::create_dir(&cgroup).unwrap_or_else(|e| {
        panic!(
            "the cgroup tree is not writable here even outside ({e}); /sys read-only is \
             asserted by kernel_knobs"
        )
    });
    let _cgroup = RemovedOnDrop(cgroup.clone(), |p| fs::remove_dir(p));
    let freeze = cgroup.join("cgroup.freeze");
    assert!(freeze.exists(), "{} missing", freeze.display());
    chown(&cgroup, Some(fx.uid), Some(fx.gid)).unwrap();
    chown(&freeze, Some(fx.uid), Some(fx.gid)).unwrap();
    // Thawing an empty cgroup: harmless, and as good as freezing for the question.
    let path = freeze.to_str().unwrap();
    let ops: &[&[&str]] = &[&["write", path, "0"]];
    fx.closed_inside_unless_gap(
        ops,
        "cgroup-tree",
        ("ok", "the delegated cgroup is writable outside"),
        ("EROFS", "the cgroup tree is read-only inside"),
    );
}
