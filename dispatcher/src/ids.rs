//! Chat and workflow ids. They become folder names inside protected roots, so they are
//! validated strictly: no separators, no dots at the start (no `.`, `..`, hidden names), no
//! NUL or control characters, bounded length.

use std::fmt;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} id {value:?}: {why}")]
pub struct IdError {
    pub kind: &'static str,
    pub value: String,
    pub why: &'static str,
}

const MAX_LEN: usize = 64;

/// `bytes` random bytes from the kernel, as lower-case hex: server tokens, a state root's id,
/// handshake nonces, the contract's invocation ids.
pub fn random_hex(bytes: usize) -> std::io::Result<String> {
    use std::io::Read;
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

fn validate(kind: &'static str, value: &str) -> Result<(), IdError> {
    let err = |why| {
        Err(IdError {
            kind,
            value: value.to_string(),
            why,
        })
    };
    if value.is_empty() {
        return err("it is empty");
    }
    if value.len() > MAX_LEN {
        return err("it is longer than 64 characters");
    }
    let first = value.chars().next().expect("not empty");
    if !first.is_ascii_alphanumeric() {
        return err("it must start with a letter or digit (no '.', '-', '_' first)");
    }
    if !value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    {
        return err("only letters, digits, '.', '-' and '_' are allowed (no '/', NUL, spaces)");
    }
    if value.contains("..") {
        return err("it must not contain '..'");
    }
    Ok(())
}

macro_rules! id_type {
    ($name:ident, $kind:literal) => {
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            pub fn new(value: &str) -> Result<Self, IdError> {
                validate($kind, value)?;
                Ok(Self(value.to_string()))
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(value: String) -> Result<Self, IdError> {
                Self::new(&value)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::new(s)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_type!(ChatId, "chat");
id_type!(WorkflowId, "workflow");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_ids() {
        for ok in ["chat-1", "wf_main", "a", "A.b-c_9"] {
            assert!(ChatId::new(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn refuses_hostile_ids() {
        let long = "x".repeat(65);
        for bad in [
            "", ".", "..", ".hidden", "-flag", "a/b", "a\\b", "a\0b", "a..b", "a b", "a\nb", "ü",
            &long,
        ] {
            let e = WorkflowId::new(bad).unwrap_err();
            assert_eq!(e.kind, "workflow");
        }
    }
}
