//! The rendered Seatbelt profile means what the policy means.
//!
//! (a) Differential: for random policies (protected roots, nested ro/rw grants, refused
//!     paths, guarded paths and the repository pattern, launchers blocked or not, open or
//!     closed base) and random paths (hostile characters, non-UTF-8 bytes, rule paths, their
//!     ancestors, children, other cases, git folders and look-alike siblings), the SBPL
//!     evaluator's answer on the rendered profile equals
//!     `Policy::decide` for every policy operation, and is never "unknown".
//! (b) Injection: hostile path components change no rule of the profile. The profile of a
//!     hostile policy parses to exactly the rules of the same policy spelled with benign
//!     names, every string reading back as the path it came from.
//! (c) Every operation the renderer emits is one the evaluator knows from real profiles.
//! (d) Mach services, lsopen, Apple Events and file-mount are refused as designed (the Mach
//!     allowlist itself: seatbelt_services.rs).
//!
//! Case counts: PROPTEST_CASES, default 10 000 for (a) and (b) (the CI value). In a debug
//! build on two busy cores (a) takes about 75 s (some 2.4 million questions) and (b) 45 s.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use sandboxer::autorun::RepositorySettings;
use sandboxer::autorun::repos::ScanLimits;
use sandboxer::policy::ResolveOptions;
use sandboxer::sbpl::{self, FilterKind, KNOWN_OPERATIONS, Outcome, Query, SocketFilter};
use sandboxer::seatbelt::spelled::subtree_regex;
use sandboxer::{Op, Policy, Target, Verdict, seatbelt};

const CI_CASES: u32 = 10_000;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CI_CASES)
}

/// Path components, the benign and the hostile: SBPL string syntax, Scheme syntax, regex
/// metacharacters, look-alike prefixes (`a` / `ab`), spaces, non-ASCII. No `/`: each is one
/// component.
const SEGMENTS: &[&str] = &[
    "a",
    "ab",
    "b",
    "a b",
    "\"",
    "\\",
    "\\\"",
    "(",
    ")",
    "#\"",
    "#|",
    ")(allow default)(",
    "\")(allow file-read* (subpath \"\"))(\"",
    ";x",
    "é",
    "*",
    "[x]",
    "^.$",
    ".x",
    "x\"y\\z",
];

/// Where rule paths start; `/tmp` is an alias of `/private/tmp` on macOS.
const TOPS: &[&str] = &[
    "/Users/ada",
    "/Users/ada/Library/Application Support",
    "/x",
    "/tmp",
    "/usr",
];

#[derive(Clone, Debug)]
struct Shape {
    open: bool,
    block: bool,
    /// (top, components)
    protected: Vec<(usize, Vec<usize>)>,
    /// (parent: index into protected ++ earlier grants, or a top when none, components, rw)
    grants: Vec<(usize, Vec<usize>, bool)>,
    /// (grant index, components)
    refuse: Vec<(usize, Vec<usize>)>,
    /// A closed base's extra writable folder (top, components).
    closed_write: Option<(usize, Vec<usize>)>,
    /// Guarded paths, `[[guard]]` (top, ASCII components): read-only whatever the grants say.
    guarded: Vec<(usize, Vec<usize>)>,
    /// The autorun guard's repository pattern (every git folder, whole, under the
    /// home, outside read-write grants).
    repositories: bool,
}

fn segs(max: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0..SEGMENTS.len(), 0..=max)
}

/// Components without non-ASCII: a guarded path's regexes then carry no non-ASCII literal,
/// which the evaluator cannot match against the non-UTF-8 paths asked about (the spellings
/// of non-ASCII names are tested in `seatbelt::spelled`).
fn ascii_segs(max: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(
        prop::sample::select(
            (0..SEGMENTS.len())
                .filter(|&i| SEGMENTS[i].is_ascii())
                .collect::<Vec<_>>(),
        ),
        0..=max,
    )
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        (
            prop::bool::weighted(0.75),
            any::<bool>(),
            prop::collection::vec((0..TOPS.len(), segs(2)), 0..4),
            prop::collection::vec((any::<usize>(), segs(2), any::<bool>()), 0..6),
            prop::collection::vec((any::<usize>(), segs(2)), 0..3),
            prop::option::of((0..TOPS.len(), segs(2))),
        ),
        prop::collection::vec((0..TOPS.len(), ascii_segs(2)), 0..3),
        any::<bool>(),
    )
        .prop_map(
            |((open, block, protected, grants, refuse, closed_write), guarded, repositories)| {
                Shape {
                    open,
                    block,
                    protected,
                    grants,
                    refuse,
                    closed_write,
                    guarded,
                    repositories,
                }
            },
        )
}

