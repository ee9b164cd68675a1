//! The client side (`dispatcher chats …`, `dispatcher stop`): state root → `server.json` →
//! port, `config.json` → token, then plain HTTP to 127.0.0.1 with `ureq`.
//!
//! The token never crosses the connection. Each call first asks the listener to prove that it
//! holds the token (`auth.rs`, step 1) and sends the request, with a MAC bound to it, only to
//! a listener that did; anything else is "not this state root's server". That matters because
//! the port is not the state root's: after a crash (a stale `server.json`) or a clean stop on
//! a fixed port, any process of this user, a confined chat included, may have bound it. No
//! proxy, no redirect; on Linux a listener of another uid is not even asked.

use std::time::Duration;

use std::path::PathBuf;

use serde_json::Value;

use super::{ServerFile, ServerFileError, auth};
use crate::state::StateRoot;

/// Why a call to the server did not get an answer from it, or got a refusal.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    ServerFile(#[from] ServerFileError),
    /// `server.json` names a server that cannot be called.
    #[error(
        "server.json names pid {pid} on port {port}; is it still running? (`dispatcher serve` starts one): {cause}"
    )]
    Stale {
        pid: u32,
        port: u16,
        cause: Box<ClientError>,
    },
    #[error("port 0 is not a server's port")]
    PortZero,
    #[error("cannot read /proc/net/tcp: {0}")]
    ListenersUnreadable(std::io::Error),
    #[error("nothing listens on 127.0.0.1:{0}")]
    NothingListens(u16),
    #[error(
        "the socket listening on 127.0.0.1:{port} belongs to uid {owner}, not to you (uid {me}); not sending the server token there"
    )]
    OtherUser { port: u16, owner: u32, me: u32 },
    #[error("cannot read /dev/urandom: {0}")]
    Nonce(std::io::Error),
    /// The listener did not prove that it holds this state root's token.
    #[error(
        "the listener on 127.0.0.1:{port} is not the server of the state root {}: it did not \
         prove that it holds this state root's token ({why}); nothing that authenticates \
         was sent to it. server.json may be stale, or another program took the port; \
         start this state root's server with `dispatcher serve`",
        .root.display()
    )]
    NotOurServer {
        port: u16,
        root: PathBuf,
        why: String,
    },
    #[error("cannot reach the server on 127.0.0.1:{port}: {http}")]
    Unreachable { port: u16, http: Box<ureq::Error> },
    #[error("unsupported call {method} {path}")]
    Unsupported { method: String, path: String },
    #[error("the server on port {port} answered {status} without JSON: {json}")]
    NotJson {
        port: u16,
        status: u16,
        json: serde_json::Error,
    },
    /// The server answered with an error.
    #[error("the server answered {status}: {message}")]
    Answered { status: u16, message: String },
}

type Result<T> = std::result::Result<T, ClientError>;

/// A call waits at most this long (a launch queued behind others included).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);

pub struct Client {
    port: u16,
    token: String,
    /// The state root, for messages.
    root: PathBuf,
    agent: ureq::Agent,
}

/// A response: status and JSON body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

impl Reply {
    /// The body of a 2xx reply, else the server's error as an error.
    pub fn ok(self) -> Result<Value> {
        if (200..300).contains(&self.status) {
            return Ok(self.body);
        }
        let msg = self.body["error"]["message"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| self.body.to_string());
        Err(ClientError::Answered {
            status: self.status,
            message: msg,
        })
    }
}

impl Client {
    /// The server of this state root, as `server.json` names it.
    pub fn for_state_root(state: &StateRoot) -> Result<Client> {
        let info = ServerFile::read(state)?;
        Client::for_port(state, info.port).map_err(|cause| ClientError::Stale {
            pid: info.pid,
            port: info.port,
            cause: Box::new(cause),
        })
    }

