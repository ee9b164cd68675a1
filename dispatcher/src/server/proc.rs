//! Processes the server started, known by more than their pid: a pid is reused once its process
//! is gone, so a chat's process is identified by its pid *and* its start time. Nothing is
//! ever signalled unless both match.
//!
//! A structured chat's process writes its own identity file before it executes anything (in
//! the child, between `fork` and `exec`, with async-signal-safe calls only), so a server killed
//! between starting a chat and recording its pid still finds it on restart.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

/// A process: its pid and an identity string that changes when the pid is reused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ident {
    pub pid: i32,
    /// Linux: the start time in clock ticks since boot (`/proc/PID/stat` field 22).
    /// Elsewhere: `ps -o lstart=` (seconds).
    pub start: String,
}

impl Ident {
    /// The identity of the process that is `pid` now, if there is one (a zombie counts as gone).
    pub fn of(pid: i32) -> Option<Ident> {
        if pid <= 0 {
            return None;
        }
        start_time(pid).map(|start| Ident { pid, start })
    }

    /// Whether this very process is still alive.
    pub fn alive(&self) -> bool {
        Ident::of(self.pid).as_ref() == Some(self)
    }

    /// Signals this process's group (the chat's process leads its own group), if the process
    /// is still this one. `Ok(false)`: it is gone (or the pid now names another process).
    pub fn signal_group(&self, sig: i32) -> io::Result<bool> {
        if !self.alive() {
            return Ok(false);
        }
        // SAFETY: kill has no memory preconditions. The group is the chat's own: the pid led
        // it at spawn time and is checked to be the same process just above.
        if unsafe { libc::kill(-self.pid, sig) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ESRCH) {
            // Not a group leader any more (it cannot be: setpgid is ours); signal the process.
            // SAFETY: as above.
            if unsafe { libc::kill(self.pid, sig) } == 0 {
                return Ok(true);
            }
            let e = io::Error::last_os_error();
            return if e.raw_os_error() == Some(libc::ESRCH) {
                Ok(false)
            } else {
                Err(e)
            };
        }
        Err(e)
    }

    /// The identity file's content.
    pub fn to_line(&self) -> String {
        format!("{} {}\n", self.pid, self.start)
    }

    pub fn parse_line(line: &str) -> Option<Ident> {
        let (pid, start) = line.trim().split_once(' ')?;
        Some(Ident {
            pid: pid.parse().ok().filter(|p: &i32| *p > 0)?,
            start: start.to_string(),
        })
    }
}

#[cfg(target_os = "linux")]
fn start_time(pid: i32) -> Option<String> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_start(&stat)
}

/// Field 22 of `/proc/PID/stat`; `None` for a zombie. The command name (field 2) may hold
/// spaces and parentheses, so fields are counted from its last `)`.
#[cfg(target_os = "linux")]
fn parse_stat_start(stat: &[u8]) -> Option<String> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    // fields[0] is field 3 (state); field 22 is fields[19].
    if matches!(fields.first(), Some(&"Z") | Some(&"X") | None) {
        return None;
    }
    fields
        .get(19)
        .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        .map(|s| s.to_string())
}

#[cfg(not(target_os = "linux"))]
fn start_time(pid: i32) -> Option<String> {
    let out = Command::new("/bin/ps")
        .args(["-o", "stat=,lstart=", "-p", &pid.to_string()])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next()?.trim();
    let (stat, start) = line.split_once(char::is_whitespace)?;
    if stat.starts_with('Z') {
        return None;
    }
    Some(start.split_whitespace().collect::<Vec<_>>().join("_"))
}

/// Prepares `cmd` to lead its own process group and to write its identity into `file` (created
/// exclusively, mode 0600) before it executes anything.
///
/// On Linux the file holds `PID ` followed by the raw `/proc/self/stat`, which [`read_ident_file`]
/// turns into an [`Ident`]. Elsewhere it holds only the pid (no start time can be had without
/// allocating), and [`read_ident_file`] says so: such a process is never signalled by a
/// restarted server on the strength of this file alone.
pub fn prepare_spawn(cmd: &mut Command, file: &Path) -> io::Result<()> {
    let path = CString::new(file.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("the identity file's path holds a NUL"))?;
    cmd.process_group(0);
    // SAFETY: the closure runs in the child between fork and exec; it only makes
    // async-signal-safe system calls on memory prepared before the fork (no allocation, no
    // locks).
    unsafe {
        cmd.pre_exec(move || write_ident_in_child(&path));
    }
    Ok(())
}

