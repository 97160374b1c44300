//! A replay model server: the model APIs real agent CLIs speak, answered from a
//! [`Scenario`] instead of a model, for tests and offline trials (`agensh model replay`).
//!
//! Each request that offers tools takes the next step of the scenario; every client has its
//! own place in it — the worker the agensh gateway names (`x-agensh-worker`), else the key
//! (`Authorization: Bearer`, `x-api-key`, `x-goog-api-key`, `?key=`) — so the workers of
//! one organization each follow the whole scenario. A request that
//! offers no tools (an agent's title or summary request) is answered with the scenario's
//! `side_text` and takes no step. Usage is reported in each API's own fields and added up
//! per key ([`ReplayServer::served`]); every request is kept ([`ReplayServer::requests`])
//! and, when asked, appended to a JSON-lines file.
//!
//! Invariant: the server only answers on the address it was given (tests give
//! 127.0.0.1:0); it never makes a request of its own.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use serde::Serialize;
use serde_json::{json, Value};

pub mod api;
pub mod scenario;

pub use api::Api;
pub use scenario::{Scenario, ScenarioError, UsageSpec};

use api::{Answer, Call};
use scenario::{ErrorSpec, OfferedTool, ToolCallSpec};

/// What the server served one key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Served {
    /// Requests answered from a step or with the final text.
    pub requests: u64,
    /// Requests without tools, answered with the side text.
    pub side_requests: u64,
    /// Prompt tokens reported, cached ones included.
    pub input_tokens: u64,
    /// Of them, read from the cache.
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    /// Requests refused by the scenario's rate-limit storm (`refuse_every`).
    pub refused: u64,
}

impl Served {
    /// What was served to client key `key`, in words (`(no key)` for requests without one).
    pub fn line(&self, key: &str) -> String {
        let key = if key.is_empty() { "(no key)" } else { key };
        format!(
            "{key}: {} request(s) and {} without tools; tokens in {} (cached {}) out {}",
            self.requests,
            self.side_requests,
            self.input_tokens,
            self.cached_input_tokens,
            self.output_tokens
        )
    }
}

/// One request as the server saw it.
#[derive(Debug, Clone, Serialize)]
pub struct Recorded {
    pub api: &'static str,
    pub path: String,
    /// The client's key (empty when it sent none).
    pub key: String,
    /// The worker the gateway named (`x-agensh-worker`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    pub stream: bool,
    /// The names of the tools it offered.
    pub tools: Vec<String>,
    /// The step it took (1-based), or none (side request, final text, error before a step).
    pub step: Option<usize>,
    pub status: u16,
    /// The usage reported in the answer (none for an error answer).
    pub usage: Option<UsageSpec>,
    pub body: Value,
}

struct Shared {
    scenario: Scenario,
    /// The next step of each key.
    cursors: Mutex<HashMap<String, usize>>,
    served: Mutex<BTreeMap<String, Served>>,
    requests: Mutex<Vec<Recorded>>,
    record: Option<Mutex<std::fs::File>>,
    ids: AtomicU64,
    /// Model requests seen, for `refuse_every`.
    seen: AtomicU64,
}

