//! A small client for the hub's MCP server (the organization tools), over the Streamable
//! HTTP transport: every JSON-RPC 2.0 message is one `POST` to `<hub>/mcp`, answered
//! with JSON or with an SSE stream that carries the answer.
//!
//! Used by the scripted agent and the tests; real agents bring their own MCP client.
//! The session id the server gives at `initialize` (`Mcp-Session-Id`) is sent back on every
//! later request; when the server forgets it (HTTP 404) the client initializes again once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use agensh_domain::{Error, ErrorKind};
use agensh_protocol::framing::SseParser;
use agensh_protocol::jsonrpc::{code, Id, Message, Notification, Request, Response};
use agensh_protocol::rest::ErrorBody;
use reqwest::header::{HeaderMap, CONTENT_TYPE};
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::Result;

/// The MCP protocol revision this client asks for.
pub const PROTOCOL_VERSION: &str = "2025-06-18";

/// The header carrying the MCP session id.
pub const SESSION_HEADER: &str = "mcp-session-id";

/// The prefix of the text block in which the hub attaches urgent events to a tool result.
pub const NOTICES_PREFIX: &str = "notices:";

/// A connection to one MCP server with one bearer token.
pub struct McpClient {
    url: String,
    token: String,
    http: reqwest::Client,
    next_id: AtomicU64,
    session: Mutex<Session>,
}

#[derive(Default, Clone)]
struct Session {
    id: Option<String>,
    protocol: Option<String>,
    /// The server's answer to `initialize`.
    info: Value,
}

/// A tool the server offers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolInfo {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(rename = "inputSchema", default)]
    pub input_schema: Value,
}

/// What a tool call answered.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ToolResult {
    /// Every text block but the notices, joined by newlines.
    pub text: String,
    /// The tool reported a failure (`isError`): the text says what went wrong and what to do.
    pub is_error: bool,
    /// The text block starting with `notices:` (urgent events delivered inside the turn).
    pub notices: Option<String>,
    /// The tool's `structuredContent`, when it gave one.
    pub structured: Option<Value>,
}

impl McpClient {
    /// Connects to the MCP server at `url` (e.g. `http://127.0.0.1:7420/mcp`) with `token`
    /// and runs the `initialize` handshake.
    pub async fn connect(url: &str, token: &str) -> Result<McpClient> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .expect("HTTP client builds");
        let c = McpClient {
            url: url.to_string(),
            token: token.to_string(),
            http,
            next_id: AtomicU64::new(1),
            session: Mutex::new(Session::default()),
        };
        c.initialize().await?;
        Ok(c)
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The session id the server gave at `initialize`, if it gave one.
    pub fn session_id(&self) -> Option<String> {
        self.session.lock().expect("session lock").id.clone()
    }

    /// The server's answer to `initialize` (protocol version, capabilities, server info).
    pub fn server_info(&self) -> Value {
        self.session.lock().expect("session lock").info.clone()
    }

