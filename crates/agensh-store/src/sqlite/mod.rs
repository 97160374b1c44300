//! The embedded store: one SQLite file in WAL mode, FTS5 for grep.

mod board;
mod conn;
mod events;
pub mod fts;
mod issues;
mod messages;
pub mod migrate;
mod nodes;
mod prs;
mod receipts;
mod turns;
mod usage;
mod workers;

use std::path::Path;
use std::sync::Arc;

use agensh_domain::event::{Event, NewEvent};
use agensh_domain::issue::{Issue, IssueComment, NewIssue};
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

use crate::{IssueQuery, MessageQuery, QueueState, Store, Unfolded};
use conn::Db;

/// A connection to the store file at `path` as the store's own are set up (WAL, a busy
/// timeout), for `agensh store migrate` to read it.
pub(crate) fn conn_for_transfer(path: &Path) -> Result<rusqlite::Connection> {
    conn::open_conn(path)
}

/// How many committed events a slow subscriber may fall behind before it must re-read.
const BUS_CAPACITY: usize = 8_192;

/// The SQLite implementation of [`Store`].
pub struct SqliteStore {
    db: Arc<Db>,
    bus: broadcast::Sender<Arc<Event>>,
}

impl SqliteStore {
    /// Opens or creates the store file at `path`, applying the migrations it lacks
    /// ([`migrate::MIGRATIONS`]); refuses a store a newer agensh wrote.
    pub fn open(path: &Path) -> Result<Self> {
        let (bus, _) = broadcast::channel(BUS_CAPACITY);
        let db = Db::open(path, bus.clone())?;
        Ok(SqliteStore {
            db: Arc::new(db),
            bus,
        })
    }
}

#[async_trait::async_trait]
impl Store for SqliteStore {
    async fn admin_token(&self) -> Result<String> {
        self.db.write(|ctx| workers::admin_token(ctx.conn)).await
    }

    async fn add_workers(&self, count: usize, now: i64) -> Result<Vec<NewWorker>> {
        self.db
            .write(move |ctx| workers::add(ctx.conn, count, now))
            .await
    }

    async fn worker_tokens(&self) -> Result<Vec<(String, String)>> {
        self.db.read(workers::tokens).await
    }

    async fn add_node(&self, name: &str, workers: usize, now: i64) -> Result<NewNode> {
        let name = name.to_string();
        self.db
            .write(move |ctx| nodes::add(ctx.conn, &name, workers, now))
            .await
    }

    async fn list_nodes(&self) -> Result<Vec<NodeInfo>> {
        self.db.read(nodes::list).await
    }

    async fn node_tokens(&self) -> Result<Vec<(String, String)>> {
        self.db.read(nodes::tokens).await
    }

    async fn register_node(&self, name: &str, workers: usize, now: i64) -> Result<Vec<NewWorker>> {
        let name = name.to_string();
        self.db
            .write(move |ctx| nodes::register(ctx.conn, &name, workers, now))
            .await
    }

    async fn revoke_node(&self, name: &str) -> Result<Vec<NewWorker>> {
        let name = name.to_string();
        self.db
            .write(move |ctx| nodes::revoke(ctx.conn, &name))
            .await
    }

    async fn list_workers(&self, now: i64) -> Result<Vec<WorkerInfo>> {
        self.db.read(move |c| workers::list(c, now)).await
    }

    async fn set_worker_status(&self, id: &str, status: WorkerStatus) -> Result<()> {
        let id = id.to_string();
        self.db
            .write(move |ctx| workers::set_status(ctx.conn, &id, status))
            .await
    }

    async fn set_worker_statuses(&self, statuses: Vec<(String, WorkerStatus)>) -> Result<()> {
        self.db
            .write(move |ctx| workers::set_statuses(ctx.conn, &statuses))
            .await
    }

    async fn touch_workers(&self, activity: Vec<(String, i64)>) -> Result<()> {
        self.db
            .write(move |ctx| workers::touch(ctx.conn, &activity))
            .await
    }

    async fn append_record(
        &self,
        author: &str,
        record: NewRecord,
        now: i64,
        default_lease_secs: u64,
    ) -> Result<Appended> {
        let author = author.to_string();
        self.db
            .write(move |ctx| board::append(ctx, &author, record, now, default_lease_secs))
            .await
    }

    async fn recent_view(&self, now: i64, cap: usize) -> Result<Vec<ViewEntry>> {
        self.db
            .read(move |c| board::recent_view(c, now, cap, (0, i64::MAX), None))
            .await
    }