/// How a shape's components are spelled: the hostile segments themselves, or benign names
/// that sort the same way (so the rendered rules come out in the same order).
trait Spelling {
    fn segment(&self, i: usize) -> String;
}

struct Hostile;

impl Spelling for Hostile {
    fn segment(&self, i: usize) -> String {
        SEGMENTS[i].to_string()
    }
}

/// `n00`, `n01`, … in the byte order of the hostile segments.
struct Benign {
    rank: BTreeMap<usize, usize>,
}

impl Benign {
    fn new() -> Benign {
        let mut order: Vec<usize> = (0..SEGMENTS.len()).collect();
        order.sort_by_key(|&i| SEGMENTS[i].as_bytes());
        Benign {
            rank: order.into_iter().enumerate().map(|(r, i)| (i, r)).collect(),
        }
    }

    /// The benign spelling of a hostile path (component by component), for comparing.
    fn path(&self, hostile: &str) -> String {
        let by_name: BTreeMap<&str, usize> =
            SEGMENTS.iter().enumerate().map(|(i, s)| (*s, i)).collect();
        hostile
            .split('/')
            .map(|c| match by_name.get(c) {
                Some(&i) => self.segment(i),
                None => c.to_string(),
            })
            .collect::<Vec<_>>()
            .join("/")
    }
}

impl Spelling for Benign {
    fn segment(&self, i: usize) -> String {
        format!("n{:02}", self.rank[&i])
    }
}

fn join(top: &str, parts: &[usize], spelling: &dyn Spelling) -> String {
    let mut p = top.to_string();
    for &i in parts {
        p.push('/');
        p.push_str(&spelling.segment(i));
    }
    p
}

