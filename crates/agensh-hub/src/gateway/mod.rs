//! The model gateway (`/model/<family>/...`): every worker's model traffic through the hub.
//!
//! A worker's agent sends its requests here with its own agensh token where its API puts a
//! key; the gateway finds the worker's route (`[[gateway.routes]]`, or the `[model]`
//! shorthand), swaps the token for the upstream's key, and passes the answer back as it
//! arrives, reading its usage on the way ([`body::Observed`]) and recording it once, at its
//! end, per worker, turn and model. Requests the upstream refuses with 429 or 5xx, or whose
//! connection drops before the first byte, are tried again after a wait (exponential, with
//! jitter, or what `Retry-After` says); nothing is tried again once a byte reached the
//! worker. Each upstream lets a limited number of requests in flight, through a queue that
//! is fair across workers ([`fair::FairQueue`]).
//!
//! Invariant: no key or token is logged or sent anywhere but to its own upstream: the
//! worker's token is removed from the headers and the query before the request goes on.

pub mod body;
pub mod budget;
pub mod fair;
pub mod shape;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agensh_domain::gateway::{GatewayConfig, UpstreamConfig};
use agensh_domain::Error;
use agensh_protocol::model_usage::{ask_for_stream_usage, Flavour, Prices, StreamUsage};
use agensh_protocol::rest::ModelRequest;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::Response;
use axum::routing::any;
use axum::Router;
use serde_json::Value;

use self::body::{Meter, Observed};
use self::fair::{FairQueue, Permit};
use self::shape::{error, Family};
use crate::metrics::inc;
use crate::state::AppState;

/// The largest request body the gateway takes (a whole prompt window and then some).
pub const BODY_LIMIT: usize = 32 << 20;

/// One upstream, ready to take requests.
pub struct Upstream {
    pub name: String,
    /// The API it speaks; `None`: any (the one the worker's agent speaks).
    api: Option<Family>,
    /// Its base URL without a trailing `/`.
    base: String,
    /// The URL has a path (`…/v1`, `…/api/v1`, `…/v1beta/openai`): it stands for the API's
    /// version segment, which a request's path then goes without. Without one, a request's
    /// whole path (`v1/messages`) goes after the host.
    versioned: bool,
    key: Option<String>,
    /// The variable its key should come from, when it is not set in the hub's environment:
    /// its requests are refused with what to do (the hub itself still serves everything else).
    missing_key: Option<String>,
    prices: Prices,
    fallback: Option<String>,
    queue: Arc<FairQueue>,
    http: reqwest::Client,
}

impl Upstream {
    /// Where a request for `path` (`v1/messages`, `v1beta/models/m:generateContent`) goes.
    fn url_of(&self, path: &str) -> String {
        let rest = match (self.versioned, path.split_once('/')) {
            (true, Some((_version, rest))) => rest,
            _ => path,
        };
        format!("{}/{rest}", self.base)
    }
}

/// The gateway's configuration and upstreams.
pub struct Gateway {
    pub config: GatewayConfig,
    upstreams: HashMap<String, Arc<Upstream>>,
    pub budgets: budget::Budgets,
}

/// The variables of `config`'s upstream keys that `env` does not have: an organization that
/// runs with them unset gets every request to those upstreams refused.
pub fn missing_keys(
    config: &GatewayConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    config
        .upstreams
        .iter()
        .filter(|u| !u.api_key_env.is_empty() && env(&u.api_key_env).is_none_or(|k| k.is_empty()))
        .map(|u| (u.name.clone(), u.api_key_env.clone()))
        .collect()
}

