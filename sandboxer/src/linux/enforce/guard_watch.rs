//! The guard watcher: puts the autorun guard back on a guarded path whose file a program
//! outside replaces or removes while the sandbox runs.
//!
//! A guard is a read-only mount on a dentry. A program outside that saves a guarded file the
//! usual way — it writes a new file beside it and renames that over the old one (`git config
//! --global`, an editor, a CLI rewriting its settings file) — replaces the dentry, and the
//! kernel detaches every mount on a replaced dentry in every mount namespace (Linux ≥ 3.18;
//! only the renaming process's own namespace answers `EBUSY`). Removing the file or moving it
//! away from outside does the same. Left alone, the sandbox would from then on see an ordinary
//! writable file at the guarded path, for as long as it runs.
//!
//! So PID 1 starts a watcher once the masks are on (like the mask keeper: only `CAP_SYS_ADMIN`
//! and `CAP_SYS_PTRACE` of the sandbox's user namespace, not dumpable, outside the command's
//! Landlock domain, killed with PID 1; PID 1 stops the sandbox if the watcher ends first). It
//! watches, with inotify, each folder holding a guarded path or a folder pinned above one.
//! For every name created, moved in or out, or removed there that is a guarded path or lies
//! above one (all of them when the queue overflowed, and once at its start for what changed
//! before the watches were in place), it puts back:
//!
//! 1. the pins above, where the folder is no longer the root of a mount;
//! 2. the guard, where the path is no longer the root of a read-only mount. A path that is
//!    gone gets what its entry makes when it is missing at launch (the caller removes it at
//!    the end with the launch's own placeholders); one nothing may stand in for
//!    (`irreplaceable`) stops the sandbox;
//! 3. then, if a process of the sandbox holds what is now guarded open for writing (a
//!    descriptor or a shared writable mapping), the sandbox is stopped: that process opened
//!    the file before it was moved into place (the outside program's temporary file, say) and
//!    could write it from now on.
//!
//! Every failure stops the sandbox: the watcher reports it, naming the path, and kills every
//! process in it. What this cannot prevent (docs/linux.md, "The autorun guard"): a write made
//! in the moment between the replacement and the new guard, or made into the outside
//! program's temporary file and closed before the file is moved into place.

use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;
use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use caps::Capability;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use nix::sys::prctl;
use nix::sys::signal::{Signal, kill};
use nix::sys::statvfs::{FsFlags, fstatvfs};
use nix::unistd::Pid;

use serde::{Deserialize, Serialize};

use super::channel::{Message, Reporter};
use super::error::{EnforceError, Layer, StepError};
use super::prepared::Prepared;
use super::{mounts, placeholders, sys};
use crate::linux::plan::{MountStep, Plan};
use crate::paths::{strictly_within, within};

/// What the watcher keeps in place, in the plan's order (pins before the guards beneath).
#[derive(Debug, Serialize, Deserialize)]
enum Kept {
    /// A folder pinned above a guarded path.
    Pin(PathBuf),
    Guard {
        path: PathBuf,
        is_dir: bool,
        content: Option<String>,
        irreplaceable: bool,
    },
}

impl Kept {
    fn path(&self) -> &Path {
        match self {
            Kept::Pin(path) | Kept::Guard { path, .. } => path,
        }
    }
}

/// The events that change which dentry a watched name is.
fn events() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR
}

fn err(what: impl std::fmt::Display) -> EnforceError {
    EnforceError::new(Layer::Masks, format!("autorun guard watcher: {what}"))
}

fn os_err(what: impl std::fmt::Display, e: Errno) -> EnforceError {
    EnforceError::os(
        Layer::Masks,
        format_args!("autorun guard watcher: {what}"),
        e,
    )
}

fn step_err(path: &Path, e: StepError) -> EnforceError {
    err(format_args!("guarding {} again: {e}", path.display()))
}

/// The guards among `mounts`, and the pins above them.
fn kept(mounts: &[MountStep]) -> Vec<Kept> {
    let guards: Vec<&Path> = mounts
        .iter()
        .filter_map(|m| match m {
            MountStep::Guard { path, .. } => Some(path.as_path()),
            _ => None,
        })
        .collect();
    mounts
        .iter()
        .filter_map(|m| match m {
            MountStep::Pin { path, .. } if guards.iter().any(|g| strictly_within(g, path)) => {
                Some(Kept::Pin(path.clone()))
            }
            MountStep::Guard {
                path,
                is_dir,
                content,
                irreplaceable,
                ..
            } => Some(Kept::Guard {
                path: path.clone(),
                is_dir: *is_dir,
                content: content.clone(),
                irreplaceable: *irreplaceable,
            }),
            _ => None,
        })
        .collect()
}

