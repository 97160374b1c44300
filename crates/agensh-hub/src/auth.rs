//! Who is calling: a worker by its token, or the admin (optionally acting as a worker).

use agensh_domain::ids::{validate_worker_id, ADMIN};
use agensh_domain::{Error, ErrorKind};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::error::ApiError;
use crate::state::{AppState, Inner};

/// Header with which the admin acts as a worker.
pub const AS_HEADER: &str = "x-agensh-as";

/// The authenticated caller of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The identity the request acts as: a worker id, or `admin`.
    pub id: String,
    /// Whether the request carries the admin token.
    pub admin: bool,
}

impl Caller {
    /// Fails unless the caller holds the admin token.
    pub fn require_admin(&self) -> Result<(), Error> {
        if self.admin {
            Ok(())
        } else {
            Err(Error::forbidden(
                "admin_only",
                "only the admin may do this — use the admin token from .agensh/hub.json",
            ))
        }
    }

    /// Fails unless the caller is worker `id` itself or the admin (and `id` a worker id);
    /// `what` is what a worker may do only for itself, like "set only its own status".
    pub fn require_self(&self, id: &str, what: &str) -> Result<(), Error> {
        validate_worker_id(id)?;
        if !self.admin && self.id != id {
            return Err(Error::forbidden(
                "impersonation",
                format!("a worker may {what} ({}), not {id}'s", self.id),
            ));
        }
        Ok(())
    }

    /// The worker this request acts as; the admin must name one (the `X-Agensh-As` header).
    pub fn worker(&self) -> Result<&str, Error> {
        if self.id == ADMIN {
            Err(Error::invalid(
                "needs_worker",
                "the admin has no queue, cursor or claims of its own — name the worker to act as in the X-Agensh-As header (e.g. w01)",
            ))
        } else {
            Ok(&self.id)
        }
    }
}

/// Checks that a request made for many workers at once (a node's status report or
/// event poll) may act for each of `entries` — `(worker id, token given in its entry)` —
/// and notes their activity. An entry needs its worker's token unless the request's own
/// token is the admin's or that worker's; a token given is always checked. Refuses the
/// whole request at the first entry that fails, and a worker named twice.
pub fn authorize_many<'a>(
    caller: &Caller,
    state: &Inner,
    entries: impl Iterator<Item = (&'a str, Option<&'a str>)>,
) -> Result<(), Error> {
    let tokens = state.tokens.read().expect("tokens lock");
    let mut known: Option<std::collections::HashSet<&str>> = None;
    let mut seen = std::collections::HashSet::new();
    for (id, token) in entries {
        validate_worker_id(id)?;
        if !seen.insert(id) {
            return Err(Error::invalid(
                "duplicate_worker",
                format!("{id} is named twice — name each worker once per request"),
            ));
        }
        match token {
            Some(t) => {
                if tokens.get(t.trim()).map(String::as_str) != Some(id) {
                    return Err(Error::new(
                        ErrorKind::Unauthorized,
                        "wrong_token",
                        format!("the token in the entry for {id} is not {id}'s — give each worker's own token"),
                    ));
                }
            }
            None if caller.admin => {
                let known = known.get_or_insert_with(|| tokens.values().map(String::as_str).collect());
                if !known.contains(id) {
                    return Err(agensh_domain::worker::unknown_worker(id));
                }
            }
            None if caller.id == id => {}
            None => {
                return Err(Error::forbidden(
                    "needs_token",
                    format!(
                        "the entry for {id} has no token — the request's token acts only for {}; give {id}'s token in its entry",
                        caller.id
                    ),
                ))
            }
        }
    }
    drop(tokens);
    state.touch_many(seen.into_iter());
    Ok(())
}

/// What a node token gets from every route but its registration: it acts for no worker
/// and is no admin.
fn node_token_refused(node: &str) -> ApiError {
    ApiError(Error::forbidden(
        "node_token",
        format!(
            "this is node {node}'s token: it may only register the node (POST /api/v1/nodes/register) — act for a worker with the worker token the registration gave, or as the operator with the admin token"
        ),
    ))
}

/// A request made with a node token: the node's name. Only a node's registration takes
/// one; everything else refuses node tokens (see [`Caller`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCaller(pub String);

impl FromRequestParts<AppState> for NodeCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(|| unauthorized("a node registers with its node token — send Authorization: Bearer <node token> (`agensh nodes add NAME` issues one)"))?;
        if let Some(node) = state.node_of(token) {
            return Ok(NodeCaller(node));
        }
        let known = constant_time_eq(token.as_bytes(), state.admin_token.as_bytes())
            || state
                .tokens
                .read()
                .expect("tokens lock")
                .contains_key(token);
        if known {
            return Err(ApiError(Error::forbidden(
                "node_only",
                "only a node token registers a node — issue one with `agensh nodes add NAME --workers N` and start the node with it",
            )));
        }
        Err(unauthorized(
            "the node token is not valid for this hub (revoked, or another hub's) — ask the operator for a new one (`agensh nodes add NAME`)",
        ))
    }
}