    /// The listener on 127.0.0.1:`port`, for this state root: each call first has it prove
    /// that it holds this state root's token.
    pub fn for_port(state: &StateRoot, port: u16) -> Result<Client> {
        if port == 0 {
            return Err(ClientError::PortZero);
        }
        check_listener_owner(port)?;
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .proxy(None)
            .max_redirects(0)
            .timeout_global(Some(CALL_TIMEOUT))
            .build();
        Ok(Client {
            port,
            token: state.config().server_token.clone(),
            root: state.path().to_path_buf(),
            agent: config.into(),
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// One call: `body` is sent as JSON when given. The listener must first prove that it is
    /// this state root's server; the request then carries a proof bound to it.
    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Reply> {
        let body = body.map(|b| b.to_string().into_bytes());
        let (client_nonce, server_nonce) = self.handshake()?;
        let authorization = auth::authorization(
            &self.token,
            &client_nonce,
            &server_nonce,
            &auth::Binding {
                port: self.port,
                method,
                target: path,
                body: body.as_deref().unwrap_or_default(),
            },
        );
        self.send(method, path, body.as_deref(), Some(&authorization))
    }

    /// Step 1: a fresh client nonce; the listener must answer with the proof for it.
    fn handshake(&self) -> Result<(String, String)> {
        let client_nonce = auth::new_nonce().map_err(ClientError::Nonce)?;
        let hello = serde_json::json!({ "client_nonce": client_nonce })
            .to_string()
            .into_bytes();
        let not_ours = |why: String| ClientError::NotOurServer {
            port: self.port,
            root: self.root.clone(),
            why,
        };
        let reply = self
            .send("POST", auth::HELLO_PATH, Some(&hello), None)
            .map_err(|e| not_ours(e.to_string()))?;
        if reply.status != 200 {
            return Err(not_ours(format!("it answered {}", reply.status)));
        }
        let (Some(server_nonce), Some(proof)) = (
            reply.body["server_nonce"].as_str(),
            reply.body["server_proof"].as_str(),
        ) else {
            return Err(not_ours("it answered without a proof".into()));
        };
        if !auth::is_nonce(server_nonce)
            || !auth::proof_ok(&self.token, &client_nonce, server_nonce, self.port, proof)
        {
            return Err(not_ours("its proof is wrong".into()));
        }
        Ok((client_nonce, server_nonce.to_string()))
    }

    fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        authorization: Option<&str>,
    ) -> Result<Reply> {
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        let unreachable = |e: ureq::Error| ClientError::Unreachable {
            port: self.port,
            http: Box::new(e),
        };
        let mut resp = match (method, body) {
            ("GET", None) => {
                let mut r = self.agent.get(&url);
                if let Some(a) = authorization {
                    r = r.header("Authorization", a);
                }
                r.call().map_err(unreachable)?
            }
            ("POST", None) => {
                let mut r = self.agent.post(&url);
                if let Some(a) = authorization {
                    r = r.header("Authorization", a);
                }
                r.send_empty().map_err(unreachable)?
            }
            ("POST", Some(b)) => {
                let mut r = self.agent.post(&url);
                if let Some(a) = authorization {
                    r = r.header("Authorization", a);
                }
                r.content_type("application/json")
                    .send(b)
                    .map_err(unreachable)?
            }
            _ => {
                return Err(ClientError::Unsupported {
                    method: method.to_string(),
                    path: path.to_string(),
                });
            }
        };
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .map_err(unreachable)?;
        let body = serde_json::from_str(&text).map_err(|json| ClientError::NotJson {
            port: self.port,
            status,
            json,
        })?;
        Ok(Reply { status, body })
    }

    /// Every event of `chat`'s log after the first `after`, page by page.
    pub fn events(&self, chat: &str, after: u64) -> Result<Vec<Value>> {
        let mut all = Vec::new();
        let mut after = after;
        loop {
            let v = self
                .call(
                    "GET",
                    &format!("/v1/chats/{chat}/events?after={after}"),
                    None,
                )?
                .ok()?;
            all.extend(v["events"].as_array().cloned().unwrap_or_default());
            after = v["next"].as_u64().unwrap_or(0);
            if !v["more"].as_bool().unwrap_or(false) {
                return Ok(all);
            }
        }
    }
}

/// Linux: the socket listening on 127.0.0.1:`port` must be this user's (`/proc/net/tcp`).
#[cfg(target_os = "linux")]
fn check_listener_owner(port: u16) -> Result<()> {
    let text =
        std::fs::read_to_string("/proc/net/tcp").map_err(ClientError::ListenersUnreadable)?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let mut owners = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(st), Some(uid)) = (f.get(1), f.get(3), f.get(7)) else {
            continue;
        };
        let Some((ip, p)) = local.split_once(':') else {
            continue;
        };
        let (Ok(ip), Ok(p), Ok(uid)) = (
            u32::from_str_radix(ip, 16),
            u16::from_str_radix(p, 16),
            uid.parse::<u32>(),
        ) else {
            continue;
        };
        // The kernel prints the address as the native-endian view of network-order bytes.
        let ip = std::net::Ipv4Addr::from(ip.to_ne_bytes());
        if *st == "0A" && p == port && (ip.is_loopback() || ip.is_unspecified()) {
            owners.push(uid);
        }
    }
    match owners.as_slice() {
        [] => Err(ClientError::NothingListens(port)),
        o if o.iter().all(|&u| u == me) => Ok(()),
        o => Err(ClientError::OtherUser {
            port,
            owner: o.iter().find(|&&u| u != me).copied().unwrap_or_default(),
            me,
        }),
    }
}

#[cfg(not(target_os = "linux"))]
fn check_listener_owner(_port: u16) -> Result<()> {
    Ok(())
}
