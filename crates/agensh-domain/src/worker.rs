//! Workers: identity and status as the hub sees them.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::record::Record;

/// Most workers one `workers add` call creates.
pub const ADD_LIMIT: usize = 4_096;

/// Most workers one request for many workers may name (a node's status report and its
/// event poll: `PUT /workers/status`, `POST /events/poll`).
pub const BATCH_LIMIT: usize = 4_096;

/// One worker's status in a report for many workers (`PUT /workers/status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusReport {
    pub id: String,
    /// The worker's token; needed unless the request's own token is the admin's or this
    /// worker's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// One of [`WorkerStatus::ALL`], as text.
    pub status: String,
}

/// The body of `PUT /workers/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    Stalled,
    Stopped,
    Dead,
}

impl WorkerStatus {
    pub const ALL: [WorkerStatus; 6] = [
        WorkerStatus::Starting,
        WorkerStatus::Busy,
        WorkerStatus::Idle,
        WorkerStatus::Stalled,
        WorkerStatus::Stopped,
        WorkerStatus::Dead,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WorkerStatus::Starting => "starting",
            WorkerStatus::Busy => "busy",
            WorkerStatus::Idle => "idle",
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
                        "unknown worker status \"{}\" — use starting, busy, idle, stalled, stopped or dead",
                        crate::ids::truncate_for_message(s)
                    ),
                )
            })
    }
}

/// A worker as listed: status, live claims, last activity. Never its token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    pub id: String,
    pub status: WorkerStatus,
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
