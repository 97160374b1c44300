//! The shared context board over HTTP ([`ops::board`]).

use agensh_domain::record::{Appended, Record};
use agensh_domain::view::ViewEntry;
use agensh_protocol::rest::{CapQuery, GrepQuery, Renew, Unfolded};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;

use crate::auth::Caller;
use crate::error::{ApiJson, ApiQuery, ApiResult};
use crate::ops::board;
use crate::state::AppState;

pub async fn append(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<serde_json::Value>,
) -> ApiResult<(StatusCode, Json<Appended>)> {
    let appended = board::append_record(&s, &caller, body).await?;
    Ok((StatusCode::CREATED, Json(appended)))
}

pub async fn recent(
    State(s): State<AppState>,
    _caller: Caller,
    ApiQuery(q): ApiQuery<CapQuery>,
) -> ApiResult<Json<Vec<ViewEntry>>> {
    Ok(Json(board::recent_entries(&s, q.cap).await?))
}

pub async fn read_unread(
    State(s): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<CapQuery>,
) -> ApiResult<Json<Vec<ViewEntry>>> {
    Ok(Json(board::unread_entries(&s, &caller, q.cap).await?))
}

pub async fn grep(
    State(s): State<AppState>,
    _caller: Caller,
    ApiQuery(q): ApiQuery<GrepQuery>,
) -> ApiResult<Json<Vec<Record>>> {
    Ok(Json(
        board::grep_records(&s, &q.q, q.limit, q.before.as_deref()).await?,
    ))
}

pub async fn unfold(
    State(s): State<AppState>,
    _caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Unfolded>> {
    Ok(Json(board::unfold_record(&s, &id).await?))
}

pub async fn renew(
    State(s): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<Renew>,
) -> ApiResult<Json<Record>> {
    Ok(Json(
        board::renew_claim(&s, &caller, &id, body.lease_secs).await?,
    ))
}

pub async fn release(
    State(s): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Record>> {
    Ok(Json(board::release_claim(&s, &caller, &id).await?))
}
