//! The policy of one launch: protected = the state root and the docs root; granted = the
//! chat's runtime (rw), its workflow (rw), attached workflows (as given); refused = the folder
//! guard's blocked paths inside each granted workflow; the one pathname Unix socket that may be
//! connected to = the chat's bridge socket. Written into the runtime as TOML (the
//! exact file `sandboxer` enforces) by serialising data, so no path can change its syntax.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::ids::WorkflowId;
use crate::state::StateRoot;

/// The launch's own folder inside the runtime, granted read-only (see `launch::LAUNCH_DIR`).
pub const LAUNCH_DIR: &str = ".agentworks";

/// An attached workflow and its access (`--attach W` is read-only, `--attach W:rw`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Attach {
    pub workflow: WorkflowId,
    pub access: sandboxer::Access,
}

impl std::str::FromStr for Attach {
    type Err = String;
    fn from_str(s: &str) -> Result<Attach, String> {
        let (id, access) = match s.rsplit_once(':') {
            Some((id, "rw")) => (id, sandboxer::Access::Rw),
            Some((id, "ro")) => (id, sandboxer::Access::Ro),
            Some((_, other)) => {
                return Err(format!(
                    "--attach {s:?}: unknown access {other:?}; use W, W:ro or W:rw"
                ));
            }
            None => (s, sandboxer::Access::Ro),
        };
        let workflow = WorkflowId::new(id).map_err(|e| e.to_string())?;
        Ok(Attach { workflow, access })
    }
}

#[derive(Serialize)]
struct PathEntry {
    path: PathBuf,
    why: String,
}

#[derive(Serialize)]
struct GrantEntry {
    path: PathBuf,
    access: &'static str,
    why: String,
}

#[derive(Serialize)]
struct Launchers {
    block: bool,
}

#[derive(Serialize)]
struct LinuxDoc {
    mask_registry: PathBuf,
}

#[derive(Serialize)]
struct PolicyDoc {
    version: u32,
    base: &'static str,
    /// The chat's own bridge socket: the only pathname Unix socket the CLI may connect to.
    unix_sockets: Vec<PathBuf>,
    protected: Vec<PathEntry>,
    grant: Vec<GrantEntry>,
    refuse: Vec<PathEntry>,
    launchers: Launchers,
    linux: LinuxDoc,
}

/// Where each chat's sandbox registers its mask keeper, inside the protected state root, so
/// that the dispatcher can write refused paths (`planning/`, `workflow.db`) while chats run
/// (`sandboxer::linux::refused`).
pub fn mask_registry(state_root: &Path) -> PathBuf {
    state_root.join("state").join("masks")
}

/// The folders of one launch, before they become a policy.
#[derive(Debug, Clone)]
pub struct LaunchGrants {
    pub state_root: PathBuf,
    /// The state root's anchor (see [`crate::anchor`]), protected like the root.
    pub anchor: PathBuf,
    pub docs_root: PathBuf,
    pub runtime: PathBuf,
    pub workflow: PathBuf,
    pub attached: Vec<(PathBuf, sandboxer::Access)>,
    pub blocked: Vec<String>,
}

impl LaunchGrants {
    pub fn new(
        state: &StateRoot,
        runtime: PathBuf,
        workflow: &WorkflowId,
        attached: &[Attach],
    ) -> LaunchGrants {
        LaunchGrants {
            state_root: state.path().to_path_buf(),
            anchor: state.anchor_path(),
            docs_root: state.docs_root(),
            runtime,
            workflow: state.workflow(workflow),
            attached: attached
                .iter()
                .map(|a| (state.workflow(&a.workflow), a.access))
                .collect(),
            blocked: state.config().folder_guard.blocked.clone(),
        }
    }

    /// Every granted workflow folder (own first), for extra-dir flags and the folder guard.
    pub fn workflow_dirs(&self) -> impl Iterator<Item = &Path> {
        std::iter::once(self.workflow.as_path())
            .chain(self.attached.iter().map(|(p, _)| p.as_path()))
    }

    /// The policy as TOML text.
    pub fn policy_toml(&self) -> String {
        let mut protected = vec![PathEntry {
            path: self.state_root.clone(),
            why: "the dispatcher's state root: config.json (server token), auth, other chats"
                .into(),
        }];
        protected.push(PathEntry {
            path: self.anchor.clone(),
            why: "the state root's anchor: how the dispatcher tells it from a look-alike".into(),
        });
        if !self.docs_root.starts_with(&self.state_root) {
            protected.push(PathEntry {
                path: self.docs_root.clone(),
                why: "workspace documents: other workflows".into(),
            });
        }
        let mut grant = vec![
            GrantEntry {
                path: self.runtime.clone(),
                access: "rw",
                why: "this chat's runtime".into(),
            },
            GrantEntry {
                path: self.runtime.join(LAUNCH_DIR),
                access: "ro",
                why: "the launch's own files (policy, profile, prompt note): read-only".into(),
            },
            GrantEntry {
                path: self.workflow.clone(),
                access: "rw",
                why: "this chat's workflow".into(),
            },
        ];
        for (path, access) in &self.attached {
            grant.push(GrantEntry {
                path: path.clone(),
                access: match access {
                    sandboxer::Access::Ro => "ro",
                    sandboxer::Access::Rw => "rw",
                },
                why: "an attached workflow".into(),
            });
        }
        let refuse = self
            .workflow_dirs()
            .flat_map(|wf| {
                self.blocked.iter().map(move |b| PathEntry {
                    path: wf.join(b),
                    why: "folder guard: blocked inside every workflow".into(),
                })
            })
            .collect();
        let doc = PolicyDoc {
            version: 1,
            base: "open",
            unix_sockets: vec![self.runtime.join(crate::bridge::SOCKET_NAME)],
            protected,
            grant,
            refuse,
            launchers: Launchers { block: true },
            linux: LinuxDoc {
                mask_registry: mask_registry(&self.state_root),
            },
        };
        let mut text = String::from(
            "# Written by the dispatcher for one launch; this is exactly what sandboxer enforces.\n",
        );
        text.push_str(&toml::to_string(&doc).expect("policy document serializes"));
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attach_parses_access() {
        let a: Attach = "w2".parse().unwrap();
        assert_eq!(a.access, sandboxer::Access::Ro);
        let a: Attach = "w2:rw".parse().unwrap();
        assert_eq!(a.access, sandboxer::Access::Rw);
        assert!("w2:rwx".parse::<Attach>().is_err());
        assert!("../x".parse::<Attach>().is_err());
    }

    #[test]
    fn hostile_paths_stay_data() {
        let g = LaunchGrants {
            state_root: "/h/q\"uote\n]] [x".into(),
            anchor: "/h/.q\"uote\n]] [x.anchor".into(),
            docs_root: "/h/q\"uote\n]] [x/workspace-docs".into(),
            runtime: "/h/q\"uote\n]] [x/state/cli-runtimes/v1/c".into(),
            workflow: "/h/q\"uote\n]] [x/workspace-docs/w".into(),
            attached: vec![],
            blocked: vec!["planning".into()],
        };
        let text = g.policy_toml();
        let v: toml::Value = toml::from_str(&text).unwrap();
        // The state root and its anchor (the docs root lies inside the state root).
        assert_eq!(v["protected"].as_array().unwrap().len(), 2);
        assert_eq!(
            v["protected"][1]["path"].as_str().unwrap(),
            "/h/.q\"uote\n]] [x.anchor"
        );
        assert_eq!(
            v["grant"][0]["path"].as_str().unwrap(),
            "/h/q\"uote\n]] [x/state/cli-runtimes/v1/c"
        );
    }
}
