//! Delivery receipts (`agensh_domain::receipt`): the SQL both engines run to tell which
//! events have receipts and whose queue an event is in, made from the domain's rule so the
//! rule is written once, and the refusal of a presentation named by something else than a
//! [`Via`].
//!
//! A receipt row exists once its worker was shown the event (`presented_at`, `via`); an
//! acknowledgement without a presentation recorded before counts as a presentation `via`
//! prompt at the same time. The first presentation and the first acknowledgement win.

use agensh_domain::event::Priority;
use agensh_domain::receipt::{Receipt, Via, ALWAYS, NEVER, NEVER_INTERRUPT};

use crate::common::rows::EVENT_COLUMNS;

/// `'a', 'b'`: the kinds as SQL string literals (kinds are plain dotted words).
fn literals(kinds: &[&str]) -> String {
    kinds
        .iter()
        .map(|k| format!("'{}'", k.replace('\'', "''")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The SQL condition on the `kind` and `priority` columns of `events` (as `{e}.kind`) that
/// holds exactly when [`has_receipts`] does; valid in SQLite and PostgreSQL.
pub fn has_receipts_sql(e: &str) -> String {
    format!(
        "(({e}.kind IN ({always}) OR {e}.priority = '{urgent}') AND {e}.kind NOT IN ({never}))",
        always = literals(&ALWAYS),
        never = literals(&NEVER),
        urgent = Priority::Urgent.as_str(),
    )
}

/// The SQL condition on `{e}.kind` and `{e}.priority` that holds exactly when
/// [`agensh_domain::receipt::interrupts`] does; valid in SQLite and PostgreSQL.
pub fn interrupts_sql(e: &str) -> String {
    format!(
        "({e}.priority = '{urgent}' AND {has} AND {e}.kind NOT IN ({never}))",
        urgent = Priority::Urgent.as_str(),
        has = has_receipts_sql(e),
        never = literals(&NEVER_INTERRUPT),
    )
}

/// The query of `Store::overdue_events`, in both engines: the events addressed to worker
/// `w` (not broadcasts: reading every broadcast above a busy worker's cursor, a board
/// record each, cost the hub most of a core with 1,024 workers) above its cursor, not
/// acknowledged, that interrupt a turn, stored before `before` and not presented to it,
/// oldest first, at most `limit`. `param(n)` writes parameter `n` in the engine's syntax;
/// the parameters are (1) the worker, (2) `before`, (3) `limit`.
pub fn overdue_sql(param: fn(usize) -> String) -> String {
    let (w, before, limit) = (param(1), param(2), param(3));
    format!(
        "SELECT {EVENT_COLUMNS} FROM events e \
         WHERE e.target = {w} AND e.seq > (SELECT c.event_cursor FROM workers c WHERE c.id = {w}) \
           AND {interrupts} AND e.created_at < {before} \
           AND NOT EXISTS (SELECT 1 FROM receipts r WHERE r.seq = e.seq AND r.worker = {w}) \
           AND NOT EXISTS (SELECT 1 FROM event_acks a WHERE a.worker = {w} AND a.seq = e.seq) \
         ORDER BY e.seq LIMIT {limit}",
        interrupts = interrupts_sql("e"),
    )
}

/// The SQL condition that event `{e}` is in the queue of the worker `{w}` (a parameter or a
/// column): `Event::is_for`. Valid in SQLite and PostgreSQL.
pub fn for_worker_sql(e: &str, w: &str) -> String {
    format!(
        "({e}.target = {w} OR ({e}.target IS NULL AND coalesce({e}.source, '') != {w} \
         AND coalesce({e}.except_worker, '') != {w}))"
    )
}

/// The columns [`receipt`] reads, from `receipts r` joined to `events e`.
pub const RECEIPT_COLUMNS: &str =
    "r.worker, r.seq, e.kind, e.created_at, r.presented_at, r.via, r.acknowledged_at";

/// A receipt row ([`RECEIPT_COLUMNS`]) as the domain has it; an unknown `via` (a newer
/// agensh wrote it) reads as a prompt.
pub fn receipt<R: crate::common::rows::AnyRow + ?Sized>(row: &R) -> Result<Receipt, R::Error> {
    let worker: String = row.col(0)?;
    let kind: String = row.col(2)?;
    let presented_at: i64 = row.col(4)?;
    let via: String = row.col(5)?;
    Ok(Receipt::recorded(
        Receipt::stored(&worker, row.col(1)?, &kind, row.col(3)?),
        Some((presented_at, Via::parse(&via).unwrap_or(Via::Prompt))),
        row.col(6)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use agensh_domain::event::kinds;
    use agensh_domain::receipt::{has_receipts, interrupts};

    /// The SQL conditions hold for exactly the events the domain's rules give receipts
    /// and let interrupt a turn.
    #[test]
    fn the_sql_condition_is_the_domains_rule() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE events (kind TEXT, priority TEXT)")
            .unwrap();
        let all = [
            kinds::BOARD_RECORD,
            kinds::CHANNEL_POST,
            kinds::DIRECT_MESSAGE,
            kinds::MESSAGE_UNSEEN,
            kinds::NOTICE,
            kinds::CLAIM_TAKEN_OVER,
            kinds::PR_OPENED,
            kinds::PR_REVIEW,
            kinds::PR_MERGE_FAILED,
            kinds::MAIN_UPDATED,
            kinds::ISSUE_ASSIGNED,
            kinds::WORKER_STOP,
            "some.kind.of.tomorrow",
        ];
        for kind in all {
            for p in [Priority::Urgent, Priority::Normal] {
                conn.execute("DELETE FROM events", []).unwrap();
                conn.execute(
                    "INSERT INTO events VALUES (?1, ?2)",
                    rusqlite::params![kind, p.as_str()],
                )
                .unwrap();
                let n: i64 = conn
                    .query_row(
                        &format!(
                            "SELECT count(*) FROM events e WHERE {}",
                            has_receipts_sql("e")
                        ),
                        [],
                        |r| r.get(0),
                    )
                    .unwrap();
                assert_eq!(n == 1, has_receipts(kind, p), "{kind} {}", p.as_str());
                let n: i64 = conn
                    .query_row(
                        &format!(
                            "SELECT count(*) FROM events e WHERE {}",
                            interrupts_sql("e")
                        ),
                        [],
                        |r| r.get(0),
                    )
                    .unwrap();
                assert_eq!(n == 1, interrupts(kind, p), "{kind} {}", p.as_str());
            }
        }
    }
}
