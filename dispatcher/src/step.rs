//! Scripted workflow steps: a program (usually a shell script) the dispatcher runs for a
//! workflow, confined exactly like a chat launch — the step's own runtime and its workflow
//! read-write, attached workflows as given, the folder guard's refused paths refused, the
//! state root protected, launchers and ways out blocked.
//!
//! ```text
//! <root>/state/step-runtimes/v1/<workflow>/<step>/              the step's runtime (rw)
//! <root>/state/step-runtimes/v1/<workflow>/<step>/.agentworks/  its policy and the script copy (ro)
//! ```
//!
//! The script is copied into the read-only launch folder before it runs, so the step runs
//! exactly what the dispatcher read and nothing inside the sandbox can swap it. It runs with
//! its workflow as working folder. There is no unconfined fallback: where no sandbox works,
//! the step is refused (fail closed). An agent step (a CLI launched for a step) is a chat
//! launch (`dispatcher launch`) of the step's chat.

use std::path::{Path, PathBuf};

use serde::Serialize;

use sandboxer::Target;

use crate::grants::{Attach, LAUNCH_DIR, LaunchGrants};
use crate::ids::WorkflowId;
use crate::launch::{self, Confinement, ENV_REMOVED, LaunchError};
use crate::state::{StateError, StateRoot};

/// Where step runtimes live inside the state root.
pub const STEP_RUNTIMES: &str = "state/step-runtimes/v1";

/// The script's name inside the step's launch folder.
pub const SCRIPT_NAME: &str = "step-script";

/// What the caller asks for.
#[derive(Debug, Clone)]
pub struct StepRequest {
    pub workflow: WorkflowId,
    /// The step's name (validated like a workflow id: it becomes a folder name).
    pub step: WorkflowId,
    /// The program to run (read by the dispatcher, copied into the step's launch folder).
    pub script: PathBuf,
    pub args: Vec<String>,
    pub attach: Vec<Attach>,
}

/// A scripted step, computed before anything is written or run.
#[derive(Debug, Clone, Serialize)]
pub struct StepLaunch {
    pub workflow: WorkflowId,
    pub step: WorkflowId,
    pub runtime: PathBuf,
    /// The working folder: the step's workflow.
    pub cwd: PathBuf,
    pub policy_path: PathBuf,
    pub policy_text: String,
    /// The script as given, and where its copy runs from.
    pub script_source: PathBuf,
    pub script_path: PathBuf,
    /// How the platform confines it.
    pub confinement: String,
    /// macOS: the Seatbelt profile rendered from the policy, and where it is written.
    pub profile: Option<String>,
    pub profile_path: Option<PathBuf>,
    /// Linux: `sandboxer exec --policy … --cwd … -- SCRIPT ARGS…`; macOS:
    /// `sandbox-exec -f PROFILE SCRIPT ARGS…` (run with the workflow as working folder).
    pub argv: Vec<String>,
    pub env_removed: Vec<String>,
}

/// The step's runtime folder.
pub fn runtime(state: &StateRoot, workflow: &WorkflowId, step: &WorkflowId) -> PathBuf {
    state
        .path()
        .join(STEP_RUNTIMES)
        .join(workflow.as_str())
        .join(step.as_str())
}

