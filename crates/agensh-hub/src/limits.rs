//! Per-worker rate limits and quotas (`[limits]`): one worker cannot starve the others.
//!
//! Each worker has token buckets ([`agensh_domain::limits::Bucket`]) in memory: requests
//! (REST and git through [`limit_requests`], MCP tool calls where the MCP endpoint runs
//! them), board records and their bytes, and messages. The admin token is never limited.
//! A refusal is `429` with `Retry-After` and a message that tells the agent to slow down;
//! an MCP tool call gets the same message as a tool error. Buckets are memory only: a hub
//! restart forgives everyone, which is the safe side.

use std::collections::HashMap;
use std::sync::Mutex;

use agensh_domain::limits::{refused, Bucket, LimitsConfig};
use agensh_domain::Error;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::metrics::inc;
use crate::state::AppState;

/// The buckets of every worker that has been limited lately.
pub struct Limiter {
    config: LimitsConfig,
    workers: Mutex<HashMap<String, Buckets>>,
}

/// One worker's buckets; `None` where the limit is off.
struct Buckets {
    requests: Option<Bucket>,
    records: Option<Bucket>,
    record_bytes: Option<Bucket>,
    messages: Option<Bucket>,
}

impl Buckets {
    fn full(c: &LimitsConfig) -> Self {
        Buckets {
            requests: c.requests(),
            records: LimitsConfig::hourly(c.records_per_hour),
            record_bytes: LimitsConfig::hourly(c.record_bytes_per_hour),
            messages: LimitsConfig::hourly(c.messages_per_hour),
        }
    }
}

/// How many requests' worth an operation costs: reads that scan more cost more.
pub fn cost(method: &Method, path: &str) -> f64 {
    if path.starts_with("/git/") {
        return if method == Method::POST { 5.0 } else { 1.0 };
    }
    match (method == Method::GET, path) {
        (_, "/api/v1/board/grep") => 5.0,
        (_, "/api/v1/board/read") => 2.0,
        (true, "/api/v1/board/recent" | "/api/v1/messages" | "/api/v1/prs" | "/api/v1/issues") => {
            2.0
        }
        // A page of a worker's turns (up to 500 reports of some KiB each) reads like a
        // list; a turn report is a write like any other.
        (true, p) if p.starts_with("/api/v1/workers/") && p.ends_with("/turns") => 2.0,
        _ => 1.0,
    }
}

/// What an MCP tool call costs, like its REST twin.
pub fn tool_cost(tool: &str) -> f64 {
    match tool {
        "board_grep" => 5.0,
        "board_read" | "inbox" | "pr_list" | "issue_list" => 2.0,
        "ship" => 5.0,
        _ => 1.0,
    }
}

impl Limiter {
    pub fn new(config: LimitsConfig) -> Self {
        Limiter {
            config,
            workers: Mutex::new(HashMap::new()),
        }
    }

    fn with<T>(&self, worker: &str, f: impl FnOnce(&LimitsConfig, &mut Buckets) -> T) -> T {
        let mut workers = self.workers.lock().expect("limiter lock");
        let b = workers
            .entry(worker.to_string())
            .or_insert_with(|| Buckets::full(&self.config));
        f(&self.config, b)
    }

    /// Takes `cost` requests' worth from `worker`'s request bucket.
    pub fn request(&self, worker: &str, cost: f64, now_ms: i64) -> Result<(), Error> {
        self.with(worker, |c, b| {
            let Some(bucket) = b.requests.as_mut() else {
                return Ok(());
            };
            bucket.take(cost, now_ms).map_err(|wait| {
                refused(
                    "rate_limited",
                    &format!(
                        "{worker} is making requests faster than the hub allows: {} per second on average, {} at once",
                        c.requests_per_sec, c.burst
                    ),
                    "limits.requests_per_sec and limits.burst",
                    wait,
                )
            })
        })
    }

    /// Takes one record of `bytes` bytes from `worker`'s hourly record quotas: both, or
    /// neither.
    pub fn record(&self, worker: &str, bytes: usize, now_ms: i64) -> Result<(), Error> {
        self.with(worker, |c, b| {
            // Taken from copies, kept only when both allow it.
            let mut records = b.records.clone();
            let mut record_bytes = b.record_bytes.clone();
            if let Some(r) = records.as_mut() {
                r.take(1.0, now_ms).map_err(|wait| {
                    refused(
                        "record_quota",
                        &format!(
                            "{worker} has written {} board records in the last hour, its quota",
                            c.records_per_hour
                        ),
                        "limits.records_per_hour",
                        wait,
                    )
                })?;
            }
            if let Some(r) = record_bytes.as_mut() {
                r.take(bytes as f64, now_ms).map_err(|wait| {
                    refused(
                        "record_quota",
                        &format!(
                            "{worker} has written {} bytes of board records in the last hour, its quota — keep records short and put long content in files",
                            c.record_bytes_per_hour
                        ),
                        "limits.record_bytes_per_hour",
                        wait,
                    )
                })?;
            }
            b.records = records;
            b.record_bytes = record_bytes;
            Ok(())
        })
    }

