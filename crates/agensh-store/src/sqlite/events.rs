//! Per-worker durable event queues.
//!
//! One row per event; a broadcast (target NULL) is stored once however many workers there
//! are. Each worker has a cursor (every event at or below it is acknowledged) and a set of
//! acknowledgements above the cursor, so urgent events can be acknowledged before older
//! normal ones. The cursor moves forward over the acknowledged prefix.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use agensh_domain::event::{Event, NewEvent};
use agensh_domain::Result;
use rusqlite::{params, Connection, OptionalExtension, Row};

use super::conn::sql_err;
use crate::common::events::{
    check_acks, not_your_event, stored, too_many_acks, PendingScan, Queued, ACK_LIMIT,
};
use crate::common::rows::{self, EVENT_COLUMNS};
use crate::QueueState;

fn row_to_event(row: &Row<'_>) -> rusqlite::Result<Event> {
    rows::event_at(row, 0)
}

/// Every event above `after`, oldest first, at most `limit`.
pub fn after(conn: &Connection, after: i64, limit: usize) -> Result<Vec<Event>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2"
        ))
        .map_err(sql_err)?;
    let rows = stmt
        .query_map(params![after, limit as i64], row_to_event)
        .map_err(sql_err)?;
    rows.collect::<rusqlite::Result<Vec<_>>>().map_err(sql_err)
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
    Ok(Some(stored(e, conn.last_insert_rowid(), now)))
}

pub(super) fn cursor(conn: &Connection, worker: &str) -> Result<i64> {
    conn.query_row(
        "SELECT event_cursor FROM workers WHERE id = ?1",
        [worker],
        |r| r.get(0),
    )
    .optional()
    .map_err(sql_err)?
    .ok_or_else(|| agensh_domain::worker::unknown_worker(worker))
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
    // Skip acknowledged events page by page until `limit` unacknowledged ones are found.
    let mut scan = PendingScan::new(from, &acked, limit);
    loop {
        let page = for_worker(conn, worker, scan.start, scan.page_size())?;
        if scan.take(page) {
            return Ok(scan.out);
        }
    }
}

/// Rows each batched read of events takes before it stops; the workers whose events it
/// may have cut short are then served one at a time.
const MANY_ROWS: usize = 10_000;

/// The ids of `workers` as a JSON array, for `json_each` in the batched queries.
fn ids_json<'a>(workers: impl Iterator<Item = &'a str>) -> String {
    serde_json::to_string(&workers.collect::<Vec<_>>()).expect("json serializes")
}

/// The event cursors of the workers named in `ids` (unknown ones are left out).
fn cursors_of(conn: &Connection, ids: &str) -> Result<HashMap<String, i64>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, event_cursor FROM workers WHERE id IN (SELECT value FROM json_each(?1))",
        )
        .map_err(sql_err)?;
    let rows = stmt
        .query_map([ids], |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(sql_err)?;
    rows.collect::<rusqlite::Result<_>>().map_err(sql_err)
}

/// The acks above `above` of the workers named in `ids`.
fn acks_of(conn: &Connection, ids: &str, above: i64) -> Result<HashMap<String, HashSet<i64>>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT worker, seq FROM event_acks WHERE worker IN (SELECT value FROM json_each(?1)) AND seq > ?2",
        )
        .map_err(sql_err)?;
    let rows = stmt
        .query_map(params![ids, above], |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(sql_err)?;
    let mut acked: HashMap<String, HashSet<i64>> = HashMap::new();
    for r in rows {
        let (w, seq): (String, i64) = r.map_err(sql_err)?;
        acked.entry(w).or_default().insert(seq);
    }
    Ok(acked)
}

/// The events above one sequence number for many workers, read in two capped queries: the
/// broadcasts (stored once, filtered per worker) and the events targeted at them.
struct EventsAbove {
    broadcasts: Vec<Arc<Event>>,
    targeted: HashMap<String, Vec<Arc<Event>>>,
    /// Every event up to this sequence number is here; past it the reads were cut.
    whole_up_to: i64,
}