    async fn initialize(&self) -> Result<()> {
        *self.session.lock().expect("session lock") = Session::default();
        let params = json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": { "name": "agensh", "version": env!("CARGO_PKG_VERSION") },
        });
        let (result, headers) = self.rpc_once("initialize", params).await?;
        let id = headers
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let protocol = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
        *self.session.lock().expect("session lock") = Session {
            id,
            protocol,
            info: result,
        };
        self.notify("notifications/initialized", json!({})).await
    }

    /// The tools the server offers (every page).
    pub async fn list_tools(&self) -> Result<Vec<ToolInfo>> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let page = self.rpc("tools/list", params).await?;
            let list: Vec<ToolInfo> =
                serde_json::from_value(page.get("tools").cloned().unwrap_or(json!([])))
                    .map_err(|e| not_understood("tools/list", e))?;
            tools.extend(list);
            cursor = page
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(str::to_string);
            if cursor.is_none() {
                return Ok(tools);
            }
        }
    }

    /// Calls tool `name` with `args` (a JSON object). A tool that fails answers `Ok` with
    /// `is_error`; `Err` is a failure to talk to the server at all.
    pub async fn call_tool(&self, name: &str, args: Value) -> Result<ToolResult> {
        let args = if args.is_null() { json!({}) } else { args };
        let result = self
            .rpc("tools/call", json!({ "name": name, "arguments": args }))
            .await?;
        Ok(tool_result(&result))
    }

    /// A request; initializes again once if the server lost the session.
    async fn rpc(&self, method: &str, params: Value) -> Result<Value> {
        match self.rpc_once(method, params.clone()).await {
            Err(e) if e.code == "mcp_session_expired" => {
                self.initialize().await?;
                Ok(self.rpc_once(method, params).await?.0)
            }
            r => r.map(|(v, _)| v),
        }
    }

    fn post(&self, body: &Message) -> reqwest::RequestBuilder {
        let session = self.session.lock().expect("session lock").clone();
        let mut r = self
            .http
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("accept", "application/json, text/event-stream")
            .json(body);
        if let Some(id) = &session.id {
            r = r.header(SESSION_HEADER, id);
        }
        if let Some(p) = &session.protocol {
            r = r.header("mcp-protocol-version", p);
        }
        r
    }

    async fn notify(&self, method: &str, params: Value) -> Result<()> {
        let body = Message::Notification(Notification::new(method, params));
        let resp = self
            .post(&body)
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(());
        }
        let text = resp.text().await.unwrap_or_default();
        Err(self.http_error(status, &text))
    }

    async fn rpc_once(&self, method: &str, params: Value) -> Result<(Value, HeaderMap)> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = Message::Request(Request::new(id, method, params));
        let mut resp = self
            .post(&body)
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            if status == StatusCode::NOT_FOUND
                && self.session.lock().expect("session lock").id.is_some()
            {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    "mcp_session_expired",
                    "the MCP server no longer knows this session — initialize again",
                ));
            }
            return Err(self.http_error(status, &text));
        }
        let sse = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
        let answer = if sse {
            // Read events until the one answering `id`; the server may keep the stream open.
            let mut events = SseParser::new();
            let mut found = None;
            while found.is_none() {
                match resp.chunk().await.map_err(|e| self.transport(e))? {
                    Some(bytes) => {
                        found = events
                            .push(&bytes)
                            .iter()
                            .find_map(|e| answer_in_event(&e.data, id));
                    }
                    None => {
                        found = events.finish().and_then(|e| answer_in_event(&e.data, id));
                        break;
                    }
                }
            }
            found.ok_or_else(|| {
                Error::internal(format!(
                    "the MCP server closed its event stream without answering {method}"
                ))
            })?
        } else {
            let bytes = resp.bytes().await.map_err(|e| self.transport(e))?;
            let v: Value = serde_json::from_slice(&bytes).map_err(|e| not_understood(method, e))?;
            answer_in(v, id)
                .ok_or_else(|| Error::internal(format!("the MCP server did not answer {method}")))?
        };
        match answer.result {
            Ok(result) => Ok((result, headers)),
            Err(err) => {
                let kind = match err.code {
                    code::METHOD_NOT_FOUND
                    | code::INVALID_PARAMS
                    | code::INVALID_REQUEST
                    | code::PARSE_ERROR => ErrorKind::Invalid,
                    _ => ErrorKind::Internal,
                };
                Err(Error::new(
                    kind,
                    "mcp_error",
                    format!(
                        "the MCP server refused {method} ({}): {}",
                        err.code,
                        err.describe()
                    ),
                ))
            }
        }
    }

    fn transport(&self, e: reqwest::Error) -> Error {
        Error::new(
            ErrorKind::Internal,
            "unreachable",
            format!(
                "cannot reach the MCP server at {}: {e} — is the hub running?",
                self.url
            ),
        )
    }

    fn http_error(&self, status: StatusCode, body: &str) -> Error {
        let kind = super::kind_of(status);
        match serde_json::from_str::<ErrorBody>(body) {
            Ok(b) => Error::new(kind, &b.error.code, b.error.message),
            Err(_) => Error::new(
                kind,
                "http_error",
                format!("the MCP server at {} answered {status}", self.url),
            ),
        }
    }
}

