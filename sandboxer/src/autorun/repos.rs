//! Finding the git repositories under a home, so their git folders can be guarded.
//!
//! A repository's `.git/hooks/` and `.git/config` make git run code for the person later
//! (`pre-commit`, `core.fsmonitor`, which a shell prompt's `git status` runs). On Linux they are
//! guarded by read-only bind mounts, which need the repositories' paths at launch; this module
//! finds them, within bounds a launch can afford, and names what lies beyond those bounds.
//!
//! The walk is breadth-first from the root and never follows a symlink. Each folder costs one
//! `read_dir`: the kinds of its entries come from the directory listing itself (`d_type`), so
//! an ordinary folder costs no `stat` of its entries.
//!
//! - A folder holding a `.git` folder is a repository, and its working tree is not walked:
//!   **a repository inside another repository's working tree (a vendored checkout, a
//!   submodule's own folder) is not found.** That is a gap by design: walking every working
//!   tree would cost the launch most of a home's files.
//! - A folder holding a `HEAD` file, an `objects` folder and a `config` file is a bare
//!   repository (its hooks run on push) and is not walked either.
//! - A `.git` that is not a folder (a file naming a git dir elsewhere, as worktrees and
//!   submodules have, or a symlink) is reported as [`Beyond::GitFile`]: the git dir it names is
//!   not guarded from here. Its working tree is not walked.
//! - What the limits leave unread is reported ([`Beyond`]), never an error: a folder too deep,
//!   the time budget or the folder count spent, a folder that cannot be read.
//!
//! A folder swapped for a symlink between its parent's listing and its own read is read
//! through the symlink; what is found there is only made read-only, never written.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Serialize, Serializer};

/// How many folders left unread at the depth limit [`Beyond::Depth`] names; the rest are
/// counted. A deep home must not make a report of thousands of lines.
pub const MAX_LISTED: usize = 20;

/// Folders read between two looks at the clock: reading the clock costs about as much as a
/// small folder's listing.
const CLOCK_EVERY: usize = 16;

/// How far to look.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanLimits {
    /// The deepest folder read: the root is depth 0, so a repository whose working tree lies
    /// at most `max_depth` below the root is found.
    pub max_depth: usize,
    /// Folders not walked. An entry without a `/` is a folder name, skipped at any depth
    /// (`node_modules`); an entry with one is a path relative to the root, skipped only there
    /// (`.local/share/Trash`).
    pub skip: Vec<String>,
    /// The time the walk may take; checked every few folders, so it may be passed by the
    /// time a few folders take to read.
    pub budget: Duration,
    /// The most folders read.
    pub max_dirs: usize,
}

/// What a walk found, sorted (the same tree gives the same value).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Found {
    pub repos: Vec<Repo>,
    pub beyond: Vec<Beyond>,
}

/// A repository found.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Repo {
    /// The folder holding `hooks/` and `config`: `<working tree>/.git`, or the bare
    /// repository itself.
    #[serde(serialize_with = "lossy")]
    pub git_dir: PathBuf,
    pub bare: bool,
}

/// What the walk did not look at, and why: the guard's named gaps.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Beyond {
    /// `folders` folders lie below `max_depth` and were not read; the first
    /// [`MAX_LISTED`] met (shallowest first) are `listed`.
    Depth {
        folders: usize,
        #[serde(serialize_with = "lossy_all")]
        listed: Vec<PathBuf>,
    },
    /// The time budget ran out after `dirs_read` folders, with folders still to read.
    Budget { dirs_read: usize },
    /// `max_dirs` folders were read, with folders still to read.
    Dirs { dirs_read: usize },
    /// A folder whose listing failed.
    Unreadable {
        #[serde(serialize_with = "lossy")]
        path: PathBuf,
        error: String,
    },
    /// A `.git` that is not a folder: the git dir it names lies elsewhere.
    GitFile {
        #[serde(serialize_with = "lossy")]
        path: PathBuf,
    },
}

