//! Render benchmark: how the Seatbelt renderer (and, apart, the policy loader) grows with the
//! policy. Run with `cargo bench -p sandboxer --bench render` (release build).
//!
//! Policies: P protected roots under a Mac home, G grants spread over them (every third one
//! read-only, every tenth holding a read-only grant inside, every seventh with a refused
//! path), for G = 100, 1 000, 10 000 and P = G / 10. For each size it prints the median of
//! several runs of: loading the TOML (`Policy::from_toml`), rendering the loaded policy
//! (`seatbelt::render`), and both; then the growth from one size to the next. A linear cost
//! grows ×10 per step; a quadratic one ×100. Target: render of 10 000 grants under 50 ms.
//!
//! `--quick` runs fewer repetitions (for a smoke run in CI).

use std::fmt::Write as _;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use sandboxer::policy::ResolveOptions;
use sandboxer::{Policy, Target, seatbelt};

const SIZES: [usize; 3] = [100, 1_000, 10_000];
const RENDER_TARGET: Duration = Duration::from_millis(50);

fn policy_text(grants: usize) -> String {
    let protected = (grants / 10).max(1);
    let mut t = String::from("version = 1\nbase = \"open\"\n");
    for p in 0..protected {
        writeln!(t, "[[protected]]\npath = \"~/state/p{p:05}\"").unwrap();
    }
    let mut written = 0;
    let mut i = 0;
    while written < grants {
        let root = format!("~/state/p{:05}/g{i:06}", i % protected);
        let access = if i % 3 == 0 { "ro" } else { "rw" };
        writeln!(t, "[[grant]]\npath = \"{root}\"\naccess = \"{access}\"").unwrap();
        written += 1;
        if i % 10 == 0 && written < grants {
            writeln!(t, "[[grant]]\npath = \"{root}/vendor\"\naccess = \"ro\"").unwrap();
            written += 1;
        }
        if i % 7 == 0 {
            writeln!(t, "[[refuse]]\npath = \"{root}/secret\"").unwrap();
        }
        i += 1;
    }
    t
}

fn median(mut runs: Vec<Duration>) -> Duration {
    runs.sort();
    runs[runs.len() / 2]
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    median(
        (0..runs)
            .map(|_| {
                let start = Instant::now();
                black_box(f());
                start.elapsed()
            })
            .collect(),
    )
}

struct Row {
    grants: usize,
    protected: usize,
    load: Duration,
    render: Duration,
    both: Duration,
    bytes: usize,
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn ratio(a: Duration, b: Duration) -> String {
    format!("×{:.1}", b.as_secs_f64() / a.as_secs_f64().max(1e-9))
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let opts = ResolveOptions::new(Target::Macos, PathBuf::from("/Users/ada"), false)
        .expect("a fixed Mac home");
    let mut rows = Vec::new();
    for grants in SIZES {
        let runs = match (quick, grants) {
            (true, _) => 3,
            (false, 10_000) => 11,
            (false, _) => 31,
        };
        let text = policy_text(grants);
        let policy = Policy::from_toml(&text, "bench.toml", &opts).expect("the bench policy loads");
        let bytes = seatbelt::render(&policy).expect("renders").len();
        let load = time(runs, || {
            Policy::from_toml(&text, "bench.toml", &opts).unwrap()
        });
        let render = time(runs, || seatbelt::render(&policy).unwrap());
        let both = time(runs, || {
            let p = Policy::from_toml(&text, "bench.toml", &opts).unwrap();
            seatbelt::render(&p).unwrap()
        });
        rows.push(Row {
            grants: policy.grants.len(),
            protected: policy.protected.len(),
            load,
            render,
            both,
            bytes,
        });
    }

    println!(
        "{:>7} {:>9} {:>12} {:>12} {:>14} {:>10}",
        "grants", "protected", "load", "render", "load+render", "profile"
    );
    for r in &rows {
        println!(
            "{:>7} {:>9} {:>12} {:>12} {:>14} {:>8} KB",
            r.grants,
            r.protected,
            ms(r.load),
            ms(r.render),
            ms(r.both),
            r.bytes / 1024
        );
    }
    println!("growth per step (×10 grants; linear ≈ ×10, quadratic ≈ ×100):");
    for w in rows.windows(2) {
        println!(
            "  {:>5} → {:>5}: load {:>7}  render {:>7}  load+render {:>7}",
            w[0].grants,
            w[1].grants,
            ratio(w[0].load, w[1].load),
            ratio(w[0].render, w[1].render),
            ratio(w[0].both, w[1].both)
        );
    }
    let largest = rows.last().expect("three sizes");
    let verdict = if largest.render <= RENDER_TARGET {
        "met"
    } else {
        "MISSED"
    };
    println!(
        "render target (< {} for {} grants): {verdict} ({})",
        ms(RENDER_TARGET),
        largest.grants,
        ms(largest.render)
    );
}
