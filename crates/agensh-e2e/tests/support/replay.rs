//! A replay server for the built-in agent's tests: an OpenAI-compatible
//! `POST /v1/chat/completions` on 127.0.0.1 that answers from a queue of scripted replies
//! and records every request (body and `Authorization` header). When the queue is empty it
//! answers with an end of turn (prose in tools style, an `end_turn` action when the request
//! asks for JSON) and counts it, so a test never hangs on a missing reply.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::Notify;

/// The text of the automatic end-of-turn reply.
pub const QUEUE_EMPTY: &str = "replay queue empty";

/// One scripted answer.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    pub content: Option<String>,
    /// (name, arguments) of each tool call; ids are given in order (`call_1`, …).
    pub tool_calls: Vec<(String, Value)>,
    /// (prompt_tokens, completion_tokens); `None`: about a token per 4 characters.
    pub usage: Option<(u64, u64)>,
    /// An error answer instead: (status, body).
    pub error: Option<(u16, String)>,
    /// Held until this is notified.
    pub hold: Option<Arc<Notify>>,
}

impl Reply {
    /// Prose, no tool calls.
    pub fn text(t: &str) -> Reply {
        Reply {
            content: Some(t.to_string()),
            ..Reply::default()
        }
    }

    /// One tool call.
    pub fn tool(name: &str, args: Value) -> Reply {
        Reply::default().and_tool(name, args)
    }

    /// Several tool calls in one reply.
    pub fn tools(calls: &[(&str, Value)]) -> Reply {
        calls
            .iter()
            .fold(Reply::default(), |r, (n, a)| r.and_tool(n, a.clone()))
    }

    /// A JSON-style action: `{"tool": name, "args": args}` as the content.
    pub fn action(name: &str, args: Value) -> Reply {
        Reply::text(&json!({ "tool": name, "args": args }).to_string())
    }

    /// An error status with a body.
    pub fn status(code: u16, body: &str) -> Reply {
        Reply {
            error: Some((code, body.to_string())),
            ..Reply::default()
        }
    }

    pub fn and_tool(mut self, name: &str, args: Value) -> Reply {
        self.tool_calls.push((name.to_string(), args));
        self
    }

    pub fn usage(mut self, prompt: u64, completion: u64) -> Reply {
        self.usage = Some((prompt, completion));
        self
    }

    /// Answered only once `gate` is notified.
    pub fn held(mut self, gate: Arc<Notify>) -> Reply {
        self.hold = Some(gate);
        self
    }
}

#[derive(Default)]
struct Inner {
    queue: VecDeque<Reply>,
    requests: Vec<Value>,
    raw: Vec<String>,
    auth: Vec<Option<String>>,
    empty_answers: usize,
    /// The ids of the tool calls of each answer, in order.
    call_ids: Vec<Vec<String>>,
}

#[derive(Clone)]
struct Shared {
    inner: Arc<Mutex<Inner>>,
    next_call: Arc<AtomicU64>,
}

/// A running replay server.
pub struct Replay {
    /// The base URL to configure, ending in `/v1`.
    pub base_url: String,
    shared: Shared,
    server: tokio::task::JoinHandle<()>,
}

impl Replay {
    pub async fn start() -> Replay {
        let shared = Shared {
            inner: Arc::new(Mutex::new(Inner::default())),
            next_call: Arc::new(AtomicU64::new(1)),
        };
        let app = Router::new()
            .route("/v1/chat/completions", post(answer))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Replay {
            base_url: format!("http://{addr}/v1"),
            shared,
            server,
        }
    }

    /// Queues replies, answered in order.
    pub fn push(&self, replies: impl IntoIterator<Item = Reply>) {
        self.shared.inner.lock().unwrap().queue.extend(replies);
    }

    /// Every request body so far.
    pub fn requests(&self) -> Vec<Value> {
        self.shared.inner.lock().unwrap().requests.clone()
    }

    /// Every request body as sent (key order kept).
    pub fn raw_requests(&self) -> Vec<String> {
        self.shared.inner.lock().unwrap().raw.clone()
    }

    /// The `Authorization` header of every request.
    pub fn auth_headers(&self) -> Vec<Option<String>> {
        self.shared.inner.lock().unwrap().auth.clone()
    }

    /// How many requests found the queue empty (and got the automatic end of turn).
    pub fn empty_answers(&self) -> usize {
        self.shared.inner.lock().unwrap().empty_answers
    }

    /// Scripted replies not yet used.
    pub fn left(&self) -> usize {
        self.shared.inner.lock().unwrap().queue.len()
    }

    /// The tool call ids the server gave, per answer.
    pub fn call_ids(&self) -> Vec<Vec<String>> {
        self.shared.inner.lock().unwrap().call_ids.clone()
    }

    /// Waits until `n` requests have arrived.
    pub async fn wait_requests(&self, n: usize) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while self.requests().len() < n {
            assert!(
                std::time::Instant::now() < deadline,
                "only {} of {n} requests arrived",
                self.requests().len()
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Replay {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Characters of the messages' contents.
fn message_chars(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .map(|m| {
                    m["content"].as_str().map_or(0, |s| s.chars().count())
                        + m.get("tool_calls").map_or(0, |c| c.to_string().len())
                })
                .sum()
        })
        .unwrap_or(0)
}

async fn answer(State(s): State<Shared>, headers: HeaderMap, raw: String) -> Response {
    let Ok(body) = serde_json::from_str::<Value>(&raw) else {
        return (StatusCode::BAD_REQUEST, "the body is not JSON").into_response();
    };
    let reply = {
        let mut inner = s.inner.lock().unwrap();
        inner.requests.push(body.clone());
        inner.raw.push(raw);
        inner.auth.push(
            headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        );
        match inner.queue.pop_front() {
            Some(r) => r,
            None => {
                inner.empty_answers += 1;
                if body.get("response_format").is_some() {
                    Reply::action("end_turn", json!({ "summary": QUEUE_EMPTY }))
                } else {
                    Reply::text(QUEUE_EMPTY)
                }
            }
        }
    };
    if let Some(gate) = &reply.hold {
        gate.notified().await;
    }
    if let Some((code, text)) = reply.error {
        s.inner.lock().unwrap().call_ids.push(Vec::new());
        return (StatusCode::from_u16(code).unwrap(), text).into_response();
    }
    let calls: Vec<Value> = reply
        .tool_calls
        .iter()
        .map(|(name, args)| {
            let id = format!("call_{}", s.next_call.fetch_add(1, Ordering::Relaxed));
            json!({
                "id": id,
                "type": "function",
                "function": { "name": name, "arguments": args.to_string() },
            })
        })
        .collect();
    s.inner.lock().unwrap().call_ids.push(
        calls
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_string())
            .collect(),
    );
    let content = reply.content.clone().unwrap_or_default();
    let (prompt, completion) = reply.usage.unwrap_or_else(|| {
        (
            (message_chars(&body) / 4) as u64 + 10,
            (content.len() / 4) as u64 + 1,
        )
    });
    let mut message = json!({ "role": "assistant", "content": reply.content });
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    Json(json!({
        "id": "chatcmpl-replay",
        "object": "chat.completion",
        "model": body["model"],
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": if reply.tool_calls.is_empty() { "stop" } else { "tool_calls" },
        }],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }))
    .into_response()
}
