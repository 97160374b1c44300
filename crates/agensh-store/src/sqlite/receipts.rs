//! Delivery receipts (`common/receipts.rs`): presentations and acknowledgements recorded
//! per worker and event, and what the hub reads of them.

use agensh_domain::event::Event;
use agensh_domain::message::Message;
use agensh_domain::receipt::{Receipt, Via};
use agensh_domain::Result;
use rusqlite::{params, Connection, OptionalExtension};

use super::conn::sql_err;
use super::events;
use crate::common::events::{too_many_acks, ACK_LIMIT};
use crate::common::messages::dedup_key;
use crate::common::receipts::{
    for_worker_sql, has_receipts_sql, overdue_sql, receipt, RECEIPT_COLUMNS,
};
use crate::common::rows::{self, EVENT_COLUMNS, MESSAGE_COLUMNS};

fn json_list(seqs: &[i64]) -> String {
    serde_json::to_string(seqs).expect("json serializes")
}

/// `events e` for the seqs in the JSON list parameter `list`, each looked up by its key. Left
/// to choose, SQLite answers `e.seq IN (…) AND (e.target = w OR e.target IS NULL …)` from the
/// target index, reading every broadcast, once per acknowledgement: with 1,024 workers and a
/// board record per turn each, acknowledgements alone kept the store's writer busy.
fn events_listed(list: &str) -> String {
    format!("json_each({list}) j CROSS JOIN events e ON e.seq = j.value")
}

/// The statement of [`acknowledge`]: (1) worker, (2) now, (3) the seqs as a JSON list.
fn acknowledge_sql() -> String {
    format!(
        "INSERT INTO receipts(seq, worker, presented_at, via, acknowledged_at) \
         SELECT e.seq, ?1, ?2, '{prompt}', ?2 FROM {events} \
         WHERE {mine} AND {has} \
         ON CONFLICT(seq, worker) DO UPDATE SET acknowledged_at = ifnull(receipts.acknowledged_at, excluded.acknowledged_at)",
        prompt = Via::Prompt.as_str(),
        events = events_listed("?3"),
        mine = for_worker_sql("e", "?1"),
        has = has_receipts_sql("e"),
    )
}

/// The statement of [`present`]: (1) worker, (2) now, (3) via, (4) the seqs as a JSON list.
fn present_sql() -> String {
    format!(
        "INSERT INTO receipts(seq, worker, presented_at, via) \
         SELECT e.seq, ?1, ?2, ?3 FROM {events} \
         WHERE {mine} AND {has} \
         ON CONFLICT(seq, worker) DO NOTHING",
        events = events_listed("?4"),
        mine = for_worker_sql("e", "?1"),
        has = has_receipts_sql("e"),
    )
}

/// Records that `worker` acknowledged its events `seqs` at `now`: each of its queue that
/// has receipts gets its acknowledgement (the first one stays), and a presentation via
/// prompt at the same time when none was recorded.
fn acknowledge(conn: &Connection, worker: &str, seqs: &[i64], now: i64) -> Result<()> {
    if seqs.is_empty() {
        return Ok(());
    }
    let sql = acknowledge_sql();
    conn.prepare_cached(&sql)
        .and_then(|mut s| s.execute(params![worker, now, json_list(seqs)]))
        .map_err(sql_err)?;
    Ok(())
}

/// [`events::ack`] with the acknowledgements' receipts, in the same transaction.
pub fn ack(conn: &Connection, worker: &str, seqs: &[i64], now: i64) -> Result<usize> {
    let n = events::ack(conn, worker, seqs)?;
    acknowledge(conn, worker, seqs, now)?;
    Ok(n)
}

/// [`events::ack_many`] with the receipts of every worker whose acks were applied.
pub fn ack_many(
    conn: &Connection,
    acks: &[(String, Vec<i64>)],
    now: i64,
) -> Result<Vec<Result<usize>>> {
    let out = events::ack_many(conn, acks)?;
    for ((worker, seqs), r) in acks.iter().zip(&out) {
        if r.is_ok() {
            acknowledge(conn, worker, seqs, now)?;
        }
    }
    Ok(out)
}

/// Records that `worker` was shown its events `seqs` via `via` at `now` (the first
/// presentation wins; events without receipts and not the worker's are left out); with
/// `dequeue`, its urgent ones also leave its queue, their receipts staying presented. How
/// many were newly presented.
pub fn present(
    conn: &Connection,
    worker: &str,
    seqs: &[i64],
    via: Via,
    dequeue: bool,
    now: i64,
) -> Result<usize> {
    if seqs.len() > ACK_LIMIT {
        return Err(too_many_acks(seqs.len()));
    }
    if dequeue {
        let urgent = urgent_of(conn, seqs)?;
        if !urgent.is_empty() {
            events::ack(conn, worker, &urgent)?;
        }
    } else {
        // The worker must exist, as with an acknowledgement.
        events::cursor(conn, worker)?;
    }
    if seqs.is_empty() {
        return Ok(0);
    }
    let sql = present_sql();
    conn.prepare_cached(&sql)
        .and_then(|mut s| s.execute(params![worker, now, via.as_str(), json_list(seqs)]))
        .map_err(sql_err)
}

