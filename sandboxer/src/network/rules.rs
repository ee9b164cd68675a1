//! A policy's network rules and their one meaning, [`NetworkRules::decide`]: may a request
//! for this host and port go out, and to which addresses.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Serialize;

use super::address::{AddressClass, OwnAddresses, classify};
use super::host::{Host, HostError};
use super::pattern::{HostPattern, PatternError, is_localhost};

/// `[network] mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// No proxy, no checks: the network as the person has it.
    Open,
    /// Any outside host; never the machine itself or what only it can reach.
    Public,
    /// Only the `allow` entries (and the named loopback ports).
    Allowlist,
    /// Nothing.
    None,
}

impl NetworkMode {
    pub const ALL: [NetworkMode; 4] = [
        NetworkMode::Open,
        NetworkMode::Public,
        NetworkMode::Allowlist,
        NetworkMode::None,
    ];

    /// The word a policy file uses.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::Open => "open",
            NetworkMode::Public => "public",
            NetworkMode::Allowlist => "allowlist",
            NetworkMode::None => "none",
        }
    }

    pub fn parse(word: &str) -> Option<NetworkMode> {
        NetworkMode::ALL.into_iter().find(|m| m.as_str() == word)
    }
}

impl fmt::Display for NetworkMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A loaded `[network]` section.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NetworkRules {
    pub mode: NetworkMode,
    /// The outside hosts of `allowlist` mode (empty in every other mode).
    #[serde(serialize_with = "as_strings")]
    pub allow: Vec<HostPattern>,
    /// Ports on the machine's loopback reachable in `public` and `allowlist` mode: a local
    /// model gateway, the scripted model.
    pub loopback: Vec<u16>,
}

fn as_strings<S: serde::Serializer>(list: &[HostPattern], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(list.iter().map(ToString::to_string))
}

/// What [`NetworkRules::decide`] answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Egress {
    /// Connect to one of `to`, in order: every one was checked; connect to no other (a second
    /// lookup could answer differently).
    Allow {
        to: Vec<IpAddr>,
        reason: Allowed,
    },
    Refuse(Refused),
}

/// Why a request may go out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Allowed {
    /// `mode = "open"`.
    Open,
    /// `mode = "public"`, and every address is outside.
    Public,
    /// `mode = "allowlist"`, this entry matched, and every address is outside.
    Listed(String),
    /// A loopback port the policy names.
    Loopback(u16),
}

impl fmt::Display for Allowed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Allowed::Open => f.write_str("the network is open"),
            Allowed::Public => f.write_str("an outside host"),
            Allowed::Listed(entry) => write!(f, "allowed by {entry:?}"),
            Allowed::Loopback(port) => write!(f, "loopback port {port} is named by the policy"),
        }
    }
}

/// Why a request may not go out.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the request's host is refused: {0}")]
    Malformed(#[from] HostError),
    #[error("the network is off (mode \"none\")")]
    NoNetwork,
    #[error("{0} is not in the allowlist")]
    NotListed(String),
    #[error("loopback port {0} is not named by the policy")]
    LoopbackPort(u16),
    #[error("{host} resolves to {ip}: {class}")]
    Address {
        host: String,
        ip: IpAddr,
        class: AddressClass,
    },
    #[error("{host} does not resolve: {error}")]
    Resolve { host: String, error: String },
    #[error("{0} resolves to no address")]
    NoAddress(String),
}

impl NetworkRules {
    /// Rules with nothing listed.
    pub fn new(mode: NetworkMode) -> NetworkRules {
        NetworkRules {
            mode,
            allow: Vec::new(),
            loopback: Vec::new(),
        }
    }

    /// Rules built in code: `allow` entries as a policy writes them (see [`HostPattern`]).
    /// The mode's checks of [`Policy`](crate::Policy) loading are not made here.
    pub fn with_entries<'a>(
        mode: NetworkMode,
        allow: impl IntoIterator<Item = &'a str>,
        loopback: &[u16],
    ) -> Result<NetworkRules, PatternError> {
        Ok(NetworkRules {
            mode,
            allow: allow
                .into_iter()
                .map(HostPattern::parse)
                .collect::<Result<_, _>>()?,
            loopback: loopback.to_vec(),
        })
    }

    /// The decision for a request to `host:port`. The host is checked before `resolve` runs
    /// (a refused name is never looked up: a lookup is itself a message out), then every
    /// address it answers: one address the request may not reach refuses it all (DNS
    /// rebinding). `own` is the machine's addresses ([`OwnAddresses::read`]).
    pub fn decide(
        &self,
        host: &Host,
        port: u16,
        own: &OwnAddresses,
        resolve: impl FnOnce(&str, u16) -> io::Result<Vec<IpAddr>>,
    ) -> Egress {
        match self.check_name(host, port) {
            Ok(reason) => match self.addresses(host, port, own, resolve) {
                Ok(to) => Egress::Allow { to, reason },
                Err(refused) => Egress::Refuse(refused),
            },
            Err(refused) => Egress::Refuse(refused),
        }
    }

    /// Why the host may be looked up and tried, or why not, before any address is known.
    fn check_name(&self, host: &Host, port: u16) -> Result<Allowed, Refused> {
        let loopback = match host {
            Host::Name(name) => is_localhost(name),
            Host::Ip(ip) => classify(*ip, &OwnAddresses::default()) == AddressClass::Loopback,
        };
        match self.mode {
            NetworkMode::None => Err(Refused::NoNetwork),
            NetworkMode::Open => Ok(Allowed::Open),
            _ if loopback && self.loopback.contains(&port) => Ok(Allowed::Loopback(port)),
            _ if loopback => Err(Refused::LoopbackPort(port)),
            NetworkMode::Public => Ok(Allowed::Public),
            NetworkMode::Allowlist => self
                .allow
                .iter()
                .find(|p| p.matches(host, port))
                .map(|p| Allowed::Listed(p.to_string()))
                .ok_or_else(|| Refused::NotListed(format!("{host}:{port}"))),
        }
    }

    /// The addresses to connect to, each checked.
    fn addresses(
        &self,
        host: &Host,
        port: u16,
        own: &OwnAddresses,
        resolve: impl FnOnce(&str, u16) -> io::Result<Vec<IpAddr>>,
    ) -> Result<Vec<IpAddr>, Refused> {
        let to = match host {
            Host::Ip(ip) => vec![*ip],
            // Never asked of a resolver: /etc/hosts or a search domain could answer anything.
            Host::Name(name) if is_localhost(name) => {
                vec![Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into()]
            }
            Host::Name(name) => resolve(name, port).map_err(|e| Refused::Resolve {
                host: name.clone(),
                error: e.to_string(),
            })?,
        };
        if to.is_empty() {
            return Err(Refused::NoAddress(host.to_string()));
        }
        if self.mode == NetworkMode::Open {
            return Ok(to);
        }
        for &ip in &to {
            let class = classify(ip, own);
            let named_loopback = class == AddressClass::Loopback && self.loopback.contains(&port);
            if !class.is_outside() && !named_loopback {
                return Err(Refused::Address {
                    host: host.to_string(),
                    ip,
                    class,
                });
            }
        }
        Ok(to)
    }
}