/// The shape as a policy file (serialized by `toml`, so any string is quoted correctly).
fn policy_text(shape: &Shape, spelling: &dyn Spelling) -> String {
    let mut protected = Vec::new();
    for (top, parts) in &shape.protected {
        protected.push(join(TOPS[*top], parts, spelling));
    }
    // Grants nest in protected roots or earlier grants (an open base has no use for a grant
    // elsewhere, and the loader says so); a path granted twice keeps its first access (the
    // loader refuses two different ones). Both refusals have their own loader tests.
    let mut grants: Vec<(String, bool)> = Vec::new();
    for (parent, parts, rw) in &shape.grants {
        let parents: Vec<&String> = protected
            .iter()
            .chain(grants.iter().map(|(p, _)| p))
            .collect();
        let base = match (parents.is_empty(), shape.open) {
            (false, _) => parents[parent % parents.len()].clone(),
            (true, true) => continue,
            (true, false) => TOPS[parent % TOPS.len()].to_string(),
        };
        let path = join(&base, parts, spelling);
        let rw = grants
            .iter()
            .find(|(p, _)| *p == path)
            .map_or(*rw, |(_, first)| *first);
        grants.push((path, rw));
    }
    let mut refuse = Vec::new();
    if !grants.is_empty() {
        for (g, parts) in &shape.refuse {
            refuse.push(join(&grants[g % grants.len()].0, parts, spelling));
        }
    }

    let mut doc = toml::Table::new();
    doc.insert("version".into(), 1.into());
    doc.insert(
        "base".into(),
        if shape.open { "open" } else { "closed" }.into(),
    );
    let table = |pairs: Vec<(&str, toml::Value)>| -> toml::Value {
        toml::Value::Table(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    };
    // `[[protected]]` and `[[refuse]]` entries name a path only.
    let paths = |paths: &[String]| -> toml::Value {
        paths
            .iter()
            .map(|p| table(vec![("path", p.clone().into())]))
            .collect::<Vec<_>>()
            .into()
    };
    doc.insert("protected".into(), paths(&protected));
    doc.insert(
        "grant".into(),
        grants
            .iter()
            .map(|(p, rw)| {
                table(vec![
                    ("path", p.clone().into()),
                    ("access", if *rw { "rw" } else { "ro" }.into()),
                ])
            })
            .collect::<Vec<_>>()
            .into(),
    );
    doc.insert("refuse".into(), paths(&refuse));
    let guarded: Vec<String> = shape
        .guarded
        .iter()
        .map(|(top, parts)| join(TOPS[*top], parts, spelling))
        .collect();
    doc.insert("guard".into(), paths(&guarded));
    doc.insert(
        "launchers".into(),
        table(vec![("block", shape.block.into())]),
    );
    if let (false, Some((top, parts))) = (shape.open, &shape.closed_write) {
        let write: Vec<toml::Value> = ["/dev/null".to_string(), join(TOPS[*top], parts, spelling)]
            .into_iter()
            .map(Into::into)
            .collect();
        doc.insert("closed".into(), table(vec![("write", write.into())]));
    }
    toml::to_string(&doc).expect("a table serializes")
}

fn load(text: &str, repositories: bool) -> Option<Policy> {
    let mut opts = ResolveOptions::new(Target::Macos, PathBuf::from("/Users/ada"), false).unwrap();
    if repositories {
        opts.repositories = Some(RepositorySettings {
            project_settings: vec![".claude".into(), ".mcp.json".into()],
            limits: ScanLimits {
                max_depth: 0,
                skip: Vec::new(),
                budget: Duration::ZERO,
                max_dirs: 0,
            },
        });
    }
    Policy::from_toml(text, "random.toml", &opts).ok()
}

fn cat(a: &Path, suffix: &[u8]) -> PathBuf {
    let mut bytes = a.as_os_str().as_bytes().to_vec();
    bytes.extend_from_slice(suffix);
    PathBuf::from(OsString::from_vec(bytes))
}

/// The paths worth asking about for a policy: every rule path, its ancestors, things inside
/// it (hostile and non-UTF-8 names included), look-alike siblings; plus fixed system paths
/// and `extra` random ones.
fn query_paths(policy: &Policy, extra: &[PathBuf]) -> BTreeSet<PathBuf> {
    let rules = policy
        .rule_roots()
        .chain(policy.launchers.exec.iter().map(|l| l.path.as_path()))
        .chain(policy.launchers.read.iter().map(|l| l.path.as_path()))
        .chain(policy.closed.read.iter().map(|r| r.path.as_path()))
        .chain(policy.closed.write.iter().map(|r| r.path.as_path()));
    let mut out = BTreeSet::new();
    for r in rules {
        out.extend(r.ancestors().map(Path::to_path_buf));
        out.insert(r.join("f"));
        out.insert(r.join("\")(allow default)(").join("x"));
        out.insert(cat(r, b"/\xff\xfe"));
        out.insert(cat(r, b"2"));
        out.insert(cat(r, b" b"));
        // Other spellings (APFS: the same file), repositories' git folders and project
        // settings. ASCII only:
        // the repository pattern's `.*` cannot be decided over non-ASCII names.
        if let Some(text) = r.to_str().filter(|t| t.is_ascii()) {
            out.insert(PathBuf::from(text.to_uppercase()));
            out.insert(PathBuf::from(text.to_lowercase()).join("F"));
            for git in [
                ".git",
                ".git/hooks/pre-commit",
                ".GIT/Config",
                ".git/HEAD",
                ".git/configs",
                ".claude/settings.json",
                ".CLAUDE",
                ".mcp.json",
                ".mcp.jsonx",
            ] {
                out.insert(r.join(git));
            }
        }
    }
    for fixed in [
        "/usr/bin/true",
        "/Users/ada/.zshrc",
        "/private/var/run/mDNSResponder",
        "/dev/null",
    ] {
        out.insert(PathBuf::from(fixed));
    }
    out.extend(extra.iter().cloned());
    out
}

fn verdict(profile: &sbpl::Profile, op: Op, path: &Path) -> Result<Verdict, String> {
    let query = seatbelt::query_for(op, path);
    let e = profile.evaluate(seatbelt::operation_for(op), &query);
    match e.outcome {
        Outcome::Allow => Ok(Verdict::Allow),
        Outcome::Deny => Ok(Verdict::Deny),
        Outcome::Unknown => Err(e.why),
    }
}

/// How many paths of a policy's pool each case asks about (every operation on each): the
/// pool holds a few hundred, and asking all of them would make 10 000 cases take minutes.
const PATHS_PER_CASE: usize = 32;

fn random_paths() -> impl Strategy<Value = Vec<PathBuf>> {
    prop::collection::vec(
        (
            0..TOPS.len(),
            segs(3),
            prop::option::of(prop::collection::vec(any::<u8>(), 1..4)),
        ),
        0..4,
    )
    .prop_map(|v| {
        v.into_iter()
            .map(|(top, parts, bytes)| {
                let p = PathBuf::from(join(TOPS[top], &parts, &Hostile));
                // Raw bytes as a last component: non-UTF-8 included; `/`, NUL, `.` and `..`
                // kept out, since the kernel hands Seatbelt no such component, and newlines,
                // which make the guard's regexes undecided (POSIX leaves `^ $ .` around a
                // newline to REG_NEWLINE; docs/seatbelt.md, "The autorun guard").
                match bytes {
                    Some(b)
                        if b.iter().all(|c| !matches!(*c, b'/' | 0 | b'\n'))
                            && b != b"."
                            && b != b".." =>
                    {
                        p.join(OsStr::from_bytes(&b))
                    }
                    _ => p,
                }
            })
            .map(|p| Target::Macos.apply_aliases(&p))
            .collect()
    })
}

/// A proptest runner for `cases()` cases that persists no failures.
fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    })
}

