//! The decision as a whole: tables of requests per mode, and properties over every spelling
//! of the machine's addresses.

use std::io;
use std::net::{IpAddr, Ipv4Addr};

use proptest::prelude::*;

use super::*;

fn rules(mode: NetworkMode, allow: &[&str], loopback: &[u16]) -> NetworkRules {
    NetworkRules::with_entries(mode, allow.iter().copied(), loopback).unwrap()
}

fn own() -> OwnAddresses {
    OwnAddresses::new(["192.0.2.7".parse().unwrap()])
}

/// A resolver that answers from a table; a name not in it is an error.
fn dns(name: &str, _port: u16) -> io::Result<Vec<IpAddr>> {
    let answer: &[&str] = match name {
        "outside.example.com" | "a.b.example.com" => &["203.0.113.5"],
        "rebind.example.com" => &["203.0.113.5", "127.0.0.1"],
        "metadata.example.com" => &["169.254.169.254"],
        "me.example.com" => &["192.0.2.7"],
        "mapped.example.com" => &["::ffff:127.0.0.1"],
        "empty.example.com" => &[],
        _ => return Err(io::Error::new(io::ErrorKind::NotFound, "no such name")),
    };
    Ok(answer.iter().map(|a| a.parse().unwrap()).collect())
}

fn never(name: &str, _: u16) -> io::Result<Vec<IpAddr>> {
    panic!("{name} was looked up")
}

/// The decision for `authority` (parse errors refuse as the proxy does).
fn decide(rules: &NetworkRules, authority: &str) -> Egress {
    match parse_authority(authority, None) {
        Ok((host, port)) => rules.decide(&host, port, &own(), dns),
        Err(e) => Egress::Refuse(e.into()),
    }
}

fn allowed(e: &Egress) -> bool {
    matches!(e, Egress::Allow { .. })
}

#[test]
fn public_allows_the_outside_and_nothing_of_the_machine() {
    let r = rules(NetworkMode::Public, &[], &[8080]);
    for a in [
        "outside.example.com:443",
        "203.0.113.5:80",
        "[2001:db8::5]:443",
    ] {
        assert!(allowed(&decide(&r, a)), "{a}");
    }
    for a in [
        "rebind.example.com:443",
        "metadata.example.com:80",
        "me.example.com:22",
        "mapped.example.com:80",
        "empty.example.com:80",
        "unknown.example.com:80",
        "localhost:9000",
        "LOCALHOST:9000",
        "a.localhost:9000",
        "127.0.0.1:9000",
        "127.0.0.2:80",
        "[::1]:9000",
        "[::ffff:127.0.0.1]:9000",
        "[::ffff:7f00:1]:9000",
        "[64:ff9b::7f00:1]:9000",
        "[::127.0.0.1]:9000",
        "0.0.0.0:9000",
        "[::]:9000",
        "169.254.169.254:80",
        "[::ffff:169.254.169.254]:80",
        "[fe80::1]:80",
        "[fe80::1%25lo]:80",
        "192.0.2.7:22",
        "[::ffff:192.0.2.7]:22",
        "224.0.0.1:80",
        "255.255.255.255:80",
        "2130706433:80",
        "0177.0.0.1:80",
        "0x7f.1:80",
        "0x7f000001:80",
        "127.1:80",
        "017700000001:80",
        "2852039166:80",
        "localhost.:9000",
        "user@outside.example.com:443",
    ] {
        assert!(!allowed(&decide(&r, a)), "{a} allowed");
    }
}

#[test]
fn a_named_loopback_port_is_reachable_by_its_names_only() {
    let want_to = vec![IpAddr::from(Ipv4Addr::LOCALHOST), "::1".parse().unwrap()];
    for mode in [NetworkMode::Public, NetworkMode::Allowlist] {
        let r = rules(mode, &[], &[8080]);
        let (host, port) = parse_authority("localhost:8080", None).unwrap();
        assert_eq!(
            r.decide(&host, port, &own(), never),
            Egress::Allow {
                to: want_to.clone(),
                reason: Allowed::Loopback(8080)
            }
        );
        for a in ["127.0.0.1:8080", "[::1]:8080", "[::ffff:127.0.0.1]:8080"] {
            assert!(allowed(&decide(&r, a)), "{mode} {a}");
        }
        for a in [
            "localhost:8081",
            "127.0.0.1:8081",
            "0.0.0.0:8080",
            "192.0.2.7:8080",
        ] {
            assert!(!allowed(&decide(&r, a)), "{mode} {a}");
        }
    }
}

#[test]
fn allowlist_allows_its_entries_and_never_looks_up_another_name() {
    let r = rules(
        NetworkMode::Allowlist,
        &[
            "outside.example.com:443",
            "*.example.com",
            "rebind.example.com",
        ],
        &[],
    );
    assert_eq!(
        decide(&r, "outside.example.com:443"),
        Egress::Allow {
            to: vec!["203.0.113.5".parse().unwrap()],
            reason: Allowed::Listed("outside.example.com:443".into())
        }
    );
    assert!(allowed(&decide(&r, "OUTSIDE.example.com:443")));
    assert!(allowed(&decide(&r, "a.b.example.com:8443")));
    assert!(!allowed(&decide(&r, "rebind.example.com:443")), "rebinding");
    for a in [
        "example.com:443",
        "outside.example.com.:443",
        "outside.example.com.evil.com:443",
        "evil.com:443",
        "xn--utside-example-xyz.com:443",
        "203.0.113.5:443",
        "localhost:443",
    ] {
        let (host, port) = match parse_authority(a, None) {
            Ok(hp) => hp,
            Err(_) => continue,
        };
        match r.decide(&host, port, &own(), never) {
            Egress::Refuse(Refused::NotListed(_) | Refused::LoopbackPort(_)) => {}
            other => panic!("{a}: {other:?}"),
        }
    }
    let empty = rules(NetworkMode::Allowlist, &[], &[]);
    assert!(!allowed(&decide(&empty, "outside.example.com:443")));
}

