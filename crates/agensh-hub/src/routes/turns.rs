//! A worker's finished turns: its node reports each one (`POST /workers/{id}/turns`) and
//! the dashboard reads them (`GET /workers/{id}/turns`). The node's turn log stays the full
//! record; a report is what fits a page.

use agensh_domain::ids::validate_worker_id;
use agensh_domain::text::{self, Lines};
use agensh_domain::turn;
use agensh_domain::Error;
use agensh_protocol::dashboard::TurnReport;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;

use crate::auth::Caller;
use crate::error::{ApiJson, ApiQuery, ApiResult};
use crate::state::AppState;

/// Largest body of a turn report, or `hub.body_limit` when that is larger: a prompt of
/// 8 KiB and 200 tool calls, whatever their characters and escapes.
pub const BODY_LIMIT: usize = 1 << 20;

/// The worker itself or the admin; the worker must exist.
fn authorize(s: &AppState, caller: &Caller, id: &str, what: &str) -> ApiResult<()> {
    validate_worker_id(id)?;
    if !caller.admin && caller.id != id {
        return Err(Error::forbidden(
            "impersonation",
            format!(
                "a worker may {what} only its own turns ({}), not {id}'s",
                caller.id
            ),
        )
        .into());
    }
    if caller.admin && s.token_of(id).is_none() {
        return Err(agensh_domain::worker::unknown_worker(id).into());
    }
    Ok(())
}

/// Checks a report's sizes (refused over the limits of `agensh_domain::turn`) and escapes
/// the controls of its texts, which come from agents ([`text::escape`]), rather than
/// refusing them.
fn checked(mut r: TurnReport) -> ApiResult<TurnReport> {
    turn::check_counts(
        r.turn,
        r.started_at,
        r.ended_at,
        &r.events,
        r.tool_calls.len(),
    )?;
    turn::check_prompt(&r.prompt)?;
    turn::check_chars("the stop_reason", &r.stop_reason, turn::STATUS_CHARS)?;
    turn::check_chars("the last_action", &r.last_action, turn::LAST_ACTION_CHARS)?;
    for (i, c) in r.tool_calls.iter().enumerate() {
        let n = i + 1;
        turn::check_chars(
            &format!("the name of tool call {n}"),
            &c.name,
            turn::NAME_CHARS,
        )?;
        turn::check_chars(
            &format!("the title of tool call {n}"),
            &c.title,
            turn::TITLE_CHARS,
        )?;
        turn::check_chars(
            &format!("the status of tool call {n}"),
            &c.status,
            turn::STATUS_CHARS,
        )?;
    }
    let one = |s: &mut String| *s = text::escape(s, Lines::One).into_owned();
    r.prompt = text::escape(&r.prompt, Lines::Many).into_owned();
    one(&mut r.stop_reason);
    one(&mut r.last_action);
    for c in &mut r.tool_calls {
        one(&mut c.name);
        one(&mut c.title);
        one(&mut c.status);
    }
    Ok(r)
}

/// `POST /api/v1/workers/{id}/turns` (the worker, or the admin): one finished turn.
pub async fn report(
    State(s): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(report): ApiJson<TurnReport>,
) -> ApiResult<(StatusCode, Json<TurnReport>)> {
    authorize(&s, &caller, &id, "report")?;
    let report = checked(report)?;
    s.store.record_turn(&id, &report).await?;
    s.dashboard
        .last_turns
        .lock()
        .expect("last turns lock")
        .insert(
            id,
            crate::dashboard::LastTurn {
                turn: report.turn,
                last_action: report.last_action.clone(),
                ended_at: report.ended_at,
                restarts: report.restarts,
            },
        );
    s.dashboard.feed.touch();
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
    authorize(&s, &caller, &id, "read")?;
    let limit = agensh_domain::page::TURNS.check(q.limit)?;
    Ok(Json(s.store.turns(&id, q.before, limit).await?))
}
