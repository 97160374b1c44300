//! What the dashboard reads: the organization at a glance (`GET /api/v1/overview`), one
//! row per worker, and the frames of the live stream (`GET /api/v1/stream`).

use std::collections::BTreeMap;

use agensh_domain::event::Event;
use serde::{Deserialize, Serialize};

use crate::rest::{BudgetView, Stats};

/// One worker as the dashboard's table shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerRow {
    pub id: String,
    /// `starting`, `busy`, `idle`, `stalled`, `stopped` or `dead`.
    pub status: String,
    /// Which agent it runs, as its node reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The step of its turn (busy only), and since when (unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_since: Option<i64>,
    /// Its newest live claim: the record's id and its label (or text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_id: Option<String>,
    /// Unix ms of its last request to the hub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_activity: Option<i64>,
    /// Turns its node has reported.
    pub turns: u64,
    /// What its agent did last in its last finished turn, and when that turn ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_action: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_action_at: Option<i64>,
    /// Model tokens and dollars through the gateway.
    pub tokens: u64,
    pub cost_usd: f64,
    /// Restarts of its agent, as its node reported.
    pub restarts: u64,
    /// Its pull requests still open.
    pub open_prs: u64,
    /// Why the hub stopped it (a budget), while it stays stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_for: Option<String>,
}

/// How well the organization coordinates.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// Time from an event's commit to its delivery to the worker's node, over the last
    /// deliveries (`samples`), in ms.
    pub delivery_p50_ms: u64,
    pub delivery_p99_ms: u64,
    pub delivery_samples: u64,
    /// CLAIM records posted since the hub started, and those that overlapped another
    /// worker's live claim (duplicate work reported to its author).
    pub claims: u64,
    pub claim_overlaps: u64,
    /// Idle workers among those not stopped or dead (0 to 1).
    pub idle_share: f64,
    /// Pull requests open (waiting to merge).
    pub prs_waiting: u64,
    /// Urgent items (direct messages, reviews, notices …) stored in the last hour that their
    /// worker has not been shown yet.
    #[serde(default)]
    pub urgent_waiting: u64,
    /// Stored → presented times per kind, over the last hour's presentations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub presented: Vec<agensh_domain::receipt::KindLatency>,
}

/// The run's clock, when `agensh run` (or an operator) told the hub.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunClock {
    /// Unix ms the run began.
    pub started_at: i64,
    /// Unix ms the run ends; none: no deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ends_at: Option<i64>,
}

impl RunClock {
    /// The clock of a run that began at `started` and ends at `ends` (none: no limit).
    pub fn of(started: std::time::SystemTime, ends: Option<std::time::SystemTime>) -> Self {
        let ms = |t: std::time::SystemTime| {
            t.duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64)
        };
        RunClock {
            started_at: ms(started),
            ends_at: ends.map(ms),
        }
    }

    /// The clock of a run that starts now and lasts `hours` (0: no limit).
    pub fn from_now(hours: f64) -> Self {
        let now = std::time::SystemTime::now();
        let ends = (hours > 0.0).then(|| now + std::time::Duration::from_secs_f64(hours * 3600.0));
        RunClock::of(now, ends)
    }
}

/// One merge into `main`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Merge {
    pub pr: i64,
    pub author: String,
    /// Unix ms.
    pub at: i64,
}

/// One score of `main` by an evaluation (e.g. a ProgramBench checkpoint).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// Unix ms the scored commit was taken.
    pub at: i64,
    /// 0 to 1.
    pub score: f64,
    /// What scored it (e.g. `programbench kept`).
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// The organization at a glance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Overview {
    pub goal: String,
    /// Unix ms the overview was taken.
    pub now: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunClock>,
    /// Workers per state (every state present, 0 included).
    pub states: BTreeMap<String, u64>,
    pub stats: Stats,
    pub health: Health,
    /// Every merge into `main`, oldest first.
    pub merges: Vec<Merge>,
    pub scores: Vec<Score>,
    pub budget: BudgetView,
    /// The newest operator notices (deadline notices among them), newest last.
    pub notices: Vec<Event>,
    /// When the goal is met (`organization.done_when`), each condition's last check, and
    /// the economy: cost per merged PR, and what was spent after the goal (or the last
    /// merge).
    #[serde(default)]
    pub done: agensh_domain::goal::GoalStatus,
}

/// One frame of the live stream: what changed since the previous one. Its SSE `id` is
/// `cursor`; a client that reconnects with it as `Last-Event-ID` gets every event after it,
/// once.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Frame {
    /// The newest event included (or the newest there was, when none is).
    pub cursor: i64,
    /// Every event committed after the previous frame's cursor, oldest first.
    pub events: Vec<Event>,
    /// Workers whose row changed (all of them in the first frame of a connection).
    pub workers: Vec<WorkerRow>,
    /// Workers per state, when they changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub states: Option<BTreeMap<String, u64>>,
    /// Counts, when they changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<Stats>,
    /// Coordination health, when it changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<Health>,
    /// True on the first frame of a connection (a whole worker table), and when the
    /// client was too far behind: it should then reload what it shows.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reset: bool,
}

/// A one-time link to the dashboard (`POST /api/v1/dashboard/links`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DashboardLink {
    /// Open it in a browser once; it logs in and is spent.
    pub url: String,
    /// Unix ms after which it no longer works.
    pub expires_at: i64,
}

/// One finished turn of a worker, as its node reports it (`POST /api/v1/workers/{id}/turns`)
/// and the dashboard reads it (`GET /api/v1/workers/{id}/turns`). The node's turn log
/// (`.agensh/logs/<id>/turns.jsonl`) stays the full record; this is what fits a page. Its
/// limits are `agensh_domain::turn`'s.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnReport {
    /// The worker's turn number, from 1 (a report sent twice replaces the first).
    pub turn: u64,
    /// Unix ms the prompt was sent and the turn ended.
    pub started_at: i64,
    pub ended_at: i64,
    /// What the agent was sent, cut to 8 KiB at a character boundary with a marker that it
    /// was cut (`agensh_domain::turn::clip_prompt`).
    pub prompt: String,
    /// The seqs of the events the prompt carried (notices delivered).
    #[serde(default)]
    pub events: Vec<i64>,
    /// The tool calls the agent reported during the turn, in order; at most 200.
    #[serde(default)]
    pub tool_calls: Vec<ToolCallSummary>,
    /// Tool calls beyond the 200 listed.
    #[serde(default)]
    pub tool_calls_dropped: u64,
    /// The turn's tokens, as the agent reported them (0: not reported).
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    /// The agent's reason (`end_turn`, `max_tokens`, `cancelled`, …).
    pub stop_reason: String,
    /// The last tool the agent called, else the stop reason.
    #[serde(default)]
    pub last_action: String,
    /// Restarts of the worker's agent so far, as its node counts them.
    #[serde(default)]
    pub restarts: u64,
    /// Times so far its agent was killed by its memory limit (`run.worker_memory`; each
    /// also a restart), as its node counts them.
    #[serde(default)]
    pub memory_kills: u64,
}

/// One tool call of a turn.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallSummary {
    /// The tool (`claim`, `pr_merge`, `run`), or for an ACP agent the kind of a call that is
    /// not one of the organization's tools (`execute`, `edit`, `read`).
    pub name: String,
    /// What it worked on, as the agent titled it (`git push origin HEAD`, `src/lib.rs`).
    #[serde(default)]
    pub title: String,
    /// How it ended (`completed`, `failed`, `in_progress` when the turn ended first).
    #[serde(default)]
    pub status: String,
}
