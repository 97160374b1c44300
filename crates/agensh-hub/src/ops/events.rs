//! Per-worker event queues: long-poll, acknowledge, operator notices.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use agensh_domain::event::{
    check_wait, kinds, validate_dedup_key, validate_notice_text, Event, NewEvent, OverdueQuery,
    PollEntry, PollMany, PolledMany, Priority,
};
use agensh_domain::page::{self, Limit};
use agensh_domain::receipt::Via;
use agensh_domain::{Error, Result};
use agensh_protocol::rest::{Notice, PollQuery, Polled, QueueState};
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

use crate::auth::Caller;
use crate::metrics::inc;
use crate::state::AppState;

/// Unacknowledged events for the caller, after acknowledging those `q.ack` lists; waits
/// up to `q.wait` seconds for the first one.
pub async fn poll(s: &AppState, caller: &Caller, q: PollQuery) -> Result<Polled> {
    let worker = caller.worker()?.to_string();
    let limit = poll_bounds(s, q.wait, q.limit, page::POLL)?;
    if let Some(list) = q.ack.as_deref().filter(|l| !l.is_empty()) {
        let seqs = list
            .split(',')
            .map(|n| n.trim().parse::<i64>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| {
                Error::invalid(
                    "bad_ack",
                    "ack must list event numbers separated by commas, like ack=12,15",
                )
            })?;
        let n = s.store.ack_events(&worker, seqs, s.now()).await?;
        s.metrics
            .events_acked
            .fetch_add(n as u64, Ordering::Relaxed);
    }
    // Subscribe before reading the store so nothing committed in between is missed.
    let mut bus = s.store.subscribe();
    let mut events = s.store.pending_events(&worker, q.after, limit).await?;
    if events.is_empty() && q.wait > 0 {
        events = wait_for_events(
            s,
            &worker,
            q.after,
            limit,
            &mut bus,
            Duration::from_secs(q.wait),
        )
        .await?;
    }
    s.metrics
        .events_delivered
        .fetch_add(events.len() as u64, Ordering::Relaxed);
    s.dashboard
        .deliveries
        .note(events.iter().map(|e| e.created_at), s.now());
    Ok(Polled { events })
}

/// A node's entries for many workers: at most a batch, each authorised for its worker.
fn authorize_entries(s: &AppState, caller: &Caller, workers: &[PollEntry]) -> Result<()> {
    agensh_domain::worker::check_batch(workers.len())?;
    crate::auth::authorize_many(
        caller,
        s,
        workers.iter().map(|w| (w.id.as_str(), w.token.as_deref())),
    )
}

/// Most overdue events answered per worker: one is enough to interrupt its turn, and the
/// next prompt takes the whole queue.
const OVERDUE_PER_WORKER: usize = 20;

/// Which of a node's workers (each authorised as in [`poll_many`]) have events that
/// interrupt a turn waiting unseen for longer than `older_than_ms`: those events, per
/// worker. Reads only; the node interrupts those workers' turns and presents the events in
/// the next prompt.
pub async fn overdue(s: &AppState, caller: &Caller, body: OverdueQuery) -> Result<PolledMany> {
    authorize_entries(s, caller, &body.workers)?;
    let before = s
        .now()
        .saturating_sub(i64::try_from(body.older_than_ms).unwrap_or(i64::MAX));
    let mut answer = PolledMany::default();
    let mut events: BTreeMap<i64, Event> = BTreeMap::new();
    for w in body.workers {
        let found = s
            .store
            .overdue_events(&w.id, before, OVERDUE_PER_WORKER)
            .await?;
        if found.is_empty() {
            continue;
        }
        answer
            .workers
            .insert(w.id, found.iter().map(|e| e.seq).collect());
        events.extend(found.into_iter().map(|e| (e.seq, e)));
    }
    answer.events = events.into_values().collect();
    Ok(answer)
}

/// Waits for `worker`'s first event above `after`: the many-worker wait with one worker.
async fn wait_for_events(
    s: &AppState,
    worker: &str,
    after: i64,
    limit: usize,
    bus: &mut tokio::sync::broadcast::Receiver<Arc<Event>>,
    wait: Duration,
) -> Result<Vec<Event>> {
    let mut found = Found::new(limit);
    wait_for_many(s, &[(worker.to_string(), after)], &mut found, bus, wait).await?;
    Ok(found.into_events())
}

