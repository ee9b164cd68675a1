//! Detection on this machine (Linux only): the Landlock ABI asked of the kernel, and the
//! namespaces probed for real in a forked child.
use std::ffi::CStr;

use super::blocker::errno_text;
use super::evidence::{
    LandlockProbe, NamespaceProbe, Probe, SETTINGS, Setting, blocker_for, describe_setting,
};
use super::platform::Facts;

/// `LANDLOCK_CREATE_RULESET_VERSION`: ask for the ABI instead of creating a ruleset.
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1 << 0;
/// `LANDLOCK_CREATE_RULESET_ERRATA`: ask for the fixed errata (newer kernels only).
const LANDLOCK_CREATE_RULESET_ERRATA: libc::c_uint = 1 << 1;

/// The facts for this machine and this user. Forks once (the namespace probe).
pub fn detect() -> Facts {
    probe().facts
}

/// Facts and the evidence behind them, for `sandboxer doctor`.
pub fn probe() -> Probe {
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let root = uid == 0;
    let landlock = probe_landlock();
    let namespaces = probe_namespaces(uid, gid);
    let settings: Vec<Setting> = SETTINGS
        .iter()
        .filter_map(|(name, path)| {
            let value = std::fs::read_to_string(path).ok()?.trim().to_string();
            Some(Setting {
                name: (*name).into(),
                meaning: describe_setting(name, &value),
                value,
            })
        })
        .collect();
    let legacy_tiocsti = settings
        .iter()
        .find(|s| s.name == "dev.tty.legacy_tiocsti")
        .map(|s| s.value != "0");
    let facts = Facts {
        landlock_abi: landlock.abi,
        user_namespaces: namespaces.user,
        mount_pid_namespaces: namespaces.mount_pid,
        uid,
        gid,
        namespaces_blocked_by: blocker_for(&namespaces, &settings, root),
    };
    Probe {
        facts,
        kernel: kernel_release(),
        running_as_root: root,
        landlock,
        namespaces,
        settings,
        legacy_tiocsti,
    }
}

fn kernel_release() -> Option<String> {
    // SAFETY: utsname is plain data; uname fills it or fails.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut uts) } != 0 {
        return None;
    }
    // SAFETY: the kernel NUL-terminates release.
    let release = unsafe { CStr::from_ptr(uts.release.as_ptr()) };
    Some(release.to_string_lossy().into_owned())
}

fn landlock_query(flag: libc::c_uint) -> Result<i64, i32> {
    // SAFETY: with a NULL attribute and size 0 this syscall only answers a question.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            flag,
        )
    };
    if ret < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(ret)
    }
}

fn probe_landlock() -> LandlockProbe {
    match landlock_query(LANDLOCK_CREATE_RULESET_VERSION) {
        Ok(abi) => {
            let errata = landlock_query(LANDLOCK_CREATE_RULESET_ERRATA)
                .ok()
                .map(|e| e as u32);
            LandlockProbe::for_abi(abi as u32, None, errata)
        }
        Err(errno) => {
            let why = match errno {
                libc::ENOSYS => "the kernel is built without Landlock (ENOSYS)".to_string(),
                libc::EOPNOTSUPP => "Landlock is built in but not enabled at boot \
                     (EOPNOTSUPP): add `landlock` to the `lsm=` kernel parameter"
                    .to_string(),
                other => format!("landlock_create_ruleset failed: {}", errno_text(other)),
            };
            LandlockProbe::for_abi(0, Some(why), None)
        }
    }
}

/// Steps of the namespace probe, reported by number through a pipe.
const STEPS: [&str; 10] = [
    "fork",
    "unshare(CLONE_NEWUSER)",
    "write /proc/self/setgroups",
    "write /proc/self/uid_map",
    "write /proc/self/gid_map",
    "unshare(CLONE_NEWNS | CLONE_NEWPID)",
    "make / recursively private",
    "fork PID 1 of the new PID namespace",
    "mount proc on /proc",
    "mount tmpfs",
];
const FIRST_MOUNT_PID_STEP: u32 = 5;

