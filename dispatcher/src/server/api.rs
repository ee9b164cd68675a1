//! The API: routes, authentication, JSON in and out. Every request is checked in this order,
//! and refused at the first failure with nothing done: a loopback `Host`, the handshake route
//! (`POST /v1/hello`, the only one without a proof), the proof of the token (`auth.rs`), a
//! known route and method, a well-formed body.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use super::auth;
use super::http::{Request, Response};
use super::supervisor::{ApiError, DEFAULT_GRACE, LaunchBody, MAX_GRACE, Supervisor};
use crate::events::EventLog;
use crate::ids::ChatId;

/// Most events one `GET …/events` returns (`limit` may ask for fewer).
pub const MAX_EVENTS_PER_PAGE: usize = 5000;

/// What the server does after answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    Continue,
    Shutdown { stop_chats: bool },
}

pub struct Api {
    pub sup: Arc<Supervisor>,
    pub handshakes: auth::Handshakes,
    pub port: u16,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StopBody {
    #[serde(default)]
    grace_seconds: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HelloBody {
    client_nonce: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShutdownBody {
    #[serde(default)]
    stop_chats: bool,
}

fn err(e: ApiError) -> Response {
    Response::error(e.status, e.code, e.message)
}

impl Api {
    pub fn handle(&self, req: &Request) -> (Response, After) {
        if !self.host_ok(req) {
            return (
                Response::error(
                    400,
                    "bad_host",
                    format!(
                        "the Host header must be 127.0.0.1:{p} or localhost:{p}",
                        p = self.port
                    ),
                ),
                After::Continue,
            );
        }
        if req.path == auth::HELLO_PATH {
            return match method_is(req, "POST") {
                Ok(()) => (self.hello(req), After::Continue),
                Err(r) => (r, After::Continue),
            };
        }
        if let Err(why) = self.handshakes.check(req) {
            return (
                Response::error(401, "unauthorized", why.to_string())
                    .with_header("WWW-Authenticate", auth::SCHEME),
                After::Continue,
            );
        }
        let segments: Vec<&str> = req.path.split('/').collect();
        let method = req.method.as_str();
        let allow = |methods: &str| {
            (
                Response::error(
                    405,
                    "method_not_allowed",
                    format!("{} allows {methods}", req.path),
                )
                .with_header("Allow", methods),
                After::Continue,
            )
        };
        match segments.as_slice() {
            ["", "v1", "chats"] => match method {
                "GET" => (self.result(200, self.sup.list()), After::Continue),
                _ => allow("GET"),
            },
            ["", "v1", "chats", "launch"] => match method {
                "POST" => (self.launch(req), After::Continue),
                _ => allow("POST"),
            },
            ["", "v1", "chats", chat] => match method {
                "GET" => (self.result(200, self.chat_view(chat)), After::Continue),
                _ => allow("GET"),
            },
            ["", "v1", "chats", chat, "stop"] => match method {
                "POST" => (self.stop(req, chat), After::Continue),
                _ => allow("POST"),
            },
            ["", "v1", "chats", chat, "events"] => match method {
                "GET" => (self.events(req, chat), After::Continue),
                _ => allow("GET"),
            },
            ["", "v1", "shutdown"] => match method {
                "POST" => match body::<ShutdownBody>(req, true) {
                    Ok(b) => {
                        let b = b.unwrap_or(ShutdownBody { stop_chats: false });
                        (
                            Response::json(
                                200,
                                json!({ "shutting_down": true, "pid": std::process::id(), "stop_chats": b.stop_chats }),
                            ),
                            After::Shutdown {
                                stop_chats: b.stop_chats,
                            },
                        )
                    }
                    Err(r) => (r, After::Continue),
                },
                _ => allow("POST"),
            },
            _ => (
                Response::error(404, "no_such_route", format!("no route {}", req.path)),
                After::Continue,
            ),
        }
    }

    fn host_ok(&self, req: &Request) -> bool {
        let mut hosts = req.header_values("host");
        let (Some(host), None) = (hosts.next(), hosts.next()) else {
            return false;
        };
        let host = host.to_ascii_lowercase();
        [
            format!("127.0.0.1:{}", self.port),
            format!("localhost:{}", self.port),
        ]
        .contains(&host)
    }

    fn result(&self, status: u16, r: Result<Value, ApiError>) -> Response {
        match r {
            Ok(v) => Response::json(status, v),
            Err(e) => err(e),
        }
    }

    /// Step 1 of the handshake: proves this server holds the token, reveals nothing else.
    fn hello(&self, req: &Request) -> Response {
        let b = match body::<HelloBody>(req, false) {
            Ok(Some(b)) => b,
            Ok(None) => unreachable!("a required body is present"),
            Err(r) => return r,
        };
        if !auth::is_nonce(&b.client_nonce) {
            return Response::error(
                400,
                "bad_request",
                format!(
                    "client_nonce must be {} lower-case hex digits",
                    2 * auth::NONCE_BYTES
                ),
            );
        }
        match self.handshakes.hello(&b.client_nonce) {
            Ok((server_nonce, proof)) => Response::json(
                200,
                json!({ "server_nonce": server_nonce, "server_proof": proof }),
            ),
            Err(e) => Response::error(500, "internal", format!("no random nonce: {e}")),
        }
    }

    fn chat_view(&self, chat: &str) -> Result<Value, ApiError> {
        let chat = parse_chat(chat)?;
        self.sup.view(&chat)
    }

    fn launch(&self, req: &Request) -> Response {
        let b = match body::<LaunchBody>(req, false) {
            Ok(Some(b)) => b,
            Ok(None) => unreachable!("a required body is present"),
            Err(r) => return r,
        };
        self.result(201, self.sup.launch(b))
    }

    fn stop(&self, req: &Request, chat: &str) -> Response {
        let b = match body::<StopBody>(req, true) {
            Ok(b) => b,
            Err(r) => return r,
        };
        let grace = match b.and_then(|b| b.grace_seconds) {
            None => DEFAULT_GRACE,
            Some(s) if s.is_finite() && s >= 0.0 && s <= MAX_GRACE.as_secs_f64() => {
                Duration::from_secs_f64(s)
            }
            Some(s) => {
                return Response::error(
                    400,
                    "bad_request",
                    format!("grace_seconds {s}: expected 0 to {}", MAX_GRACE.as_secs()),
                );
            }
        };
        self.result(200, self.sup.stop(chat, grace))
    }

    fn events(&self, req: &Request, chat: &str) -> Response {
        let r = (|| {
            let chat = parse_chat(chat)?;
            self.sup.state().require_chat(&chat)?;
            let num = |key: &str, default: usize| -> Result<usize, ApiError> {
                match req.query_param(key) {
                    None => Ok(default),
                    Some(v) => v.parse().map_err(|_| {
                        ApiError::new(
                            400,
                            "bad_request",
                            format!("{key}={v:?}: expected a number"),
                        )
                    }),
                }
            };
            let after = num("after", 0)?;
            let limit = num("limit", MAX_EVENTS_PER_PAGE)?.min(MAX_EVENTS_PER_PAGE);
            let all = EventLog::read(self.sup.state(), &chat)?;
            let total = all.len();
            let page: Vec<_> = all.into_iter().skip(after).take(limit).collect();
            let next = after.min(total) + page.len();
            Ok(json!({
                "chat": chat,
                "events": page,
                "next": next,
                "total": total,
                "more": next < total,
            }))
        })();
        self.result(200, r)
    }
}

fn method_is(req: &Request, method: &'static str) -> Result<(), Response> {
    if req.method == method {
        return Ok(());
    }
    Err(Response::error(
        405,
        "method_not_allowed",
        format!("{} allows {method}", req.path),
    )
    .with_header("Allow", method))
}

fn parse_chat(word: &str) -> Result<ChatId, ApiError> {
    ChatId::new(word).map_err(|e| ApiError::new(400, "bad_request", e.to_string()))
}

/// The JSON body: `Ok(None)` only when `optional` and there is none.
fn body<T: serde::de::DeserializeOwned>(
    req: &Request,
    optional: bool,
) -> Result<Option<T>, Response> {
    if req.body.is_empty() {
        return if optional {
            Ok(None)
        } else {
            Err(Response::error(
                400,
                "bad_request",
                "a JSON body is required",
            ))
        };
    }
    let json_type = req.header_values("content-type").next().is_some_and(|t| {
        t.split(';')
            .next()
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
    });
    if !json_type {
        return Err(Response::error(
            415,
            "unsupported_media_type",
            "send the body as Content-Type: application/json",
        ));
    }
    serde_json::from_slice(&req.body)
        .map(Some)
        .map_err(|e| Response::error(400, "bad_json", format!("the body is not valid: {e}")))
}
