//! Worker registry: ids, tokens, status, activity; and the admin token.

use agensh_domain::ids::new_worker_ids;
use agensh_domain::worker::{NewWorker, WorkerInfo, WorkerStatus};
use agensh_domain::Result;
use rusqlite::{params, Connection, OptionalExtension};

use super::board;
use super::conn::sql_err;
use crate::common::new_token;
use crate::common::workers::{check_add, claims_by_author, info};

pub fn admin_token(conn: &Connection) -> Result<String> {
    let existing: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'admin_token'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(sql_err)?;
    if let Some(t) = existing {
        return Ok(t);
    }
    let t = new_token("aga_")?;
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('admin_token', ?1)",
        [&t],
    )
    .map_err(sql_err)?;
    Ok(t)
}

pub fn add(conn: &Connection, count: usize, now: i64) -> Result<Vec<NewWorker>> {
    check_add(count)?;
    let existing: i64 = conn
        .query_row("SELECT ifnull(max(num), 0) FROM workers", [], |r| r.get(0))
        .map_err(sql_err)?;
    // A new worker's queue starts now: earlier broadcasts are history (the board and
    // the message history still show them), not events it must handle.
    let last_event: i64 = conn
        .query_row("SELECT ifnull(max(seq), 0) FROM events", [], |r| r.get(0))
        .map_err(sql_err)?;
    let mut stmt = conn
        .prepare_cached(
            "INSERT INTO workers(id, num, token, status, created_at, event_cursor) VALUES (?1, ?2, ?3, 'stopped', ?4, ?5)",
        )
        .map_err(sql_err)?;
    let mut out = Vec::with_capacity(count);
    for (i, id) in new_worker_ids(existing as usize, count)
        .into_iter()
        .enumerate()
    {
        let token = new_token("agw_")?;
        stmt.execute(params![id, existing + 1 + i as i64, token, now, last_event])
            .map_err(sql_err)?;
        out.push(NewWorker { id, token });
    }
    Ok(out)
}

pub fn tokens(conn: &Connection) -> Result<Vec<(String, String)>> {
    let mut stmt = conn
        .prepare_cached("SELECT id, token FROM workers ORDER BY num")
        .map_err(sql_err)?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(sql_err)?;
    rows.collect::<rusqlite::Result<_>>().map_err(sql_err)
}

pub fn list(conn: &Connection, now: i64) -> Result<Vec<WorkerInfo>> {
    let mut claims = claims_by_author(board::live_claims(conn, now)?);
    let mut stmt = conn
        .prepare_cached("SELECT id, status, last_activity, created_at FROM workers ORDER BY num")
        .map_err(sql_err)?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<i64>>(2)?,
                r.get::<_, i64>(3)?,
            ))
        })
        .map_err(sql_err)?;
    let mut out = Vec::new();
    for row in rows {
        let (id, status, last_activity, created_at) = row.map_err(sql_err)?;
        out.push(info(id, &status, last_activity, created_at, &mut claims)?);
    }
    Ok(out)
}

/// Fails with a clear message when `id` is not a registered worker.
pub fn ensure_exists(conn: &Connection, id: &str) -> Result<()> {
    let found: Option<i64> = conn
        .query_row("SELECT 1 FROM workers WHERE id = ?1", [id], |r| r.get(0))
        .optional()
        .map_err(sql_err)?;
    match found {
        Some(_) => Ok(()),
        None => Err(agensh_domain::worker::unknown_worker(id)),
    }
}

pub fn set_status(conn: &Connection, id: &str, status: WorkerStatus) -> Result<()> {
    let n = conn
        .execute(
            "UPDATE workers SET status = ?1 WHERE id = ?2",
            params![status.as_str(), id],
        )
        .map_err(sql_err)?;
    if n == 0 {
        return Err(agensh_domain::worker::unknown_worker(id));
    }
    Ok(())
}

/// Sets many workers' statuses; an unknown id fails the whole call (nothing is set).
pub fn set_statuses(conn: &Connection, statuses: &[(String, WorkerStatus)]) -> Result<()> {
    let mut stmt = conn
        .prepare_cached("UPDATE workers SET status = ?1 WHERE id = ?2")
        .map_err(sql_err)?;
    for (id, status) in statuses {
        if stmt
            .execute(params![status.as_str(), id])
            .map_err(sql_err)?
            == 0
        {
            return Err(agensh_domain::worker::unknown_worker(id));
        }
    }
    Ok(())
}

pub fn touch(conn: &Connection, activity: &[(String, i64)]) -> Result<()> {
    let mut stmt = conn
        .prepare_cached(
            "UPDATE workers SET last_activity = max(ifnull(last_activity, 0), ?2) WHERE id = ?1",
        )
        .map_err(sql_err)?;
    for (id, at) in activity {
        stmt.execute(params![id, at]).map_err(sql_err)?;
    }
    Ok(())
}