impl Gateway {
    /// The upstreams of `config`, each key read through `env` (the hub's environment), and
    /// the budgets of `budgets` (what was spent is loaded later, from the store).
    pub fn new(
        config: &GatewayConfig,
        budgets: &agensh_domain::budget::BudgetConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, Error> {
        let mut upstreams = HashMap::new();
        for u in &config.upstreams {
            upstreams.insert(u.name.clone(), Arc::new(upstream(u, &env)?));
        }
        Ok(Gateway {
            config: config.clone(),
            upstreams,
            budgets: budget::Budgets::new(budgets),
        })
    }

    /// The names of the upstreams and their load: (in flight, waiting).
    pub fn load(&self) -> Vec<(String, (usize, usize))> {
        let mut v: Vec<_> = self
            .upstreams
            .values()
            .map(|u| (u.name.clone(), u.queue.load()))
            .collect();
        v.sort();
        v
    }
}

fn upstream(u: &UpstreamConfig, env: &impl Fn(&str) -> Option<String>) -> Result<Upstream, Error> {
    let (key, missing_key) = if u.api_key_env.is_empty() {
        (None, None)
    } else {
        match env(&u.api_key_env).filter(|k| !k.is_empty()) {
            Some(k) => (Some(k), None),
            None => (None, Some(u.api_key_env.clone())),
        }
    };
    let base = u.url.trim().trim_end_matches('/').to_string();
    let parsed = reqwest::Url::parse(&base).map_err(|e| {
        Error::invalid(
            "bad_config",
            format!(
                "the upstream \"{}\" has no valid URL ({e}) — fix its url",
                u.name
            ),
        )
    })?;
    let versioned = !matches!(parsed.path(), "" | "/");
    let loopback = parsed
        .host_str()
        .is_some_and(|h| h == "localhost" || h == "[::1]" || h.starts_with("127."));
    let mut http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .tcp_keepalive(Duration::from_secs(30))
        .pool_max_idle_per_host(1024)
        .http1_only();
    if loopback {
        http = http.no_proxy();
    }
    let http = http
        .build()
        .map_err(|e| Error::internal(format!("cannot build an HTTP client: {e}")))?;
    Ok(Upstream {
        name: u.name.clone(),
        api: Family::parse(&u.api),
        base,
        versioned,
        key,
        missing_key,
        prices: Prices {
            input: u.prices.input,
            cached_input: u.prices.cached_input,
            output: u.prices.output,
        },
        fallback: (!u.fallback.is_empty()).then(|| u.fallback.clone()),
        queue: FairQueue::new(u.concurrency as usize),
        http,
    })
}

/// The gateway's routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/model/{*rest}", any(serve))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
}

/// What a request asks of the model API.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    /// A generation: counted, billed and limited.
    Generate { flavour: Flavour },
    /// A request that costs nothing (models, token counts): passed on.
    Plain,
}

/// The operation of `method path` in `family`'s API, or `None` when the gateway does not
/// serve it.
fn op_of(family: Family, method: &Method, path: &str) -> Option<Op> {
    let post = method == Method::POST;
    let get = method == Method::GET;
    let gen = |flavour| Some(Op::Generate { flavour });
    match family {
        Family::OpenAi => match path {
            "v1/chat/completions" if post => gen(Flavour::OpenAiChat),
            "v1/responses" if post => gen(Flavour::OpenAiResponses),
            p if get && (p == "v1/models" || p.starts_with("v1/models/")) => Some(Op::Plain),
            _ => None,
        },
        Family::Anthropic => match path {
            "v1/messages" if post => gen(Flavour::Anthropic),
            "v1/messages/count_tokens" if post => Some(Op::Plain),
            p if get && (p == "v1/models" || p.starts_with("v1/models/")) => Some(Op::Plain),
            _ => None,
        },
        Family::Gemini => {
            let rest = path
                .strip_prefix("v1beta/models")
                .or_else(|| path.strip_prefix("v1/models"))?;
            if get {
                return Some(Op::Plain);
            }
            let (_, method_name) = rest.rsplit_once(':')?;
            match method_name {
                "generateContent" | "streamGenerateContent" if post => gen(Flavour::Gemini),
                "countTokens" if post => Some(Op::Plain),
                _ => None,
            }
        }
    }
}

/// What the gateway serves, for a request it does not.
const SERVED: &str = "openai: POST v1/chat/completions, POST v1/responses, GET v1/models; anthropic: POST v1/messages, POST v1/messages/count_tokens, GET v1/models; gemini: POST v1beta/models/MODEL:generateContent, :streamGenerateContent, :countTokens, GET v1beta/models";