    async fn board_unread(&self, worker: &str, now: i64, cap: usize) -> Result<Vec<ViewEntry>> {
        let w = worker.to_string();
        let (cursor, top) = self.db.read(move |c| board::unread_bounds(c, &w)).await?;
        let w = worker.to_string();
        let entries = self
            .db
            .read(move |c| board::recent_view(c, now, cap, (cursor, top), Some(&w)))
            .await?;
        let w = worker.to_string();
        self.db
            .write(move |ctx| board::set_board_cursor(ctx.conn, &w, top))
            .await?;
        Ok(entries)
    }

    async fn grep(&self, query: &Query, before: Option<i64>, limit: usize) -> Result<Vec<Record>> {
        let fts = fts::match_expression(query);
        self.db
            .read(move |c| board::grep(c, &fts, before, limit))
            .await
    }

    async fn unfold(&self, seq: i64) -> Result<Unfolded> {
        self.db.read(move |c| board::unfold(c, seq)).await
    }

    async fn renew_claim(
        &self,
        worker: &str,
        seq: i64,
        lease_secs: u64,
        now: i64,
    ) -> Result<Record> {
        let w = worker.to_string();
        self.db
            .write(move |ctx| board::renew(ctx.conn, &w, seq, lease_secs, now))
            .await
    }

    async fn release_claim(&self, worker: &str, seq: i64, now: i64) -> Result<Record> {
        let w = worker.to_string();
        self.db
            .write(move |ctx| board::release(ctx.conn, &w, seq, now))
            .await
    }

    async fn post_message(&self, from: &str, message: NewMessage, now: i64) -> Result<Message> {
        let from = from.to_string();
        self.db
            .write(move |ctx| messages::post(ctx, &from, message, now))
            .await
    }

    async fn read_messages(&self, reader: &str, query: MessageQuery) -> Result<Vec<Message>> {
        let r = reader.to_string();
        if query.unread {
            self.db
                .write(move |ctx| messages::read(ctx.conn, &r, &query))
                .await
        } else {
            self.db.read(move |c| messages::read(c, &r, &query)).await
        }
    }

    async fn enqueue(&self, event: NewEvent, now: i64) -> Result<Option<Event>> {
        self.db.write(move |ctx| ctx.emit(&event, now)).await
    }

    async fn pending_events(&self, worker: &str, after: i64, limit: usize) -> Result<Vec<Event>> {
        let w = worker.to_string();
        self.db
            .read(move |c| events::pending(c, &w, after, limit))
            .await
    }

    async fn pending_events_many(
        &self,
        queries: Vec<(String, i64)>,
        limit: usize,
    ) -> Result<Vec<Vec<Arc<Event>>>> {
        self.db
            .read(move |c| events::pending_many(c, &queries, limit))
            .await
    }

    async fn ack_events_many(
        &self,
        acks: Vec<(String, Vec<i64>)>,
        now: i64,
    ) -> Result<Vec<Result<usize>>> {
        self.db
            .write(move |ctx| receipts::ack_many(ctx.conn, &acks, now))
            .await
    }

    async fn ack_events(&self, worker: &str, seqs: Vec<i64>, now: i64) -> Result<usize> {
        let w = worker.to_string();
        self.db
            .write(move |ctx| receipts::ack(ctx.conn, &w, &seqs, now))
            .await
    }

    async fn present_events(
        &self,
        worker: &str,
        seqs: Vec<i64>,
        via: Via,
        dequeue: bool,
        now: i64,
    ) -> Result<usize> {
        let w = worker.to_string();
        self.db
            .write(move |ctx| receipts::present(ctx.conn, &w, &seqs, via, dequeue, now))
            .await
    }

    async fn receipts(&self, seqs: Vec<i64>) -> Result<Vec<Receipt>> {
        self.db.read(move |c| receipts::of_events(c, &seqs)).await
    }

    async fn message_event(&self, seq: i64) -> Result<Option<(Message, Option<Event>)>> {
        self.db.read(move |c| receipts::message_event(c, seq)).await
    }

    async fn unseen_events(&self, from: i64, to: i64, limit: usize) -> Result<Vec<Event>> {
        self.db
            .read(move |c| receipts::unseen(c, from, to, limit))
            .await
    }