impl Beyond {
    /// One line for the plan's gaps and `doctor`.
    pub fn describe(&self) -> String {
        match self {
            Beyond::Depth { folders, listed } => format!(
                "{folders} folders below the scan's depth were not looked into for repositories \
                 (first: {})",
                listed
                    .iter()
                    .take(3)
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Beyond::Budget { dirs_read } => {
                format!("the repository scan's time budget ran out after {dirs_read} folders")
            }
            Beyond::Dirs { dirs_read } => {
                format!("the repository scan stopped at its limit of {dirs_read} folders")
            }
            Beyond::Unreadable { path, error } => {
                format!("{} could not be read ({error})", path.display())
            }
            Beyond::GitFile { path } => format!(
                "{} is a .git file: the repository's git folder it names is not guarded",
                path.display()
            ),
        }
    }
}

/// Finds the repositories under `root` within `limits`. Folders for which `exclude` is true
/// (`root` included) are not walked: the caller's protected roots and read-write grants,
/// where repositories are not guarded.
pub fn scan(root: &Path, limits: &ScanLimits, exclude: &dyn Fn(&Path) -> bool) -> Found {
    let started = ThreadClock::now();
    let skip = Skip::new(root, &limits.skip);
    let mut found = Found::default();
    let mut deeper = Deeper::default();
    let mut queue = VecDeque::new();
    if !exclude(root) {
        queue.push_back((root.to_path_buf(), 0));
    }
    let mut dirs_read = 0;
    while let Some((dir, depth)) = queue.pop_front() {
        if dirs_read >= limits.max_dirs {
            found.beyond.push(Beyond::Dirs { dirs_read });
            break;
        }
        if dirs_read % CLOCK_EVERY == 0 && started.elapsed() >= limits.budget {
            found.beyond.push(Beyond::Budget { dirs_read });
            break;
        }
        dirs_read += 1;
        let listing = match Listing::read(&dir) {
            Ok(listing) => listing,
            Err(e) => {
                found.beyond.push(Beyond::Unreadable {
                    path: dir,
                    error: e.to_string(),
                });
                continue;
            }
        };
        if listing.git_folder {
            found.repos.push(Repo {
                git_dir: dir.join(".git"),
                bare: false,
            });
        } else if listing.is_bare() {
            found.repos.push(Repo {
                git_dir: dir,
                bare: true,
            });
        } else if listing.git_other {
            found.beyond.push(Beyond::GitFile {
                path: dir.join(".git"),
            });
        } else {
            for name in listing.folders {
                let path = dir.join(&name);
                if skip.matches(&name, &path) || exclude(&path) {
                    continue;
                }
                if depth < limits.max_depth {
                    queue.push_back((path, depth + 1));
                } else {
                    deeper.note(path);
                }
            }
        }
    }
    if deeper.folders > 0 {
        found.beyond.push(Beyond::Depth {
            folders: deeper.folders,
            listed: deeper.listed,
        });
    }
    found.repos.sort();
    found.beyond.sort();
    found
}

/// One folder's listing, as much of it as the walk needs.
#[derive(Default)]
struct Listing {
    /// Its sub-folders (not symlinks to folders), sorted by bytes.
    folders: Vec<OsString>,
    /// It holds a `.git` folder.
    git_folder: bool,
    /// It holds a `.git` that is not a folder.
    git_other: bool,
    head: bool,
    objects: bool,
    config: bool,
}

impl Listing {
    fn read(dir: &Path) -> io::Result<Listing> {
        let mut listing = Listing::default();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            // From the listing's d_type; std falls back to lstat when the file system leaves
            // it unknown. An entry gone since the listing has no kind and is passed over.
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let name = entry.file_name();
            let name_is = |s: &str| name.as_os_str() == OsStr::new(s);
            if kind.is_dir() {
                listing.git_folder |= name_is(".git");
                listing.objects |= name_is("objects");
                listing.folders.push(name);
            } else if name_is(".git") {
                listing.git_other = true;
            } else if name_is("HEAD") {
                // git reads a symlinked HEAD too (older repositories have one).
                listing.head = true;
            } else if name_is("config") && kind.is_file() {
                listing.config = true;
            }
        }
        listing.folders.sort_unstable();
        Ok(listing)
    }

    /// A bare repository's shape: the folder is itself a git dir.
    fn is_bare(&self) -> bool {
        self.head && self.objects && self.config
    }
}

