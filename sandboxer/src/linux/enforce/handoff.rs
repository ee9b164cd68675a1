//! The plan's way to PID 1 in the masks shape, whose processes start before the plan exists
//! (see [`super::Started`]).
//!
//! A [`OneWay`] socket pair: the caller writes the plan as JSON and closes its end, and PID 1
//! reads up to the end of the stream. An empty stream means the caller gave up (its planning
//! failed, or the fallback rule chose another shape, or it died): PID 1 then ends without
//! applying or running anything.

use std::os::fd::AsRawFd;

use super::error::{EnforceError, Layer};
use super::sys::OneWay;
use crate::linux::plan::Plan;

pub(super) struct Handoff(OneWay);

impl Handoff {
    pub fn new() -> Result<Handoff, EnforceError> {
        OneWay::new("the plan's socket").map(Handoff)
    }

    /// In a sandbox process: lets go of the sending end (see [`OneWay::leave_to_parent`]).
    pub fn leave_to_parent(&self) {
        self.0.leave_to_parent();
    }

    /// The caller's side: hands `plan` over and closes the sending end. A sandbox that is
    /// already gone is not an error here: its processes reported why, and the caller reads
    /// that after waiting for them.
    pub fn send(&self, plan: &Plan) -> Result<(), EnforceError> {
        let bytes = serde_json::to_vec(plan).map_err(|e| {
            EnforceError::new(Layer::Plan, format!("serialising the plan for PID 1: {e}"))
        })?;
        self.0.say(&bytes);
        Ok(())
    }

    /// The caller's side, when no plan will come: PID 1 sees the end of the stream.
    pub fn abandon(&self) {
        self.0.say(&[]);
    }

    /// In PID 1: the plan, or `None` when the caller gave up without one (`spin`: see
    /// [`super::sys::recv_soon`]).
    pub fn receive(&self, spin: bool) -> Result<Option<Plan>, EnforceError> {
        let mut bytes = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            match super::sys::recv_soon(self.0.receive.as_raw_fd(), &mut chunk, spin) {
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