impl EventsAbove {
    fn read(conn: &Connection, ids: &str, above: i64) -> Result<Self> {
        let (broadcasts, broadcasts_whole) = capped(
            conn,
            &format!("SELECT {EVENT_COLUMNS} FROM events WHERE target IS NULL AND seq > ?1 ORDER BY seq LIMIT ?2"),
            params![above, MANY_ROWS as i64],
        )?;
        let (targeted, targeted_whole) = capped(
            conn,
            &format!("SELECT {EVENT_COLUMNS} FROM events WHERE target IN (SELECT value FROM json_each(?1)) AND seq > ?2 ORDER BY seq LIMIT ?3"),
            params![ids, above, MANY_ROWS as i64],
        )?;
        let mut by_target: HashMap<String, Vec<Arc<Event>>> = HashMap::new();
        for e in targeted {
            by_target
                .entry(e.target.clone().unwrap_or_default())
                .or_default()
                .push(e);
        }
        Ok(EventsAbove {
            broadcasts,
            targeted: by_target,
            whole_up_to: broadcasts_whole.min(targeted_whole),
        })
    }

    /// Whether the reads hold every event above their start.
    fn whole(&self) -> bool {
        self.whole_up_to == i64::MAX
    }

    /// `worker`'s events above `from` that the reads hold whole, oldest first.
    fn of(&self, worker: &str, from: i64) -> Vec<&Arc<Event>> {
        let mine = self.targeted.get(worker).map_or(&[][..], Vec::as_slice);
        let mut events: Vec<&Arc<Event>> = self
            .broadcasts
            .iter()
            .filter(|e| e.is_for(worker))
            .chain(mine)
            .filter(|e| e.seq > from && e.seq <= self.whole_up_to)
            .collect();
        events.sort_by_key(|e| e.seq);
        events
    }
}