/// Headers never passed on: hop by hop, the length (the body may change), keys, and
/// compression (the gateway reads the answer).
fn passed_on(name: &HeaderName) -> bool {
    !matches!(
        name.as_str(),
        "host"
            | "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authorization"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "content-length"
            | "authorization"
            | "x-api-key"
            | "x-goog-api-key"
            | "accept-encoding"
            | "cookie"
    )
}

async fn serve(
    State(s): State<AppState>,
    method: Method,
    Path(rest): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (family, path) = rest.split_once('/').unwrap_or((rest.as_str(), ""));
    let Some(family) = Family::parse(family) else {
        return error(
            Family::OpenAi,
            StatusCode::NOT_FOUND,
            "unknown_api",
            &format!("/model/{family} is not an API the gateway speaks — use /model/openai, /model/anthropic or /model/gemini"),
        );
    };
    let Some(worker) = shape::client_key(&headers, query.as_deref())
        .and_then(|k| s.tokens.read().expect("tokens lock").get(&k).cloned())
    else {
        return error(
            family,
            StatusCode::UNAUTHORIZED,
            "unknown_token",
            "the gateway takes a worker's agensh token as the API key — send the token of the worker this agent runs for",
        );
    };
    let Some(op) = op_of(family, &method, path) else {
        return error(
            family,
            StatusCode::NOT_FOUND,
            "not_served",
            &format!("the gateway does not serve {method} {path} — it serves {SERVED}"),
        );
    };
    s.touch(&worker);
    let gw = &s.gateway;
    let Some(route) = gw.config.route_for(&worker).cloned() else {
        return error(
            family,
            StatusCode::FORBIDDEN,
            "no_route",
            &format!("no gateway route covers {worker} — add a [[gateway.routes]] entry whose workers include it (or set [model] url)"),
        );
    };
    let Some(up) = gw.upstreams.get(&route.upstream).cloned() else {
        return error(
            family,
            StatusCode::INTERNAL_SERVER_ERROR,
            "no_upstream",
            &format!(
                "the route of {worker} names the upstream \"{}\", which the hub does not have",
                route.upstream
            ),
        );
    };
    if let Some(var) = &up.missing_key {
        return error(
            family,
            StatusCode::SERVICE_UNAVAILABLE,
            "no_upstream_key",
            &format!(
                "the hub has no key for the upstream \"{}\": {var} was not set in its environment when it started — export {var}=… and restart the hub",
                up.name
            ),
        );
    }
    if up.api.is_some_and(|a| a != family) {
        return error(
            family,
            StatusCode::BAD_REQUEST,
            "wrong_api",
            &format!(
                "{worker}'s upstream \"{}\" speaks the {} API, but this request speaks {} — route {worker} to an upstream of its agent's API",
                up.name,
                up.api.map_or("any", Family::as_str),
                family.as_str()
            ),
        );
    }
    if let Op::Generate { .. } = op {
        // The goal is met and the run ends: nothing more is spent (a request already on its
        // way finishes; its worker stops at its turn's end).
        if let Some(why) = s.goal.refusal() {
            return error(family, StatusCode::FORBIDDEN, "goal_met", &why);
        }
        if let Err((why, actions)) = gw.budgets.check(&worker, s.now()) {
            spawn_actions(&s, actions);
            return error(
                family,
                StatusCode::FORBIDDEN,
                "budget_exhausted",
                &format!("agensh budget: {why} — this worker's model requests are refused until the operator raises the budget (agensh budget set)"),
            );
        }
    }
    let mut path = path.to_string();
    let (body, model, stream) = match op {
        Op::Plain => (body, String::new(), false),
        Op::Generate { flavour } => {
            match prepare(&gw.config, flavour, &mut path, &route.model, body) {
                Ok(p) => p,
                Err((status, code, message)) => return error(family, status, code, &message),
            }
        }
    };
    let turn = s.turn_of(&worker);
    if gw.config.log_bodies {
        tracing::info!(target: "agensh_hub::gateway", %worker, body = %String::from_utf8_lossy(&body), "request body");
    }
    let query = shape::query_without_key(query.as_deref());
    // The exchange with the upstream runs as background work of its own: when the worker
    // goes away before the answer (its agent stopped at the end of a run), the answer is
    // still read to its end and counted, as the upstream bills it, and the hub's shutdown
    // waits for it. The handler only waits for the answer to begin.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let exchange = Exchange {
        s: s.clone(),
        op,
        family,
        method,
        path,
        query,
        headers,
        body,
        worker,
        up,
        model,
        stream,
        turn,
    };
    s.background.spawn(async move {
        let answer = exchange.run().await;
        if let Err(unread) = tx.send(answer) {
            let _ = axum::body::to_bytes(unread.into_body(), usize::MAX).await;
        }
    });
    rx.await.unwrap_or_else(|_| {
        error(
            family,
            StatusCode::INTERNAL_SERVER_ERROR,
            "gateway_failed",
            "the gateway's exchange with the upstream ended without an answer — send the request again",
        )
    })
}

