//! A worker's finished turns: its node reports each one and the dashboard reads them. The
//! node's turn log stays the full record; a report is what fits a page.

use agensh_domain::text::{self, Lines};
use agensh_domain::turn;
use agensh_domain::Result;
use agensh_protocol::dashboard::TurnReport;

use crate::auth::Caller;
use crate::state::AppState;

/// The worker itself or the admin; the worker must exist.
fn authorize(s: &AppState, caller: &Caller, id: &str, what: &str) -> Result<()> {
    caller.require_self(id, &format!("{what} only its own turns"))?;
    if caller.admin && s.token_of(id).is_none() {
        return Err(agensh_domain::worker::unknown_worker(id));
    }
    Ok(())
}

/// Checks a report's sizes (refused over the limits of `agensh_domain::turn`) and escapes
/// the controls of its texts, which come from agents ([`text::escape`]), rather than
/// refusing them.
fn checked(mut r: TurnReport) -> Result<TurnReport> {
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

/// Records worker `id`'s finished turn (the worker, or the admin); the report as stored.
pub async fn report(
    s: &AppState,
    caller: &Caller,
    id: String,
    report: TurnReport,
) -> Result<TurnReport> {
    authorize(s, caller, &id, "report")?;
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
    Ok(report)
}

/// Worker `id`'s turns, newest first (the admin, or the worker): at most `limit`, only
/// those numbered below `before`.
pub async fn list(
    s: &AppState,
    caller: &Caller,
    id: &str,
    before: Option<u64>,
    limit: Option<usize>,
) -> Result<Vec<TurnReport>> {
    authorize(s, caller, id, "read")?;
    let limit = agensh_domain::page::TURNS.check(limit)?;
    s.store.turns(id, before, limit).await
}
