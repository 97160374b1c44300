//! Per-worker durable event queues, as in `sqlite/events.rs`: one row per event (a
//! broadcast once), and per worker a cursor plus the acknowledgements above it.

use std::collections::{HashMap, HashSet};

use agensh_domain::event::{Event, NewEvent, Priority};
use agensh_domain::{Error, Result};
use tokio_postgres::Row;

use super::db::Conn;
use crate::QueueState;

/// Most events one ack call may name.
pub const ACK_LIMIT: usize = 10_000;

const EVENT_COLUMNS: &str =
    "seq, kind, priority, payload, dedup_key, source, target, except_worker, created_at";

fn row_to_event(row: &Row) -> Event {
    let priority: String = row.get(2);
    let payload: String = row.get(3);
    Event {
        seq: row.get(0),
        kind: row.get(1),
        priority: Priority::parse(&priority).unwrap_or(Priority::Normal),
        payload: serde_json::from_str(&payload).unwrap_or(serde_json::Value::Null),
        dedup_key: row.get(4),
        source: row.get(5),
        target: row.get(6),
        except: row.get(7),
        created_at: row.get(8),
    }
}

/// Every event above `after`, oldest first, at most `limit`.
pub async fn after(conn: &mut Conn, after: i64, limit: usize) -> Result<Vec<Event>> {
    let rows = conn
        .query(
            &format!("SELECT {EVENT_COLUMNS} FROM events WHERE seq > $1 ORDER BY seq LIMIT $2"),
            &[&after, &(limit as i64)],
        )
        .await?;
    Ok(rows.iter().map(row_to_event).collect())
}

