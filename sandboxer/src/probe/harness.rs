//! The probe harness: runs probes inside the process it is started in and reports what
//! happened — errno, bytes read, entries listed, exit status — raw facts only. It decides no
//! verdict: the runner does, afterwards, from evidence the harness cannot forge (see
//! [`super::Evidence`]).

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::ops::ProbeOp;
use super::queries::Probe;
use crate::target::Target;

/// The most of a file a read probe takes in, and the most of it reported.
const READ_LIMIT: u64 = 1 << 20;
const OUTPUT_LIMIT: usize = 64 << 10;
/// The most entries a list probe reports.
const LIST_LIMIT: usize = 4096;
/// How long a program a probe runs (exec, tmux) may take.
const CHILD_TIMEOUT: Duration = Duration::from_secs(10);

/// The token a probe writes, sends or injects: unique per run and probe, so evidence from
/// another run or probe is never mistaken for this one's.
pub fn token(run_id: &str, probe: &str) -> String {
    format!("AWTOKEN-{run_id}-{probe}")
}

/// The vars file a harness is started with (`sandboxer probe --vars FILE`): the run's id and
/// every template variable's value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VarsFile {
    pub run_id: String,
    pub vars: BTreeMap<String, String>,
}

/// What the harness says happened to one probe. A claim, never a verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Claim {
    /// Every system call of the operation succeeded.
    Done,
    /// A system call failed (`errno`, `error` say which).
    Failed,
    /// Not run here (`error` says why).
    Skipped,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeOutcome {
    pub name: String,
    pub op: String,
    pub target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arg: Option<String>,
    pub claim: Claim,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Bytes read (read-like), written (write-like) or entries listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// What was read (lossy UTF-8, at most 64 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// What was listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<Vec<String>>,
    /// A program's exit status (exec, tmux-command).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
}

/// Everything one harness run reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HarnessReport {
    pub version: u32,
    pub platform: String,
    pub run_id: String,
    /// The harness's own pid, as it sees it (1-ish inside a PID namespace).
    pub pid: u32,
    pub uid: u32,
    pub cwd: String,
    pub results: Vec<ProbeOutcome>,
}

/// Runs every probe with an expectation for this OS, in order, and reports.
pub fn run(probes: &[Probe], vars: &VarsFile) -> HarnessReport {
    let host = Target::host();
    let results = probes.iter().map(|p| run_one(p, vars, host)).collect();
    HarnessReport {
        version: 1,
        platform: host.map_or("unknown", |t| t.as_str()).to_string(),
        run_id: vars.run_id.clone(),
        pid: std::process::id(),
        // SAFETY: getuid cannot fail.
        uid: unsafe { libc::getuid() },
        cwd: std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_else(|e| format!("(unknown: {e})")),
        results,
    }
}

fn outcome(p: &Probe, target: String, arg: Option<String>) -> ProbeOutcome {
    ProbeOutcome {
        name: p.name.clone(),
        op: p.op.as_str().to_string(),
        target,
        arg,
        claim: Claim::Skipped,
        errno: None,
        error: None,
        bytes: None,
        output: None,
        entries: None,
        exit_status: None,
    }
}

fn run_one(p: &Probe, vars: &VarsFile, host: Option<Target>) -> ProbeOutcome {
    let target = match p.target.expand(&vars.vars) {
        Ok(t) => t,
        Err(e) => {
            let mut o = outcome(p, p.target.as_str().to_string(), None);
            o.error = Some(format!("target: {e}"));
            return o;
        }
    };
    let arg = match p.arg.as_ref().map(|a| a.expand(&vars.vars)).transpose() {
        Ok(a) => a,
        Err(e) => {
            let mut o = outcome(p, target, None);
            o.error = Some(format!("arg: {e}"));
            return o;
        }
    };
    let mut o = outcome(p, target.clone(), arg.clone());
    let Some(host) = host.filter(|h| p.expectation(*h).is_some()) else {
        o.error = Some("no expectation for this OS".into());
        return o;
    };
    if !supported_live(p.op, host) {
        o.error = Some(format!(
            "{} is not run live on {host}: decided by evaluating the profile{}",
            p.op,
            if host == Target::Macos {
                " (live: scripts/mac-selftest.sh)"
            } else {
                ""
            }
        ));
        return o;
    }
    let token = token(&vars.run_id, &p.name);
    let arg = arg.unwrap_or_default();
    let result = act(p.op, &target, &arg, &token, &mut o);
    match result {
        Ok(()) => o.claim = Claim::Done,
        Err(e) => {
            o.claim = Claim::Failed;
            o.errno = e.raw_os_error();
            o.error = Some(e.to_string());
        }
    }
    o
}