/// Computes a scripted step for `target` and the person at `home`. `confinement` answers
/// whether the machine can enforce the step's policy text; a step that cannot be confined is
/// refused.
pub fn plan(
    state: &StateRoot,
    req: &StepRequest,
    target: Target,
    home: &Path,
    sandboxer: &Path,
    confinement: impl FnOnce(&str) -> Confinement,
) -> Result<StepLaunch, LaunchError> {
    state.require_workflow(&req.workflow)?;
    for a in &req.attach {
        state.require_workflow(&a.workflow)?;
        if a.workflow == req.workflow {
            return Err(LaunchError::Adapter(format!(
                "--attach {}: that is the step's own workflow, already granted rw",
                a.workflow
            )));
        }
    }
    if !req.script.is_absolute() {
        return Err(LaunchError::Adapter(format!(
            "--script {}: give an absolute path",
            req.script.display()
        )));
    }
    let runtime = runtime(state, &req.workflow, &req.step);
    // The programs run outside it later, guarded as in a chat's launch: the enforcer, the
    // dispatcher, tmux, and the CLIs (a step is recorded in no guard ledger, so it must leave
    // them as every chat does).
    let mut programs = vec![sandboxer.to_path_buf()];
    programs.extend(std::env::current_exe().ok());
    programs.push(crate::programs::tmux().to_path_buf());
    programs.extend(crate::programs::installed_clis());
    // A step is a script of the workflow's, not a chat talking to a model: no network at all.
    let grants = LaunchGrants::new(state, runtime.clone(), &req.workflow, &req.attach)
        .with_programs(programs)
        .with_network(crate::grants::LaunchNetwork {
            mode: sandboxer::network::NetworkMode::None,
            allow: Vec::new(),
            loopback: Vec::new(),
            proxy: sandboxer::network::ProxyEndpoint::Socket(
                runtime.join(LAUNCH_DIR).join(crate::launch::EGRESS_SOCKET),
            ),
        });
    let policy_text = grants.policy_toml();
    let how = confinement(&policy_text).map_err(|why| {
        LaunchError::FullRefused(format!(
            "a scripted step runs only confined, and this machine cannot confine it: {why}"
        ))
    })?;
    let launch_dir = runtime.join(LAUNCH_DIR);
    let policy_path = launch_dir.join("policy.toml");
    let script_path = launch_dir.join(SCRIPT_NAME);
    let cwd = grants.workflow.clone();
    // A Mac runs it under the profile of this policy, resolved for the person at `home` as
    // every launch's is (ways-out list included).
    let (profile, profile_path) = match target {
        Target::Linux => (None, None),
        Target::Macos => {
            let profile_path = launch_dir.join("sandbox.sb");
            let text = launch::render_seatbelt(&policy_text, &policy_path, home, None)
                .map_err(|e| LaunchError::Profile(format!("the step's Seatbelt profile: {e:#}")))?;
            (Some(text), Some(profile_path))
        }
    };
    let mut script_argv = vec![script_path.display().to_string()];
    script_argv.extend(req.args.iter().cloned());
    let argv = launch::wrapper_argv(
        target,
        sandboxer,
        &policy_path,
        profile_path.as_deref(),
        &cwd,
        &script_argv,
        &launch::person_lists_env(),
    );
    Ok(StepLaunch {
        workflow: req.workflow.clone(),
        step: req.step.clone(),
        runtime,
        cwd,
        policy_path,
        policy_text,
        script_source: req.script.clone(),
        script_path,
        confinement: how,
        profile,
        profile_path,
        argv,
        env_removed: ENV_REMOVED.iter().map(|s| s.to_string()).collect(),
    })
}

/// Creates the step's runtime and launch folder (refusing symlinks on the way: the runtime
/// was writable by earlier runs), writes the policy and the script copy.
pub fn write_files(state: &StateRoot, step: &StepLaunch) -> Result<(), LaunchError> {
    let io = |what: &Path, e: &dyn std::fmt::Display| LaunchError::Io {
        what: what.display().to_string(),
        why: e.to_string(),
    };
    let rel = step
        .runtime
        .join(LAUNCH_DIR)
        .strip_prefix(state.path())
        .map(Path::to_path_buf)
        .map_err(|_| io(&step.runtime, &"is outside the state root"))?;
    launch::ensure_real_dir(state.path(), &rel).map_err(|e| io(&step.runtime, &e))?;
    let script = std::fs::read(&step.script_source).map_err(|e| io(&step.script_source, &e))?;
    crate::state::write_atomic(&step.policy_path, step.policy_text.as_bytes(), 0o600)
        .map_err(|e: StateError| io(&step.policy_path, &e))?;
    crate::state::write_atomic(&step.script_path, &script, 0o700)
        .map_err(|e: StateError| io(&step.script_path, &e))?;
    if let (Some(path), Some(text)) = (&step.profile_path, &step.profile) {
        crate::state::write_atomic(path, text.as_bytes(), 0o600)
            .map_err(|e: StateError| io(path, &e))?;
    }
    Ok(())
}