    async fn overdue_events(&self, worker: &str, before: i64, limit: usize) -> Result<Vec<Event>> {
        let w = worker.to_string();
        self.db
            .read(move |c| receipts::overdue(c, &w, before, limit))
            .await
    }

    async fn receipts_presented_since(&self, since: i64, limit: usize) -> Result<Vec<Receipt>> {
        self.db
            .read(move |c| receipts::presented_since(c, since, limit))
            .await
    }

    async fn events_after(&self, after: i64, limit: usize) -> Result<Vec<Event>> {
        self.db.read(move |c| events::after(c, after, limit)).await
    }

    async fn queue_state(&self, worker: &str) -> Result<QueueState> {
        let w = worker.to_string();
        self.db.read(move |c| events::queue_state(c, &w)).await
    }

    async fn open_pr(&self, author: &str, pr: NewPr, now: i64) -> Result<PullRequest> {
        let author = author.to_string();
        self.db
            .write(move |ctx| prs::open(ctx, &author, pr, now))
            .await
    }

    async fn list_prs(
        &self,
        state: Option<PrState>,
        author: Option<String>,
        limit: usize,
    ) -> Result<Vec<PullRequest>> {
        self.db
            .read(move |c| prs::list(c, state, author.as_deref(), limit))
            .await
    }

    async fn get_pr(&self, number: i64) -> Result<PullRequest> {
        self.db.read(move |c| prs::get(c, number)).await
    }

    async fn review_pr(
        &self,
        number: i64,
        reviewer: &str,
        verdict: Verdict,
        text: &str,
        commit: Option<&str>,
        now: i64,
    ) -> Result<Review> {
        let reviewer = reviewer.to_string();
        let text = text.to_string();
        let commit = commit.map(String::from);
        self.db
            .write(move |ctx| {
                prs::review(
                    ctx,
                    number,
                    &reviewer,
                    verdict,
                    &text,
                    commit.as_deref(),
                    now,
                )
            })
            .await
    }

    async fn comment_pr(&self, number: i64, author: &str, text: &str, now: i64) -> Result<Comment> {
        let author = author.to_string();
        let text = text.to_string();
        self.db
            .write(move |ctx| prs::comment(ctx, number, &author, &text, now))
            .await
    }

    async fn close_pr(&self, number: i64, by: &str, now: i64) -> Result<PullRequest> {
        let by = by.to_string();
        self.db
            .write(move |ctx| prs::close(ctx, number, &by, now))
            .await
    }

    async fn mark_merged(
        &self,
        number: i64,
        by: &str,
        merge_commit: &str,
        main_moved: bool,
        now: i64,
    ) -> Result<PullRequest> {
        let by = by.to_string();
        let commit = merge_commit.to_string();
        self.db
            .write(move |ctx| prs::mark_merged(ctx, number, &by, &commit, main_moved, now))
            .await
    }

    async fn merge_failed(
        &self,
        number: i64,
        by: &str,
        reason: serde_json::Value,
        now: i64,
    ) -> Result<()> {
        let by = by.to_string();
        self.db
            .write(move |ctx| prs::merge_failed(ctx, number, &by, reason, now))
            .await
    }

    async fn main_updated(&self, by: &str, commit: &str, now: i64) -> Result<()> {
        let by = by.to_string();
        let commit = commit.to_string();
        self.db
            .write(move |ctx| prs::main_updated(ctx, &by, &commit, now))
            .await
    }

    async fn open_issue(&self, author: &str, issue: NewIssue, now: i64) -> Result<Issue> {
        let author = author.to_string();
        self.db
            .write(move |ctx| issues::open(ctx, &author, issue, now))
            .await
    }

    async fn open_issues(&self, author: &str, all: Vec<NewIssue>, now: i64) -> Result<Vec<Issue>> {
        let author = author.to_string();
        self.db
            .write(move |ctx| issues::open_many(ctx, &author, all, now))
            .await
    }

    async fn list_issues(&self, query: IssueQuery) -> Result<Vec<Issue>> {
        self.db.read(move |c| issues::list(c, &query)).await
    }

    async fn get_issue(&self, number: i64) -> Result<Issue> {
        self.db.read(move |c| issues::get(c, number)).await
    }

    async fn comment_issue(
        &self,
        number: i64,
        author: &str,
        text: &str,
        now: i64,
    ) -> Result<IssueComment> {
        let author = author.to_string();
        let text = text.to_string();
        self.db
            .write(move |ctx| issues::comment(ctx, number, &author, &text, now))
            .await
    }