/// Whether the harness can run `op` live on `host`.
pub fn supported_live(op: ProbeOp, host: Target) -> bool {
    match host {
        Target::Linux => op.live_on_linux(),
        Target::Macos => matches!(
            op,
            ProbeOp::Read
                | ProbeOp::List
                | ProbeOp::Write
                | ProbeOp::Create
                | ProbeOp::Delete
                | ProbeOp::Rename
                | ProbeOp::Link
                | ProbeOp::SymlinkFollow
                | ProbeOp::Exec
                | ProbeOp::ConnectUnix
                | ProbeOp::Signal
        ),
    }
}

fn act(op: ProbeOp, target: &str, arg: &str, token: &str, o: &mut ProbeOutcome) -> io::Result<()> {
    match op {
        ProbeOp::Read => read_into(Path::new(target), o),
        ProbeOp::ProcRoot => {
            let pid = pid(target)?;
            read_into(
                &Path::new(&format!("/proc/{pid}/root")).join(arg.trim_start_matches('/')),
                o,
            )
        }
        ProbeOp::ProcEnviron => {
            let pid = pid(target)?;
            read_into(Path::new(&format!("/proc/{pid}/environ")), o)
        }
        ProbeOp::SymlinkFollow => {
            std::os::unix::fs::symlink(target, arg)?;
            read_into(Path::new(arg), o)
        }
        ProbeOp::List => {
            let mut entries = Vec::new();
            for e in fs::read_dir(target)? {
                let e = e?;
                if entries.len() < LIST_LIMIT {
                    entries.push(e.file_name().to_string_lossy().into_owned());
                }
            }
            o.bytes = Some(entries.len() as u64);
            o.entries = Some(entries);
            Ok(())
        }
        ProbeOp::Write => {
            let mut f = OpenOptions::new().append(true).open(target)?;
            let line = format!("{token}\n");
            f.write_all(line.as_bytes())?;
            o.bytes = Some(line.len() as u64);
            Ok(())
        }
        ProbeOp::Create => {
            if let Some(parent) = Path::new(target).parent() {
                fs::create_dir_all(parent)?;
            }
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(target)?;
            let line = format!("{token}\n");
            f.write_all(line.as_bytes())?;
            o.bytes = Some(line.len() as u64);
            Ok(())
        }
        ProbeOp::Delete => fs::remove_file(target),
        ProbeOp::Rename => fs::rename(target, arg),
        ProbeOp::Link => fs::hard_link(target, arg),
        ProbeOp::Exec => {
            let mut cmd = Command::new(target);
            cmd.arg(token).arg(arg);
            run_child(cmd, o)
        }
        ProbeOp::TmuxCommand => {
            let mut cmd = Command::new("tmux");
            cmd.args(["-S", target, "run-shell"]).arg(format!(
                "printf %s {} > {}",
                shell_quote(token),
                shell_quote(arg)
            ));
            run_child(cmd, o)
        }
        ProbeOp::ConnectUnix => {
            let mut s = connect_path(Path::new(target))?;
            send_token(&mut s, token, o)
        }
        ProbeOp::ConnectAbstract => connect_abstract(target, token, o),
        ProbeOp::Signal => {
            let pid = pid(target)?;
            // SAFETY: kill has no memory effects.
            if unsafe { libc::kill(pid, libc::SIGUSR1) } != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        }
        ProbeOp::Ptrace => ptrace_hold(pid(target)?, o),
        ProbeOp::Tiocsti => tiocsti(target, token),
        ProbeOp::MachLookup | ProbeOp::AppleEvent | ProbeOp::Lsopen | ProbeOp::OpenCopy => {
            Err(io::Error::new(io::ErrorKind::Unsupported, "evaluated only"))
        }
        ProbeOp::ShmRead => read_into(Path::new(target), o),
        ProbeOp::SysvAttach => sysv_attach(target, o),
        ProbeOp::KeyRead => key_read(target, o),
        ProbeOp::RenameDir => fs::rename(target, arg),
        ProbeOp::SysctlWrite => sysctl_write(Path::new(target), token, o),
        ProbeOp::Mknod => mknod_null(target),
        ProbeOp::KmsgRead => kmsg_read(Path::new(target), o),
        ProbeOp::ReadLate => {
            wait_for_runner(Path::new(arg))?;
            read_into(Path::new(target), o)
        }
    }
}