#[test]
fn none_refuses_everything_and_open_checks_only_the_spelling() {
    let none = rules(NetworkMode::None, &[], &[]);
    let (host, port) = parse_authority("outside.example.com:443", None).unwrap();
    assert_eq!(
        none.decide(&host, port, &own(), never),
        Egress::Refuse(Refused::NoNetwork)
    );
    let open = rules(NetworkMode::Open, &[], &[]);
    for a in [
        "outside.example.com:443",
        "127.0.0.1:22",
        "169.254.169.254:80",
    ] {
        assert!(allowed(&decide(&open, a)), "{a}");
    }
    assert!(!allowed(&decide(&open, "0x7f.1:80")));
}

/// Every way of writing an IPv4 address that some parser accepts.
fn spellings(ip: Ipv4Addr) -> Vec<String> {
    let n = u32::from(ip);
    let [a, b, c, d] = ip.octets();
    let mut out = vec![
        format!("{n}"),
        format!("0x{n:x}"),
        format!("0X{n:X}"),
        format!("0{n:o}"),
        format!("{a}.{b}.{c}.{d}"),
        format!("0{a:o}.0{b:o}.0{c:o}.0{d:o}"),
        format!("0x{a:x}.0x{b:x}.0x{c:x}.0x{d:x}"),
        format!("{a}.{}", n & 0xff_ffff),
        format!("{a}.{b}.{}", n & 0xffff),
        format!("0x{a:x}.{}", n & 0xff_ffff),
        format!("{a:03}.{b:03}.{c:03}.{d:03}"),
        format!("[::ffff:{ip}]"),
        format!("[::ffff:{:x}:{:x}]", n >> 16, n & 0xffff),
        format!("[::{ip}]"),
        format!("[64:ff9b::{ip}]"),
        format!("[2002:{:x}:{:x}::1]", n >> 16, n & 0xffff),
        format!("{ip}."),
        format!("[{ip}]"),
    ];
    out.extend(["%31", "%2e"].iter().map(|p| format!("{ip}{p}")));
    out
}

fn machine_v4() -> impl Strategy<Value = Ipv4Addr> {
    prop_oneof![
        any::<[u8; 3]>().prop_map(|[b, c, d]| Ipv4Addr::new(127, b, c, d)),
        any::<[u8; 2]>().prop_map(|[c, d]| Ipv4Addr::new(169, 254, c, d)),
        any::<[u8; 3]>().prop_map(|[b, c, d]| Ipv4Addr::new(0, b, c, d)),
        Just(Ipv4Addr::new(192, 0, 2, 7)),
        Just(Ipv4Addr::new(255, 255, 255, 255)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// No spelling of the machine's addresses gets out in `public` or `allowlist` mode.
    #[test]
    fn no_spelling_of_the_machine_gets_out(ip in machine_v4(), port in 1u16..) {
        let modes = [
            rules(NetworkMode::Public, &[], &[]),
            rules(NetworkMode::Allowlist, &["*.example.com", "203.0.113.5"], &[]),
        ];
        for spelled in spellings(ip) {
            let a = format!("{spelled}:{port}");
            for r in &modes {
                prop_assert!(!allowed(&decide(r, &a)), "{} {}", r.mode, a);
            }
        }
    }

    /// A host that parses has one spelling: its display parses back to itself.
    #[test]
    fn a_parsed_host_has_one_spelling(text in "[a-zA-Z0-9.:\\[\\]%@_-]{0,40}") {
        if let Ok(host) = Host::parse(&text) {
            let shown = host.to_string();
            prop_assert_eq!(Host::parse(&shown), Ok(host.clone()));
            if let Host::Name(name) = &host {
                prop_assert!(name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-'));
                prop_assert!(!name.ends_with('.'));
            }
        }
    }

    /// `*.d` matches every name with labels before `d`, and never `d` itself.
    #[test]
    fn a_wildcard_never_matches_its_own_domain(
        labels in proptest::collection::vec("[a-z][a-z0-9]{0,8}", 1..4),
        domain in "[a-z][a-z0-9]{0,8}\\.[a-z]{2,6}",
        port in 1u16..,
    ) {
        let p = HostPattern::parse(&format!("*.{domain}")).unwrap();
        let sub = format!("{}.{domain}", labels.join("."));
        prop_assert!(p.matches(&Host::parse(&sub).unwrap(), port));
        prop_assert!(!p.matches(&Host::parse(&domain).unwrap(), port));
        let glued = format!("{}{domain}", labels.join(""));
        prop_assert!(!p.matches(&Host::parse(&glued).unwrap(), port));
    }
}
