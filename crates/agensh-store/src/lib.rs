//! The hub's durable store.
//!
//! [`Store`] is the interface the hub talks to; [`sqlite::SqliteStore`] is the embedded
//! implementation (one file, WAL, FTS5), [`postgres::PostgresStore`] the one on a
//! PostgreSQL server that several hubs can share; [`open_store`] opens either. Every
//! method that changes state returns only after the change is durable, and publishes the
//! events it created to [`Store::subscribe`] after they are committed, never before.

use std::sync::Arc;

use agensh_domain::event::{Event, NewEvent};
use agensh_domain::issue::{Issue, IssueComment, IssueState, NewIssue};
use agensh_domain::message::{Message, NewMessage};
use agensh_domain::node::{NewNode, NodeInfo};
use agensh_domain::pr::{Comment, NewPr, PrState, PullRequest, Review, Verdict};
use agensh_domain::query::Query;
use agensh_domain::receipt::{Receipt, Via};
use agensh_domain::record::{Appended, NewRecord, Record};
use agensh_domain::view::ViewEntry;
use agensh_domain::worker::{NewWorker, WorkerInfo, WorkerStatus};
use agensh_domain::Result;
use tokio::sync::broadcast;

pub mod admin;
mod common;
pub mod migrate;
pub mod postgres;
pub mod sqlite;
pub mod transfer;
pub mod write_stats;
mod writer_thread;

pub use agensh_protocol::rest::{ModelRequest, ModelUsage, QueueState, Stats, Unfolded};
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;

/// Whether `spec` names a PostgreSQL store (`postgres://…` or `postgresql://…`) rather
/// than a SQLite file.
pub fn is_postgres_url(spec: &str) -> bool {
    spec.starts_with("postgres://") || spec.starts_with("postgresql://")
}

/// Opens the store `spec` names: a PostgreSQL URL, or else the path of a SQLite file (made
/// when missing). Errors say what to do (a bad URL, a server that does not answer).
pub async fn open_store(spec: &str) -> Result<Arc<dyn Store>> {
    if is_postgres_url(spec) {
        Ok(Arc::new(PostgresStore::connect(spec).await?))
    } else {
        Ok(Arc::new(SqliteStore::open(std::path::Path::new(spec))?))
    }
}

/// Which messages `read_messages` returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageQuery {
    /// Only messages the reader has not read yet (and mark them read).
    pub unread: bool,
    /// Only this channel (`#name`) or this worker's direct conversation.
    pub with: Option<String>,
    /// At most this many, newest last.
    pub limit: usize,
    /// Only messages older than this sequence number (paging back through history).
    pub before: Option<i64>,
}

/// Whose issues `list_issues` returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AssigneeFilter {
    /// Issues nobody is assigned.
    Nobody,
    /// Issues assigned to this worker.
    Worker(String),
}

/// Which issues `list_issues` returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IssueQuery {
    /// Only issues in this state (`None`: both).
    pub state: Option<IssueState>,
    /// Only issues with this label.
    pub label: Option<String>,
    /// Only issues assigned to this worker, or to nobody.
    pub assignee: Option<AssigneeFilter>,
    /// Only issues numbered below this (paging back).
    pub before: Option<i64>,
    /// At most this many, newest first.
    pub limit: usize,
}

/// The refusal of a store that keeps no nodes yet (the trait's default node methods).
fn no_nodes() -> agensh_domain::Error {
    agensh_domain::Error::invalid(
        "nodes_unsupported",
        "this hub's store does not keep nodes yet — run the hub on the SQLite store to use nodes on other hosts",
    )
}

