//! Path helpers shared by the policy and every backend. Paths are compared component-wise
//! (`/a/b` is inside `/a`, `/ab` is not), never as strings.

use std::ffi::OsStr;
use std::io;
use std::path::{Component, Path, PathBuf};

/// Lexically normalises an absolute path: drops `.`, resolves `..` against the path itself
/// (never above `/`), drops trailing slashes. Returns `None` for a relative path.
/// This is only the reference meaning for paths that are already resolved; symlinks are the
/// kernel's business (and the loader's, for policy paths).
pub fn normalize(path: &Path) -> Option<PathBuf> {
    if is_clean_bytes(bytes(path)) {
        // Already normal: rebuilding it from its components would give the same bytes.
        return Some(path.to_path_buf());
    }
    if !path.is_absolute() {
        return None;
    }
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
        }
    }
    Some(out)
}

/// `true` when `path` is `root` or lies beneath it.
pub fn within(path: &Path, root: &Path) -> bool {
    let (p, r) = (bytes(path), bytes(root));
    if starts_at_boundary(p, r) {
        return true;
    }
    if is_clean_bytes(p) && is_clean_bytes(r) {
        return false;
    }
    path.starts_with(root)
}

/// `true` when `path` lies strictly beneath `root`.
pub fn strictly_within(path: &Path, root: &Path) -> bool {
    let (p, r) = (bytes(path), bytes(root));
    if is_clean_bytes(p) && is_clean_bytes(r) {
        return p.len() > r.len() && starts_at_boundary(p, r);
    }
    path != root && path.starts_with(root)
}

fn bytes(path: &Path) -> &[u8] {
    path.as_os_str().as_encoded_bytes()
}

/// Whether `root` is absolute and its bytes begin `path` up to a slash (or all of it). Then
/// `path`'s components begin with `root`'s, however either is spelled: splitting at that
/// slash splits the components too. (The converse needs both paths clean.)
fn starts_at_boundary(path: &[u8], root: &[u8]) -> bool {
    root.first() == Some(&b'/')
        && path.starts_with(root)
        && (path.len() == root.len() || path[root.len()] == b'/' || root.ends_with(b"/"))
}

/// Whether `path` is absolute and already normal in the sense of [`normalize`], spelled the
/// one way such a path can be: `/`, or `/` followed by names joined by single slashes, none of
/// them `.` or `..`, no trailing slash. For such paths the components are exactly the
/// slash-separated names, so comparing bytes is comparing components.
pub fn is_clean(path: &Path) -> bool {
    is_clean_bytes(bytes(path))
}

fn is_clean_bytes(b: &[u8]) -> bool {
    if b.first() != Some(&b'/') {
        return false;
    }
    if b.len() == 1 {
        return true;
    }
    if b[b.len() - 1] == b'/' {
        return false;
    }
    // Each name starts right after a slash: it must not be empty, `.` or `..`.
    let mut i = 0;
    loop {
        match &b[i + 1..] {
            [b'/', ..] | [b'.'] | [b'.', b'/', ..] | [b'.', b'.'] | [b'.', b'.', b'/', ..] => {
                return false;
            }
            _ => {}
        }
        match b[i + 1..].iter().position(|&c| c == b'/') {
            Some(j) => i += 1 + j,
            None => return true,
        }
    }
}

/// Resolves symlinks in the longest existing prefix of `path` and appends the rest as is, so a
/// path that does not exist yet (a refused file that must not be creatable) still resolves to
/// where it would be created. `path` must be lexically normal and absolute.
pub fn canonicalize_existing_prefix(path: &Path) -> io::Result<PathBuf> {
    let mut existing = path.to_path_buf();
    let mut missing: Vec<&OsStr> = Vec::new();
    let mut rest = path;
    loop {
        match std::fs::canonicalize(&existing) {
            Ok(real) => {
                let mut out = real;
                for part in missing.iter().rev() {
                    out.push(part);
                }
                return Ok(out);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let Some(name) = rest.file_name() else {
                    return Err(e);
                };
                missing.push(name);
                rest = rest.parent().unwrap_or(Path::new("/"));
                existing = rest.to_path_buf();
            }
            Err(e) => return Err(e),
        }
    }
}

/// The proper ancestors of `path`, nearest first, excluding `/`.
pub fn ancestors_below_root(path: &Path) -> impl Iterator<Item = &Path> {
    path.ancestors()
        .skip(1)
        .filter(|a| a.parent().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_handles_dots_and_roots() {
        assert_eq!(normalize(Path::new("/a/./b/../c/")).unwrap(), Path::new("/a/c"));
        assert_eq!(normalize(Path::new("/../..")).unwrap(), Path::new("/"));
        assert!(normalize(Path::new("a/b")).is_none());
    }

    #[test]
    fn within_is_component_wise() {
        assert!(within(Path::new("/a/b"), Path::new("/a")));
        assert!(within(Path::new("/a"), Path::new("/a")));
        assert!(!within(Path::new("/ab"), Path::new("/a")));
        assert!(!strictly_within(Path::new("/a"), Path::new("/a")));
    }

    #[test]
    fn ancestors_exclude_self_and_root() {
        let a: Vec<_> = ancestors_below_root(Path::new("/x/y/z")).collect();
        assert_eq!(a, vec![Path::new("/x/y"), Path::new("/x")]);
    }

    #[test]
    fn canonicalize_keeps_missing_tail() {
        let d = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(d.path()).unwrap();
        let p = real.join("no/such/file");
        assert_eq!(canonicalize_existing_prefix(&p).unwrap(), p);
    }
}
