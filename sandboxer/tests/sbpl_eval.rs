//! The SBPL evaluator against hand-computed answers for small real-world-style profiles
//! (`tests/fixtures/sbpl/*.sb`), properties of the reader, and the renderer's injection guarantee.
//!
//! Every expected line below was worked out by reading the fixture, not by running the
//! evaluator: the deciding rule is the one the documented semantics (docs/sbpl-evaluator.md)
//! pick.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use proptest::prelude::*;
use sandboxer::policy::ResolveOptions;
use sandboxer::sbpl::{
    DatumKind, FilterKind, Outcome, ProcessTarget, Profile, Query, VnodeType, parse, quote_string,
    read,
};
use sandboxer::seatbelt::spelled::{regex_literal, subtree_regex};
use sandboxer::seatbelt::{self, escape::string_literal};
use sandboxer::{Policy, Target};

fn fixture(name: &str, params: &[(&str, &str)]) -> Profile {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sbpl")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let params: BTreeMap<String, String> = params
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    parse(&text, &params).unwrap_or_else(|e| panic!("{name}:{e}"))
}

/// The object of a query, in a form a table can hold.
#[derive(Clone, Copy, Debug)]
enum Obj {
    Path(&'static str),
    Typed(&'static str, VnodeType),
    Bytes(&'static [u8]),
    Mach(&'static str),
    Sysctl(&'static str),
    Socket(&'static str),
    Proc(ProcessTarget),
    Nothing,
}

use Obj::*;
use Outcome::{Allow, Deny, Unknown};

const CHR: VnodeType = VnodeType::CharacterDevice;

/// (operation, object, outcome, deciding line, for unknowns a word the reason must contain)
type Case = (&'static str, Obj, Outcome, Option<usize>, &'static str);

fn check(profile: &Profile, cases: &[Case]) {
    let mut failures = Vec::new();
    for &(op, obj, outcome, line, why_has) in cases {
        let query = match obj {
            Path(p) => Query::Path {
                path: Path::new(p),
                vnode: None,
            },
            Typed(p, v) => Query::Path {
                path: Path::new(p),
                vnode: Some(v),
            },
            Bytes(b) => Query::Path {
                path: Path::new(OsStr::from_bytes(b)),
                vnode: None,
            },
            Mach(n) => Query::MachName(n),
            Sysctl(n) => Query::Sysctl(n),
            Socket(p) => Query::UnixSocket(Path::new(p)),
            Proc(t) => Query::Process(t),
            Nothing => Query::NoObject,
        };
        let e = profile.evaluate(op, &query);
        let got_line = e.rule.as_ref().map(|r| r.line);
        if e.outcome != outcome || got_line != line || !e.why.contains(why_has) {
            failures.push(format!(
                "{op} {obj:?}: expected {outcome:?} line {line:?} (why has {why_has:?}), got \
                 {:?} line {got_line:?}: {}",
                e.outcome, e.why
            ));
        }
        if let Some(rule) = &e.rule {
            assert!(
                rule.text.starts_with('(') && rule.text.ends_with(')'),
                "{rule:?}"
            );
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[rustfmt::skip]
const CHROMIUM: &[Case] = &[
    ("file-read-data", Path("/Applications/Browser.app/Contents/Info.plist"), Allow, Some(18), ""),
    ("file-read-metadata", Path("/Users/ada/secret"), Allow, Some(22), ""),
    ("file-read-data", Path("/Users/ada/secret"), Deny, Some(6), "default rule"),
    ("file-read-data", Path("/Users/ada/Library/Fonts/X.ttf"), Allow, Some(25), ""),
    ("file-read-data", Path("/Users/ada/Library/FontsX"), Deny, Some(6), ""),
    ("file-write-data", Typed("/dev/null", CHR), Allow, Some(33), ""),
    ("file-write-data", Path("/dev/null"), Unknown, None, "vnode type"),
    ("file-write-data", Typed("/dev/null", VnodeType::RegularFile), Deny, Some(6), ""),
    ("file-read-data", Path("/Library/Preferences/.GlobalPreferences.plist"), Allow, Some(39), ""),
    ("file-read-data", Path("/Library/Preferences/xGlobalPreferences.plist"), Deny, Some(6), ""),
    ("file-read*", Path("/usr/lib/libc.dylib"), Allow, Some(19), "different rules"),
    ("file-write*", Path("/usr/lib/libc.dylib"), Deny, Some(6), "file-write-data"),
    ("process-info-pidinfo", Proc(ProcessTarget::Outside), Allow, Some(11), "unfiltered"),
    ("process-info-setcontrol", Proc(ProcessTarget::Myself), Allow, Some(12), ""),
    ("process-info-setcontrol", Proc(ProcessTarget::Outside), Deny, Some(10), ""),
    ("signal", Proc(ProcessTarget::Myself), Allow, Some(13), ""),
    ("signal", Proc(ProcessTarget::SameSandbox), Deny, Some(6), ""),
    ("mach-lookup", Mach("com.apple.logd"), Allow, Some(42), ""),
    ("mach-lookup", Mach("com.apple.coreservices.launchservicesd"), Deny, Some(6), ""),
    ("network-outbound", Socket("/private/var/run/syslog"), Allow, Some(45), ""),
    ("network-outbound", Socket("/private/var/run/docker.sock"), Deny, Some(6), ""),
    ("user-preference-read", Nothing, Allow, Some(15), ""),
    ("iokit-get-properties", Nothing, Deny, Some(10), ""),
    ("process-fork", Nothing, Deny, Some(6), ""),
    ("lsopen", Nothing, Deny, Some(6), ""),
];

#[rustfmt::skip]
const CODEX: &[Case] = &[
    ("file-write-create", Path("/Users/ada/proj/src/main.rs"), Allow, Some(21), ""),
    ("file-write-create", Path("/Users/ada/proj/.git/config"), Deny, Some(8), ""),
    ("file-write-data", Path("/Users/ada/proj/.git"), Deny, Some(8), ""),
    ("file-write-unlink", Path("/Users/ada/proj/.gitignore"), Allow, Some(21), ""),
    ("file-write-data", Path("/Users/ada/proj/.codex/config.toml"), Deny, Some(8), ""),
    ("file-write-create", Path("/private/tmp/x"), Allow, Some(21), ""),
    ("file-write-create", Path("/Users/ada/other"), Deny, Some(8), ""),
    ("file-read-data", Path("/Users/ada/proj/.git/config"), Allow, Some(19), "unfiltered"),
    ("file-read-data", Path("/dev/ptmx"), Allow, Some(39), ""),
    ("file-write*", Path("/Users/ada/proj/a"), Allow, Some(21), "same rule"),
    ("file-write*", Path("/dev/null"), Deny, Some(8), "file-write-create"),
    ("file-write-data", Path("/dev/null"), Unknown, None, "vnode type"),
    ("file-write-data", Typed("/dev/null", CHR), Allow, Some(28), ""),
    ("process-exec", Path("/bin/ls"), Allow, Some(10), ""),
    ("signal", Proc(ProcessTarget::SameSandbox), Allow, Some(12), ""),
    ("signal", Proc(ProcessTarget::Myself), Allow, Some(12), ""),
    ("signal", Proc(ProcessTarget::Outside), Deny, Some(8), ""),
    ("process-info-pidinfo", Proc(ProcessTarget::Outside), Deny, Some(8), ""),
    ("process-info-pidinfo", Proc(ProcessTarget::SameSandbox), Allow, Some(13), ""),
    ("sysctl-read", Sysctl("hw.ncpu"), Allow, Some(15), ""),
    ("sysctl-read", Sysctl("kern.proc.pid.42"), Allow, Some(15), ""),
    ("sysctl-read", Sysctl("hw.ncpu2"), Deny, Some(8), ""),
    ("sysctl-read", Sysctl("kern.procargs2"), Deny, Some(8), ""),
    ("sysctl-read", Nothing, Unknown, None, "sysctl name"),
    ("mach-lookup", Mach("com.apple.PowerManagement.control"), Allow, Some(31), ""),
    ("mach-lookup", Mach("com.apple.lsd.mapdb"), Deny, Some(8), ""),
    ("network-outbound", Socket("/private/tmp/codex-ipc.sock"), Allow, Some(35), ""),
    ("network-outbound", Socket("/private/tmp/other.sock"), Deny, Some(8), ""),
    ("file-ioctl", Path("/dev/ptmx"), Allow, Some(39), ""),
    ("file-ioctl", Path("/dev/ttys001"), Deny, Some(8), ""),
    ("pseudo-tty", Nothing, Allow, Some(38), ""),
    // A query of the wrong kind for the operation.
    ("mach-lookup", Path("/Users/ada"), Unknown, None, "Mach service name"),
    // Paths must be given as the kernel resolves them.
    ("file-read-data", Path("/Users/ada/proj/../x"), Unknown, None, "normalized"),
];

#[rustfmt::skip]
const GEMINI: &[Case] = &[
    ("file-write-data", Path("/Users/ada/proj/a.txt"), Allow, Some(10), "last matching"),
    ("file-write-create", Path("/Users/ada/proj/.git/hooks/pre-commit"), Deny, Some(15), ""),
    ("file-write-data", Path("/Users/ada/proj/.git/hooks"), Deny, Some(15), ""),
    ("file-write-data", Path("/Users/ada/proj/.git/config"), Allow, Some(10), ""),
    ("file-write-data", Path("/Users/ada/notes.txt"), Deny, Some(9), "unfiltered"),
    ("file-read-data", Path("/Users/ada/notes.txt"), Allow, Some(7), "default rule"),
    ("file-write-unlink", Path("/private/tmp/locked/x"), Unknown, None, "precedence"),
    ("file-write-data", Path("/private/tmp/locked/x"), Deny, Some(20), ""),
    ("file-write-unlink", Path("/private/tmp/other"), Allow, Some(10), ""),
    ("file-write-data", Path("/dev/null"), Allow, Some(10), ""),
    ("file-write*", Path("/Users/ada/proj/x"), Allow, Some(10), "same rule"),
    ("file-write*", Path("/private/tmp/locked/x"), Deny, Some(20), "file-write-data"),
    ("process-exec", Path("/usr/bin/osascript"), Deny, Some(23), ""),
    ("process-exec", Path("/bin/ls"), Allow, Some(7), ""),
    ("mach-lookup", Mach("com.apple.lsd.modifydb"), Deny, Some(26), ""),
    ("mach-lookup", Mach("com.apple.coreservices.launchservicesd"), Deny, Some(26), ""),
    ("mach-lookup", Mach("com.apple.logd"), Allow, Some(7), ""),
    ("network-outbound", Socket("/private/var/run/docker.sock"), Deny, Some(29), ""),
    ("network-outbound", Socket("/private/tmp/x.sock"), Allow, Some(7), ""),
    ("lsopen", Nothing, Deny, Some(31), ""),
    ("appleevent-send", Nothing, Deny, Some(32), ""),
    ("process-fork", Nothing, Allow, Some(7), ""),
];

#[rustfmt::skip]
const REGEXES: &[Case] = &[
    ("file-read-data", Path("/Users/ada/Library/Preferences/com.example.app.plist"), Allow, Some(6), ""),
    ("file-read-data", Path("/Users/ada/Library/Preferences/comXexample.app.plist"), Deny, Some(4), ""),
    ("file-read-data", Path("/Users/ada/Library/Preferences/com.example.App.plist"), Deny, Some(4), ""),
    ("file-read-data", Path("/Users/ada/x/Library/Preferences/com.example.app.plist"), Deny, Some(4), ""),
    ("file-read-data", Path("/private/var/folders/ab/cd/T"), Allow, Some(6), ""),
    ("file-read-data", Path("/private/var/folders/ab/cd/T/x"), Allow, Some(6), ""),
    ("file-read-data", Path("/private/var/folders/ab/cd/Tx"), Deny, Some(4), ""),
    ("file-read-data", Path("/opt/data/2024.csv"), Allow, Some(9), ""),
    ("file-read-data", Path("/opt/data/2024Xcsv"), Deny, Some(4), ""),
    ("file-read-data", Path("/opt/data/202.csv"), Deny, Some(4), ""),
    ("file-read-data", Path("/Users/ada/.ssh/id_rsa"), Deny, Some(11), ""),
    ("file-read-xattr", Path("/Users/ada/.ssh"), Deny, Some(4), ""),
    ("file-read-metadata", Path("/Volumes/X"), Allow, Some(10), ""),
    ("file-read-metadata", Path("/Volumes/XY"), Deny, Some(4), ""),
    ("file-read-metadata", Path("/Volumes/é"), Unknown, None, "wildcard"),
    ("file-read-data", Bytes(b"/Users/\xff/Library/Preferences/com.example.app.plist"), Unknown, None, "wildcard"),
    ("file-read-data", Bytes(b"/opt/data/\xff"), Deny, Some(4), ""),
    ("file-write-data", Path("/opt/abc"), Unknown, None, "locale"),
    ("file-write-data", Path("/Users/ada/x"), Unknown, None, "locale"),
    ("mach-lookup", Mach("com.example.agent"), Allow, Some(16), ""),
    ("mach-lookup", Mach("com.example.agentx"), Deny, Some(4), ""),
    ("mach-lookup", Mach("com.exampleXagent"), Deny, Some(4), ""),
];

#[rustfmt::skip]
const IMPORT: &[Case] = &[
    ("file-read-data", Path("/etc/hosts"), Unknown, None, "bsd.sb"),
    ("process-fork", Nothing, Unknown, None, "line 3"),
];

#[rustfmt::skip]
const SCHEME: &[Case] = &[
    ("file-read-data", Path("/Users/ada"), Unknown, None, "define"),
    ("process-fork", Nothing, Unknown, None, "and 1 more"),
];

#[test]
fn chromium_renderer_like() {
    let p = fixture(
        "chromium_renderer_like.sb",
        &[
            ("BUNDLE_PATH", "/Applications/Browser.app"),
            ("HOMEDIR", "/Users/ada"),
        ],
    );
    assert!(
        p.unknown_constructs().is_empty(),
        "{:?}",
        p.unknown_constructs()
    );
    assert!(p.unknown_operations().is_empty());
    assert_eq!(p.ignored().len(), 1, "(debug deny)");
    check(&p, CHROMIUM);
}

#[test]
fn chromium_renderer_like_needs_its_params() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sbpl/chromium_renderer_like.sb"),
    )
    .unwrap();
    let e = parse(&text, &BTreeMap::new()).unwrap_err();
    assert_eq!((e.line, e.column), (18, 28), "{e}");
    assert!(
        e.to_string()
            .starts_with("18:28: parameter \"BUNDLE_PATH\""),
        "{e}"
    );
}

#[test]
fn codex_like() {
    let p = fixture(
        "codex_like.sb",
        &[
            ("WRITABLE_ROOT_0", "/Users/ada/proj"),
            ("WRITABLE_ROOT_0_RO_0", "/Users/ada/proj/.git"),
            ("WRITABLE_ROOT_0_RO_1", "/Users/ada/proj/.codex"),
            ("WRITABLE_ROOT_1", "/private/tmp"),
        ],
    );
    // Its two sysctl-name filters are modelled (`Query::Sysctl`): nothing is unknown.
    let unknown: Vec<usize> = p.unknown_constructs().iter().map(|c| c.line).collect();
    assert_eq!(unknown, Vec::<usize>::new());
    check(&p, CODEX);
}

#[test]
fn gemini_permissive_open_like_last_match_wins() {
    let p = fixture(
        "gemini_permissive_open_like.sb",
        &[
            ("TARGET_DIR", "/Users/ada/proj"),
            ("TMP_DIR", "/private/tmp"),
        ],
    );
    assert!(
        p.unknown_constructs().is_empty(),
        "{:?}",
        p.unknown_constructs()
    );
    check(&p, GEMINI);
}

#[test]
fn regexes() {
    let p = fixture("regexes.sb", &[]);
    let unknown: Vec<usize> = p.unknown_constructs().iter().map(|c| c.line).collect();
    assert_eq!(unknown, [14], "the [[:alpha:]] regex");
    check(&p, REGEXES);
}

#[test]
fn import_makes_everything_unknown() {
    let p = fixture("import.sb", &[]);
    check(&p, IMPORT);
}

#[test]
fn scheme_code_makes_everything_unknown() {
    let p = fixture("scheme_code.sb", &[]);
    check(&p, SCHEME);
}

#[test]
fn an_unknown_operation_makes_everything_unknown() {
    let p = parse(
        "(version 1)(deny default)(allow file-read-everything)(allow process-fork)",
        &BTreeMap::new(),
    )
    .unwrap();
    assert_eq!(
        p.unknown_operations().into_iter().collect::<Vec<_>>(),
        ["file-read-everything"]
    );
    let e = p.evaluate("process-fork", &Query::NoObject);
    assert_eq!(e.outcome, Unknown);
    assert!(e.why.contains("file-read-everything"), "{}", e.why);
}

#[test]
fn unknown_modifier_makes_its_rule_unknown() {
    let p = parse(
        "(version 1)\n(deny default)\n(allow process-exec (with no-sandbox) (literal \"/bin/x\"))",
        &BTreeMap::new(),
    )
    .unwrap();
    let exec = |path| {
        p.evaluate(
            "process-exec",
            &Query::Path {
                path: Path::new(path),
                vnode: None,
            },
        )
    };
    let e = exec("/bin/x");
    assert_eq!(e.outcome, Unknown);
    assert!(e.why.contains("no-sandbox"), "{}", e.why);
    assert_eq!(exec("/bin/y").outcome, Deny);
}

/// Proptest cases: PROPTEST_CASES, else 256 (CI sets nothing, so CI runs 256).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// Text made of SBPL's own pieces, so the reader's deeper paths get exercised too.
fn sbpl_like() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("(".to_string()),
        Just(")".to_string()),
        Just("\"".to_string()),
        Just("#\"".to_string()),
        Just("\\".to_string()),
        Just("#|".to_string()),
        Just("|#".to_string()),
        Just(";".to_string()),
        Just("\n".to_string()),
        Just(" ".to_string()),
        Just("'".to_string()),
        Just("#t".to_string()),
        Just("allow".to_string()),
        Just("deny".to_string()),
        Just("default".to_string()),
        Just("file-read*".to_string()),
        Just("(version 1)".to_string()),
        Just("(literal \"/a\")".to_string()),
        Just("(subpath (param \"K\"))".to_string()),
        Just("(regex #\"^/a[^/]+$\")".to_string()),
        Just("(require-not".to_string()),
        Just("(with no-log)".to_string()),
        any::<char>().prop_map(|c| c.to_string()),
    ];
    prop::collection::vec(piece, 0..60).prop_map(|v| v.concat())
}

/// Strings a hostile path could hold (no NUL: paths cannot).
fn hostile() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("\"".to_string()),
        Just("\\".to_string()),
        Just("(".to_string()),
        Just(")".to_string()),
        Just("\n".to_string()),
        Just("#\"".to_string()),
        Just("#|".to_string()),
        Just(";".to_string()),
        Just(")(allow default)(".to_string()),
        Just("\\\"".to_string()),
        Just("é".to_string()),
        "[^\u{0}]".prop_map(|s| s),
    ];
    prop::collection::vec(piece, 0..24).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn reader_never_panics_on_any_text(text in any::<String>()) {
        let params = BTreeMap::from([("K".to_string(), "/k".to_string())]);
        let _ = read(&text);
        if let Ok(p) = parse(&text, &params) {
            let _ = p.evaluate("file-read-data", &Query::Path { path: Path::new("/a/b"), vnode: None });
        }
    }

    #[test]
    fn reader_never_panics_on_sbpl_like_text(text in sbpl_like()) {
        let params = BTreeMap::from([("K".to_string(), "/k".to_string())]);
        match parse(&text, &params) {
            Ok(p) => {
                let e = p.evaluate("file-read-data", &Query::Path { path: Path::new("/a/b"), vnode: None });
                // A rule is only ever quoted from the text.
                if let Some(rule) = e.rule {
                    prop_assert!(text.contains(&rule.text));
                }
                let _ = p.unknown_constructs();
            }
            Err(e) => {
                prop_assert!(e.line >= 1 && e.column >= 1);
                prop_assert!(e.line <= text.split('\n').count());
            }
        }
    }

    #[test]
    fn quoted_strings_read_back_exactly(s in hostile()) {
        let q = quote_string(&s).unwrap();
        let data = read(&format!("({q})")).unwrap();
        prop_assert_eq!(data.len(), 1);
        let DatumKind::List(items) = &data[0].kind else { panic!("not a list") };
        prop_assert_eq!(items.len(), 1);
        prop_assert_eq!(&items[0].kind, &DatumKind::Str(s.clone()));
    }

    /// The renderer's injection guarantee, on the product's own path: a policy whose grant
    /// and refused path hold a hostile name renders (`seatbelt::render`, where
    /// `seatbelt::escape` is the one place a path becomes profile text) to the profile of the
    /// same policy with a benign name, with only the name's literal text changed; that profile
    /// parses to as many rules, each string reading back as the path it came from, and the
    /// evaluator answers for the hostile paths as for the benign ones. A name Seatbelt cannot
    /// carry (a control character) is refused, never rendered.
    #[test]
    fn rendered_strings_cannot_inject_rules(s in hostile()) {
        // One path component, never `.` or `..`.
        let name = format!("n{}", s.replace('/', "_"));
        let rendered = render_named(&name);
        if name.chars().any(char::is_control) {
            prop_assert!(rendered.is_err(), "rendered {name:?}: {rendered:?}");
            return Ok(());
        }
        let text = rendered.unwrap();
        let benign = render_named("benign").unwrap();
        let body = |n: &str| {
            let q = string_literal(n).unwrap();
            q[1..q.len() - 1].to_string()
        };
        // The refused path is also a regex for its other spellings (names reserved in every
        // spelling), whose text is the name's spelled form, escaped the same way.
        let respelled = |n: &str| {
            let q = regex_literal(&subtree_regex(&format!("{TOP}/{n}/secret"))).unwrap();
            q[1..q.len() - 1].to_string()
        };
        let want = benign
            .replace(&respelled("benign"), "\u{0}")
            .replace("benign", &body(&name))
            .replace('\u{0}', &respelled(&name));
        prop_assert_eq!(&text, &want);

        let (profile, plain) = (parse_rendered(&text)?, parse_rendered(&benign)?);
        prop_assert_eq!(profile.rules().len(), plain.rules().len());
        let grant = format!("{TOP}/{name}");
        let strings: Vec<String> = profile
            .rules()
            .iter()
            .flat_map(|r| r.filters.iter())
            .filter_map(|f| match &f.kind {
                FilterKind::Literal(p) | FilterKind::Subpath(p) | FilterKind::Prefix(p) => {
                    Some(p.clone())
                }
                _ => None,
            })
            .filter(|p| p.starts_with(&format!("{TOP}/n")))
            .collect();
        prop_assert!(!strings.is_empty(), "no rule names the grant:\n{text}");
        for got in &strings {
            prop_assert!(
                *got == grant || *got == format!("{grant}/secret"),
                "{got:?} is not a path of the policy:\n{text}"
            );
        }
        for (path, benign_path) in [
            (grant.clone(), format!("{TOP}/benign")),
            (format!("{grant}/secret"), format!("{TOP}/benign/secret")),
            (format!("{grant}/file"), format!("{TOP}/benign/file")),
        ] {
            for op in ["file-read-data", "file-write-data"] {
                let got = profile.evaluate(op, &Query::Path { path: Path::new(&path), vnode: None });
                let want = plain.evaluate(op, &Query::Path { path: Path::new(&benign_path), vnode: None });
                prop_assert_eq!(got.outcome, want.outcome, "{} {:?}:\n{}", op, path, text);
            }
        }
    }

    /// The same guarantee for -D values: they are never read as SBPL.
    #[test]
    fn param_values_are_never_read_as_sbpl(s in hostile()) {
        let params = BTreeMap::from([("P".to_string(), s.clone())]);
        let text = "(version 1)\n(deny default)\n(allow file-read* (subpath (param \"P\")))\n";
        let p = parse(text, &params).unwrap();
        prop_assert_eq!(p.rules().len(), 2);
        match &p.rules()[1].filters[0].kind {
            FilterKind::Subpath(got) => prop_assert_eq!(got, &s),
            other => prop_assert!(false, "not a subpath: {other:?}"),
        }
    }
}

/// Where the policies of [`rendered_strings_cannot_inject_rules`] protect, grant and refuse.
const TOP: &str = "/Users/ada/proj";

/// The product's profile of a policy that protects [`TOP`], grants `TOP/<name>` and refuses
/// `TOP/<name>/secret`; an error where the loader or the renderer refuses the name.
fn render_named(name: &str) -> Result<String, String> {
    let path = |p: String| {
        let mut t = toml::Table::new();
        t.insert("path".into(), p.into());
        t
    };
    let mut grant = path(format!("{TOP}/{name}"));
    grant.insert("access".into(), "rw".into());
    let mut doc = toml::Table::new();
    doc.insert("version".into(), 1.into());
    doc.insert("base".into(), "open".into());
    doc.insert("protected".into(), vec![path(TOP.into())].into());
    doc.insert("grant".into(), vec![grant].into());
    doc.insert(
        "refuse".into(),
        vec![path(format!("{TOP}/{name}/secret"))].into(),
    );
    let text = toml::to_string(&doc).unwrap();
    let opts = ResolveOptions::new(Target::Macos, "/Users/ada".into(), false).unwrap();
    let policy = Policy::from_toml(&text, "hostile.toml", &opts).map_err(|e| e.to_string())?;
    seatbelt::render(&policy).map_err(|e| e.to_string())
}

fn parse_rendered(text: &str) -> Result<Profile, TestCaseError> {
    parse(text, &BTreeMap::new()).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))
}

/// `sandboxer explain` on a fixture: exit code and, with --json, the printed object.
fn explain(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandboxer"))
        .arg("explain")
        .args(args)
        .env("HOME", "/nonexistent-home-for-tests")
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn fixture_path(name: &str) -> String {
    format!("{}/tests/fixtures/sbpl/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn explain_exit_codes_and_json() {
    let gemini = fixture_path("gemini_permissive_open_like.sb");
    let base = [
        "--profile",
        &gemini,
        "-D",
        "TARGET_DIR=/p",
        "-D",
        "TMP_DIR=/private/tmp",
    ];
    let run = |rest: &[&str]| explain(&[&base[..], rest].concat());

    let (code, out, _) = run(&["--op", "file-write-data", "/p/a", "--json"]);
    assert_eq!(code, 0, "allow");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["outcome"], "allow");
    assert_eq!(v["rule"]["line"], 10);
    assert!(
        v["rule"]["text"]
            .as_str()
            .unwrap()
            .starts_with("(allow file-write*")
    );
    assert_eq!(v["op"], "file-write-data");
    assert_eq!(v["query"], "/p/a");
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys.len(), 5, "{keys:?}");

    let (code, out, _) = run(&["--op", "lsopen"]);
    assert_eq!(code, 1, "deny");
    assert!(
        out.starts_with("deny: lsopen\n  rule (line 31): (deny lsopen)\n"),
        "{out}"
    );

    let (code, out, _) = run(&[
        "--op",
        "file-write-unlink",
        "/private/tmp/locked/x",
        "--json",
    ]);
    assert_eq!(code, 3, "unknown");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["outcome"], "unknown");
    assert!(v["rule"].is_null());

