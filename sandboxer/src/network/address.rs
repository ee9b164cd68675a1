//! What an address is, for the network's decision: the outside world, or the machine itself
//! and what only it can reach. An IPv6 address that carries an IPv4 address (mapped, compatible,
//! NAT64, 6to4) is classified by the IPv4 address it carries, since a stack or a gateway
//! on the way may deliver it there.

use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Serialize;

/// What an address reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AddressClass {
    /// Somewhere else: the public internet or a network the machine is on.
    Outside,
    /// 127.0.0.0/8, ::1: the machine's own services.
    Loopback,
    /// 0.0.0.0/8, ::: "this host" (connecting to 0.0.0.0 reaches loopback on Linux).
    Unspecified,
    /// 169.254.0.0/16, fe80::/10: the link, cloud metadata at 169.254.169.254 included.
    LinkLocal,
    /// A cloud metadata service outside link-local (fd00:ec2::254, 100.100.100.200).
    Metadata,
    /// 224.0.0.0/4, ff00::/8, 255.255.255.255 and the reserved 240.0.0.0/4.
    Multicast,
    /// One of the machine's own interface addresses.
    Own,
}

impl AddressClass {
    /// Only the outside is the outside world; every other class is the machine itself or
    /// what only it can reach.
    pub fn is_outside(self) -> bool {
        self == AddressClass::Outside
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AddressClass::Outside => "outside",
            AddressClass::Loopback => "loopback",
            AddressClass::Unspecified => "unspecified",
            AddressClass::LinkLocal => "link-local",
            AddressClass::Metadata => "cloud metadata",
            AddressClass::Multicast => "multicast or broadcast",
            AddressClass::Own => "one of this machine's addresses",
        }
    }
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The machine's own addresses (every interface's), folded like requests' (mapped → IPv4).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnAddresses(HashSet<IpAddr>);

impl OwnAddresses {
    pub fn new(addresses: impl IntoIterator<Item = IpAddr>) -> OwnAddresses {
        OwnAddresses(addresses.into_iter().map(|a| a.to_canonical()).collect())
    }

    /// This machine's interface addresses now (`getifaddrs`). Interfaces come and go (a VPN,
    /// a new DHCP lease): a decision takes them as they are then, by this or by an
    /// [`AddressWatch`](super::AddressWatch), which reads them again only when they change.
    pub fn read() -> std::io::Result<OwnAddresses> {
        super::interfaces::addresses().map(OwnAddresses::new)
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.contains(&ip.to_canonical())
    }
}

/// The class of `ip`, given the machine's own addresses.
pub fn classify(ip: IpAddr, own: &OwnAddresses) -> AddressClass {
    let class = match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => classify_v4(v4).max_with(classify_v6(v6)),
            None => classify_v6(v6),
        },
    };
    if class.is_outside() && (own.contains(ip) || embedded(ip).is_some_and(|v4| own.contains(v4))) {
        return AddressClass::Own;
    }
    class
}

fn embedded(ip: IpAddr) -> Option<IpAddr> {
    match ip {
        IpAddr::V6(v6) => embedded_v4(v6).map(IpAddr::V4),
        IpAddr::V4(_) => None,
    }
}

impl AddressClass {
    /// The stricter of two classes: anything not outside wins.
    fn max_with(self, other: AddressClass) -> AddressClass {
        if self.is_outside() { other } else { self }
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let [a, b, ..] = ip.octets();
    if a == 127 {
        AddressClass::Loopback
    } else if a == 0 {
        AddressClass::Unspecified
    } else if a == 169 && b == 254 {
        AddressClass::LinkLocal
    } else if ip == Ipv4Addr::new(100, 100, 100, 200) {
        AddressClass::Metadata
    } else if a >= 224 {
        AddressClass::Multicast
    } else {
        AddressClass::Outside
    }
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    let first = ip.segments()[0];
    if ip.is_loopback() {
        AddressClass::Loopback
    } else if ip.is_unspecified() {
        AddressClass::Unspecified
    } else if first & 0xffc0 == 0xfe80 || first & 0xffc0 == 0xfec0 {
        // fe80::/10, and the deprecated site-local fec0::/10, which stacks may still route
        // like link-local.
        AddressClass::LinkLocal
    } else if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        AddressClass::Metadata
    } else if first >> 8 == 0xff {
        AddressClass::Multicast
    } else {
        AddressClass::Outside
    }
}

/// The IPv4 address an IPv6 address carries: mapped (::ffff:0:0/96), compatible (::/96,
/// deprecated), NAT64 (64:ff9b::/96 and the local-use 64:ff9b:1::/48), 6to4 (2002::/16).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    let zero = |range: std::ops::Range<usize>| s[range].iter().all(|&x| x == 0);
    if (zero(0..5) && s[5] == 0xffff) || (zero(0..6) && !ip.is_loopback() && !ip.is_unspecified()) {
        return Some(low);
    }
    // NAT64: the well-known prefix 64:ff9b::/96, or the local-use 64:ff9b:1::/48.
    if s[0] == 0x64 && s[1] == 0xff9b && (zero(2..6) || s[2] == 1) {
        return Some(low);
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(text: &str) -> AddressClass {
        let own = OwnAddresses::new(["192.0.2.7".parse().unwrap(), "2001:db8::7".parse().unwrap()]);
        classify(text.parse().unwrap(), &own)
    }

    #[test]
    fn every_spelling_of_the_machine_is_not_outside() {
        use AddressClass::*;
        for (text, want) in [
            ("127.0.0.1", Loopback),
            ("127.255.1.2", Loopback),
            ("::1", Loopback),
            ("::ffff:127.0.0.1", Loopback),
            ("::127.0.0.1", Loopback),
            ("64:ff9b::127.0.0.1", Loopback),
            ("64:ff9b:1::7f00:1", Loopback),
            ("2002:7f00:1::", Loopback),
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", Unspecified),
            ("::", Unspecified),
            ("::ffff:0.0.0.0", Unspecified),
            ("169.254.169.254", LinkLocal),
            ("169.254.0.1", LinkLocal),
            ("::ffff:169.254.169.254", LinkLocal),
            ("64:ff9b::a9fe:a9fe", LinkLocal),
            ("fe80::1", LinkLocal),
            ("febf::1", LinkLocal),
            ("fec0::1", LinkLocal),
            ("fd00:ec2::254", Metadata),
            ("100.100.100.200", Metadata),
            ("224.0.0.1", Multicast),
            ("255.255.255.255", Multicast),
            ("240.0.0.1", Multicast),
            ("ff02::1", Multicast),
            ("192.0.2.7", Own),
            ("::ffff:192.0.2.7", Own),
            ("2001:db8::7", Own),
        ] {
            assert_eq!(class(text), want, "{text}");
        }
    }

    #[test]
    fn the_outside_is_outside() {
        for text in [
            "1.1.1.1",
            "10.0.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "2606:4700::1111",
            "::ffff:1.1.1.1",
            "64:ff9b::1.1.1.1",
            "fd00::1",
            "192.0.2.8",
        ] {
            assert_eq!(class(text), AddressClass::Outside, "{text}");
        }
    }
}
