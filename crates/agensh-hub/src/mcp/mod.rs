//! MCP (Model Context Protocol) at `/mcp`: the organization tools for agents.
//!
//! Streamable HTTP transport (MCP 2025-03-26 through 2025-11-25), answered with plain
//! `application/json` (the spec allows it instead of an SSE stream): one JSON-RPC 2.0
//! message per `POST /mcp`; `initialize`, `ping`, `tools/list` and `tools/call`. Sessions
//! are stateless: `initialize` hands out an `Mcp-Session-Id` and any later one is accepted,
//! because the identity comes from the bearer token of every request (the same [`Caller`]
//! as REST). So a hub restart never breaks an agent's session.
//!
//! Every tool runs the same shared function as its REST endpoint ([`crate::ops`]), so limits,
//! errors and events are identical. A tool failure is not a JSON-RPC error: it is a result
//! with `isError: true` and the hub's message, for the model to read. After every
//! `tools/call` the caller's pending *urgent* events are appended as a `notices:` block and
//! acknowledged ([`notices`]).

mod args;
mod notices;
pub mod tools;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agensh_domain::ids::ADMIN;
use agensh_domain::{Error, ErrorKind};
use agensh_protocol::jsonrpc::{self, code, ErrorObject, Id, Invalid, Message, Request};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use serde_json::{json, Map, Value};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// Where the hub serves MCP.
pub const PATH: &str = crate::paths::MCP;
/// Protocol versions this server speaks, newest first. `initialize` echoes the client's
/// version when it is one of these, else answers the first.
pub const SUPPORTED_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// The session header of the Streamable HTTP transport.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// The header with which clients name the negotiated version after `initialize`.
pub const VERSION_HEADER: &str = "mcp-protocol-version";

/// State of the MCP endpoint, per hub.
#[derive(Default)]
pub struct McpState {
    /// One lock per worker, held while its notices are collected and acknowledged, so two
    /// tool calls in parallel never show the same notice twice.
    notice_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl McpState {
    fn notice_lock(&self, worker: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.notice_locks
            .lock()
            .expect("notice locks")
            .entry(worker.to_string())
            .or_default()
            .clone()
    }
}

/// The `/mcp` route: `POST` for messages, `GET` answers 405 (no server-initiated
/// stream), `DELETE` ends a session (a no-op: sessions are stateless).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            PATH,
            post(handle_post).get(handle_get).delete(handle_delete),
        )
        .layer(Extension(Arc::new(McpState::default())))
}

async fn handle_get() -> Response {
    let mut r = ApiError(Error::invalid(
        "method_not_allowed",
        "the hub opens no server-initiated stream on GET /mcp — POST each JSON-RPC message; the answer comes back as JSON",
    ))
    .into_response();
    *r.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
    r
}

async fn handle_delete(caller: Result<Caller, ApiError>) -> Response {
    match caller {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => e.into_response(),
    }
}

