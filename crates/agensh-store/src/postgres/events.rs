//! Per-worker durable event queues, as in `sqlite/events.rs`: one row per event (a
//! broadcast once), and per worker a cursor plus the acknowledgements above it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use agensh_domain::event::{Event, NewEvent};
use agensh_domain::Result;
use tokio_postgres::Row;

use super::db::Conn;
use crate::common::events::{check_acks, stored, too_many_acks, PendingScan, ACK_LIMIT};
use crate::common::rows::{self, EVENT_COLUMNS};
use crate::QueueState;

fn row_to_event(row: &Row) -> Result<Event> {
    rows::event_at(row, 0)
}

/// Every event above `after`, oldest first, at most `limit`.
pub async fn after(conn: &mut Conn, after: i64, limit: usize) -> Result<Vec<Event>> {
    let rows = conn
        .query(
            &format!("SELECT {EVENT_COLUMNS} FROM events WHERE seq > $1 ORDER BY seq LIMIT $2"),
            &[&after, &(limit as i64)],
        )
        .await?;
    rows.iter().map(row_to_event).collect()
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
    Ok(Some(stored(e, row.get(0), now)))
}

pub(super) async fn cursor(conn: &mut Conn, worker: &str, for_update: bool) -> Result<i64> {
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
    rows.iter().map(row_to_event).collect()
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
    let mut scan = PendingScan::new(from, &acked, limit);
    loop {
        let page = for_worker(conn, worker, scan.start, scan.page_size()).await?;
        if scan.take(page) {
            return Ok(scan.out);
        }
    }
}

/// [`pending`] for many workers, `(worker, after)` each, in one statement: per worker
/// (a lateral join) its events above its cursor and `after` that it has not
/// acknowledged, oldest first, at most `limit`. Answers in the order asked; an unknown
/// worker fails the call, as [`pending`] does. An event in several answers (a broadcast)
/// is made once and shared.
pub async fn pending_many(
    conn: &mut Conn,
    queries: &[(String, i64)],
    limit: usize,
) -> Result<Vec<Vec<Arc<Event>>>> {
    if queries.is_empty() {
        return Ok(Vec::new());
    }
    let workers: Vec<&str> = queries.iter().map(|q| q.0.as_str()).collect();
    let afters: Vec<i64> = queries.iter().map(|q| q.1).collect();
    let unacked =
        "NOT EXISTS (SELECT 1 FROM event_acks a WHERE a.worker = q.worker AND a.seq = e.seq)";
    let rows = conn
        .query(
            &format!(
                "SELECT q.ord, w.id IS NOT NULL, p.* \
                 FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS q(worker, after, ord) \
                 LEFT JOIN workers w ON w.id = q.worker \
                 LEFT JOIN LATERAL ( \
                   SELECT * FROM ( \
                     (SELECT {EVENT_COLUMNS} FROM events e WHERE target IS NULL \
                        AND seq > greatest(w.event_cursor, q.after) \
                        AND coalesce(source, '') != q.worker AND coalesce(except_worker, '') != q.worker \
                        AND {unacked} ORDER BY seq LIMIT $3) \
                     UNION ALL \
                     (SELECT {EVENT_COLUMNS} FROM events e WHERE target = q.worker \
                        AND seq > greatest(w.event_cursor, q.after) AND {unacked} ORDER BY seq LIMIT $3) \
                   ) mine ORDER BY seq LIMIT $3 \
                 ) p ON true \
                 ORDER BY q.ord, p.seq"
            ),
            &[&workers, &afters, &(limit as i64)],
        )
        .await?;
    let mut out: Vec<Vec<Arc<Event>>> = vec![Vec::new(); queries.len()];
    let mut made: HashMap<i64, Arc<Event>> = HashMap::new();
    for row in &rows {
        let i = row.get::<_, i64>(0) as usize - 1;
        if !row.get::<_, bool>(1) {
            return Err(agensh_domain::worker::unknown_worker(&queries[i].0));
        }
        if let Some(seq) = row.get::<_, Option<i64>>(2) {
            let e = match made.get(&seq) {
                Some(e) => e.clone(),
                None => {
                    let e = Arc::new(rows::event_at(row, 2)?);
                    made.insert(seq, e.clone());
                    e
                }
            };
            out[i].push(e);
        }
    }
    Ok(out)
}

