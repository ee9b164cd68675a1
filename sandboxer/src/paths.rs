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
    if is_clean(path) {
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
    if !(is_absolute(p) && is_absolute(r)) {
        return path.starts_with(root);
    }
    // The common case first: `root`'s bytes begin `path` up to a slash. Splitting there
    // splits the names too, so `path`'s names begin with `root`'s however either is spelled.
    if p.starts_with(r) && (p.len() == r.len() || p[r.len()] == b'/' || r.ends_with(b"/")) {
        return true;
    }
    if differ_by_a_name(p, r) {
        return false;
    }
    let mut names = names(p);
    self::names(r).all(|name| names.next() == Some(name))
}

/// `true` when `path` lies strictly beneath `root`.
pub(crate) fn strictly_within(path: &Path, root: &Path) -> bool {
    let (p, r) = (bytes(path), bytes(root));
    if !(is_absolute(p) && is_absolute(r)) {
        return path != root && path.starts_with(root);
    }
    if differ_by_a_name(p, r) {
        return false;
    }
    let mut names = names(p);
    self::names(r).all(|name| names.next() == Some(name)) && names.next().is_some()
}

/// `path == other` (which compares components), cheaply: equal bytes, or name by name.
pub fn same(path: &Path, other: &Path) -> bool {
    let (p, o) = (bytes(path), bytes(other));
    if p == o {
        return true;
    }
    if !(is_absolute(p) && is_absolute(o)) {
        return path == other;
    }
    !differ_by_a_name(p, o) && names(p).eq(names(o))
}

/// Whether `path` is absolute and already normal in the sense of [`normalize`], spelled the
/// one way such a path can be: `/`, or `/` followed by names joined by single slashes, none of
/// them `.` or `..`, no trailing slash. For such paths the components are exactly the
/// slash-separated names, so comparing bytes is comparing components.
pub(crate) fn is_clean(path: &Path) -> bool {
    let b = bytes(path);
    is_absolute(b) && plain(b)
}

/// The ancestors of a clean path ([`is_clean`]), itself first and `/` last, as
/// [`Path::ancestors`] has them: for such a path they are its bytes up to each slash (and `/`
/// for the first), found without walking its components.
pub(crate) fn clean_ancestors(path: &Path) -> impl Iterator<Item = &[u8]> {
    debug_assert!(is_clean(path), "{path:?} is not clean");
    let b = bytes(path);
    let mut end = Some(b.len());
    std::iter::from_fn(move || {
        let e = end.take()?;
        if e <= 1 {
            return Some(&b[..1]);
        }
        end = b[..e].iter().rposition(|&c| c == b'/');
        Some(&b[..e])
    })
}

// The helpers below work on the bytes of a path (Unix: a path is its bytes), so that the
// common case, paths already normal, costs a few byte comparisons instead of walking
// `Path::components` for every rule on every query. Anything else falls back to the standard
// library's component-wise meaning; the tests check the two agree on every short path.

fn bytes(path: &Path) -> &[u8] {
    path.as_os_str().as_encoded_bytes()
}

fn is_absolute(b: &[u8]) -> bool {
    b.first() == Some(&b'/')
}

/// The names of an absolute path, as [`Path::components`] has them after the root: split at
/// slashes, empty names and `.` left out (`..` is kept, as a component of its own).
fn names(b: &[u8]) -> impl Iterator<Item = &[u8]> {
    b.split(|&c| c == b'/')
        .filter(|name| !name.is_empty() && *name != b".")
}

/// Whether two absolute paths (as bytes) certainly have different names at the same position,
/// so that neither lies within the other. Where their bytes first differ, both are inside a
/// name that starts after the same slash, with the same names before it; when both of those
/// are real names (not empty, not `.`), they differ, and so do the paths' components there.
/// `false` means "maybe": the caller then compares name by name.
fn differ_by_a_name(p: &[u8], r: &[u8]) -> bool {
    let k = mismatch(p, r);
    if k == p.len() || k == r.len() {
        return false; // one is a byte prefix of the other
    }
    // The names holding the first difference contain its bytes: if neither is a slash or a
    // dot, both names are real (neither empty nor `.`). The usual case.
    let plain_byte = |c: u8| c != b'/' && c != b'.';
    if plain_byte(p[k]) && plain_byte(r[k]) {
        return true;
    }
    // Both start with `/`, so a slash precedes the first difference.
    let slash = p[..k].iter().rposition(|&c| c == b'/').unwrap_or(0);
    let name = |b: &[u8]| {
        let rest = &b[slash + 1..];
        let end = rest.iter().position(|&c| c == b'/').unwrap_or(rest.len());
        let name = &rest[..end];
        !name.is_empty() && name != b"."
    };
    name(p) && name(r)
}

