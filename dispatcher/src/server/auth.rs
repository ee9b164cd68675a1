//! Mutual proof of the state root's server token, without the token ever crossing the
//! connection.
//!
//! The token (`config.json`'s `server_token`, in the protected state root) is the key of
//! HMAC-SHA256. A call takes two connections:
//!
//! 1. `POST /v1/hello` with `{"client_nonce": N_c}` (32 random bytes, hex). The server answers
//!    `{"server_nonce": N_s, "server_proof": P}` with
//!    `P = HMAC(token, "agentworks-server-proof-v1" ‖ N_c ‖ N_s ‖ port)`, `port` the one it
//!    listens on. The client checks `P` before it sends anything else: a listener that does
//!    not hold the token (a squatter on a stale or freed port) cannot answer, and a relay to
//!    the real server on another port gets a proof for the wrong port.
//! 2. The request itself with
//!    `Authorization: Agentworks-HMAC nonce=N_s, mac=M`,
//!    `M = HMAC(token, "agentworks-request-v1" ‖ N_c ‖ N_s ‖ port ‖ method ‖ target ‖ SHA-256(body))`.
//!    The server takes `N_s` out of its table of open handshakes (single use, at most
//!    [`HANDSHAKE_TTL`] old), recomputes `M` and compares in constant time.
//!
//! A squatter learns `N_c`, a random number; a recorded request names a nonce that is already
//! spent and a MAC bound to one method, path and body. The bearer token alone is refused.
//! Every field is length-prefixed so that no two inputs share an encoding.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use super::http::Request;

/// The `Authorization` scheme of a request that carries a proof.
pub const SCHEME: &str = "Agentworks-HMAC";
/// The route of step 1 (no `Authorization`).
pub const HELLO_PATH: &str = "/v1/hello";
/// A handshake must be used within this time.
pub const HANDSHAKE_TTL: Duration = Duration::from_secs(30);
/// Open handshakes kept at most; past it the oldest is dropped (a flood of hellos can only
/// make a client retry, never let anyone in).
pub const MAX_OPEN_HANDSHAKES: usize = 1024;
/// Bytes of a nonce (hex on the wire: twice as many digits).
pub const NONCE_BYTES: usize = 32;

type HmacSha256 = Hmac<Sha256>;

/// A fresh random nonce, as hex.
pub fn new_nonce() -> std::io::Result<String> {
    crate::ids::random_hex(NONCE_BYTES)
}

/// Whether `s` looks like a nonce: exactly [`NONCE_BYTES`] bytes of lower-case hex.
pub fn is_nonce(s: &str) -> bool {
    s.len() == 2 * NONCE_BYTES && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// HMAC over length-prefixed fields, so that no two field lists share an encoding.
fn mac(token: &str, fields: &[&[u8]]) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(token.as_bytes()).expect("HMAC takes any key length");
    for f in fields {
        m.update(&(f.len() as u64).to_be_bytes());
        m.update(f);
    }
    m
}

fn proof_mac(token: &str, client_nonce: &str, server_nonce: &str, port: u16) -> HmacSha256 {
    mac(
        token,
        &[
            b"agentworks-server-proof-v1",
            client_nonce.as_bytes(),
            server_nonce.as_bytes(),
            &port.to_be_bytes(),
        ],
    )
}

/// What the server answers in step 1, as hex.
pub fn server_proof(token: &str, client_nonce: &str, server_nonce: &str, port: u16) -> String {
    hex(&proof_mac(token, client_nonce, server_nonce, port)
        .finalize()
        .into_bytes())
}

/// Whether `proof` is the server proof for these nonces and port (constant time).
pub fn proof_ok(
    token: &str,
    client_nonce: &str,
    server_nonce: &str,
    port: u16,
    proof: &str,
) -> bool {
    unhex(proof).is_some_and(|p| {
        proof_mac(token, client_nonce, server_nonce, port)
            .verify_slice(&p)
            .is_ok()
    })
}

/// What a request is bound to.
pub struct Binding<'a> {
    pub port: u16,
    pub method: &'a str,
    /// The request target: path and `?query` as sent.
    pub target: &'a str,
    pub body: &'a [u8],
}