/// The events of a query capped at [`MANY_ROWS`], and the sequence number up to which
/// they are whole (all of them when the cap did not cut them).
fn capped(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<(Vec<Arc<Event>>, i64)> {
    let mut stmt = conn.prepare_cached(sql).map_err(sql_err)?;
    let events = stmt
        .query_map(params, |r| row_to_event(r).map(Arc::new))
        .map_err(sql_err)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(sql_err)?;
    let whole_up_to = match events.last() {
        Some(last) if events.len() >= MANY_ROWS => last.seq,
        _ => i64::MAX,
    };
    Ok((events, whole_up_to))
}

/// [`pending`] for many workers — `(worker, after)` each — in a few queries in all rather
/// than four per worker: their cursors, their acks, and the events above the lowest
/// cursor ([`EventsAbove`]). A worker whose events those capped reads may not hold whole is
/// read on its own. Answers in the order asked.
pub fn pending_many(
    conn: &Connection,
    queries: &[(String, i64)],
    limit: usize,
) -> Result<Vec<Vec<Arc<Event>>>> {
    if queries.is_empty() {
        return Ok(Vec::new());
    }
    let ids = ids_json(queries.iter().map(|q| q.0.as_str()));
    let cursors = cursors_of(conn, &ids)?;
    let mut from = Vec::with_capacity(queries.len());
    for (w, after) in queries {
        let c = *cursors
            .get(w)
            .ok_or_else(|| agensh_domain::worker::unknown_worker(w))?;
        from.push(c.max(*after));
    }
    let lowest = *from.iter().min().expect("not empty");
    let acked = acks_of(conn, &ids, lowest)?;
    let above = EventsAbove::read(conn, &ids, lowest)?;
    let none = HashSet::new();
    let mut out = Vec::with_capacity(queries.len());
    for ((w, after), &from) in queries.iter().zip(&from) {
        let acked = acked.get(w).unwrap_or(&none);
        let mut events: Vec<Arc<Event>> = above
            .of(w, from)
            .into_iter()
            .filter(|e| !acked.contains(&e.seq))
            .take(limit)
            .cloned()
            .collect();
        if events.len() < limit && !above.whole() {
            // The capped reads may have cut this worker's events short.
            events = pending(conn, w, *after, limit)?
                .into_iter()
                .map(Arc::new)
                .collect();
        }
        out.push(events);
    }
    Ok(out)
}

/// [`ack`] for many workers, in a few queries in all rather than several per worker and
/// acknowledged event: their cursors, the events named, their acks and events above the
/// lowest cursor; then per worker the cursor moved over its acknowledged prefix and the
/// acks above it stored. Each worker's acks are applied all or nothing, and one worker's
/// refusal leaves the others' in place. One result per worker, in order.
pub fn ack_many(conn: &Connection, acks: &[(String, Vec<i64>)]) -> Result<Vec<Result<usize>>> {
    if acks.is_empty() {
        return Ok(Vec::new());
    }
    let mut seen = HashSet::new();
    if !acks.iter().all(|a| seen.insert(a.0.as_str())) {
        // A worker named twice: one entry after the other, each on the state the last left.
        return acks
            .iter()
            .map(|(w, seqs)| ack_alone(conn, w, seqs))
            .collect();
    }
    let ids = ids_json(acks.iter().map(|a| a.0.as_str()));
    let cursors = cursors_of(conn, &ids)?;
    let lowest = cursors.values().copied().min().unwrap_or(0);
    let named = owners_named(conn, acks.iter().flat_map(|a| &a.1))?;
    let stored = acks_of(conn, &ids, lowest)?;
    let above = EventsAbove::read(conn, &ids, lowest)?;
    let none = HashSet::new();
    let mut out = Vec::with_capacity(acks.len());
    for (worker, seqs) in acks {
        let Some(&c) = cursors.get(worker) else {
            out.push(Err(agensh_domain::worker::unknown_worker(worker)));
            continue;
        };
        if let Err(e) = check_acks(worker, seqs, c, &named) {
            out.push(Err(e));
            continue;
        }
        let stored = stored.get(worker).unwrap_or(&none);
        let fresh: HashSet<i64> = seqs
            .iter()
            .copied()
            .filter(|s| *s > c && !stored.contains(s))
            .collect();
        // The cursor moves over the acknowledged prefix of the worker's events.
        let mut moved = c;
        let mut prefix_may_go_on = true;
        for e in above.of(worker, c) {
            if !stored.contains(&e.seq) && !fresh.contains(&e.seq) {
                prefix_may_go_on = false;
                break;
            }
            moved = e.seq;
        }
        let mut insert = conn
            .prepare_cached("INSERT OR IGNORE INTO event_acks(worker, seq) VALUES (?1, ?2)")
            .map_err(sql_err)?;
        for &seq in fresh.iter().filter(|s| **s > moved) {
            insert.execute(params![worker, seq]).map_err(sql_err)?;
        }
        move_cursor(conn, worker, c, moved, stored.iter().any(|s| *s <= moved))?;
        if prefix_may_go_on && !above.whole() {
            // The capped reads ended inside the acknowledged prefix: follow it whole.
            advance_cursor(conn, worker, moved)?;
        }
        out.push(Ok(fresh.len()));
    }
    Ok(out)
}

/// [`ack`] in a savepoint of its own: its refusal (the inner error) undoes only its own
/// writes.
fn ack_alone(conn: &Connection, worker: &str, seqs: &[i64]) -> Result<Result<usize>> {
    conn.execute_batch("SAVEPOINT ack_one").map_err(sql_err)?;
    let r = ack(conn, worker, seqs);
    let end = if r.is_ok() {
        "RELEASE ack_one"
    } else {
        "ROLLBACK TO ack_one; RELEASE ack_one"
    };
    conn.execute_batch(end).map_err(sql_err)?;
    Ok(r)
}

/// Who each of the events numbered `seqs` is for (those that exist), by number.
fn owners_named<'a>(
    conn: &Connection,
    seqs: impl Iterator<Item = &'a i64>,
) -> Result<HashMap<i64, Owner>> {
    let list = serde_json::to_string(&seqs.collect::<Vec<_>>()).expect("json serializes");
    // Whose an event is needs neither its payload nor its other columns: an ack names
    // hundreds of events at times, in the one writer thread every write waits for.
    let mut stmt = conn
        .prepare_cached(
            "SELECT seq, target, source, except_worker \
             FROM events WHERE seq IN (SELECT value FROM json_each(?1))",
        )
        .map_err(sql_err)?;
    let rows = stmt
        .query_map([list], |r| {
            Ok((
                r.get(0)?,
                Owner {
                    target: r.get(1)?,
                    source: r.get(2)?,
                    except: r.get(3)?,
                },
            ))
        })
        .map_err(sql_err)?;
    rows.collect::<rusqlite::Result<_>>().map_err(sql_err)
}

