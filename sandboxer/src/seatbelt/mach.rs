//! The Mach services a confined process may look up (`profiles/macos/mach-services.toml`,
//! embedded): an allowlist, since some services run code outside the caller's sandbox on its
//! behalf (Foundation's UserScriptService, Automator's runner, the Shortcuts daemon,
//! CoreSimulator, the login-items list, the window server, the Dock) and a list of refusals
//! can never name them all. Each entry cites a working public profile that allows it.

use std::sync::OnceLock;

use serde::Deserialize;
use toml::Spanned;

use super::escape::string_literal;
use crate::located::{DataFileError, LineIndex, toml_field_and_message};

/// The embedded list.
pub const MACH_SERVICES_TOML: &str = include_str!("../../../profiles/macos/mach-services.toml");

/// One allowed service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachService {
    /// The global name, as `(global-name NAME)` matches it.
    pub name: String,
    pub why: String,
}

/// The list: the services allowed, the resolver's, which only an open network reaches, and
/// names refused on purpose (each with why: tests hold every profile to them).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MachServices {
    pub services: Vec<MachService>,
    /// Services a peer or a request names that no profile allows here, and why.
    pub refused: Vec<MachService>,
    /// The system resolver's services: never allowed unless `[network]` mode is `open`.
    pub resolvers: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    version: Spanned<i64>,
    #[serde(default)]
    resolvers: Vec<Spanned<String>>,
    #[serde(default)]
    service: Vec<RawService>,
    #[serde(default)]
    refused: Vec<RawService>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawService {
    name: Spanned<String>,
    why: Spanned<String>,
}

/// Reads an allowlist; errors name `file`, the line and the field (`service[3].name`).
pub fn parse(text: &str, file: &str) -> Result<MachServices, DataFileError> {
    let lines = LineIndex::new(text);
    let err = |offset: Option<usize>, field: String, message: String| {
        DataFileError::at(file, &lines, offset, field, message)
    };
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let (field, message) = toml_field_and_message(&e);
        err(e.span().map(|s| s.start), field, message)
    })?;
    if *raw.version.get_ref() != 1 {
        return Err(err(
            Some(raw.version.span().start),
            "version".into(),
            format!(
                "unsupported Mach services list version {}; this sandboxer reads version 1",
                raw.version.get_ref()
            ),
        ));
    }
    let entries = |table: &str, list: &[RawService], why: &str| {
        let mut out: Vec<MachService> = Vec::with_capacity(list.len());
        for (i, s) in list.iter().enumerate() {
            let at = Some(s.name.span().start);
            let name = s.name.get_ref();
            if let Some(problem) = not_a_name(name) {
                return Err(err(at, format!("{table}[{i}].name"), problem));
            }
            if out.iter().any(|o| o.name == *name) {
                return Err(err(
                    at,
                    format!("{table}[{i}].name"),
                    format!("{name:?} is listed twice"),
                ));
            }
            if s.why.get_ref().trim().is_empty() {
                return Err(err(
                    Some(s.why.span().start),
                    format!("{table}[{i}].why"),
                    why.into(),
                ));
            }
            out.push(MachService {
                name: name.clone(),
                why: s.why.get_ref().clone(),
            });
        }
        Ok(out)
    };
    let out = entries(
        "service",
        &raw.service,
        "say why the service is needed and which working profile allows it",
    )?;
    let refused = entries(
        "refused",
        &raw.refused,
        "say why the service is refused (what a chat could do with it)",
    )?;
    if let Some((i, r)) = raw
        .refused
        .iter()
        .enumerate()
        .find(|(_, r)| out.iter().any(|s| s.name == *r.name.get_ref()))
    {
        return Err(err(
            Some(r.name.span().start),
            format!("refused[{i}].name"),
            format!(
                "{:?} is also listed as allowed ([[service]])",
                r.name.get_ref()
            ),
        ));
    }
    let mut resolvers = Vec::with_capacity(raw.resolvers.len());
    for (i, r) in raw.resolvers.iter().enumerate() {
        let name = r.get_ref();
        if let Some(problem) = not_a_name(name) {
            return Err(err(
                Some(r.span().start),
                format!("resolvers[{i}]"),
                problem,
            ));
        }
        resolvers.push(name.clone());
    }
    Ok(MachServices {
        services: out,
        refused,
        resolvers,
    })
}

