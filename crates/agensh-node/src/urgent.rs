//! The node's watch for urgent news that waits too long (`run.interrupt_after_secs`): a
//! worker in a turn that calls no organization tool hears of a direct message only at the
//! turn's end. While its turn runs, the worker is in this watch; one request for all the
//! node's watched workers (`POST /events/overdue`) asks the hub every [`period`] which of
//! them have news that interrupts a turn (`agensh_domain::receipt::interrupts`) stored
//! longer ago than their bound and not presented to them. A worker with some is answered
//! (and leaves the watch); its turn loop interrupts the turn.
//!
//! News presented meanwhile (in an organization tool's result) is not overdue: the hub
//! reads receipts, so a worker whose urgent item was already shown is never interrupted.

use std::collections::HashMap;
use std::time::Duration;

use agensh_client::Client;
use agensh_domain::event::{Event, OverdueQuery, PollEntry};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// The shortest and the longest time between two asks.
const LEAST_PERIOD: Duration = Duration::from_millis(250);
const MOST_PERIOD: Duration = Duration::from_secs(5);

/// How often the hub is asked for workers bound by `after`: a quarter of it, from
/// [`LEAST_PERIOD`] to [`MOST_PERIOD`], so an item is seen at most that late past its bound.
pub fn period(after: Duration) -> Duration {
    (after / 4).clamp(LEAST_PERIOD, MOST_PERIOD)
}

/// A handle to the node's watch; clones share it. The watch stops when the last handle is
/// dropped.
#[derive(Clone)]
pub struct UrgentWatch {
    tx: mpsc::UnboundedSender<Watched>,
}

/// A worker in a turn, watched.
struct Watched {
    id: String,
    token: String,
    after: Duration,
    reply: oneshot::Sender<Vec<Event>>,
}

impl UrgentWatch {
    /// Starts the watch against the hub of `hub` (each ask is made with the token of one
    /// of the watched workers and carries every worker's own).
    pub fn start(hub: Client) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(hub, rx));
        UrgentWatch { tx }
    }

    /// Resolves with worker `id`'s news that interrupts a turn once some has waited unseen
    /// longer than `after`; never when the watch has stopped. Dropping the future takes the
    /// worker out of the watch.
    pub async fn overdue(&self, id: &str, token: &str, after: Duration) -> Vec<Event> {
        let (reply, answer) = oneshot::channel();
        let watched = Watched {
            id: id.to_string(),
            token: token.to_string(),
            after,
            reply,
        };
        if self.tx.send(watched).is_err() {
            return std::future::pending().await;
        }
        match answer.await {
            Ok(events) => events,
            Err(_) => std::future::pending().await,
        }
    }
}

async fn run(hub: Client, mut rx: mpsc::UnboundedReceiver<Watched>) {
    let mut watched: HashMap<String, Watched> = HashMap::new();
    // When the hub is asked next (far off while nobody is watched); a worker joining never
    // puts it off, so asks keep their pace however often turns start.
    let idle = || Instant::now() + Duration::from_secs(3600);
    let mut next = idle();
    loop {
        tokio::select! {
            w = rx.recv() => match w {
                Some(w) => {
                    next = next.min(Instant::now() + period(w.after));
                    watched.insert(w.id.clone(), w);
                    continue;
                }
                None => return,
            },
            _ = tokio::time::sleep_until(next) => {}
        }
        // Workers whose turn ended (their future was dropped) leave the watch.
        watched.retain(|_, w| !w.reply.is_closed());
        next = watched
            .values()
            .map(|w| Instant::now() + period(w.after))
            .min()
            .unwrap_or_else(idle);
        if watched.is_empty() {
            continue;
        }
        // One ask per bound (a node's workers normally share one).
        let mut bounds: Vec<Duration> = watched.values().map(|w| w.after).collect();
        bounds.sort();
        bounds.dedup();
        for after in bounds {
            let entries: Vec<PollEntry> = watched
                .values()
                .filter(|w| w.after == after)
                .map(|w| PollEntry {
                    id: w.id.clone(),
                    token: Some(w.token.clone()),
                    after: 0,
                    ack: Vec::new(),
                })
                .collect();
            for chunk in entries.chunks(agensh_domain::worker::BATCH_LIMIT) {
                let q = OverdueQuery {
                    older_than_ms: after.as_millis() as u64,
                    workers: chunk.to_vec(),
                };
                let client = hub.with_token(chunk[0].token.as_deref().unwrap_or_default());
                let answer = match client.overdue(&q).await {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::debug!("could not ask the hub for overdue news: {e}");
                        continue;
                    }
                };
                for id in answer.workers.keys() {
                    if let Some(w) = watched.remove(id) {
                        let _ = w.reply.send(answer.events_of(id));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hub_is_asked_four_times_per_bound_within_limits() {
        assert_eq!(period(Duration::from_secs(120)), MOST_PERIOD);
        assert_eq!(period(Duration::from_secs(8)), Duration::from_secs(2));
        assert_eq!(period(Duration::from_millis(400)), LEAST_PERIOD);
    }
}