/// The watcher, started by PID 1 while it waits for the plan (PID 1 is idle then and still
/// small, so the fork costs the launch nothing), and told what to keep once the masks are on.
pub(super) struct Early {
    pid: Pid,
    /// The watcher reads the paths to keep from here, up to the end of the stream.
    kept_to: OwnedFd,
}

/// Forks the watcher (see [`Early`]). `events`: the inotify instance the caller made (see
/// [`super::prepared::Prepared::guard_events`]); without one the watcher makes its own.
pub(super) fn fork(
    p: &Prepared,
    reporter: Reporter,
    events: Option<&OwnedFd>,
) -> Result<Early, EnforceError> {
    let (from_pid1, kept_to) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| os_err("pipe2", e))?;
    // SAFETY: PID 1 is single-threaded; the child ends with `_exit` below.
    match unsafe { sys::fork_raw() } {
        Err(e) => Err(os_err("fork", e)),
        Ok(None) => {
            drop(kept_to);
            p.own_affinity();
            let watched = setup().and_then(|()| read_kept(from_pid1));
            let failure = match watched {
                // Nothing to keep (no guards, or no plan came).
                Ok(kept) if kept.is_empty() => unsafe { libc::_exit(0) },
                Ok(kept) => match Watcher::new(kept, events, reporter).and_then(Watcher::run) {
                    Ok(never) => match never {},
                    Err(e) => e,
                },
                Err(e) => e,
            };
            reporter.send(&Message::Failed(failure.stopping()));
            // Every process of the sandbox but PID 1 (which then ends) and this one.
            let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
            // SAFETY: ends the watcher without running the caller's exit handlers.
            unsafe { libc::_exit(125) }
        }
        Ok(Some(pid)) => Ok(Early {
            pid: Pid::from_raw(pid),
            kept_to,
        }),
    }
}

impl Early {
    /// In PID 1 once the masks are on: tells the watcher the guards of `plan` and the pins
    /// above them. Its pid when it keeps any, which PID 1 must see outlive the command;
    /// without guards it ends.
    pub(super) fn keep(self, plan: &Plan) -> Result<Option<Pid>, EnforceError> {
        let kept = kept(&plan.mounts);
        if !kept.iter().any(|k| matches!(k, Kept::Guard { .. })) {
            return Ok(None);
        }
        let bytes = serde_json::to_vec(&kept).map_err(|e| err(format_args!("{e}")))?;
        let mut to = std::fs::File::from(self.kept_to);
        std::io::Write::write_all(&mut to, &bytes)
            .map_err(|e| err(format_args!("telling the watcher what to keep: {e}")))?;
        Ok(Some(self.pid))
    }
}

fn read_kept(from: OwnedFd) -> Result<Vec<Kept>, EnforceError> {
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::fs::File::from(from), &mut bytes)
        .map_err(|e| err(format_args!("reading what to keep: {e}")))?;
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_slice(&bytes).map_err(|e| err(format_args!("what to keep: {e}")))
}

/// Dies with PID 1; keeps only what mounting and reading the sandbox's processes need; not
/// dumpable; named `guard-watcher`.
fn setup() -> Result<(), EnforceError> {
    // Named apart from PID 1 and the mask keeper in `ps`.
    let _ = prctl::set_name(c"guard-watcher");
    super::caps::helper_keeping(
        "autorun guard watcher",
        &[Capability::CAP_SYS_ADMIN, Capability::CAP_SYS_PTRACE],
    )
}

struct Watcher<'a> {
    kept: Vec<Kept>,
    inotify: Inotify,
    /// The folders each watch is on (a folder at two paths has one watch).
    folders: HashMap<WatchDescriptor, Vec<PathBuf>>,
    /// A shared lock on each placeholder this watcher made, held while the sandbox runs.
    locks: Vec<OwnedFd>,
    reporter: Reporter<'a>,
}