fn request_mac(token: &str, client_nonce: &str, server_nonce: &str, b: &Binding<'_>) -> HmacSha256 {
    let body_hash = Sha256::digest(b.body);
    mac(
        token,
        &[
            b"agentworks-request-v1",
            client_nonce.as_bytes(),
            server_nonce.as_bytes(),
            &b.port.to_be_bytes(),
            b.method.as_bytes(),
            b.target.as_bytes(),
            &body_hash,
        ],
    )
}

/// The `Authorization` value of step 2.
pub fn authorization(
    token: &str,
    client_nonce: &str,
    server_nonce: &str,
    binding: &Binding<'_>,
) -> String {
    let m = request_mac(token, client_nonce, server_nonce, binding)
        .finalize()
        .into_bytes();
    format!("{SCHEME} nonce={server_nonce}, mac={}", hex(&m))
}

/// The server's side: open handshakes by server nonce.
pub struct Handshakes {
    token: String,
    port: u16,
    open: Mutex<HashMap<String, Open>>,
}

struct Open {
    client_nonce: String,
    until: Instant,
}

/// Why a request is not authenticated (said in the 401).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "no proof: start with POST /v1/hello {{\"client_nonce\": …}}, then send \
         Authorization: Agentworks-HMAC nonce=<server_nonce>, mac=<request MAC> \
         (a bearer token alone is not accepted)"
    )]
    Missing,
    #[error("malformed Authorization: expected Agentworks-HMAC nonce=<64 hex>, mac=<64 hex>")]
    Malformed,
    #[error("unknown, used or expired handshake: start again with POST /v1/hello")]
    UnknownNonce,
    #[error("wrong request MAC")]
    WrongMac,
}

impl Handshakes {
    pub fn new(token: String, port: u16) -> Handshakes {
        Handshakes {
            token,
            port,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// Step 1: a fresh server nonce for `client_nonce`, and the proof.
    pub fn hello(&self, client_nonce: &str) -> std::io::Result<(String, String)> {
        let server_nonce = new_nonce()?;
        let proof = server_proof(&self.token, client_nonce, &server_nonce, self.port);
        let now = Instant::now();
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|_, o| o.until > now);
        if open.len() >= MAX_OPEN_HANDSHAKES
            && let Some(oldest) = open
                .iter()
                .min_by_key(|(_, o)| o.until)
                .map(|(k, _)| k.clone())
        {
            open.remove(&oldest);
        }
        open.insert(
            server_nonce.clone(),
            Open {
                client_nonce: client_nonce.to_string(),
                until: now + HANDSHAKE_TTL,
            },
        );
        Ok((server_nonce, proof))
    }

    /// Step 2: whether `req` carries a valid proof; its handshake is spent either way.
    pub fn check(&self, req: &Request) -> Result<(), Refusal> {
        let mut values = req.header_values("authorization");
        let (Some(value), None) = (values.next(), values.next()) else {
            return Err(Refusal::Missing);
        };
        let Some((scheme, params)) = value.split_once(' ') else {
            return Err(Refusal::Missing);
        };
        if !scheme.eq_ignore_ascii_case(SCHEME) {
            return Err(Refusal::Missing);
        }
        let (nonce, mac) = parse_params(params).ok_or(Refusal::Malformed)?;
        let open = {
            let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
            open.remove(nonce)
        };
        let Some(open) = open.filter(|o| o.until > Instant::now()) else {
            return Err(Refusal::UnknownNonce);
        };
        let target = match &req.query {
            Some(q) => format!("{}?{q}", req.path),
            None => req.path.clone(),
        };
        let binding = Binding {
            port: self.port,
            method: &req.method,
            target: &target,
            body: &req.body,
        };
        let expected = request_mac(&self.token, &open.client_nonce, nonce, &binding);
        expected.verify_slice(&mac).map_err(|_| Refusal::WrongMac)
    }
}

/// `nonce=<hex>, mac=<hex>`, in this order, nothing else.
fn parse_params(params: &str) -> Option<(&str, Vec<u8>)> {
    let (n, m) = params.split_once(',')?;
    let nonce = n.trim().strip_prefix("nonce=")?;
    let mac = m.trim().strip_prefix("mac=")?;
    if !is_nonce(nonce) || mac.len() != 64 {
        return None;
    }
    Some((nonce, unhex(mac)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, target: &str, auth: Option<&str>, body: &[u8]) -> Request {
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p.to_string(), Some(q.to_string())),
            None => (target.to_string(), None),
        };
        Request {
            method: method.into(),
            path,
            query,
            headers: auth
                .map(|a| vec![("authorization".to_string(), a.to_string())])
                .unwrap_or_default(),
            body: body.to_vec(),
        }
    }

