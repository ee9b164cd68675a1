//! `open_url`: a plain http(s) URL under an allowed prefix, handed to the [`Opener`].

use sandboxer::Policy;
use serde_json::{Map, Value};

use super::args;
use super::call::{Call, Done, Stop, deny, fail};
use super::catalogue::MAX_URL;
use super::opener::{OpenOutcome, Opener};

impl Call {
    /// Opens `url` if it is under a prefix of `allow` (the person's `open_url.allow`).
    pub(super) fn open_url(
        &mut self,
        policy: &Policy,
        allow: &[String],
        opener: &Opener,
        args: &Map<String, Value>,
    ) -> Result<Done, Stop> {
        let args: args::OpenUrl = args::parse(args).map_err(fail)?;
        let url = args.url.as_str();
        self.set_target(url);
        let normal = check_url(url).map_err(|e| deny(e.to_string()))?;
        let Some(prefix) = allow.iter().find(|p| prefix_allows(p, &normal)) else {
            return Err(deny(format!(
                "{url} is not under an allowed prefix (open_url.allow in config.json: {})",
                if allow.is_empty() {
                    "empty".to_string()
                } else {
                    allow.join(", ")
                }
            )));
        };
        let reason = format!("allowed by open_url.allow prefix {prefix:?}");
        match opener.open(policy, url) {
            OpenOutcome::Opened { with } => {
                Ok(Done::new(format!("opened {url} with {with}"), reason))
            }
            OpenOutcome::NotOpened { why } => Ok(Done::new(
                format!("not opened: {why}; URL: {url}"),
                format!("{reason}; not opened: {why}"),
            )),
        }
    }
}

/// Why a URL is not opened, whatever the allowed prefixes.
#[derive(Debug, thiserror::Error)]
pub enum UrlRefused {
    #[error("the URL is longer than {MAX_URL} bytes")]
    TooLong,
    #[error("{url:?} contains {c:?}; only printable ASCII without spaces or backslashes is opened")]
    Character { url: String, c: char },
    #[error("{0:?} is not a URL")]
    NotAUrl(String),
    #[error("{url:?}: only http and https URLs are opened (not {scheme}:)")]
    Scheme { url: String, scheme: String },
    #[error("{url:?}: expected {scheme}://host")]
    NoAuthority { url: String, scheme: String },
    #[error("{0:?}: URLs with user info ('@' before the host) are refused")]
    UserInfo(String),
    #[error("{0:?} has no host")]
    NoHost(String),
}

/// Checks a URL and returns it with scheme and authority lowercased, for prefix matching.
/// Only plain http(s) URLs pass: printable ASCII (no spaces, controls, backslashes or
/// non-ASCII look-alikes), a host, no user info (`https://good.example@evil.example/`).
pub fn check_url(url: &str) -> Result<String, UrlRefused> {
    if url.len() > MAX_URL {
        return Err(UrlRefused::TooLong);
    }
    if let Some(c) = url.chars().find(|c| !c.is_ascii_graphic() || *c == '\\') {
        return Err(UrlRefused::Character {
            url: url.to_string(),
            c,
        });
    }
    let Some((scheme, rest)) = url.split_once(':') else {
        return Err(UrlRefused::NotAUrl(url.to_string()));
    };
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(UrlRefused::Scheme {
            url: url.to_string(),
            scheme,
        });
    }
    let Some(rest) = rest.strip_prefix("//") else {
        return Err(UrlRefused::NoAuthority {
            url: url.to_string(),
            scheme,
        });
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.contains('@') {
        return Err(UrlRefused::UserInfo(url.to_string()));
    }
    let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
    if host.is_empty() {
        return Err(UrlRefused::NoHost(url.to_string()));
    }
    Ok(format!(
        "{scheme}://{}{tail}",
        authority.to_ascii_lowercase()
    ))
}

/// Whether an allowed prefix covers a checked URL: a prefix that ends in `/` or `://` matches
/// anything it starts; otherwise the URL must end there or go on with `/`, `?` or `#`, so
/// `https://example.com` does not allow `https://example.com.evil.net/`.
pub fn prefix_allows(prefix: &str, normal_url: &str) -> bool {
    let prefix = normalize_prefix(prefix);
    let Some(after) = normal_url.strip_prefix(prefix.as_str()) else {
        return false;
    };
    prefix.ends_with('/') || after.is_empty() || after.starts_with(['/', '?', '#'])
}

fn normalize_prefix(prefix: &str) -> String {
    match prefix.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            let (authority, tail) = rest.split_at(end);
            format!(
                "{}://{}{tail}",
                scheme.to_ascii_lowercase(),
                authority.to_ascii_lowercase()
            )
        }
        None => prefix.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            check_url("HTTPS://Example.COM/A?b#c").unwrap(),
            "https://example.com/A?b#c"
        );
        for bad in [
            "file:///etc/passwd",
            "javascript:alert(1)",
            "ftp://example.com/",
            "https:example.com",
            "https://",
            "https://:443/",
            "https://good.example@evil.example/",
            "https://example.com/a b",
            "https://example.com\\@evil",
            "https://exämple.com/",
            "https://example.com/\n",
            "mailto:x@example.com",
            "",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn prefixes_match_on_boundaries() {
        let ok = |p: &str, u: &str| prefix_allows(p, &check_url(u).unwrap());
        assert!(ok("https://", "https://anything.example/x"));
        assert!(!ok("https://", "http://anything.example/x"));
        assert!(ok("https://example.com", "https://example.com"));
        assert!(ok("https://example.com", "https://EXAMPLE.com/path"));
        assert!(ok("https://Example.com", "https://example.com?q"));
        assert!(!ok("https://example.com", "https://example.com.evil.net/"));
        assert!(!ok("https://example.com", "https://example.com:8443/"));
        assert!(ok(
            "https://example.com/docs/",
            "https://example.com/docs/a"
        ));
        assert!(!ok(
            "https://example.com/docs",
            "https://example.com/docsevil"
        ));
        assert!(ok("https://example.com/docs", "https://example.com/docs/a"));
    }
}