/// Runs the step in the foreground; its exit code (128+N for signal N).
pub fn run_foreground(step: &StepLaunch) -> Result<u8, LaunchError> {
    let mut cmd = launch::wrapper_command(&step.argv);
    cmd.current_dir(&step.cwd);
    for k in &step.env_removed {
        cmd.env_remove(k);
    }
    let status = cmd.status().map_err(|e| LaunchError::Io {
        what: format!("cannot start {}", step.argv[0]),
        why: e.to_string(),
    })?;
    Ok(launch::of_status(status))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> (tempfile::TempDir, StateRoot) {
        let d = tempfile::tempdir().unwrap();
        let (s, _) = StateRoot::init(&d.path().join("root"), None).unwrap();
        s.add_workflow(&WorkflowId::new("wf").unwrap()).unwrap();
        (d, s)
    }

    fn req(script: PathBuf) -> StepRequest {
        StepRequest {
            workflow: WorkflowId::new("wf").unwrap(),
            step: WorkflowId::new("build").unwrap(),
            script,
            args: vec!["a".into()],
            attach: vec![],
        }
    }

    #[test]
    fn a_step_is_planned_like_a_chat_launch() {
        let (d, s) = state();
        let script = d.path().join("s.sh");
        std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        let step = plan(
            &s,
            &req(script),
            Target::Linux,
            Path::new("/home/ada"),
            Path::new("/bin/sandboxer"),
            |_| Ok("test".into()),
        )
        .unwrap();
        let rt = s.path().join("state/step-runtimes/v1/wf/build");
        assert_eq!(step.runtime, rt);
        assert_eq!(step.cwd, s.workflow(&WorkflowId::new("wf").unwrap()));
        assert_eq!(&step.argv[..2], ["/bin/sandboxer", "exec"]);
        assert_eq!(step.argv.last().unwrap(), "a");
        let policy: toml::Value = toml::from_str(&step.policy_text).unwrap();
        assert_eq!(
            policy["protected"][0]["path"].as_str().unwrap(),
            s.path().to_str().unwrap()
        );
        assert_eq!(
            policy["grant"][0]["path"].as_str().unwrap(),
            rt.to_str().unwrap()
        );
        assert_eq!(policy["refuse"].as_array().unwrap().len(), 2);
        write_files(&s, &step).unwrap();
        assert_eq!(
            std::fs::read_to_string(&step.script_path).unwrap(),
            "#!/bin/sh\necho hi\n"
        );
        assert!(step.profile.is_none());

        let mac = plan_for_mac(&d, &s);
        assert_eq!(&mac.argv[..2], ["/usr/bin/sandbox-exec", "-f"]);
        assert!(mac.profile.as_deref().unwrap().contains("(deny default)"));
    }

    /// A step's Seatbelt profile is resolved like a chat's: the Mac's ways out (tmux and screen
    /// sockets, …) are refused in it.
    #[test]
    fn a_steps_mac_profile_refuses_the_ways_out() {
        let (d, s) = state();
        let profile = plan_for_mac(&d, &s).profile.unwrap();
        for way_out in ["/private/tmp/uscreens/S-ada", "/Users/ada/.screen"] {
            assert!(
                profile.contains(way_out),
                "{way_out} is not refused in the step's profile:\n{profile}"
            );
        }
    }

    /// The step planned for the Mac user ada (its script need not exist to be planned).
    fn plan_for_mac(d: &tempfile::TempDir, s: &StateRoot) -> StepLaunch {
        plan(
            s,
            &req(d.path().join("mac.sh")),
            Target::Macos,
            Path::new("/Users/ada"),
            Path::new("/x"),
            |_| Ok("evaluated".into()),
        )
        .unwrap()
    }

    #[test]
    fn a_step_that_cannot_be_confined_is_refused() {
        let (d, s) = state();
        let e = plan(
            &s,
            &req(d.path().join("s.sh")),
            Target::Linux,
            d.path(),
            Path::new("/x"),
            |_| Err(launch::Unconfined::NoSandbox("no landlock".into())),
        )
        .unwrap_err();
        assert!(e.to_string().contains("no landlock"), "{e}");
        let e = plan(
            &s,
            &req("rel.sh".into()),
            Target::Linux,
            d.path(),
            Path::new("/x"),
            |_| Ok("t".into()),
        )
        .unwrap_err();
        assert!(e.to_string().contains("absolute"), "{e}");
    }

    #[test]
    fn a_symlinked_runtime_is_refused() {
        let (d, s) = state();
        let script = d.path().join("s.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        let step = plan(
            &s,
            &req(script),
            Target::Linux,
            d.path(),
            Path::new("/x"),
            |_| Ok("t".into()),
        )
        .unwrap();
        std::fs::create_dir_all(step.runtime.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(d.path(), &step.runtime).unwrap();
        let e = write_files(&s, &step).unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
    }
}
