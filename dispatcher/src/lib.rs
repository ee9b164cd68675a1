//! `dispatcher`: turns "run CLI X for chat C on workflow W" into a policy, a command line and
//! an environment, and asks `sandboxer` to confine it. The only unconfined path out.

pub mod adapter;
pub mod anchor;
pub mod bridge;
pub mod clis;
pub mod contract;
pub mod denials;
pub mod doctor;
pub mod egress;
pub mod events;
pub mod grants;
pub mod ids;
pub mod launch;
pub mod modes;
pub mod platform;
pub mod programs;
pub mod scripted_model;
pub mod server;
pub mod state;
pub mod step;
pub mod test_hooks;
#[cfg(test)]
mod waist;