fn unauthorized_code(code: &str, message: &str) -> ApiError {
    ApiError(Error::new(ErrorKind::Unauthorized, code, message))
}

fn unauthorized(message: &str) -> ApiError {
    ApiError(Error::new(ErrorKind::Unauthorized, "unauthorized", message))
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Some(header) = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return dashboard_session(parts, state);
        };
        let token = header
            .strip_prefix("Bearer ")
            .ok_or_else(|| unauthorized("the Authorization header must be \"Bearer <token>\""))?
            .trim();
        let as_worker = parts
            .headers
            .get(AS_HEADER)
            .map(|v| v.to_str().unwrap_or("").to_string());
        let caller = if constant_time_eq(token.as_bytes(), state.admin_token.as_bytes()) {
            match as_worker {
                None => Caller {
                    id: ADMIN.to_string(),
                    admin: true,
                },
                Some(id) => {
                    validate_worker_id(&id)?;
                    if state.token_of(&id).is_none() {
                        return Err(ApiError(agensh_domain::worker::unknown_worker(&id)));
                    }
                    Caller { id, admin: true }
                }
            }
        } else {
            let id = state
                .tokens
                .read()
                .expect("tokens lock")
                .get(token)
                .cloned();
            let Some(id) = id else {
                if let Some(node) = state.node_of(token) {
                    return Err(node_token_refused(&node));
                }
                return Err(unauthorized("the token is not valid for this hub — check AGENSH_TOKEN or `agensh workers token ID`"));
            };
            if let Some(other) = as_worker {
                if other != id {
                    return Err(ApiError(Error::forbidden(
                        "impersonation",
                        format!("a worker token can only act as its own worker ({id}), not as {other} — leave out the X-Agensh-As header"),
                    )));
                }
            }
            Caller { id, admin: false }
        };
        if caller.id != ADMIN {
            state.touch(&caller.id);
        }
        Ok(caller)
    }
}

/// The operator logged in to the dashboard: a request with no token but a valid session
/// cookie acts as the admin. A change made that way must come from the hub's own page:
/// a browser sends a site's cookies with requests other local pages make too (another
/// port of localhost is the same site), so it needs an `Origin` that is the hub's own
/// address and, where the browser says, a same-origin fetch.
fn dashboard_session(parts: &Parts, state: &AppState) -> Result<Caller, ApiError> {
    use crate::dashboard::session::session_cookies;
    let no_token = || {
        unauthorized("no token — send Authorization: Bearer <token> (AGENSH_TOKEN, or the admin token from .agensh/hub.json); in a browser, log in to the dashboard with the link `agensh dashboard` prints")
    };
    let value = session_cookies(&parts.headers)
        .next()
        .ok_or_else(no_token)?;
    if !state.dashboard.sessions().valid(value, state.now()) {
        return Err(unauthorized_code(
            "session_expired",
            "the dashboard session has expired or is not this hub's — open a new link from `agensh dashboard`",
        ));
    }
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let safe = matches!(
        parts.method,
        axum::http::Method::GET | axum::http::Method::HEAD
    );
    let cross_site = header("sec-fetch-site").is_some_and(|s| s != "same-origin" && s != "none");
    let own_origin = match (header("origin"), header("host")) {
        (Some(origin), Some(host)) => origin
            .split_once("://")
            .is_some_and(|(scheme, rest)| matches!(scheme, "http" | "https") && rest == host),
        _ => false,
    };
    if cross_site || (!safe && !own_origin) {
        return Err(ApiError(Error::forbidden(
            "cross_origin",
            "a dashboard session acts only for the hub's own page — send the request from the dashboard, or with the admin token in an Authorization header",
        )));
    }
    Ok(Caller {
        id: ADMIN.to_string(),
        admin: true,
    })
}

/// Compares secrets without leaking where they differ through timing.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Standard base64 (padding optional), as in `Authorization: Basic`.
pub(crate) fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_basic_credentials() {
        assert_eq!(decode_base64("dzAxOnNlY3JldA==").unwrap(), b"w01:secret");
        assert_eq!(decode_base64("dzAxOnNlY3JldA").unwrap(), b"w01:secret");
        assert_eq!(decode_base64("YQ==").unwrap(), b"a");
        assert_eq!(decode_base64("YWI=").unwrap(), b"ab");
        assert_eq!(decode_base64("YWJj").unwrap(), b"abc");
        assert!(decode_base64("!!").is_none());
    }
}
