//! The gate: when the planner's self-check (the plan's gaps) runs in the caller while the
//! sandbox is being set up ([`super::run_checking`]), the command's process waits here, right
//! before `exec`, until the caller says yes.
//!
//! A [`OneWay`] socket pair: the caller sends one byte, `1` for yes or `0` for no, then lets
//! its end go. The command's process reads one byte: anything but `1`, including the end of
//! the stream (the caller died without saying yes), means no, and nothing is run.

use std::os::fd::AsRawFd;

use super::error::{EnforceError, Layer};
use super::sys::OneWay;

pub(super) struct Gate(OneWay);

impl Gate {
    pub fn new() -> Result<Gate, EnforceError> {
        OneWay::new("the gate").map(Gate)
    }

    /// The caller's answer: `1` lets the command run, anything else stops it.
    pub fn open(&self, yes: bool) {
        self.0.say(if yes { b"1" } else { b"0" });
    }

    /// In a sandbox process: lets go of the sending end (see [`OneWay::leave_to_parent`]).
    pub fn leave_to_parent(&self) {
        self.0.leave_to_parent();
    }

    /// In the command's process: waits for the caller's answer (`spin`: see
    /// [`super::sys::recv_soon`]).
    pub fn pass(&self, spin: bool) -> Result<(), EnforceError> {
        let mut answer = [0u8; 1];
        let got = super::sys::recv_soon(self.0.receive.as_raw_fd(), &mut answer, spin);
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
