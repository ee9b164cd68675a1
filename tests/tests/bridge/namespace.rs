//! The bridge never resolves a path through another mount namespace.

use std::path::{Path, PathBuf};

use dispatcher::bridge::CallVerdict;
use serde_json::json;

use crate::world::*;
use agentworks_e2e::{self as common};

// ---- another mount namespace ---------------------------------------------------------------

/// Set in the copy of this test that runs as the unprivileged test user.
const AS_USER_ENV: &str = "BRIDGE_NAMESPACE_TEST_AS_USER";

/// A same-user process in its own mount namespace (`unshare -Urm`, as a rootless container
/// or bwrap would make), where the state root is bound onto `<workflow>/mnt` and
/// `config.json` onto `<workflow>/notes.txt`, its cwd in `mnt`: through `/proc/<pid>/root`
/// and `/proc/<pid>/cwd` the protected files appear at granted paths. The bridge refuses
/// every such path (every `/proc/self/…` one, and symlinks planted in the grant that lead
/// there), reads, lists and writes alike, and
/// nothing is created; the controls show that the paths do lead to the protected files for
/// a plain process, and that the bridge still serves the granted paths.
fn bridge_stays_in_its_own_mount_namespace() {
    let w = World::new();
    let c = w.chat("c1", "w1", &[]);
    let wf = c.workflow.clone();
    std::fs::write(wf.join("ok.txt"), "granted").unwrap();
    std::fs::write(wf.join("notes.txt"), "notes").unwrap();
    std::fs::create_dir(wf.join("mnt")).unwrap();
    let config = w.state.config_json();
    let secret = std::fs::read_to_string(&config).unwrap();
    let token = w.state.config().server_token.clone();
    assert!(secret.contains(&token));
    let script = format!(
        "mount --bind '{root}' '{wf}/mnt' && mount --bind '{config}' '{wf}/notes.txt' \
         && cd '{wf}/mnt' && exec sleep 600",
        root = w.state.path().display(),
        wf = wf.display(),
        config = config.display(),
    );
    let mut ns = std::process::Command::new("unshare")
        .args(["-Urm", "sh", "-c", &script])
        .spawn()
        .expect("unshare must be installed (util-linux)");
    let pid = ns.id();
    let other_root = PathBuf::from(format!("/proc/{pid}/root"));
    let other_cwd = PathBuf::from(format!("/proc/{pid}/cwd"));
    let view = other_root.join(wf.strip_prefix("/").unwrap());
    // Control: a plain process sees the protected file through the other namespace's view,
    // once both mounts are made and the process has entered `mnt` (its last step).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let ready = || {
        std::fs::read_to_string(view.join("notes.txt"))
            .ok()
            .as_ref()
            == Some(&secret)
            && std::fs::read_to_string(other_cwd.join("config.json"))
                .is_ok_and(|c| c.contains(&token))
    };
    while !ready() {
        if let Ok(Some(status)) = ns.try_wait() {
            panic!("the namespace process ended early ({status}): unshare -Urm must work here");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the bind mounts did not appear in {} (or the process is not in mnt)",
            view.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        std::fs::read_to_string(other_cwd.join("config.json"))
            .unwrap()
            .contains(&token)
    );
    assert!(
        std::fs::read_dir(view.join("mnt"))
            .unwrap()
            .any(|e| e.unwrap().file_name() == "config.json")
    );
    // Control: the bridge serves the granted paths, and the same file through its own path
    // is what the chat may not read.
    assert_eq!(
        assert_ok(&c.call("read_file", at(wf.join("ok.txt")))),
        "granted"
    );
    assert_refused(&c.call("read_file", at(&config)), "protected root");
    // Links planted inside the grant that lead there are no way around it.
    std::os::unix::fs::symlink(view.join("notes.txt"), wf.join("via-link")).unwrap();
    std::os::unix::fs::symlink(&other_cwd, wf.join("cwd-link")).unwrap();
    let before = w.snapshot();

    let self_root = Path::new("/proc/self/root");
    let under_self = |p: &Path| self_root.join(p.strip_prefix("/").unwrap());
    let reads = [
        view.join("notes.txt"),
        view.join("mnt/config.json"),
        other_cwd.join("config.json"),
        under_self(&config),
        under_self(&wf.join("ok.txt")),
        PathBuf::from(format!("/proc/{pid}/fd/0")),
        PathBuf::from("/proc/self/environ"),
        PathBuf::from(format!("/proc/{pid}/environ")),
        wf.join("via-link"),
        wf.join("cwd-link/config.json"),
    ];
    let lists = [
        view.join("mnt"),
        view.join("mnt/state"),
        other_cwd.clone(),
        under_self(w.state.path()),
        under_self(&wf),
        PathBuf::from("/proc"),
        PathBuf::from(format!("/proc/{pid}")),
        wf.join("cwd-link"),
    ];
    let writes = [
        view.join("mnt/planted"),
        view.join("mnt/state/auth/planted"),
        view.join("notes.txt"),
        other_cwd.join("planted"),
        under_self(&wf.join("planted")),
        under_self(&wf.join("ok.txt")),
        PathBuf::from("/proc/self/comm"),
        wf.join("cwd-link/planted"),
    ];
    let mut seen = Vec::new();
    for p in &reads {
        seen.push(("read_file", c.call("read_file", at(p))));
    }
    for p in &lists {
        seen.push(("list_dir", c.call("list_dir", at(p))));
    }
    for p in &writes {
        for create in [false, true] {
            seen.push((
                "write_file",
                c.call(
                    "write_file",
                    json!({"path": p, "content": "planted", "create": create}),
                ),
            ));
        }
    }
    let _ = ns.kill();
    let _ = ns.wait();
    for (tool, r) in &seen {
        assert!(is_error(r), "{tool} succeeded: {r}");
        let t = text(r);
        assert!(t.starts_with("refused: "), "{tool} not refused: {t}");
        assert!(
            t.contains("magic link") || t.contains("on /proc"),
            "{tool} refused for another reason: {t}"
        );
        assert!(!t.contains(&token), "{tool} leaked the token: {t}");
    }
    assert_eq!(w.snapshot(), before, "a refused call changed the disk");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), secret);
    let events = c.events.lock().unwrap();
    let denied = events
        .iter()
        .filter(|e| e.verdict == CallVerdict::Deny)
        .count();
    assert!(denied > seen.len(), "every refusal is logged ({denied})");
}

#[test]
fn the_bridge_never_resolves_through_another_mount_namespace() {
    if common::is_rerun(AS_USER_ENV) {
        // The copy run as the test user.
        bridge_stays_in_its_own_mount_namespace();
        return;
    }
    common::require_root();
    bridge_stays_in_its_own_mount_namespace();
    // The same as the unprivileged test user: its own rootless namespace, its own files.
    common::rerun_as_test_user(
        "namespace::the_bridge_never_resolves_through_another_mount_namespace",
        AS_USER_ENV,
    );
}
