//! The AppArmor profile `sandboxer apparmor` prints is valid AppArmor 4 syntax: checked by the
//! real parser without loading it into a kernel (`-Q`: skip the kernel load, `-K`: no cache).
//! The parser comes from `scripts/install-apparmor-parser.sh` (run by `scripts/test.sh`); a
//! machine without it fails this test rather than skipping it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn parser() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/apparmor/apparmor_parser");
    assert!(
        p.exists(),
        "{} is missing: run `bash scripts/install-apparmor-parser.sh` (scripts/test.sh does)",
        p.display()
    );
    p
}

/// Runs the parser over `text`; Ok(()) when it accepts it, Err(its message) otherwise.
fn parse(text: &str) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agentworks");
    std::fs::write(&file, text).unwrap();
    let out = Command::new(parser())
        .args(["-Q", "-K", "-d"])
        .arg(&file)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn rendered(binaries: &[&Path]) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandboxer"));
    cmd.arg("apparmor");
    for b in binaries {
        cmd.arg("--binary").arg(b);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_rendered_profile_parses() {
    let me = Path::new(env!("CARGO_BIN_EXE_sandboxer"));
    let dir = tempfile::tempdir().unwrap();
    // A path with a space, as an install folder may have.
    let spaced = dir.path().join("Program Files").join("dispatcher");
    std::fs::create_dir_all(spaced.parent().unwrap()).unwrap();
    std::fs::write(&spaced, "").unwrap();
    let text = rendered(&[me, &spaced]);
    assert!(text.contains("userns,"), "{text}");
    parse(&text).unwrap_or_else(|e| panic!("the parser refused the profile: {e}\n{text}"));

    // Control: the parser is really checking (a rule it does not know is refused).
    let broken = text.replacen("\n  userns,", "\n  userns_everything,", 1);
    assert!(
        parse(&broken).is_err(),
        "the parser accepted a broken profile"
    );
}

#[test]
fn hostile_install_paths_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["a\"b", "x*y", "c{d,e}", "nl\nx"] {
        let bin = dir.path().join(name);
        std::fs::write(&bin, "").unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_sandboxer"))
            .arg("apparmor")
            .arg("--binary")
            .arg(&bin)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{name:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("literal path"), "{name:?}: {err}");
        assert!(out.stdout.is_empty(), "{name:?}: printed a profile anyway");
    }
}
