//! Events: the ones the writes emit, and the rules of the per-worker queues (what an ack
//! may name, how `pending` pages past acknowledged events).

use std::collections::{HashMap, HashSet};

use agensh_domain::event::{Event, NewEvent, Priority};
use agensh_domain::{Error, Result};

/// Most events one ack call may name.
pub const ACK_LIMIT: usize = 10_000;

/// A normal event for everyone but its `source`, deduplicated under `key`.
pub fn broadcast(kind: &str, payload: serde_json::Value, key: String, source: &str) -> NewEvent {
    NewEvent {
        kind: kind.into(),
        priority: Priority::Normal,
        payload,
        dedup_key: Some(key),
        source: Some(source.to_string()),
        target: None,
        except: None,
    }
}

/// An urgent event for worker `to` alone, deduplicated under `key`.
pub fn direct_urgent(
    kind: &str,
    payload: serde_json::Value,
    key: String,
    source: &str,
    to: &str,
) -> NewEvent {
    NewEvent {
        target: Some(to.to_string()),
        priority: Priority::Urgent,
        ..broadcast(kind, payload, key, source)
    }
}

/// `e` addressed to each of `to`: normal, but urgent to `urgent` when it is one of them.
pub fn to_each(to: &[String], e: &NewEvent, urgent: Option<&str>) -> Vec<NewEvent> {
    to.iter()
        .map(|w| {
            let mut one = e.clone();
            if urgent == Some(w.as_str()) {
                one.priority = Priority::Urgent;
            }
            one.target = Some(w.clone());
            one
        })
        .collect()
}

/// `e` as stored under number `seq` at `now`.
pub fn stored(e: &NewEvent, seq: i64, now: i64) -> Event {
    Event {
        seq,
        kind: e.kind.clone(),
        priority: e.priority,
        payload: e.payload.clone(),
        dedup_key: e.dedup_key.clone(),
        source: e.source.clone(),
        target: e.target.clone(),
        except: e.except.clone(),
        created_at: now,
    }
}

/// What tells whose queue an event is in: the event itself, or just the columns that say
/// it.
pub trait Queued {
    /// Whether it is in `worker`'s queue ([`Event::is_for`]).
    fn is_for(&self, worker: &str) -> bool;
}

impl Queued for Event {
    fn is_for(&self, worker: &str) -> bool {
        Event::is_for(self, worker)
    }
}

/// The checks of an ack: at most [`ACK_LIMIT`], and every number above the cursor `c` an
/// event in `worker`'s queue (`named` holds the events named, by number, those that exist).
pub fn check_acks<E: Queued>(
    worker: &str,
    seqs: &[i64],
    c: i64,
    named: &HashMap<i64, E>,
) -> Result<()> {
    if seqs.len() > ACK_LIMIT {
        return Err(too_many_acks(seqs.len()));
    }
    match seqs
        .iter()
        .find(|&&s| s > c && !named.get(&s).is_some_and(|e| e.is_for(worker)))
    {
        Some(&seq) => Err(not_your_event(worker, seq)),
        None => Ok(()),
    }
}

pub fn too_many_acks(n: usize) -> Error {
    Error::invalid(
        "too_many_acks",
        format!("{n} events in one ack; the limit is {ACK_LIMIT} — acknowledge in batches"),
    )
}

pub fn not_your_event(worker: &str, seq: i64) -> Error {
    Error::invalid(
        "not_your_event",
        format!("event {seq} is not in {worker}'s queue — acknowledge only events you received"),
    )
}

/// The paging of `pending`: a worker's events from its cursor on, page by page, skipping
/// the acknowledged ones until `limit` others are found or the events end.
pub struct PendingScan<'a> {
    acked: &'a HashSet<i64>,
    limit: usize,
    /// Where the next page starts (above this number).
    pub start: i64,
    /// The unacknowledged events found so far, oldest first.
    pub out: Vec<Event>,
}

impl<'a> PendingScan<'a> {
    /// A scan from `from` on; `acked` holds the acknowledged events above it.
    pub fn new(from: i64, acked: &'a HashSet<i64>, limit: usize) -> Self {
        PendingScan {
            acked,
            limit,
            start: from,
            out: Vec::new(),
        }
    }

    /// How many events the next page reads.
    pub fn page_size(&self) -> usize {
        self.limit + self.acked.len()
    }

    /// Takes the next page (events above `start`, oldest first, at most [`page_size`]);
    /// whether the scan is done (`out` is the answer).
    ///
    /// [`page_size`]: PendingScan::page_size
    pub fn take(&mut self, page: Vec<Event>) -> bool {
        let n = page.len();
        for e in page {
            self.start = e.seq;
            if !self.acked.contains(&e.seq) {
                self.out.push(e);
                if self.out.len() == self.limit {
                    return true;
                }
            }
        }
        n < self.page_size()
    }
}
