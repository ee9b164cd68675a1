//! The network's rules: a policy's `[network]` section ([`NetworkRules`]) and its one
//! meaning, [`NetworkRules::decide`], which the dispatcher's egress proxy asks for every
//! request. The rules are written down in docs/network.md.
//!
//! - `host.rs`: a request's host and port, parsed strictly (one spelling per destination);
//! - `pattern.rs`: an `allow` entry and what it matches;
//! - `address.rs`: what an address reaches (outside, loopback, link-local, the machine's own…);
//! - `interfaces.rs`: the machine's interface addresses, and a watch that reads them again
//!   only when they change;
//! - `rules.rs`: the modes and the decision;
//! - `proxy.rs`: where a sandbox reaches the proxy, and the variables that point it there;
//! - `copy.rs`: carrying one direction of a connection (the proxy's copy);
//! - `handoff.rs`: a sandbox's listeners handed to the egress proxy (Linux).

mod address;
mod copy;
#[cfg(target_os = "linux")]
pub mod handoff;
mod host;
mod interfaces;
mod pattern;
mod proxy;
mod rules;
#[cfg(test)]
mod tests;

pub use address::{AddressClass, OwnAddresses, classify};
pub use copy::{Carried, copy_stream, relay_both};
pub use host::{Host, HostError, parse_authority, parse_port};
pub use interfaces::AddressWatch;
pub use pattern::{HostPattern, PatternError};
pub use proxy::{ProxyEndpoint, ProxyError, proxy_env};
pub use rules::{Allowed, Egress, NetworkMode, NetworkRules, Refused};