/// A node's one long-poll for many of its workers: acknowledges each worker's `ack`
/// first, then answers every named worker's pending events at once, or waits up to `wait`
/// seconds and answers as soon as any of them has one (with whatever else is committed
/// by then, for all of them). Each event is in the answer once, however many of the
/// workers get it.
pub async fn poll_many(s: &AppState, caller: &Caller, body: PollMany) -> Result<PolledMany> {
    authorize_entries(s, caller, &body.workers)?;
    let limit = poll_bounds(s, body.wait, body.limit, page::POLL_MANY)?;
    let mut answer = PolledMany::default();
    let acks: Vec<(String, Vec<i64>)> = body
        .workers
        .iter()
        .filter(|w| !w.ack.is_empty())
        .map(|w| (w.id.clone(), w.ack.clone()))
        .collect();
    if !acks.is_empty() {
        let results = s.store.ack_events_many(acks.clone(), s.now()).await?;
        for ((id, _), r) in acks.into_iter().zip(results) {
            match r {
                Ok(n) => {
                    s.metrics
                        .events_acked
                        .fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(e) => {
                    answer.errors.insert(id, e);
                }
            }
        }
    }
    let waiting: Vec<(String, i64)> = body
        .workers
        .into_iter()
        .filter(|w| !answer.errors.contains_key(&w.id))
        .map(|w| (w.id, w.after))
        .collect();
    // Subscribe before reading the store so nothing committed in between is missed.
    let mut bus = s.store.subscribe();
    let mut found = Found::new(limit);
    found.add_pending(
        &waiting,
        s.store.pending_events_many(waiting.clone(), limit).await?,
    );
    if found.is_empty() && answer.errors.is_empty() && body.wait > 0 {
        wait_for_many(
            s,
            &waiting,
            &mut found,
            &mut bus,
            Duration::from_secs(body.wait),
        )
        .await?;
    }
    s.metrics
        .events_delivered
        .fetch_add(found.delivered as u64, Ordering::Relaxed);
    let created: HashMap<i64, i64> = found
        .events
        .values()
        .map(|e| (e.seq, e.created_at))
        .collect();
    s.dashboard.deliveries.note(
        found
            .workers
            .values()
            .flatten()
            .filter_map(|seq| created.get(seq).copied()),
        s.now(),
    );
    answer.workers = std::mem::take(&mut found.workers);
    answer.events = found.into_events();
    Ok(answer)
}

/// The events found for many workers: each event once, and each worker's list.
struct Found {
    limit: usize,
    /// Each event once, shared with the reads and the commit bus it came from.
    events: BTreeMap<i64, Arc<Event>>,
    workers: BTreeMap<String, Vec<i64>>,
    delivered: usize,
}

impl Found {
    fn new(limit: usize) -> Self {
        Found {
            limit,
            events: BTreeMap::new(),
            workers: BTreeMap::new(),
            delivered: 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.delivered == 0
    }

    /// The events found, oldest first, each once.
    fn into_events(self) -> Vec<Event> {
        self.events
            .into_values()
            .map(Arc::unwrap_or_clone)
            .collect()
    }

    /// Adds `event` for `worker` unless it has `limit` events already; whether it did.
    fn add(&mut self, worker: &str, event: &Arc<Event>) -> bool {
        let seqs = self.workers.entry(worker.to_string()).or_default();
        if seqs.len() >= self.limit {
            return false;
        }
        seqs.push(event.seq);
        self.delivered += 1;
        self.events
            .entry(event.seq)
            .or_insert_with(|| Arc::clone(event));
        true
    }

    fn add_pending(&mut self, waiting: &[(String, i64)], pending: Vec<Vec<Arc<Event>>>) {
        for ((worker, _), events) in waiting.iter().zip(pending) {
            for e in &events {
                self.add(worker, e);
            }
        }
    }

    /// Adds a newly committed event for every waiting worker it is for.
    fn add_committed(&mut self, waiting: &[(String, i64)], e: &Arc<Event>) -> bool {
        let mut any = false;
        for (worker, after) in waiting {
            if e.seq > *after && e.is_for(worker) {
                any |= self.add(worker, e);
            }
        }
        any
    }
}

async fn wait_for_many(
    s: &AppState,
    waiting: &[(String, i64)],
    found: &mut Found,
    bus: &mut tokio::sync::broadcast::Receiver<Arc<Event>>,
    wait: Duration,
) -> Result<()> {
    let shutdown = s.shutdown.wait_owned();
    tokio::pin!(shutdown);
    let deadline = tokio::time::Instant::now() + wait;
    inc(&s.metrics.long_polls);
    let polls = &s.metrics.long_polls_waiting;
    polls.fetch_add(1, Ordering::Relaxed);
    let _guard = scopeguard(|| {
        polls.fetch_sub(1, Ordering::Relaxed);
    });
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return Ok(()),
            _ = &mut shutdown => return Ok(()),
            got = bus.recv() => match got {
                Ok(e) => {
                    if found.add_committed(waiting, &e) {
                        // Take whatever else is already committed, then answer.
                        while let Ok(e) = bus.try_recv() {
                            found.add_committed(waiting, &e);
                        }
                        return Ok(());
                    }
                }
                Err(RecvError::Lagged(_)) => {
                    let limit = found.limit;
                    found.add_pending(waiting, s.store.pending_events_many(waiting.to_vec(), limit).await?);
                    if !found.is_empty() {
                        return Ok(());
                    }
                }
                Err(RecvError::Closed) => return Ok(()),
            },
        }
    }
}