#[test]
fn profile_decides_like_the_policy() {
    let mut runner = runner();
    let loaded = Cell::new(0u32);
    let refused = Cell::new(0u32);
    let questions = Cell::new(0u64);
    runner
        .run(
            &(
                shape(),
                random_paths(),
                prop::collection::vec(any::<prop::sample::Index>(), PATHS_PER_CASE),
            ),
            |(shape, extra, picks)| {
                let text = policy_text(&shape, &Hostile);
                let Some(policy) = load(&text, shape.repositories) else {
                    refused.set(refused.get() + 1);
                    return Ok(());
                };
                loaded.set(loaded.get() + 1);
                let rendered = seatbelt::render(&policy)
                    .map_err(|e| TestCaseError::fail(format!("render: {e}\n{text}")))?;
                let profile = sbpl::parse(&rendered, &BTreeMap::new())
                    .map_err(|e| TestCaseError::fail(format!("parse: {e}\n{rendered}")))?;
                let pool: Vec<PathBuf> = query_paths(&policy, &extra).into_iter().collect();
                let chosen: BTreeSet<&PathBuf> = picks
                    .iter()
                    .map(|i| i.get(&pool))
                    .chain(extra.iter())
                    .collect();
                for path in chosen {
                    for op in Op::ALL {
                        questions.set(questions.get() + 1);
                        let want = policy.decide(op, path).verdict;
                        let got = verdict(&profile, op, path);
                        prop_assert_eq!(
                            got.clone(),
                            Ok(want),
                            "{} {:?}\npolicy:\n{}\nprofile:\n{}",
                            op,
                            path,
                            text,
                            rendered
                        );
                    }
                }
                Ok(())
            },
        )
        .unwrap();
    let (loaded, refused) = (loaded.get(), refused.get());
    eprintln!(
        "differential: {loaded} policies loaded, {refused} refused by the loader, {} questions",
        questions.get()
    );
    assert!(
        loaded * 10 >= (loaded + refused) * 7,
        "most random policies must load: {loaded} of {}",
        loaded + refused
    );
}

/// The rules as structure: action, operations, and the filter tree with every string mapped
/// through `map` (the identity, or hostile → benign spelling). Order is left out (rules,
/// alternatives, require-all members are sorted): renaming changes the sort order of paths,
/// and an allow-only profile means the same in any order.
fn structure(profile: &sbpl::Profile, map: &dyn Fn(&str) -> String) -> Vec<String> {
    let mut rules: Vec<String> = profile
        .rules()
        .iter()
        .map(|r| {
            let mut filters: Vec<String> = r
                .filters
                .iter()
                .map(|f| filter_shape(&f.kind, map))
                .collect();
            filters.sort();
            format!(
                "({} {} {})",
                r.action.as_str(),
                r.operations.join(" "),
                filters.join(" ")
            )
        })
        .collect();
    rules.sort();
    rules
}