/// The urgent events among `seqs`.
fn urgent_of(conn: &Connection, seqs: &[i64]) -> Result<Vec<i64>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT seq FROM events WHERE seq IN (SELECT value FROM json_each(?1)) AND priority = 'urgent' ORDER BY seq",
        )
        .map_err(sql_err)?;
    let rows = stmt
        .query_map([json_list(seqs)], |r| r.get(0))
        .map_err(sql_err)?;
    rows.collect::<rusqlite::Result<_>>().map_err(sql_err)
}

/// The receipts recorded for the events `seqs`, by event then worker.
pub fn of_events(conn: &Connection, seqs: &[i64]) -> Result<Vec<Receipt>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {RECEIPT_COLUMNS} FROM receipts r JOIN events e ON e.seq = r.seq \
             WHERE r.seq IN (SELECT value FROM json_each(?1)) ORDER BY r.seq, r.worker"
        ))
        .map_err(sql_err)?;
    let rows = stmt
        .query_map([json_list(seqs)], |r| receipt(r))
        .map_err(sql_err)?;
    rows.collect::<rusqlite::Result<_>>().map_err(sql_err)
}

/// Message `seq` and the event that carried it.
pub fn message_event(conn: &Connection, seq: i64) -> Result<Option<(Message, Option<Event>)>> {
    let message = conn
        .query_row(
            &format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE seq = ?1"),
            [seq],
            |r| rows::message(r),
        )
        .optional()
        .map_err(sql_err)?;
    let Some(message) = message else {
        return Ok(None);
    };
    // The events' dedup index is on (ifnull(target, '*'), dedup_key): a channel post's event
    // is everyone's, a direct message's its worker's.
    let target = if message.is_direct() {
        message.to.clone()
    } else {
        "*".to_string()
    };
    let event = conn
        .query_row(
            &format!(
                "SELECT {EVENT_COLUMNS} FROM events WHERE ifnull(target, '*') = ?1 AND dedup_key = ?2"
            ),
            params![target, dedup_key(seq)],
            |r| rows::event_at(r, 0),
        )
        .optional()
        .map_err(sql_err)?;
    Ok(Some((message, event)))
}

/// Urgent events for one worker, with receipts, stored in `[from, to)`, that their worker
/// has neither been shown nor acknowledged, oldest first (by `created_at`, then number), at
/// most `limit`.
pub fn unseen(conn: &Connection, from: i64, to: i64, limit: usize) -> Result<Vec<Event>> {
    let sql = format!(
        "SELECT {EVENT_COLUMNS} FROM events e \
         WHERE e.target IS NOT NULL AND e.priority = 'urgent' \
           AND e.created_at >= ?1 AND e.created_at < ?2 AND {has} \
           AND NOT EXISTS (SELECT 1 FROM receipts r WHERE r.seq = e.seq AND r.worker = e.target) \
           AND NOT EXISTS (SELECT 1 FROM event_acks a WHERE a.worker = e.target AND a.seq = e.seq) \
           AND e.seq > (SELECT w.event_cursor FROM workers w WHERE w.id = e.target) \
         ORDER BY e.created_at, e.seq LIMIT ?3",
        has = has_receipts_sql("e"),
    );
    let mut stmt = conn.prepare_cached(&sql).map_err(sql_err)?;
    let rows = stmt
        .query_map(params![from, to, limit as i64], |r| rows::event_at(r, 0))
        .map_err(sql_err)?;
    rows.collect::<rusqlite::Result<_>>().map_err(sql_err)
}

/// `Store::overdue_events`.
pub fn overdue(conn: &Connection, worker: &str, before: i64, limit: usize) -> Result<Vec<Event>> {
    let mut stmt = conn
        .prepare_cached(&overdue_sql(|n| format!("?{n}")))
        .map_err(sql_err)?;
    let rows = stmt
        .query_map(params![worker, before, limit as i64], |r| {
            rows::event_at(r, 0)
        })
        .map_err(sql_err)?;
    rows.collect::<rusqlite::Result<_>>().map_err(sql_err)
}

/// Receipts presented at or after `since`, newest first, at most `limit`.
pub fn presented_since(conn: &Connection, since: i64, limit: usize) -> Result<Vec<Receipt>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {RECEIPT_COLUMNS} FROM receipts r JOIN events e ON e.seq = r.seq \
             WHERE r.presented_at >= ?1 ORDER BY r.presented_at DESC LIMIT ?2"
        ))
        .map_err(sql_err)?;
    let rows = stmt
        .query_map(params![since, limit as i64], |r| receipt(r))
        .map_err(sql_err)?;
    rows.collect::<rusqlite::Result<_>>().map_err(sql_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan of `sql` (its parameters null) on a store with every table.
    fn plan(sql: &str) -> String {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(include_str!("schema.sql")).unwrap();
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let nulls = vec![rusqlite::types::Null; stmt.parameter_count()];
        let params = rusqlite::params_from_iter(nulls);
        let rows = stmt.query_map(params, |r| r.get::<_, String>(3)).unwrap();
        rows.map(Result::unwrap).collect::<Vec<_>>().join("\n")
    }

    #[test]
    fn receipts_are_written_by_looking_each_event_up_by_its_key_not_by_reading_broadcasts() {
        for sql in [acknowledge_sql(), present_sql()] {
            let plan = plan(&sql);
            assert!(
                plan.contains("SEARCH e USING INTEGER PRIMARY KEY"),
                "{plan}"
            );
            assert!(!plan.contains("events_by_target"), "{plan}");
        }
    }
}