async fn handle_post(
    State(s): State<AppState>,
    Extension(m): Extension<Arc<McpState>>,
    headers: HeaderMap,
    caller: Result<Caller, ApiError>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let caller = match caller {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    let body = match body {
        Ok(b) => b,
        Err(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return rpc_error_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                Id::Null,
                ErrorObject::new(
                    code::INVALID_REQUEST,
                    "the message is larger than the hub accepts (hub.body_limit in agensh.toml) — send less, or put long content in a file in the repository",
                ),
            )
        }
        Err(r) => {
            return rpc_error_response(
                StatusCode::BAD_REQUEST,
                Id::Null,
                ErrorObject::new(
                    code::INVALID_REQUEST,
                    format!("the request body could not be read: {}", r.body_text()),
                ),
            )
        }
    };
    let request = match Message::from_slice(&body) {
        Ok(Message::Request(r)) => r,
        // A notification (notifications/initialized, notifications/cancelled, …), or a
        // response from the client: this server sends no requests, so there is nothing to
        // match it with; accept it.
        Ok(Message::Notification(_) | Message::Response(_)) => {
            return StatusCode::ACCEPTED.into_response()
        }
        Err(m) if m.reason == Invalid::Batch => {
            return rpc_error_response(
                StatusCode::BAD_REQUEST,
                m.id,
                ErrorObject::new(
                    code::INVALID_REQUEST,
                    "batches are not supported — send one JSON-RPC message per POST",
                ),
            )
        }
        Err(m) => {
            let error = m.error();
            return rpc_error_response(StatusCode::BAD_REQUEST, m.id, error);
        }
    };
    let Request { id, method, params } = request;
    if method != "initialize" {
        if let Some(v) = headers.get(VERSION_HEADER) {
            let v = v.to_str().unwrap_or("");
            if !SUPPORTED_VERSIONS.contains(&v) {
                return rpc_error_response(
                    StatusCode::BAD_REQUEST,
                    id,
                    ErrorObject::new(
                        code::INVALID_REQUEST,
                        format!(
                            "unsupported MCP-Protocol-Version \"{}\" — this hub speaks {}; initialize again",
                            agensh_domain::ids::truncate_for_message(v),
                            SUPPORTED_VERSIONS.join(", ")
                        ),
                    ),
                );
            }
        }
    }
    let params = params.unwrap_or(Value::Null);
    if !caller.admin {
        // A worker's calls are limited like its REST requests (`[limits]`); a tool call
        // past the limit is a tool error, for the model to read and slow down.
        let tool = (method == "tools/call")
            .then(|| params.get("name").and_then(Value::as_str))
            .flatten();
        let cost = tool.map_or(1.0, crate::limits::tool_cost);
        if let Err(e) = s.limiter.request(&caller.id, cost, s.now()) {
            crate::metrics::inc(&s.metrics.rate_limited);
            if tool.is_some() {
                return rpc_result(
                    id,
                    json!({ "content": [{ "type": "text", "text": e.message }], "isError": true }),
                );
            }
            return rpc_error_response(
                StatusCode::OK,
                id,
                ErrorObject::new(code::HUB_REFUSED, e.message.clone()).with_data(json!({
                    "code": e.code,
                    "retry_after_secs": e.retry_after_secs,
                })),
            );
        }
    }
    match method.as_str() {
        "initialize" => initialize(&caller, id, &params),
        "ping" => rpc_result(id, json!({})),
        "tools/list" => rpc_result(id, json!({ "tools": tools::list(&s, &caller) })),
        "tools/call" => tools_call(&s, &m, &caller, id, &params).await,
        other => rpc_error_response(
            StatusCode::OK,
            id,
            ErrorObject::new(
                code::METHOD_NOT_FOUND,
                format!(
                    "method not found: \"{}\" — this server offers initialize, ping, tools/list and tools/call",
                    agensh_domain::ids::truncate_for_message(other)
                ),
            ),
        ),
    }
}

fn initialize(caller: &Caller, id: Id, params: &Value) -> Response {
    let Some(asked) = params.get("protocolVersion").and_then(Value::as_str) else {
        return rpc_error_response(
            StatusCode::OK,
            id,
            ErrorObject::new(
                code::INVALID_PARAMS,
                "initialize needs params.protocolVersion (a string such as \"2025-06-18\"), params.capabilities and params.clientInfo",
            ),
        );
    };
    let version = SUPPORTED_VERSIONS
        .iter()
        .find(|v| **v == asked)
        .unwrap_or(&SUPPORTED_VERSIONS[0]);
    let who = if caller.id == ADMIN {
        "the admin (an operator); act as a worker with the header X-Agensh-As: <id> to read its board, inbox and notices".to_string()
    } else {
        format!(
            "worker {0}: every call is made as {0}, and no call can act as another worker",
            caller.id
        )
    };
    let instructions = format!(
        "agensh organization tools. You are {who}. \
         The loop: gather context (board_read, board_grep, inbox, workers) → claim a sub-task (claim; settle overlaps by msg_dm) \
         → act, sharing useful findings early (board_write FACT/OBSERVED, FAIL for approaches that did not work) \
         → verify → ship (one call: commits and pushes your branch, opens its PR, merges it through the gate, posts the PATCH_SUMMARY, releases your claim) → repeat. \
         Keep records short. Urgent news — direct messages, reviews of your PRs, your PRs that failed to merge, new records by peers — \
         arrives in a `notices:` block appended to the result of any tool call: read it and react."
    );
    let result = json!({
        "protocolVersion": version,
        "capabilities": { "tools": {} },
        "serverInfo": { "name": "agensh", "title": "agensh hub", "version": env!("CARGO_PKG_VERSION") },
        "instructions": instructions,
    });
    let mut r = rpc_result(id, result);
    if let Ok(v) = HeaderValue::from_str(&new_session_id()) {
        r.headers_mut().insert(SESSION_HEADER, v);
    }
    r
}