/// A running replay server.
pub struct ReplayServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl ReplayServer {
    /// Starts serving `scenario` on `listen` (`127.0.0.1:0` picks a free port); with
    /// `record`, every request is appended to that file as a JSON line.
    pub async fn start(
        scenario: Scenario,
        listen: &str,
        record: Option<PathBuf>,
    ) -> std::io::Result<ReplayServer> {
        let record = match record {
            Some(path) => Some(Mutex::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .map_err(|e| {
                        std::io::Error::new(
                            e.kind(),
                            format!("cannot open the record file {}: {e}", path.display()),
                        )
                    })?,
            )),
            None => None,
        };
        let shared = Arc::new(Shared {
            scenario,
            cursors: Mutex::default(),
            served: Mutex::default(),
            requests: Mutex::default(),
            record,
            ids: AtomicU64::new(1),
            seen: AtomicU64::new(0),
        });
        let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot listen on {listen}: {e}"))
        })?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = router(shared.clone());
        let task = tokio::spawn(async move {
            let serve =
                axum::serve(listener, app.into_make_service()).with_graceful_shutdown(async {
                    let _ = stopped.await;
                });
            if let Err(e) = serve.await {
                tracing::warn!("the replay server stopped: {e}");
            }
        });
        Ok(ReplayServer {
            addr,
            shared,
            stop: Some(stop),
            task,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its base URL, `http://127.0.0.1:PORT` (the APIs are under `/v1` and `/v1beta`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What it served each key so far.
    pub fn served(&self) -> BTreeMap<String, Served> {
        lock(&self.shared.served).clone()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.requests).clone()
    }

    /// Stops serving and waits for the server to end.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for ReplayServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/messages", post(anthropic))
        .route("/v1/messages/count_tokens", post(anthropic_count))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/responses", post(responses))
        .route("/v1/models", get(openai_models))
        .route("/v1beta/models", get(gemini_models))
        .route("/v1beta/models/{*rest}", post(gemini))
        .route("/v1/models/{*rest}", post(gemini))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            think_first,
        ))
        .with_state(shared)
}

/// Waits the scenario's `answer_delay_ms` before answering a `POST` (a model that thinks
/// before its first byte); a client that goes away meanwhile is never answered.
async fn think_first(
    State(shared): State<Arc<Shared>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let delay = shared.scenario.answer_delay_ms;
    if delay > 0 && req.method() == axum::http::Method::POST {
        tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
    }
    next.run(req).await
}

async fn not_found(uri: axum::http::Uri) -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        &json!({ "error": { "message": format!(
            "the replay server has no {} — it answers POST /v1/messages, /v1/chat/completions, /v1/responses and /v1beta/models/MODEL:generateContent (or :streamGenerateContent, :countTokens)",
            uri.path()
        ) } }),
    )
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .expect("a valid response")
}

fn sse_response(body: Body) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body)
        .expect("a valid response")
}

/// The events of a streamed answer as they are made.
struct Events(tokio::sync::mpsc::Receiver<Bytes>);

impl futures_core::Stream for Events {
    type Item = Result<Bytes, std::convert::Infallible>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|e| e.map(Ok))
    }
}

/// The key a client sent, wherever its API puts it.
fn key_of(headers: &HeaderMap, query: Option<&str>) -> String {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    header("authorization")
        .map(|v| v.strip_prefix("Bearer ").map(str::to_string).unwrap_or(v))
        .or_else(|| header("x-api-key"))
        .or_else(|| header("x-goog-api-key"))
        .or_else(|| {
            query?
                .split('&')
                .find_map(|kv| kv.strip_prefix("key="))
                .map(str::to_string)
        })
        .unwrap_or_default()
}

/// The worker the agensh gateway says a request is for.
fn worker_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get("x-agensh-worker")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

/// Who has a place in the scenario: the gateway's worker, else the key.
fn client_of(headers: &HeaderMap, query: Option<&str>) -> String {
    worker_of(headers).unwrap_or_else(|| key_of(headers, query))
}

/// A request's body, when it is a JSON object.
fn parse_body(body: &Bytes) -> Option<Value> {
    serde_json::from_slice::<Value>(body)
        .ok()
        .filter(Value::is_object)
}

/// The API's error for a body that is not a JSON object.
fn bad_body(api: Api) -> Response {
    let e = ErrorSpec {
        status: 400,
        message: "the request body is not a JSON object".into(),
    };
    json_response(StatusCode::BAD_REQUEST, &api::error(api, &e))
}

/// What a request asks, whatever its API.
struct Ask {
    api: Api,
    path: String,
    key: String,
    /// Who has a place in the scenario: the gateway's worker, else the key.
    client: String,
    worker: Option<String>,
    model: String,
    stream: bool,
    chat_usage: bool,
    body: Value,
}

impl Shared {
    fn next_id(&self, prefix: &str) -> String {
        format!("{prefix}{}", self.ids.fetch_add(1, Ordering::Relaxed))
    }

