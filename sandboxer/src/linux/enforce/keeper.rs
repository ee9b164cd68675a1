//! The mask keeper: lets the product create and replace refused paths while the sandbox runs.
//!
//! A mask sits on a dentry. When a process outside renames a new file over a refused path,
//! the kernel detaches every mount on the replaced dentry, in every mount namespace, and the
//! sandbox would read the new file. A mount on the *source* of a rename travels with it, and
//! `renameat2(RENAME_EXCHANGE)` keeps each dentry's mounts. So the product masks first, then
//! moves ([`crate::linux::refused`]): it stages the new content in a staging folder beside the
//! refused path (itself refused, so nothing inside can open it), asks each running sandbox's
//! keeper to mask the staged entry, and only then writes it and exchanges it with the refused
//! path.
//!
//! In the sandbox (masks shape, only when the plan names a `mask_registry`):
//!
//! 1. [`register`], in PID 1 before any mask: a shared `flock` on `<registry>/.lock` (the
//!    product writes under the exclusive lock, so a launch either is registered before a write
//!    starts or applies its masks by path after it ended), a Unix socket `<id>.sock` bound and
//!    listening in the registry (on the real disk, before a cover hides it), and `<id>.lock`
//!    locked exclusively for as long as PID 1 or the keeper lives: the product tells a
//!    finished sandbox (lock free: stale, removed) from a keeper that stopped answering while
//!    its sandbox runs (lock held: the write fails, closed).
//! 2. `mounts::apply` captures an `O_PATH` descriptor of each staging folder through the mount
//!    the command will resolve it through, right before the staging folder's own refusal.
//! 3. [`start`]: PID 1 forks the keeper (a raw `clone`, as PID 1 may itself come from one),
//!    which keeps only `CAP_SYS_ADMIN` of the sandbox's user namespace (enough to mount in the
//!    sandbox's mount namespace, nothing outside it), is not dumpable and lives outside the
//!    command's Landlock domain (no ptrace, no signals from inside); then PID 1 lets go of the
//!    registry lock.
//! 4. [`serve`]: one request per connection, `mask <staging folder>/<name>\n`: the keeper opens
//!    the entry beneath the captured descriptor (`O_PATH`, no symlinks) and mounts an empty
//!    read-only mode-000 file on it (a mode-000 read-only tmpfs on a folder), then answers
//!    `ok`; `not mine` for anything not directly in one of its staging folders.

use std::ffi::{CStr, CString};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use caps::Capability;
use nix::errno::Errno;
use nix::sys::stat::{SFlag, fstat};

use super::error::{EnforceError, Layer};
use super::scratch::Scratch;
use super::sys::{self, Dir};
use crate::linux::plan::{MountStep, Plan};

/// The registry's lock file: shared by launches while they register, exclusive for a write.
pub(crate) const LOCK: &str = ".lock";
/// A keeper's socket is `<id>.sock`; `<id>.lock` is held while its sandbox lives.
pub(crate) const SOCK_EXT: &str = "sock";
pub(crate) const ALIVE_EXT: &str = "lock";

/// A staging folder, captured through the mount the command resolves it through.
pub(super) struct Kept {
    path: PathBuf,
    fd: OwnedFd,
}

impl Kept {
    pub(super) fn new(path: &Path, fd: OwnedFd) -> Kept {
        Kept {
            path: path.to_path_buf(),
            fd,
        }
    }
}

/// A sandbox registered in the mask registry, before its keeper runs.
pub(super) struct Registration {
    /// Shared lock on `<registry>/.lock`, held until the masks are on and the keeper runs.
    registry_lock: OwnedFd,
    listener: UnixListener,
    /// `<id>.lock`, locked exclusively; kept open by PID 1 and the keeper.
    alive: OwnedFd,
}

fn err(what: impl std::fmt::Display) -> EnforceError {
    EnforceError::new(Layer::Masks, format!("mask keeper: {what}"))
}

fn os_err(what: impl std::fmt::Display, e: Errno) -> EnforceError {
    EnforceError::os(Layer::Masks, format_args!("mask keeper: {what}"), e)
}

