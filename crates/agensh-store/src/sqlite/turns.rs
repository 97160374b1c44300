//! Each worker's finished turns, as its node reported them: one row per (worker, turn), the
//! report as JSON.

use agensh_domain::Result;
use agensh_protocol::dashboard::TurnReport;
use rusqlite::{params, Connection};

use super::conn::{sql_err, WriteCtx};
use crate::common::{clamp_u64, decode_turn, encode_turn};

pub fn record(ctx: &mut WriteCtx<'_>, worker: &str, report: &TurnReport) -> Result<()> {
    let json = encode_turn(report)?;
    ctx.conn
        .execute(
            "INSERT INTO turns (worker, turn, started_at, ended_at, report) \
             VALUES (?1, ?2, ?3, ?4, ?5) \
             ON CONFLICT(worker, turn) DO UPDATE SET started_at = ?3, ended_at = ?4, report = ?5",
            params![
                worker,
                clamp_u64(report.turn),
                report.started_at,
                report.ended_at,
                json
            ],
        )
        .map_err(sql_err)?;
    Ok(())
}

pub fn list(
    c: &Connection,
    worker: &str,
    before: Option<u64>,
    limit: usize,
) -> Result<Vec<TurnReport>> {
    let before = before.map(clamp_u64);
    let mut stmt = c
        .prepare_cached(
            "SELECT report FROM turns WHERE worker = ?1 AND (?2 IS NULL OR turn < ?2) ORDER BY turn DESC LIMIT ?3",
        )
        .map_err(sql_err)?;
    let rows = stmt
        .query_map(params![worker, before, limit as i64], |r| {
            r.get::<_, String>(0)
        })
        .map_err(sql_err)?;
    let mut out = Vec::new();
    for row in rows {
        let text = row.map_err(sql_err)?;
        out.push(decode_turn(&text)?);
    }
    Ok(out)
}
