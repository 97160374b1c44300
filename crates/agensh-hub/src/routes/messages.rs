//! Channels and direct messages over HTTP ([`ops::messages`]).

use agensh_domain::message::{Message, NewMessage};
use agensh_domain::receipt::MessageStatus;
use agensh_protocol::rest::ReadQuery;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;

use crate::auth::Caller;
use crate::error::{ApiJson, ApiQuery, ApiResult};
use crate::ops::messages;
use crate::state::AppState;

pub async fn send(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(m): ApiJson<NewMessage>,
) -> ApiResult<(StatusCode, Json<Message>)> {
    Ok((
        StatusCode::CREATED,
        Json(messages::send_message(&s, &caller, m).await?),
    ))
}

/// Recent messages visible to the caller (does not mark anything read).
pub async fn history(
    State(s): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<ReadQuery>,
) -> ApiResult<Json<Vec<Message>>> {
    Ok(Json(messages::history(&s, &caller, q).await?))
}

/// Unread messages for the calling worker; marks them read.
pub async fn read_unread(
    State(s): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<ReadQuery>,
) -> ApiResult<Json<Vec<Message>>> {
    Ok(Json(messages::read_unread(&s, &caller, q).await?))
}

/// Where a message stands with each recipient ([`messages::status`]).
pub async fn receipts(
    State(s): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<MessageStatus>> {
    Ok(Json(messages::status(&s, &caller, &id).await?))
}
