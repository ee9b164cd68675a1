//! What the proxy reports: one [`EgressEvent`] per client connection, for the chat's events.

use std::fmt;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// What became of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EgressVerdict {
    /// Allowed and connected; the bytes were relayed.
    Allow,
    /// Refused by the policy or for its form: nothing was sent anywhere.
    Refuse,
    /// Allowed, but no checked address answered.
    Fail,
}

impl fmt::Display for EgressVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EgressVerdict::Allow => "allow",
            EgressVerdict::Refuse => "refuse",
            EgressVerdict::Fail => "fail",
        })
    }
}

/// One client connection's request and what became of it. Reported when it is refused, or
/// when an allowed connection ends (then with its byte counts).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressEvent {
    /// `CONNECT`, or the plain HTTP method.
    pub method: String,
    /// The host as parsed (lower case, an address in its one spelling), or the request's
    /// target as sent (quoted, cut at 200 characters) when it did not parse.
    pub host: String,
    pub port: Option<u16>,
    pub verdict: EgressVerdict,
    pub reason: String,
    /// The checked address the proxy connected to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<SocketAddr>,
    /// Bytes from the client to the host (for plain HTTP, the forwarded head included).
    pub bytes_up: u64,
    /// Bytes from the host to the client.
    pub bytes_down: u64,
}

/// Where events go: the dispatcher records them as chat events.
pub type Sink = dyn Fn(EgressEvent) + Send + Sync;
