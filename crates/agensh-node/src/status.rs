//! The node's status reports: the latest status of each of its workers, and what a busy
//! one is doing in its turn, go to the hub in one request (`PUT /workers/status`) at most
//! every [`REPORT_EVERY`], instead of one request per change — a post that starts and ends
//! a turn on every worker would otherwise cost the hub two requests per worker.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use agensh_client::Client;
use agensh_domain::worker::{StatusReport, WorkerProgress, WorkerStatus, BATCH_LIMIT};
use tokio::sync::{mpsc, oneshot};

/// How long changes are gathered before they are sent together.
pub const REPORT_EVERY: Duration = Duration::from_millis(200);

/// A handle to the node's status reporter; clones share it. The reporter stops when the
/// last handle is dropped, after sending what it has.
#[derive(Clone)]
pub struct StatusReporter {
    tx: mpsc::UnboundedSender<Msg>,
}

enum Msg {
    Set {
        id: String,
        token: String,
        status: WorkerStatus,
    },
    Progress {
        id: String,
        progress: Option<WorkerProgress>,
    },
    Agent {
        id: String,
        agent: String,
    },
    Flush(oneshot::Sender<()>),
}

impl StatusReporter {
    /// Starts the reporter for the hub of `hub` (its token is not used: each request is
    /// made with the token of the first worker it reports, and carries every worker's own).
    pub fn start(hub: Client) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(report_loop(hub, rx));
        StatusReporter { tx }
    }

    /// Notes `status` as the latest of worker `id` (whose token is `token`), with no step;
    /// it reaches the hub within [`REPORT_EVERY`].
    pub fn set(&self, id: &str, token: &str, status: WorkerStatus) {
        let _ = self.tx.send(Msg::Set {
            id: id.to_string(),
            token: token.to_string(),
            status,
        });
    }

    /// Notes what worker `id` is doing in its turn (none: nothing to show); it goes with
    /// the worker's latest status. Ignored for a worker whose status was never set.
    pub fn progress(&self, id: &str, progress: Option<WorkerProgress>) {
        let _ = self.tx.send(Msg::Progress {
            id: id.to_string(),
            progress,
        });
    }

    /// Notes which agent (and model) worker `id` runs; it goes with each of its reports.
    pub fn agent(&self, id: &str, agent: String) {
        let _ = self.tx.send(Msg::Agent {
            id: id.to_string(),
            agent,
        });
    }

    /// Sends every status noted so far at once, and waits until the hub has them (or the
    /// attempt failed, which is logged).
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Flush(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

async fn report_loop(hub: Client, mut rx: mpsc::UnboundedReceiver<Msg>) {
    // Each worker's latest report; only those changed since the last request go again.
    let mut known = Known::default();
    let mut changed = BTreeSet::new();
    let mut flushed: Vec<oneshot::Sender<()>> = Vec::new();
    while let Some(first) = rx.recv().await {
        note(first, &mut known, &mut changed, &mut flushed);
        let gather = tokio::time::sleep(REPORT_EVERY);
        tokio::pin!(gather);
        while flushed.is_empty() {
            tokio::select! {
                _ = &mut gather => break,
                msg = rx.recv() => match msg {
                    Some(m) => note(m, &mut known, &mut changed, &mut flushed),
                    None => break,
                },
            }
        }
        while let Ok(m) = rx.try_recv() {
            note(m, &mut known, &mut changed, &mut flushed);
        }
        let reports: Vec<StatusReport> = std::mem::take(&mut changed)
            .into_iter()
            .filter_map(|id| known.get(&id).cloned())
            .collect();
        send(&hub, reports).await;
        for done in flushed.drain(..) {
            let _ = done.send(());
        }
    }
}

/// Each worker's latest report, and the agent of each worker (set before its first status).
#[derive(Default)]
struct Known {
    reports: BTreeMap<String, StatusReport>,
    agents: BTreeMap<String, String>,
}

impl Known {
    fn get(&self, id: &str) -> Option<&StatusReport> {
        self.reports.get(id)
    }
}

fn note(
    msg: Msg,
    known: &mut Known,
    changed: &mut BTreeSet<String>,
    flushed: &mut Vec<oneshot::Sender<()>>,
) {
    match msg {
        Msg::Set { id, token, status } => {
            let report = StatusReport {
                id: id.clone(),
                token: Some(token),
                status: status.as_str().to_string(),
                progress: None,
                agent: known.agents.get(&id).cloned(),
            };
            known.reports.insert(id.clone(), report);
            changed.insert(id);
        }
        Msg::Progress { id, progress } => {
            if let Some(report) = known.reports.get_mut(&id) {
                report.progress = progress;
                changed.insert(id);
            }
        }
        Msg::Agent { id, agent } => {
            if let Some(report) = known.reports.get_mut(&id) {
                report.agent = Some(agent.clone());
                changed.insert(id.clone());
            }
            known.agents.insert(id, agent);
        }
        Msg::Flush(done) => flushed.push(done),
    }
}

async fn send(hub: &Client, reports: Vec<StatusReport>) {
    for chunk in reports.chunks(BATCH_LIMIT) {
        let token = chunk[0].token.as_deref().unwrap_or_default();
        if let Err(e) = hub.with_token(token).set_statuses(chunk).await {
            tracing::warn!(
                "could not report the status of {} worker(s) ({} …): {e}",
                chunk.len(),
                chunk[0].id
            );
        }
    }
}
