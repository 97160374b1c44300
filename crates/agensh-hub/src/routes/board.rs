//! The shared context board: append, read, grep, unfold, claims.

use agensh_domain::ids::parse_record_id;
use agensh_domain::record::{Appended, NewRecord, Record, RecordKind};
use agensh_domain::view::ViewEntry;
use agensh_domain::Error;
use agensh_domain::{page, query};
use agensh_protocol::rest::{CapQuery, GrepQuery, Renew, Unfolded};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;

use crate::auth::Caller;
use crate::error::{ApiJson, ApiQuery, ApiResult};
use crate::metrics::inc;
use crate::state::AppState;

/// Most records one grep returns ([`page::GREP`]).
pub const GREP_LIMIT: usize = page::GREP.max;

pub async fn append(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<serde_json::Value>,
) -> ApiResult<(StatusCode, Json<Appended>)> {
    let appended = append_record(&s, &caller, body).await?;
    Ok((StatusCode::CREATED, Json(appended)))
}

/// Appends the record in `body` (a NewRecord as JSON) as `caller`: REST and MCP both.
pub async fn append_record(
    s: &AppState,
    caller: &Caller,
    body: serde_json::Value,
) -> ApiResult<Appended> {
    let record = new_record(body)?;
    if !caller.admin {
        // Checked first, so a record the store would refuse spends no quota.
        record.validate()?;
        let bytes = record.text.len()
            + record.label.as_ref().map_or(0, String::len)
            + record.detail.as_ref().map_or(0, String::len)
            + record.paths.iter().map(String::len).sum::<usize>();
        if let Err(e) = s.limiter.record(&caller.id, bytes, s.now()) {
            inc(&s.metrics.rate_limited);
            return Err(e.into());
        }
    }
    let appended = s
        .store
        .append_record(&caller.id, record, s.now(), s.config.board.claim_lease_secs)
        .await?;
    inc(&s.metrics.records_appended);
    if appended.record.kind == RecordKind::Claim {
        inc(&s.metrics.claims);
        if !appended.overlaps.is_empty() {
            inc(&s.metrics.claim_overlaps);
        }
    }
    Ok(appended)
}

/// Reads a record from its JSON body. The kind is checked with [`RecordKind::parse`], so an
/// unknown kind gets the `unknown_kind` error that names the valid kinds (plain serde would
/// answer a generic `bad_body`) and a kind in any case is accepted, as the parser allows.
fn new_record(mut body: serde_json::Value) -> ApiResult<NewRecord> {
    let kind = match body.get("kind") {
        Some(serde_json::Value::String(k)) => Some(RecordKind::parse(k)?),
        _ => None,
    };
    if let Some(k) = kind {
        body["kind"] = serde_json::Value::String(k.as_str().to_string());
    }
    serde_json::from_value(body).map_err(|e| {
        Error::invalid(
            "bad_body",
            format!("the request body was not understood: {e} — see docs/API.md for the fields"),
        )
        .into()
    })
}

fn cap(s: &AppState, asked: Option<usize>) -> ApiResult<usize> {
    Ok(page::view_cap(s.config.board.view_cap).check(asked)?)
}

pub async fn recent(
    State(s): State<AppState>,
    _caller: Caller,
    ApiQuery(q): ApiQuery<CapQuery>,
) -> ApiResult<Json<Vec<ViewEntry>>> {
    let cap = cap(&s, q.cap)?;
    Ok(Json(s.store.recent_view(s.now(), cap).await?))
}

pub async fn read_unread(
    State(s): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<CapQuery>,
) -> ApiResult<Json<Vec<ViewEntry>>> {
    Ok(Json(unread_entries(&s, &caller, q.cap).await?))
}

/// The recent-view entries `caller` has not read yet, at most `cap`; marks them read.
pub async fn unread_entries(
    s: &AppState,
    caller: &Caller,
    cap_asked: Option<usize>,
) -> ApiResult<Vec<ViewEntry>> {
    let cap = cap(s, cap_asked)?;
    Ok(s.store.board_unread(caller.worker()?, s.now(), cap).await?)
}

pub async fn grep(
    State(s): State<AppState>,
    _caller: Caller,
    ApiQuery(q): ApiQuery<GrepQuery>,
) -> ApiResult<Json<Vec<Record>>> {
    Ok(Json(
        grep_records(&s, &q.q, q.limit, q.before.as_deref()).await?,
    ))
}

/// Searches all history with the grep query language, newest first.
pub async fn grep_records(
    s: &AppState,
    q: &str,
    limit: Option<usize>,
    before: Option<&str>,
) -> ApiResult<Vec<Record>> {
    let parsed = query::parse(q).map_err(|e| Error::invalid("bad_query", e.message))?;
    let limit = page::GREP.check(limit)?;
    let before = before.map(parse_record_id).transpose()?;
    inc(&s.metrics.greps);
    Ok(s.store.grep(&parsed, before, limit).await?)
}

pub async fn unfold(
    State(s): State<AppState>,
    _caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Unfolded>> {
    Ok(Json(unfold_record(&s, &id).await?))
}

/// One record whole (`G12`, `g12` or `12`), with what superseded or invalidated it.
pub async fn unfold_record(s: &AppState, id: &str) -> ApiResult<Unfolded> {
    Ok(s.store.unfold(parse_record_id(id)?).await?)
}

pub async fn renew(
    State(s): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<Renew>,
) -> ApiResult<Json<Record>> {
    Ok(Json(renew_claim(&s, &caller, &id, body.lease_secs).await?))
}

/// Extends `caller`'s claim `id` to `lease_secs` from now (the configured default if none).
pub async fn renew_claim(
    s: &AppState,
    caller: &Caller,
    id: &str,
    lease_secs: Option<u64>,
) -> ApiResult<Record> {
    let lease = lease_secs.unwrap_or(s.config.board.claim_lease_secs);
    let seq = parse_record_id(id)?;
    Ok(s.store.renew_claim(&caller.id, seq, lease, s.now()).await?)
}

pub async fn release(
    State(s): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Record>> {
    Ok(Json(release_claim(&s, &caller, &id).await?))
}

/// Ends `caller`'s claim `id`.
pub async fn release_claim(s: &AppState, caller: &Caller, id: &str) -> ApiResult<Record> {
    let seq = parse_record_id(id)?;
    Ok(s.store.release_claim(&caller.id, seq, s.now()).await?)
}