/// The length of the common prefix of `a` and `b`, eight bytes at a time where it can.
fn mismatch(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    let word = |s: &[u8], i: usize| u64::from_ne_bytes(s[i..i + 8].try_into().expect("8 bytes"));
    while i + 8 <= n && word(a, i) == word(b, i) {
        i += 8;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

/// [`is_clean`] for an absolute path's bytes: every name (after each slash) is neither empty,
/// `.` nor `..`, and no slash ends the path (but the root's).
fn plain(b: &[u8]) -> bool {
    if b.len() == 1 {
        return true;
    }
    let mut slash = 0;
    loop {
        match &b[slash + 1..] {
            [] | [b'/', ..] | [b'.'] | [b'.', b'/', ..] | [b'.', b'.'] | [b'.', b'.', b'/', ..] => {
                return false;
            }
            name => match name.iter().position(|&c| c == b'/') {
                Some(len) => slash += 1 + len,
                None => return true,
            },
        }
    }
}

/// Resolves symlinks in the longest existing prefix of `path` and appends the rest as is, so a
/// path that does not exist yet (a refused file that must not be creatable) still resolves to
/// where it would be created. `path` must be lexically normal and absolute.
pub(crate) fn canonicalize_existing_prefix(path: &Path) -> io::Result<PathBuf> {
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

/// [`canonicalize_existing_prefix`] for many paths that share folders (the autorun list's
/// dozens of entries under the home, `~/.config`): each folder is resolved once, with one
/// `lstat` per path component instead of a `realpath` per path.
#[derive(Debug, Default)]
pub(crate) struct Resolver {
    memo: std::collections::HashMap<PathBuf, PathBuf>,
    /// [`Resolver::links_to`]'s answers.
    links: std::collections::HashMap<PathBuf, Vec<PathBuf>>,
}

impl Resolver {
    /// `path` (absolute, normal) with every existing component resolved, symlinks included.
    pub(crate) fn resolve(&mut self, path: &Path) -> io::Result<PathBuf> {
        if let Some(done) = self.memo.get(path) {
            return Ok(done.clone());
        }
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Ok(path.to_path_buf());
        };
        let resolved = match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => canonicalize_existing_prefix(path)?,
            Ok(_) => self.resolve(parent)?.join(name),
            Err(e) if e.kind() == io::ErrorKind::NotFound => self.resolve(parent)?.join(name),
            Err(e) => return Err(e),
        };
        self.memo.insert(path.to_path_buf(), resolved.clone());
        Ok(resolved)
    }

    /// `path` with every component but the last resolved: the path of the entry itself,
    /// which may be a symlink.
    pub(crate) fn resolve_parent(&mut self, path: &Path) -> io::Result<PathBuf> {
        match (path.parent(), path.file_name()) {
            (Some(parent), Some(name)) => Ok(self.resolve(parent)?.join(name)),
            _ => Ok(path.to_path_buf()),
        }
    }

    /// The symlinks `path` (absolute, normal) is reached through, `path` itself included when
    /// it is one: each as the link's own path (its folders resolved), and those on the way to
    /// each link's target too. Pointing any of them elsewhere changes what `path` names.
    pub(crate) fn links_to(&mut self, path: &Path) -> io::Result<Vec<PathBuf>> {
        self.links_within(path, 0)
    }

    fn links_within(&mut self, path: &Path, depth: u32) -> io::Result<Vec<PathBuf>> {
        // As the kernel's limit on links followed in one lookup.
        const MAX_LINKS: u32 = 40;
        if depth > MAX_LINKS {
            return Err(io::Error::from_raw_os_error(libc::ELOOP));
        }
        if let Some(done) = self.links.get(path) {
            return Ok(done.clone());
        }
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Ok(Vec::new());
        };
        let mut links = self.links_within(parent, depth)?;
        let own = self.resolve(parent)?.join(name);
        let is_link = match std::fs::symlink_metadata(&own) {
            Ok(m) => m.file_type().is_symlink(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(e),
        };
        if is_link {
            let target = std::fs::read_link(&own)?;
            let folder = own.parent().unwrap_or(Path::new("/"));
            // A relative target is relative to the link's folder; `..` is folded by name, as
            // the links' own folders are resolved already.
            let target = normalize(&folder.join(target));
            links.push(own);
            if let Some(target) = target {
                links.extend(self.links_within(&target, depth + 1)?);
            }
        }
        self.links.insert(path.to_path_buf(), links.clone());
        Ok(links)
    }
}

/// The proper ancestors of `path`, nearest first, excluding `/`.
pub fn ancestors_below_root(path: &Path) -> impl Iterator<Item = &Path> {
    path.ancestors().skip(1).filter(|a| a.parent().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_handles_dots_and_roots() {
        assert_eq!(
            normalize(Path::new("/a/./b/../c/")).unwrap(),
            Path::new("/a/c")
        );
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

    /// Every string of up to seven bytes from `/`, `.` and two names, against the standard
    /// library's component-wise meaning.
    #[test]
    fn byte_fast_paths_agree_with_components() {
        let alphabet = [b'/', b'.', b'a', b'b'];
        let mut all: Vec<Vec<u8>> = vec![Vec::new()];
        let mut level: Vec<Vec<u8>> = vec![Vec::new()];
        for _ in 0..7 {
            level = level
                .iter()
                .flat_map(|s| {
                    alphabet.iter().map(move |c| {
                        let mut t = s.clone();
                        t.push(*c);
                        t
                    })
                })
                .collect();
            all.extend(level.iter().cloned());
        }
        let path = |b: &Vec<u8>| PathBuf::from(std::str::from_utf8(b).unwrap());
        let paths: Vec<PathBuf> = all.iter().map(path).collect();
        let reference_clean = |p: &Path| {
            p.is_absolute() && p.as_os_str().as_encoded_bytes() == bytes(&normalize(p).unwrap())
        };
        for p in &paths {
            assert_eq!(is_clean(p), reference_clean(p), "is_clean {p:?}");
            let reference = p.is_absolute().then(|| {
                let mut out = PathBuf::from("/");
                for c in p.components() {
                    match c {
                        Component::ParentDir => {
                            out.pop();
                        }
                        Component::Normal(n) => out.push(n),
                        _ => {}
                    }
                }
                out
            });
            assert_eq!(normalize(p), reference, "normalize {p:?}");
            if is_clean(p) {
                let by_bytes: Vec<&[u8]> = clean_ancestors(p).collect();
                let by_components: Vec<&[u8]> = p.ancestors().map(bytes).collect();
                assert_eq!(by_bytes, by_components, "clean_ancestors {p:?}");
            }
        }
        // Pairs: every path of up to five bytes against every other.
        let short: Vec<&PathBuf> = paths.iter().filter(|p| p.as_os_str().len() <= 5).collect();
        for p in &short {
            for r in &short {
                assert_eq!(within(p, r), p.starts_with(r), "within {p:?} {r:?}");
                assert_eq!(
                    strictly_within(p, r),
                    p != r && p.starts_with(r),
                    "strictly_within {p:?} {r:?}"
                );
                assert_eq!(same(p, r), p == r, "same {p:?} {r:?}");
            }
        }
        // Longer ones against a few roots.
        for p in &paths {
            for r in [
                "/", "/a", "/a/b", "/a/.", "/a/", "//a", "/.a", "/a/..", "/ab", "/a/.b",
            ] {
                let r = Path::new(r);
                assert_eq!(within(p, r), p.starts_with(r), "within {p:?} {r:?}");
                assert_eq!(
                    strictly_within(p, r),
                    p != r && p.starts_with(r),
                    "strictly_within {p:?} {r:?}"
                );
                assert_eq!(same(p, r), p == r, "same {p:?} {r:?}");
            }
        }
    }

    #[test]
    fn canonicalize_keeps_missing_tail() {
        let d = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(d.path()).unwrap();
        let p = real.join("no/such/file");
        assert_eq!(canonicalize_existing_prefix(&p).unwrap(), p);
    }
}
