//! The plan's way to PID 1 in the masks shape, whose processes start before the plan exists
//! (see [`super::Started`]).
//!
//! A Unix stream socket pair, close-on-exec. The caller keeps the sending end, writes the plan
//! as JSON and closes it; every sandbox process lets go of its copy of that end as soon as it
//! starts, so PID 1 reads up to the end of the stream. An empty stream means the caller gave
//! up (its planning failed, or the fallback rule chose another shape, or it died): PID 1 then
//! ends without applying or running anything. Sending never raises `SIGPIPE`
//! (`MSG_NOSIGNAL`): the sandbox may have failed and gone before the plan is ready.

use std::cell::Cell;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::errno::Errno;
use nix::sys::socket::{AddressFamily, MsgFlags, SockFlag, SockType, send, socketpair};

use super::error::{EnforceError, Layer};
use crate::linux::plan::Plan;

pub(super) struct Handoff {
    /// Read by PID 1.
    receive: OwnedFd,
    /// Written by the caller; taken (closed) once the plan is sent or the caller gives up.
    send: Cell<Option<OwnedFd>>,
}

impl Handoff {
    pub fn new() -> Result<Handoff, EnforceError> {
        let (receive, send) = socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| EnforceError::os(Layer::Process, "creating the plan's socket pair", e))?;
        Ok(Handoff {
            receive,
            send: Cell::new(Some(send)),
        })
    }

    /// In a sandbox process: closes this process's copy of the sending end, so that the
    /// caller's is the last one.
    pub fn leave_to_parent(&self) {
        drop(self.send.take());
    }

    /// The caller's side: hands `plan` over and closes the sending end. A sandbox that is
    /// already gone is not an error here: its processes reported why, and the caller reads
    /// that after waiting for them.
    pub fn send(&self, plan: &Plan) -> Result<(), EnforceError> {
        let Some(fd) = self.send.take() else {
            return Ok(());
        };
        let bytes = serde_json::to_vec(plan).map_err(|e| {
            EnforceError::new(Layer::Plan, format!("serialising the plan for PID 1: {e}"))
        })?;
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            match send(fd.as_raw_fd(), rest, MsgFlags::MSG_NOSIGNAL) {
                Ok(n) => rest = &rest[n..],
                Err(Errno::EINTR) => continue,
                Err(_) => break,
            }
        }
        Ok(())
    }

    /// The caller's side, when no plan will come: PID 1 sees the end of the stream.
    pub fn abandon(&self) {
        drop(self.send.take());
    }

    /// In PID 1: the plan, or `None` when the caller gave up without one (`spin`: see
    /// [`super::sys::recv_soon`]).
    pub fn receive(&self, spin: bool) -> Result<Option<Plan>, EnforceError> {
        let mut bytes = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            match super::sys::recv_soon(self.receive.as_raw_fd(), &mut chunk, spin) {
                Ok(0) => break,
                Ok(n) => bytes.extend_from_slice(&chunk[..n]),
                Err(e) => {
                    return Err(EnforceError::os(
                        Layer::Plan,
                        "reading the plan from the caller",
                        e,
                    ));
                }
            }
        }
        if bytes.is_empty() {
            return Ok(None);
        }
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            EnforceError::new(
                Layer::Plan,
                format!("the plan PID 1 received is not a plan: {e}"),
            )
        })
    }
}
