//! Loading `[network]`: the section as written → [`NetworkRules`], every entry checked, every
//! error at its place. An entry that would mean nothing in the section's mode is an error, as
//! a grant outside every protected root is: a policy says what it means.

use std::ops::Range;

use super::document::NetworkSection;
use super::load::PolicyError;
use crate::network::{HostPattern, NetworkMode, NetworkRules};

/// The rules of `section`; `error` makes a located error from a span, a field and a message.
pub(super) fn rules(
    section: &NetworkSection,
    error: impl Fn(Range<usize>, &str, String) -> PolicyError,
) -> Result<NetworkRules, PolicyError> {
    let mode = NetworkMode::parse(section.mode.get_ref()).ok_or_else(|| {
        error(
            section.mode.span(),
            "network.mode",
            format!(
                "unknown mode {:?}; expected \"open\", \"public\", \"allowlist\" or \"none\"",
                section.mode.get_ref()
            ),
        )
    })?;
    let mut rules = NetworkRules::new(mode);

    if let Some(first) = section.allow.first()
        && mode != NetworkMode::Allowlist
    {
        return Err(error(
            first.span(),
            "network.allow",
            format!(
                "allow lists the hosts of mode \"allowlist\"; in mode \"{mode}\" it means \
                 nothing (remove it or change the mode)"
            ),
        ));
    }
    for (i, entry) in section.allow.iter().enumerate() {
        let pattern = HostPattern::parse(entry.get_ref()).map_err(|e| {
            error(
                entry.span(),
                &format!("network.allow[{i}]"),
                format!("{:?}: {e}", entry.get_ref()),
            )
        })?;
        if !rules.allow.contains(&pattern) {
            rules.allow.push(pattern);
        }
    }

    if let Some(first) = section.loopback.first()
        && matches!(mode, NetworkMode::Open | NetworkMode::None)
    {
        let means = match mode {
            NetworkMode::Open => "every port is reachable already",
            _ => "nothing is reachable",
        };
        return Err(error(
            first.span(),
            "network.loopback",
            format!("in mode \"{mode}\" {means}; loopback means nothing (remove it)"),
        ));
    }
    for (i, port) in section.loopback.iter().enumerate() {
        let port_number = u16::try_from(*port.get_ref())
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| {
                error(
                    port.span(),
                    &format!("network.loopback[{i}]"),
                    format!("{} is not a port (1 to 65535)", port.get_ref()),
                )
            })?;
        if !rules.loopback.contains(&port_number) {
            rules.loopback.push(port_number);
        }
    }
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use crate::network::{Host, NetworkMode};
    use crate::policy::{Policy, PolicyDocument, ResolveOptions};
    use crate::target::Target;

    fn load(network: &str) -> Result<Policy, crate::PolicyError> {
        let text = format!("version = 1\nbase = \"open\"\n\n[network]\n{network}");
        let opts = ResolveOptions::new(Target::Linux, "/h".into(), false).unwrap();
        Policy::from_toml(&text, "p.toml", &opts)
    }

    #[test]
    fn a_section_loads_into_rules() {
        let p = load(
            "mode = \"allowlist\"\nallow = [\"API.example.com\", \"*.example.org:443\", \
             \"api.example.com\"]\nloopback = [8080, 8080, 9000]\n",
        )
        .unwrap();
        let rules = p.network.unwrap();
        assert_eq!(rules.mode, NetworkMode::Allowlist);
        let shown: Vec<String> = rules.allow.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["api.example.com", "*.example.org:443"]);
        assert_eq!(rules.loopback, [8080, 9000]);
        assert!(rules.allow[1].matches(&Host::parse("a.example.org").unwrap(), 443));
        for mode in ["open", "public", "none"] {
            let p = load(&format!("mode = \"{mode}\"\n")).unwrap();
            assert_eq!(p.network.unwrap().mode.as_str(), mode);
        }
        assert!(load("mode = \"public\"\nloopback = [8080]\n").is_ok());
        let opts = ResolveOptions::new(Target::Linux, "/h".into(), false).unwrap();
        let none = Policy::from_toml("version = 1\nbase = \"open\"\n", "p.toml", &opts).unwrap();
        assert_eq!(none.network, None);
    }

    #[test]
    fn bad_sections_say_where_and_why() {
        for (section, line, column, field, says) in [
            ("mode = \"closed\"\n", 5, 8, "network.mode", "unknown mode"),
            ("allow = []\n", 4, 1, "mode", "missing field"),
            (
                "mode = \"public\"\nbogus = 1\n",
                6,
                1,
                "bogus",
                "unknown field",
            ),
            (
                "mode = \"allowlist\"\nallow = [\"ok.example.com\", \"bad.example.com.\"]\n",
                6,
                28,
                "network.allow[1]",
                "ends with a dot",
            ),
            (
                "mode = \"allowlist\"\nallow = [\"127.0.0.1:8080\"]\n",
                6,
                10,
                "network.allow[0]",
                "loopback = [port]",
            ),
            (
                "mode = \"allowlist\"\nallow = [\"169.254.169.254\"]\n",
                6,
                10,
                "network.allow[0]",
                "never reachable",
            ),
            (
                "mode = \"allowlist\"\nallow = [\"*.com\"]\n",
                6,
                10,
                "network.allow[0]",
                "top-level",
            ),
            (
                "mode = \"public\"\nallow = [\"example.com\"]\n",
                6,
                10,
                "network.allow",
                "means nothing",
            ),
            (
                "mode = \"none\"\nloopback = [8080]\n",
                6,
                13,
                "network.loopback",
                "nothing is reachable",
            ),
            (
                "mode = \"open\"\nloopback = [8080]\n",
                6,
                13,
                "network.loopback",
                "already",
            ),
            (
                "mode = \"public\"\nloopback = [0]\n",
                6,
                13,
                "network.loopback[0]",
                "not a port",
            ),
            (
                "mode = \"public\"\nloopback = [65536]\n",
                6,
                13,
                "network.loopback[0]",
                "not a port",
            ),
        ] {
            let e = load(section).unwrap_err();
            assert_eq!(
                (e.line, e.column, e.field.as_str()),
                (line, column, field),
                "{section}: {e}"
            );
            assert!(e.message.contains(says), "{section}: {e}");
        }
    }

    fn load_for(target: Target, network: &str) -> Result<Policy, crate::PolicyError> {
        let text = format!("version = 1\nbase = \"open\"\n\n[network]\n{network}");
        let opts = ResolveOptions::new(target, "/h".into(), false).unwrap();
        Policy::from_toml(&text, "p.toml", &opts)
    }

    #[test]
    fn the_proxy_is_a_socket_on_linux_and_a_loopback_port_on_macos() {
        use crate::network::ProxyEndpoint;
        let linux = load_for(
            Target::Linux,
            "mode = \"public\"\nproxy = \"/run/a/./e.sock\"\n",
        );
        assert_eq!(
            linux.unwrap().network_proxy,
            Some(ProxyEndpoint::Socket("/run/a/e.sock".into()))
        );
        let mac = load_for(
            Target::Macos,
            "mode = \"allowlist\"\nproxy = \"127.0.0.1:49152\"\n",
        );
        assert_eq!(
            mac.unwrap().network_proxy,
            Some(ProxyEndpoint::Loopback(49152))
        );
        for (target, value, says) in [
            (Target::Linux, "127.0.0.1:49152", "on Linux the proxy is"),
            (Target::Linux, "e.sock", "on Linux the proxy is"),
            (Target::Linux, "/run/../e.sock", "contains '..'"),
            (Target::Macos, "/run/e.sock", "on macOS the proxy is"),
            (Target::Macos, "127.0.0.1:0", "on macOS the proxy is"),
            (Target::Macos, "[::1]:49152", "on macOS the proxy is"),
            (Target::Macos, "192.0.2.1:49152", "on macOS the proxy is"),
        ] {
            let e =
                load_for(target, &format!("mode = \"public\"\nproxy = \"{value}\"\n")).unwrap_err();
            assert_eq!(
                (e.line, e.column, e.field.as_str()),
                (6, 9, "network.proxy"),
                "{value}: {e}"
            );
            assert!(e.message.contains(says), "{value}: {e}");
        }
        // In a mode without a proxy it means nothing, on either target.
        for target in [Target::Linux, Target::Macos] {
            let e = load_for(target, "mode = \"none\"\nproxy = \"127.0.0.1:49152\"\n").unwrap_err();
            assert!(e.message.contains("means nothing"), "{e}");
        }
    }

    #[test]
    fn a_built_section_round_trips() {
        let mut doc = PolicyDocument::new(crate::Base::Open);
        let mut section = super::NetworkSection::new(NetworkMode::Allowlist);
        section.allow.push(crate::written("api.example.com".into()));
        section.loopback.push(crate::written(8080));
        doc.network = Some(section);
        let text = doc.to_toml().unwrap();
        assert_eq!(PolicyDocument::from_toml(&text, "p.toml").unwrap(), doc);
        let opts = ResolveOptions::new(Target::Linux, "/h".into(), false).unwrap();
        let rules = Policy::from_toml(&text, "p.toml", &opts)
            .unwrap()
            .network
            .unwrap();
        assert_eq!(rules.loopback, [8080]);
    }
}
