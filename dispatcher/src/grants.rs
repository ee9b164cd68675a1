//! The policy of one launch: protected = the state root and the docs root; granted = the
//! chat's runtime (rw), its workflow (rw), attached workflows (as given); refused = the folder
//! guard's blocked paths inside each granted workflow; guarded = the programs the dispatcher
//! runs outside a sandbox (unless the autorun guard is off); the one pathname Unix socket that
//! may be connected to = the chat's bridge socket. Written into the runtime as TOML (the
//! exact file `sandboxer` enforces) by serialising data, so no path can change its syntax.

use std::path::{Path, PathBuf};

use sandboxer::{Access, written};
use serde::Serialize;

use crate::ids::{IdError, WorkflowId};
use crate::state::StateRoot;

/// The launch's own folder inside the runtime, granted read-only (see `launch::LAUNCH_DIR`).
pub const LAUNCH_DIR: &str = ".agentworks";

/// An attached workflow and its access (`--attach W` is read-only, `--attach W:rw`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Attach {
    pub workflow: WorkflowId,
    pub access: sandboxer::Access,
}

/// Why an `--attach` value names no attachment.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("--attach {given:?}: unknown access {access:?}; use W, W:ro or W:rw")]
    UnknownAccess { given: String, access: String },
    #[error(transparent)]
    Workflow(#[from] IdError),
}

impl std::str::FromStr for Attach {
    type Err = AttachError;
    fn from_str(s: &str) -> Result<Attach, AttachError> {
        let (id, access) = match s.rsplit_once(':') {
            Some((id, "rw")) => (id, sandboxer::Access::Rw),
            Some((id, "ro")) => (id, sandboxer::Access::Ro),
            Some((_, other)) => {
                return Err(AttachError::UnknownAccess {
                    given: s.to_string(),
                    access: other.to_string(),
                });
            }
            None => (s, sandboxer::Access::Ro),
        };
        let workflow = WorkflowId::new(id)?;
        Ok(Attach { workflow, access })
    }
}

/// Where each chat's sandbox registers its mask keeper, inside the protected state root, so
/// that the dispatcher can write refused paths (`planning/`, `workflow.db`) while chats run
/// (`sandboxer::refused`).
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
    /// Whether the autorun guard is on (`config.json`'s `autorun.guard`): off, the policy
    /// says `[autorun] guard = false` and guards no program.
    pub autorun_guard: bool,
    /// The programs the dispatcher runs outside a sandbox (the CLI, `sandboxer`, itself,
    /// tmux), guarded when the autorun guard is on ([`crate::programs::guard_rules`]).
    pub programs: Vec<PathBuf>,
    /// The message every denial of a Mac's profile carries into the unified log (a chat's
    /// [`crate::denials::chat_tag`]), so the dispatcher can tell its denials from others'.
    pub log_tag: Option<String>,
    /// What the launch may reach over the network; `None` writes no `[network]` section.
    pub network: Option<LaunchNetwork>,
}

/// A launch's `[network]`: its mode, and for `public` and `allowlist` the egress proxy the
/// dispatcher serves for it (docs/network.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchNetwork {
    pub mode: sandboxer::network::NetworkMode,
    /// `allowlist`: the adapter's hosts, the state root's `network.allow`, a model endpoint's.
    pub allow: Vec<String>,
    /// The machine's loopback ports reachable (a model endpoint on loopback).
    pub loopback: Vec<u16>,
    /// Where the sandbox reaches the proxy: its Unix socket in the launch's read-only folder
    /// (Linux), or its port on loopback (macOS).
    pub proxy: sandboxer::network::ProxyEndpoint,
}

impl LaunchNetwork {
    fn section(&self) -> sandboxer::NetworkSection {
        use sandboxer::network::NetworkMode;
        let mut section = sandboxer::NetworkSection::new(self.mode);
        if self.mode == NetworkMode::Allowlist {
            section.allow = self.allow.iter().cloned().map(written).collect();
        }
        if matches!(self.mode, NetworkMode::Public | NetworkMode::Allowlist) {
            section.loopback = self
                .loopback
                .iter()
                .map(|&p| written(i64::from(p)))
                .collect();
            section.proxy = Some(written(self.proxy.to_string()));
        }
        section
    }
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
            autorun_guard: state.config().autorun.guard,
            programs: Vec::new(),
            log_tag: None,
            network: None,
        }
    }

    /// These grants with `network` as the launch's `[network]`.
    pub fn with_network(mut self, network: LaunchNetwork) -> LaunchGrants {
        self.network = Some(network);
        self
    }

    /// These grants with denials tagged `tag` on a Mac ([`LaunchGrants::log_tag`]).
    pub fn with_log_tag(mut self, tag: String) -> LaunchGrants {
        self.log_tag = Some(tag);
        self
    }

    /// These grants with `programs` guarded ([`LaunchGrants::programs`]).
    pub fn with_programs(mut self, programs: Vec<PathBuf>) -> LaunchGrants {
        self.programs = programs;
        self
    }

    /// Every granted workflow folder (own first), for extra-dir flags and the folder guard.
    pub fn workflow_dirs(&self) -> impl Iterator<Item = &Path> {
        std::iter::once(self.workflow.as_path())
            .chain(self.attached.iter().map(|(p, _)| p.as_path()))
    }

    /// The policy as TOML text.
    pub fn policy_toml(&self) -> String {
        use sandboxer::{GrantRule, PathRule};
        let mut doc = sandboxer::PolicyDocument::new(sandboxer::Base::Open);
        doc.unix_sockets = vec![written(self.runtime.join(crate::bridge::SOCKET_NAME))];
        doc.protected = vec![
            PathRule::new(
                &self.state_root,
                "the dispatcher's state root: config.json (server token), auth, other chats",
            ),
            PathRule::new(
                &self.anchor,
                "the state root's anchor: how the dispatcher tells it from a look-alike",
            ),
        ];
        if !self.docs_root.starts_with(&self.state_root) {
            doc.protected.push(PathRule::new(
                &self.docs_root,
                "workspace documents: other workflows",
            ));
        }
        doc.grant = vec![
            GrantRule::new(&self.runtime, Access::Rw, "this chat's runtime"),
            GrantRule::new(
                self.runtime.join(LAUNCH_DIR),
                Access::Ro,
                "the launch's own files (policy, profile, prompt note): read-only",
            ),
            GrantRule::new(&self.workflow, Access::Rw, "this chat's workflow"),
        ];
        for (path, access) in &self.attached {
            doc.grant
                .push(GrantRule::new(path, *access, "an attached workflow"));
        }
        doc.refuse = self
            .workflow_dirs()
            .flat_map(|wf| {
                self.blocked.iter().map(move |b| {
                    PathRule::new(wf.join(b), "folder guard: blocked inside every workflow")
                })
            })
            .collect();
        crate::programs::apply_guard(&mut doc, self.autorun_guard, &self.programs);
        doc.linux.mask_registry = Some(written(mask_registry(&self.state_root)));
        doc.macos.log_tag = self.log_tag.clone().map(written);
        doc.network = self.network.as_ref().map(LaunchNetwork::section);
        let mut text = String::from(
            "# Written by the dispatcher for one launch; this is exactly what sandboxer enforces.\n",
        );
        text.push_str(&doc.to_toml().expect("policy document serializes"));
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
            autorun_guard: true,
            programs: vec![],
            log_tag: None,
            network: None,
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