fn filter_shape(kind: &FilterKind, map: &dyn Fn(&str) -> String) -> String {
    let all = |fs: &[sbpl::Filter]| {
        let mut v: Vec<String> = fs.iter().map(|f| filter_shape(&f.kind, map)).collect();
        v.sort();
        v.join(" ")
    };
    match kind {
        FilterKind::Literal(p) => format!("(literal {:?})", map(p)),
        FilterKind::Subpath(p) => format!("(subpath {:?})", map(p)),
        FilterKind::Prefix(p) => format!("(prefix {:?})", map(p)),
        FilterKind::Regex(p) => format!("(regex {:?})", map(&p.source)),
        FilterKind::VnodeType(t) => format!("(vnode-type {})", t.as_str()),
        FilterKind::Extension(c) => format!("(extension {c:?})"),
        FilterKind::GlobalName(n) => format!("(global-name {n:?})"),
        FilterKind::GlobalNamePrefix(n) => format!("(global-name-prefix {n:?})"),
        FilterKind::GlobalNameRegex(p) => format!("(global-name-regex {:?})", p.source),
        FilterKind::SysctlName(n) => format!("(sysctl-name {n:?})"),
        FilterKind::SysctlNamePrefix(n) => format!("(sysctl-name-prefix {n:?})"),
        FilterKind::RemoteUnixSocket(SocketFilter::PathLiteral(p)) => {
            format!("(remote-literal {:?})", map(p))
        }
        FilterKind::RemoteUnixSocket(SocketFilter::Subpath(p)) => {
            format!("(remote-subpath {:?})", map(p))
        }
        FilterKind::RemoteUnixSocket(SocketFilter::PathRegex(p)) => {
            format!("(remote-regex {:?})", p.source)
        }
        FilterKind::LocalUnixSocket(SocketFilter::PathLiteral(p)) => {
            format!("(local-literal {:?})", map(p))
        }
        FilterKind::LocalUnixSocket(SocketFilter::Subpath(p)) => {
            format!("(local-subpath {:?})", map(p))
        }
        FilterKind::LocalUnixSocket(SocketFilter::PathRegex(p)) => {
            format!("(local-regex {:?})", p.source)
        }
        FilterKind::Target(t) => format!("(target {t:?})"),
        // `(remote ip "*:*")` and the like: no path, written by the template from numbers.
        FilterKind::IpEndpoint(ip) => {
            format!("({} {} {:?})", ip.side.word(), ip.protocol, ip.endpoint)
        }
        FilterKind::RequireAll(fs) => format!("(require-all {})", all(fs)),
        FilterKind::RequireAny(fs) => format!("(require-any {})", all(fs)),
        FilterKind::RequireNot(f) => format!("(require-not {})", filter_shape(&f.kind, map)),
        // Not modelled by the evaluator (IOKit classes, `local`, `remote ip`):
        // these carry no path, and the template writes them as constants.
        FilterKind::Opaque(_) => "(opaque)".into(),
    }
}

#[test]
fn hostile_paths_change_no_rule() {
    let mut runner = runner();
    let benign = Benign::new();
    let compared = Cell::new(0u32);
    let refused = Cell::new(0u32);
    runner
        .run(&shape(), |mut shape| {
            // Guarded paths are also written as regexes, whose text differs with the names;
            // their literals come from the same escape function, and `seatbelt::spelled`'s
            // property tests read hostile ones back through the evaluator.
            shape.guarded.clear();
            let hostile_text = policy_text(&shape, &Hostile);
            let benign_text = policy_text(&shape, &benign);
            let load = |text: &str| load(text, shape.repositories);
            let (Some(hostile), Some(plain)) = (load(&hostile_text), load(&benign_text)) else {
                // The loader must judge both spellings alike: only the names differ.
                prop_assert_eq!(load(&hostile_text).is_some(), load(&benign_text).is_some());
                refused.set(refused.get() + 1);
                return Ok(());
            };
            compared.set(compared.get() + 1);
            let parse = |p: &Policy| {
                let text = seatbelt::render(p).map_err(|e| TestCaseError::fail(e.to_string()))?;
                sbpl::parse(&text, &BTreeMap::new())
                    .map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))
            };
            // Protected roots and refused paths are also regexes for their other spellings
            // (names reserved in every spelling): the hostile one's reads as the benign one's.
            let spelled: BTreeMap<String, String> = hostile
                .protected
                .iter()
                .chain(&hostile.refuse)
                .filter_map(|r| {
                    let h = r.path.to_str()?;
                    Some((subtree_regex(h), subtree_regex(&benign.path(h))))
                })
                .collect();
            let got = structure(&parse(&hostile)?, &|s| {
                spelled.get(s).cloned().unwrap_or_else(|| benign.path(s))
            });
            let want = structure(&parse(&plain)?, &|s| s.to_string());
            prop_assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                prop_assert_eq!(g, w);
            }
            Ok(())
        })
        .unwrap();
    eprintln!(
        "injection: {} policies compared, {} refused",
        compared.get(),
        refused.get()
    );
    assert!(compared.get() * 10 >= (compared.get() + refused.get()) * 7);
}