    /// Answers `ask`: from the client's next step, the final text, or the side text — or a
    /// refusal of the scenario's rate-limit storm.
    fn answer(&self, ask: Ask) -> Response {
        let offered = api::offered_tools(ask.api, &ask.body);
        let n = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        if self.scenario.refuse_every > 0 && n.is_multiple_of(self.scenario.refuse_every) {
            return self.refuse(ask, offered);
        }
        let (outcome, step) = self.outcome(&ask, &offered);
        let usage = outcome.as_ref().ok().map(|a| a.usage);
        let (status, response) = match &outcome {
            Err(e) => {
                let status =
                    StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                (status, json_response(status, &api::error(ask.api, e)))
            }
            Ok(a) => {
                let mut served = lock(&self.served);
                let s = served.entry(ask.client.clone()).or_default();
                if offered.is_empty() {
                    s.side_requests += 1;
                } else {
                    s.requests += 1;
                }
                s.input_tokens += a.usage.input;
                s.cached_input_tokens += a.usage.cached;
                s.output_tokens += a.usage.output;
                let response = if ask.stream {
                    self.stream(ask.api, api::events(ask.api, a, ask.chat_usage))
                } else {
                    json_response(StatusCode::OK, &api::body(ask.api, a))
                };
                (StatusCode::OK, response)
            }
        };
        self.keep(Recorded {
            api: ask.api.name(),
            path: ask.path,
            key: ask.key,
            worker: ask.worker,
            stream: ask.stream,
            tools: offered.into_iter().map(|t| t.name).collect(),
            step,
            status: status.as_u16(),
            usage,
            body: ask.body,
        });
        response
    }

    /// A streamed answer: `text`, after the scenario's padding events, each event after
    /// `event_delay_ms`.
    fn stream(&self, api: Api, text: String) -> Response {
        let sc = &self.scenario;
        if sc.pad_events == 0 && sc.event_delay_ms == 0 {
            return sse_response(Body::from(text));
        }
        let pad = "x".repeat(sc.pad_bytes);
        let pad_event = Bytes::from(match api {
            Api::Chat => format!(
                "data: {{\"id\":\"pad\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{pad}\"}}}}]}}\n\n"
            ),
            _ => format!(": {pad}\n\n"),
        });
        let (n, delay) = (
            sc.pad_events,
            std::time::Duration::from_millis(sc.event_delay_ms),
        );
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
        tokio::spawn(async move {
            let events = std::iter::repeat_n(pad_event, n).chain(
                text.split_inclusive("\n\n")
                    .map(|e| Bytes::from(e.to_string()))
                    .collect::<Vec<_>>(),
            );
            for (i, e) in events.enumerate() {
                if i > 0 && !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                if tx.send(e).await.is_err() {
                    return; // the client went away
                }
            }
        });
        sse_response(Body::from_stream(Events(rx)))
    }