/// Step 1 (see the module's comment), in PID 1 before any mask; `None` without a registry.
pub(super) fn register(plan: &Plan) -> Result<Option<Registration>, EnforceError> {
    let Some(registry) = &plan.mask_registry else {
        return Ok(None);
    };
    check_hidden(plan, registry)?;
    std::fs::create_dir_all(registry)
        .map_err(|e| err(format_args!("creating {}: {e}", registry.display())))?;
    let c_registry = c_path(registry)?;
    let dir = sys::open_no_symlinks(Dir::Cwd, &c_registry, libc::O_PATH | libc::O_DIRECTORY)
        .map_err(|e| os_err(format_args!("opening {}", registry.display()), e))?;
    let registry_lock = create_at(&dir, &CString::new(LOCK).expect("no NUL"), 0)
        .map_err(|e| os_err(format_args!("opening {}/{LOCK}", registry.display()), e))?;
    flock(&registry_lock, libc::LOCK_SH)
        .map_err(|e| os_err(format_args!("locking {}/{LOCK}", registry.display()), e))?;
    let id = random_hex().map_err(|e| err(format_args!("getrandom: {e}")))?;
    let alive_name = CString::new(format!("{id}.{ALIVE_EXT}")).expect("hex");
    let alive = create_at(&dir, &alive_name, libc::O_EXCL)
        .map_err(|e| os_err("creating the sandbox's lock file", e))?;
    flock(&alive, libc::LOCK_EX).map_err(|e| os_err("locking the sandbox's lock file", e))?;
    // Bound through the registry's descriptor: a socket path is limited to 107 bytes.
    let listener = UnixListener::bind(in_dir(&dir, &format!("{id}.{SOCK_EXT}"))).map_err(|e| {
        err(format_args!(
            "binding its socket in {}: {e}",
            registry.display()
        ))
    })?;
    Ok(Some(Registration {
        registry_lock,
        listener,
        alive,
    }))
}

/// The registry must lie under a cover (a protected root), so that nothing inside the sandbox
/// can reach its sockets or locks.
fn check_hidden(plan: &Plan, registry: &Path) -> Result<(), EnforceError> {
    let governing = plan
        .mounts
        .iter()
        .filter(|m| registry.starts_with(m.path()))
        .max_by_key(|m| m.path().components().count());
    match governing {
        Some(MountStep::Cover { is_dir: true, .. }) => Ok(()),
        _ => Err(EnforceError::new(
            Layer::Plan,
            format!(
                "the mask registry {} lies under no protected root: the sandbox could reach it",
                registry.display()
            ),
        )),
    }
}

/// Step 3: forks the keeper and lets go of the registry lock. PID 1 keeps `alive` open.
pub(super) fn start(
    reg: Registration,
    kept: Vec<Kept>,
    plan: &Plan,
) -> Result<OwnedFd, EnforceError> {
    let mut scratch = Scratch::default();
    let guarded = Guarded {
        kept,
        refused_in: plan
            .mounts
            .iter()
            .filter_map(|m| match m {
                MountStep::Refuse { path, .. } => path.parent().map(Path::to_path_buf),
                _ => None,
            })
            .collect(),
    };
    let Registration {
        registry_lock,
        listener,
        alive,
    } = reg;
    // SAFETY: PID 1 is single-threaded; the child ends with `_exit` below.
    match unsafe { sys::fork_raw() } {
        Err(e) => Err(os_err("fork", e)),
        Ok(None) => {
            // The registry lock is PID 1's to release; the keeper must not hold it.
            drop(registry_lock);
            let code = match keeper_setup() {
                Ok(()) => {
                    serve(&listener, &guarded, &mut scratch);
                    0
                }
                Err(_) => 125,
            };
            // SAFETY: ends the keeper without running the caller's exit handlers.
            unsafe { libc::_exit(code) }
        }
        Ok(Some(_)) => {
            drop(listener);
            drop(registry_lock);
            Ok(alive)
        }
    }
}

/// The keeper's own hardening: dies with PID 1, keeps `CAP_SYS_ADMIN` alone, not dumpable.
fn keeper_setup() -> Result<(), EnforceError> {
    super::caps::helper_keeping("mask keeper", &[Capability::CAP_SYS_ADMIN])
}

/// Step 4: answers requests, one per connection, until the sandbox ends.
fn serve(listener: &UnixListener, guarded: &Guarded, scratch: &mut Scratch) {
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = conn.set_write_timeout(Some(Duration::from_secs(5)));
        let mut line = Vec::new();
        let read = BufReader::new(&mut conn).read_until(b'\n', &mut line);
        let answer = match read {
            Ok(_) => answer(&line, guarded, scratch),
            Err(_) => continue,
        };
        let _ = conn.write_all(answer.as_bytes());
    }
}