impl<'a> Watcher<'a> {
    fn new(
        kept: Vec<Kept>,
        events: Option<&OwnedFd>,
        reporter: Reporter<'a>,
    ) -> Result<Watcher<'a>, EnforceError> {
        let inotify = match events.map(OwnedFd::try_clone) {
            // SAFETY: an inotify instance's descriptor, as the caller made it.
            Some(Ok(fd)) => unsafe { Inotify::from_owned_fd(fd) },
            _ => Inotify::init(InitFlags::IN_CLOEXEC).map_err(|e| {
                os_err(
                    "inotify_init (the limit is fs.inotify.max_user_instances, per user)",
                    e,
                )
            })?,
        };
        Ok(Watcher {
            kept,
            inotify,
            folders: HashMap::new(),
            locks: Vec::new(),
            reporter,
        })
    }

    fn run(mut self) -> Result<Infallible, EnforceError> {
        self.watch_folders()?;
        // What changed between the masks and the watches.
        self.restore(&|_| true)?;
        loop {
            let events = match self.inotify.read_events() {
                Ok(events) => events,
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(os_err("reading inotify events", e)),
            };
            let mut all = false;
            let mut touched: Vec<PathBuf> = Vec::new();
            for event in events {
                if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    all = true;
                    continue;
                }
                let gone = AddWatchFlags::IN_DELETE_SELF
                    | AddWatchFlags::IN_MOVE_SELF
                    | AddWatchFlags::IN_IGNORED;
                if event.mask.intersects(gone) {
                    // The watched folder itself went (from outside: inside, it is pinned).
                    if let Some(folders) = self.folders.remove(&event.wd) {
                        touched.extend(folders);
                    }
                    let _ = self.inotify.rm_watch(event.wd);
                    continue;
                }
                if let (Some(folders), Some(name)) = (self.folders.get(&event.wd), &event.name) {
                    touched.extend(folders.iter().map(|f| f.join(name)));
                }
            }
            let affects = |k: &Kept| all || touched.iter().any(|t| k.path().starts_with(t));
            if self.kept.iter().any(affects) {
                self.restore(&affects)?;
                self.watch_folders()?;
            }
        }
    }

    /// Watches the folder holding each kept path; those missing now are watched once made.
    fn watch_folders(&mut self) -> Result<(), EnforceError> {
        let folders: BTreeSet<PathBuf> = self
            .kept
            .iter()
            .filter_map(|k| k.path().parent().map(Path::to_path_buf))
            .collect();
        for folder in folders {
            let Ok(c_folder) = CString::new(folder.as_os_str().as_bytes()) else {
                return Err(err(format_args!("{} contains NUL", folder.display())));
            };
            let fd = match sys::open_no_symlinks(
                sys::Dir::Cwd,
                &c_folder,
                libc::O_PATH | libc::O_DIRECTORY,
            ) {
                Ok(fd) => fd,
                Err(Errno::ENOENT) => continue,
                Err(e) => return Err(os_err(format_args!("opening {}", folder.display()), e)),
            };
            // Through the descriptor, so that no symlink on the way is followed.
            let wd = self
                .inotify
                .add_watch(
                    format!("/proc/self/fd/{}", fd.as_raw_fd()).as_str(),
                    events(),
                )
                .map_err(|e| {
                    os_err(
                        format_args!(
                            "watching {} (the limit is fs.inotify.max_user_watches)",
                            folder.display()
                        ),
                        e,
                    )
                })?;
            let paths = self.folders.entry(wd).or_default();
            if !paths.contains(&folder) {
                paths.push(folder);
            }
        }
        Ok(())
    }

    /// Puts back the pins and guards `which` selects (see the module's comment).
    fn restore(&mut self, which: &dyn Fn(&Kept) -> bool) -> Result<(), EnforceError> {
        let selected: Vec<usize> = (0..self.kept.len())
            .filter(|&i| which(&self.kept[i]))
            .collect();
        self.pins(&selected)?;
        for &i in &selected {
            if let Kept::Guard { .. } = self.kept[i] {
                self.guard(i)?;
            }
        }
        // Again, for folders a placeholder made just now.
        self.pins(&selected)
    }

    fn pins(&self, selected: &[usize]) -> Result<(), EnforceError> {
        for &i in selected {
            if let Kept::Pin(path) = &self.kept[i] {
                match mounts::pin(path) {
                    Ok(()) => {}
                    // Gone: a guard beneath makes it again, then it is pinned.
                    Err(e) if e.errno == Some(Errno::ENOENT) => {}
                    Err(e) => return Err(step_err(path, e)),
                }
            }
        }
        Ok(())
    }

    fn guard(&mut self, i: usize) -> Result<(), EnforceError> {
        let Kept::Guard {
            path,
            is_dir,
            content,
            irreplaceable,
        } = &self.kept[i]
        else {
            return Ok(());
        };
        let c_path = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| err(format_args!("{} contains NUL", path.display())))?;
        match sys::open_entry(&c_path) {
            Ok(fd) if is_guarded(&fd) => return Ok(()),
            Ok(_) => {}
            Err(Errno::ENOENT) if *irreplaceable => {
                return Err(err(format_args!(
                    "{} was removed while the sandbox ran (by a program outside), and nothing \
                     may stand in for it: the sandbox is stopped",
                    path.display()
                )));
            }
            Err(Errno::ENOENT) => {
                let content = (!is_dir).then(|| content.as_deref().unwrap_or(""));
                let (made, locks) = placeholders::stand_in(path, content)?;
                for m in made {
                    self.reporter.send(&Message::Placeholder(m));
                }
                self.locks.extend(locks);
            }
            Err(e) => return Err(os_err(format_args!("opening {}", path.display()), e)),
        }
        mounts::guard(path).map_err(|e| step_err(path, e))?;
        match writer_of(path) {
            Ok(None) => Ok(()),
            Ok(Some(writer)) => Err(err(format_args!(
                "{} was replaced while the sandbox ran (by a program outside), and {writer} \
                 holds the new file open for writing: the sandbox is stopped",
                path.display()
            ))),
            Err(e) => Err(err(format_args!(
                "{} was replaced while the sandbox ran, and the sandbox's processes could not \
                 be checked for a descriptor open for writing on it: {e}",
                path.display()
            ))),
        }
    }
}