/// Stores an event unless one with the same target and dedup key exists. The caller holds
/// the write lock, so the number is the greatest plus one.
pub async fn insert(conn: &mut Conn, e: &NewEvent, now: i64) -> Result<Option<Event>> {
    let payload = serde_json::to_string(&e.payload).expect("json serializes");
    let row = conn
        .query_opt(
            "INSERT INTO events(seq, kind, priority, payload, dedup_key, source, target, except_worker, created_at) \
             SELECT coalesce(max(seq), 0) + 1, $1, $2, $3, $4, $5, $6, $7, $8 FROM events \
             ON CONFLICT DO NOTHING RETURNING seq",
            &[
                &e.kind,
                &e.priority.as_str(),
                &payload,
                &e.dedup_key,
                &e.source,
                &e.target,
                &e.except,
                &now,
            ],
        )
        .await?;
    let Some(row) = row else { return Ok(None) };
    Ok(Some(Event {
        seq: row.get(0),
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

async fn cursor(conn: &mut Conn, worker: &str, for_update: bool) -> Result<i64> {
    let sql = if for_update {
        "SELECT event_cursor FROM workers WHERE id = $1 FOR UPDATE"
    } else {
        "SELECT event_cursor FROM workers WHERE id = $1"
    };
    conn.query_opt(sql, &[&worker])
        .await?
        .map(|r| r.get(0))
        .ok_or_else(|| agensh_domain::worker::unknown_worker(worker))
}

/// Events for `worker` above `from`, oldest first, acknowledged or not.
async fn for_worker(conn: &mut Conn, worker: &str, from: i64, limit: usize) -> Result<Vec<Event>> {
    let rows = conn
        .query(
            &format!(
                "(SELECT {EVENT_COLUMNS} FROM events WHERE target IS NULL AND seq > $1 \
                   AND coalesce(source, '') != $2 AND coalesce(except_worker, '') != $2 ORDER BY seq LIMIT $3) \
                 UNION ALL \
                 (SELECT {EVENT_COLUMNS} FROM events WHERE target = $2 AND seq > $1 ORDER BY seq LIMIT $3) \
                 ORDER BY seq LIMIT $3"
            ),
            &[&from, &worker, &(limit as i64)],
        )
        .await?;
    Ok(rows.iter().map(row_to_event).collect())
}

async fn acked_above(conn: &mut Conn, worker: &str, from: i64) -> Result<HashSet<i64>> {
    let rows = conn
        .query(
            "SELECT seq FROM event_acks WHERE worker = $1 AND seq > $2",
            &[&worker, &from],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

pub async fn pending(
    conn: &mut Conn,
    worker: &str,
    after: i64,
    limit: usize,
) -> Result<Vec<Event>> {
    let c = cursor(conn, worker, false).await?;
    let from = c.max(after);
    let acked = acked_above(conn, worker, from).await?;
    let mut out = Vec::new();
    let mut start = from;
    loop {
        let page = for_worker(conn, worker, start, limit + acked.len()).await?;
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

/// The events with the sequence numbers `seqs` (those that exist), by number.
async fn events_named(conn: &mut Conn, seqs: &[i64]) -> Result<HashMap<i64, Event>> {
    let list: Vec<i64> = seqs.to_vec();
    let rows = conn
        .query(
            &format!("SELECT {EVENT_COLUMNS} FROM events WHERE seq = ANY($1)"),
            &[&list],
        )
        .await?;
    Ok(rows.iter().map(row_to_event).map(|e| (e.seq, e)).collect())
}

fn too_many_acks(n: usize) -> Error {
    Error::invalid(
        "too_many_acks",
        format!("{n} events in one ack; the limit is {ACK_LIMIT} — acknowledge in batches"),
    )
}

fn not_your_event(worker: &str, seq: i64) -> Error {
    Error::invalid(
        "not_your_event",
        format!("event {seq} is not in {worker}'s queue — acknowledge only events you received"),
    )
}

/// Acknowledges `seqs` for `worker` (whose row is locked for the transaction, so two
/// acknowledgements of one worker do not race).
pub async fn ack(conn: &mut Conn, worker: &str, seqs: &[i64]) -> Result<usize> {
    if seqs.len() > ACK_LIMIT {
        return Err(too_many_acks(seqs.len()));
    }
    let c = cursor(conn, worker, true).await?;
    let named = events_named(conn, seqs).await?;
    if let Some(&seq) = seqs
        .iter()
        .find(|&&s| s > c && !named.get(&s).is_some_and(|e| e.is_for(worker)))
    {
        return Err(not_your_event(worker, seq));
    }
    let mut fresh: Vec<i64> = seqs.iter().copied().filter(|s| *s > c).collect();
    fresh.sort_unstable();
    fresh.dedup();
    let n = conn
        .execute(
            "INSERT INTO event_acks(worker, seq) SELECT $1, unnest($2::bigint[]) ON CONFLICT DO NOTHING",
            &[&worker, &fresh],
        )
        .await?;
    advance_cursor(conn, worker, c).await?;
    Ok(n as usize)
}

/// Moves the cursor over the acknowledged prefix and forgets acks at or below it.
async fn advance_cursor(conn: &mut Conn, worker: &str, mut c: i64) -> Result<()> {
    let acked = acked_above(conn, worker, c).await?;
    if acked.is_empty() {
        return Ok(());
    }
    let start = c;
    'pages: loop {
        let page = for_worker(conn, worker, c, 512).await?;
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
            "UPDATE workers SET event_cursor = $2 WHERE id = $1",
            &[&worker, &c],
        )
        .await?;
        conn.execute(
            "DELETE FROM event_acks WHERE worker = $1 AND seq <= $2",
            &[&worker, &c],
        )
        .await?;
    }
    Ok(())
}

pub async fn queue_state(conn: &mut Conn, worker: &str) -> Result<QueueState> {
    let c = cursor(conn, worker, false).await?;
    let n: i64 = conn
        .query_one(
            "SELECT count(*) FROM event_acks WHERE worker = $1",
            &[&worker],
        )
        .await?
        .get(0);
    Ok(QueueState {
        worker: worker.to_string(),
        cursor: c,
        acked_above_cursor: n as usize,
    })
}
