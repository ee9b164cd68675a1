//! The gate: when the planner's self-check (the plan's gaps) runs in the caller while the
//! sandbox is being set up ([`super::run_checking`]), the command's process waits here, right
//! before `exec`, until the caller says yes.
//!
//! A Unix stream socket pair, close-on-exec. The caller keeps the sending end and sends one
//! byte, `1` for yes or `0` for no, then lets it go; every sandbox process lets go of its copy
//! as soon as it starts. The command's process reads one byte: anything but `1`, including
//! the end of the stream (the caller died without saying yes), means no, and nothing is run.
//! Sending never raises `SIGPIPE` (`MSG_NOSIGNAL`): the sandbox may have failed and gone
//! before the check ends.

use std::cell::Cell;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::sys::socket::{AddressFamily, MsgFlags, SockFlag, SockType, send, socketpair};

use super::error::{EnforceError, Layer};

pub(super) struct Gate {
    /// Read by the command's process.
    wait: OwnedFd,
    /// Written by the caller; taken (closed) once the answer is sent.
    open: Cell<Option<OwnedFd>>,
}

impl Gate {
    pub fn new() -> Result<Gate, EnforceError> {
        let (wait, open) = socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| EnforceError::os(Layer::Process, "creating the gate (socketpair)", e))?;
        Ok(Gate {
            wait,
            open: Cell::new(Some(open)),
        })
    }

    /// The caller's answer: `1` lets the command run, anything else stops it.
    pub fn open(&self, yes: bool) {
        if let Some(fd) = self.open.take() {
            // Nobody may be left to read it (the sandbox failed): that is fine.
            let _ = send(
                fd.as_raw_fd(),
                if yes { b"1" } else { b"0" },
                MsgFlags::MSG_NOSIGNAL,
            );
        }
    }

    /// In a sandbox process: closes this process's copy of the sending end, so that the
    /// caller's is the last one.
    pub fn leave_to_parent(&self) {
        if let Some(fd) = self.open.take() {
            drop(fd);
        }
    }

    /// In the command's process: waits for the caller's answer (`spin`: see
    /// [`super::sys::recv_soon`]).
    pub fn pass(&self, spin: bool) -> Result<(), EnforceError> {
        let mut answer = [0u8; 1];
        let got = super::sys::recv_soon(self.wait.as_raw_fd(), &mut answer, spin);
        match got {
            Ok(1) if answer == *b"1" => Ok(()),
            Ok(_) => Err(EnforceError::new(
                Layer::Plan,
                "the planner's check of the plan did not pass (or the caller is gone); the \
                 command is not run",
            )),
            Err(e) => Err(EnforceError::os(
                Layer::Plan,
                "waiting for the planner's check",
                e,
            )),
        }
    }
}
