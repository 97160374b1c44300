//! The node's MCP proxy: one HTTP server per node on 127.0.0.1 (a free port) serving
//! `/mcp` for all the node's workers, so `ship` can do its local half where the checkouts
//! are. Every request is forwarded to the hub's `/mcp` unchanged — method, headers
//! (`Authorization`, `Mcp-Session-Id`, `MCP-Protocol-Version`, `X-Agensh-As`, …) and body,
//! and the hub's status, headers and body come back unchanged — except a `tools/call` of
//! `ship` by one of the node's workers (known by its bearer token): first, in that worker's
//! checkout, what is left is committed and `HEAD` pushed to the branch
//! ([`agensh_workspace::ship::commit_and_push`]); a failure there is answered as the tool's
//! error result and nothing reaches the hub; otherwise the call is forwarded and its result
//! starts with a line saying what was committed and pushed.
//!
//! [`ship_prestep`] and [`with_note`] are that pre-step, shared with the `agensh mcp`
//! stdio bridge, which runs it in its working directory.
//!
//! While the hub cannot be reached (it is restarting), a call is sent again for up to
//! [`HUB_RESTART_WINDOW`] ([`agensh_client::retry`]); only then does the agent get an
//! error — a tool error for a tool call ([`unreachable_answer`]), so the model reads it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agensh_client::retry::{self, HUB_RESTART_WINDOW};
use agensh_domain::{Error, Result};
use agensh_protocol::jsonrpc::{Id, Message, Response as RpcResponse};
use agensh_workspace::checkout::work_branch;
use agensh_workspace::git::NetworkJobs;
use agensh_workspace::ship::commit_and_push;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use serde_json::{json, Value};

/// The tool whose call gets the local pre-step.
pub const SHIP: &str = "ship";

/// A worker the proxy serves: its id, its token and its checkout.
#[derive(Debug, Clone)]
pub struct ProxiedWorker {
    pub id: String,
    pub token: String,
    pub checkout: PathBuf,
}

/// A running proxy; it stops when dropped.
pub struct McpProxy {
    url: String,
    task: tokio::task::JoinHandle<()>,
}

struct Proxy {
    http: reqwest::Client,
    /// The hub's `/mcp`.
    upstream: String,
    /// Workers by token.
    workers: HashMap<String, ProxiedWorker>,
    /// `ship`'s commit and push wait for a slot here.
    jobs: NetworkJobs,
}

impl McpProxy {
    /// Starts the proxy for `workers` in front of the hub at `hub_url`, on a free port of
    /// 127.0.0.1.
    pub async fn start(hub_url: &str, workers: Vec<ProxiedWorker>) -> Result<McpProxy> {
        Self::start_with_jobs(hub_url, workers, NetworkJobs::unlimited()).await
    }

    /// [`McpProxy::start`], with `ship`'s commit and push waiting for a slot of `jobs` (the
    /// node's git network operations).
    pub async fn start_with_jobs(
        hub_url: &str,
        workers: Vec<ProxiedWorker>,
        jobs: NetworkJobs,
    ) -> Result<McpProxy> {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .map_err(|e| {
                Error::internal(format!(
                    "cannot open the node's MCP proxy on 127.0.0.1: {e}"
                ))
            })?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::internal(format!("the MCP proxy has no address: {e}")))?;
        let proxy = Arc::new(Proxy {
            // No overall timeout: a gated merge behind `ship` may take minutes.
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .pool_idle_timeout(agensh_client::POOL_IDLE)
                .build()
                .map_err(|e| Error::internal(format!("cannot build an HTTP client: {e}")))?,
            upstream: format!("{}/mcp", hub_url.trim_end_matches('/')),
            workers: workers.into_iter().map(|w| (w.token.clone(), w)).collect(),
            jobs,
        });
        // One route table for every connection, not one rebuilt per connection.
        let app = Router::new()
            .route("/mcp", any(forward))
            .with_state(proxy)
            .into_make_service();
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!("the node's MCP proxy stopped: {e}");
            }
        });
        Ok(McpProxy {
            url: format!("http://{addr}/mcp"),
            task,
        })
    }

    /// The proxy's MCP endpoint, `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for McpProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What to do with a message before it goes to the hub.
