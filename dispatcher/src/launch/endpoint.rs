//! A launch pointed at a model endpoint of its own (a local gateway, the scripted model of
//! the tests): the URL and key checked, and the adapter's `[model_endpoint]` applied — its
//! placeholders, environment, arguments, and config files merged over the adapter's own.

use std::borrow::Cow;

use serde::Serialize;

use crate::adapter::{Adapter, FileSpec, ModelEndpointSpec, Vars};
use crate::modes::Mode;

/// The key sent when the launch gives none: endpoints that check no key (a local gateway,
/// the scripted model) still need the CLI to send one to start.
pub const DUMMY_KEY: &str = "agentworks-no-key";

/// Where a launch's CLI sends its model requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelEndpoint {
    /// `http://` or `https://`, a host, an optional port and path.
    pub url: String,
    /// Not in the launch's record of its endpoint (the CLI gets it as its adapter says:
    /// an environment variable or a config file of its private config home).
    #[serde(skip)]
    pub key: Option<String>,
    /// The model asked for (default: the adapter's `model_endpoint.model`).
    pub model: Option<String>,
}

impl ModelEndpoint {
    /// Checks `url`: a plain `http(s)://host[:port][/path]`, nothing a config file or an
    /// environment variable could misread (no spaces, quotes, control characters, user info,
    /// query or fragment).
    pub fn new(
        url: &str,
        key: Option<String>,
        model: Option<String>,
    ) -> Result<ModelEndpoint, String> {
        let rest = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"))
            .ok_or_else(|| {
                format!("model endpoint {url:?}: it must start with http:// or https://")
            })?;
        let authority = rest.split('/').next().unwrap_or_default();
        let bad = |c: char| c.is_control() || c.is_whitespace() || "\"'\\`<>{}|^".contains(c);
        if authority.is_empty() {
            return Err(format!("model endpoint {url:?}: no host"));
        }
        if url.chars().any(bad) || url.contains(['?', '#']) || authority.contains('@') {
            return Err(format!(
                "model endpoint {url:?}: only a scheme, a host, a port and a path (no spaces, \
                 quotes, braces, user info, query or fragment)"
            ));
        }
        for (what, v) in [("key", &key), ("model", &model)] {
            if let Some(v) = v
                && (v.is_empty() || v.chars().any(char::is_control))
            {
                return Err(format!(
                    "model endpoint {what}: empty or with control characters"
                ));
            }
        }
        Ok(ModelEndpoint {
            url: url.trim_end_matches('/').to_string(),
            key,
            model,
        })
    }
}

/// The adapter's endpoint section, or why this CLI cannot be pointed at one.
pub(super) fn spec(adapter: &Adapter) -> Result<&ModelEndpointSpec, String> {
    adapter.model_endpoint.as_ref().ok_or_else(|| {
        format!(
            "{} cannot be pointed at a model endpoint: its adapter ({}) has no [model_endpoint]",
            adapter.name, adapter.source
        )
    })
}

/// Adds `{model_url}`, `{model_key}` and `{model_name}`.
pub(super) fn add_vars(vars: &mut Vars, spec: &ModelEndpointSpec, ep: &ModelEndpoint) {
    vars.0.insert("model_url", ep.url.clone());
    vars.0.insert(
        "model_key",
        ep.key.clone().unwrap_or_else(|| DUMMY_KEY.into()),
    );
    vars.0.insert(
        "model_name",
        ep.model
            .clone()
            .unwrap_or_else(|| spec.model.get_ref().clone()),
    );
}

/// The config files of a launch in `mode`: the adapter's, with the endpoint's merged over a
/// file of the same place, path and format, and the endpoint's others after them.
pub(super) fn files<'a>(
    adapter: &'a Adapter,
    mode: Mode,
    spec: Option<&'a ModelEndpointSpec>,
) -> Vec<(String, Cow<'a, FileSpec>)> {
    let mut out: Vec<(String, Cow<'a, FileSpec>)> = adapter
        .config_home
        .files
        .iter()
        .enumerate()
        .filter(|(_, f)| f.applies_to(mode))
        .map(|(i, f)| (format!("config_home.files[{i}]"), Cow::Borrowed(f)))
        .collect();
    for (i, extra) in spec.iter().flat_map(|s| s.files.iter()).enumerate() {
        let same = out.iter_mut().find(|(_, f)| {
            f.base == extra.base
                && f.path.get_ref() == extra.path.get_ref()
                && f.format == extra.format
        });
        match same {
            Some((_, f)) if extra.content.is_table() => {
                merge(&mut f.to_mut().content, &extra.content)
            }
            _ => out.push((format!("model_endpoint.files[{i}]"), Cow::Borrowed(extra))),
        }
    }
    out
}

/// Merges the table `over` into `base`, key by key: tables recursively, anything else
/// replaced.
fn merge(base: &mut toml::Value, over: &toml::Value) {
    match (base, over) {
        (toml::Value::Table(b), toml::Value::Table(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(existing) if existing.is_table() && v.is_table() => merge(existing, v),
                    _ => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_that_a_config_could_misread_are_refused() {
        for ok in [
            "http://127.0.0.1:8080",
            "https://gateway.example/v1/",
            "http://[::1]:9",
        ] {
            ModelEndpoint::new(ok, None, None).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        assert_eq!(
            ModelEndpoint::new("http://h/v1/", None, None).unwrap().url,
            "http://h/v1"
        );
        for bad in [
            "127.0.0.1:8080",
            "ftp://h",
            "http://",
            "http:///x",
            "http://user:pw@h",
            "http://h/x?y=1",
            "http://h/#f",
            "http://h/a b",
            "http://h/\"",
            "http://h/\n",
            "http://h/{model}",
        ] {
            assert!(ModelEndpoint::new(bad, None, None).is_err(), "{bad}");
        }
        assert!(ModelEndpoint::new("http://h", Some(String::new()), None).is_err());
        assert!(ModelEndpoint::new("http://h", None, Some("a\nb".into())).is_err());
    }

    #[test]
    fn tables_merge_key_by_key_and_the_endpoint_wins() {
        let mut base: toml::Value =
            toml::from_str("a = 1\n[t]\nkeep = true\nover = \"old\"\n[t.deep]\nx = 1\n").unwrap();
        let over: toml::Value =
            toml::from_str("b = 2\n[t]\nover = \"new\"\n[t.deep]\ny = 2\n").unwrap();
        merge(&mut base, &over);
        let want: toml::Value = toml::from_str(
            "a = 1\nb = 2\n[t]\nkeep = true\nover = \"new\"\n[t.deep]\nx = 1\ny = 2\n",
        )
        .unwrap();
        assert_eq!(base, want);
    }
}
