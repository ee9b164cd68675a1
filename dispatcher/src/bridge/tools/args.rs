//! Each tool's arguments as a struct, read from the call's JSON object by serde. Errors name
//! the argument: `unknown argument "x"; this tool takes: path, offset, length`, `missing
//! required argument "path"`, `argument "offset": invalid type: …`.

use std::fmt::Display;

use serde::Deserialize;
use serde::de::value::MapDeserializer;
use serde::de::{self, Deserializer, IntoDeserializer, Visitor};
use serde_json::{Map, Value};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReadFile {
    pub path: String,
    /// Byte offset to start at (default 0).
    pub offset: Option<u64>,
    /// Most bytes to return (default and limit `MAX_READ`).
    pub length: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WriteFile {
    pub path: String,
    pub content: String,
    /// Create the file if it does not exist (default false).
    pub create: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListDir {
    pub path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OpenUrl {
    pub url: String,
}

/// Reads a tool's arguments; the error is said to the caller as is.
pub(super) fn parse<'de, T: Deserialize<'de>>(
    args: &'de Map<String, Value>,
) -> Result<T, ArgError> {
    T::deserialize(Arguments(args))
}

/// A bad argument, said in the bridge's words.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct ArgError(String);

/// The message, as the bridge says it to the caller.
impl From<ArgError> for String {
    fn from(ArgError(message): ArgError) -> String {
        message
    }
}

impl de::Error for ArgError {
    fn custom<T: Display>(msg: T) -> Self {
        ArgError(msg.to_string())
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        ArgError(format!(
            "unknown argument {field:?}; this tool takes: {}",
            expected.join(", ")
        ))
    }

    fn missing_field(field: &'static str) -> Self {
        ArgError(format!("missing required argument {field:?}"))
    }
}

/// The call's arguments, as a map whose values know their argument's name.
struct Arguments<'de>(&'de Map<String, Value>);

impl<'de> Deserializer<'de> for Arguments<'de> {
    type Error = ArgError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ArgError> {
        let mut map = MapDeserializer::new(
            self.0
                .iter()
                .map(|(name, value)| (name.as_str(), Named { name, value })),
        );
        let out = visitor.visit_map(&mut map)?;
        map.end()?;
        Ok(out)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

/// One argument's value; an error reading it names the argument.
struct Named<'de> {
    name: &'de str,
    value: &'de Value,
}

impl Named<'_> {
    fn located(&self, e: serde_json::Error) -> ArgError {
        ArgError(format!("argument {:?}: {e}", self.name))
    }
}

impl<'de> IntoDeserializer<'de, ArgError> for Named<'de> {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

impl<'de> Deserializer<'de> for Named<'de> {
    type Error = ArgError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ArgError> {
        self.value
            .deserialize_any(visitor)
            .map_err(|e| self.located(e))
    }

    /// `null` is an argument left out.
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ArgError> {
        self.value
            .deserialize_option(visitor)
            .map_err(|e| self.located(e))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(v: Value) -> Result<ReadFile, ArgError> {
        parse(v.as_object().unwrap())
    }

    #[test]
    fn arguments_are_read_and_bad_ones_named() {
        let a = read(json!({"path": "/a", "offset": 3, "length": null})).unwrap();
        assert_eq!((a.path.as_str(), a.offset, a.length), ("/a", Some(3), None));
        assert_eq!(
            read(json!({"path": "/a", "bogus": 1})).err().unwrap().0,
            "unknown argument \"bogus\"; this tool takes: path, offset, length"
        );
        assert_eq!(
            read(json!({})).err().unwrap().0,
            "missing required argument \"path\""
        );
        for (bad, arg) in [
            (json!({"path": 1}), "path"),
            (json!({"path": null}), "path"),
            (json!({"path": "/a", "offset": -1}), "offset"),
            (json!({"path": "/a", "length": 1.5}), "length"),
            (json!({"path": "/a", "offset": "3"}), "offset"),
        ] {
            let e = read(bad.clone()).err().unwrap().0;
            assert!(e.starts_with(&format!("argument {arg:?}: ")), "{bad}: {e}");
        }
        let w: Result<WriteFile, _> = parse(
            json!({"path": "/a", "content": "x", "create": "yes"})
                .as_object()
                .unwrap(),
        );
        assert!(w.err().unwrap().0.starts_with("argument \"create\": "));
    }
}
