//! Each worker's finished turns, as its node reported them.

use agensh_domain::Result;
use agensh_protocol::dashboard::TurnReport;

use super::db::Conn;
use crate::common::{clamp_u64, decode_turn, encode_turn};

pub async fn record(conn: &mut Conn, worker: &str, report: &TurnReport) -> Result<()> {
    let json = encode_turn(report)?;
    let turn = clamp_u64(report.turn);
    conn.execute(
        "INSERT INTO turns (worker, turn, started_at, ended_at, report) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (worker, turn) DO UPDATE SET started_at = $3, ended_at = $4, report = $5",
        &[&worker, &turn, &report.started_at, &report.ended_at, &json],
    )
    .await?;
    Ok(())
}

pub async fn list(
    conn: &mut Conn,
    worker: &str,
    before: Option<u64>,
    limit: usize,
) -> Result<Vec<TurnReport>> {
    let before = before.map(clamp_u64);
    let rows = conn
        .query(
            "SELECT report FROM turns WHERE worker = $1 AND ($2::bigint IS NULL OR turn < $2) ORDER BY turn DESC LIMIT $3",
            &[&worker, &before, &(limit as i64)],
        )
        .await?;
    rows.iter()
        .map(|r| decode_turn(r.get::<_, &str>(0)))
        .collect()
}