async fn tools_call(
    s: &AppState,
    m: &McpState,
    caller: &Caller,
    id: Id,
    params: &Value,
) -> Response {
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return rpc_error_response(
            StatusCode::OK,
            id,
            ErrorObject::new(
                code::INVALID_PARAMS,
                "tools/call needs params.name (a tool from tools/list) and params.arguments (an object)",
            ),
        );
    };
    let Some(tool) = tools::find(name) else {
        return rpc_error_response(
            StatusCode::OK,
            id,
            ErrorObject::new(
                code::INVALID_PARAMS,
                format!(
                    "unknown tool \"{}\" — the tools are {}",
                    agensh_domain::ids::truncate_for_message(name),
                    tools::names().join(", ")
                ),
            ),
        );
    };
    let empty = Map::new();
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(a)) => a,
        Some(_) => {
            return rpc_error_response(
                StatusCode::OK,
                id,
                ErrorObject::new(
                    code::INVALID_PARAMS,
                    format!("params.arguments of {name} must be a JSON object of named arguments (see its inputSchema in tools/list)"),
                ),
            )
        }
    };
    let outcome = tools::call(s, caller, tool, arguments).await;
    if outcome.is_error && outcome.kind == Some(ErrorKind::Internal) {
        tracing::error!(tool = name, "{}", outcome.text);
    }
    let pending = match notices::collect(s, m, caller, &outcome.covers).await {
        Ok(p) => p,
        Err(e) => {
            // The tool did its work; the notices wait for the next call.
            tracing::warn!("could not read notices for {}: {e}", caller.id);
            None
        }
    };
    let mut content = vec![json!({ "type": "text", "text": outcome.text })];
    let mut structured = outcome.structured;
    // Some agents show their model only the structured content (Claude Code, Codex): the
    // text meant for the model, hints included, goes there too.
    if let Some(Value::Object(o)) = structured.as_mut() {
        o.entry("summary")
            .or_insert_with(|| Value::String(outcome.text.clone()));
    }
    if let Some(p) = &pending {
        if let Some(text) = &p.text {
            content.push(json!({ "type": "text", "text": text }));
            if let Some(Value::Object(o)) = structured.as_mut() {
                o.insert("notices".into(), Value::String(text.clone()));
            }
        }
    }
    let mut result = json!({ "content": content, "isError": outcome.is_error });
    if let Some(sc) = structured {
        result["structuredContent"] = sc;
    }
    let response = rpc_result(id, result);
    if let Some(p) = pending {
        p.ack(s).await;
    }
    response
}

/// A fresh, unguessable session id (visible ASCII, as the transport requires).
fn new_session_id() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // The session id only labels a conversation; identity comes from the token.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        bytes = t.to_le_bytes();
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("mcp-{hex}")
}

fn rpc_result(id: Id, result: Value) -> Response {
    Json(jsonrpc::Response::ok(id, result)).into_response()
}

fn rpc_error_response(status: StatusCode, id: Id, error: ErrorObject) -> Response {
    (status, Json(jsonrpc::Response::error(id, error))).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_visible_ascii_and_differ() {
        let a = new_session_id();
        assert!(a.bytes().all(|b| (0x21..=0x7e).contains(&b)));
        assert_ne!(a, new_session_id());
    }
}
