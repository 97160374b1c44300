//! Per-worker event queues over HTTP ([`ops::events`]): long-poll, acknowledge, operator
//! notices.

use agensh_domain::event::{OverdueQuery, PollMany, PolledMany};
use agensh_protocol::rest::{
    Ack, Acked, Notice, PollQuery, Polled, Presented, PresentedCount, QueueState,
};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::error::{ApiJson, ApiQuery, ApiResult};
use crate::ops::events;
use crate::state::AppState;

/// Unacknowledged events for the caller; waits up to `wait` seconds for the first one.
pub async fn poll(
    State(s): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<PollQuery>,
) -> ApiResult<Json<Polled>> {
    Ok(Json(events::poll(&s, &caller, q).await?))
}

/// A node's one long-poll for many of its workers ([`events::poll_many`]).
pub async fn poll_many(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<PollMany>,
) -> ApiResult<Json<PolledMany>> {
    Ok(Json(events::poll_many(&s, &caller, body).await?))
}

/// Which of a node's workers have urgent news waiting too long ([`events::overdue`]).
pub async fn overdue(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<OverdueQuery>,
) -> ApiResult<Json<PolledMany>> {
    Ok(Json(events::overdue(&s, &caller, body).await?))
}

pub async fn ack(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<Ack>,
) -> ApiResult<Json<Acked>> {
    let acked = events::ack(&s, &caller, body.seqs).await?;
    Ok(Json(Acked { acked }))
}

/// The caller's events shown to it, and how ([`events::presented`]).
pub async fn presented(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<Presented>,
) -> ApiResult<Json<PresentedCount>> {
    let presented = events::presented(&s, &caller, body.seqs, body.via).await?;
    Ok(Json(PresentedCount { presented }))
}

pub async fn state(State(s): State<AppState>, caller: Caller) -> ApiResult<Json<QueueState>> {
    Ok(Json(events::queue_state(&s, &caller).await?))
}

/// An operator notice to one worker or to all (admin only): `201` when queued, `200` when
/// one of the same key is pending already.
pub async fn notice(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(b): ApiJson<Notice>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let stored = events::notice(&s, &caller, b).await?;
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
