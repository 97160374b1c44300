//! The model gateway's requests and their usage totals; budgets.

use agensh_domain::budget::Limits;
use agensh_domain::Result;

use super::db::Conn;
use crate::common::{hub_state_key, rows};
use crate::{ModelRequest, ModelUsage};

pub async fn record(conn: &mut Conn, r: &ModelRequest) -> Result<()> {
    conn.execute(
        "INSERT INTO model_requests (worker, turn, upstream, model, status, input_tokens, \
         cached_input_tokens, output_tokens, cost_usd, latency_ms, at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        &[
            &r.worker,
            &r.turn.map(|t| t as i64),
            &r.upstream,
            &r.model,
            &i64::from(r.status),
            &(r.input_tokens as i64),
            &(r.cached_input_tokens as i64),
            &(r.output_tokens as i64),
            &r.cost_usd,
            &(r.latency_ms as i64),
            &r.at,
        ],
    )
    .await?;
    Ok(())
}

pub async fn hub_state(conn: &mut Conn, key: &str) -> Result<Option<String>> {
    Ok(conn
        .query_opt(
            "SELECT value FROM meta WHERE key = $1",
            &[&hub_state_key(key)],
        )
        .await?
        .map(|r| r.get(0)))
}

pub async fn set_hub_state(conn: &mut Conn, key: &str, value: &str) -> Result<()> {
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ($1, $2) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        &[&hub_state_key(key), &value],
    )
    .await?;
    Ok(())
}

/// Totals per worker and model, of `worker` only when given, of the requests made (started:
/// `at` is when one ended, `latency_ms` how long it took) at or after `since` only when given.
pub async fn totals(
    conn: &mut Conn,
    worker: Option<&str>,
    since: Option<i64>,
) -> Result<Vec<ModelUsage>> {
    let found = conn
        .query(
            "SELECT worker, model, count(*), sum(input_tokens)::bigint, sum(cached_input_tokens)::bigint, \
             sum(output_tokens)::bigint, sum(cost_usd), min(at) FROM model_requests \
             WHERE ($1::text IS NULL OR worker = $1) AND ($2::bigint IS NULL OR at - latency_ms >= $2) \
             GROUP BY worker, model ORDER BY worker COLLATE \"C\", model COLLATE \"C\"",
            &[&worker, &since],
        )
        .await?;
    found.iter().map(rows::model_usage).collect()
}

pub async fn set_budget(conn: &mut Conn, scope: &str, l: &Limits) -> Result<()> {
    conn.execute(
        "INSERT INTO budgets (scope, tokens, cost_usd, requests, hours) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (scope) DO UPDATE SET tokens = $2, cost_usd = $3, requests = $4, hours = $5",
        &[&scope, &(l.tokens as i64), &l.cost_usd, &(l.requests as i64), &l.hours],
    )
    .await?;
    Ok(())
}

pub async fn budgets(conn: &mut Conn) -> Result<Vec<(String, Limits)>> {
    let found = conn
        .query(
            "SELECT scope, tokens, cost_usd, requests, hours FROM budgets ORDER BY scope COLLATE \"C\"",
            &[],
        )
        .await?;
    found.iter().map(rows::budget).collect()
}
