//! Worker registry: ids, tokens, status, activity; and the admin token.

use std::collections::HashMap;

use agensh_domain::ids::new_worker_ids;
use agensh_domain::worker::{NewWorker, WorkerInfo, WorkerStatus, ADD_LIMIT};
use agensh_domain::{Error, Result};
use rusqlite::{params, Connection, OptionalExtension};

use super::board;
use super::conn::sql_err;

/// A random secret: `prefix` and 40 hex digits (160 bits).
pub fn new_token(prefix: &str) -> Result<String> {
    let mut bytes = [0u8; 20];
    getrandom::fill(&mut bytes)
        .map_err(|e| Error::internal(format!("no randomness for a token: {e}")))?;
    let mut s = String::with_capacity(prefix.len() + 40);
    s.push_str(prefix);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    Ok(s)
}

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
    if count == 0 || count > ADD_LIMIT {
        return Err(Error::invalid(
            "bad_worker_count",
            format!("cannot add {count} workers — add between 1 and {ADD_LIMIT} at a time"),
        ));
    }
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
    let mut claims: HashMap<String, Vec<_>> = HashMap::new();
    for c in board::live_claims(conn, now)? {
        claims.entry(c.author.clone()).or_default().push(c);
    }
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
        out.push(WorkerInfo {
            claims: claims.remove(&id).unwrap_or_default(),
            status: WorkerStatus::parse(&status)?,
            progress: None,
            agent: None,
            stopped_for: None,
            id,
            last_activity,
            created_at,
        });
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