/// Checks a poll's `wait` against `hub.max_wait_secs` and its `limit` against `page`; the
/// limit to use.
fn poll_bounds(s: &AppState, wait: u64, limit: Option<usize>, page: Limit) -> Result<usize> {
    check_wait(wait, s.config.hub.max_wait_secs)?;
    page.check(limit)
}

/// Runs `f` when dropped, also when the request is cancelled.
fn scopeguard<F: FnMut()>(f: F) -> impl Drop {
    struct Guard<F: FnMut()>(F);
    impl<F: FnMut()> Drop for Guard<F> {
        fn drop(&mut self) {
            (self.0)()
        }
    }
    Guard(f)
}

/// Acknowledges the calling worker's events `seqs` (and their receipts); how many were
/// pending.
pub async fn ack(s: &AppState, caller: &Caller, seqs: Vec<i64>) -> Result<usize> {
    let n = s.store.ack_events(caller.worker()?, seqs, s.now()).await?;
    s.metrics
        .events_acked
        .fetch_add(n as u64, Ordering::Relaxed);
    Ok(n)
}

/// Records that the calling worker was shown its events `seqs` via `via` (receipts: the
/// first presentation wins). Shown in a prompt, the urgent ones among them also leave its
/// queue, as [`ack`] takes them, so its tool results never show them again; the node
/// acknowledges them all when the turn that carries them ends. How many were newly
/// presented.
pub async fn presented(s: &AppState, caller: &Caller, seqs: Vec<i64>, via: Via) -> Result<usize> {
    let worker = caller.worker()?;
    let dequeue = via != Via::ToolResult;
    let n = s
        .store
        .present_events(worker, seqs, via, dequeue, s.now())
        .await?;
    s.metrics
        .events_presented
        .fetch_add(n as u64, Ordering::Relaxed);
    Ok(n)
}

/// The calling worker's queue: its cursor and what is pending.
pub async fn queue_state(s: &AppState, caller: &Caller) -> Result<QueueState> {
    s.store.queue_state(caller.worker()?).await
}

/// An operator notice to one worker or to all (admin only): the event stored, or `None`
/// when one of the same `dedup_key` is pending already.
pub async fn notice(s: &AppState, caller: &Caller, b: Notice) -> Result<Option<Event>> {
    caller.require_admin()?;
    validate_notice_text(&b.text)?;
    if let Some(to) = &b.to {
        agensh_domain::ids::validate_worker_id(to)?;
        if s.token_of(to).is_none() {
            return Err(agensh_domain::worker::unknown_worker(to));
        }
    }
    if let Some(k) = &b.dedup_key {
        validate_dedup_key(k)?;
    }
    let event = NewEvent {
        kind: kinds::NOTICE.into(),
        priority: if b.urgent {
            Priority::Urgent
        } else {
            Priority::Normal
        },
        payload: json!({ "text": b.text }),
        // Operator keys live in their own namespace so they never collide with the
        // hub's own keys (`board:G12`, `msg:M7`).
        dedup_key: b.dedup_key.map(|k| format!("notice:{k}")),
        source: None,
        target: b.to,
        except: None,
    };
    s.store.enqueue(event, s.now()).await
}