/// One request on its way to the upstream and back.
struct Exchange {
    s: AppState,
    op: Op,
    family: Family,
    method: Method,
    path: String,
    query: Option<String>,
    headers: HeaderMap,
    body: Bytes,
    worker: String,
    up: Arc<Upstream>,
    model: String,
    stream: bool,
    turn: Option<u64>,
}

impl Exchange {
    /// Sends the request (with retries) and answers with the upstream's answer, metered.
    async fn run(self) -> Response {
        let Exchange {
            s,
            op,
            family,
            method,
            path,
            query,
            headers,
            body,
            worker,
            up,
            model,
            stream,
            turn,
        } = self;
        let started = Instant::now();
        let sent = send(
            &s,
            Send {
                method,
                path: &path,
                query: query.as_deref(),
                headers: &headers,
                body,
                worker: &worker,
                family,
            },
            up,
        )
        .await;
        let (resp, up, tries) = match sent {
            Ok(r) => r,
            Err((up, tries, why)) => {
                tracing::warn!(target: "agensh_hub::gateway", %worker, upstream = %up.name, tries, "upstream unreachable: {why}");
                if let Op::Generate { .. } = op {
                    record(&s, &worker, turn, &up, &model, 502, None, started, tries);
                }
                return error(
                    family,
                    StatusCode::BAD_GATEWAY,
                    "upstream_unreachable",
                    &format!(
                        "the upstream \"{}\" could not be reached after {tries} tries: {why}",
                        up.name
                    ),
                );
            }
        };
        let meter = match op {
            Op::Plain => Meter::Nothing,
            Op::Generate { flavour } if stream => Meter::Stream(StreamUsage::new(flavour)),
            Op::Generate { flavour } => Meter::Whole {
                flavour,
                body: Vec::new(),
            },
        };
        let Answer {
            status,
            headers: answer_headers,
            first,
            body: inner,
            permit,
        } = resp;
        let on_end: body::OnEnd = {
            let (s, worker, up, model) = (s.clone(), worker.clone(), up.clone(), model.clone());
            let generate = matches!(op, Op::Generate { .. });
            Box::new(move |usage, complete, bytes| {
                if generate {
                    let status = if complete { status.as_u16() } else { 499 };
                    record(
                        &s, &worker, turn, &up, &model, status, usage, started, tries,
                    );
                } else {
                    tracing::debug!(target: "agensh_hub::gateway", %worker, upstream = %up.name, status = status.as_u16(), bytes, "passed on");
                }
            })
        };
        let mut out = Response::new(Body::new(Observed::new(
            first, inner, meter, permit, on_end,
        )));
        *out.status_mut() = status;
        for (name, value) in answer_headers.iter() {
            if passed_on(name) && name.as_str() != "content-encoding" {
                out.headers_mut().append(name.clone(), value.clone());
            }
        }
        out
    }
}