/// How long a late read waits for the runner to write its target.
const LATE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Makes `flag`, then waits until the runner, outside, has written the probe's target while
/// this sandbox runs and removed `flag`.
fn wait_for_runner(flag: &Path) -> io::Result<()> {
    OpenOptions::new().write(true).create_new(true).open(flag)?;
    let deadline = std::time::Instant::now() + LATE_WAIT;
    while fs::symlink_metadata(flag).is_ok() {
        if std::time::Instant::now() > deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the runner did not answer {} in time", flag.display()),
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    Ok(())
}

/// Writes the setting its own number plus one (a value the setting accepts, unlike the
/// token), or the token where it holds no number.
fn sysctl_write(path: &Path, token: &str, o: &mut ProbeOutcome) -> io::Result<()> {
    let now = fs::read_to_string(path)?;
    let value = match now.trim().parse::<i64>() {
        Ok(n) => (n + 1).to_string(),
        Err(_) => token.to_string(),
    };
    let mut f = OpenOptions::new().write(true).open(path)?;
    f.write_all(format!("{value}\n").as_bytes())?;
    o.bytes = Some(value.len() as u64 + 1);
    Ok(())
}

/// A node of the null device (1:3): harmless itself, but whoever may make one may make the
/// node of a disk.
fn mknod_null(target: &str) -> io::Result<()> {
    let path = std::ffi::CString::new(target)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in the path"))?;
    // SAFETY: the path outlives the call.
    let r = unsafe { libc::mknod(path.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 3)) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads the kernel log's records up to now, without waiting for new ones, keeping the last
/// `OUTPUT_LIMIT` bytes: the runner's marker is among the newest records. A read returns one
/// record, so what is kept is trimmed only once it holds twice the limit.
fn kmsg_read(path: &Path, o: &mut ProbeOutcome) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let mut kept: Vec<u8> = Vec::new();
    let mut total = 0u64;
    let mut record = vec![0u8; 8192];
    loop {
        match f.read(&mut record) {
            Ok(0) => break,
            Ok(n) => {
                total += n as u64;
                kept.extend_from_slice(&record[..n]);
                if kept.len() > 2 * OUTPUT_LIMIT {
                    kept.drain(..kept.len() - OUTPUT_LIMIT);
                }
            }
            // A record overwritten while reading: go on with the next one.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    kept.drain(..kept.len().saturating_sub(OUTPUT_LIMIT));
    o.bytes = Some(total);
    o.output = Some(String::from_utf8_lossy(&kept).into_owned());
    Ok(())
}

/// Attaches the segment `target` (its id) read-only and reads it up to its first NUL.
fn sysv_attach(target: &str, o: &mut ProbeOutcome) -> io::Result<()> {
    let id: libc::c_int = target.parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{target:?} is not a segment id"),
        )
    })?;
    // SAFETY: attaches read-only and reads within its first page (a segment is at least one
    // page long) before detaching it.
    unsafe {
        let at = libc::shmat(id, std::ptr::null(), libc::SHM_RDONLY);
        if at as isize == -1 {
            return Err(io::Error::last_os_error());
        }
        let bytes = std::slice::from_raw_parts(at.cast::<u8>(), OUTPUT_LIMIT.min(4096));
        let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
        o.bytes = Some(end as u64);
        o.output = Some(String::from_utf8_lossy(&bytes[..end]).into_owned());
        libc::shmdt(at);
    }
    Ok(())
}

/// Finds the `user` key described by `target` in the session keyring and reads its payload.
#[cfg(target_os = "linux")]
fn key_read(target: &str, o: &mut ProbeOutcome) -> io::Result<()> {
    const KEYCTL_SEARCH: libc::c_long = 10;
    const KEYCTL_READ: libc::c_long = 11;
    const KEY_SPEC_SESSION_KEYRING: libc::c_long = -3;
    let desc = std::ffi::CString::new(target)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in the description"))?;
    // SAFETY: the strings outlive the call.
    let key = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_SEARCH,
            KEY_SPEC_SESSION_KEYRING,
            c"user".as_ptr(),
            desc.as_ptr(),
            0,
        )
    };
    if key < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; OUTPUT_LIMIT];
    // SAFETY: `buf` is writable for its length, which is passed.
    let n = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_READ,
            key,
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate((n as usize).min(OUTPUT_LIMIT));
    o.bytes = Some(buf.len() as u64);
    o.output = Some(String::from_utf8_lossy(&buf).into_owned());
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn key_read(_: &str, _: &mut ProbeOutcome) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "no kernel keyrings here",
    ))
}

fn pid(target: &str) -> io::Result<libc::pid_t> {
    target
        .parse::<libc::pid_t>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{target:?} is not a pid"),
            )
        })
}

