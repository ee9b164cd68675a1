//! TEST ONLY: deliberately broken launch policies, to show the contract fails on the right
//! probes. A mutation rewrites the policy text of a computed launch (the exact file
//! `sandboxer exec` enforces and the Seatbelt profile is rendered from) before anything is
//! written. It is reachable only through the hidden `dispatcher contract --break-policy`
//! flag, which prints a warning and whose runs can never pass as a real contract run, and
//! exists only in a build with the `test-hooks` feature ([`crate::test_hooks`]).

use serde::Serialize;

/// How to break a policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mutation {
    /// The chat's runtime grant widened to the whole state root.
    WidenGrant,
    /// The chat's workflow grant widened to its parent: every workflow.
    WidenWorkflowGrant,
    /// The refuse list emptied.
    EmptyRefuse,
    /// `[launchers] block = false`.
    UnblockLaunchers,
    /// `[linux] ways_out = false`: the ways-out list is not masked.
    OpenWaysOut,
}

impl Mutation {
    pub const ALL: [Mutation; 5] = [
        Mutation::WidenGrant,
        Mutation::WidenWorkflowGrant,
        Mutation::EmptyRefuse,
        Mutation::UnblockLaunchers,
        Mutation::OpenWaysOut,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Mutation::WidenGrant => "widen-grant",
            Mutation::WidenWorkflowGrant => "widen-workflow-grant",
            Mutation::EmptyRefuse => "empty-refuse",
            Mutation::UnblockLaunchers => "unblock-launchers",
            Mutation::OpenWaysOut => "open-ways-out",
        }
    }

    pub fn parse(s: &str) -> Option<Mutation> {
        Mutation::ALL.into_iter().find(|m| m.as_str() == s)
    }

    /// The value of a `--break-policy` flag, or the error naming the known ones.
    pub fn from_flag(flag: Option<&str>) -> Result<Option<Mutation>, String> {
        flag.map(|m| {
            Mutation::parse(m).ok_or_else(|| {
                format!(
                    "--break-policy {m:?}: expected one of {}",
                    Mutation::ALL.map(|m| m.as_str()).join(", ")
                )
            })
        })
        .transpose()
    }

    /// Rewrites the policy file of a computed launch (before it is written): what
    /// `dispatcher contract --break-policy` does to its own launches, and what the server does
    /// with `AGENTWORKS_TEST_BREAK_POLICY` (`dispatcher test cli-sandbox-contract`).
    pub fn apply_to_launch(self, launch: &mut crate::launch::Launch) -> Result<(), String> {
        let path = launch.policy_path.clone();
        let file = launch
            .files
            .iter_mut()
            .find(|f| f.path == path)
            .ok_or("the launch has no policy file")?;
        match &mut file.source {
            crate::launch::FileSource::Content(c) => {
                *c = self.apply(c)?;
                Ok(())
            }
            crate::launch::FileSource::CopyOf(_) | crate::launch::FileSource::Keychain(_) => {
                Err("the launch's policy is not content".into())
            }
        }
    }

    /// Rewrites a launch's policy text. `widen-grant`: the first grant (the runtime's) becomes
    /// the first protected root (the state root). `widen-workflow-grant`: the grant whose
    /// `why` names the chat's (or step's) workflow becomes its parent folder.
    pub fn apply(self, policy_text: &str) -> Result<String, String> {
        let mut doc: toml::Table = toml::from_str(policy_text)
            .map_err(|e| format!("the launch policy does not parse: {e}"))?;
        match self {
            Mutation::WidenGrant => {
                let root = doc
                    .get("protected")
                    .and_then(|p| p.as_array())
                    .and_then(|p| p.first())
                    .and_then(|p| p.get("path"))
                    .cloned()
                    .ok_or("the policy has no protected root")?;
                let grant = doc
                    .get_mut("grant")
                    .and_then(|g| g.as_array_mut())
                    .and_then(|g| g.first_mut())
                    .and_then(|g| g.as_table_mut())
                    .ok_or("the policy has no grant")?;
                grant.insert("path".into(), root);
                grant.insert("access".into(), "rw".into());
            }
            Mutation::WidenWorkflowGrant => {
                let grant = doc
                    .get_mut("grant")
                    .and_then(|g| g.as_array_mut())
                    .and_then(|g| {
                        g.iter_mut().find(|g| {
                            g.get("why").and_then(|w| w.as_str()) == Some("this chat's workflow")
                        })
                    })
                    .and_then(|g| g.as_table_mut())
                    .ok_or("the policy has no workflow grant")?;
                let path = grant
                    .get("path")
                    .and_then(|p| p.as_str())
                    .ok_or("a grant without a path")?;
                let parent = std::path::Path::new(path)
                    .parent()
                    .ok_or("the workflow grant has no parent")?
                    .display()
                    .to_string();
                grant.insert("path".into(), parent.into());
            }
            Mutation::EmptyRefuse => {
                doc.insert("refuse".into(), toml::Value::Array(Vec::new()));
            }
            Mutation::UnblockLaunchers => {
                let mut l = toml::Table::new();
                l.insert("block".into(), false.into());
                doc.insert("launchers".into(), l.into());
            }
            Mutation::OpenWaysOut => {
                // Only the ways-out list: the rest of `[linux]` (the mask registry) stays.
                let linux = doc
                    .entry("linux")
                    .or_insert_with(|| toml::Table::new().into())
                    .as_table_mut()
                    .ok_or("the policy's [linux] is not a table")?;
                linux.insert("ways_out".into(), false.into());
            }
        }
        let mut out = String::from(
            "# TEST ONLY: deliberately broken by `dispatcher contract --break-policy`.\n",
        );
        out.push_str(&toml::to_string(&doc).map_err(|e| e.to_string())?);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = "version = 1\nbase = \"open\"\n[[protected]]\npath = \"/s\"\n[[grant]]\npath = \"/s/rt\"\naccess = \"rw\"\n[[grant]]\npath = \"/s/rt/.a\"\naccess = \"ro\"\n[[grant]]\npath = \"/s/docs/wf\"\naccess = \"rw\"\nwhy = \"this chat's workflow\"\n[[refuse]]\npath = \"/s/wf/planning\"\n[launchers]\nblock = true\n";

    #[test]
    fn each_mutation_changes_what_it_says() {
        let t = |m: Mutation| -> toml::Table { toml::from_str(&m.apply(POLICY).unwrap()).unwrap() };
        assert_eq!(
            t(Mutation::WidenGrant)["grant"][0]["path"].as_str(),
            Some("/s")
        );
        assert_eq!(
            t(Mutation::WidenGrant)["grant"][1]["path"].as_str(),
            Some("/s/rt/.a")
        );
        assert_eq!(
            t(Mutation::WidenWorkflowGrant)["grant"][2]["path"].as_str(),
            Some("/s/docs")
        );
        assert_eq!(
            t(Mutation::WidenWorkflowGrant)["grant"][0]["path"].as_str(),
            Some("/s/rt")
        );
        assert!(
            t(Mutation::EmptyRefuse)["refuse"]
                .as_array()
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            t(Mutation::UnblockLaunchers)["launchers"]["block"].as_bool(),
            Some(false)
        );
        assert_eq!(
            t(Mutation::OpenWaysOut)["linux"]["ways_out"].as_bool(),
            Some(false)
        );
        for m in Mutation::ALL {
            assert_eq!(Mutation::parse(m.as_str()), Some(m));
        }
    }

    #[test]
    fn mutations_find_their_grants_in_a_real_launch_policy() {
        let g = crate::grants::LaunchGrants {
            state_root: "/s".into(),
            anchor: "/.s.anchor".into(),
            docs_root: "/s/workspace-docs".into(),
            runtime: "/s/state/cli-runtimes/v1/c".into(),
            workflow: "/s/workspace-docs/w".into(),
            attached: vec![],
            blocked: vec!["planning".into()],
            autorun_guard: true,
            programs: vec![],
            log_tag: Some("[agentworks:c]".into()),
            network: None,
        };
        let text = g.policy_toml();
        let t = |m: Mutation| -> toml::Table { toml::from_str(&m.apply(&text).unwrap()).unwrap() };
        assert_eq!(
            t(Mutation::WidenGrant)["grant"][0]["path"].as_str(),
            Some("/s")
        );
        let w = t(Mutation::WidenWorkflowGrant);
        let grants = w["grant"].as_array().unwrap();
        assert!(
            grants
                .iter()
                .any(|g| g["path"].as_str() == Some("/s/workspace-docs")),
            "{grants:?}"
        );
    }
}
