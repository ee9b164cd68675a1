//! The template variables a query may use, defined once. Each has a meaning, and says for
//! which probe sets it exists: `contract.toml` and `escapes.toml` probe a chat launch,
//! `steps.toml` probes a workflow step (an agent step or a scripted step). A query using a
//! variable that does not exist for its set is a load error naming the file, line and field.

/// Which launch a probe set is run under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A chat's CLI launch (`contract.toml`, `escapes.toml`).
    Chat,
    /// A workflow step: an agent step (a CLI launched for a step) or a scripted step
    /// (`dispatcher step run`) (`steps.toml`).
    Step,
}

/// One template variable.
pub struct Variable {
    pub name: &'static str,
    pub meaning: &'static str,
    pub chat: bool,
    pub step: bool,
}

const fn both(name: &'static str, meaning: &'static str) -> Variable {
    Variable {
        name,
        meaning,
        chat: true,
        step: true,
    }
}

const fn chat(name: &'static str, meaning: &'static str) -> Variable {
    Variable {
        name,
        meaning,
        chat: true,
        step: false,
    }
}

const fn step(name: &'static str, meaning: &'static str) -> Variable {
    Variable {
        name,
        meaning,
        chat: false,
        step: true,
    }
}

/// Every variable, in the order `docs/contract.md` lists them.
pub const VARIABLES: &[Variable] = &[
    both(
        "home",
        "the person's home: a fresh folder the runner makes, the launch's $HOME (open)",
    ),
    both(
        "runtime",
        "the probed chat's (or step's) runtime folder, the launch's working folder for a chat (rw)",
    ),
    both(
        "launch_dir",
        "{runtime}/.agentworks: the launch's own files, policy included (ro)",
    ),
    chat("chat", "the probed chat's id"),
    both("other_chat", "another chat's id"),
    both("other_runtime", "another chat's runtime folder (protected)"),
    step(
        "other_step_runtime",
        "another step's runtime folder (protected)",
    ),
    both(
        "workflow",
        "the probed chat's (or step's) own workflow folder (rw); for a chat it holds planning/plan.json and workflow.db at launch, for a step neither",
    ),
    chat("attached", "a workflow attached read-only"),
    chat(
        "attached_rw",
        "a workflow attached read-write, with no planning/ and no workflow.db at launch",
    ),
    both("other_workflow", "a workflow not granted (protected)"),
    both("state_root", "the dispatcher's state root (protected)"),
    both(
        "config_json",
        "the state root's config.json; its server token is the marker",
    ),
    both("auth_dir", "the state root's state/auth folder"),
    both("personal_mcp", "the state root's personal-mcp folder"),
    both(
        "events_db",
        "another chat's event database (state/events/CHAT.jsonl)",
    ),
    chat("own_events_db", "the probed chat's own event database"),
    both(
        "outside_evidence",
        "a folder inside the protected state root: only a process outside the sandbox can write there",
    ),
    both(
        "xdg_runtime_dir",
        "the launch's $XDG_RUNTIME_DIR, a folder the runner makes",
    ),
    both(
        "session_bus",
        "$XDG_RUNTIME_DIR/bus: a session-bus socket the runner listens on",
    ),
    both(
        "tmux_socket",
        "the socket of a real tmux server the runner starts ($TMUX_TMPDIR in a temp folder)",
    ),
    both(
        "sysv_shm",
        "the id of a System V shared memory segment the runner made outside, holding a marker",
    ),
    both(
        "dev_shm_file",
        "a file the runner made in /dev/shm (POSIX shared memory), holding a marker",
    ),
    both(
        "session_key",
        "the description of a key in the runner's session keyring, holding a marker",
    ),
    both(
        "abstract_socket",
        "the name of an abstract Unix socket the runner listens on",
    ),
    both(
        "outside_pid",
        "a process the runner starts outside the sandbox",
    ),
    both(
        "tty",
        "the pty the sandbox runs under (the caller's controlling terminal)",
    ),
];

/// Whether `name` exists for `kind`.
pub fn known(kind: Kind, name: &str) -> bool {
    VARIABLES
        .iter()
        .any(|v| v.name == name && if kind == Kind::Chat { v.chat } else { v.step })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_templates_can_use_them() {
        let mut seen = std::collections::BTreeSet::new();
        for v in VARIABLES {
            assert!(seen.insert(v.name), "{} twice", v.name);
            assert!(v.chat || v.step, "{} exists for nothing", v.name);
            assert!(sandboxer::probe::Template::parse(&format!("{{{}}}", v.name)).is_ok());
        }
        assert!(known(Kind::Chat, "attached") && !known(Kind::Step, "attached"));
        assert!(
            known(Kind::Step, "other_step_runtime") && !known(Kind::Chat, "other_step_runtime")
        );
        assert!(!known(Kind::Chat, "nope"));
    }
}