fn write_ident_in_child(path: &CString) -> io::Result<()> {
    // SAFETY: plain system calls on valid pointers to stack or pre-allocated memory.
    unsafe {
        let fd = libc::open(
            path.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        );
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = [0u8; 2048];
        let mut len = format_pid(libc::getpid(), &mut buf);
        #[cfg(target_os = "linux")]
        {
            let stat = libc::open(
                c"/proc/self/stat".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            );
            if stat >= 0 {
                while len < buf.len() {
                    let n = libc::read(stat, buf[len..].as_mut_ptr().cast(), buf.len() - len);
                    if n <= 0 {
                        break;
                    }
                    len += n as usize;
                }
                libc::close(stat);
            }
        }
        let mut off = 0;
        while off < len {
            let n = libc::write(fd, buf[off..len].as_ptr().cast(), len - off);
            if n <= 0 {
                let e = io::Error::last_os_error();
                libc::close(fd);
                return Err(e);
            }
            off += n as usize;
        }
        libc::close(fd);
    }
    Ok(())
}

/// Writes `pid` and a space into `buf`; returns the length.
fn format_pid(pid: i32, buf: &mut [u8]) -> usize {
    let mut digits = [0u8; 12];
    let mut n = pid.unsigned_abs();
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let d = &digits[i..];
    buf[..d.len()].copy_from_slice(d);
    buf[d.len()] = b' ';
    d.len() + 1
}

/// What an identity file says: the process's identity, or only its pid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentFile {
    Ident(Ident),
    PidOnly(i32),
}

/// Reads an identity file written by [`prepare_spawn`]'s child; `None` when it is missing or
/// incomplete (the child did not get that far).
pub fn read_ident_file(file: &Path) -> Option<IdentFile> {
    let data = std::fs::read(file).ok()?;
    let space = data.iter().position(|&b| b == b' ')?;
    let pid: i32 = std::str::from_utf8(&data[..space]).ok()?.parse().ok()?;
    if pid <= 0 {
        return None;
    }
    #[cfg(target_os = "linux")]
    {
        parse_stat_start(&data[space + 1..])
            .map(|start| IdentFile::Ident(Ident { pid, start }))
            .or(Some(IdentFile::PidOnly(pid)))
    }
    #[cfg(not(target_os = "linux"))]
    {
        Some(IdentFile::PidOnly(pid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spawned_child_writes_its_identity_and_is_known_by_it() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("ident");
        let mut cmd = Command::new("/bin/sleep");
        cmd.arg("30");
        prepare_spawn(&mut cmd, &file).unwrap();
        let mut child = cmd.spawn().unwrap();
        let pid = child.id() as i32;
        let now = Ident::of(pid).expect("alive");
        #[cfg(target_os = "linux")]
        assert_eq!(read_ident_file(&file), Some(IdentFile::Ident(now.clone())));
        #[cfg(not(target_os = "linux"))]
        assert_eq!(read_ident_file(&file), Some(IdentFile::PidOnly(pid)));
        // A different start time is a different process: never signalled.
        let other = Ident {
            pid,
            start: "1".into(),
        };
        assert!(!other.alive());
        assert!(!other.signal_group(libc::SIGKILL).unwrap());
        assert!(now.signal_group(libc::SIGKILL).unwrap());
        child.wait().unwrap();
        assert!(!now.alive());
        assert_eq!(Ident::parse_line(&now.to_line()), Some(now));
        // The file is created exclusively: a second child with the same file does not run.
        let mut again = Command::new("/bin/true");
        prepare_spawn(&mut again, &file).unwrap();
        assert!(again.spawn().is_err());
    }

    #[test]
    fn pids_format() {
        let mut buf = [0u8; 16];
        let n = format_pid(40213, &mut buf);
        assert_eq!(&buf[..n], b"40213 ");
        let n = format_pid(7, &mut buf);
        assert_eq!(&buf[..n], b"7 ");
    }
}