/// Creates the namespaces the enforcer will need, in a forked child, and reports the first
/// step that fails. The child only makes async-signal-safe calls (the test harness and the
/// CLI may have other threads): everything it writes is prepared before the fork.
fn probe_namespaces(uid: u32, gid: u32) -> NamespaceProbe {
    let uid_map = format!("{uid} {uid} 1\n").into_bytes();
    let gid_map = format!("{gid} {gid} 1\n").into_bytes();
    let mut fds = [0; 2];
    // SAFETY: fds is a valid two-int array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        return failed(0, errno);
    }
    let (read_fd, write_fd) = (fds[0], fds[1]);
    // SAFETY: the child runs only async-signal-safe code and always _exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        // SAFETY: closing our own pipe.
        unsafe {
            libc::close(read_fd);
            libc::close(write_fd);
        }
        return failed(0, errno);
    }
    if pid == 0 {
        // SAFETY: in the child; see child_probe.
        unsafe {
            libc::close(read_fd);
            child_probe(write_fd, &uid_map, &gid_map)
        }
    }
    // SAFETY: parent side: close the write end so read sees EOF when the child is gone.
    unsafe { libc::close(write_fd) };
    let mut report = [0u8; 8];
    let mut got = 0usize;
    while got < report.len() {
        // SAFETY: reading into our buffer.
        let n = unsafe {
            libc::read(
                read_fd,
                report[got..].as_mut_ptr().cast(),
                report.len() - got,
            )
        };
        if n > 0 {
            got += n as usize;
        } else if n == 0
            || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
        {
            break;
        }
    }
    // SAFETY: closing our pipe end; reaping our own child.
    let mut status = 0;
    unsafe {
        libc::close(read_fd);
        while libc::waitpid(pid, &mut status, 0) < 0
            && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
        {}
    }
    if got == report.len() {
        let step = u32::from_ne_bytes(report[..4].try_into().expect("4 bytes"));
        let errno = i32::from_ne_bytes(report[4..].try_into().expect("4 bytes"));
        return failed(step, errno);
    }
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        return NamespaceProbe {
            user: true,
            mount_pid: true,
            failed_step: None,
            errno: None,
        };
    }
    // The child died without a report (a signal, a seccomp kill): nothing is known to work.
    NamespaceProbe {
        user: false,
        mount_pid: false,
        failed_step: Some("the probe child was killed before it could report".into()),
        errno: None,
    }
}

/// A probe that stopped at `step`. The user namespace works when the failure came after
/// its maps were written.
fn failed(step: u32, errno: i32) -> NamespaceProbe {
    NamespaceProbe {
        user: step >= FIRST_MOUNT_PID_STEP,
        mount_pid: false,
        failed_step: Some(
            STEPS
                .get(step as usize)
                .copied()
                .unwrap_or("(unknown step)")
                .to_string(),
        ),
        errno: Some(errno),
    }
}

/// The forked child: only async-signal-safe calls from here on.
unsafe fn child_probe(report_fd: i32, uid_map: &[u8], gid_map: &[u8]) -> ! {
    unsafe {
        let fail = |step: u32| -> ! {
            let errno = *libc::__errno_location();
            let mut buf = [0u8; 8];
            buf[..4].copy_from_slice(&step.to_ne_bytes());
            buf[4..].copy_from_slice(&errno.to_ne_bytes());
            libc::write(report_fd, buf.as_ptr().cast(), buf.len());
            libc::_exit(1)
        };
        if libc::unshare(libc::CLONE_NEWUSER) != 0 {
            fail(1);
        }
        if !write_file(c"/proc/self/setgroups", b"deny") {
            fail(2);
        }
        if !write_file(c"/proc/self/uid_map", uid_map) {
            fail(3);
        }
        if !write_file(c"/proc/self/gid_map", gid_map) {
            fail(4);
        }
        if libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWPID) != 0 {
            fail(5);
        }
        let private = libc::MS_REC | libc::MS_PRIVATE;
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            private,
            std::ptr::null(),
        ) != 0
        {
            fail(6);
        }
        let init = libc::fork();
        if init < 0 {
            fail(7);
        }
        if init == 0 {
            // PID 1 of the new namespace; its mounts die with the namespace.
            let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
            if libc::mount(
                c"proc".as_ptr(),
                c"/proc".as_ptr(),
                c"proc".as_ptr(),
                flags,
                std::ptr::null(),
            ) != 0
            {
                fail(8);
            }
            if libc::mount(
                c"tmpfs".as_ptr(),
                c"/proc".as_ptr(),
                c"tmpfs".as_ptr(),
                flags,
                c"mode=0111,size=4k".as_ptr().cast(),
            ) != 0
            {
                fail(9);
            }
            libc::_exit(0);
        }
        let mut status = 0;
        while libc::waitpid(init, &mut status, 0) < 0 && *libc::__errno_location() == libc::EINTR {}
        // PID 1 reported its own failure through the shared pipe.
        libc::_exit(
            if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
                0
            } else {
                1
            },
        )
    }
}

/// open + write + close, all async-signal-safe.
unsafe fn write_file(path: &CStr, data: &[u8]) -> bool {
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        // Keep errno from the write: close would overwrite it on failure.
        let ok = n == data.len() as isize;
        if ok {
            libc::close(fd);
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Live: this machine (CI runs as root on a 6.18 kernel) has Landlock with scopes and
    /// working namespaces.
    #[test]
    fn detect_finds_landlock_and_namespaces_here() {
        let p = probe();
        assert!(
            p.facts.landlock_abi >= 6,
            "Landlock ABI {} ({:?})",
            p.facts.landlock_abi,
            p.landlock.error
        );
        assert!(
            p.facts.user_namespaces && p.facts.mount_pid_namespaces,
            "namespaces: {:?}",
            p.namespaces
        );
        assert_eq!(p.facts.namespaces_blocked_by, None);
        assert!(p.kernel.is_some());
    }
}