    #[test]
    fn a_proof_passes_once_and_only_for_what_it_binds() {
        let token = "ab".repeat(32);
        let hs = Handshakes::new(token.clone(), 4000);
        let cn = new_nonce().unwrap();
        let (sn, proof) = hs.hello(&cn).unwrap();
        assert!(proof_ok(&token, &cn, &sn, 4000, &proof));
        // The proof is for this port, these nonces and this token only.
        assert!(!proof_ok(&token, &cn, &sn, 4001, &proof));
        assert!(!proof_ok(&"cd".repeat(32), &cn, &sn, 4000, &proof));
        assert!(!proof_ok(&token, &sn, &cn, 4000, &proof));
        let b = |method, target, body| Binding {
            port: 4000,
            method,
            target,
            body,
        };
        let other = "cd".repeat(32);
        let wrong: [(&str, Binding<'_>); 4] = [
            (&token, b("GET", "/v1/x?a=1", b"{}")),
            (&token, b("POST", "/v1/x?a=2", b"{}")),
            (&token, b("POST", "/v1/x?a=1", b"{ }")),
            (&other, b("POST", "/v1/x?a=1", b"{}")),
        ];
        for (key, binding) in &wrong {
            let (sn, _) = hs.hello(&cn).unwrap();
            let bad = authorization(key, &cn, &sn, binding);
            let r = req("POST", "/v1/x?a=1", Some(&bad), b"{}");
            assert_eq!(hs.check(&r), Err(Refusal::WrongMac));
            // A failed attempt spends the handshake too.
            assert_eq!(hs.check(&r), Err(Refusal::UnknownNonce));
        }
        // The very first handshake is still open, and passes once.
        let good = authorization(&token, &cn, &sn, &b("POST", "/v1/x?a=1", b"{}"));
        let r = req("POST", "/v1/x?a=1", Some(&good), b"{}");
        assert_eq!(hs.check(&r), Ok(()));
        assert_eq!(hs.check(&r), Err(Refusal::UnknownNonce));
    }

    #[test]
    fn past_the_limit_the_oldest_handshake_goes() {
        let token = "ab".repeat(32);
        let hs = Handshakes::new(token.clone(), 4000);
        let cn = new_nonce().unwrap();
        let b = Binding {
            port: 4000,
            method: "GET",
            target: "/v1/chats",
            body: b"",
        };
        let mut sns: Vec<String> = (0..=MAX_OPEN_HANDSHAKES)
            .map(|_| hs.hello(&cn).unwrap().0)
            .collect();
        let last = sns.pop().unwrap();
        let check = |sn: &str| {
            hs.check(&req(
                "GET",
                "/v1/chats",
                Some(&authorization(&token, &cn, sn, &b)),
                b"",
            ))
        };
        assert_eq!(check(&sns[0]), Err(Refusal::UnknownNonce));
        assert_eq!(check(&sns[1]), Ok(()));
        assert_eq!(check(&last), Ok(()));
    }

    #[test]
    fn a_bearer_token_or_garbage_is_refused() {
        let token = "ab".repeat(32);
        let hs = Handshakes::new(token.clone(), 4000);
        for auth in [
            None,
            Some(format!("Bearer {token}")),
            Some(format!("{SCHEME} {token}")),
            Some(format!("{SCHEME} nonce=zz, mac=zz")),
            Some(format!(
                "{SCHEME} nonce={}, mac={}",
                "0".repeat(64),
                "0".repeat(64)
            )),
        ] {
            assert!(
                hs.check(&req("GET", "/v1/chats", auth.as_deref(), b""))
                    .is_err(),
                "{auth:?}"
            );
        }
    }
}
