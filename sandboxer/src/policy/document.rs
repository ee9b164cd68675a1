//! The policy file as written: [`PolicyDocument`] is what [`Policy::from_toml`] reads, and
//! what a program that writes policies builds and serializes ([`PolicyDocument::to_toml`]),
//! so the format has one definition. Paths stay as written (`~/…` allowed); loading resolves
//! and validates them. Every value keeps where it was read ([`Spanned`]), so that loading
//! names the line and column of what it refuses; a value built in code is from nowhere
//! ([`written`]).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
pub use toml::Spanned;

#[cfg(doc)]
use super::Policy;
use super::{Access, Base};
use crate::located::{DataFileError, LineIndex, toml_field_and_message};
use crate::network::NetworkMode;

/// A whole policy file. Field order is the file's: sections and arrays of tables are written
/// in this order, plain values first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyDocument {
    /// Always 1.
    pub version: Spanned<i64>,
    /// `open` or `closed`.
    pub base: Spanned<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protected: Vec<PathRule>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grant: Vec<GrantRule>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refuse: Vec<PathRule>,
    /// `[[guard]]`: read-only paths, like the autorun list's (see [`GuardRule`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guard: Vec<GuardRule>,
    #[serde(default)]
    pub launchers: LaunchersSection,
    #[serde(default, skip_serializing_if = "AutorunSection::is_empty")]
    pub autorun: AutorunSection,
    #[serde(default, skip_serializing_if = "ClosedSection::is_empty")]
    pub closed: ClosedSection,
    #[serde(default, skip_serializing_if = "MacosSection::is_empty")]
    pub macos: MacosSection,
    #[serde(default, skip_serializing_if = "LinuxSection::is_empty")]
    pub linux: LinuxSection,
    /// The pathname Unix sockets that may be connected to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unix_sockets: Vec<Spanned<PathBuf>>,
    /// `[network]`; absent, the launch decides (see docs/policy.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkSection>,
}

/// A `[[protected]]` or `[[refuse]]` entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathRule {
    pub path: Spanned<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// A `[[grant]]` entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantRule {
    pub path: Spanned<PathBuf>,
    /// `ro` or `rw`.
    pub access: Spanned<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// A `[[guard]]` entry: read allowed, every write refused, also before it exists.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardRule {
    pub path: Spanned<PathBuf>,
    /// What the Linux masks put there when it is missing at launch: `folder`, `file` or
    /// `none` (the default; see `profiles/autorun.toml`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<Spanned<String>>,
    /// For `missing = "file"`: the placeholder's content (default empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// `[autorun]`: the autorun guard (`profiles/autorun.toml`), on unless `guard = false`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutorunSection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<bool>,
}

impl AutorunSection {
    fn is_empty(&self) -> bool {
        self.guard.is_none()
    }
}

/// `[launchers]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchersSection {
    #[serde(default = "yes")]
    pub block: bool,
    /// More executables to refuse, on any target.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra: Vec<Spanned<PathBuf>>,
}

impl Default for LaunchersSection {
    fn default() -> Self {
        LaunchersSection {
            block: true,
            extra: Vec::new(),
        }
    }
}

fn yes() -> bool {
    true
}

/// `[closed]`: the folders a closed base opens, when not the defaults.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClosedSection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<Vec<Spanned<PathBuf>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write: Option<Vec<Spanned<PathBuf>>>,
}

impl ClosedSection {
    fn is_empty(&self) -> bool {
        self.read.is_none() && self.write.is_none()
    }
}

/// `[macos]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MacosSection {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny_mach_services: Vec<Spanned<String>>,
    /// Services refused on purpose (`[[refused]]` in profiles/macos/mach-services.toml) that
    /// this policy opens anyway, e.g. the pasteboard for pbcopy and pbpaste.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_mach_services: Vec<Spanned<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ways_out: Option<bool>,
    /// Appended to every denial the profile makes (`(with message "…")`), so the unified
    /// log's denials of this sandbox can be told from all others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_tag: Option<Spanned<String>>,
}

impl MacosSection {
    fn is_empty(&self) -> bool {
        self.deny_mach_services.is_empty()
            && self.allow_mach_services.is_empty()
            && self.ways_out.is_none()
            && self.log_tag.is_none()
    }
}

/// `[linux]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinuxSection {
    /// `auto`, `masks` or `landlock-only`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforce: Option<Spanned<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ways_out: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nested_user_namespaces: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mask_registry: Option<Spanned<PathBuf>>,
}

impl LinuxSection {
    fn is_empty(&self) -> bool {
        self.enforce.is_none()
            && self.ways_out.is_none()
            && self.nested_user_namespaces.is_none()
            && self.mask_registry.is_none()
    }
}

