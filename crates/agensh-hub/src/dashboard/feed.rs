//! The live stream (`GET /api/v1/stream`): server-sent events carrying what changed,
//! coalesced to a few frames a second and resumable with `Last-Event-ID`.
//!
//! One feed task per hub does the work whatever the number of open pages: every
//! [`TICK`] while anyone listens it reads the events committed since its cursor, the worker
//! table when something may have changed it, the counts and the health, and broadcasts one
//! [`Frame`] of the differences, encoded once. A connection first catches up from the
//! store (every event after its `Last-Event-ID`, in order, once), then forwards the feed's
//! frames, leaving out any event it has sent already; so a reconnect has no gap and no
//! duplicate, and a hub restart loses nothing (events are durable; the worker table is
//! sent whole on every connection).

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agensh_domain::event::Event;
use agensh_domain::pr::PrState;
use agensh_domain::worker::WorkerStatus;
use agensh_protocol::dashboard::{Frame, Health, WorkerRow};
use agensh_protocol::rest::Stats;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokio::sync::broadcast;

use crate::auth::Caller;
use crate::error::ApiResult;
use crate::state::AppState;

/// How often the feed looks for changes: frames are at most this frequent.
pub const TICK: Duration = Duration::from_millis(250);
/// Most events in one frame; more wait for the next.
const FRAME_EVENTS: usize = 1_000;
/// A client further behind than this many events is told to reload instead.
const MOST_CATCH_UP: usize = 50_000;
/// A comment line this often keeps proxies and the browser from closing a quiet stream.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// The worker table is read at least this often while anyone listens (last activity moves
/// without an event)...
const WORKERS_EVERY: Duration = Duration::from_secs(2);
/// ...and at most this often, however much changes.
const WORKERS_MIN: Duration = Duration::from_secs(1);
/// A worker's last activity is sent again when it moved by this much (ms).
const ACTIVITY_STEP: i64 = 5_000;

/// A frame with its encoding, shared by every connection.
pub struct Shared {
    pub frame: Frame,
    pub text: Bytes,
}

/// The hub's one feed.
pub struct Feed {
    frames: broadcast::Sender<Arc<Shared>>,
    last: Mutex<Last>,
    /// Something other than an event may have changed a worker row (a status report).
    dirty: AtomicBool,
    listening: tokio::sync::Notify,
}

/// What the feed last sent.
#[derive(Default)]
struct Last {
    cursor: i64,
    started: bool,
    rows: HashMap<String, WorkerRow>,
    states: BTreeMap<String, u64>,
    stats: Stats,
    health: Health,
}

impl Default for Feed {
    fn default() -> Self {
        Self {
            frames: broadcast::channel(64).0,
            last: Mutex::new(Last::default()),
            dirty: AtomicBool::new(true),
            listening: tokio::sync::Notify::new(),
        }
    }
}

impl Feed {
    /// Marks the worker table as possibly changed.
    pub fn touch(&self) {
        self.dirty.store(true, Ordering::Relaxed);
    }

    /// Pages listening now.
    pub fn listeners(&self) -> usize {
        self.frames.receiver_count()
    }
}

/// Encodes one frame as a server-sent event.
fn encode(frame: &Frame) -> Bytes {
    let data = serde_json::to_string(frame).expect("a frame serialises");
    Bytes::from(format!(
        "id: {}\nevent: frame\ndata: {data}\n\n",
        frame.cursor
    ))
}

