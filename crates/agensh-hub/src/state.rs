//! Shared state of a running hub.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use agensh_domain::config::Config;
use agensh_process::Shutdown;
use agensh_store::Store;

use crate::clock::Clock;
use crate::metrics::Metrics;

/// Everything a handler needs; cloned cheaply into each request.
#[derive(Clone)]
pub struct AppState {
    pub inner: Arc<Inner>,
}

pub struct Inner {
    pub store: Arc<dyn Store>,
    /// The shared git repository, when the hub serves one.
    pub workspace: Option<agensh_workspace::Workspace>,
    pub config: Config,
    pub admin_token: String,
    /// token → worker id, loaded at start and kept current by `workers add`.
    pub tokens: RwLock<HashMap<String, String>>,
    /// node token → node name, loaded at start and kept current by `nodes add` and
    /// `nodes revoke`. A node token only registers its node (`auth::NodeCaller`).
    pub node_tokens: RwLock<HashMap<String, String>>,
    /// Last request time per worker, flushed to the store in batches.
    pub activity: Mutex<HashMap<String, i64>>,
    /// What each busy worker is doing in its turn, as its node last reported; in memory
    /// only (it is stale a few seconds later, so it is never worth a write).
    pub progress: Mutex<HashMap<String, agensh_domain::worker::WorkerProgress>>,
    /// Which agent each worker runs, as its node last reported (memory only).
    pub agents: Mutex<HashMap<String, String>>,
    pub metrics: Metrics,
    /// Pull requests being merged right now (one merge per PR at a time).
    pub merging: Mutex<std::collections::HashSet<i64>>,
    /// PR → the commit of its branch the gate last refused and `main` then: merging it
    /// again is refused at once until either moves (memory only: after a restart the gate
    /// runs once more).
    pub gate_refused: Mutex<HashMap<i64, (String, String)>>,
    /// Fires when the hub is shutting down; long-polls return at once.
    pub shutdown: Shutdown,
    /// Where every timestamp, lease and expiry check of the hub reads the time.
    pub clock: Arc<dyn Clock>,
    /// The model gateway: its upstreams and routes.
    pub gateway: crate::gateway::Gateway,
    /// Each worker's turn, counted from its node's reports (busy after anything else
    /// starts a turn), and whether it is busy now; memory only.
    pub turns: Mutex<HashMap<String, (u64, bool)>>,
    /// Which `Host` and `Origin` headers the hub answers (DNS rebinding).
    pub hosts: crate::origin::HostPolicy,
    /// Each worker's rates and quotas (`[limits]`).
    pub limiter: crate::limits::Limiter,
    /// One permit per `git http-backend` that may run (`hub.git_processes`); git
    /// requests wait in line for one.
    pub git_slots: Arc<tokio::sync::Semaphore>,
    /// Writes the hub does in the background (a model request's record, budget actions):
    /// shutdown waits for them, so what the hub answered is stored when it has stopped.
    pub background: Background,
    /// The dashboard's sessions, live feed and the figures only it shows.
    pub dashboard: crate::dashboard::Dashboard,
    /// The task pack's fragments (`organization.pack`), read by whoever started the hub
    /// (`RunningHub::set_pack`) and given to nodes on other hosts when they register.
    pub pack: RwLock<Vec<String>>,
    /// The organization's goal (`organization.done_when`) and its checks.
    pub goal: crate::goal::Goal,
    /// Delivery receipts' summary and the senders' notices ([`crate::receipts`]).
    pub delivery: crate::receipts::Delivery,
}

/// Background work a hub waits for when it shuts down.
#[derive(Default)]
pub struct Background {
    running: Arc<std::sync::atomic::AtomicUsize>,
    done: Arc<tokio::sync::Notify>,
}