fn read_into(path: &Path, o: &mut ProbeOutcome) -> io::Result<()> {
    let mut buf = Vec::new();
    fs::File::open(path)?
        .take(READ_LIMIT)
        .read_to_end(&mut buf)?;
    o.bytes = Some(buf.len() as u64);
    buf.truncate(OUTPUT_LIMIT);
    // /proc/PID/environ separates entries with NUL.
    for b in buf.iter_mut().filter(|b| **b == 0) {
        *b = b'\n';
    }
    o.output = Some(String::from_utf8_lossy(&buf).into_owned());
    Ok(())
}

/// The longest socket path `connect(2)` takes on every OS we run on (macOS: 104 with NUL).
pub const SOCKET_PATH_MAX: usize = 103;

/// Runs `f` with `dir` as working folder, then returns to the previous one. Only for a
/// single-threaded process (the harness), or one whose other threads do not use relative
/// paths.
pub fn in_folder<T>(dir: &Path, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    let back = std::env::current_dir()?;
    std::env::set_current_dir(dir)?;
    let result = f();
    std::env::set_current_dir(&back)?;
    result
}

/// Connects to the socket at `path`; a path too long for `sockaddr_un` is reached from its
/// folder by name (as any program can).
fn connect_path(path: &Path) -> io::Result<UnixStream> {
    if path.as_os_str().len() <= SOCKET_PATH_MAX {
        return UnixStream::connect(path);
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return UnixStream::connect(path);
    };
    in_folder(dir, || UnixStream::connect(name))
}

fn send_token(s: &mut UnixStream, token: &str, o: &mut ProbeOutcome) -> io::Result<()> {
    let line = format!("{token}\n");
    s.write_all(line.as_bytes())?;
    s.shutdown(std::net::Shutdown::Write)?;
    o.bytes = Some(line.len() as u64);
    Ok(())
}

#[cfg(target_os = "linux")]
fn connect_abstract(name: &str, token: &str, o: &mut ProbeOutcome) -> io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    let mut s = UnixStream::connect_addr(&addr)?;
    send_token(&mut s, token, o)
}

#[cfg(not(target_os = "linux"))]
fn connect_abstract(_: &str, _: &str, _: &mut ProbeOutcome) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "abstract sockets are Linux's",
    ))
}

/// Runs a program a probe names, with a timeout; success is exit status 0.
fn run_child(mut cmd: Command, o: &mut ProbeOutcome) -> io::Result<()> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    let deadline = Instant::now() + CHILD_TIMEOUT;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if Instant::now() > deadline {
            // The child is ours: stop it by its own pid.
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the program did not finish in 10 s",
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    o.exit_status = status.code();
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "exited with {status}: {}",
            err.trim().chars().take(400).collect::<String>()
        )))
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// How long a ptrace probe holds its tracee at most, waiting for it to run while traced.
#[cfg(target_os = "linux")]
const PTRACE_HOLD_MAX: Duration = Duration::from_secs(2);
#[cfg(target_os = "linux")]
const PTRACE_HOLD_MIN: Duration = Duration::from_millis(10);

/// A process's voluntary context switches (it sleeps once per loop of the outside process).
#[cfg(target_os = "linux")]
fn voluntary_switches(pid: libc::pid_t) -> Option<u64> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))?
        .trim()
        .parse()
        .ok()
}

#[cfg(target_os = "linux")]
fn ptrace_hold(pid: libc::pid_t, o: &mut ProbeOutcome) -> io::Result<()> {
    let started = Instant::now();
    let before = voluntary_switches(pid);
    // In a child, so the harness itself never stays a tracer: seize the target (it keeps
    // running) and hold it until it has gone through three of its sleeps while traced — so an
    // outside process polling its own TracerPid has seen it, however loaded the machine —
    // or at most 2 s; the child's exit detaches it. The harness is single-threaded, so the
    // child may allocate.
    // SAFETY: fork in a single-threaded process.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(io::Error::last_os_error());
    }
    if child == 0 {
        let none = std::ptr::null_mut::<libc::c_void>();
        // SAFETY: plain system calls; errno read right after the failing one.
        unsafe {
            if libc::ptrace(libc::PTRACE_SEIZE, pid, none, none) != 0 {
                libc::_exit((*libc::__errno_location()).clamp(1, 120));
            }
        }
        let start = Instant::now();
        let before = voluntary_switches(pid);
        while start.elapsed() < PTRACE_HOLD_MAX {
            std::thread::sleep(Duration::from_millis(2));
            // A signal arriving while traced stops the tracee until its tracer lets it go
            // on: pass it through, so the target keeps running as it would.
            let mut st = 0;
            // SAFETY: waiting for our tracee without blocking.
            if unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG | libc::__WALL) } == pid
                && libc::WIFSTOPPED(st)
            {
                let sig = libc::WSTOPSIG(st) as usize as *mut libc::c_void;
                // SAFETY: restarting our tracee with the signal it stopped for.
                unsafe { libc::ptrace(libc::PTRACE_CONT, pid, none, sig) };
            }
            // Three switches and 10 ms (the target sleeps 3 ms a loop): a switch can also come
            // from blocking inside a loop (a write, a contended /proc read under load), and
            // two such could end the hold before the target looked at its TracerPid.
            match (before, voluntary_switches(pid)) {
                (Some(b), Some(now)) if now >= b + 3 && start.elapsed() >= PTRACE_HOLD_MIN => {
                    break;
                }
                (None, _) | (_, None) => break,
                _ => {}
            }
        }
        // SAFETY: ends the child; the tracee is detached by the kernel.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    if unsafe { libc::waitpid(child, &mut status, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    o.output = Some(format!(
        "held {} ms; the target's voluntary context switches {:?} -> {:?}",
        started.elapsed().as_millis(),
        before,
        voluntary_switches(pid)
    ));
    if libc::WIFEXITED(status) {
        match libc::WEXITSTATUS(status) {
            0 => Ok(()),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    } else {
        Err(io::Error::other(format!(
            "the ptrace child ended with status {status:#x}"
        )))
    }
}