/// `[network]`: what a confined program may reach over the network (docs/network.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSection {
    /// `open`, `public`, `allowlist` or `none`.
    pub mode: Spanned<String>,
    /// `allowlist` mode's hosts: `api.example.com`, `*.example.com`, `host:port`, addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<Spanned<String>>,
    /// Ports on the machine's loopback reachable in `public` and `allowlist` mode.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loopback: Vec<Spanned<i64>>,
    /// `public` and `allowlist`: where the sandbox reaches the egress proxy (the dispatcher
    /// serves one per chat), its only way out: the proxy's Unix socket on Linux,
    /// `"127.0.0.1:PORT"` on macOS ([`crate::network::ProxyEndpoint`]; docs/network.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<Spanned<String>>,
}

impl NetworkSection {
    /// A section with `mode` and nothing listed.
    pub fn new(mode: NetworkMode) -> NetworkSection {
        NetworkSection {
            mode: written(mode.as_str().into()),
            allow: Vec::new(),
            loopback: Vec::new(),
            proxy: None,
        }
    }
}

/// A value built in code rather than read from a file: it is from nowhere.
pub fn written<T>(value: T) -> Spanned<T> {
    Spanned::new(0..0, value)
}

impl PolicyDocument {
    /// A version-1 document with `base` and no rules; launchers blocked, as by default.
    pub fn new(base: Base) -> PolicyDocument {
        let base = match base {
            Base::Open => "open",
            Base::Closed => "closed",
        };
        PolicyDocument {
            version: written(1),
            base: written(base.into()),
            protected: Vec::new(),
            grant: Vec::new(),
            refuse: Vec::new(),
            guard: Vec::new(),
            launchers: LaunchersSection::default(),
            autorun: AutorunSection::default(),
            closed: ClosedSection::default(),
            macos: MacosSection::default(),
            linux: LinuxSection::default(),
            unix_sockets: Vec::new(),
            network: None,
        }
    }

    /// Parses policy text without resolving it; `file` names it in errors, which say where.
    pub fn from_toml(text: &str, file: &str) -> Result<PolicyDocument, DataFileError> {
        toml::from_str(text).map_err(|e| {
            let (field, message) = toml_field_and_message(&e);
            let lines = LineIndex::new(text);
            DataFileError::at(file, &lines, e.span().map(|s| s.start), field, message)
        })
    }

    /// The document as TOML, the text [`Policy::from_toml`] reads back. Fails only for a path
    /// that is not UTF-8, which TOML cannot carry.
    pub fn to_toml(&self) -> Result<String, toml::ser::Error> {
        toml::to_string(self)
    }
}

impl PathRule {
    pub fn new(path: impl Into<PathBuf>, why: impl Into<String>) -> PathRule {
        PathRule {
            path: written(path.into()),
            why: Some(why.into()),
        }
    }
}

impl GrantRule {
    pub fn new(path: impl Into<PathBuf>, access: Access, why: impl Into<String>) -> GrantRule {
        GrantRule {
            path: written(path.into()),
            access: written(access.as_str().into()),
            why: Some(why.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Policy, ResolveOptions};
    use crate::target::Target;

    #[test]
    fn a_built_document_loads_as_written() {
        let mut doc = PolicyDocument::new(Base::Open);
        doc.protected
            .push(PathRule::new("/h/q\"uote\n]] [x", "the root"));
        doc.grant
            .push(GrantRule::new("/h/q\"uote\n]] [x/g", Access::Ro, "a grant"));
        doc.unix_sockets.push(written("/h/s.sock".into()));
        doc.linux.mask_registry = Some(written("/h/q\"uote\n]] [x/m".into()));
        let text = doc.to_toml().unwrap();
        // Plain values first, then the tables in field order.
        assert!(
            text.starts_with("version = 1\nbase = \"open\"\nunix_sockets = ["),
            "{text}"
        );
        assert_eq!(PolicyDocument::from_toml(&text, "p.toml").unwrap(), doc);
        let opts = ResolveOptions::new(Target::Linux, "/h".into(), false).unwrap();
        let policy = Policy::from_toml(&text, "p.toml", &opts).unwrap();
        assert_eq!(policy.grants[0].access, Access::Ro);
        assert_eq!(policy.grants[0].path, PathBuf::from("/h/q\"uote\n]] [x/g"));
        assert_eq!(policy.unix_sockets, [PathBuf::from("/h/s.sock")]);
    }

    #[test]
    fn parse_errors_say_where() {
        let text = "version = 1\nbase = \"open\"\nbogus = 2\n";
        let err = PolicyDocument::from_toml(text, "p.toml").unwrap_err();
        assert_eq!((err.line, err.column, err.field.as_str()), (3, 1, "bogus"));
    }
}