impl Background {
    /// Runs `work` on the current runtime (nothing outside one).
    pub fn spawn(&self, work: impl std::future::Future<Output = ()> + Send + 'static) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        use std::sync::atomic::Ordering;
        self.running.fetch_add(1, Ordering::SeqCst);
        let (running, done) = (self.running.clone(), self.done.clone());
        rt.spawn(async move {
            work.await;
            if running.fetch_sub(1, Ordering::SeqCst) == 1 {
                done.notify_waiters();
            }
        });
    }

    /// Waits until no background work is left, for at most `limit`; whether none is.
    pub async fn drained(&self, limit: std::time::Duration) -> bool {
        use std::sync::atomic::Ordering;
        let wait = async {
            loop {
                let notified = self.done.notified();
                if self.running.load(Ordering::SeqCst) == 0 {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(limit, wait).await.is_ok()
    }
}

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.inner
    }
}

impl Inner {
    /// `text` with every token of the hub (the admin's, the workers') replaced: a gate's or
    /// a check's output may print its environment.
    pub fn redact_tokens(&self, text: &str) -> String {
        let mut out = text.replace(&self.admin_token, "[token redacted]");
        for token in self.tokens.read().expect("tokens lock").keys() {
            if out.contains(token.as_str()) {
                out = out.replace(token.as_str(), "[token redacted]");
            }
        }
        out
    }

    /// Unix milliseconds now, from the hub's clock.
    pub fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    /// The node whose token `token` is, if any.
    pub fn node_of(&self, token: &str) -> Option<String> {
        self.node_tokens
            .read()
            .expect("node tokens lock")
            .get(token)
            .cloned()
    }

    /// The token of `worker`, or `None` when no such worker is registered.
    pub fn token_of(&self, worker: &str) -> Option<String> {
        self.tokens
            .read()
            .expect("tokens lock")
            .iter()
            .find(|(_, w)| *w == worker)
            .map(|(t, _)| t.clone())
    }

    /// Every registered worker's id, in order.
    pub fn worker_ids(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .tokens
            .read()
            .expect("tokens lock")
            .values()
            .cloned()
            .collect();
        all.sort();
        all
    }

    /// The turn `worker` is in (or last was), when its node has reported one.
    pub fn turn_of(&self, worker: &str) -> Option<u64> {
        self.turns
            .lock()
            .expect("turns lock")
            .get(worker)
            .map(|(t, _)| *t)
            .filter(|t| *t > 0)
    }

    /// Notes a worker's reported status: busy after anything else is a new turn.
    pub fn note_status(&self, worker: &str, busy: bool) {
        let mut turns = self.turns.lock().expect("turns lock");
        let (turn, was_busy) = turns.entry(worker.to_string()).or_insert((0, false));
        if busy && !*was_busy {
            *turn += 1;
        }
        *was_busy = busy;
    }

    /// Notes that `worker` made a request now.
    pub fn touch(&self, worker: &str) {
        self.touch_many(std::iter::once(worker));
    }

    /// Notes that requests were made for `workers` now.
    pub fn touch_many<'a>(&self, workers: impl Iterator<Item = &'a str>) {
        let now = self.now();
        let mut activity = self.activity.lock().expect("activity lock");
        for w in workers {
            activity.insert(w.to_string(), now);
        }
    }

    /// Writes the noted activity to the store.
    pub async fn flush_activity(&self) {
        let batch: Vec<(String, i64)> = self
            .activity
            .lock()
            .expect("activity lock")
            .drain()
            .collect();
        if !batch.is_empty() {
            if let Err(e) = self.store.touch_workers(batch).await {
                tracing::warn!("could not record worker activity: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn shutdown_waits_for_background_work() {
        let b = Background::default();
        assert!(
            b.drained(Duration::from_millis(10)).await,
            "nothing to wait for"
        );
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        b.spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            flag.store(true, Ordering::SeqCst);
        });
        assert!(b.drained(Duration::from_secs(5)).await);
        assert!(done.load(Ordering::SeqCst), "the work ran to its end first");
        b.spawn(tokio::time::sleep(Duration::from_secs(60)));
        assert!(
            !b.drained(Duration::from_millis(50)).await,
            "a bounded wait"
        );
    }
}