/// Checks and adjusts a generation request: its route's model, the output cap, the prompt
/// window, and usage asked for in a stream. Returns the body to send, the model and
/// whether the answer streams.
fn prepare(
    config: &GatewayConfig,
    flavour: Flavour,
    path: &mut String,
    route_model: &str,
    body: Bytes,
) -> Result<(Bytes, String, bool), (StatusCode, &'static str, String)> {
    let mut v: Value = serde_json::from_slice(&body)
        .ok()
        .filter(Value::is_object)
        .ok_or((
            StatusCode::BAD_REQUEST,
            "bad_body",
            "the request body is not a JSON object".to_string(),
        ))?;
    // Estimated at four bytes a token: what the prompt window is checked against before
    // the upstream counts it.
    let estimate = body.len() as u64 / 4;
    if estimate > config.prompt_window {
        return Err((
            StatusCode::BAD_REQUEST,
            "prompt_too_long",
            format!(
                "the prompt is about {estimate} tokens, over this organization's prompt window of {} (gateway.prompt_window) — compact the conversation or start a new session",
                config.prompt_window
            ),
        ));
    }
    let mut changed = false;
    let model;
    let stream;
    if flavour == Flavour::Gemini {
        // models/MODEL:method — the model is in the path.
        let (head, method) = path
            .rsplit_once(':')
            .map(|(h, m)| (h.to_string(), m.to_string()))
            .unwrap_or_default();
        let (prefix, asked) = head.rsplit_once('/').unwrap_or(("", &head));
        if !route_model.is_empty() && route_model != asked {
            *path = format!("{prefix}/{route_model}:{method}");
            model = route_model.to_string();
        } else {
            model = asked.to_string();
        }
        stream = method == "streamGenerateContent";
        changed |= cap(
            &mut v,
            "/generationConfig/maxOutputTokens",
            config.output_cap,
        );
    } else {
        if !route_model.is_empty() && v.get("model").and_then(Value::as_str) != Some(route_model) {
            v["model"] = Value::String(route_model.to_string());
            changed = true;
        }
        model = v
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        stream = v.get("stream") == Some(&Value::Bool(true));
        for field in [
            "/max_tokens",
            "/max_completion_tokens",
            "/max_output_tokens",
        ] {
            changed |= cap(&mut v, field, config.output_cap);
        }
        changed |= ask_for_stream_usage(flavour, &mut v);
    }
    let body = if changed {
        Bytes::from(serde_json::to_vec(&v).expect("a JSON value serializes"))
    } else {
        body
    };
    Ok((body, model, stream))
}

/// Lowers the number at `pointer` to `most`; whether it did.
fn cap(v: &mut Value, pointer: &str, most: u64) -> bool {
    match v.pointer_mut(pointer) {
        Some(n) if n.as_u64().is_some_and(|x| x > most) => {
            *n = Value::from(most);
            true
        }
        _ => false,
    }
}

/// A request on its way to an upstream.
struct Send<'a> {
    method: Method,
    path: &'a str,
    query: Option<&'a str>,
    headers: &'a HeaderMap,
    body: Bytes,
    worker: &'a str,
    family: Family,
}

/// The upstream's answer, its first frame already read.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    first: Option<http_body::Frame<Bytes>>,
    body: reqwest::Body,
    permit: Permit,
}

/// Statuses worth trying again: rate limits, overload and server errors.
fn retryable(status: StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 429 | 500 | 502 | 503 | 504 | 529)
}