    /// Takes one message from `worker`'s hourly message quota.
    pub fn message(&self, worker: &str, now_ms: i64) -> Result<(), Error> {
        self.with(worker, |c, b| {
            let Some(bucket) = b.messages.as_mut() else {
                return Ok(());
            };
            bucket.take(1.0, now_ms).map_err(|wait| {
                refused(
                    "message_quota",
                    &format!(
                        "{worker} has sent {} messages in the last hour, its quota",
                        c.messages_per_hour
                    ),
                    "limits.messages_per_hour",
                    wait,
                )
            })
        })
    }

    /// Forgets the buckets that are full again, so the map holds only busy workers.
    pub fn sweep(&self, now_ms: i64) {
        let full = |b: &mut Option<Bucket>| b.as_mut().is_none_or(|b| b.is_full(now_ms));
        self.workers.lock().expect("limiter lock").retain(|_, b| {
            !(full(&mut b.requests)
                && full(&mut b.records)
                && full(&mut b.record_bytes)
                && full(&mut b.messages))
        });
    }
}

/// The worker a request's credentials name, if any: a bearer token (REST) or HTTP Basic
/// (git). `None` for the admin (never limited) and for unknown tokens (the handler
/// refuses those itself).
fn worker_of(s: &AppState, req: &Request) -> Option<String> {
    let value = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, rest) = value.split_once(' ')?;
    let token = if scheme.eq_ignore_ascii_case("bearer") {
        rest.trim().to_string()
    } else if scheme.eq_ignore_ascii_case("basic") {
        let decoded = crate::auth::decode_base64(rest.trim())?;
        let text = String::from_utf8(decoded).ok()?;
        text.split_once(':')?.1.to_string()
    } else {
        return None;
    };
    s.tokens.read().expect("tokens lock").get(&token).cloned()
}

/// Middleware: takes each worker request's cost from its bucket, or answers `429`.
/// MCP is limited per tool call instead (its answer is a tool error), and the model
/// gateway by its budgets.
pub async fn limit_requests(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if path == crate::paths::MCP || path.starts_with("/v1/") {
        return next.run(req).await;
    }
    if let Some(worker) = worker_of(&s, &req) {
        let cost = cost(req.method(), path);
        if let Err(e) = s.limiter.request(&worker, cost, s.now()) {
            inc(&s.metrics.rate_limited);
            return ApiError(e).into_response();
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(rps: f64, burst: u64) -> Limiter {
        Limiter::new(LimitsConfig {
            requests_per_sec: rps,
            burst,
            records_per_hour: 3,
            record_bytes_per_hour: 100,
            messages_per_hour: 2,
            ..LimitsConfig::default()
        })
    }

    #[test]
    fn each_worker_has_its_own_bucket() {
        let l = limiter(1.0, 2);
        assert!(l.request("w01", 1.0, 0).is_ok());
        assert!(l.request("w01", 1.0, 0).is_ok());
        let e = l.request("w01", 1.0, 0).unwrap_err();
        assert_eq!(e.code, "rate_limited");
        assert_eq!(e.retry_after_secs, Some(1));
        assert!(l.request("w02", 1.0, 0).is_ok());
    }

    #[test]
    fn a_refused_record_takes_nothing_from_the_other_quota() {
        let l = limiter(1.0, 2);
        assert!(l.record("w01", 90, 0).is_ok());
        // Past the bytes: refused, and the record count is not spent either.
        assert_eq!(l.record("w01", 20, 0).unwrap_err().code, "record_quota");
        assert!(l.record("w01", 5, 0).is_ok());
        assert!(l.record("w01", 5, 0).is_ok());
        assert_eq!(l.record("w01", 1, 0).unwrap_err().code, "record_quota");
    }

    #[test]
    fn messages_have_an_hourly_quota() {
        let l = limiter(1.0, 2);
        assert!(l.message("w01", 0).is_ok());
        assert!(l.message("w01", 0).is_ok());
        let e = l.message("w01", 0).unwrap_err();
        assert_eq!(e.code, "message_quota");
        // One message's worth comes back after half an hour.
        assert_eq!(e.retry_after_secs, Some(1_800));
        assert!(l.message("w01", 1_800_000).is_ok());
    }

    #[test]
    fn sweeping_forgets_only_full_buckets() {
        let l = limiter(1.0, 2);
        l.request("w01", 2.0, 0).unwrap();
        l.request("w02", 1.0, 0).unwrap();
        l.sweep(1_000);
        // w02 is full again (forgotten); w01 still owes a unit.
        let left: Vec<String> = l.workers.lock().unwrap().keys().cloned().collect();
        assert_eq!(left, vec!["w01".to_string()]);
        assert!(l.request("w01", 2.0, 1_000).is_err());
    }

    #[test]
    fn greps_cost_more_than_writes() {
        assert_eq!(cost(&Method::GET, "/api/v1/board/grep"), 5.0);
        assert_eq!(cost(&Method::POST, "/api/v1/board/records"), 1.0);
        assert_eq!(cost(&Method::GET, "/api/v1/messages"), 2.0);
        assert_eq!(cost(&Method::POST, "/api/v1/messages"), 1.0);
        assert_eq!(cost(&Method::GET, "/api/v1/workers/w01/turns"), 2.0);
        assert_eq!(cost(&Method::POST, "/api/v1/workers/w01/turns"), 1.0);
        assert_eq!(
            cost(&Method::POST, "/git/workspace.git/git-receive-pack"),
            5.0
        );
        assert_eq!(tool_cost("board_grep"), 5.0);
        assert_eq!(tool_cost("board_write"), 1.0);
    }
}