/// The folders [`ScanLimits::skip`] names.
struct Skip<'a> {
    names: Vec<&'a OsStr>,
    paths: Vec<PathBuf>,
}

impl<'a> Skip<'a> {
    fn new(root: &Path, skip: &'a [String]) -> Skip<'a> {
        let (paths, names): (Vec<&String>, Vec<&String>) =
            skip.iter().partition(|s| s.contains('/'));
        Skip {
            names: names.into_iter().map(OsStr::new).collect(),
            paths: paths
                .into_iter()
                .map(|p| root.join(p.trim_matches('/')))
                .collect(),
        }
    }

    fn matches(&self, name: &OsStr, path: &Path) -> bool {
        self.names.contains(&name) || self.paths.iter().any(|p| p == path)
    }
}

/// The folders left unread at the depth limit: counted, the first few named.
#[derive(Default)]
struct Deeper {
    folders: usize,
    listed: Vec<PathBuf>,
}

impl Deeper {
    fn note(&mut self, path: PathBuf) {
        self.folders += 1;
        if self.listed.len() < MAX_LISTED {
            self.listed.push(path);
        }
    }
}

/// A path in a report: lossy, as a path that is not UTF-8 must still be reported.
fn lossy<S: Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&path.to_string_lossy())
}

fn lossy_all<S: Serializer>(paths: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(paths.iter().map(|p| p.to_string_lossy()))
}

/// The time this thread has run: the scan's budget is CPU time, not wall time, so a busy
/// machine (other programs taking the CPU) does not leave repositories unguarded that a quiet
/// one would have found; what it bounds is the work the launch does.
struct ThreadClock(Duration);

impl ThreadClock {
    fn now() -> ThreadClock {
        ThreadClock(thread_cpu_time())
    }

    fn elapsed(&self) -> Duration {
        thread_cpu_time().saturating_sub(self.0)
    }
}