/// Whether `fd` is the root of a read-only mount: the guard is on.
fn is_guarded(fd: &OwnedFd) -> bool {
    sys::is_mount_root(fd).unwrap_or(false)
        && fstatvfs(fd).is_ok_and(|st| st.flags().contains(FsFlags::ST_RDONLY))
}

/// A process of the sandbox (PID 1 and this one aside) with `path`, or anything beneath it,
/// open for writing or mapped shared and writable: "process N (name), descriptor M".
fn writer_of(path: &Path) -> std::io::Result<Option<String>> {
    let me = std::process::id().to_string();
    for entry in std::fs::read_dir("/proc")? {
        let name = entry?.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        if pid == "1" || pid == me {
            continue;
        }
        match process_writes(pid, path) {
            // Only PID 1's own forks that never executed anything (the mask keeper, the
            // command an instant before its `exec`) keep PID 1's memory, whose user namespace
            // is the caller's, where this watcher holds no capability. Every process the
            // command starts executed inside the sandbox's user namespace (or one beneath it),
            // and is readable here even when it made itself not dumpable.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {}
            Ok(Some(how)) => {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                return Ok(Some(format!("process {pid} ({}), {how},", comm.trim_end())));
            }
            Ok(None) => {}
            // Ended meanwhile.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(std::io::Error::new(e.kind(), format!("process {pid}: {e}"))),
        }
    }
    Ok(None)
}

/// Each thread's descriptor table (a thread may have unshared its own) and the mappings.
fn process_writes(pid: &str, path: &Path) -> std::io::Result<Option<String>> {
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let task = task?.path();
        let fds = match std::fs::read_dir(task.join("fd")) {
            Ok(fds) => fds,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for fd in fds {
            let fd = fd?;
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            if !within(&target, path) {
                continue;
            }
            let info = task.join("fdinfo").join(fd.file_name());
            let Ok(info) = std::fs::read_to_string(info) else {
                continue;
            };
            let flags = info
                .lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
                .unwrap_or(0);
            if flags & libc::O_ACCMODE as u32 != libc::O_RDONLY as u32 {
                return Ok(Some(format!(
                    "descriptor {}",
                    fd.file_name().to_string_lossy()
                )));
            }
        }
    }
    let maps = std::fs::read(format!("/proc/{pid}/maps"))?;
    for line in maps.split(|b| *b == b'\n') {
        // address perms offset dev inode pathname (the pathname may hold spaces)
        let mut fields = line.splitn(6, |b| *b == b' ');
        let perms = fields.nth(1).unwrap_or_default();
        let Some(name) = fields.nth(3) else { continue };
        let name = name.trim_ascii_start();
        let shared_writable = perms.get(1) == Some(&b'w') && perms.get(3) == Some(&b's');
        if shared_writable && within(Path::new(OsStr::from_bytes(name)), path) {
            return Ok(Some("a shared writable mapping".into()));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_guards_and_only_the_pins_above_them() {
        let p = PathBuf::from;
        let plan_mounts = vec![
            MountStep::Pin {
                path: p("/run"),
                of: p("/run/x.sock"),
            },
            MountStep::Pin {
                path: p("/h/.config"),
                of: p("/h/.config/git"),
            },
            MountStep::Guard {
                path: p("/h/.config/git"),
                existed: true,
                is_dir: true,
                content: None,
                irreplaceable: false,
                other_names: 0,
            },
        ];
        let kept = kept(&plan_mounts);
        let paths: Vec<&Path> = kept.iter().map(Kept::path).collect();
        assert_eq!(
            paths,
            [Path::new("/h/.config"), Path::new("/h/.config/git")]
        );
    }

    #[test]
    fn a_path_is_within_itself_and_its_folders_only() {
        assert!(within(
            Path::new("/h/.gitconfig"),
            Path::new("/h/.gitconfig")
        ));
        assert!(within(
            Path::new("/h/.git/hooks/x"),
            Path::new("/h/.git/hooks")
        ));
        assert!(!within(
            Path::new("/h/.gitconfig.lock"),
            Path::new("/h/.gitconfig")
        ));
    }
}
