//! The values of one launch for the adapters' `{name}` placeholders.

use std::collections::BTreeMap;

use sandboxer::template::Template;
use toml::Spanned;

/// Values for the placeholders of one launch.
#[derive(Debug, Clone, Default)]
pub struct Vars(pub BTreeMap<&'static str, String>);

impl Vars {
    /// Expands a template checked at load time. A variable missing here is a bug in the
    /// caller, reported as an error rather than expanded to nothing.
    pub fn expand(&self, t: &str) -> Result<String, String> {
        Template::parse(t)
            .map_err(|e| e.to_string())?
            .expand_with(|name| {
                self.0
                    .get(name)
                    .cloned()
                    .ok_or_else(|| format!("placeholder {{{name}}} has no value here"))
            })
    }

    pub fn expand_list(&self, list: Option<&Vec<Spanned<String>>>) -> Result<Vec<String>, String> {
        list.into_iter()
            .flatten()
            .map(|s| self.expand(s.get_ref()))
            .collect()
    }

    /// Expands every key and string inside a structured value.
    pub fn expand_value(&self, v: &toml::Value) -> Result<toml::Value, String> {
        Ok(match v {
            toml::Value::String(s) => toml::Value::String(self.expand(s)?),
            toml::Value::Array(a) => toml::Value::Array(
                a.iter()
                    .map(|x| self.expand_value(x))
                    .collect::<Result<_, _>>()?,
            ),
            toml::Value::Table(t) => {
                let mut out = toml::map::Map::new();
                for (k, x) in t {
                    out.insert(self.expand(k)?, self.expand_value(x)?);
                }
                toml::Value::Table(out)
            }
            other => other.clone(),
        })
    }
}