    /// A 429 with `Retry-After`, in the API's error shape; no step is taken.
    fn refuse(&self, ask: Ask, offered: Vec<OfferedTool>) -> Response {
        let e = ErrorSpec {
            status: 429,
            message: self.scenario.refuse_message.clone(),
        };
        lock(&self.served)
            .entry(ask.client.clone())
            .or_default()
            .refused += 1;
        let mut response = json_response(StatusCode::TOO_MANY_REQUESTS, &api::error(ask.api, &e));
        if let Ok(v) = header::HeaderValue::from_str(&self.scenario.retry_after.to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        self.keep(Recorded {
            api: ask.api.name(),
            path: ask.path,
            key: ask.key,
            worker: ask.worker,
            stream: ask.stream,
            tools: offered.into_iter().map(|t| t.name).collect(),
            step: None,
            status: 429,
            usage: None,
            body: ask.body,
        });
        response
    }

    /// What `ask` gets, and the step (1-based) it took, if any: a refusal of a key the
    /// scenario does not accept, the side text for a request without tools, the key's next
    /// step, or the final text once the steps are used.
    fn outcome(
        &self,
        ask: &Ask,
        offered: &[OfferedTool],
    ) -> (Result<Answer, ErrorSpec>, Option<usize>) {
        if !self.scenario.keys.is_empty() && !self.scenario.keys.contains(&ask.key) {
            let e = ErrorSpec {
                status: 401,
                message: format!(
                    "the key {:?} is not one this replay server accepts",
                    short(&ask.key)
                ),
            };
            return (Err(e), None);
        }
        let text = |t: &String| self.reply(ask, Some(t.clone()), Vec::new(), None);
        if offered.is_empty() {
            return (Ok(text(&self.scenario.side_text)), None);
        }
        let at = self.advance(&ask.client);
        let Some(step) = self.scenario.steps.get(at) else {
            return (Ok(text(&self.scenario.final_text)), None);
        };
        if let Some(e) = &step.error {
            return (Err(e.clone()), Some(at + 1));
        }
        let calls = step
            .tool_calls
            .iter()
            .map(|c| self.call(ask.api, c, offered))
            .collect();
        let answer = self.reply(ask, step.text.clone(), calls, step.usage);
        (Ok(answer), Some(at + 1))
    }

    /// The client's place in the scenario, moved on by one.
    fn advance(&self, key: &str) -> usize {
        let mut cursors = lock(&self.cursors);
        let at = cursors.entry(key.to_string()).or_insert(0);
        *at += 1;
        *at - 1
    }

    /// A tool call of a step, resolved against the tools the request offers.
    fn call(&self, api: Api, spec: &ToolCallSpec, offered: &[OfferedTool]) -> Call {
        let (call, tool) = scenario::resolve(spec, offered);
        Call {
            id: self.next_id(match api {
                Api::Anthropic => "toolu_",
                _ => "call_",
            }),
            name: tool.as_ref().map_or(call.name.clone(), |t| t.name.clone()),
            namespace: tool.and_then(|t| t.namespace),
            args: call.args.clone(),
        }
    }

    /// An answer of `text` and `calls`, with `usage`, or usage estimated from the sizes of
    /// the request and the answer.
    fn reply(
        &self,
        ask: &Ask,
        text: Option<String>,
        calls: Vec<Call>,
        usage: Option<UsageSpec>,
    ) -> Answer {
        let usage = usage.unwrap_or_else(|| {
            let out_chars = text.as_deref().map_or(0, str::len)
                + calls
                    .iter()
                    .map(|c| c.args.to_string().len())
                    .sum::<usize>();
            let in_chars = ask.body.to_string().chars().count();
            estimate(in_chars as u64, out_chars as u64)
        });
        Answer {
            id: self.next_id(id_prefix(ask.api)),
            model: ask.model.clone(),
            text,
            calls,
            usage,
        }
    }

    fn keep(&self, r: Recorded) {
        if let Some(file) = &self.record {
            let mut line = serde_json::to_string(&r).unwrap_or_default();
            line.push('\n');
            if let Err(e) = lock(file).write_all(line.as_bytes()) {
                tracing::warn!("cannot record a request: {e}");
            }
        }
        lock(&self.requests).push(r);
    }
}

fn id_prefix(api: Api) -> &'static str {
    match api {
        Api::Anthropic => "msg_",
        Api::Chat => "chatcmpl-",
        Api::Responses => "resp_",
        Api::Gemini => "replay-",
    }
}

/// Usage when the step gives none: about a token per 4 characters, at least 1.
fn estimate(in_chars: u64, out_chars: u64) -> UsageSpec {
    UsageSpec {
        input: (in_chars / 4).max(1),
        output: (out_chars / 4).max(1),
        cached: 0,
    }
}

/// A key shown in a message: its first characters only.
fn short(key: &str) -> String {
    let head: String = key.chars().take(6).collect();
    if head.len() < key.len() {
        format!("{head}…")
    } else {
        head
    }
}

fn model_of(body: &Value) -> String {
    body.get("model")
        .and_then(Value::as_str)
        .unwrap_or("replay")
        .to_string()
}