/// Why `name` cannot be a `(global-name …)` of the profile, if it cannot.
fn not_a_name(name: &str) -> Option<String> {
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Some(format!("{name:?} is not a Mach service name"));
    }
    string_literal(name).err().map(|e| e.to_string())
}

/// The embedded list (parsed once per process).
pub fn embedded() -> &'static MachServices {
    static LIST: OnceLock<MachServices> = OnceLock::new();
    LIST.get_or_init(|| {
        parse(MACH_SERVICES_TOML, "(embedded macos/mach-services.toml)")
            .expect("profiles/macos/mach-services.toml is valid (checked by a unit test)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::LauncherSet;
    use crate::target::Target;

    #[test]
    fn the_embedded_list_loads_and_cites_a_profile() {
        let list = embedded();
        assert!(
            list.services
                .iter()
                .any(|s| s.name == "com.apple.system.opendirectoryd.libinfo")
        );
        for s in &list.services {
            assert!(
                ["codex", "srt", "gemini", "chromium"]
                    .iter()
                    .any(|src| s.why.contains(src)),
                "{} cites no working profile",
                s.name
            );
        }
    }

    /// A launcher service is never on the allowlist; the only name under a launcher prefix is
    /// the read-only LaunchServices map.
    #[test]
    fn no_launcher_is_allowed() {
        let launchers = LauncherSet::embedded(Target::Macos);
        for s in &embedded().services {
            assert!(
                !launchers.mach_services.iter().any(|m| m.name == s.name),
                "{}",
                s.name
            );
            if launchers
                .mach_prefixes
                .iter()
                .any(|p| s.name.starts_with(&p.name))
            {
                assert_eq!(s.name, "com.apple.lsd.mapdb");
            }
        }
    }

    #[test]
    fn a_refused_name_is_never_also_allowed() {
        let e = parse(
            "version = 1\n[[service]]\nname = \"a\"\nwhy = \"x\"\n[[refused]]\nname = \"a\"\nwhy = \"y\"\n",
            "m.toml",
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (6, "refused[0].name"), "{e}");
        let e = parse(
            "version = 1\n[[refused]]\nname = \"b\"\nwhy = \"\"\n",
            "m.toml",
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (4, "refused[0].why"), "{e}");
        assert!(!embedded().refused.is_empty());
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let e = parse(
            "version = 1\n[[service]]\nname = \"a b\"\nwhy = \"x\"\n",
            "m.toml",
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (3, "service[0].name"), "{e}");
        assert!(e.to_string().starts_with("m.toml:3:"), "{e}");
        let e = parse(
            "version = 1\n[[service]]\nname = \"a\"\nwhy = \"x\"\n[[service]]\nname = \"a\"\nwhy = \"y\"\n",
            "m.toml",
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (6, "service[1].name"), "{e}");
        let e = parse(
            "version = 1\n[[service]]\nname = \"a\"\nwhy = \" \"\n",
            "m.toml",
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (4, "service[0].why"), "{e}");
        let e = parse("version = 1\n[[service]]\nname = \"a\"\n", "m.toml").unwrap_err();
        assert_eq!(e.field, "why", "{e}");
        let e = parse("version = 2\n", "m.toml").unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (1, "version"), "{e}");
        let e = parse("version = 1\n[[service]]\nnom = \"a\"\n", "m.toml").unwrap_err();
        assert_eq!(e.field, "nom", "{e}");
        let e = parse("version = 1\nresolvers = [\"ok\", \"a b\"]\n", "m.toml").unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (2, "resolvers[1]"), "{e}");
    }

    /// The resolver's XPC service is named, and none of the resolver's services is allowed
    /// unconditionally by the list (the renderer leaves them out unless the network is open).
    #[test]
    fn the_resolvers_are_named() {
        let list = embedded();
        assert!(
            list.resolvers
                .iter()
                .any(|r| r == "com.apple.dnssd.service")
        );
        assert!(
            list.resolvers
                .iter()
                .any(|r| r == "com.apple.mDNSResponder")
        );
    }
}
