//! Worker registry: ids, tokens, status, activity; and the admin token.

use agensh_domain::ids::new_worker_ids;
use agensh_domain::worker::{NewWorker, WorkerInfo, WorkerStatus};
use agensh_domain::Result;

use super::board;
use super::db::{Conn, WriteCtx};
use crate::common::new_token;
use crate::common::workers::{check_add, claims_by_author, info};

pub async fn admin_token(ctx: &mut WriteCtx<'_>) -> Result<String> {
    let conn = &mut ctx.conn;
    if let Some(r) = conn
        .query_opt("SELECT value FROM meta WHERE key = 'admin_token'", &[])
        .await?
    {
        return Ok(r.get(0));
    }
    let t = new_token("aga_")?;
    // Two stores opening at once: the first one's token wins.
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('admin_token', $1) ON CONFLICT (key) DO NOTHING",
        &[&t],
    )
    .await?;
    Ok(conn
        .query_one("SELECT value FROM meta WHERE key = 'admin_token'", &[])
        .await?
        .get(0))
}

pub async fn add(ctx: &mut WriteCtx<'_>, count: usize, now: i64) -> Result<Vec<NewWorker>> {
    check_add(count)?;
    // Numbers and the queue's start: under the write lock, like every numbered write.
    ctx.lock().await?;
    let conn = &mut ctx.conn;
    let existing: i64 = conn
        .query_one("SELECT coalesce(max(num), 0) FROM workers", &[])
        .await?
        .get(0);
    // A new worker's queue starts now: earlier broadcasts are history.
    let last_event: i64 = conn
        .query_one("SELECT coalesce(max(seq), 0) FROM events", &[])
        .await?
        .get(0);
    let mut out = Vec::with_capacity(count);
    for (i, id) in new_worker_ids(existing as usize, count)
        .into_iter()
        .enumerate()
    {
        let token = new_token("agw_")?;
        let num = existing + 1 + i as i64;
        conn.execute(
            "INSERT INTO workers(id, num, token, status, created_at, event_cursor) VALUES ($1, $2, $3, 'stopped', $4, $5)",
            &[&id, &num, &token, &now, &last_event],
        )
        .await?;
        out.push(NewWorker { id, token });
    }
    Ok(out)
}

pub async fn tokens(conn: &mut Conn) -> Result<Vec<(String, String)>> {
    let rows = conn
        .query("SELECT id, token FROM workers ORDER BY num", &[])
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

pub async fn list(conn: &mut Conn, now: i64) -> Result<Vec<WorkerInfo>> {
    let mut claims = claims_by_author(board::live_claims(conn, now).await?);
    let rows = conn
        .query(
            "SELECT id, status, last_activity, created_at FROM workers ORDER BY num",
            &[],
        )
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let status: String = r.get(1);
        out.push(info(r.get(0), &status, r.get(2), r.get(3), &mut claims)?);
    }
    Ok(out)
}

/// Fails with a clear message when `id` is not a registered worker.
pub async fn ensure_exists(conn: &mut Conn, id: &str) -> Result<()> {
    match conn
        .query_opt("SELECT 1 FROM workers WHERE id = $1", &[&id])
        .await?
    {
        Some(_) => Ok(()),
        None => Err(agensh_domain::worker::unknown_worker(id)),
    }
}

/// Locks the rows of the workers `ids` (as an update of theirs would) in one order, by id.
/// Transactions that update several workers' rows — status reports, activity — take this
/// first (the batched ack locks them in the same order as it reads their cursors), so no
/// two of them hold one row each while waiting for the other's (PostgreSQL would refuse
/// one with a deadlock, 40P01). One row needs no order.
pub async fn lock_rows(conn: &mut Conn, ids: &[&str]) -> Result<()> {
    if ids.len() > 1 {
        conn.execute(
            "SELECT 1 FROM workers WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE",
            &[&ids],
        )
        .await?;
    }
    Ok(())
}

/// Sets statuses; an unknown id fails the whole call (the transaction rolls back).
pub async fn set_statuses(conn: &mut Conn, statuses: &[(String, WorkerStatus)]) -> Result<()> {
    let ids: Vec<&str> = statuses.iter().map(|s| s.0.as_str()).collect();
    lock_rows(conn, &ids).await?;
    for (id, status) in statuses {
        let n = conn
            .execute(
                "UPDATE workers SET status = $1 WHERE id = $2",
                &[&status.as_str(), id],
            )
            .await?;
        if n == 0 {
            return Err(agensh_domain::worker::unknown_worker(id));
        }
    }
    Ok(())
}

pub async fn touch(conn: &mut Conn, activity: &[(String, i64)]) -> Result<()> {
    if activity.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = activity.iter().map(|a| a.0.as_str()).collect();
    let ats: Vec<i64> = activity.iter().map(|a| a.1).collect();
    lock_rows(conn, &ids).await?;
    conn.execute(
        "UPDATE workers w SET last_activity = greatest(coalesce(w.last_activity, 0), a.at) \
         FROM (SELECT id, max(at) AS at FROM unnest($1::text[], $2::bigint[]) AS t(id, at) GROUP BY id) a \
         WHERE w.id = a.id",
        &[&ids, &ats],
    )
    .await?;
    Ok(())
}
