//! Per-worker durable event queues.
//!
//! One row per event; a broadcast (target NULL) is stored once however many workers there
//! are. Each worker has a cursor (every event at or below it is acknowledged) and a set of
//! acknowledgements above the cursor, so urgent events can be acknowledged before older
//! normal ones. The cursor moves forward over the acknowledged prefix.

use std::collections::HashSet;

use agensh_domain::event::{Event, NewEvent, Priority};
use agensh_domain::{Error, Result};
use rusqlite::{params, Connection, OptionalExtension, Row};

use super::conn::sql_err;
use crate::QueueState;

/// Most events one ack call may name.
pub const ACK_LIMIT: usize = 10_000;

const EVENT_COLUMNS: &str =
    "seq, kind, priority, payload, dedup_key, source, target, except_worker, created_at";

fn row_to_event(row: &Row<'_>) -> rusqlite::Result<Event> {
    let priority: String = row.get(2)?;
    let payload: String = row.get(3)?;
    Ok(Event {
        seq: row.get(0)?,
        kind: row.get(1)?,
        priority: Priority::parse(&priority).unwrap_or(Priority::Normal),
        payload: serde_json::from_str(&payload).unwrap_or(serde_json::Value::Null),
        dedup_key: row.get(4)?,
        source: row.get(5)?,
        target: row.get(6)?,
        except: row.get(7)?,
        created_at: row.get(8)?,
    })
}

/// Stores an event unless one with the same target and dedup key exists.
pub fn insert(conn: &Connection, e: &NewEvent, now: i64) -> Result<Option<Event>> {
    let payload = serde_json::to_string(&e.payload).expect("json serializes");
    let n = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO events(kind, priority, payload, dedup_key, source, target, except_worker, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )
        .and_then(|mut s| {
            s.execute(params![
                e.kind,
                e.priority.as_str(),
                payload,
                e.dedup_key,
                e.source,
                e.target,
                e.except,
                now
            ])
        })
        .map_err(sql_err)?;
    if n == 0 {
        return Ok(None);
    }
    Ok(Some(Event {
        seq: conn.last_insert_rowid(),
        kind: e.kind.clone(),
        priority: e.priority,
        payload: e.payload.clone(),
        dedup_key: e.dedup_key.clone(),
        source: e.source.clone(),
        target: e.target.clone(),
        except: e.except.clone(),
        created_at: now,
    }))
}

fn cursor(conn: &Connection, worker: &str) -> Result<i64> {
    conn.query_row(
        "SELECT event_cursor FROM workers WHERE id = ?1",
        [worker],
        |r| r.get(0),
    )
    .optional()
    .map_err(sql_err)?
    .ok_or_else(|| super::workers::unknown_worker(worker))
}

/// Events for `worker` above `from`, oldest first, acknowledged or not.
fn for_worker(conn: &Connection, worker: &str, from: i64, limit: usize) -> Result<Vec<Event>> {
    let mut out = Vec::new();
    for sql in [
        format!("SELECT {EVENT_COLUMNS} FROM events WHERE target IS NULL AND seq > ?1 AND ifnull(source, '') != ?2 AND ifnull(except_worker, '') != ?2 ORDER BY seq LIMIT ?3"),
        format!("SELECT {EVENT_COLUMNS} FROM events WHERE target = ?2 AND seq > ?1 ORDER BY seq LIMIT ?3"),
    ] {
        let mut stmt = conn.prepare_cached(&sql).map_err(sql_err)?;
        let rows = stmt
            .query_map(params![from, worker, limit as i64], row_to_event)
            .map_err(sql_err)?;
        for r in rows {
            out.push(r.map_err(sql_err)?);
        }
    }
    out.sort_by_key(|e| e.seq);
    out.truncate(limit);
    Ok(out)
}

