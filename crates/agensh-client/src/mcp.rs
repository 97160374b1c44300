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

    fn post(&self, body: &Value) -> reqwest::RequestBuilder {
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
        let body = json!({ "jsonrpc": "2.0", "method": method, "params": params });
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
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
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
            let mut buf = String::new();
            let mut found = None;
            while found.is_none() {
                match resp.chunk().await.map_err(|e| self.transport(e))? {
                    Some(bytes) => {
                        buf.push_str(&String::from_utf8_lossy(&bytes));
                        found = take_sse_answer(&mut buf, id);
                    }
                    None => {
                        buf.push_str("\n\n");
                        found = take_sse_answer(&mut buf, id);
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
            match v {
                Value::Array(items) => {
                    items.into_iter().find(|m| answers(m, id)).ok_or_else(|| {
                        Error::internal(format!("the MCP server did not answer {method}"))
                    })?
                }
                m => m,
            }
        };
        if let Some(err) = answer.get("error") {
            let code = err.get("code").and_then(Value::as_i64).unwrap_or(0);
            let message = err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("no message");
            let kind = match code {
                -32601 | -32602 | -32600 | -32700 => ErrorKind::Invalid,
                _ => ErrorKind::Internal,
            };
            return Err(Error::new(
                kind,
                "mcp_error",
                format!("the MCP server refused {method} ({code}): {message}"),
            ));
        }
        Ok((
            answer.get("result").cloned().unwrap_or(Value::Null),
            headers,
        ))
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
        #[derive(Deserialize)]
        struct Body {
            error: Inner,
        }
        #[derive(Deserialize)]
        struct Inner {
            code: String,
            message: String,
        }
        let kind = super::kind_of(status);
        match serde_json::from_str::<Body>(body) {
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

/// True when `m` is the JSON-RPC response to request `id`.
fn answers(m: &Value, id: u64) -> bool {
    m.get("id").and_then(Value::as_u64) == Some(id)
        && (m.get("result").is_some() || m.get("error").is_some())
}

/// Takes every complete SSE event out of `buf`; returns the message answering `id`.
fn take_sse_answer(buf: &mut String, id: u64) -> Option<Value> {
    loop {
        let normalized = buf.replace("\r\n", "\n");
        *buf = normalized;
        let end = buf.find("\n\n")?;
        let event: String = buf.drain(..end + 2).collect();
        let data: Vec<&str> = event
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        if data.is_empty() {
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(&data.join("\n")) else {
            continue;
        };
        let found = match v {
            Value::Array(items) => items.into_iter().find(|m| answers(m, id)),
            m if answers(&m, id) => Some(m),
            _ => None,
        };
        if found.is_some() {
            return found;
        }
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
    fn sse_events_are_taken_whole_and_matched_by_id() {
        let mut buf = String::from(
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n\
             event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\r\ndata: \"result\":{\"ok\":true}}\r\n\r\nda",
        );
        let v = take_sse_answer(&mut buf, 7).expect("answer found");
        assert_eq!(v["result"]["ok"], json!(true));
        assert_eq!(buf, "da");
        let mut partial = String::from("data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n");
        assert!(take_sse_answer(&mut partial, 7).is_none());
    }
}
