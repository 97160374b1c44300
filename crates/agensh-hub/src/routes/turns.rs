//! A worker's finished turns over HTTP ([`ops::turns`]): its node reports each one
//! (`POST /workers/{id}/turns`) and the dashboard reads them (`GET /workers/{id}/turns`).

use agensh_protocol::dashboard::TurnReport;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;

use crate::auth::Caller;
use crate::error::{ApiJson, ApiQuery, ApiResult};
use crate::ops::turns;
use crate::state::AppState;

/// Largest body of a turn report, or `hub.body_limit` when that is larger: a prompt of
/// 8 KiB and 200 tool calls, whatever their characters and escapes.
pub const BODY_LIMIT: usize = 1 << 20;

/// `POST /api/v1/workers/{id}/turns` (the worker, or the admin): one finished turn.
pub async fn report(
    State(s): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(report): ApiJson<TurnReport>,
) -> ApiResult<(StatusCode, Json<TurnReport>)> {
    let report = turns::report(&s, &caller, id, report).await?;
    Ok((StatusCode::CREATED, Json(report)))
}

#[derive(Deserialize)]
pub struct TurnsQuery {
    #[serde(default)]
    pub limit: Option<usize>,
    /// Only turns numbered below this (paging back).
    #[serde(default)]
    pub before: Option<u64>,
}

/// `GET /api/v1/workers/{id}/turns` (the admin, or the worker): newest first.
pub async fn list(
    State(s): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<TurnsQuery>,
) -> ApiResult<Json<Vec<TurnReport>>> {
    Ok(Json(
        turns::list(&s, &caller, &id, q.before, q.limit).await?,
    ))
}