    for bad in [
        &["--op", "file-frob", "/p"][..],
        &["--op", "file-read-data", "relative/path"],
        &["--op", "file-read-data"],
        &["--op", "process-fork", "/p"],
        &["--op", "signal", "everyone"],
        &["--op", "mach-lookup", "x", "--vnode-type", "DIRECTORY"],
        &["--op", "file-read-data", "/p", "--vnode-type", "TTY"],
    ] {
        let (code, _, err) = run(bad);
        assert_eq!(code, 2, "{bad:?}: {err}");
    }
}

#[test]
fn explain_reports_parse_errors_with_file_line_and_column() {
    let codex = fixture_path("codex_like.sb");
    let (code, _, err) = explain(&["--profile", &codex, "--op", "process-fork"]);
    assert_eq!(code, 2);
    assert!(
        err.contains(&format!("{codex}:23:14: parameter \"WRITABLE_ROOT_0\"")),
        "{err}"
    );
}

#[test]
fn explain_policy_form_answers_through_the_backend() {
    // Linux: the plan chosen for this machine answers, checked against the reference.
    let (code, out, err) = explain(&[
        "--target",
        "linux",
        "--home",
        "/home/ada",
        "--op",
        "read",
        "/home/ada/.local/share/agentworks/config.json",
        "--json",
    ]);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["outcome"], "deny");
    let why = v["why"].as_str().unwrap();
    assert!(why.contains("reference decide: deny"), "{v}");
    assert!(
        why.starts_with("Linux ") || why.starts_with("no Linux plan"),
        "{v}"
    );
    // macOS: the rendered profile answers, with the deciding rule.
    let (code, out, err) = explain(&[
        "--target",
        "macos",
        "--home",
        "/Users/ada",
        "--op",
        "write",
        "/Users/ada/projects/x.rs",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["outcome"], "allow");
    assert!(v["rule"]["line"].as_u64().unwrap() > 0, "{v}");
    assert!(
        v["why"]
            .as_str()
            .unwrap()
            .starts_with("rendered Seatbelt profile"),
        "{v}"
    );
    // The two forms exclude each other.
    let codex = fixture_path("codex_like.sb");
    let (code, _, _) = explain(&[
        "--profile",
        &codex,
        "--target",
        "linux",
        "--op",
        "read",
        "/x",
    ]);
    assert_eq!(code, 2);
}