/// The store interface: SQLite (`sqlite/`) and PostgreSQL (`postgres/`) behind one trait.
#[async_trait::async_trait]
pub trait Store: Send + Sync + 'static {
    /// The admin token, created on first use and kept for the life of the store.
    async fn admin_token(&self) -> Result<String>;

    /// Creates `count` workers with fresh ids and secret tokens.
    async fn add_workers(&self, count: usize, now: i64) -> Result<Vec<NewWorker>>;
    /// Every worker's (id, token), for the hub's authentication cache.
    async fn worker_tokens(&self) -> Result<Vec<(String, String)>>;
    /// Workers with status, live claims and last activity, in id order.
    async fn list_workers(&self, now: i64) -> Result<Vec<WorkerInfo>>;
    /// Sets a worker's status.
    async fn set_worker_status(&self, id: &str, status: WorkerStatus) -> Result<()>;
    /// Sets many workers' statuses in one transaction (a node reports its workers
    /// together); an unknown id fails the whole call and sets nothing.
    async fn set_worker_statuses(&self, statuses: Vec<(String, WorkerStatus)>) -> Result<()> {
        for (id, status) in statuses {
            self.set_worker_status(&id, status).await?;
        }
        Ok(())
    }
    /// Records last-activity times (batched by the hub).
    async fn touch_workers(&self, activity: Vec<(String, i64)>) -> Result<()>;

    // Nodes (DESIGN §8). A store without them (a new implementation, until it has them)
    // knows no node token and refuses the rest with `nodes_unsupported`.

    /// Issues a node (DESIGN §8): `name` (`node::validate_name`), a fresh secret token and
    /// how many workers it may run (`node::check_allowed`). Refuses a name taken
    /// (`node_exists`).
    async fn add_node(&self, name: &str, workers: usize, now: i64) -> Result<NewNode> {
        let _ = (name, workers, now);
        Err(no_nodes())
    }
    /// Every node with how many workers it may run and the workers it was given, in name
    /// order (never a token).
    async fn list_nodes(&self) -> Result<Vec<NodeInfo>> {
        Err(no_nodes())
    }
    /// Every node's (name, token), for the hub's authentication cache.
    async fn node_tokens(&self) -> Result<Vec<(String, String)>> {
        Ok(Vec::new())
    }
    /// Gives node `name` its first `workers` workers with their tokens, in one write: those
    /// it was given before, then workers no node has (oldest first), then new ones
    /// ([`Store::add_workers`]' ids and tokens). The same workers on every call; never more
    /// than the node may run (`too_many_workers`, `node::check_register`); `unknown_node`
    /// for a name without a node. Notes when it registered.
    async fn register_node(&self, name: &str, workers: usize, now: i64) -> Result<Vec<NewWorker>> {
        let _ = (name, workers, now);
        Err(no_nodes())
    }
    /// Removes node `name` and its token, in one write: its workers belong to no node any
    /// more and get new tokens (returned), so neither the node token nor the worker tokens
    /// it was given work again. `unknown_node` for a name without a node.
    async fn revoke_node(&self, name: &str) -> Result<Vec<NewWorker>> {
        let _ = name;
        Err(no_nodes())
    }

    /// Validates and appends a record. A CLAIM gets a lease (`default_lease_secs` unless it
    /// asks for one) and the answer lists other authors' overlapping live claims.
    async fn append_record(
        &self,
        author: &str,
        record: NewRecord,
        now: i64,
        default_lease_secs: u64,
    ) -> Result<Appended>;
    /// The recent view, newest first, at most `cap` entries.
    async fn recent_view(&self, now: i64, cap: usize) -> Result<Vec<ViewEntry>>;
    /// The recent-view entries `worker` has not read yet; marks them read.
    async fn board_unread(&self, worker: &str, now: i64, cap: usize) -> Result<Vec<ViewEntry>>;
    /// Records matching `query` over all history, newest first, below `before` if given.
    async fn grep(&self, query: &Query, before: Option<i64>, limit: usize) -> Result<Vec<Record>>;
    /// One record whole, with what superseded or invalidated it.
    async fn unfold(&self, seq: i64) -> Result<Unfolded>;
    /// Extends `worker`'s live claim `seq` to `lease_secs` from now.
    async fn renew_claim(
        &self,
        worker: &str,
        seq: i64,
        lease_secs: u64,
        now: i64,
    ) -> Result<Record>;
    /// Ends `worker`'s live claim `seq`.
    async fn release_claim(&self, worker: &str, seq: i64, now: i64) -> Result<Record>;

    /// Stores a validated message and queues its event.
    async fn post_message(&self, from: &str, message: NewMessage, now: i64) -> Result<Message>;
    /// Messages visible to `reader` (channels, and its direct messages), oldest first.
    async fn read_messages(&self, reader: &str, query: MessageQuery) -> Result<Vec<Message>>;

    /// Queues an event; `None` when an event with the same dedup key was queued before.
    async fn enqueue(&self, event: NewEvent, now: i64) -> Result<Option<Event>>;
    /// `worker`'s unacknowledged events with `seq > after`, oldest first.
    async fn pending_events(&self, worker: &str, after: i64, limit: usize) -> Result<Vec<Event>>;
    /// [`Store::pending_events`] for many workers, `(worker, after)` each, answered in the
    /// same order (a node polls for all its idle workers at once). An event read once is
    /// shared by every worker it is for, not copied: a broadcast is in all their answers.
    async fn pending_events_many(
        &self,
        queries: Vec<(String, i64)>,
        limit: usize,
    ) -> Result<Vec<Vec<Arc<Event>>>> {
        let mut out = Vec::with_capacity(queries.len());
        for (worker, after) in queries {
            let events = self.pending_events(&worker, after, limit).await?;
            out.push(events.into_iter().map(Arc::new).collect());
        }
        Ok(out)
    }
    /// Acknowledges events of `worker` at `now`; returns how many were newly acknowledged
    /// in its queue. In the same transaction each of them with receipts
    /// ([`agensh_domain::receipt::has_receipts`]) is recorded acknowledged, whether it was
    /// still queued or not (the first acknowledgement stays); one never recorded presented
    /// counts as presented via prompt at `now`.
    async fn ack_events(&self, worker: &str, seqs: Vec<i64>, now: i64) -> Result<usize>;
    /// [`Store::ack_events`] for many workers: one result per worker, in order. Each
    /// worker's acks are applied all or nothing; one worker's refusal (`not_your_event`)
    /// leaves the others' in place.
    async fn ack_events_many(
        &self,
        acks: Vec<(String, Vec<i64>)>,
        now: i64,
    ) -> Result<Vec<Result<usize>>> {
        let mut out = Vec::with_capacity(acks.len());
        for (worker, seqs) in acks {
            out.push(self.ack_events(&worker, seqs, now).await);
        }
        Ok(out)
    }
    /// The state of `worker`'s queue.
    async fn queue_state(&self, worker: &str) -> Result<QueueState>;

    // delivery receipts (agensh_domain::receipt)

    /// Records that `worker` was shown its events `seqs` via `via` at `now`: each event of
    /// its queue with receipts gets its presentation, unless it had one (the first
    /// presentation wins); numbers of other events are left out. With `dequeue`, the urgent
    /// ones among `seqs` also leave its queue as [`Store::ack_events`] takes them (refused
    /// the same way, `not_your_event`), their receipts staying presented: the turn that
    /// carries them has not completed. Returns how many were newly presented.
    async fn present_events(
        &self,
        worker: &str,
        seqs: Vec<i64>,
        via: Via,
        dequeue: bool,
        now: i64,
    ) -> Result<usize>;
    /// The receipts recorded for the events `seqs` (each recipient shown one), by event
    /// then worker; a recipient without one was not shown it yet.
    async fn receipts(&self, seqs: Vec<i64>) -> Result<Vec<Receipt>>;
    /// Message `seq` and the event that carried it (the one whose dedup key is `msg:M{seq}`);
    /// none when there is no such message.
    async fn message_event(&self, seq: i64) -> Result<Option<(Message, Option<Event>)>>;
    /// Urgent events for one worker (`target`) with receipts, stored at or after `from` and
    /// before `to`, that their worker has neither been shown nor acknowledged, oldest first
    /// (by the time they were stored, then by number), at most `limit`.
    async fn unseen_events(&self, from: i64, to: i64, limit: usize) -> Result<Vec<Event>>;
    /// The events in `worker`'s queue that interrupt a turn
    /// ([`agensh_domain::receipt::interrupts`]), stored before `before` and neither
    /// presented to it nor acknowledged, oldest first, at most `limit`; broadcasts included.
    async fn overdue_events(&self, worker: &str, before: i64, limit: usize) -> Result<Vec<Event>>;
    /// The receipts presented at or after `since`, newest first, at most `limit`.
    async fn receipts_presented_since(&self, since: i64, limit: usize) -> Result<Vec<Receipt>>;

    // pull requests

    /// Opens a validated PR from a branch in `author`'s namespace, numbered 1, 2, 3, …
    /// Refuses a second open PR for the same branch (`pr_exists`). Emits `pr.opened`.
    async fn open_pr(&self, author: &str, pr: NewPr, now: i64) -> Result<PullRequest>;
    /// At most `limit` PRs, newest first, optionally only in `state` and by `author`.
    /// Their `reviews` and `comments` are left empty; [`Store::get_pr`] has them.
    async fn list_prs(
        &self,
        state: Option<PrState>,
        author: Option<String>,
        limit: usize,
    ) -> Result<Vec<PullRequest>>;
    /// One PR with its reviews and comments, oldest first (`unknown_pr` if there is none).
    async fn get_pr(&self, number: i64) -> Result<PullRequest>;
    /// Reviews an open PR of another worker. Its author gets an urgent `pr.review`;
    /// everyone else a normal `pr.reviewed`.
    /// `commit` is the branch's commit that was reviewed.
    async fn review_pr(
        &self,
        number: i64,
        reviewer: &str,
        verdict: Verdict,
        text: &str,
        commit: Option<&str>,
        now: i64,
    ) -> Result<Review>;
    /// Comments on a PR in any state. Emits `pr.commented`.
    async fn comment_pr(&self, number: i64, author: &str, text: &str, now: i64) -> Result<Comment>;
    /// Closes an open PR without merging; only its author or the admin may. Emits `pr.closed`.
    async fn close_pr(&self, number: i64, by: &str, now: i64) -> Result<PullRequest>;
    /// Records that the hub merged an open PR as `merge_commit`. Emits `pr.merged`, and
    /// `main.updated` when `main_moved` (not when the branch was on `main` already). In
    /// the same write, every open issue its title or body closes (`closes #N`,
    /// `issue::closes_refs`) is closed by `pr#<number>`.
    async fn mark_merged(
        &self,
        number: i64,
        by: &str,
        merge_commit: &str,
        main_moved: bool,
        now: i64,
    ) -> Result<PullRequest>;
    /// Tells the PR's author (urgently) that `by` could not merge it and why; stores no
    /// state, and sends nothing when the author itself tried.
    async fn merge_failed(
        &self,
        number: i64,
        by: &str,
        reason: serde_json::Value,
        now: i64,
    ) -> Result<()>;
    /// Announces a push to `main` made outside a merge (`main.updated`, once per commit).
    async fn main_updated(&self, by: &str, commit: &str, now: i64) -> Result<()>;

    // issues

    /// Opens a validated issue as `author` (a worker id or `admin`), numbered 1, 2, 3, …
    /// Emits `issue.opened` to everyone.
    async fn open_issue(&self, author: &str, issue: NewIssue, now: i64) -> Result<Issue>;
    /// Opens every issue of `issues` in order, or none when one is refused (the error names
    /// it by its place, from 1): `agensh init --issues`.
    async fn open_issues(
        &self,
        author: &str,
        issues: Vec<NewIssue>,
        now: i64,
    ) -> Result<Vec<Issue>>;
    /// Issues newest first as `query` filters them, with their labels and comment counts;
    /// their `comments` are left empty ([`Store::get_issue`] has them).
    async fn list_issues(&self, query: IssueQuery) -> Result<Vec<Issue>>;
    /// One issue with its comments, oldest first (`unknown_issue` if there is none).
    async fn get_issue(&self, number: i64) -> Result<Issue>;
    /// Comments on an issue in any state. Emits `issue.commented` to those involved.
    async fn comment_issue(
        &self,
        number: i64,
        author: &str,
        text: &str,
        now: i64,
    ) -> Result<IssueComment>;
    /// Adds and removes labels (anyone may); the result has at most
    /// `issue::LABELS_LIMIT`.
    async fn label_issue(
        &self,
        number: i64,
        add: Vec<String>,
        remove: Vec<String>,
        now: i64,
    ) -> Result<Issue>;
    /// Sets or clears the assignee as `by` (`issue::check_assign`: with `admin_rights`
    /// anyone, else only `by` itself — a claim). Emits `issue.assigned` when it changed.
    async fn assign_issue(
        &self,
        number: i64,
        by: &str,
        admin_rights: bool,
        assignee: Option<String>,
        now: i64,
    ) -> Result<Issue>;
    /// Closes an open issue (its author, assignee or the admin). Emits `issue.closed`.
    async fn close_issue(
        &self,
        number: i64,
        by: &str,
        admin_rights: bool,
        now: i64,
    ) -> Result<Issue>;
    /// Reopens a closed issue (its author, assignee or the admin). Emits `issue.reopened`.
    async fn reopen_issue(
        &self,
        number: i64,
        by: &str,
        admin_rights: bool,
        now: i64,
    ) -> Result<Issue>;

    /// Counts of workers, records, messages, events and PRs by state.
    async fn stats(&self) -> Result<Stats>;

    /// Records one model request of the gateway, durably before it returns.
    async fn record_model_request(&self, r: ModelRequest) -> Result<()>;
    /// Usage totals per worker and model (of `worker` only, when given), in worker and
    /// model order.
    async fn model_usage(&self, worker: Option<&str>) -> Result<Vec<ModelUsage>>;
    /// Usage totals per worker and model of the requests made (started) at or after `at`
    /// (Unix ms): what was spent after the goal was met. A request on its way when the goal
    /// was met counts before it: it was made for the work.
    async fn model_usage_since(&self, at: i64) -> Result<Vec<ModelUsage>>;
    /// A piece of the hub's own state kept under `key` (the goal's checks), as the hub
    /// wrote it; none when it never did.
    async fn hub_state(&self, key: &str) -> Result<Option<String>>;
    /// Sets the hub's state under `key`, durably before it returns.
    async fn set_hub_state(&self, key: &str, value: &str) -> Result<()>;
    /// Sets the budget of `scope` (`*`: every worker's default, `organization`, or a
    /// worker's id), durably before it returns.
    async fn set_budget(&self, scope: &str, limits: agensh_domain::budget::Limits) -> Result<()>;
    /// Every budget set with [`Store::set_budget`], in scope order.
    async fn budgets(&self) -> Result<Vec<(String, agensh_domain::budget::Limits)>>;

    /// Stores one finished turn of `worker` as its node reported it; a report of a turn
    /// already stored replaces it. Durable before it returns.
    async fn record_turn(
        &self,
        worker: &str,
        report: &agensh_protocol::dashboard::TurnReport,
    ) -> Result<()>;
    /// The worker's turns numbered below `before` (all when none), newest first, at most
    /// `limit`.
    async fn turns(
        &self,
        worker: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<agensh_protocol::dashboard::TurnReport>>;

    /// Every event with a sequence number above `after`, whoever it is for, oldest first,
    /// at most `limit`: the operator's view of everything that happened (the dashboard's
    /// stream reads it to resume without gaps).
    async fn events_after(&self, after: i64, limit: usize) -> Result<Vec<Event>>;

    /// Events committed from now on, in commit order.
    fn subscribe(&self) -> broadcast::Receiver<Arc<Event>>;

    /// How long writes waited for the writer, ran and committed, when the store measures
    /// it (`/metrics` shows them).
    fn write_stats(&self) -> Option<write_stats::WriteStatsSnapshot> {
        None
    }
}
