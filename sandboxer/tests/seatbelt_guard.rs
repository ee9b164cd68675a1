//! The autorun guard in the rendered Seatbelt profile, checked with the SBPL evaluator: every
//! entry of the macOS autorun list is readable and never written, created, deleted, renamed,
//! linked or re-moded, in every spelling APFS accepts (case, NFC/NFD), also when missing;
//! every repository's hooks and config under the home likewise, except inside read-write
//! grants; ordinary home writes stay allowed; `[autorun] guard = false` turns the list off.
//! Every answer is also `Policy::decide`'s.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sandboxer::autorun;
use sandboxer::policy::ResolveOptions;
use sandboxer::sbpl::{self, Action, Outcome, Query};
use sandboxer::ways_out::Env;
use sandboxer::{Op, Policy, Target, Verdict, seatbelt};

const PRODUCT: &str = include_str!("fixtures/product.toml");
const HOME: &str = "/Users/ada";
const WORKFLOW: &str = "/Users/ada/Documents/AgentWorks/wf-main";

/// As the CLI resolves a policy for a Mac (`--target macos --home HOME --uid 501`): the
/// ways-out and autorun lists for that person.
fn mac_at(home: &str, text: &str) -> Policy {
    let opts = ResolveOptions::for_target(Target::Macos, Path::new(home), Some(501)).unwrap();
    Policy::from_toml(text, "policy.toml", &opts).unwrap()
}

fn mac(text: &str) -> Policy {
    mac_at(HOME, text)
}