fn acked_above(conn: &Connection, worker: &str, from: i64) -> Result<HashSet<i64>> {
    let mut stmt = conn
        .prepare_cached("SELECT seq FROM event_acks WHERE worker = ?1 AND seq > ?2")
        .map_err(sql_err)?;
    let rows = stmt
        .query_map(params![worker, from], |r| r.get(0))
        .map_err(sql_err)?;
    rows.collect::<rusqlite::Result<_>>().map_err(sql_err)
}

pub fn pending(conn: &Connection, worker: &str, after: i64, limit: usize) -> Result<Vec<Event>> {
    let c = cursor(conn, worker)?;
    let from = c.max(after);
    let acked = acked_above(conn, worker, from)?;
    let mut out = Vec::new();
    let mut start = from;
    // Skip acknowledged events page by page until `limit` unacknowledged ones are found.
    loop {
        let page = for_worker(conn, worker, start, limit + acked.len())?;
        let n = page.len();
        for e in page {
            start = e.seq;
            if !acked.contains(&e.seq) {
                out.push(e);
                if out.len() == limit {
                    return Ok(out);
                }
            }
        }
        if n < limit + acked.len() {
            return Ok(out);
        }
    }
}

pub fn ack(conn: &Connection, worker: &str, seqs: &[i64]) -> Result<usize> {
    if seqs.len() > ACK_LIMIT {
        return Err(Error::invalid(
            "too_many_acks",
            format!(
                "{} events in one ack; the limit is {ACK_LIMIT} — acknowledge in batches",
                seqs.len()
            ),
        ));
    }
    let c = cursor(conn, worker)?;
    let mut fresh = 0;
    for &seq in seqs {
        if seq <= c {
            continue;
        }
        let e = conn
            .prepare_cached(&format!(
                "SELECT {EVENT_COLUMNS} FROM events WHERE seq = ?1"
            ))
            .and_then(|mut s| s.query_row([seq], row_to_event).optional())
            .map_err(sql_err)?;
        match e {
            Some(e) if e.is_for(worker) => {
                fresh += conn
                    .prepare_cached("INSERT OR IGNORE INTO event_acks(worker, seq) VALUES (?1, ?2)")
                    .and_then(|mut s| s.execute(params![worker, seq]))
                    .map_err(sql_err)?;
            }
            _ => {
                return Err(Error::invalid(
                    "not_your_event",
                    format!(
                    "event {seq} is not in {worker}'s queue — acknowledge only events you received"
                ),
                ))
            }
        }
    }
    advance_cursor(conn, worker, c)?;
    Ok(fresh)
}

/// Moves the cursor over the acknowledged prefix and forgets acks at or below it.
fn advance_cursor(conn: &Connection, worker: &str, mut c: i64) -> Result<()> {
    let acked = acked_above(conn, worker, c)?;
    if acked.is_empty() {
        return Ok(());
    }
    let start = c;
    'pages: loop {
        let page = for_worker(conn, worker, c, 512)?;
        if page.is_empty() {
            break;
        }
        for e in &page {
            if !acked.contains(&e.seq) {
                break 'pages;
            }
            c = e.seq;
        }
    }
    if c > start {
        conn.execute(
            "UPDATE workers SET event_cursor = ?2 WHERE id = ?1",
            params![worker, c],
        )
        .map_err(sql_err)?;
        conn.execute(
            "DELETE FROM event_acks WHERE worker = ?1 AND seq <= ?2",
            params![worker, c],
        )
        .map_err(sql_err)?;
    }
    Ok(())
}

pub fn queue_state(conn: &Connection, worker: &str) -> Result<QueueState> {
    let c = cursor(conn, worker)?;
    let n: i64 = conn
        .query_row(
            "SELECT count(*) FROM event_acks WHERE worker = ?1",
            [worker],
            |r| r.get(0),
        )
        .map_err(sql_err)?;
    Ok(QueueState {
        worker: worker.to_string(),
        cursor: c,
        acked_above_cursor: n as usize,
    })
}