#[cfg(not(target_os = "linux"))]
fn ptrace_hold(_: libc::pid_t, _: &mut ProbeOutcome) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "ptrace probes are Linux's",
    ))
}

#[cfg(target_os = "linux")]
fn tiocsti(target: &str, token: &str) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let opened;
    let fd = match target.strip_prefix("fd:") {
        Some(n) => n.parse::<i32>().ok().filter(|n| *n >= 0).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("{target:?}: not fd:N"))
        })?,
        None => {
            use std::os::unix::fs::OpenOptionsExt;
            opened = OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NOCTTY)
                .open(target)?;
            opened.as_raw_fd()
        }
    };
    for b in token.bytes() {
        // SAFETY: TIOCSTI reads one byte from the pointer.
        if unsafe { libc::ioctl(fd, libc::TIOCSTI, &b as *const u8) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn tiocsti(_: &str, _: &str) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "TIOCSTI probes are Linux's",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::queries::load;

    fn probes(body: &str) -> Vec<Probe> {
        load(body, "t.toml", &|v| v == "dir").unwrap()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn file_operations_report_raw_facts() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().display().to_string();
        fs::write(d.path().join("r"), "MARK\n").unwrap();
        fs::write(d.path().join("w"), "").unwrap();
        let ps = probes(
            "version = 1
[[probe]]
name = \"r\"
op = \"read\"
target = \"{dir}/r\"
linux = { expect = \"allow\", why = \"x\" }
[[probe]]
name = \"w\"
op = \"write\"
target = \"{dir}/w\"
linux = { expect = \"allow\", why = \"x\" }
[[probe]]
name = \"c\"
op = \"create\"
target = \"{dir}/new/c\"
linux = { expect = \"allow\", why = \"x\" }
[[probe]]
name = \"missing\"
op = \"read\"
target = \"{dir}/nothing\"
linux = { expect = \"deny\", why = \"x\" }
[[probe]]
name = \"l\"
op = \"list\"
target = \"{dir}\"
linux = { expect = \"allow\", why = \"x\" }
[[probe]]
name = \"m\"
op = \"mach-lookup\"
target = \"com.apple.x\"
macos = { expect = \"deny\", why = \"x\" }
",
        );
        let vars = VarsFile {
            run_id: "run1".into(),
            vars: [("dir".to_string(), dir)].into(),
        };
        let r = run(&ps, &vars);
        let by = |n: &str| r.results.iter().find(|o| o.name == n).unwrap();
        assert_eq!(by("r").claim, Claim::Done);
        assert_eq!(by("r").output.as_deref(), Some("MARK\n"));
        assert_eq!(by("w").claim, Claim::Done);
        assert_eq!(
            fs::read_to_string(d.path().join("w")).unwrap(),
            "AWTOKEN-run1-w\n"
        );
        assert_eq!(
            fs::read_to_string(d.path().join("new/c")).unwrap(),
            "AWTOKEN-run1-c\n"
        );
        assert_eq!(by("missing").claim, Claim::Failed);
        assert_eq!(by("missing").errno, Some(libc::ENOENT));
        assert!(by("l").entries.as_ref().unwrap().contains(&"r".to_string()));
        assert_eq!(by("m").claim, Claim::Skipped);
    }
}
