//! The narrow waist between the crates, kept narrow: the dispatcher names sandboxer only
//! through its crate root (`sandboxer::Policy`, `sandboxer::Confiner`,
//! `sandboxer::ResolveOptions`, …) and the modules that are the product's tools by design —
//! the contract's probe harness, the Seatbelt evaluator and renderer, the template syntax,
//! the data files' error places, how the autorun guard finds a program's files. This test
//! reads every dispatcher source and fails on any other path into sandboxer (its planner, facts, enforcer, ways-out list, macOS facts…).

use std::path::Path;

/// The sandboxer modules (by path from its root) the dispatcher may name. `autorun::programs`:
/// the dispatcher guards the programs it runs outside a sandbox as the autorun guard finds
/// a program's files (the name, the file it resolves to, its npm package folder). `network`:
/// the egress proxy asks the policy's network rules about every request.
const ALLOWED_MODULES: [&str; 7] = [
    "probe",
    "sbpl",
    "seatbelt::render",
    "template",
    "located",
    "autorun::programs",
    "network",
];

/// The names sandboxer declares as modules (`mod x;` or `pub mod x;` in its `lib.rs`).
fn sandboxer_modules() -> Vec<&'static str> {
    include_str!("../../sandboxer/src/lib.rs")
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line
                .strip_prefix("pub mod ")
                .or_else(|| line.strip_prefix("mod "))?;
            rest.strip_suffix(';')
        })
        .collect()
}

/// The leading identifier of `text`, and what follows it.
fn ident(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    text.split_at(end)
}

/// The paths named by what follows one `sandboxer::` that leave the waist.
fn outside_the_waist(rest: &str, modules: &[&str]) -> Vec<String> {
    if let Some(group) = rest.strip_prefix('{') {
        return group_items(group)
            .into_iter()
            .flat_map(|item| outside_the_waist(item.trim(), modules))
            .collect();
    }
    let (first, after) = ident(rest);
    if !modules.contains(&first) {
        return Vec::new(); // a crate-root name
    }
    let path = match after.strip_prefix("::") {
        Some(tail) => format!("{first}::{}", ident(tail).0),
        None => first.to_string(),
    };
    let allowed = ALLOWED_MODULES.iter().any(|m| *m == first || *m == path);
    if allowed { Vec::new() } else { vec![path] }
}

/// The top-level items of a `{…}` group (`text` starts after its `{`).
fn group_items(text: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&text[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items
}

/// Every `sandboxer::…` path in `text` that leaves the waist.
fn violations(text: &str, modules: &[&str]) -> Vec<String> {
    let needle = "sandboxer::";
    text.match_indices(needle)
        .filter(|(at, _)| {
            let before = text[..*at].chars().next_back();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
        .flat_map(|(at, _)| outside_the_waist(&text[at + needle.len()..], modules))
        .collect()
}

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_dispatcher_names_sandboxer_only_through_its_waist() {
    let modules = sandboxer_modules();
    assert!(
        modules.contains(&"linux"),
        "sandboxer's modules: {modules:?}"
    );
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(files.len() > 50, "dispatcher sources: {}", files.len());
    let found: Vec<String> = files
        .iter()
        .flat_map(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            violations(&text, &modules)
                .into_iter()
                .map(move |p| format!("{}: sandboxer::{p}", file.display()))
        })
        .collect();
    assert!(
        found.is_empty(),
        "paths into sandboxer's internals:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_path_into_the_internals_is_found() {
    let modules = ["linux", "probe", "seatbelt", "ways_out"];
    // Spelled `SBX` here so that this file's own scan does not find these.
    let text = "use SBX::{Policy, probe::{self, Probe}, ways_out::Env};\n\
                let p = SBX::linux::exec::launch(); SBX::seatbelt::render(&p);\n\
                SBX::seatbelt::layout::x; my_SBX::linux; SBX::Confiner;"
        .replace("SBX", "sandboxer");
    assert_eq!(
        violations(&text, &modules),
        ["ways_out::Env", "linux::exec", "seatbelt::layout"]
    );
}