/// What a keeper guards: its staging folders, and the folders holding its refused paths.
struct Guarded {
    kept: Vec<Kept>,
    refused_in: Vec<PathBuf>,
}

fn answer(line: &[u8], guarded: &Guarded, scratch: &mut Scratch) -> String {
    let Some(path) = line
        .strip_suffix(b"\n")
        .and_then(|l| l.strip_prefix(b"mask "))
    else {
        return "error malformed request\n".into();
    };
    let path = Path::new(std::ffi::OsStr::from_bytes(path));
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return "not mine\n".into();
    };
    let Some(staging) = guarded.kept.iter().find(|k| k.path == parent) else {
        // A folder holding a refused path of this sandbox but no staging folder of it (the
        // planner could not place one): what is moved there could not be masked first.
        if parent
            .parent()
            .is_some_and(|p| guarded.refused_in.iter().any(|r| r == p))
        {
            return "error this sandbox refuses a path there but has no staging folder\n".into();
        }
        return "not mine\n".into();
    };
    match mask(&staging.fd, name.as_bytes(), scratch) {
        Ok(()) => "ok\n".into(),
        Err(e) => {
            format!("error {e}\n")
                .replace('\n', " ")
                .trim_end()
                .to_owned()
                + "\n"
        }
    }
}

/// Mounts a mask on the entry `name` beneath the captured staging folder.
fn mask(staging: &OwnedFd, name: &[u8], scratch: &mut Scratch) -> Result<(), String> {
    if name.is_empty() || name.contains(&b'/') || name == b"." || name == b".." {
        return Err("not a plain name".into());
    }
    let name = CString::new(name).map_err(|_| "NUL in the name".to_owned())?;
    let target = sys::open_no_symlinks(Dir::Fd(staging), &name, libc::O_PATH | libc::O_NOFOLLOW)
        .map_err(|e| format!("opening the staged entry: {e}"))?;
    let st = fstat(&target).map_err(|e| format!("stat: {e}"))?;
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    if kind != SFlag::S_IFDIR && kind != SFlag::S_IFREG {
        return Err("the staged entry is neither a file nor a folder".into());
    }
    let mask = scratch
        .refusal_mask(kind == SFlag::S_IFDIR)
        .map_err(|e| e.to_string())?;
    sys::move_mount(&mask, &target).map_err(|e| format!("mounting the mask: {e}"))
}

/// Connects to a keeper's socket and asks it to mask `staged`. `Ok(true)`: masked; `Ok(false)`:
/// not one of its staging folders. Used by the product's side.
pub(crate) fn ask(dir: &OwnedFd, sock_name: &str, staged: &Path) -> std::io::Result<bool> {
    let mut conn = UnixStream::connect(in_dir(dir, sock_name))?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    conn.set_write_timeout(Some(Duration::from_secs(10)))?;
    let mut request = b"mask ".to_vec();
    request.extend_from_slice(staged.as_os_str().as_bytes());
    request.push(b'\n');
    conn.write_all(&request)?;
    let mut reply = String::new();
    BufReader::new(&mut conn).read_line(&mut reply)?;
    match reply.trim_end() {
        "ok" => Ok(true),
        "not mine" => Ok(false),
        other => Err(std::io::Error::other(format!(
            "the mask keeper answered {other:?}"
        ))),
    }
}

/// `name` inside the folder `dir`, as a path short enough for a socket address.
fn in_dir(dir: &OwnedFd, name: &str) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}/{name}", dir.as_raw_fd()))
}

pub(crate) use super::sys::flock;

/// Opens (creating it, mode 0600, when missing) the file `name` in `dir`, read-write.
fn create_at(dir: &OwnedFd, name: &CStr, extra: libc::c_int) -> Result<OwnedFd, Errno> {
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC | extra;
    // SAFETY: valid descriptor and NUL-terminated name; the mode applies with O_CREAT.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags, 0o600 as libc::c_uint) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a new descriptor, owned from here on.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}

/// 12 random bytes as hex: a keeper's id in the registry, a staged entry's name.
pub(crate) fn random_hex() -> std::io::Result<String> {
    let mut bytes = [0u8; 12];
    // SAFETY: the buffer outlives the call and its length is passed.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        return Err(std::io::Error::last_os_error());
    }
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn c_path(path: &Path) -> Result<CString, EnforceError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| err(format_args!("{} contains a NUL byte", path.display())))
}
