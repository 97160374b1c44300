//! The shared context board: append, read, grep, unfold, claims.

use agensh_domain::ids::parse_record_id;
use agensh_domain::record::{Appended, NewRecord, Record, RecordKind};
use agensh_domain::view::ViewEntry;
use agensh_domain::{page, query};
use agensh_domain::{Error, Result};
use agensh_protocol::rest::Unfolded;

use crate::auth::Caller;
use crate::metrics::inc;
use crate::state::AppState;

/// Most records one grep returns ([`page::GREP`]).
pub const GREP_LIMIT: usize = page::GREP.max;

/// Appends the record in `body` (a NewRecord as JSON) as `caller`.
pub async fn append_record(
    s: &AppState,
    caller: &Caller,
    body: serde_json::Value,
) -> Result<Appended> {
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
            return Err(e);
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
fn new_record(mut body: serde_json::Value) -> Result<NewRecord> {
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
    })
}

fn cap(s: &AppState, asked: Option<usize>) -> Result<usize> {
    page::view_cap(s.config.board.view_cap).check(asked)
}

/// The recent view, at most `cap_asked` entries (the configured cap if none).
pub async fn recent_entries(s: &AppState, cap_asked: Option<usize>) -> Result<Vec<ViewEntry>> {
    let cap = cap(s, cap_asked)?;
    s.store.recent_view(s.now(), cap).await
}

/// The recent-view entries `caller` has not read yet, at most `cap`; marks them read.
pub async fn unread_entries(
    s: &AppState,
    caller: &Caller,
    cap_asked: Option<usize>,
) -> Result<Vec<ViewEntry>> {
    let cap = cap(s, cap_asked)?;
    s.store.board_unread(caller.worker()?, s.now(), cap).await
}

/// Searches all history with the grep query language, newest first.
pub async fn grep_records(
    s: &AppState,
    q: &str,
    limit: Option<usize>,
    before: Option<&str>,
) -> Result<Vec<Record>> {
    let parsed = query::parse(q).map_err(|e| Error::invalid("bad_query", e.message))?;
    let limit = page::GREP.check(limit)?;
    let before = before.map(parse_record_id).transpose()?;
    inc(&s.metrics.greps);
    s.store.grep(&parsed, before, limit).await
}

/// One record whole (`G12`, `g12` or `12`), with what superseded or invalidated it.
pub async fn unfold_record(s: &AppState, id: &str) -> Result<Unfolded> {
    s.store.unfold(parse_record_id(id)?).await
}

/// Extends `caller`'s claim `id` to `lease_secs` from now (the configured default if none).
pub async fn renew_claim(
    s: &AppState,
    caller: &Caller,
    id: &str,
    lease_secs: Option<u64>,
) -> Result<Record> {
    let lease = lease_secs.unwrap_or(s.config.board.claim_lease_secs);
    let seq = parse_record_id(id)?;
    s.store.renew_claim(&caller.id, seq, lease, s.now()).await
}

/// Ends `caller`'s claim `id`.
pub async fn release_claim(s: &AppState, caller: &Caller, id: &str) -> Result<Record> {
    let seq = parse_record_id(id)?;
    s.store.release_claim(&caller.id, seq, s.now()).await
}
