//! Delivery receipts, as in `sqlite/receipts.rs` (`common/receipts.rs`): presentations and
//! acknowledgements recorded per worker and event, and what the hub reads of them.
//!
//! Every write of a worker's receipts holds its `workers` row (`FOR UPDATE`, as its
//! acknowledgements do) before it touches them, and writes them in event order, so two
//! transactions writing one worker's receipts wait for each other rather than deadlock.

use agensh_domain::event::Event;
use agensh_domain::message::Message;
use agensh_domain::receipt::{Receipt, Via};
use agensh_domain::Result;

use super::db::Conn;
use super::events;
use crate::common::events::{too_many_acks, ACK_LIMIT};
use crate::common::messages::dedup_key;
use crate::common::receipts::{
    for_worker_sql, has_receipts_sql, overdue_sql, receipt, RECEIPT_COLUMNS,
};
use crate::common::rows::{self, EVENT_COLUMNS, MESSAGE_COLUMNS};

/// The update of a receipt acknowledged again: the first acknowledgement stays.
const FIRST_ACK: &str = "ON CONFLICT (seq, worker) DO UPDATE \
     SET acknowledged_at = coalesce(receipts.acknowledged_at, EXCLUDED.acknowledged_at)";

/// Records that `worker` acknowledged its events `seqs` at `now`: each of its queue that
/// has receipts gets its acknowledgement (the first one stays), and a presentation via
/// prompt at the same time when none was recorded. The caller holds the worker's row.
async fn acknowledge(conn: &mut Conn, worker: &str, seqs: &[i64], now: i64) -> Result<()> {
    if seqs.is_empty() {
        return Ok(());
    }
    let sql = format!(
        "INSERT INTO receipts(seq, worker, presented_at, via, acknowledged_at) \
         SELECT e.seq, $1::text, $2::bigint, '{prompt}', $2::bigint FROM events e \
         WHERE e.seq = ANY($3) AND {mine} AND {has} ORDER BY e.seq {FIRST_ACK}",
        prompt = Via::Prompt.as_str(),
        mine = for_worker_sql("e", "$1::text"),
        has = has_receipts_sql("e"),
    );
    let list = seqs.to_vec();
    conn.execute(&sql, &[&worker, &now, &list]).await?;
    Ok(())
}

/// [`events::ack`] with the acknowledgements' receipts, in the same transaction.
pub async fn ack(conn: &mut Conn, worker: &str, seqs: &[i64], now: i64) -> Result<usize> {
    let n = events::ack(conn, worker, seqs).await?;
    acknowledge(conn, worker, seqs, now).await?;
    Ok(n)
}

/// [`events::ack_many`] with the receipts of every worker whose acks were applied, in one
/// statement (the workers' rows are held since the acks).
pub async fn ack_many(
    conn: &mut Conn,
    acks: &[(String, Vec<i64>)],
    now: i64,
) -> Result<Vec<Result<usize>>> {
    let out = events::ack_many(conn, acks).await?;
    let (mut who, mut what) = (Vec::new(), Vec::new());
    for ((worker, seqs), r) in acks.iter().zip(&out) {
        if r.is_ok() {
            for seq in seqs {
                who.push(worker.as_str());
                what.push(*seq);
            }
        }
    }
    if who.is_empty() {
        return Ok(out);
    }
    let sql = format!(
        "INSERT INTO receipts(seq, worker, presented_at, via, acknowledged_at) \
         SELECT e.seq, q.worker, $3::bigint, '{prompt}', $3::bigint \
         FROM (SELECT DISTINCT worker, seq FROM unnest($1::text[], $2::bigint[]) AS u(worker, seq)) q \
         JOIN events e ON e.seq = q.seq \
         WHERE {mine} AND {has} ORDER BY q.worker, e.seq {FIRST_ACK}",
        prompt = Via::Prompt.as_str(),
        mine = for_worker_sql("e", "q.worker"),
        has = has_receipts_sql("e"),
    );
    conn.execute(&sql, &[&who, &what, &now]).await?;
    Ok(out)
}