/// Sends the request to `up` (or its fallback), trying again while the upstream refuses
/// with a status worth retrying or drops the connection before the first byte. Returns the
/// answer, the upstream that gave it and the tries it took; or the last upstream, the tries
/// and why none answered.
async fn send(
    s: &AppState,
    req: Send<'_>,
    mut up: Arc<Upstream>,
) -> Result<(Answer, Arc<Upstream>, u32), (Arc<Upstream>, u32, String)> {
    let cfg = &s.gateway.config;
    let mut tries = 0u32;
    loop {
        tries += 1;
        let last = tries > cfg.retries;
        let permit = up.queue.acquire(req.worker).await;
        let mut url = up.url_of(req.path);
        if let Some(q) = req.query {
            url.push('?');
            url.push_str(q);
        }
        let mut headers = HeaderMap::with_capacity(req.headers.len() + 2);
        for (name, value) in req.headers {
            if passed_on(name) {
                headers.append(name.clone(), value.clone());
            }
        }
        if let Some(key) = &up.key {
            let (name, value) = req.family.key_header(key);
            if let Ok(v) = HeaderValue::from_str(&value) {
                headers.insert(name, v);
            }
        }
        if let Ok(v) = HeaderValue::from_str(req.worker) {
            headers.insert("x-agensh-worker", v);
        }
        let sent = up
            .http
            .request(req.method.clone(), &url)
            .headers(headers)
            .body(req.body.clone())
            .send()
            .await;
        let wait = match sent {
            Err(e) => {
                let why = describe(&e);
                if last {
                    return Err((up, tries, why));
                }
                tracing::info!(target: "agensh_hub::gateway", worker = %req.worker, upstream = %up.name, tries, "trying again: {why}");
                backoff(cfg, tries, None)
            }
            Ok(resp) => {
                let status = resp.status();
                if retryable(status) && !last {
                    let after = retry_after(resp.headers());
                    let text = read_some(resp).await;
                    drop(permit);
                    inc(&s.metrics.model_retries);
                    if let Some(fb) = quota_fallback(&s.gateway, &up, status, &text) {
                        tracing::info!(target: "agensh_hub::gateway", worker = %req.worker, upstream = %up.name, fallback = %fb.name, "quota exhausted: going to the fallback");
                        up = fb;
                        continue;
                    }
                    tracing::info!(target: "agensh_hub::gateway", worker = %req.worker, upstream = %up.name, status = status.as_u16(), tries, "trying again");
                    tokio::time::sleep(backoff(cfg, tries, after)).await;
                    continue;
                }
                let headers = resp.headers().clone();
                let mut body = reqwest::Body::from(resp);
                // The first frame is read here, so a connection that drops before it is
                // tried again; after it, the answer belongs to the worker.
                let first = std::future::poll_fn(|cx| {
                    http_body::Body::poll_frame(std::pin::Pin::new(&mut body), cx)
                })
                .await;
                match first {
                    Some(Err(e)) if !last => {
                        drop(permit);
                        tracing::info!(target: "agensh_hub::gateway", worker = %req.worker, upstream = %up.name, tries, "dropped before the first byte: {}", describe(&e));
                        backoff(cfg, tries, None)
                    }
                    Some(Err(e)) => return Err((up, tries, describe(&e))),
                    first => {
                        return Ok((
                            Answer {
                                status,
                                headers,
                                first: first.and_then(Result::ok),
                                body,
                                permit,
                            },
                            up,
                            tries,
                        ))
                    }
                }
            }
        };
        inc(&s.metrics.model_retries);
        tokio::time::sleep(wait).await;
    }
}

/// The fallback of `up`, when its answer says its quota is exhausted.
fn quota_fallback(
    gw: &Gateway,
    up: &Upstream,
    status: StatusCode,
    text: &str,
) -> Option<Arc<Upstream>> {
    let name = up.fallback.as_ref()?;
    let exhausted = status == StatusCode::PAYMENT_REQUIRED
        || (status == StatusCode::TOO_MANY_REQUESTS
            && (text.contains("insufficient_quota") || text.contains("quota")));
    exhausted.then(|| gw.upstreams.get(name).cloned()).flatten()
}