/// The columns that say whose queue an event is in ([`Event::is_for`]).
struct Owner {
    target: Option<String>,
    source: Option<String>,
    except: Option<String>,
}

impl Queued for Owner {
    fn is_for(&self, worker: &str) -> bool {
        match &self.target {
            Some(t) => t == worker,
            None => {
                self.source.as_deref() != Some(worker) && self.except.as_deref() != Some(worker)
            }
        }
    }
}

/// Acknowledges `seqs` for `worker`: every number above its cursor must be an event in its
/// queue (else nothing changes); the cursor moves over the acknowledged prefix of its
/// events and only acks above it are stored. Returns how many were newly acknowledged.
pub fn ack(conn: &Connection, worker: &str, seqs: &[i64]) -> Result<usize> {
    if seqs.len() > ACK_LIMIT {
        return Err(too_many_acks(seqs.len()));
    }
    let c = cursor(conn, worker)?;
    let stored = acked_above(conn, worker, c)?;
    let fresh: HashSet<i64> = seqs
        .iter()
        .copied()
        .filter(|s| *s > c && !stored.contains(s))
        .collect();
    if fresh.is_empty() {
        // Nothing new above the cursor: those above it were checked when first stored.
        return Ok(0);
    }
    let acked: HashSet<i64> = stored.union(&fresh).copied().collect();
    // The worker's own events above the cursor, as many as the acks could pass and one
    // more: where the cursor lands, and — in the usual ack of the oldest events — the
    // proof that every acknowledged number is the worker's, from sequence numbers alone.
    let theirs = seqs_for_worker(conn, worker, c, acked.len() + 1)?;
    let unseen: Vec<i64> = fresh
        .iter()
        .copied()
        .filter(|s| theirs.binary_search(s).is_err())
        .collect();
    if !unseen.is_empty() {
        let named = owners_named(conn, unseen.iter())?;
        if let Some(&seq) = seqs
            .iter()
            .find(|s| unseen.contains(s) && !named.get(*s).is_some_and(|o| o.is_for(worker)))
        {
            return Err(not_your_event(worker, seq));
        }
    }
    let moved = prefix_in(&theirs, c, &acked);
    let mut insert = conn
        .prepare_cached("INSERT OR IGNORE INTO event_acks(worker, seq) VALUES (?1, ?2)")
        .map_err(sql_err)?;
    for &seq in fresh.iter().filter(|s| **s > moved) {
        insert.execute(params![worker, seq]).map_err(sql_err)?;
    }
    drop(insert);
    move_cursor(conn, worker, c, moved, stored.iter().any(|s| *s <= moved))?;
    Ok(fresh.len())
}

/// The last of `theirs` (a worker's events above the cursor `c`, oldest first) that, with
/// every one before it, is in `acked`; `c` itself when the first is not.
fn prefix_in(theirs: &[i64], c: i64, acked: &HashSet<i64>) -> i64 {
    theirs
        .iter()
        .take_while(|s| acked.contains(s))
        .last()
        .copied()
        .unwrap_or(c)
}

/// The last of `worker`'s events above the cursor `c` that, with every one before it, is
/// acknowledged (`c` itself when the first is not); `acked` holds every acknowledged event
/// above `c`. The cursor can pass at most those, so it reads that many sequence numbers and
/// one more — never the events themselves.
fn prefix_end(conn: &Connection, worker: &str, c: i64, acked: &HashSet<i64>) -> Result<i64> {
    let theirs = seqs_for_worker(conn, worker, c, acked.len() + 1)?;
    Ok(prefix_in(&theirs, c, acked))
}