fn product(block: bool) -> Policy {
    let text = format!(
        "version = 1\nbase = \"open\"\n[[protected]]\npath = \"~/Library/Application Support/AgentWorks\"\n\
         [[grant]]\npath = \"~/Library/Application Support/AgentWorks/chat-1\"\naccess = \"rw\"\n\
         [launchers]\nblock = {block}\n[macos]\ndeny_mach_services = [\"com.example.agentd\"]\n"
    );
    load(&text, true).expect("the product policy loads")
}

fn parsed(policy: &Policy) -> sbpl::Profile {
    sbpl::parse(&seatbelt::render(policy).unwrap(), &BTreeMap::new()).unwrap()
}

#[test]
fn every_emitted_operation_is_known() {
    for block in [true, false] {
        for closed in [false, true] {
            let mut policy = product(block);
            if closed {
                policy.base = sandboxer::Base::Closed;
            }
            let profile = parsed(&policy);
            assert!(
                profile.unknown_operations().is_empty(),
                "{:?}",
                profile.unknown_operations()
            );
            for op in profile.operations() {
                assert!(KNOWN_OPERATIONS.contains(&op), "{op}");
            }
        }
    }
}

fn lookup(profile: &sbpl::Profile, name: &str) -> Outcome {
    profile
        .evaluate("mach-lookup", &Query::MachName(name))
        .outcome
}

#[test]
fn launcher_services_are_refused_when_blocked() {
    let policy = product(true);
    let profile = parsed(&policy);
    assert!(!policy.launchers.mach_services.is_empty());
    for m in &policy.launchers.mach_services {
        assert_eq!(lookup(&profile, &m.name), Outcome::Deny, "{}", m.name);
    }
    for m in &policy.launchers.mach_prefixes {
        assert_eq!(
            lookup(&profile, &format!("{}anything", m.name)),
            Outcome::Deny,
            "{}",
            m.name
        );
    }
    assert_eq!(lookup(&profile, "com.example.agentd"), Outcome::Deny);
    // The allowlist's services (the read-only LaunchServices map among them, under the
    // refused `com.apple.lsd.` prefix) stay reachable.
    for ordinary in [
        "com.apple.SecurityServer",
        "com.apple.system.opendirectoryd.libinfo",
        "com.apple.lsd.mapdb",
    ] {
        assert_eq!(lookup(&profile, ordinary), Outcome::Allow, "{ordinary}");
    }
    for op in ["lsopen", "appleevent-send"] {
        assert_eq!(
            profile.evaluate(op, &Query::NoObject).outcome,
            Outcome::Deny,
            "{op}"
        );
    }
    for path in ["/", "/Volumes/x", "/Users/ada", "/dev"] {
        let q = Query::Path {
            path: Path::new(path),
            vnode: None,
        };
        assert_eq!(
            profile.evaluate("file-mount", &q).outcome,
            Outcome::Deny,
            "{path}"
        );
    }
}

#[test]
fn launchers_unblocked_allow_them_but_never_file_mount() {
    let policy = product(false);
    let profile = parsed(&policy);
    for m in &policy.launchers.mach_services {
        assert_eq!(lookup(&profile, &m.name), Outcome::Allow, "{}", m.name);
    }
    assert_eq!(
        lookup(&profile, "com.example.agentd"),
        Outcome::Deny,
        "deny_mach_services holds"
    );
    for op in ["lsopen", "appleevent-send"] {
        assert_eq!(
            profile.evaluate(op, &Query::NoObject).outcome,
            Outcome::Allow,
            "{op}"
        );
    }
    let q = Query::Path {
        path: Path::new("/Volumes/x"),
        vnode: None,
    };
    assert_eq!(profile.evaluate("file-mount", &q).outcome, Outcome::Deny);
}
