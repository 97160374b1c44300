//! Workers: identity and status as the hub sees them.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::record::Record;

/// Most workers one `workers add` call creates.
pub const ADD_LIMIT: usize = 4_096;

/// Most workers one request for many workers may name (a node's status report and its
/// event poll: `PUT /workers/status`, `POST /events/poll`).
pub const BATCH_LIMIT: usize = 4_096;

/// The error for a worker id that names no worker. It says what to do in words a model and
/// a person both act on; the command line adds its own command (`agensh workers list`).
pub fn unknown_worker(id: &str) -> Error {
    Error::not_found(
        "unknown_worker",
        format!(
            "there is no worker \"{}\" — list the workers to see their ids",
            crate::ids::truncate_for_message(id)
        ),
    )
}

/// Refuses a request for many workers that names none or more than [`BATCH_LIMIT`].
pub fn check_batch(n: usize) -> Result<()> {
    if n == 0 {
        return Err(Error::invalid(
            "no_workers",
            "`workers` is empty — name at least one worker",
        ));
    }
    if n > BATCH_LIMIT {
        return Err(Error::invalid(
            "too_many_workers",
            format!("{n} workers in one request; the limit is {BATCH_LIMIT} — split them over several requests"),
        ));
    }
    Ok(())
}

/// What a busy worker is doing in the middle of a turn, as its node last reported: the
/// live view and `agensh status` show it, so a turn of several minutes shows life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerProgress {
    /// The current step, e.g. `model request 3 (1,204 tokens in)` or
    /// `run: python3 -m unittest`.
    pub step: String,
    /// Unix ms when the step began.
    pub since: i64,
    /// Tokens (prompt and generated) the current turn has used so far.
    pub tokens: u64,
    /// Generated tokens per second of the last model reply (0 before the first).
    #[serde(default)]
    pub tokens_per_sec: f64,
}

/// One worker's status in a report for many workers (`PUT /workers/status`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    pub id: String,
    /// The worker's token; needed unless the request's own token is the admin's or this
    /// worker's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// One of [`WorkerStatus::ALL`], as text.
    pub status: String,
    /// What the worker is doing in its turn; none outside a turn (the hub forgets the last).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<WorkerProgress>,
    /// Which agent the worker runs, on which model (e.g. `claude (… 0.49.0) on m at URL`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

/// The body of `PUT /workers/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReports {
    pub workers: Vec<StatusReport>,
}

/// What a worker is doing, as its node last reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkerStatus {
    Starting,
    Busy,
    Idle,
    /// Idle, and its last turns changed nothing: its continue prompts back off and a board
    /// record no longer wakes it (the node's `parking`).
    Parked,
    Stalled,
    Stopped,
    Dead,
}

impl WorkerStatus {
    pub const ALL: [WorkerStatus; 7] = [
        WorkerStatus::Starting,
        WorkerStatus::Busy,
        WorkerStatus::Idle,
        WorkerStatus::Parked,
        WorkerStatus::Stalled,
        WorkerStatus::Stopped,
        WorkerStatus::Dead,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WorkerStatus::Starting => "starting",
            WorkerStatus::Busy => "busy",
            WorkerStatus::Idle => "idle",
            WorkerStatus::Parked => "parked",
            WorkerStatus::Stalled => "stalled",
            WorkerStatus::Stopped => "stopped",
            WorkerStatus::Dead => "dead",
        }
    }

    pub fn parse(s: &str) -> Result<Self> {
        WorkerStatus::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(
                    "bad_status",
                    format!(
                        "unknown worker status \"{}\" — use starting, busy, idle, parked, stalled, stopped or dead",
                        crate::ids::truncate_for_message(s)
                    ),
                )
            })
    }
}

/// A worker as listed: status, live claims, last activity. Never its token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerInfo {
    pub id: String,
    pub status: WorkerStatus,
    /// What it is doing in its turn, as its node last reported (kept in the hub's memory,
    /// not stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<WorkerProgress>,
    /// Which agent it runs, on which model, as its node last reported (kept in the hub's
    /// memory, not stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Why the hub stopped it (a budget spent), while it stays stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_for: Option<String>,
    /// Live CLAIM records.
    pub claims: Vec<Record>,
    /// Unix ms of the last request made as this worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_activity: Option<i64>,
    pub created_at: i64,
}

/// A new worker with its secret token, as `workers add` returns it to the admin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewWorker {
    pub id: String,
    pub token: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_names_one_to_batch_limit_workers() {
        assert_eq!(check_batch(0).unwrap_err().code, "no_workers");
        assert!(check_batch(1).is_ok());
        assert!(check_batch(BATCH_LIMIT).is_ok());
        assert_eq!(
            check_batch(BATCH_LIMIT + 1).unwrap_err().code,
            "too_many_workers"
        );
    }

    #[test]
    fn a_status_report_carries_progress_and_reads_without_it() {
        let report = StatusReport {
            id: "w0001".into(),
            token: None,
            status: "busy".into(),
            progress: Some(WorkerProgress {
                step: "model request 3 (1,204 tokens in)".into(),
                since: 1_700_000_000_000,
                tokens: 2_408,
                tokens_per_sec: 9.5,
            }),
            agent: Some("claude on m1".into()),
        };
        let text = serde_json::to_string(&report).unwrap();
        assert_eq!(serde_json::from_str::<StatusReport>(&text).unwrap(), report);
        let old: StatusReport = serde_json::from_str(r#"{"id":"w0001","status":"idle"}"#).unwrap();
        assert_eq!(old.progress, None);
        assert!(!serde_json::to_string(&old).unwrap().contains("progress"));
    }
}
