//! Kernel objects the runner shares with the world outside the sandbox, each holding one
//! marker: a System V shared memory segment, a file in `/dev/shm` (POSIX shared memory), a
//! key in the runner's session keyring, and (run by root, who alone may write it) a record in
//! the kernel log. A confined harness that prints the marker reached an
//! object it must not share (docs/linux.md, "The kernel's knobs and shared objects"); the
//! unconfined control run reads all three, so no such deny is vacuous.
//!
//! The runner first joins a session keyring of its own, so the key lives only in the keyring
//! its children inherit, never in the person's. Everything is removed when dropped.

use std::ffi::CString;
use std::path::PathBuf;

use super::ContractError;

pub struct Shared {
    pub marker: String,
    /// The segment's id (`{sysv_shm}`).
    pub shm_id: i32,
    /// The file in `/dev/shm` (`{dev_shm_file}`).
    pub dev_shm_file: PathBuf,
    /// The key's description (`{session_key}`).
    pub key_description: String,
    key: Option<i64>,
}

/// The kernel log device, where the runner run by root writes its marker.
pub const KMSG: &str = "/dev/kmsg";
const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;
const KEYCTL_INVALIDATE: libc::c_long = 21;
const KEY_SPEC_SESSION_KEYRING: libc::c_long = -3;

fn os_err(what: &str) -> ContractError {
    ContractError::Io(format!(
        "shared kernel objects: {what}: {}",
        std::io::Error::last_os_error()
    ))
}

impl Shared {
    pub fn create(invocation: &str) -> Result<Shared, ContractError> {
        let marker = format!("AWMARK-{invocation}-shared");
        let mut shared = Shared {
            marker: marker.clone(),
            shm_id: -1,
            dev_shm_file: PathBuf::from(format!("/dev/shm/agentworks-contract-{invocation}")),
            key_description: format!("agentworks-contract-{invocation}"),
            key: None,
        };
        // SAFETY: plain System V calls; the segment is attached, written within its size and
        // detached before anything else uses it.
        unsafe {
            let id = libc::shmget(libc::IPC_PRIVATE, 4096, libc::IPC_CREAT | 0o600);
            if id < 0 {
                return Err(os_err("shmget"));
            }
            shared.shm_id = id;
            let at = libc::shmat(id, std::ptr::null(), 0);
            if at as isize == -1 {
                return Err(os_err("shmat"));
            }
            std::ptr::copy_nonoverlapping(marker.as_ptr(), at.cast::<u8>(), marker.len());
            libc::shmdt(at);
        }
        std::fs::write(&shared.dev_shm_file, &marker).map_err(|e| {
            ContractError::Io(format!("writing {}: {e}", shared.dev_shm_file.display()))
        })?;
        // SAFETY: keyctl with a NULL name makes and joins a new anonymous session keyring.
        if unsafe { libc::syscall(libc::SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, 0) } < 0 {
            return Err(os_err("joining a session keyring of the runner's own"));
        }
        let desc = CString::new(shared.key_description.clone()).expect("no NUL");
        // SAFETY: the strings and the payload outlive the call; sizes are passed.
        let key = unsafe {
            libc::syscall(
                libc::SYS_add_key,
                c"user".as_ptr(),
                desc.as_ptr(),
                marker.as_ptr(),
                marker.len(),
                KEY_SPEC_SESSION_KEYRING,
            )
        };
        if key < 0 {
            return Err(os_err("add_key"));
        }
        shared.key = Some(key);
        // Only root may write the kernel log; for anyone else the `kmsg-read` probe is
        // vacuous (ProbeOp::needs_root), so a refusal here is no error.
        // SAFETY: geteuid has no failure and no memory effects.
        if unsafe { libc::geteuid() } == 0 {
            std::fs::OpenOptions::new()
                .write(true)
                .open(KMSG)
                .and_then(|mut f| {
                    std::io::Write::write_all(
                        &mut f,
                        format!("agentworks contract: {marker}\n").as_bytes(),
                    )
                })
                .map_err(|e| ContractError::Io(format!("writing the marker to {KMSG}: {e}")))?;
        }
        Ok(shared)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if self.shm_id >= 0 {
            // SAFETY: removes the segment the runner made.
            unsafe { libc::shmctl(self.shm_id, libc::IPC_RMID, std::ptr::null_mut()) };
        }
        let _ = std::fs::remove_file(&self.dev_shm_file);
        if let Some(key) = self.key {
            // SAFETY: invalidates the key the runner made.
            unsafe { libc::syscall(libc::SYS_keyctl, KEYCTL_INVALIDATE, key) };
        }
    }
}