fn thread_cpu_time() -> Duration {
    // SAFETY: all-zero is a valid timespec; the kernel fills it.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `ts` lives across the call.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0;
    if !ok {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{PermissionsExt, symlink};
    use tempfile::TempDir;

    fn limits() -> ScanLimits {
        ScanLimits {
            max_depth: 8,
            skip: Vec::new(),
            budget: Duration::from_secs(60),
            max_dirs: 100_000,
        }
    }

    fn none(_: &Path) -> bool {
        false
    }

    /// A working tree at `dir` with a `.git` folder shaped as `git init` makes it.
    fn repo(dir: &Path) -> PathBuf {
        let git = dir.join(".git");
        bare(&git);
        git
    }

    /// A bare repository at `dir`.
    fn bare(dir: &Path) {
        fs::create_dir_all(dir.join("hooks")).unwrap();
        fs::create_dir_all(dir.join("objects")).unwrap();
        fs::create_dir_all(dir.join("refs/heads")).unwrap();
        fs::write(dir.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        fs::write(dir.join("config"), "[core]\n").unwrap();
    }

    fn found(git_dirs: &[&Path]) -> Vec<Repo> {
        git_dirs
            .iter()
            .map(|g| Repo {
                git_dir: g.to_path_buf(),
                bare: false,
            })
            .collect()
    }

    /// Asserts that the walk found no repository and names only `gap`.
    #[track_caller]
    fn only_gap(got: &Found, gap: Beyond) {
        assert_eq!(got.repos, []);
        assert_eq!(got.beyond, [gap]);
    }

    /// Asserts that the walk found no repository and names one unreadable folder: its path
    /// and error.
    #[track_caller]
    fn only_unreadable(got: &Found) -> (&Path, &str) {
        assert_eq!(got.repos, []);
        match &got.beyond[..] {
            [Beyond::Unreadable { path, error }] => (path, error),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn repositories_are_found_sorted() {
        let home = TempDir::new().unwrap();
        let h = home.path();
        let b = repo(&h.join("src/b"));
        let a = repo(&h.join("src/a"));
        // Met first (it is shallower), listed last.
        let top = repo(&h.join("zz-notes"));
        fs::write(h.join(".bashrc"), "").unwrap();
        let got = scan(h, &limits(), &none);
        assert_eq!(got.repos, found(&[&a, &b, &top]));
        assert_eq!(got.beyond, []);
    }

    #[test]
    fn the_root_itself_can_be_a_repository() {
        let home = TempDir::new().unwrap();
        let git = repo(home.path());
        assert_eq!(scan(home.path(), &limits(), &none).repos, found(&[&git]));
    }

    #[test]
    fn a_working_tree_is_not_walked() {
        let home = TempDir::new().unwrap();
        let h = home.path();
        let outer = repo(&h.join("proj"));
        repo(&h.join("proj/vendor/inner"));
        fs::create_dir_all(h.join("proj/deep/a/b/c")).unwrap();
        let mut tight = limits();
        tight.max_dirs = 2; // the root and proj: reading more would report Dirs
        let got = scan(h, &tight, &none);
        assert_eq!(got.repos, found(&[&outer]));
        assert_eq!(got.beyond, []);
    }

    #[test]
    fn a_bare_repository_is_found_and_not_walked() {
        let home = TempDir::new().unwrap();
        let h = home.path();
        bare(&h.join("srv/site.git"));
        repo(&h.join("srv/site.git/hooks/trap"));
        // HEAD alone does not make a bare repository: this folder is walked.
        fs::create_dir_all(h.join("notes")).unwrap();
        fs::write(h.join("notes/HEAD"), "").unwrap();
        let inner = repo(&h.join("notes/r"));
        let got = scan(h, &limits(), &none);
        assert_eq!(
            got.repos,
            [
                Repo {
                    git_dir: inner,
                    bare: false
                },
                Repo {
                    git_dir: h.join("srv/site.git"),
                    bare: true
                },
            ]
        );
    }

    #[test]
    fn a_git_file_is_reported_and_its_tree_not_walked() {
        let home = TempDir::new().unwrap();
        let h = home.path();
        fs::create_dir_all(h.join("wt/sub")).unwrap();
        fs::write(h.join("wt/.git"), "gitdir: /elsewhere/.git/worktrees/wt\n").unwrap();
        repo(&h.join("wt/sub/r"));
        let path = h.join("wt/.git");
        only_gap(&scan(h, &limits(), &none), Beyond::GitFile { path });
    }

    #[test]
    fn skipped_names_at_any_depth_and_skipped_paths_at_the_root() {
        let home = TempDir::new().unwrap();
        let h = home.path();
        repo(&h.join("node_modules/pkg"));
        repo(&h.join("web/node_modules/pkg"));
        repo(&h.join(".local/share/Trash/files/old"));
        let kept = repo(&h.join("web/.local/share/Trash/r"));
        let mut l = limits();
        l.skip = vec!["node_modules".into(), ".local/share/Trash".into()];
        assert_eq!(scan(h, &l, &none).repos, found(&[&kept]));
    }

    #[test]
    fn excluded_folders_are_not_walked() {
        let home = TempDir::new().unwrap();
        let h = home.path();
        repo(&h.join("work/granted"));
        let other = repo(&h.join("other/r"));
        let work = h.join("work");
        let got = scan(h, &limits(), &|p: &Path| p == work);
        assert_eq!(got.repos, found(&[&other]));
        assert_eq!(scan(h, &limits(), &|p: &Path| p == h), Found::default());
    }

    #[test]
    fn folders_past_the_depth_limit_are_reported() {
        let home = TempDir::new().unwrap();
        let h = home.path();
        let shallow = repo(&h.join("a/r")); // r is at depth 2: read
        repo(&h.join("a/b/c")); // c is at depth 3: not read
        let mut l = limits();
        l.max_depth = 2;
        let got = scan(h, &l, &none);
        assert_eq!(got.repos, found(&[&shallow]));
        assert_eq!(
            got.beyond,
            [Beyond::Depth {
                folders: 1,
                listed: vec![h.join("a/b/c")]
            }]
        );
    }

    #[test]
    fn the_depth_report_names_a_few_and_counts_the_rest() {
        let home = TempDir::new().unwrap();
        let h = home.path();
        for i in 0..MAX_LISTED + 5 {
            fs::create_dir_all(h.join(format!("a/{i:02}"))).unwrap();
        }
        let mut l = limits();
        l.max_depth = 1;
        let got = scan(h, &l, &none);
        let listed: Vec<PathBuf> = (0..MAX_LISTED)
            .map(|i| h.join(format!("a/{i:02}")))
            .collect();
        assert_eq!(
            got.beyond,
            [Beyond::Depth {
                folders: MAX_LISTED + 5,
                listed
            }]
        );
    }

    #[test]
    fn the_folder_count_stops_the_walk_and_is_reported() {
        let home = TempDir::new().unwrap();
        let h = home.path();
        let a = repo(&h.join("a"));
        repo(&h.join("b"));
        let mut l = limits();
        l.max_dirs = 2; // the root and a
        let got = scan(h, &l, &none);
        assert_eq!(got.repos, found(&[&a]));
        assert_eq!(got.beyond, [Beyond::Dirs { dirs_read: 2 }]);
        // Exactly enough folders: nothing left unread, nothing reported.
        l.max_dirs = 3;
        assert_eq!(scan(h, &l, &none).beyond, []);
    }

    #[test]
    fn the_time_budget_stops_the_walk_and_is_reported() {
        let home = TempDir::new().unwrap();
        repo(&home.path().join("a"));
        let mut l = limits();
        l.budget = Duration::ZERO;
        let got = scan(home.path(), &l, &none);
        only_gap(&got, Beyond::Budget { dirs_read: 0 });
    }

    #[test]
    fn symlinks_are_not_followed() {
        let home = TempDir::new().unwrap();
        let elsewhere = TempDir::new().unwrap();
        let h = home.path();
        let target = elsewhere.path().join("r");
        let git = repo(&target);
        symlink(&target, h.join("link-to-repo")).unwrap();
        fs::create_dir_all(h.join("linked-git")).unwrap();
        symlink(&git, h.join("linked-git/.git")).unwrap();
        let path = h.join("linked-git/.git");
        only_gap(&scan(h, &limits(), &none), Beyond::GitFile { path });
    }

    #[test]
    fn hostile_names_are_found_exactly_and_reported() {
        let home = TempDir::new().unwrap();
        let h = home.path();
        let name = OsStr::from_bytes(b"q\"uo\nte\xff'd");
        let git = repo(&h.join(name));
        let got = scan(h, &limits(), &none);
        assert_eq!(got.repos, found(&[&git]));
        let json = serde_json::to_string(&got).unwrap();
        assert!(json.contains("q\\\"uo\\nte\u{fffd}'d/.git"), "{json}");
    }

    #[test]
    fn a_folder_that_cannot_be_listed_is_reported() {
        let home = TempDir::new().unwrap();
        let h = home.path();
        let locked = h.join("locked");
        let inside = repo(&locked.join("r"));
        fs::set_permissions(&locked, fs::Permissions::from_mode(0o000)).unwrap();
        let got = scan(h, &limits(), &none);
        fs::set_permissions(&locked, fs::Permissions::from_mode(0o755)).unwrap();
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            // Root reads every folder (CAP_DAC_READ_SEARCH): the repository is found.
            // `a_folder_gone_before_its_listing_is_reported` covers a failed listing as root.
            assert_eq!(got.repos, found(&[&inside]));
            assert_eq!(got.beyond, []);
        } else {
            let (path, error) = only_unreadable(&got);
            assert_eq!(path, locked);
            assert!(error.contains("denied"), "{error}");
        }
    }

    #[test]
    fn a_folder_gone_before_its_listing_is_reported() {
        let home = TempDir::new().unwrap();
        let h = home.path();
        let gone = h.join("gone");
        repo(&gone.join("r"));
        // The walk asks `exclude` about a folder when it queues it, before listing it:
        // removing it there fails its listing, whoever runs the test.
        let remove = |p: &Path| {
            if p == gone {
                fs::remove_dir_all(p).unwrap();
            }
            false
        };
        let got = scan(h, &limits(), &remove);
        let (path, error) = only_unreadable(&got);
        assert_eq!(path, gone);
        assert!(error.contains("No such file"), "{error}");
    }
}