/// Runs the feed until the hub shuts down.
///
/// Events go out every [`TICK`] whatever else the feed does: the worker table (1,024 rows
/// with their claims, open PRs and budgets) is read by a task of its own, at most every
/// [`WORKERS_MIN`], and the tick that finds it done sends what changed in it.
pub async fn run(s: AppState) {
    let mut shutdown = s.shutdown.clone();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut table: Option<tokio::task::JoinHandle<ApiResult<Vec<WorkerRow>>>> = None;
    let mut table_started = tokio::time::Instant::now() - WORKERS_EVERY;
    loop {
        let feed = &s.dashboard.feed;
        if feed.listeners() == 0 {
            // Asleep until a page connects; it starts from the whole table.
            feed.last.lock().expect("feed lock").started = false;
            if let Some(t) = table.take() {
                t.abort();
            }
            tokio::select! {
                _ = feed.listening.notified() => {}
                _ = shutdown.wait() => return,
            }
            continue;
        }
        let rows = match table.take() {
            Some(t) if t.is_finished() => match t.await {
                Ok(Ok(rows)) => Some(rows),
                Ok(Err(e)) => {
                    tracing::warn!("dashboard feed: {}", e.0);
                    None
                }
                Err(_) => None,
            },
            other => {
                table = other;
                None
            }
        };
        let since = table_started.elapsed();
        if table.is_none()
            && since >= WORKERS_MIN
            && (feed.dirty.swap(false, Ordering::Relaxed) || since >= WORKERS_EVERY)
        {
            let s2 = s.clone();
            table = Some(tokio::spawn(async move { worker_rows(&s2).await }));
            table_started = tokio::time::Instant::now();
        }
        match tick_once(&s, rows).await {
            Ok(Some(frame)) => {
                let text = encode(&frame);
                let _ = feed.frames.send(Arc::new(Shared { frame, text }));
            }
            Ok(None) => {}
            Err(e) => tracing::warn!("dashboard feed: {}", e.0),
        }
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait() => return,
        }
    }
}

/// Whether a worker's row changed enough to send: its last activity counts only when it
/// moved by [`ACTIVITY_STEP`] (it moves with every request a busy worker makes).
fn row_changed(old: Option<&WorkerRow>, new: &WorkerRow) -> bool {
    let Some(old) = old else {
        return true;
    };
    let bucket = |r: &WorkerRow| r.last_activity.map(|t| t.div_euclid(ACTIVITY_STEP));
    let mut a = old.clone();
    let mut b = new.clone();
    let (ba, bb) = (bucket(&a), bucket(&b));
    a.last_activity = None;
    b.last_activity = None;
    a != b || ba != bb
}

/// One look for changes: the events since the cursor, the worker table when `rows` brings
/// a new reading, the counts and the health; the frame of what changed, if anything did.
async fn tick_once(s: &AppState, rows: Option<Vec<WorkerRow>>) -> ApiResult<Option<Frame>> {
    let (cursor, started) = {
        let last = s.dashboard.feed.last.lock().expect("feed lock");
        (last.cursor, last.started)
    };
    let cursor = if started {
        cursor
    } else {
        s.store.stats().await?.events as i64
    };
    let events = s.store.events_after(cursor, FRAME_EVENTS).await?;
    if !events.is_empty() {
        s.dashboard.feed.touch();
    }
    let stats = if events.is_empty() && started {
        None
    } else {
        Some(s.store.stats().await?)
    };
    let mut last = s.dashboard.feed.last.lock().expect("feed lock");
    let mut frame = Frame {
        cursor: events.last().map_or(cursor, |e| e.seq),
        events,
        ..Frame::default()
    };
    last.started = true;
    last.cursor = frame.cursor;
    if let Some(rows) = rows {
        let states = states_of(&rows);
        if states != last.states {
            frame.states = Some(states.clone());
            last.states = states;
        }
        for row in rows {
            if row_changed(last.rows.get(&row.id), &row) {
                last.rows.insert(row.id.clone(), row.clone());
                frame.workers.push(row);
            }
        }
    }
    if let Some(stats) = stats.filter(|st| *st != last.stats) {
        last.stats = stats.clone();
        frame.stats = Some(stats);
    }
    let health = health(s, &last.states, last.stats.prs_open);
    if health != last.health {
        last.health = health.clone();
        frame.health = Some(health);
    }
    let changed = !frame.events.is_empty()
        || !frame.workers.is_empty()
        || frame.states.is_some()
        || frame.stats.is_some()
        || frame.health.is_some();
    Ok(changed.then_some(frame))
}

/// Workers per state, every state present.
pub fn states_of(rows: &[WorkerRow]) -> BTreeMap<String, u64> {
    let mut states: BTreeMap<String, u64> = WorkerStatus::ALL
        .iter()
        .map(|k| (k.as_str().to_string(), 0))
        .collect();
    for r in rows {
        *states.entry(r.status.clone()).or_default() += 1;
    }
    states
}

