//! The model gateway's requests and their usage totals.

use agensh_domain::budget::Limits;
use agensh_domain::Result;
use rusqlite::{params, Connection};

use super::conn::{sql_err, WriteCtx};
use crate::common::{hub_state_key, rows};
use crate::{ModelRequest, ModelUsage};

pub fn record(ctx: &mut WriteCtx<'_>, r: &ModelRequest) -> Result<()> {
    ctx.conn
        .execute(
            "INSERT INTO model_requests (worker, turn, upstream, model, status, input_tokens, \
             cached_input_tokens, output_tokens, cost_usd, latency_ms, at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                r.worker,
                r.turn.map(|t| t as i64),
                r.upstream,
                r.model,
                r.status,
                r.input_tokens as i64,
                r.cached_input_tokens as i64,
                r.output_tokens as i64,
                r.cost_usd,
                r.latency_ms as i64,
                r.at,
            ],
        )
        .map_err(sql_err)?;
    Ok(())
}

pub fn hub_state(c: &Connection, key: &str) -> Result<Option<String>> {
    use rusqlite::OptionalExtension;
    c.query_row(
        "SELECT value FROM meta WHERE key = ?1",
        [hub_state_key(key)],
        |r| r.get(0),
    )
    .optional()
    .map_err(sql_err)
}

pub fn set_hub_state(ctx: &mut WriteCtx<'_>, key: &str, value: &str) -> Result<()> {
    ctx.conn
        .execute(
            "INSERT INTO meta(key, value) VALUES (?1, ?2) \
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![hub_state_key(key), value],
        )
        .map_err(sql_err)?;
    Ok(())
}

/// Totals per worker and model, of `worker` only when given, of the requests made (started:
/// `at` is when one ended, `latency_ms` how long it took) at or after `since` only when given.
pub fn totals(c: &Connection, worker: Option<&str>, since: Option<i64>) -> Result<Vec<ModelUsage>> {
    let mut stmt = c
        .prepare_cached(
            "SELECT worker, model, count(*), sum(input_tokens), sum(cached_input_tokens), \
             sum(output_tokens), sum(cost_usd), min(at) FROM model_requests \
             WHERE (?1 IS NULL OR worker = ?1) AND (?2 IS NULL OR at - latency_ms >= ?2) \
             GROUP BY worker, model ORDER BY worker, model",
        )
        .map_err(sql_err)?;
    let found = stmt
        .query_map(params![worker, since], |r| rows::model_usage(r))
        .map_err(sql_err)?;
    found
        .collect::<std::result::Result<_, _>>()
        .map_err(sql_err)
}

pub fn set_budget(ctx: &mut WriteCtx<'_>, scope: &str, l: &Limits) -> Result<()> {
    ctx.conn
        .execute(
            "INSERT INTO budgets (scope, tokens, cost_usd, requests, hours) VALUES (?1, ?2, ?3, ?4, ?5) \
             ON CONFLICT(scope) DO UPDATE SET tokens = ?2, cost_usd = ?3, requests = ?4, hours = ?5",
            params![scope, l.tokens as i64, l.cost_usd, l.requests as i64, l.hours],
        )
        .map_err(sql_err)?;
    Ok(())
}

pub fn budgets(c: &Connection) -> Result<Vec<(String, Limits)>> {
    let mut stmt = c
        .prepare_cached(
            "SELECT scope, tokens, cost_usd, requests, hours FROM budgets ORDER BY scope",
        )
        .map_err(sql_err)?;
    let found = stmt.query_map([], |r| rows::budget(r)).map_err(sql_err)?;
    found
        .collect::<std::result::Result<_, _>>()
        .map_err(sql_err)
}