fn parse(policy: &Policy) -> sbpl::Profile {
    let text = seatbelt::render(policy).unwrap();
    sbpl::parse(&text, &BTreeMap::new()).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn macos_entries(home: &str) -> Vec<PathBuf> {
    let env = Env::for_target(Target::Macos, Path::new(home), Some(501), None);
    let list = autorun::list::load(Target::Macos, None, &env).unwrap();
    assert!(list.entries.len() > 40, "{}", list.entries.len());
    list.entries.into_iter().map(|e| e.path).collect()
}

/// The SBPL operations a guarded path refuses: every kind of write, and linking it.
const WRITES: &[&str] = &[
    "file-write-data",
    "file-write-create",
    "file-write-unlink",
    "file-write-mode",
    "file-write-owner",
    "file-write-xattr",
    "file-write-flags",
    "file-write-times",
    "file-link",
];

fn outcome(profile: &sbpl::Profile, operation: &str, path: &Path) -> Outcome {
    let query = if operation == "network-outbound" {
        Query::UnixSocket(path)
    } else {
        Query::Path { path, vnode: None }
    };
    profile.evaluate(operation, &query).outcome
}

/// The evaluator's answer for `op`, which must be `decide`'s.
fn verdict(policy: &Policy, profile: &sbpl::Profile, op: Op, path: &Path) -> Verdict {
    let got = match outcome(profile, seatbelt::operation_for(op), path) {
        Outcome::Allow => Verdict::Allow,
        Outcome::Deny => Verdict::Deny,
        Outcome::Unknown => panic!("{op} {path:?} is unknown"),
    };
    assert_eq!(got, policy.decide(op, path).verdict, "{op} {path:?}");
    got
}

/// Read allowed; every write refused (also through the raw SBPL operations).
fn assert_guarded(policy: &Policy, profile: &sbpl::Profile, path: &Path) {
    for op in [Op::Read, Op::List, Op::Exec] {
        assert_eq!(
            verdict(policy, profile, op, path),
            Verdict::Allow,
            "{op} {path:?}"
        );
    }
    for op in [Op::Write, Op::Create, Op::Delete, Op::Rename] {
        assert_eq!(
            verdict(policy, profile, op, path),
            Verdict::Deny,
            "{op} {path:?}"
        );
    }
    for operation in WRITES {
        assert_eq!(
            outcome(profile, operation, path),
            Outcome::Deny,
            "{operation} {path:?}"
        );
    }
}

/// Every operation allowed (the control: the same probes succeed where nothing is guarded).
fn assert_open(policy: &Policy, profile: &sbpl::Profile, path: &Path) {
    for op in Op::ALL {
        assert_eq!(
            verdict(policy, profile, op, path),
            Verdict::Allow,
            "{op} {path:?}"
        );
    }
    for operation in WRITES {
        assert_eq!(
            outcome(profile, operation, path),
            Outcome::Allow,
            "{operation} {path:?}"
        );
    }
}

/// `path` with its part below `home` upper-cased, and lower-cased.
fn case_variants(home: &str, path: &Path) -> [PathBuf; 2] {
    let rest = path.to_str().unwrap().strip_prefix(home).unwrap_or("");
    let top = if path.starts_with(home) { home } else { "" };
    let rest = if top.is_empty() {
        path.to_str().unwrap()
    } else {
        rest
    };
    [
        PathBuf::from(format!("{top}{}", rest.to_uppercase())),
        PathBuf::from(format!("{top}{}", rest.to_lowercase())),
    ]
}

#[test]
fn guarded_profile() {
    let text = seatbelt::render(&mac(PRODUCT)).unwrap();
    insta::assert_snapshot!("guarded", text);
}

/// The guard's denials and the names reserved in every spelling are the profile's only ones
/// besides `(deny default)`, and come after every allow: the last matching rule decides.
#[test]
fn guard_denials_come_last() {
    let profile = parse(&mac(PRODUCT));
    let rules = profile.rules();
    let denies: Vec<usize> = (0..rules.len())
        .filter(|&i| rules[i].action == Action::Deny)
        .collect();
    assert_eq!(rules[denies[0]].operations, ["default"]);
    let guard = &denies[1..];
    assert_eq!(guard.len(), 3, "{:?}", denies);
    assert_eq!(
        rules[guard[0]].operations,
        [
            "file-write*",
            "file-write-data",
            "file-write-create",
            "file-link"
        ]
    );
    assert_eq!(rules[guard[1]].operations, ["file-write-unlink"]);
    assert_eq!(rules[guard[2]].operations, ["file-write-create"]);
    let last_allow = (0..rules.len())
        .rfind(|&i| rules[i].action == Action::Allow)
        .unwrap();
    assert!(guard[0] > last_allow);
}

/// Every entry of the macOS autorun list, missing (nothing exists here) and beneath, as
/// written and in other cases: read allowed, every write refused. Ordinary home paths stay
/// writable.
#[test]
fn every_macos_entry_is_read_only_in_every_case() {
    let policy = mac(PRODUCT);
    let profile = parse(&policy);
    for entry in macos_entries(HOME) {
        let [upper, lower] = case_variants(HOME, &entry);
        for p in [entry.clone(), entry.join("x.plist"), upper, lower] {
            assert_guarded(&policy, &profile, &p);
        }
    }
    for p in [
        "/Users/ada/.ZSHRC",
        "/Users/ada/.ZshRc",
        "/Users/ada/Library/launchagents",
        "/Users/ada/Library/launchagents/x.plist",
        "/Users/ada/LIBRARY/LaunchAgents/x.plist",
        "/users/ADA/library/LAUNCHAGENTS/evil.plist",
        "/Users/ada/.SSH/authorized_keys",
        "/Users/ada/.Claude/Settings.json",
        "/private/var/AT/tabs/ada",
        // Characters a case-insensitive file system folds with a letter: the Kelvin sign is
        // k, the long s is s.
        "/Users/ada/.\u{212A}ube/config",
        "/Users/ada/.z\u{17F}hrc",
        "/Users/ada/Library/LaunchAgent\u{17F}/x.plist",
        // A compiled start-up file zsh loads in place of the guarded one.
        "/Users/ada/.zshenv.zwc",
        "/Users/ada/Library/Preferences/ByHost/com.apple.Terminal.0000.plist",
        "/opt/homebrew/bin/brew",
    ] {
        assert_guarded(&policy, &profile, Path::new(p));
    }
    // Controls: the same probes succeed on ordinary files, siblings with a suffix included.
    for p in [
        "/Users/ada/notes.txt",
        "/Users/ada/.zshrc2",
        "/Users/ada/.zshrc.bak",
        "/Users/ada/Library/LaunchAgentsX/x.plist",
        "/Users/ada/Library/Caches/x",
        "/Users/ada/projects/site/src/main.rs",
        "/Users/ada/.claude/projects/x.jsonl",
    ] {
        assert_open(&policy, &profile, Path::new(p));
    }
    // The folders holding guarded paths are never deleted or renamed, however spelled.
    for p in [
        "/Users/ada/Library",
        "/Users/ada/LIBRARY",
        "/Users/ada/.claude",
        "/USERS/ada",
    ] {
        for op in [Op::Delete, Op::Rename] {
            assert_eq!(
                verdict(&policy, &profile, op, Path::new(p)),
                Verdict::Deny,
                "{op} {p}"
            );
        }
        assert_eq!(
            verdict(&policy, &profile, Op::Write, Path::new(p)),
            Verdict::Allow,
            "{p}"
        );
    }
}

/// A non-ASCII home, written in either normalisation form: each entry is guarded in both
/// forms and in other cases.
#[test]
fn a_non_ascii_home_in_nfc_and_nfd() {
    let nfc = "/Users/zo\u{eb}";
    let nfd = "/Users/zoe\u{308}";
    for (home, other) in [(nfc, nfd), (nfd, nfc)] {
        let policy = mac_at(home, PRODUCT);
        let profile = parse(&policy);
        for entry in macos_entries(home) {
            let Ok(rest) = entry.strip_prefix(home) else {
                continue;
            };
            for top in [home, other, "/USERS/ZO\u{cb}", "/users/ZOE\u{308}"] {
                assert_guarded(&policy, &profile, &Path::new(top).join(rest));
                assert_guarded(&policy, &profile, &Path::new(top).join(rest).join("x"));
            }
        }
        assert_open(&policy, &profile, &Path::new(other).join("notes.txt"));
        assert_open(&policy, &profile, Path::new("/Users/zoe/.zshrc"));
    }
}

/// Outside the grants, every repository's git folder is guarded as a whole (its hooks and
/// config, and what points git elsewhere: commondir, config.worktree, submodules' and
/// worktrees' git folders), itself included, in every spelling; the working tree stays
/// writable. Inside a read-write grant (a chat's own workflow) `git init`, commits and hooks
/// work, while the fixed entries stay guarded even under a grant.
#[test]
fn repositories_outside_grants_only() {
    let policy = mac(PRODUCT);
    assert!(policy.autorun.repositories);
    let profile = parse(&policy);
    for repo in ["/Users/ada/code/p", "/Users/ada/a/b/c/d/e/f", "/Users/ada"] {
        for p in [
            "/.git",
            "/.git/hooks/pre-commit",
            "/.git/hooks",
            "/.git/config",
            "/.GIT/Hooks/post-checkout",
            "/.git/CONFIG",
            "/.git/commondir",
            "/.Git/CommonDir",
            "/.git/config.worktree",
            "/.git/modules/sub/hooks/post-checkout",
            "/.git/worktrees/w/commondir",
            "/.git/HEAD",
            "/.git/objects/ab/cdef",
        ] {
            assert_guarded(&policy, &profile, Path::new(&format!("{repo}{p}")));
        }
    }
    for repo in ["/Users/ada/code/p", "/Users/ada/a/b/c/d/e/f"] {
        for p in [
            "/src/hooks/config",
            "/.gitignore",
            "/.github/workflows/ci.yml",
            "/x.git/config",
            "/.claudex/settings.json",
            "/.mcp.json.bak",
        ] {
            assert_open(&policy, &profile, Path::new(&format!("{repo}{p}")));
        }
        // Project settings a CLI or editor obeys in a folder it trusts, in every spelling.
        for p in [
            "/.claude/settings.json",
            "/.Claude/settings.local.json",
            "/.claude",
            "/.mcp.json",
            "/.gemini/settings.json",
            "/.vscode/tasks.json",
            "/.cursor/mcp.json",
            "/opencode.json",
            "/sub/dir/.MCP.JSON",
        ] {
            assert_guarded(&policy, &profile, Path::new(&format!("{repo}{p}")));
        }
    }
    // The home's own `.claude` (Claude Code's state) is not a project's: only its listed
    // files are guarded.
    assert_open(
        &policy,
        &profile,
        Path::new("/Users/ada/.claude/history.jsonl"),
    );
    for op in [Op::Delete, Op::Rename] {
        let git = Path::new("/Users/ada/code/p/.git");
        assert_eq!(verdict(&policy, &profile, op, git), Verdict::Deny, "{op}");
    }
    // Outside the home: not this pattern's business.
    assert_open(
        &policy,
        &profile,
        Path::new("/private/tmp/r/.git/hooks/pre-commit"),
    );

    for p in [
        "/.git",
        "/.git/hooks/pre-commit",
        "/.git/hooks",
        "/.git/config",
        "/.git/HEAD",
        "/sub/.git/config",
        "/.claude/settings.local.json",
        "/.mcp.json",
    ] {
        assert_open(&policy, &profile, Path::new(&format!("{WORKFLOW}{p}")));
    }

    // A read-write grant over guarded entries lifts only the repository pattern.
    let granted = mac(r#"
version = 1
base = "open"
[[protected]]
path = "~/.claude"
[[grant]]
path = "~/.claude"
access = "rw"
[[protected]]
path = "~/Library"
[[grant]]
path = "~/Library"
access = "rw"
"#);
    let profile = parse(&granted);
    for p in [
        "/Users/ada/.claude/settings.json",
        "/Users/ada/.claude/plugins/x/hooks.json",
        "/Users/ada/Library/LaunchAgents/x.plist",
    ] {
        assert_guarded(&granted, &profile, Path::new(p));
    }
    assert_open(
        &granted,
        &profile,
        Path::new("/Users/ada/.claude/projects/x.jsonl"),
    );
    assert_open(
        &granted,
        &profile,
        Path::new("/Users/ada/Library/r/.git/hooks/x"),
    );
    assert_guarded(
        &granted,
        &profile,
        Path::new("/Users/ada/code/.git/hooks/x"),
    );
}

/// `[autorun] guard = false` turns the list and the repository pattern off; the policy's own
/// `[[guard]]` entries stay.
#[test]
fn guard_false_turns_the_list_off() {
    let off = mac(&format!(
        "{PRODUCT}\n[autorun]\nguard = false\n\n[[guard]]\npath = \"~/.mine\"\n"
    ));
    assert!(!off.autorun.repositories);
    let profile = parse(&off);
    for p in [
        "/Users/ada/.zshrc",
        "/Users/ada/.ZSHRC",
        "/Users/ada/Library/LaunchAgents/x.plist",
        "/Users/ada/code/p/.git/hooks/pre-commit",
        "/Users/ada/code/p/.git/config",
    ] {
        assert_open(&off, &profile, Path::new(p));
    }
    assert_guarded(&off, &profile, Path::new("/Users/ada/.mine"));
    assert_guarded(&off, &profile, Path::new("/Users/ada/.MINE/x"));
}