/// A request to an API whose body names the model and whether to stream.
fn body_api(
    api: Api,
    path: &str,
    shared: &Shared,
    headers: &HeaderMap,
    query: Option<&str>,
    body: &Bytes,
) -> Response {
    let Some(body) = parse_body(body) else {
        return bad_body(api);
    };
    shared.answer(Ask {
        api,
        path: path.to_string(),
        key: key_of(headers, query),
        client: client_of(headers, query),
        worker: worker_of(headers),
        model: model_of(&body),
        stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        chat_usage: api == Api::Chat && api::chat_wants_usage(&body),
        body,
    })
}

async fn anthropic(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    body_api(
        Api::Anthropic,
        "/v1/messages",
        &shared,
        &headers,
        query.as_deref(),
        &body,
    )
}

async fn anthropic_count(body: Bytes) -> Response {
    json_response(
        StatusCode::OK,
        &json!({ "input_tokens": estimate(body.len() as u64, 0).input }),
    )
}

async fn chat(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    body_api(
        Api::Chat,
        "/v1/chat/completions",
        &shared,
        &headers,
        query.as_deref(),
        &body,
    )
}

async fn responses(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    body_api(
        Api::Responses,
        "/v1/responses",
        &shared,
        &headers,
        query.as_deref(),
        &body,
    )
}

async fn openai_models() -> Response {
    json_response(
        StatusCode::OK,
        &json!({ "object": "list", "data": [{ "id": "replay", "object": "model", "created": 0, "owned_by": "agensh" }] }),
    )
}

async fn gemini_models() -> Response {
    json_response(
        StatusCode::OK,
        &json!({ "models": [{ "name": "models/replay", "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"] }] }),
    )
}

/// `/v1beta/models/{model}:{method}`.
async fn gemini(
    State(shared): State<Arc<Shared>>,
    Path(rest): Path<String>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    let Some((model, method)) = rest.rsplit_once(':') else {
        return not_found(format!("/v1beta/models/{rest}").parse().expect("a path")).await;
    };
    let stream = match method {
        "generateContent" => false,
        "streamGenerateContent" => true,
        "countTokens" => {
            return json_response(
                StatusCode::OK,
                &json!({ "totalTokens": estimate(body.len() as u64, 0).input }),
            )
        }
        other => {
            let e = ErrorSpec {
                status: 404,
                message: format!(
                    "the replay server has no method {other:?}: use generateContent, streamGenerateContent or countTokens"
                ),
            };
            return json_response(StatusCode::NOT_FOUND, &api::error(Api::Gemini, &e));
        }
    };
    let Some(body) = parse_body(&body) else {
        return bad_body(Api::Gemini);
    };
    shared.answer(Ask {
        api: Api::Gemini,
        path: format!("/v1beta/models/{rest}"),
        key: key_of(&headers, query.as_deref()),
        client: client_of(&headers, query.as_deref()),
        worker: worker_of(&headers),
        model: model.to_string(),
        stream,
        chat_usage: false,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_key_was_served_in_words() {
        let s = Served {
            requests: 3,
            side_requests: 1,
            input_tokens: 100,
            cached_input_tokens: 40,
            output_tokens: 7,
            refused: 0,
        };
        assert_eq!(
            s.line(""),
            "(no key): 3 request(s) and 1 without tools; tokens in 100 (cached 40) out 7"
        );
    }

    #[test]
    fn the_key_is_found_wherever_the_api_puts_it() {
        let mut h = HeaderMap::new();
        assert_eq!(key_of(&h, Some("alt=sse&key=g1")), "g1");
        h.insert("x-goog-api-key", "g2".parse().unwrap());
        assert_eq!(key_of(&h, Some("key=g1")), "g2");
        h.insert("x-api-key", "a1".parse().unwrap());
        assert_eq!(key_of(&h, None), "a1");
        h.insert("authorization", "Bearer o1".parse().unwrap());
        assert_eq!(key_of(&h, None), "o1");
        assert_eq!(key_of(&HeaderMap::new(), None), "");
    }
}
