//! Channels and direct messages.

use agensh_domain::message::{Message, NewMessage, Target};
use agensh_domain::{page, Error};
use agensh_protocol::rest::ReadQuery;
use agensh_store::MessageQuery;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use crate::auth::Caller;
use crate::error::{ApiJson, ApiQuery, ApiResult};
use crate::metrics::inc;
use crate::state::AppState;

/// Most messages one read returns ([`page::MESSAGES`]).
pub const READ_LIMIT: usize = page::MESSAGES.max;

pub async fn send(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(m): ApiJson<NewMessage>,
) -> ApiResult<(StatusCode, Json<Message>)> {
    Ok((
        StatusCode::CREATED,
        Json(send_message(&s, &caller, m).await?),
    ))
}

/// Posts `m` to a channel or a worker as `caller`: REST and MCP both.
pub async fn send_message(s: &AppState, caller: &Caller, m: NewMessage) -> ApiResult<Message> {
    if let Target::Worker(w) = m.validate()? {
        if w == caller.id {
            return Err(Error::invalid(
                "message_to_self",
                "that is a direct message to yourself — post to a #channel or message another worker",
            )
            .into());
        }
    }
    if !caller.admin {
        if let Err(e) = s.limiter.message(&caller.id, s.now()) {
            inc(&s.metrics.rate_limited);
            return Err(e.into());
        }
    }
    let msg = s.store.post_message(&caller.id, m, s.now()).await?;
    inc(&s.metrics.messages_posted);
    Ok(msg)
}

fn message_query(q: ReadQuery, unread: bool) -> ApiResult<MessageQuery> {
    if unread && (q.with.is_some() || q.before.is_some()) {
        return Err(Error::invalid(
            "bad_filter",
            "unread messages are read all together (one read cursor per worker) — leave out with and before, or read one conversation's whole history (with, without unread)",
        )
        .into());
    }
    if let Some(w) = &q.with {
        Target::parse(w)?;
    }
    let limit = page::MESSAGES.check(q.limit)?;
    Ok(MessageQuery {
        unread,
        with: q.with,
        limit,
        before: q.before,
    })
}

/// Recent messages visible to the caller (does not mark anything read).
pub async fn history(
    State(s): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<ReadQuery>,
) -> ApiResult<Json<Vec<Message>>> {
    Ok(Json(
        s.store
            .read_messages(&caller.id, message_query(q, false)?)
            .await?,
    ))
}

/// Unread messages for the calling worker; marks them read.
pub async fn read_unread(
    State(s): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<ReadQuery>,
) -> ApiResult<Json<Vec<Message>>> {
    let worker = caller.worker()?;
    Ok(Json(
        s.store
            .read_messages(worker, message_query(q, true)?)
            .await?,
    ))
}

/// Unread messages for the calling worker, at most `limit` (default 100); marks them read.
pub async fn unread_messages(
    s: &AppState,
    caller: &Caller,
    limit: Option<usize>,
) -> ApiResult<Vec<Message>> {
    let worker = caller.worker()?;
    let q = ReadQuery {
        limit,
        ..ReadQuery::default()
    };
    Ok(s.store
        .read_messages(worker, message_query(q, true)?)
        .await?)
}