#[derive(Debug)]
pub enum Prestep {
    /// Not a `ship` call: forward it unchanged.
    Forward,
    /// A `ship` call whose branch was pushed: forward it, then start its result with this line.
    Noted(String),
    /// A `ship` call whose local half failed: answer with this JSON-RPC message, forward nothing.
    Answer(Vec<u8>),
}

/// If `body` is a `tools/call` of `ship`, commits what is left in `checkout` and pushes it
/// as `worker` to the call's branch (default `<worker>/work`), with its title as the
/// commit message.
pub async fn ship_prestep(body: &[u8], worker: &str, checkout: &Path) -> Prestep {
    let Ok(Message::Request(req)) = Message::from_slice(body) else {
        return Prestep::Forward;
    };
    let params = req.params.clone().unwrap_or(Value::Null);
    if req.method != "tools/call" || params["name"] != SHIP {
        return Prestep::Forward;
    }
    let args = &params["arguments"];
    let branch = args["branch"]
        .as_str()
        .map_or_else(|| work_branch(worker), str::to_string);
    let title = args["title"].as_str().unwrap_or("");
    match commit_and_push(checkout, worker, &branch, title).await {
        Ok(pushed) => Prestep::Noted(format!("in your checkout: {}", pushed.describe())),
        Err(e) => Prestep::Answer(tool_error(req.id, &e)),
    }
}

/// A tool's error result, in the shape the hub gives its refusals.
fn tool_error(id: Id, e: &Error) -> Vec<u8> {
    let text = format!("refused ({}): {}", e.code, e.message);
    let result = json!({
        "content": [{ "type": "text", "text": text }],
        "structuredContent": { "error": { "code": e.code, "message": e.message } },
        "isError": true,
    });
    serde_json::to_vec(&RpcResponse::ok(id, result)).unwrap_or_default()
}

/// `answer` (a JSON-RPC response to a tool call) with `note` as its first text block;
/// anything else comes back as it was.
pub fn with_note(answer: &[u8], note: &str) -> Vec<u8> {
    let Ok(mut v) = serde_json::from_slice::<Value>(answer) else {
        return answer.to_vec();
    };
    let Some(content) = v
        .get_mut("result")
        .and_then(|r| r.get_mut("content"))
        .and_then(Value::as_array_mut)
    else {
        return answer.to_vec();
    };
    content.insert(0, json!({ "type": "text", "text": note }));
    serde_json::to_vec(&v).unwrap_or_else(|_| answer.to_vec())
}

/// Headers that belong to one connection, never forwarded.
fn hop_by_hop(name: &HeaderName) -> bool {
    [
        header::HOST,
        header::CONNECTION,
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::TE,
        header::TRAILER,
        header::PROXY_AUTHORIZATION,
    ]
    .contains(name)
        || name.as_str() == "keep-alive"
}

async fn forward(
    State(p): State<Arc<Proxy>>,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut note = None;
    if method == Method::POST {
        if let Some(w) = worker_of(&p, &headers) {
            match p.jobs.run(ship_prestep(&body, &w.id, &w.checkout)).await {
                Prestep::Forward => {}
                Prestep::Noted(n) => note = Some(n),
                Prestep::Answer(answer) => {
                    return ([(header::CONTENT_TYPE, "application/json")], answer).into_response()
                }
            }
        }
    }
    let mut req = p.http.request(method, &p.upstream).body(body.clone());
    for (name, value) in &headers {
        if !hop_by_hop(name) {
            req = req.header(name, value);
        }
    }
    let resp = match retry::send(req, HUB_RESTART_WINDOW).await {
        Ok(r) => r,
        Err(e) => {
            let why = if e.is_connect() {
                format!(
                    "it has not answered for {} s ({e})",
                    HUB_RESTART_WINDOW.as_secs()
                )
            } else {
                // Sent, and the answer lost: it may have taken effect.
                format!("the connection broke before its answer ({e}); the call may or may not have taken effect — check (board_read, pr_list) before repeating it")
            };
            return unreachable(&p.upstream, &body, &why);
        }
    };
    let status = resp.status();
    let mut out = HeaderMap::new();
    for (name, value) in resp.headers() {
        if !hop_by_hop(name) {
            out.append(name, value.clone());
        }
    }
    let answer = match resp.bytes().await {
        Ok(b) => b,
        Err(e) => {
            return unreachable(
                &p.upstream,
                &body,
                &format!("its answer broke off ({e}); the call may or may not have taken effect — check before repeating it"),
            )
        }
    };
    let answer = match note {
        Some(n) if status.is_success() => Bytes::from(with_note(&answer, &n)),
        _ => answer,
    };
    let mut r = Response::new(Body::from(answer));
    *r.status_mut() = status;
    *r.headers_mut() = out;
    r
}