    async fn label_issue(
        &self,
        number: i64,
        add: Vec<String>,
        remove: Vec<String>,
        now: i64,
    ) -> Result<Issue> {
        self.db
            .write(move |ctx| issues::label(ctx, number, &add, &remove, now))
            .await
    }

    async fn assign_issue(
        &self,
        number: i64,
        by: &str,
        admin_rights: bool,
        assignee: Option<String>,
        now: i64,
    ) -> Result<Issue> {
        let by = by.to_string();
        self.db
            .write(move |ctx| {
                issues::assign(ctx, number, &by, admin_rights, assignee.as_deref(), now)
            })
            .await
    }

    async fn close_issue(
        &self,
        number: i64,
        by: &str,
        admin_rights: bool,
        now: i64,
    ) -> Result<Issue> {
        let by = by.to_string();
        self.db
            .write(move |ctx| issues::close(ctx, number, &by, admin_rights, now))
            .await
    }

    async fn reopen_issue(
        &self,
        number: i64,
        by: &str,
        admin_rights: bool,
        now: i64,
    ) -> Result<Issue> {
        let by = by.to_string();
        self.db
            .write(move |ctx| issues::reopen(ctx, number, &by, admin_rights, now))
            .await
    }

    async fn stats(&self) -> Result<crate::Stats> {
        self.db
            .read(|c| {
                let count = |sql: &str| -> Result<u64> {
                    c.query_row(sql, [], |r| r.get::<_, i64>(0))
                        .map(|n| n as u64)
                        .map_err(conn::sql_err)
                };
                Ok(crate::Stats {
                    workers: count("SELECT count(*) FROM workers")?,
                    records: count("SELECT ifnull(max(seq), 0) FROM records")?,
                    messages: count("SELECT ifnull(max(seq), 0) FROM messages")?,
                    events: count("SELECT ifnull(max(seq), 0) FROM events")?,
                    prs_open: count("SELECT count(*) FROM prs WHERE state = 'open'")?,
                    prs_merged: count("SELECT count(*) FROM prs WHERE state = 'merged'")?,
                    prs_closed: count("SELECT count(*) FROM prs WHERE state = 'closed'")?,
                })
            })
            .await
    }

    async fn record_model_request(&self, r: crate::ModelRequest) -> Result<()> {
        self.db.write(move |ctx| usage::record(ctx, &r)).await
    }

    async fn model_usage(&self, worker: Option<&str>) -> Result<Vec<crate::ModelUsage>> {
        let worker = worker.map(str::to_string);
        self.db
            .read(move |c| usage::totals(c, worker.as_deref(), None))
            .await
    }

    async fn model_usage_since(&self, at: i64) -> Result<Vec<crate::ModelUsage>> {
        self.db
            .read(move |c| usage::totals(c, None, Some(at)))
            .await
    }

    async fn hub_state(&self, key: &str) -> Result<Option<String>> {
        let key = key.to_string();
        self.db.read(move |c| usage::hub_state(c, &key)).await
    }

    async fn set_hub_state(&self, key: &str, value: &str) -> Result<()> {
        let (key, value) = (key.to_string(), value.to_string());
        self.db
            .write(move |ctx| usage::set_hub_state(ctx, &key, &value))
            .await
    }

    async fn set_budget(&self, scope: &str, limits: agensh_domain::budget::Limits) -> Result<()> {
        let scope = scope.to_string();
        self.db
            .write(move |ctx| usage::set_budget(ctx, &scope, &limits))
            .await
    }

    async fn budgets(&self) -> Result<Vec<(String, agensh_domain::budget::Limits)>> {
        self.db.read(usage::budgets).await
    }

    async fn record_turn(
        &self,
        worker: &str,
        report: &agensh_protocol::dashboard::TurnReport,
    ) -> Result<()> {
        let worker = worker.to_string();
        let report = report.clone();
        self.db
            .write(move |ctx| turns::record(ctx, &worker, &report))
            .await
    }

    async fn turns(
        &self,
        worker: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<agensh_protocol::dashboard::TurnReport>> {
        let worker = worker.to_string();
        self.db
            .read(move |c| turns::list(c, &worker, before, limit))
            .await
    }

    fn write_stats(&self) -> Option<crate::write_stats::WriteStatsSnapshot> {
        Some(self.db.write_stats())
    }

    fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.bus.subscribe()
    }
}
