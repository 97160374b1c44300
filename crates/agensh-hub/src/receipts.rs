//! Delivery receipts seen from the hub ([`agensh_domain::receipt`]): a background task that
//! tells the sender of each urgent direct message its worker has not been shown for
//! `hub.unseen_notice_secs` (one urgent `msg.unseen` each, deduplicated by message, so
//! several hubs on one store send it once), and that sums up for `/metrics` and the
//! dashboard the urgent items waiting and the stored → presented times of the last hour.
//!
//! Each pass looks at the messages stored in the stretch of time that has just grown old
//! enough, from where the previous pass stopped: a message is looked at once, when its
//! wait reaches the setting, and its sender told only if its worker was not shown it by
//! then.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use agensh_domain::event::{kinds, Event, NewEvent, Priority};
use agensh_domain::ids::{validate_worker_id, ADMIN};
use agensh_domain::receipt::{self, latencies, unseen_text, why_unseen, KindLatency};
use agensh_domain::worker::WorkerStatus;
use agensh_domain::Result;
use serde_json::json;

use crate::state::AppState;

/// The longest time between two passes.
const MOST_EVERY: Duration = Duration::from_secs(15);
/// The shortest (a test's few seconds of `unseen_notice_secs`).
const LEAST_EVERY: Duration = Duration::from_millis(250);
/// How far back the summary looks, and how far back a hub's first pass looks for messages
/// no pass looked at (the hub was down).
pub const WINDOW_MS: i64 = 3_600_000;
/// Most presentations read for the summary's percentiles, and most waiting items counted.
const SAMPLES: usize = 10_000;
/// Most unseen messages one pass reads; the next pass goes on from the last.
const PASS_LIMIT: usize = 1_000;

/// What the hub keeps of receipts between passes (memory only).
#[derive(Default)]
pub struct Delivery {
    summary: Mutex<DeliverySummary>,
    /// Passes done, and notices sent to senders.
    pub passes: AtomicU64,
    pub notices: AtomicU64,
}

/// The urgent items waiting and the stored → presented times, as of the last pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeliverySummary {
    /// Urgent items stored in the last [`WINDOW_MS`] that their worker was not shown yet,
    /// by kind.
    pub waiting: BTreeMap<String, u64>,
    /// Stored → presented per kind, over the presentations of the last [`WINDOW_MS`].
    pub presented: Vec<KindLatency>,
}

impl DeliverySummary {
    /// Every urgent item waiting, whatever its kind.
    pub fn waiting_total(&self) -> u64 {
        self.waiting.values().sum()
    }
}

impl Delivery {
    /// The summary of the last pass.
    pub fn summary(&self) -> DeliverySummary {
        self.summary.lock().expect("delivery lock").clone()
    }
}

/// How often the passes run for a hub whose setting is `unseen_secs` (0: no notices).
fn every(unseen_secs: u64) -> Duration {
    if unseen_secs == 0 {
        return MOST_EVERY;
    }
    (Duration::from_secs(unseen_secs) / 4).clamp(LEAST_EVERY, MOST_EVERY)
}

/// Starts the passes; they end with the hub.
pub fn start(s: AppState) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every(s.config.hub.unseen_notice_secs));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shutdown = s.shutdown.clone();
        let mut since: Option<i64> = None;
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if let Err(e) = pass(&s, &mut since).await {
                        tracing::warn!("delivery receipts: {e}");
                    }
                }
                _ = shutdown.wait() => break,
            }
        }
    });
}