/// Up to 64 KiB of a refused answer's body (to tell an exhausted quota from a rate limit).
async fn read_some(mut resp: reqwest::Response) -> String {
    let mut text = Vec::new();
    while let Ok(Some(chunk)) = resp.chunk().await {
        if text.len() < 64 << 10 {
            text.extend_from_slice(&chunk);
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// What went wrong with a request, in a few words and without its URL's query.
fn describe(e: &reqwest::Error) -> String {
    let what = if e.is_connect() {
        "cannot connect"
    } else if e.is_timeout() {
        "timed out"
    } else {
        "the connection failed"
    };
    let mut source = std::error::Error::source(e);
    let mut detail = String::new();
    while let Some(s) = source {
        detail = s.to_string();
        source = s.source();
    }
    if detail.is_empty() {
        what.to_string()
    } else {
        format!("{what} ({detail})")
    }
}

/// The wait `Retry-After` (seconds) or `retry-after-ms` asks for.
fn retry_after(h: &HeaderMap) -> Option<Duration> {
    let get = |n: &str| h.get(n)?.to_str().ok()?.trim().parse::<f64>().ok();
    let secs = get("retry-after-ms")
        .map(|ms| ms / 1000.0)
        .or_else(|| get("retry-after"))?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(86_400.0)))
}

/// The wait before try `tries + 1`: what the upstream asked for, else the base doubled per
/// try with jitter (between half and all of it); never more than `retry_max_secs`.
fn backoff(cfg: &GatewayConfig, tries: u32, asked: Option<Duration>) -> Duration {
    let most = Duration::from_secs(cfg.retry_max_secs);
    if let Some(a) = asked {
        return a.min(most);
    }
    let full = cfg
        .retry_base_ms
        .saturating_mul(1u64 << (tries - 1).min(20));
    let mut b = [0u8; 8];
    let r = if getrandom::fill(&mut b).is_ok() {
        u64::from_le_bytes(b) as f64 / u64::MAX as f64
    } else {
        0.5
    };
    Duration::from_millis((full as f64 * (0.5 + r / 2.0)) as u64).min(most)
}

/// Carries out budget actions in the background.
fn spawn_actions(s: &AppState, actions: Vec<budget::Action>) {
    if actions.is_empty() {
        return;
    }
    let state = s.clone();
    s.background
        .spawn(async move { budget::act(&state, actions).await });
}

/// Records a generation's outcome durably and in the metrics and the log.
#[allow(clippy::too_many_arguments)]
fn record(
    s: &AppState,
    worker: &str,
    turn: Option<u64>,
    up: &Upstream,
    model: &str,
    status: u16,
    usage: Option<agensh_protocol::model_usage::TokenUsage>,
    started: Instant,
    tries: u32,
) {
    let u = usage.unwrap_or_default();
    let cost = up.prices.cost(&u);
    let latency_ms = started.elapsed().as_millis() as u64;
    s.metrics.note_model(&u, cost, status);
    tracing::info!(
        target: "agensh_hub::gateway",
        %worker, turn, upstream = %up.name, %model, status, latency_ms, tries,
        input = u.input, cached = u.cached_input, output = u.output, cost,
        usage_known = usage.is_some(),
        "model request"
    );
    let r = ModelRequest {
        worker: worker.to_string(),
        turn,
        upstream: up.name.clone(),
        model: model.to_string(),
        status,
        input_tokens: u.input,
        cached_input_tokens: u.cached_input,
        output_tokens: u.output,
        cost_usd: cost,
        latency_ms,
        at: s.now(),
    };
    spawn_actions(
        s,
        s.gateway
            .budgets
            .add(worker, u.input + u.output, cost, s.now()),
    );
    let store = s.store.clone();
    s.background.spawn(async move {
        if let Err(e) = store.record_model_request(r).await {
            tracing::warn!("cannot record a model request: {e}");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_model_apis_are_served() {
        let g = |f, m: Method, p| op_of(f, &m, p);
        assert_eq!(
            g(Family::OpenAi, Method::POST, "v1/chat/completions"),
            Some(Op::Generate {
                flavour: Flavour::OpenAiChat
            })
        );
        assert_eq!(g(Family::OpenAi, Method::GET, "v1/models"), Some(Op::Plain));
        assert_eq!(g(Family::OpenAi, Method::POST, "v1/files"), None);
        assert_eq!(g(Family::OpenAi, Method::GET, "v1/chat/completions"), None);
        assert_eq!(
            g(Family::Anthropic, Method::POST, "v1/messages"),
            Some(Op::Generate {
                flavour: Flavour::Anthropic
            })
        );
        assert_eq!(
            g(Family::Anthropic, Method::POST, "v1/messages/count_tokens"),
            Some(Op::Plain)
        );
        assert_eq!(
            g(
                Family::Gemini,
                Method::POST,
                "v1beta/models/gemini-2.5-pro:streamGenerateContent"
            ),
            Some(Op::Generate {
                flavour: Flavour::Gemini
            })
        );
        assert_eq!(
            g(Family::Gemini, Method::POST, "v1beta/models/m:countTokens"),
            Some(Op::Plain)
        );
        assert_eq!(
            g(Family::Gemini, Method::POST, "v1beta/models/m:delete"),
            None
        );
        assert_eq!(g(Family::Gemini, Method::POST, "v1beta/files"), None);
    }

    #[test]
    fn a_request_path_goes_after_the_upstreams_url_with_one_version() {
        let at = |url: &str, path: &str| {
            let mut c = GatewayConfig::default();
            c.upstreams.push(UpstreamConfig {
                name: "u".into(),
                api: "any".into(),
                url: url.into(),
                api_key_env: String::new(),
                concurrency: 0,
                prices: Default::default(),
                fallback: String::new(),
            });
            let g = Gateway::new(&c, &Default::default(), |_| None).unwrap();
            g.upstreams["u"].url_of(path)
        };
        let chat = "v1/chat/completions";
        assert_eq!(
            at("https://api.anthropic.com", "v1/messages"),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(
            at("https://api.openai.com/v1/", chat),
            "https://api.openai.com/v1/chat/completions"
        );
        assert_eq!(
            at("https://openrouter.ai/api/v1", chat),
            "https://openrouter.ai/api/v1/chat/completions"
        );
        assert_eq!(
            at(
                "https://generativelanguage.googleapis.com/v1beta/openai",
                chat
            ),
            "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions"
        );
        assert_eq!(
            at("http://127.0.0.1:9", "v1beta/models/m:generateContent"),
            "http://127.0.0.1:9/v1beta/models/m:generateContent"
        );
    }

    fn cfg() -> GatewayConfig {
        GatewayConfig {
            prompt_window: 1024,
            output_cap: 100,
            ..GatewayConfig::default()
        }
    }

    #[test]
    fn a_request_gets_its_routes_model_a_capped_output_and_streamed_usage() {
        let body =
            Bytes::from(r#"{"model":"asked","stream":true,"max_tokens":5000,"messages":[]}"#);
        let mut path = "v1/chat/completions".to_string();
        let (b, model, stream) =
            prepare(&cfg(), Flavour::OpenAiChat, &mut path, "routed", body).unwrap();
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!((model.as_str(), stream), ("routed", true));
        assert_eq!(v["model"], "routed");
        assert_eq!(v["max_tokens"], 100);
        assert_eq!(v["stream_options"]["include_usage"], true);
    }

    #[test]
    fn a_gemini_request_is_routed_by_its_path() {
        let body = Bytes::from(r#"{"contents":[],"generationConfig":{"maxOutputTokens":99}}"#);
        let mut path = "v1beta/models/asked:streamGenerateContent".to_string();
        let (b, model, stream) =
            prepare(&cfg(), Flavour::Gemini, &mut path, "routed", body.clone()).unwrap();
        assert_eq!(path, "v1beta/models/routed:streamGenerateContent");
        assert_eq!((model.as_str(), stream), ("routed", true));
        assert_eq!(b, body, "nothing to change in the body");
    }

    #[test]
    fn an_oversized_prompt_is_refused_with_what_to_do() {
        let big = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"{}"}}]}}"#,
            "x".repeat(8000)
        );
        let mut path = "v1/messages".to_string();
        let (status, code, message) =
            prepare(&cfg(), Flavour::Anthropic, &mut path, "", Bytes::from(big)).unwrap_err();
        assert_eq!((status, code), (StatusCode::BAD_REQUEST, "prompt_too_long"));
        assert!(message.contains("prompt window of 1024"), "{message}");
    }

    #[test]
    fn waits_follow_retry_after_else_double_with_jitter() {
        let c = GatewayConfig {
            retry_base_ms: 100,
            retry_max_secs: 1,
            ..GatewayConfig::default()
        };
        let mut h = HeaderMap::new();
        h.insert("retry-after", "0.25".parse().unwrap());
        assert_eq!(backoff(&c, 1, retry_after(&h)), Duration::from_millis(250));
        h.insert("retry-after", "30".parse().unwrap());
        assert_eq!(backoff(&c, 1, retry_after(&h)), Duration::from_secs(1));
        for tries in 1..=3u32 {
            let full = 100u64 << (tries - 1);
            let b = backoff(&c, tries, None).as_millis() as u64;
            assert!((full / 2..=full).contains(&b), "try {tries}: {b} ms");
        }
        assert_eq!(backoff(&c, 12, None), Duration::from_secs(1));
    }
}
