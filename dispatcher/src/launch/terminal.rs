//! A confined process the dispatcher starts never has the person's terminal as its
//! controlling terminal.
//!
//! A process whose controlling terminal is the person's can push bytes into that terminal's
//! input (`TIOCSTI`: allowed to anyone but root only on the controlling terminal, on macOS and
//! on Linux with `dev.tty.legacy_tiocsti`); the person's shell reads them as typed and runs
//! them, outside every sandbox, once the launch ends. The same holds for the terminal a
//! `dispatcher serve` was started from, for every chat the server launches, and the sandbox
//! can always reach that terminal: `/dev/tty` opens it, whatever its descriptors are. On Linux
//! `sandboxer exec` starts its command in a session of its own; `sandbox-exec` (macOS) starts
//! it as it is. So the process that becomes the wrapper gives the terminal up first
//! (`TIOCNOTTY` on `/dev/tty`), on every platform, and what it starts inherits no controlling
//! terminal. It can never get one back: only a session leader can take a terminal, and the
//! person's terminal already belongs to their shell's session.
//!
//! It stays in its process group, so the terminal's Ctrl-C, Ctrl-Z and window-size signals
//! still reach it, and its inherited descriptors still read, write and set modes on the
//! terminal; only `/dev/tty` no longer opens (`ENXIO`). `TIOCNOTTY` is refused to a session
//! leader (macOS) or hangs up its whole session (Linux); a spawned child is never one (its
//! pid is new, its session its parent's), and the call is made only in such a child.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes `cmd`'s process give up its controlling terminal, if it has one, before it executes
/// its program. The start fails (nothing runs) when the terminal cannot be given up.
pub fn leave_controlling_terminal(cmd: &mut Command) {
    // SAFETY: `give_up` makes only async-signal-safe calls (open, ioctl, close, errno).
    unsafe { cmd.pre_exec(give_up) };
}

/// In the child, between `fork` and `exec`.
fn give_up() -> io::Result<()> {
    // SAFETY: a NUL-terminated literal path; the descriptor is closed below.
    let fd = unsafe {
        libc::open(
            c"/dev/tty".as_ptr(),
            libc::O_RDONLY | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        // No controlling terminal: nothing to give up.
        return match e.raw_os_error() {
            Some(libc::ENXIO) => Ok(()),
            _ => Err(e),
        };
    }
    // SAFETY: `fd` is open; TIOCNOTTY takes no argument.
    let r = unsafe { libc::ioctl(fd, libc::TIOCNOTTY as _) };
    let e = io::Error::last_os_error();
    // SAFETY: `fd` was opened above and is not used again.
    unsafe { libc::close(fd) };
    match r {
        0 => Ok(()),
        _ => Err(e),
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    //! Live, under a real pseudo-terminal that is the controlling terminal of a stand-in for
    //! the person's shell, as root and as the unprivileged test user: root may push input
    //! into any terminal it can read (`CAP_SYS_ADMIN`), so only the user's run shows
    //! `TIOCSTI` refused; both show `/dev/tty` no longer opening.

    use super::*;
    use agentworks_test_user::{is_rerun, is_root, rerun_as_test_user};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::process::Stdio;

    const NAME: &str = "launch::terminal::tests::a_started_process_has_no_controlling_terminal";
    const RERUN: &str = "AW_TERMINAL_TEST_AS_USER";
    const ROLE: &str = "AW_TERMINAL_TEST_ROLE";

    /// What the probe prints: whether `/dev/tty` opens and whether `TIOCSTI` on its stdin
    /// (the terminal) pushes a byte.
    const PROBE: &str = r##"
import errno, fcntl, termios
def attempt(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
print("tty=" + attempt(lambda: open("/dev/tty", "rb", buffering=0).close()), end=" ")
print("sti=" + attempt(lambda: fcntl.ioctl(0, termios.TIOCSTI, b"#")))
"##;

    /// The stand-in's part: the probe started plainly (the control) and started as the
    /// dispatcher starts a wrapper, each printing one line.
    fn stand_in() -> ! {
        for leave in [false, true] {
            let mut cmd = Command::new("python3");
            cmd.args(["-c", PROBE])
                .stdin(Stdio::inherit())
                .stdout(Stdio::piped());
            if leave {
                leave_controlling_terminal(&mut cmd);
            }
            let out = cmd.output().expect("python3 runs");
            let line = String::from_utf8_lossy(&out.stdout);
            eprintln!("RESULT leave={leave} {}", line.trim());
        }
        std::process::exit(0)
    }

    /// A new pseudo-terminal: its master and slave ends.
    fn openpty() -> (OwnedFd, OwnedFd) {
        let (mut master, mut slave) = (-1, -1);
        // SAFETY: out-pointers to two ints; no name, termios or window size asked for.
        let r = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(r, 0, "openpty: {}", io::Error::last_os_error());
        // SAFETY: both descriptors were just opened and are owned by nobody else.
        unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) }
    }

    #[test]
    fn a_started_process_has_no_controlling_terminal() {
        if std::env::var_os(ROLE).is_some() {
            stand_in();
        }
        if !is_rerun(RERUN) && is_root() {
            rerun_as_test_user(NAME, RERUN);
        }
        let (master, slave) = openpty();
        let slave_fd = slave.as_raw_fd();
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([NAME, "--exact", "--nocapture"])
            .env(ROLE, "1")
            .stdin(std::fs::File::from(slave.try_clone().unwrap()))
            .stdout(Stdio::null())
            .stderr(log.reopen().unwrap());
        // SAFETY: async-signal-safe calls only: the stand-in leads a session whose
        // controlling terminal is the pty, as a login shell's is.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() < 0 || libc::ioctl(slave_fd, libc::TIOCSCTTY as _, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let status = cmd.status().unwrap();
        drop((master, slave));
        let text = std::fs::read_to_string(log.path()).unwrap();
        assert!(status.success(), "the stand-in failed: {text}");
        let result = |leave: bool| {
            let prefix = format!("RESULT leave={leave} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .unwrap_or_else(|| panic!("no result for leave={leave}: {text}"))
                .to_string()
        };
        let root = is_root();
        // The control: the terminal is the probe's, and it can type into it.
        assert_eq!(result(false), "tty=ok sti=ok", "as root: {root}");
        // Given up: no /dev/tty; TIOCSTI refused to anyone but root.
        let want = match root {
            true => "tty=ENXIO sti=ok",
            false => "tty=ENXIO sti=EPERM",
        };
        assert_eq!(result(true), want, "as root: {root}");
    }
}