/// The coordination health now.
pub fn health(s: &AppState, states: &BTreeMap<String, u64>, prs_open: u64) -> Health {
    let (p50, p99, n) = s.dashboard.deliveries.percentiles();
    let count = |k: &str| states.get(k).copied().unwrap_or(0);
    let working =
        count("busy") + count("idle") + count("parked") + count("stalled") + count("starting");
    let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let delivery = s.delivery.summary();
    Health {
        delivery_p50_ms: p50,
        delivery_p99_ms: p99,
        delivery_samples: n,
        claims: get(&s.metrics.claims),
        claim_overlaps: get(&s.metrics.claim_overlaps),
        idle_share: if working == 0 {
            0.0
        } else {
            // Two decimals: a share that moves in the third is not worth a frame.
            ((count("idle") + count("parked")) as f64 / working as f64 * 100.0).round() / 100.0
        },
        prs_waiting: prs_open,
        urgent_waiting: delivery.waiting_total(),
        presented: delivery.presented,
    }
}

/// What a page starts from: every worker's row, the counts, workers per state, the health.
pub struct Snapshot {
    pub rows: Vec<WorkerRow>,
    pub stats: Stats,
    pub states: BTreeMap<String, u64>,
    pub health: Health,
}

/// The organization now, as a page starts from it (a stream's first frame, the overview).
pub async fn snapshot(s: &AppState) -> ApiResult<Snapshot> {
    let rows = worker_rows(s).await?;
    let stats = s.store.stats().await?;
    let states = states_of(&rows);
    let health = health(s, &states, stats.prs_open);
    Ok(Snapshot {
        rows,
        stats,
        states,
        health,
    })
}

/// Every worker's row, in id order.
pub async fn worker_rows(s: &AppState) -> ApiResult<Vec<WorkerRow>> {
    let workers = crate::ops::workers::list_workers(s).await?;
    let open = s
        .store
        .list_prs(Some(PrState::Open), None, agensh_domain::page::PRS.max)
        .await?;
    let mut open_prs: HashMap<&str, u64> = HashMap::new();
    for pr in &open {
        *open_prs.entry(pr.author.as_str()).or_default() += 1;
    }
    let ids: Vec<String> = workers.iter().map(|w| w.id.clone()).collect();
    let budget = s.gateway.budgets.view(&ids, s.now());
    let spent: HashMap<&str, &agensh_domain::budget::Spent> = budget
        .workers
        .iter()
        .map(|w| (w.worker.as_str(), &w.spent))
        .collect();
    let turns = s.turns.lock().expect("turns lock").clone();
    let last_turns = s
        .dashboard
        .last_turns
        .lock()
        .expect("last turns lock")
        .clone();
    Ok(workers
        .into_iter()
        .map(|w| {
            let claim = w.claims.last();
            let spent = spent.get(w.id.as_str());
            let last = last_turns.get(&w.id);
            WorkerRow {
                status: w.status.as_str().to_string(),
                agent: w.agent,
                step: w.progress.as_ref().map(|p| p.step.clone()),
                step_since: w.progress.as_ref().map(|p| p.since),
                claim: claim.map(|c| c.label.clone().unwrap_or_else(|| c.text.clone())),
                claim_id: claim.map(|c| c.id.clone()),
                last_activity: w.last_activity,
                turns: turns
                    .get(&w.id)
                    .map_or(0, |t| t.0)
                    .max(last.map_or(0, |l| l.turn)),
                last_action: last
                    .filter(|l| !l.last_action.is_empty())
                    .map(|l| l.last_action.clone()),
                last_action_at: last.map(|l| l.ended_at),
                tokens: spent.map_or(0, |s| s.tokens),
                cost_usd: spent.map_or(0.0, |s| (s.cost_usd * 10_000.0).round() / 10_000.0),
                restarts: last.map_or(0, |l| l.restarts),
                open_prs: open_prs.get(w.id.as_str()).copied().unwrap_or(0),
                stopped_for: w.stopped_for,
                id: w.id,
            }
        })
        .collect())
}

#[derive(Debug, Deserialize)]
pub struct StreamQuery {
    /// Resume after this event (as `Last-Event-ID`, for a page's first connection).
    #[serde(default)]
    pub after: Option<i64>,
}

/// `GET /api/v1/stream`: the live stream (the admin: the operator's token or the
/// dashboard's session).
pub async fn stream(
    State(s): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    Query(q): Query<StreamQuery>,
) -> ApiResult<Response> {
    caller.require_admin()?;
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<i64>().ok())
        .or(q.after)
        .filter(|n| *n >= 0);
    let frames = s.dashboard.feed.frames.subscribe();
    s.dashboard.feed.listening.notify_one();
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    tokio::spawn(connection(s, resume, frames, tx));
    let mut r = Body::from_stream(Chunks(rx)).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(r)
}