/// Sets `worker`'s cursor from `c` to `moved` and, when `forget` (some stored acks are at
/// or below it), deletes those acks.
fn move_cursor(conn: &Connection, worker: &str, c: i64, moved: i64, forget: bool) -> Result<()> {
    if moved > c {
        conn.prepare_cached("UPDATE workers SET event_cursor = ?2 WHERE id = ?1")
            .and_then(|mut s| s.execute(params![worker, moved]))
            .map_err(sql_err)?;
        if forget {
            conn.prepare_cached("DELETE FROM event_acks WHERE worker = ?1 AND seq <= ?2")
                .and_then(|mut s| s.execute(params![worker, moved]))
                .map_err(sql_err)?;
        }
    }
    Ok(())
}

/// Moves the cursor over the acknowledged prefix and forgets acks at or below it.
fn advance_cursor(conn: &Connection, worker: &str, c: i64) -> Result<()> {
    let acked = acked_above(conn, worker, c)?;
    if acked.is_empty() {
        return Ok(());
    }
    let moved = prefix_end(conn, worker, c, &acked)?;
    move_cursor(conn, worker, c, moved, true)
}

/// The sequence numbers of `worker`'s events above `from`, oldest first, at most `limit`:
/// [`for_worker`] without reading the events themselves.
fn seqs_for_worker(conn: &Connection, worker: &str, from: i64, limit: usize) -> Result<Vec<i64>> {
    let mut out = Vec::new();
    for sql in [
        "SELECT seq FROM events WHERE target IS NULL AND seq > ?1 AND ifnull(source, '') != ?2 AND ifnull(except_worker, '') != ?2 ORDER BY seq LIMIT ?3",
        "SELECT seq FROM events WHERE target = ?2 AND seq > ?1 ORDER BY seq LIMIT ?3",
    ] {
        let mut stmt = conn.prepare_cached(sql).map_err(sql_err)?;
        let rows = stmt
            .query_map(params![from, worker, limit as i64], |r| r.get(0))
            .map_err(sql_err)?;
        for r in rows {
            out.push(r.map_err(sql_err)?);
        }
    }
    out.sort_unstable();
    out.truncate(limit);
    Ok(out)
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

#[cfg(test)]
mod tests {
    use super::*;
    use agensh_domain::event::{NewEvent, Priority};

    fn db(workers: usize) -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(include_str!("schema.sql")).unwrap();
        super::super::workers::add(&conn, workers, 1).unwrap();
        conn
    }

    fn event(target: Option<&str>, source: Option<&str>, except: Option<&str>) -> NewEvent {
        NewEvent {
            kind: "notice".into(),
            priority: Priority::Normal,
            payload: serde_json::json!({}),
            dedup_key: None,
            source: source.map(str::to_string),
            target: target.map(str::to_string),
            except: except.map(str::to_string),
        }
    }

    fn add(conn: &Connection, e: NewEvent) -> i64 {
        insert(conn, &e, 2).unwrap().unwrap().seq
    }

    /// The batched read answers exactly what one read per worker answers.
    fn same_as_one_by_one(conn: &Connection, queries: &[(String, i64)], limit: usize) {
        let many = pending_many(conn, queries, limit).unwrap();
        assert_eq!(many.len(), queries.len());
        for ((w, after), got) in queries.iter().zip(many) {
            let one = pending(conn, w, *after, limit).unwrap();
            let got: Vec<i64> = got.iter().map(|e| e.seq).collect();
            let one: Vec<i64> = one.iter().map(|e| e.seq).collect();
            assert_eq!(got, one, "{w} after {after}, limit {limit}");
        }
    }

    #[test]
    fn everything_after_a_seq_is_read_in_order_whoever_it_is_for() {
        let conn = db(2);
        let seqs: Vec<i64> = [
            event(None, None, None),
            event(Some("w01"), None, None),
            event(None, Some("w01"), Some("w02")),
            event(Some("w02"), None, None),
        ]
        .into_iter()
        .map(|e| add(&conn, e))
        .collect();
        let read = |a: i64, l: usize| -> Vec<i64> {
            after(&conn, a, l).unwrap().iter().map(|e| e.seq).collect()
        };
        assert_eq!(read(0, 100), seqs);
        assert_eq!(read(seqs[1], 100), seqs[2..].to_vec());
        assert_eq!(read(0, 2), seqs[..2].to_vec());
        assert!(read(seqs[3], 100).is_empty());
        // Acknowledging changes what a worker is owed, never the whole history.
        ack(&conn, "w01", &[seqs[0], seqs[1]]).unwrap();
        assert_eq!(read(0, 100), seqs);
    }

    #[test]
    fn many_workers_read_at_once_get_what_each_would_alone() {
        let conn = db(4);
        let mut seqs = Vec::new();
        for i in 0..30 {
            let e = match i % 6 {
                0 => event(None, None, None),
                1 => event(None, Some("w01"), None),
                2 => event(None, Some("w02"), Some("w03")),
                3 => event(Some("w02"), Some("w01"), None),
                4 => event(Some("w04"), None, None),
                _ => event(Some("w01"), None, None),
            };
            seqs.push(add(&conn, e));
        }
        // Out-of-order acks, and a cursor moved for one worker.
        ack(&conn, "w02", &[seqs[3], seqs[9], seqs[12]]).unwrap();
        ack(&conn, "w04", &[seqs[0], seqs[4]]).unwrap();
        let all = |after: i64| -> Vec<(String, i64)> {
            ["w01", "w02", "w03", "w04"]
                .iter()
                .map(|w| (w.to_string(), after))
                .collect()
        };
        for limit in [1, 3, 7, 1000] {
            for after in [0, seqs[5], seqs[20], seqs[29]] {
                same_as_one_by_one(&conn, &all(after), limit);
            }
        }
        let mixed = vec![
            ("w03".to_string(), seqs[10]),
            ("w01".to_string(), 0),
            ("w04".to_string(), seqs[2]),
        ];
        same_as_one_by_one(&conn, &mixed, 5);
    }

    #[test]
    fn a_worker_far_behind_is_read_whole_past_the_batched_reads_cap() {
        let conn = db(3);
        // More broadcasts than one batched read takes, none of them for w03, then one
        // event that is: the capped read cannot see it, so w03 is read on its own.
        conn.execute_batch("BEGIN").unwrap();
        for _ in 0..MANY_ROWS + 50 {
            add(&conn, event(None, Some("w03"), None));
        }
        let last = add(&conn, event(Some("w03"), None, None));
        conn.execute_batch("COMMIT").unwrap();
        let queries = vec![("w01".to_string(), 0), ("w03".to_string(), 0)];
        let many = pending_many(&conn, &queries, 1000).unwrap();
        assert_eq!(many[0].len(), 1000);
        assert_eq!(many[1].iter().map(|e| e.seq).collect::<Vec<_>>(), [last]);
        same_as_one_by_one(&conn, &queries, 1000);
    }

    #[test]
    fn an_unknown_worker_fails_the_batched_read() {
        let conn = db(1);
        let err = pending_many(&conn, &[("w09".to_string(), 0)], 10).unwrap_err();
        assert_eq!(err.code, "unknown_worker");
    }

    /// Every worker's cursor, its acks above it, and its pending events.
    fn queues(conn: &Connection, workers: &[&str]) -> Vec<(i64, Vec<i64>, Vec<i64>)> {
        workers
            .iter()
            .map(|w| {
                let c = cursor(conn, w).unwrap();
                let mut acked: Vec<i64> = acked_above(conn, w, i64::MIN)
                    .unwrap()
                    .into_iter()
                    .collect();
                acked.sort();
                let pending = pending(conn, w, 0, 1000)
                    .unwrap()
                    .iter()
                    .map(|e| e.seq)
                    .collect();
                (c, acked, pending)
            })
            .collect()
    }

    #[test]
    fn an_ack_moves_the_cursor_over_the_acknowledged_prefix_and_no_further() {
        let conn = db(2);
        // w01's events: broadcasts and DMs to it, among events that are not its own (its
        // own broadcast, one that excepts it, a DM to w02).
        let mut mine = Vec::new();
        for i in 0..12 {
            match i % 4 {
                0 => mine.push(add(&conn, event(None, None, None))),
                1 => {
                    add(&conn, event(None, Some("w01"), None));
                    add(&conn, event(None, None, Some("w01")));
                }
                2 => mine.push(add(&conn, event(Some("w01"), None, None))),
                _ => {
                    add(&conn, event(Some("w02"), None, None));
                }
            }
        }
        assert_eq!(mine.len(), 6);
        // Acked out of order: the fourth and fifth, then the second and third.
        ack(&conn, "w01", &[mine[3], mine[4]]).unwrap();
        ack(&conn, "w01", &[mine[1], mine[2]]).unwrap();
        assert_eq!(
            queue_state(&conn, "w01").unwrap().cursor,
            0,
            "the first is not acked"
        );
        // The first fills the gap: the cursor passes all five, skipping what is not w01's,
        // and stops before the sixth; no ack is left above it.
        ack(&conn, "w01", &[mine[0]]).unwrap();
        let q = queue_state(&conn, "w01").unwrap();
        assert_eq!((q.cursor, q.acked_above_cursor), (mine[4], 0));
        let left: Vec<i64> = pending(&conn, "w01", 0, 10)
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(left, vec![mine[5]]);
    }

    #[test]
    fn an_ack_naming_an_event_not_in_the_queue_changes_nothing() {
        let conn = db(2);
        let first = add(&conn, event(None, None, None));
        let own_broadcast = add(&conn, event(None, Some("w01"), None));
        let excepted = add(&conn, event(None, None, Some("w01")));
        let to_w02 = add(&conn, event(Some("w02"), None, None));
        let second = add(&conn, event(Some("w01"), None, None));
        // Events of w01's far past the first: their ack is checked by number, not by the
        // prefix the cursor could pass.
        let mut later = Vec::new();
        for _ in 0..20 {
            later.push(add(&conn, event(None, None, None)));
        }
        let missing = later[19] + 100;
        for bad in [own_broadcast, excepted, to_w02, missing] {
            let err = ack(&conn, "w01", &[first, second, later[10], bad]).unwrap_err();
            assert_eq!(err.code, "not_your_event", "event {bad}");
            assert!(
                err.message.contains(&format!("event {bad} ")),
                "{}",
                err.message
            );
            let q = queue_state(&conn, "w01").unwrap();
            assert_eq!(
                (q.cursor, q.acked_above_cursor),
                (0, 0),
                "after event {bad}"
            );
        }
        // Past a gap (the third of later is not acknowledged) the acks are the worker's:
        // stored above the cursor, which passes the prefix and stops at the gap.
        assert_eq!(
            ack(
                &conn,
                "w01",
                &[first, second, later[0], later[1], later[10], later[19]]
            )
            .unwrap(),
            6
        );
        let q = queue_state(&conn, "w01").unwrap();
        assert_eq!((q.cursor, q.acked_above_cursor), (later[1], 2));
        // Acknowledging them again is no new ack and changes nothing.
        assert_eq!(
            ack(&conn, "w01", &[later[10], later[19], first]).unwrap(),
            0
        );
        assert_eq!(queue_state(&conn, "w01").unwrap().acked_above_cursor, 2);
    }

    #[test]
    fn batched_acks_leave_the_queues_as_one_by_one_acks_do() {
        let workers = ["w01", "w02", "w03", "w04"];
        let setup = || {
            let conn = db(4);
            let mut seqs = Vec::new();
            for i in 0..24 {
                let e = match i % 4 {
                    0 => event(None, None, None),
                    1 => event(None, Some("w01"), Some("w02")),
                    2 => event(Some("w03"), None, None),
                    _ => event(Some("w02"), None, None),
                };
                seqs.push(add(&conn, e));
            }
            // Acks stored out of order before the batch.
            ack(&conn, "w02", &[seqs[3], seqs[7]]).unwrap();
            ack(&conn, "w04", &[seqs[4]]).unwrap();
            (conn, seqs)
        };
        let (one, seqs) = setup();
        let (many, _) = setup();
        let batch: Vec<(String, Vec<i64>)> = vec![
            // Its whole prefix, with a repeat.
            ("w01".into(), vec![seqs[0], seqs[4], seqs[4], seqs[8]]),
            // Fills the gap before its stored acks, and more out of order.
            ("w02".into(), vec![seqs[0], seqs[12], seqs[15]]),
            // A gap: nothing moves, the acks are kept.
            ("w03".into(), vec![seqs[6], seqs[10]]),
            // Not its event (a DM to w03): nothing of w04's is applied.
            ("w04".into(), vec![seqs[0], seqs[2]]),
        ];
        let alone: Vec<_> = batch
            .iter()
            .map(|(w, s)| ack_alone(&one, w, s).unwrap())
            .collect();
        let together = ack_many(&many, &batch).unwrap();
        assert_eq!(alone, together);
        assert_eq!(together[3].as_ref().unwrap_err().code, "not_your_event");
        assert_eq!(queues(&one, &workers), queues(&many, &workers));
        assert_eq!(queues(&many, &workers)[0].0, seqs[8], "w01's cursor moved");
        // A worker named twice is applied in order too.
        let twice = vec![
            ("w03".into(), vec![seqs[2]]),
            ("w03".into(), vec![seqs[14]]),
        ];
        let alone: Vec<_> = twice
            .iter()
            .map(|(w, s): &(String, Vec<i64>)| ack_alone(&one, w, s).unwrap())
            .collect();
        assert_eq!(alone, ack_many(&many, &twice).unwrap());
        assert_eq!(queues(&one, &workers), queues(&many, &workers));
    }

    #[test]
    fn batched_acks_follow_a_prefix_past_the_capped_reads() {
        let conn = db(2);
        conn.execute_batch("BEGIN").unwrap();
        let seqs: Vec<i64> = (0..MANY_ROWS + 20)
            .map(|_| add(&conn, event(Some("w01"), None, None)))
            .collect();
        conn.execute_batch("COMMIT").unwrap();
        // Stored acks for all but the first, then the first in a batch: the cursor moves
        // over all of them, past what one capped read holds.
        for chunk in seqs[1..].chunks(ACK_LIMIT / 2) {
            ack(&conn, "w01", chunk).unwrap();
        }
        assert_eq!(cursor(&conn, "w01").unwrap(), 0);
        let out = ack_many(&conn, &[("w01".into(), vec![seqs[0]])]).unwrap();
        assert_eq!(out[0].as_ref().unwrap(), &1);
        assert_eq!(cursor(&conn, "w01").unwrap(), *seqs.last().unwrap());
        assert!(acked_above(&conn, "w01", i64::MIN).unwrap().is_empty());
    }

    #[test]
    fn one_workers_refused_acks_leave_the_others_in_place() {
        let conn = db(2);
        let mine = add(&conn, event(Some("w01"), None, None));
        let theirs = add(&conn, event(Some("w02"), None, None));
        let out = ack_many(
            &conn,
            &[
                ("w01".to_string(), vec![mine]),
                ("w02".to_string(), vec![theirs, mine]),
            ],
        )
        .unwrap();
        assert_eq!(out[0].as_ref().unwrap(), &1);
        assert_eq!(out[1].as_ref().unwrap_err().code, "not_your_event");
        assert_eq!(queue_state(&conn, "w01").unwrap().cursor, mine);
        assert_eq!(
            queue_state(&conn, "w02").unwrap().cursor,
            0,
            "nothing of w02's applied"
        );
        assert_eq!(pending(&conn, "w02", 0, 10).unwrap().len(), 1);
    }
}