/// The node's worker whose bearer token `headers` carry.
fn worker_of<'a>(p: &'a Proxy, headers: &HeaderMap) -> Option<&'a ProxiedWorker> {
    let token = headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")?;
    p.workers.get(token.trim())
}

/// The hub could not be reached: for a JSON-RPC request, its answer
/// ([`unreachable_answer`]); else a 502 in the hub's error shape.
fn unreachable(upstream: &str, request: &[u8], why: &str) -> Response {
    let message = format!("the hub at {upstream} could not be reached: {why} — is the hub running? Try again in a moment");
    tracing::warn!("{message}");
    if let Some(answer) = unreachable_answer(request, &message) {
        return ([(header::CONTENT_TYPE, "application/json")], answer).into_response();
    }
    let body = json!({ "error": { "code": "unreachable", "message": message }});
    (StatusCode::BAD_GATEWAY, axum::Json(body)).into_response()
}

/// The answer to the JSON-RPC request `request` when the hub cannot be reached: a tool
/// error for `tools/call` (the model reads it and can wait or go on), error `-32000` for
/// anything else; `None` when `request` is not a request (a notification needs no answer).
pub fn unreachable_answer(request: &[u8], message: &str) -> Option<Vec<u8>> {
    let Ok(Message::Request(req)) = Message::from_slice(request) else {
        return None;
    };
    let answer = if req.method == "tools/call" {
        RpcResponse::ok(
            req.id,
            json!({
                "content": [{ "type": "text", "text": message }],
                "structuredContent": { "error": { "code": "unreachable", "message": message } },
                "isError": true,
            }),
        )
    } else {
        RpcResponse::error(
            req.id,
            agensh_protocol::jsonrpc::ErrorObject::new(
                agensh_protocol::jsonrpc::code::HUB_UNREACHABLE,
                message,
            ),
        )
    };
    serde_json::to_vec(&answer).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_becomes_the_first_text_block_of_a_tool_result() {
        let answer =
            br#"{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"shipped"}]}}"#;
        let v: Value = serde_json::from_slice(&with_note(answer, "pushed")).unwrap();
        assert_eq!(v["result"]["content"][0]["text"], "pushed");
        assert_eq!(v["result"]["content"][1]["text"], "shipped");
        let error = br#"{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"x"}}"#;
        assert_eq!(with_note(error, "pushed"), error.to_vec());
    }

    #[tokio::test]
    async fn only_a_call_of_ship_gets_the_prestep() {
        let dir = tempfile::tempdir().unwrap();
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pr_open","arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            "not json",
        ] {
            assert!(
                matches!(
                    ship_prestep(body.as_bytes(), "w01", dir.path()).await,
                    Prestep::Forward
                ),
                "{body}"
            );
        }
    }

    #[tokio::test]
    async fn a_ship_that_cannot_push_is_answered_as_the_tools_error() {
        let dir = tempfile::tempdir().unwrap();
        let body = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ship","arguments":{"title":"t","summary":"s"}}}"#;
        let Prestep::Answer(answer) = ship_prestep(body.as_bytes(), "w01", dir.path()).await else {
            panic!("a directory that is no checkout cannot be shipped from");
        };
        let v: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(v["id"], 7);
        assert_eq!(v["result"]["isError"], true);
        let text = v["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with("refused (not_a_checkout): "), "{text}");
    }
}