fn not_understood(method: &str, e: serde_json::Error) -> Error {
    Error::internal(format!(
        "the MCP server's answer to {method} was not understood: {e}"
    ))
}

/// The response to request `id` in an event's data; data that is not JSON is passed over.
fn answer_in_event(data: &str, id: u64) -> Option<Response> {
    answer_in(serde_json::from_str(data).ok()?, id)
}

/// The response to request `id` in `v`: one message or a batch of them; anything else
/// there (notifications, other answers, values that are not JSON-RPC) is passed over.
fn answer_in(v: Value, id: u64) -> Option<Response> {
    let answers = |m: Message| match m {
        Message::Response(r) if r.id == Id::from(id) => Some(r),
        _ => None,
    };
    match v {
        Value::Array(items) => items
            .into_iter()
            .filter_map(|v| Message::from_value(v).ok())
            .find_map(answers),
        v => Message::from_value(v).ok().and_then(answers),
    }
}

/// Reads a `tools/call` result: text blocks, notices, `isError`, `structuredContent`.
pub fn tool_result(result: &Value) -> ToolResult {
    let mut texts = Vec::new();
    let mut notices: Vec<String> = Vec::new();
    for block in result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if block.get("type").and_then(Value::as_str) != Some("text") {
            continue;
        }
        let Some(t) = block.get("text").and_then(Value::as_str) else {
            continue;
        };
        if t.trim_start().starts_with(NOTICES_PREFIX) {
            notices.push(t.to_string());
        } else {
            texts.push(t.to_string());
        }
    }
    ToolResult {
        text: texts.join("\n"),
        is_error: result
            .get("isError")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        notices: (!notices.is_empty()).then(|| notices.join("\n")),
        structured: result
            .get("structuredContent")
            .filter(|v| !v.is_null())
            .cloned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_splits_text_and_notices() {
        let r = tool_result(&json!({
            "content": [
                { "type": "text", "text": "G1 [w01/FACT] x" },
                { "type": "text", "text": "G2 [w02/FACT] y" },
                { "type": "text", "text": "notices:\n- DM from w02: hi" },
            ],
            "isError": false,
            "structuredContent": { "records": [] },
        }));
        assert_eq!(r.text, "G1 [w01/FACT] x\nG2 [w02/FACT] y");
        assert_eq!(r.notices.as_deref(), Some("notices:\n- DM from w02: hi"));
        assert!(!r.is_error);
        assert_eq!(r.structured, Some(json!({ "records": [] })));
    }

    #[test]
    fn the_answer_is_matched_by_id() {
        let progress = r#"{"jsonrpc":"2.0","method":"notifications/progress"}"#;
        assert!(answer_in_event(progress, 7).is_none());
        assert!(answer_in_event(r#"{"jsonrpc":"2.0","id":6,"result":{}}"#, 7).is_none());
        assert!(answer_in_event("not json", 7).is_none());
        let answer =
            answer_in_event(r#"{"jsonrpc":"2.0","id":7,"result":{"ok":true}}"#, 7).unwrap();
        assert_eq!(answer.result, Ok(json!({ "ok": true })));
        let batch = json!([
            { "jsonrpc": "2.0", "method": "notifications/progress" },
            { "jsonrpc": "2.0", "id": 7, "error": { "code": -32602, "message": "m" } },
        ]);
        assert_eq!(
            answer_in(batch, 7).unwrap().result.unwrap_err().code,
            -32602
        );
    }
}