/// The chunks a connection task sends, as a body stream.
struct Chunks(tokio::sync::mpsc::Receiver<Bytes>);

impl futures_core::Stream for Chunks {
    type Item = Result<Bytes, Infallible>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|c| c.map(Ok))
    }
}

/// One page's stream: the whole table and the catch-up, then the feed's frames.
async fn connection(
    s: AppState,
    resume: Option<i64>,
    mut frames: broadcast::Receiver<Arc<Shared>>,
    tx: tokio::sync::mpsc::Sender<Bytes>,
) {
    let mut shutdown = s.shutdown.clone();
    let send = |b: Bytes| {
        let tx = tx.clone();
        async move { tx.send(b).await.is_ok() }
    };
    if !send(Bytes::from_static(b"retry: 1000\n\n")).await {
        return;
    }
    let mut sent = match first_frames(&s, resume).await {
        Ok((frames_out, cursor)) => {
            for f in frames_out {
                if !send(encode(&f)).await {
                    return;
                }
            }
            cursor
        }
        Err(e) => {
            tracing::warn!("dashboard stream: {}", e.0);
            return;
        }
    };
    let mut keepalive = tokio::time::interval(KEEPALIVE);
    keepalive.tick().await;
    loop {
        tokio::select! {
            got = frames.recv() => match got {
                Ok(shared) => {
                    let text = if shared.frame.events.first().is_none_or(|e| e.seq > sent) {
                        shared.text.clone()
                    } else {
                        // It overlaps what the catch-up sent: leave those events out.
                        let mut f = shared.frame.clone();
                        f.events.retain(|e| e.seq > sent);
                        f.cursor = f.cursor.max(sent);
                        encode(&f)
                    };
                    sent = sent.max(shared.frame.cursor);
                    if !send(text).await {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    // Too slow to read: catch up from the store as a reconnect would.
                    match first_frames(&s, Some(sent)).await {
                        Ok((out, cursor)) => {
                            for f in out {
                                if !send(encode(&f)).await {
                                    return;
                                }
                            }
                            sent = cursor;
                        }
                        Err(_) => return,
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = keepalive.tick() => {
                if !send(Bytes::from_static(b": keepalive\n\n")).await {
                    return;
                }
            }
            _ = tx.closed() => return,
            _ = shutdown.wait() => return,
        }
    }
}

/// A connection's first frames: every event after `resume` up to now, in frames of at most
/// [`FRAME_EVENTS`], the first with the whole worker table, counts and health (`reset` when
/// there was nothing to resume from or too much to catch up). Returns them and the cursor
/// reached.
async fn first_frames(s: &AppState, resume: Option<i64>) -> ApiResult<(Vec<Frame>, i64)> {
    let Snapshot {
        rows,
        stats,
        states,
        health,
    } = snapshot(s).await?;
    let newest = stats.events as i64;
    let mut first = Frame {
        cursor: newest,
        workers: rows,
        states: Some(states),
        stats: Some(stats),
        health: Some(health),
        ..Frame::default()
    };
    let from = match resume {
        Some(n) if n <= newest && (newest - n) as usize <= MOST_CATCH_UP => n,
        _ => {
            first.reset = true;
            return Ok((vec![first], newest));
        }
    };
    let mut out = Vec::new();
    let mut cursor = from;
    first.cursor = from;
    out.push(first);
    while cursor < newest {
        let events: Vec<Event> = s.store.events_after(cursor, FRAME_EVENTS).await?;
        let Some(last) = events.last().map(|e| e.seq) else {
            break;
        };
        cursor = last;
        out.push(Frame {
            cursor,
            events,
            ..Frame::default()
        });
    }
    Ok((out, cursor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_is_sent_again_when_it_changed_or_its_activity_moved_by_a_step() {
        let row = WorkerRow {
            id: "w01".into(),
            status: "busy".into(),
            last_activity: Some(10_000),
            ..WorkerRow::default()
        };
        assert!(row_changed(None, &row), "a new row");
        let mut later = row.clone();
        later.last_activity = Some(10_000 + ACTIVITY_STEP - 1);
        assert!(!row_changed(Some(&row), &later), "within a step");
        later.last_activity = Some(10_000 + ACTIVITY_STEP);
        assert!(row_changed(Some(&row), &later), "a step later");
        let mut idle = row.clone();
        idle.status = "idle".into();
        assert!(row_changed(Some(&row), &idle), "another status");
    }
}
