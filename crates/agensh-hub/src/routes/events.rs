//! Per-worker event queues: long-poll, acknowledge, operator notices.

use std::sync::atomic::Ordering;
use std::time::Duration;

use agensh_domain::event::{kinds, Event, NewEvent, Priority};
use agensh_domain::Error;
use agensh_store::QueueState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;

use crate::auth::Caller;
use crate::error::{ApiJson, ApiQuery, ApiResult};
use crate::state::{now_ms, AppState};

/// Most events one poll returns.
pub const POLL_LIMIT: usize = 1_000;

#[derive(Deserialize)]
pub struct PollQuery {
    /// Only events with a sequence number above this (the ones already in hand).
    #[serde(default)]
    after: i64,
    /// Seconds to wait for an event when none is pending (0 = answer at once).
    #[serde(default)]
    wait: u64,
    limit: Option<usize>,
    /// Events to acknowledge first, comma-separated (saves a request per turn).
    ack: Option<String>,
}

/// Unacknowledged events for the caller; waits up to `wait` seconds for the first one.
pub async fn poll(
    State(s): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<PollQuery>,
) -> ApiResult<Json<Value>> {
    let worker = caller.worker()?.to_string();
    let max_wait = s.config.hub.max_wait_secs;
    if q.wait > max_wait {
        return Err(Error::invalid(
            "bad_wait",
            format!(
                "wait {} s is too long; the limit is {max_wait} s — poll again when it returns",
                q.wait
            ),
        )
        .into());
    }
    let limit = match q.limit {
        None => POLL_LIMIT,
        Some(n) if (1..=POLL_LIMIT).contains(&n) => n,
        Some(n) => {
            return Err(Error::invalid(
                "bad_limit",
                format!("limit {n} is out of range — ask for 1 to {POLL_LIMIT} events"),
            )
            .into())
        }
    };
    if let Some(list) = q.ack.as_deref().filter(|l| !l.is_empty()) {
        let seqs = list
            .split(',')
            .map(|n| n.trim().parse::<i64>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| {
                Error::invalid(
                    "bad_ack",
                    "ack must list event numbers separated by commas, like ack=12,15",
                )
            })?;
        let n = s.store.ack_events(&worker, seqs).await?;
        s.metrics
            .events_acked
            .fetch_add(n as u64, Ordering::Relaxed);
    }
    // Subscribe before reading the store so nothing committed in between is missed.
    let mut bus = s.store.subscribe();
    let mut events = s.store.pending_events(&worker, q.after, limit).await?;
    if events.is_empty() && q.wait > 0 {
        events = wait_for_events(
            &s,
            &worker,
            q.after,
            limit,
            &mut bus,
            Duration::from_secs(q.wait),
        )
        .await?;
    }
    s.metrics
        .events_delivered
        .fetch_add(events.len() as u64, Ordering::Relaxed);
    Ok(Json(json!({ "events": events })))
}

async fn wait_for_events(
    s: &AppState,
    worker: &str,
    after: i64,
    limit: usize,
    bus: &mut tokio::sync::broadcast::Receiver<std::sync::Arc<Event>>,
    wait: Duration,
) -> ApiResult<Vec<Event>> {
    let shutdown = crate::state::stopped(s.shutdown.clone());
    tokio::pin!(shutdown);
    let deadline = tokio::time::Instant::now() + wait;
    let waiting = &s.metrics.long_polls_waiting;
    waiting.fetch_add(1, Ordering::Relaxed);
    let _guard = scopeguard(|| {
        waiting.fetch_sub(1, Ordering::Relaxed);
    });
    let mut out: Vec<Event> = Vec::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return Ok(out),
            _ = &mut shutdown => return Ok(out),
            got = bus.recv() => match got {
                Ok(e) if e.seq > after && e.is_for(worker) => {
                    out.push((*e).clone());
                    // Take whatever else is already committed, then answer.
                    while out.len() < limit {
                        match bus.try_recv() {
                            Ok(e) if e.seq > after && e.is_for(worker) => out.push((*e).clone()),
                            Ok(_) => {}
                            Err(_) => break,
                        }
                    }
                    return Ok(out);
                }
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => {
                    let pending = s.store.pending_events(worker, after, limit).await?;
                    if !pending.is_empty() {
                        return Ok(pending);
                    }
                }
                Err(RecvError::Closed) => return Ok(out),
            },
        }
    }
}

/// Runs `f` when dropped, also when the request is cancelled.
fn scopeguard<F: FnMut()>(f: F) -> impl Drop {
    struct Guard<F: FnMut()>(F);
    impl<F: FnMut()> Drop for Guard<F> {
        fn drop(&mut self) {
            (self.0)()
        }
    }
    Guard(f)
}

#[derive(Deserialize)]
pub struct AckBody {
    seqs: Vec<i64>,
}

pub async fn ack(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<AckBody>,
) -> ApiResult<Json<Value>> {
    let n = s.store.ack_events(caller.worker()?, body.seqs).await?;
    s.metrics
        .events_acked
        .fetch_add(n as u64, Ordering::Relaxed);
    Ok(Json(json!({ "acked": n })))
}

pub async fn state(State(s): State<AppState>, caller: Caller) -> ApiResult<Json<QueueState>> {
    Ok(Json(s.store.queue_state(caller.worker()?).await?))
}

#[derive(Deserialize)]
pub struct NoticeBody {
    text: String,
    /// A worker id; everyone when absent.
    to: Option<String>,
    #[serde(default)]
    urgent: bool,
    dedup_key: Option<String>,
}

/// An operator notice to one worker or to all (admin only).
pub async fn notice(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(b): ApiJson<NoticeBody>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    caller.require_admin()?;
    if b.text.trim().is_empty() || b.text.chars().count() > agensh_domain::message::MESSAGE_LIMIT {
        return Err(Error::invalid(
            "bad_notice",
            "a notice needs 1 to 4000 characters of text — say what the workers must know",
        )
        .into());
    }
    if let Some(to) = &b.to {
        agensh_domain::ids::validate_worker_id(to)?;
        if s.token_of(to).is_none() {
            return Err(Error::not_found(
                "unknown_worker",
                format!("there is no worker \"{to}\" — `agensh workers list` shows the workers"),
            )
            .into());
        }
    }
    if let Some(k) = &b.dedup_key {
        if k.is_empty() || k.chars().count() > 200 {
            return Err(Error::invalid(
                "bad_dedup_key",
                "a dedup key must have 1 to 200 characters",
            )
            .into());
        }
    }
    let event = NewEvent {
        kind: kinds::NOTICE.into(),
        priority: if b.urgent {
            Priority::Urgent
        } else {
            Priority::Normal
        },
        payload: json!({ "text": b.text }),
        // Operator keys live in their own namespace so they never collide with the
        // hub's own keys (`board:G12`, `msg:M7`).
        dedup_key: b.dedup_key.map(|k| format!("notice:{k}")),
        source: None,
        target: b.to,
        except: None,
    };
    let stored = s.store.enqueue(event, now_ms()).await?;
    let status = if stored.is_some() {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(json!({ "event": stored, "duplicate": stored.is_none() })),
    ))
}