/// One pass: the senders' notices (when the setting is on), then the summary.
async fn pass(s: &AppState, since: &mut Option<i64>) -> Result<()> {
    let now = s.now();
    let unseen_ms = (s.config.hub.unseen_notice_secs as i64).saturating_mul(1000);
    if unseen_ms > 0 {
        let to = now - unseen_ms;
        let from = since.unwrap_or(to - WINDOW_MS);
        if to > from {
            let found = s.store.unseen_events(from, to, PASS_LIMIT).await?;
            *since = Some(match found.last() {
                // Cut at the limit: go on from the last one read (its millisecond is read
                // again; a sender is told once either way).
                Some(last) if found.len() == PASS_LIMIT && last.created_at > from => {
                    last.created_at
                }
                _ => to,
            });
            notify_senders(s, &found, now).await?;
        }
    }
    let waiting = s.store.unseen_events(now - WINDOW_MS, now, SAMPLES).await?;
    let presented = s
        .store
        .receipts_presented_since(now - WINDOW_MS, SAMPLES)
        .await?;
    let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
    for e in &waiting {
        *by_kind.entry(e.kind.clone()).or_default() += 1;
    }
    let summary = DeliverySummary {
        waiting: by_kind,
        presented: latencies(
            presented
                .iter()
                .filter_map(|r| Some((r.kind.as_str(), r.wait_ms()?))),
        ),
    };
    *s.delivery.summary.lock().expect("delivery lock") = summary;
    s.delivery.passes.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Tells the sender of each direct message of `unseen` from a worker that its worker has
/// not been shown it, and why as far as the hub knows.
async fn notify_senders(s: &AppState, unseen: &[Event], now: i64) -> Result<()> {
    let dms: Vec<&Event> = unseen
        .iter()
        .filter(|e| e.kind == kinds::DIRECT_MESSAGE)
        .filter(|e| {
            e.source
                .as_deref()
                .is_some_and(|w| w != ADMIN && validate_worker_id(w).is_ok())
        })
        .collect();
    if dms.is_empty() {
        return Ok(());
    }
    let busy = |w: &str| {
        s.turns
            .lock()
            .expect("turns lock")
            .get(w)
            .is_some_and(|(_, busy)| *busy)
    };
    // The statuses of the workers not in a turn, read once for the pass.
    let statuses: BTreeMap<String, WorkerStatus> =
        if dms.iter().all(|e| busy(e.target.as_deref().unwrap_or(""))) {
            BTreeMap::new()
        } else {
            s.store
                .list_workers(now)
                .await?
                .into_iter()
                .map(|w| (w.id, w.status))
                .collect()
        };
    for e in dms {
        let (Some(from), Some(to)) = (e.source.as_deref(), e.target.as_deref()) else {
            continue;
        };
        let Some(message) = e.payload["seq"].as_i64() else {
            continue;
        };
        let busy = busy(to);
        let waited = now - e.created_at;
        let text = unseen_text(
            to,
            message,
            waited,
            why_unseen(busy, statuses.get(to).copied()),
        );
        let notice = NewEvent {
            kind: kinds::MESSAGE_UNSEEN.into(),
            priority: Priority::Urgent,
            payload: json!({
                "message": message,
                "id": receipt::message_id(message),
                "to": to,
                "waited_secs": waited.max(0) / 1000,
                "busy": busy,
                "text": text,
            }),
            dedup_key: Some(format!("unseen:{}", receipt::message_id(message))),
            source: None,
            target: Some(from.to_string()),
            except: None,
        };
        if s.store.enqueue(notice, now).await?.is_some() {
            s.delivery.notices.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// Appends the urgent items waiting and the stored → presented times per kind (a summary
/// in seconds, over the last hour), and the senders told of unseen messages.
pub fn render_metrics(out: &mut String, d: &Delivery) {
    let summary = d.summary();
    let _ = writeln!(
        out,
        "# HELP agensh_urgent_waiting Urgent items stored in the last hour that their worker has not been shown yet (all, and by kind).\n# TYPE agensh_urgent_waiting gauge\nagensh_urgent_waiting {}",
        summary.waiting_total()
    );
    for (kind, n) in &summary.waiting {
        let _ = writeln!(out, "agensh_urgent_waiting{{kind=\"{kind}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "# HELP agensh_presented_wait_seconds Time from an event's storing to its first showing to its worker, by kind, over the last hour's presentations.\n# TYPE agensh_presented_wait_seconds summary"
    );
    for l in &summary.presented {
        let kind = &l.kind;
        for (q, ms) in [("0.5", l.p50_ms), ("0.99", l.p99_ms)] {
            let _ = writeln!(
                out,
                "agensh_presented_wait_seconds{{kind=\"{kind}\",quantile=\"{q}\"}} {}",
                ms as f64 / 1000.0
            );
        }
        let _ = writeln!(
            out,
            "agensh_presented_wait_seconds_count{{kind=\"{kind}\"}} {}",
            l.samples
        );
    }
    let _ = writeln!(
        out,
        "# HELP agensh_unseen_notices_total Senders told that their urgent direct message was not seen in time (hub.unseen_notice_secs).\n# TYPE agensh_unseen_notices_total counter\nagensh_unseen_notices_total {}",
        d.notices.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        out,
        "# HELP agensh_receipt_passes_total Passes of the hub over delivery receipts (senders' notices, the summary above).\n# TYPE agensh_receipt_passes_total counter\nagensh_receipt_passes_total {}",
        d.passes.load(Ordering::Relaxed)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_run_four_times_per_notice_wait_within_bounds() {
        assert_eq!(every(0), MOST_EVERY);
        assert_eq!(every(180), MOST_EVERY);
        assert_eq!(every(20), Duration::from_secs(5));
        assert_eq!(every(1), LEAST_EVERY);
    }

    #[test]
    fn the_metrics_list_waiting_items_and_times_by_kind() {
        let d = Delivery::default();
        *d.summary.lock().unwrap() = DeliverySummary {
            waiting: BTreeMap::from([("msg.dm".to_string(), 2), ("pr.review".to_string(), 1)]),
            presented: vec![KindLatency {
                kind: "msg.dm".into(),
                samples: 4,
                p50_ms: 1_500,
                p99_ms: 90_000,
            }],
        };
        let mut out = String::new();
        render_metrics(&mut out, &d);
        for line in [
            "agensh_urgent_waiting 3",
            "agensh_urgent_waiting{kind=\"msg.dm\"} 2",
            "agensh_presented_wait_seconds{kind=\"msg.dm\",quantile=\"0.5\"} 1.5",
            "agensh_presented_wait_seconds{kind=\"msg.dm\",quantile=\"0.99\"} 90",
            "agensh_presented_wait_seconds_count{kind=\"msg.dm\"} 4",
            "agensh_unseen_notices_total 0",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} in:\n{out}");
        }
    }
}
