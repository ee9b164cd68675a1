//! The state root's anchor: how the dispatcher tells its own state root from a look-alike.
//!
//! Everything inside a state root describes itself, so a look-alike made at its path (after
//! the real one was moved away) would be self-consistent. The anchor lives outside it, beside
//! it (`<parent>/.<name>.anchor`), written by `dispatcher init` run outside any chat, and every
//! launch's policy protects it like the state root itself (a confined process can neither read
//! nor write it, and the sandbox pins the folders above both). It records the root's random
//! id (also in its `config.json`, which no confined process can read either) and the root
//! folder's device and inode, which no process can forge: a folder made anew at the path has
//! another inode for as long as the real one exists. A state root whose id or inode does not
//! match its anchor is not this person's state root, and no command uses it.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::state::error::StateError;
use crate::state::write::write_atomic;

/// The anchor file's `kind`.
pub const KIND: &str = "agentworks-state-root-anchor";

/// What an anchor records about its state root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Anchor {
    pub kind: String,
    pub version: u32,
    /// The state root's canonical path when it was anchored.
    pub root: PathBuf,
    /// The random id also kept in the root's `config.json` (`root_id`).
    pub id: String,
    pub dev: u64,
    pub ino: u64,
}

/// Where the anchor of the state root at `root` (canonical) lives: beside it, so that it
/// follows the state root wherever tests or people put one.
pub fn path_for(root: &Path) -> PathBuf {
    let name = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    root.with_file_name(format!(".{name}.anchor"))
}

/// Why a state root does not match its anchor, or `None` when it does.
pub fn mismatch(
    anchor: &Anchor,
    root: &Path,
    id: Option<&str>,
) -> Result<Option<String>, StateError> {
    let meta = fs::metadata(root).map_err(|source| StateError::Io {
        path: root.into(),
        what: "cannot inspect",
        source,
    })?;
    if (meta.dev(), meta.ino()) != (anchor.dev, anchor.ino) {
        return Ok(Some(format!(
            "it is another folder than the one anchored (device {} inode {}, anchored: device {} \
             inode {})",
            meta.dev(),
            meta.ino(),
            anchor.dev,
            anchor.ino
        )));
    }
    if id != Some(anchor.id.as_str()) {
        return Ok(Some(
            "its config.json carries another id than the anchor".into(),
        ));
    }
    Ok(None)
}

/// Reads the anchor at `path`; `None` when there is none.
pub fn read(path: &Path) -> Result<Option<Anchor>, StateError> {
    let mut text = String::new();
    match File::open(path).and_then(|mut f| f.read_to_string(&mut text)) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(StateError::Io {
                path: path.into(),
                what: "cannot read the state root's anchor",
                source,
            });
        }
    }
    let anchor: Anchor = serde_json::from_str(&text).map_err(|e| StateError::BadConfig {
        path: path.into(),
        field: format!("line {} column {}", e.line(), e.column()),
        why: e.to_string(),
    })?;
    if anchor.kind != KIND || anchor.version != 1 {
        return Err(StateError::BadConfig {
            path: path.into(),
            field: "kind".into(),
            why: format!("not a state root anchor of version 1 ({:?})", anchor.kind),
        });
    }
    Ok(Some(anchor))
}

/// Anchors the state root at `root` (canonical) with `id`, replacing any anchor there.
pub fn write(root: &Path, id: &str) -> Result<Anchor, StateError> {
    let meta = fs::metadata(root).map_err(|source| StateError::Io {
        path: root.into(),
        what: "cannot inspect",
        source,
    })?;
    let anchor = Anchor {
        kind: KIND.into(),
        version: 1,
        root: root.into(),
        id: id.into(),
        dev: meta.dev(),
        ino: meta.ino(),
    };
    let mut data = serde_json::to_vec_pretty(&anchor).expect("an anchor serialises");
    data.push(b'\n');
    write_atomic(&path_for(root), &data, 0o600)?;
    Ok(anchor)
}