/// [`ack`] for many workers in five statements in all, rather than several per worker:
/// their rows locked (in id order) with their cursors, the events named, their stored
/// acks, the sequence numbers each cursor could pass, and one statement that stores the
/// acks, moves the cursors and forgets the acks they passed. Each worker's acks are
/// applied all or nothing, and one worker's refusal leaves the others' in place. One
/// result per worker, in order; a worker named twice is served one entry after the other.
pub async fn ack_many(conn: &mut Conn, acks: &[(String, Vec<i64>)]) -> Result<Vec<Result<usize>>> {
    if acks.is_empty() {
        return Ok(Vec::new());
    }
    let mut seen = HashSet::new();
    if !acks.iter().all(|a| seen.insert(a.0.as_str())) {
        let mut out = Vec::with_capacity(acks.len());
        for (worker, seqs) in acks {
            out.push(ack_alone(conn, worker, seqs).await?);
        }
        return Ok(out);
    }
    let ids: Vec<&str> = acks.iter().map(|a| a.0.as_str()).collect();
    let cursors: HashMap<String, i64> = conn
        .query(
            "SELECT id, event_cursor FROM workers WHERE id = ANY($1) ORDER BY id FOR UPDATE",
            &[&ids],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let all_named: Vec<i64> = acks
        .iter()
        .filter(|a| a.1.len() <= ACK_LIMIT)
        .flat_map(|a| a.1.iter().copied())
        .collect();
    let named = events_named(conn, &all_named).await?;
    let mut stored: HashMap<String, HashSet<i64>> = HashMap::new();
    for r in conn
        .query(
            "SELECT worker, seq FROM event_acks WHERE worker = ANY($1)",
            &[&ids],
        )
        .await?
    {
        stored.entry(r.get(0)).or_default().insert(r.get(1));
    }
    // Per worker: its cursor, the acks it will hold above it (stored and fresh), and how
    // many new ones; or its refusal.
    let mut plans: Vec<Result<(i64, HashSet<i64>, usize)>> = Vec::with_capacity(acks.len());
    for (worker, seqs) in acks {
        let plan = match cursors.get(worker) {
            _ if seqs.len() > ACK_LIMIT => Err(too_many_acks(seqs.len())),
            None => Err(agensh_domain::worker::unknown_worker(worker)),
            Some(&c) => check_acks(worker, seqs, c, &named).map(|()| {
                let mut acked = stored.remove(worker).unwrap_or_default();
                acked.retain(|s| *s > c);
                let before = acked.len();
                acked.extend(seqs.iter().copied().filter(|s| *s > c));
                let fresh = acked.len() - before;
                (c, acked, fresh)
            }),
        };
        plans.push(plan);
    }
    // The first (acks + 1) sequence numbers above each cursor: as far as it can move.
    let (mut who, mut from, mut take) = (Vec::new(), Vec::new(), Vec::new());
    for ((worker, _), plan) in acks.iter().zip(&plans) {
        if let Ok((c, acked, _)) = plan {
            if !acked.is_empty() {
                who.push(worker.as_str());
                from.push(*c);
                take.push(acked.len() as i64 + 1);
            }
        }
    }
    let mut passable: HashMap<String, Vec<i64>> = HashMap::new();
    if !who.is_empty() {
        for r in conn
            .query(
                "SELECT q.worker, s.seq \
                 FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS q(worker, c, n) \
                 CROSS JOIN LATERAL ( \
                   SELECT seq FROM ( \
                     (SELECT seq FROM events WHERE target IS NULL AND seq > q.c \
                        AND coalesce(source, '') != q.worker AND coalesce(except_worker, '') != q.worker \
                        ORDER BY seq LIMIT q.n) \
                     UNION ALL \
                     (SELECT seq FROM events WHERE target = q.worker AND seq > q.c ORDER BY seq LIMIT q.n) \
                   ) mine ORDER BY seq LIMIT q.n \
                 ) s \
                 ORDER BY q.worker, s.seq",
                &[&who, &from, &take],
            )
            .await?
        {
            passable.entry(r.get(0)).or_default().push(r.get(1));
        }
    }
    let (mut ack_worker, mut ack_seq) = (Vec::new(), Vec::new());
    let (mut moved_worker, mut moved_to) = (Vec::new(), Vec::new());
    let mut out = Vec::with_capacity(acks.len());
    for ((worker, _), plan) in acks.iter().zip(plans) {
        let (c, acked, fresh) = match plan {
            Ok(p) => p,
            Err(e) => {
                out.push(Err(e));
                continue;
            }
        };
        let mut moved = c;
        for seq in passable.get(worker).into_iter().flatten() {
            if !acked.contains(seq) {
                break;
            }
            moved = *seq;
        }
        for seq in acked.into_iter().filter(|s| *s > moved) {
            ack_worker.push(worker.as_str());
            ack_seq.push(seq);
        }
        if moved > c {
            moved_worker.push(worker.as_str());
            moved_to.push(moved);
        }
        out.push(Ok(fresh));
    }
    if ack_worker.is_empty() && moved_worker.is_empty() {
        return Ok(out);
    }
    conn.execute(
        "WITH stored AS ( \
           INSERT INTO event_acks(worker, seq) SELECT * FROM unnest($1::text[], $2::bigint[]) \
           ON CONFLICT DO NOTHING), \
         moved AS ( \
           UPDATE workers SET event_cursor = m.c FROM unnest($3::text[], $4::bigint[]) AS m(id, c) \
           WHERE workers.id = m.id) \
         DELETE FROM event_acks a USING unnest($3::text[], $4::bigint[]) AS m(id, c) \
         WHERE a.worker = m.id AND a.seq <= m.c",
        &[&ack_worker, &ack_seq, &moved_worker, &moved_to],
    )
    .await?;
    Ok(out)
}

/// [`ack`] in a savepoint of its own: its refusal (the inner error) undoes only its own
/// writes.
async fn ack_alone(conn: &mut Conn, worker: &str, seqs: &[i64]) -> Result<Result<usize>> {
    conn.batch("SAVEPOINT ack_one").await?;
    let r = ack(conn, worker, seqs).await;
    let end = if r.is_ok() {
        "RELEASE SAVEPOINT ack_one"
    } else {
        "ROLLBACK TO SAVEPOINT ack_one; RELEASE SAVEPOINT ack_one"
    };
    conn.batch(end).await?;
    Ok(r)
}

/// The events with the sequence numbers `seqs` (those that exist), by number.
async fn events_named(conn: &mut Conn, seqs: &[i64]) -> Result<HashMap<i64, Event>> {
    let list: Vec<i64> = seqs.to_vec();
    // Whose an event is needs no payload: an ack names hundreds of events at times.
    let rows = conn
        .query(
            "SELECT seq, kind, priority, 'null', dedup_key, source, target, except_worker, created_at \
             FROM events WHERE seq = ANY($1)",
            &[&list],
        )
        .await?;
    rows.iter()
        .map(|r| row_to_event(r).map(|e| (e.seq, e)))
        .collect()
}

/// Acknowledges `seqs` for `worker` (whose row is locked for the transaction, so two
/// acknowledgements of one worker do not race).
pub async fn ack(conn: &mut Conn, worker: &str, seqs: &[i64]) -> Result<usize> {
    if seqs.len() > ACK_LIMIT {
        return Err(too_many_acks(seqs.len()));
    }
    let c = cursor(conn, worker, true).await?;
    check_acks(worker, seqs, c, &events_named(conn, seqs).await?)?;
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