/// Records that `worker` was shown its events `seqs` via `via` at `now` (the first
/// presentation wins; events without receipts and not the worker's are left out); with
/// `dequeue`, its urgent ones also leave its queue, their receipts staying presented. How
/// many were newly presented.
pub async fn present(
    conn: &mut Conn,
    worker: &str,
    seqs: &[i64],
    via: Via,
    dequeue: bool,
    now: i64,
) -> Result<usize> {
    if seqs.len() > ACK_LIMIT {
        return Err(too_many_acks(seqs.len()));
    }
    // The worker's row first (and whether it exists), as its acknowledgements take it.
    events::cursor(conn, worker, true).await?;
    let list = seqs.to_vec();
    if dequeue && !list.is_empty() {
        let urgent: Vec<i64> = conn
            .query(
                "SELECT seq FROM events WHERE seq = ANY($1) AND priority = 'urgent' ORDER BY seq",
                &[&list],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        if !urgent.is_empty() {
            events::ack(conn, worker, &urgent).await?;
        }
    }
    if list.is_empty() {
        return Ok(0);
    }
    let sql = format!(
        "INSERT INTO receipts(seq, worker, presented_at, via) \
         SELECT e.seq, $1::text, $2::bigint, $3::text FROM events e \
         WHERE e.seq = ANY($4) AND {mine} AND {has} ORDER BY e.seq \
         ON CONFLICT (seq, worker) DO NOTHING",
        mine = for_worker_sql("e", "$1::text"),
        has = has_receipts_sql("e"),
    );
    let n = conn
        .execute(&sql, &[&worker, &now, &via.as_str(), &list])
        .await?;
    Ok(n as usize)
}

/// The receipts recorded for the events `seqs`, by event then worker.
pub async fn of_events(conn: &mut Conn, seqs: &[i64]) -> Result<Vec<Receipt>> {
    let list = seqs.to_vec();
    let rows = conn
        .query(
            &format!(
                "SELECT {RECEIPT_COLUMNS} FROM receipts r JOIN events e ON e.seq = r.seq \
                 WHERE r.seq = ANY($1) ORDER BY r.seq, r.worker"
            ),
            &[&list],
        )
        .await?;
    rows.iter().map(receipt).collect()
}

/// Message `seq` and the event that carried it.
pub async fn message_event(conn: &mut Conn, seq: i64) -> Result<Option<(Message, Option<Event>)>> {
    let row = conn
        .query_opt(
            &format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE seq = $1"),
            &[&seq],
        )
        .await?;
    let Some(row) = row else { return Ok(None) };
    let message = rows::message(&row)?;
    // The events' dedup index is on (coalesce(target, '*'), dedup_key): a channel post's
    // event is everyone's, a direct message's its worker's.
    let target = if message.is_direct() {
        message.to.clone()
    } else {
        "*".to_string()
    };
    let event = conn
        .query_opt(
            &format!(
                "SELECT {EVENT_COLUMNS} FROM events WHERE coalesce(target, '*') = $1 AND dedup_key = $2"
            ),
            &[&target, &dedup_key(seq)],
        )
        .await?
        .map(|r| rows::event_at(&r, 0))
        .transpose()?;
    Ok(Some((message, event)))
}

/// Urgent events for one worker, with receipts, stored in `[from, to)`, that their worker
/// has neither been shown nor acknowledged, oldest first (by `created_at`, then number), at
/// most `limit`.
pub async fn unseen(conn: &mut Conn, from: i64, to: i64, limit: usize) -> Result<Vec<Event>> {
    let sql = format!(
        "SELECT {EVENT_COLUMNS} FROM events e \
         WHERE e.target IS NOT NULL AND e.priority = 'urgent' \
           AND e.created_at >= $1 AND e.created_at < $2 AND {has} \
           AND NOT EXISTS (SELECT 1 FROM receipts r WHERE r.seq = e.seq AND r.worker = e.target) \
           AND NOT EXISTS (SELECT 1 FROM event_acks a WHERE a.worker = e.target AND a.seq = e.seq) \
           AND e.seq > (SELECT w.event_cursor FROM workers w WHERE w.id = e.target) \
         ORDER BY e.created_at, e.seq LIMIT $3",
        has = has_receipts_sql("e"),
    );
    let rows = conn.query(&sql, &[&from, &to, &(limit as i64)]).await?;
    rows.iter().map(|r| rows::event_at(r, 0)).collect()
}

/// `Store::overdue_events`.
pub async fn overdue(
    conn: &mut Conn,
    worker: &str,
    before: i64,
    limit: usize,
) -> Result<Vec<Event>> {
    let rows = conn
        .query(
            &overdue_sql(|n| format!("${n}")),
            &[&worker, &before, &(limit as i64)],
        )
        .await?;
    rows.iter().map(|r| rows::event_at(r, 0)).collect()
}

/// Receipts presented at or after `since`, newest first, at most `limit`.
pub async fn presented_since(conn: &mut Conn, since: i64, limit: usize) -> Result<Vec<Receipt>> {
    let rows = conn
        .query(
            &format!(
                "SELECT {RECEIPT_COLUMNS} FROM receipts r JOIN events e ON e.seq = r.seq \
                 WHERE r.presented_at >= $1 ORDER BY r.presented_at DESC LIMIT $2"
            ),
            &[&since, &(limit as i64)],
        )
        .await?;
    rows.iter().map(receipt).collect()
}
