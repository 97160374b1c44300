//! The PostgreSQL store: the same [`Store`] as `sqlite/`, on a server that several hubs
//! can share (`agensh hub DIR --store postgres://…`).
//!
//! `db.rs` has the connections (a small pool of our own), the write lock that keeps
//! numbers in commit order, and the commit broadcast across processes (LISTEN/NOTIFY);
//! `writer.rs` the writer that commits numbered writes in groups (savepoints, one commit,
//! answers after it); `search.rs` the grep language's translation; the other files one
//! concept each, as in `sqlite/`.

mod board;
mod db;
mod events;
mod issues;
mod messages;
pub mod migrate;
mod nodes;
mod prs;
mod receipts;
pub mod search;
mod turns;
mod usage;
mod workers;
mod writer;

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
use db::Db;

pub(crate) use db::describe as describe_error;
pub use db::{redact, WRITE_LOCK};

/// One connection to `url`, outside any store (`agensh store migrate`).
pub(crate) async fn connect_one(url: &str) -> Result<tokio_postgres::Client> {
    db::connect(url, None).await
}

/// How many committed events a slow subscriber may fall behind before it must re-read.
const BUS_CAPACITY: usize = 8_192;
/// Connections in the pool: writes and reads at once.
pub const POOL_SIZE: usize = 8;

/// The PostgreSQL implementation of [`Store`].
pub struct PostgresStore {
    db: Arc<Db>,
    bus: broadcast::Sender<Arc<Event>>,
    listener: tokio::task::JoinHandle<()>,
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

/// Runs `$body` with `$c` a pooled connection inside a transaction, committed (or rolled
/// back) after it: the writes that number nothing, which run side by side.
macro_rules! in_tx {
    ($self:ident, |$c:ident| $body:expr) => {{
        let mut $c = $self.db.begin().await?;
        let result = $body;
        $self.db.finish($c, result).await
    }};
}

/// Runs `$body` with `$ctx` a write of the writer's next group (`writer.rs`): the writes
/// that number rows or create events. `$body` owns what it uses.
macro_rules! in_group {
    ($self:ident, |$ctx:ident| $body:expr) => {
        $self
            .db
            .write(move |$ctx| Box::pin(async move { $body }))
            .await
    };
}

/// Runs `$body` with `$c` a pooled connection.
macro_rules! on_conn {
    ($self:ident, |$c:ident| $body:expr) => {{
        let mut $c = $self.db.conn().await?;
        $body
    }};
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/db`),
    /// creating the tables it lacks. Must run on a tokio runtime: the connections and the
    /// commit listener are tasks on it.
    pub async fn connect(url: &str) -> Result<Self> {
        let (bus, _) = broadcast::channel(BUS_CAPACITY);
        let db = Db::open(url, POOL_SIZE, bus.clone()).await?;
        let listener = db.listen();
        Ok(PostgresStore { db, bus, listener })
    }
}

#[async_trait::async_trait]
impl Store for PostgresStore {
    async fn admin_token(&self) -> Result<String> {
        in_group!(self, |ctx| workers::admin_token(ctx).await)
    }

    async fn add_workers(&self, count: usize, now: i64) -> Result<Vec<NewWorker>> {
        in_group!(self, |ctx| workers::add(ctx, count, now).await)
    }

    async fn worker_tokens(&self) -> Result<Vec<(String, String)>> {
        on_conn!(self, |c| workers::tokens(&mut c).await)
    }

    async fn add_node(&self, name: &str, workers: usize, now: i64) -> Result<NewNode> {
        let name = name.to_string();
        in_group!(self, |ctx| nodes::add(ctx, &name, workers, now).await)
    }

    async fn list_nodes(&self) -> Result<Vec<NodeInfo>> {
        on_conn!(self, |c| nodes::list(&mut c).await)
    }

    async fn node_tokens(&self) -> Result<Vec<(String, String)>> {
        on_conn!(self, |c| nodes::tokens(&mut c).await)
    }

    async fn register_node(&self, name: &str, workers: usize, now: i64) -> Result<Vec<NewWorker>> {
        let name = name.to_string();
        in_group!(self, |ctx| nodes::register(ctx, &name, workers, now).await)
    }

    async fn revoke_node(&self, name: &str) -> Result<Vec<NewWorker>> {
        let name = name.to_string();
        in_group!(self, |ctx| nodes::revoke(ctx, &name).await)
    }

    async fn list_workers(&self, now: i64) -> Result<Vec<WorkerInfo>> {
        on_conn!(self, |c| workers::list(&mut c, now).await)
    }

    async fn set_worker_status(&self, id: &str, status: WorkerStatus) -> Result<()> {
        let one = [(id.to_string(), status)];
        in_tx!(self, |c| workers::set_statuses(&mut c, &one).await)
    }

    async fn set_worker_statuses(&self, statuses: Vec<(String, WorkerStatus)>) -> Result<()> {
        in_tx!(self, |c| workers::set_statuses(&mut c, &statuses).await)
    }

    async fn touch_workers(&self, activity: Vec<(String, i64)>) -> Result<()> {
        in_tx!(self, |c| workers::touch(&mut c, &activity).await)
    }

    async fn append_record(
        &self,
        author: &str,
        record: NewRecord,
        now: i64,
        default_lease_secs: u64,
    ) -> Result<Appended> {
        let tokens = board::tokens_for(author, &record);
        self.db
            .append(board::Append {
                author: author.to_string(),
                new: record,
                tokens,
                now,
                default_lease_secs,
            })
            .await
    }

    async fn recent_view(&self, now: i64, cap: usize) -> Result<Vec<ViewEntry>> {
        on_conn!(self, |c| board::recent_view(
            &mut c,
            now,
            cap,
            (0, i64::MAX),
            None
        )
        .await)
    }

    async fn board_unread(&self, worker: &str, now: i64, cap: usize) -> Result<Vec<ViewEntry>> {
        let (cursor, top) = on_conn!(self, |c| board::unread_bounds(&mut c, worker).await)?;
        let entries = on_conn!(self, |c| {
            board::recent_view(&mut c, now, cap, (cursor, top), Some(worker)).await
        })?;
        in_tx!(self, |c| board::set_board_cursor(&mut c, worker, top).await)?;
        Ok(entries)
    }

    async fn grep(&self, query: &Query, before: Option<i64>, limit: usize) -> Result<Vec<Record>> {
        on_conn!(self, |c| board::grep(&mut c, query, before, limit).await)
    }

    async fn unfold(&self, seq: i64) -> Result<Unfolded> {
        on_conn!(self, |c| board::unfold(&mut c, seq).await)
    }

    async fn renew_claim(
        &self,
        worker: &str,
        seq: i64,
        lease_secs: u64,
        now: i64,
    ) -> Result<Record> {
        let worker = worker.to_string();
        in_group!(self, |ctx| board::renew(ctx, &worker, seq, lease_secs, now)
            .await)
    }

    async fn release_claim(&self, worker: &str, seq: i64, now: i64) -> Result<Record> {
        let worker = worker.to_string();
        in_group!(self, |ctx| board::release(ctx, &worker, seq, now).await)
    }

    async fn post_message(&self, from: &str, message: NewMessage, now: i64) -> Result<Message> {
        let from = from.to_string();
        in_group!(self, |ctx| messages::post(ctx, &from, message, now).await)
    }

    async fn read_messages(&self, reader: &str, query: MessageQuery) -> Result<Vec<Message>> {
        if query.unread {
            in_tx!(self, |c| messages::read(&mut c, reader, &query).await)
        } else {
            on_conn!(self, |c| messages::read(&mut c, reader, &query).await)
        }
    }

    async fn enqueue(&self, event: NewEvent, now: i64) -> Result<Option<Event>> {
        in_group!(self, |ctx| ctx.emit(&event, now).await)
    }

    async fn pending_events(&self, worker: &str, after: i64, limit: usize) -> Result<Vec<Event>> {
        on_conn!(self, |c| events::pending(&mut c, worker, after, limit)
            .await)
    }

    async fn pending_events_many(
        &self,
        queries: Vec<(String, i64)>,
        limit: usize,
    ) -> Result<Vec<Vec<Arc<Event>>>> {
        on_conn!(self, |c| events::pending_many(&mut c, &queries, limit)
            .await)
    }

    async fn ack_events_many(
        &self,
        acks: Vec<(String, Vec<i64>)>,
        now: i64,
    ) -> Result<Vec<Result<usize>>> {
        in_tx!(self, |c| receipts::ack_many(&mut c, &acks, now).await)
    }

    async fn ack_events(&self, worker: &str, seqs: Vec<i64>, now: i64) -> Result<usize> {
        in_tx!(self, |c| receipts::ack(&mut c, worker, &seqs, now).await)
    }

    async fn present_events(
        &self,
        worker: &str,
        seqs: Vec<i64>,
        via: Via,
        dequeue: bool,
        now: i64,
    ) -> Result<usize> {
        in_tx!(self, |c| receipts::present(
            &mut c, worker, &seqs, via, dequeue, now
        )
        .await)
    }

    async fn receipts(&self, seqs: Vec<i64>) -> Result<Vec<Receipt>> {
        on_conn!(self, |c| receipts::of_events(&mut c, &seqs).await)
    }

    async fn message_event(&self, seq: i64) -> Result<Option<(Message, Option<Event>)>> {
        on_conn!(self, |c| receipts::message_event(&mut c, seq).await)
    }

    async fn unseen_events(&self, from: i64, to: i64, limit: usize) -> Result<Vec<Event>> {
        on_conn!(self, |c| receipts::unseen(&mut c, from, to, limit).await)
    }

    async fn overdue_events(&self, worker: &str, before: i64, limit: usize) -> Result<Vec<Event>> {
        on_conn!(self, |c| receipts::overdue(&mut c, worker, before, limit)
            .await)
    }

    async fn receipts_presented_since(&self, since: i64, limit: usize) -> Result<Vec<Receipt>> {
        on_conn!(self, |c| receipts::presented_since(&mut c, since, limit)
            .await)
    }

    async fn events_after(&self, after: i64, limit: usize) -> Result<Vec<Event>> {
        on_conn!(self, |c| events::after(&mut c, after, limit).await)
    }

    async fn queue_state(&self, worker: &str) -> Result<QueueState> {
        on_conn!(self, |c| events::queue_state(&mut c, worker).await)
    }

    async fn open_pr(&self, author: &str, pr: NewPr, now: i64) -> Result<PullRequest> {
        let author = author.to_string();
        in_group!(self, |ctx| prs::open(ctx, &author, pr, now).await)
    }

    async fn list_prs(
        &self,
        state: Option<PrState>,
        author: Option<String>,
        limit: usize,
    ) -> Result<Vec<PullRequest>> {
        on_conn!(self, |c| prs::list(&mut c, state, author.as_deref(), limit)
            .await)
    }

    async fn get_pr(&self, number: i64) -> Result<PullRequest> {
        let mut conn = self.db.begin_snapshot().await?;
        let r = prs::get(&mut conn, number).await;
        self.db.finish(conn, r).await
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
        let (reviewer, text) = (reviewer.to_string(), text.to_string());
        let commit = commit.map(str::to_string);
        in_group!(self, |ctx| prs::review(
            ctx,
            number,
            &reviewer,
            verdict,
            &text,
            commit.as_deref(),
            now
        )
        .await)
    }

    async fn comment_pr(&self, number: i64, author: &str, text: &str, now: i64) -> Result<Comment> {
        let (author, text) = (author.to_string(), text.to_string());
        in_group!(self, |ctx| prs::comment(ctx, number, &author, &text, now)
            .await)
    }

    async fn close_pr(&self, number: i64, by: &str, now: i64) -> Result<PullRequest> {
        let by = by.to_string();
        in_group!(self, |ctx| prs::close(ctx, number, &by, now).await)
    }

    async fn mark_merged(
        &self,
        number: i64,
        by: &str,
        merge_commit: &str,
        main_moved: bool,
        now: i64,
    ) -> Result<PullRequest> {
        let (by, merge_commit) = (by.to_string(), merge_commit.to_string());
        in_group!(self, |ctx| prs::mark_merged(
            ctx,
            number,
            &by,
            &merge_commit,
            main_moved,
            now
        )
        .await)
    }

    async fn merge_failed(
        &self,
        number: i64,
        by: &str,
        reason: serde_json::Value,
        now: i64,
    ) -> Result<()> {
        let by = by.to_string();
        in_group!(self, |ctx| prs::merge_failed(ctx, number, &by, reason, now)
            .await)
    }

    async fn main_updated(&self, by: &str, commit: &str, now: i64) -> Result<()> {
        let (by, commit) = (by.to_string(), commit.to_string());
        in_group!(self, |ctx| prs::main_updated(ctx, &by, &commit, now).await)
    }

    async fn open_issue(&self, author: &str, issue: NewIssue, now: i64) -> Result<Issue> {
        let author = author.to_string();
        in_group!(self, |ctx| issues::open(ctx, &author, issue, now).await)
    }

    async fn open_issues(&self, author: &str, all: Vec<NewIssue>, now: i64) -> Result<Vec<Issue>> {
        let author = author.to_string();
        in_group!(self, |ctx| issues::open_many(ctx, &author, all, now).await)
    }

    async fn list_issues(&self, query: IssueQuery) -> Result<Vec<Issue>> {
        on_conn!(self, |c| issues::list(&mut c, &query).await)
    }

    async fn get_issue(&self, number: i64) -> Result<Issue> {
        let mut conn = self.db.begin_snapshot().await?;
        let r = issues::get(&mut conn, number).await;
        self.db.finish(conn, r).await
    }

    async fn comment_issue(
        &self,
        number: i64,
        author: &str,
        text: &str,
        now: i64,
    ) -> Result<IssueComment> {
        let (author, text) = (author.to_string(), text.to_string());
        in_group!(self, |ctx| issues::comment(
            ctx, number, &author, &text, now
        )
        .await)
    }

    async fn label_issue(
        &self,
        number: i64,
        add: Vec<String>,
        remove: Vec<String>,
        now: i64,
    ) -> Result<Issue> {
        in_group!(self, |ctx| issues::label(ctx, number, &add, &remove, now)
            .await)
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
        in_group!(self, |ctx| issues::assign(
            ctx,
            number,
            &by,
            admin_rights,
            assignee.as_deref(),
            now
        )
        .await)
    }

    async fn close_issue(
        &self,
        number: i64,
        by: &str,
        admin_rights: bool,
        now: i64,
    ) -> Result<Issue> {
        let by = by.to_string();
        in_group!(self, |ctx| issues::close(
            ctx,
            number,
            &by,
            admin_rights,
            now
        )
        .await)
    }

    async fn reopen_issue(
        &self,
        number: i64,
        by: &str,
        admin_rights: bool,
        now: i64,
    ) -> Result<Issue> {
        let by = by.to_string();
        in_group!(self, |ctx| issues::reopen(
            ctx,
            number,
            &by,
            admin_rights,
            now
        )
        .await)
    }

    async fn stats(&self) -> Result<crate::Stats> {
        let row = on_conn!(self, |c| c
            .query_one(
                "SELECT (SELECT count(*) FROM workers), \
                        (SELECT coalesce(max(seq), 0) FROM records), \
                        (SELECT coalesce(max(seq), 0) FROM messages), \
                        (SELECT coalesce(max(seq), 0) FROM events), \
                        (SELECT count(*) FROM prs WHERE state = 'open'), \
                        (SELECT count(*) FROM prs WHERE state = 'merged'), \
                        (SELECT count(*) FROM prs WHERE state = 'closed')",
                &[],
            )
            .await)?;
        let n = |i: usize| row.get::<_, i64>(i) as u64;
        Ok(crate::Stats {
            workers: n(0),
            records: n(1),
            messages: n(2),
            events: n(3),
            prs_open: n(4),
            prs_merged: n(5),
            prs_closed: n(6),
        })
    }

    async fn record_model_request(&self, r: crate::ModelRequest) -> Result<()> {
        in_tx!(self, |c| usage::record(&mut c, &r).await)
    }

    async fn model_usage(&self, worker: Option<&str>) -> Result<Vec<crate::ModelUsage>> {
        on_conn!(self, |c| usage::totals(&mut c, worker, None).await)
    }

    async fn model_usage_since(&self, at: i64) -> Result<Vec<crate::ModelUsage>> {
        on_conn!(self, |c| usage::totals(&mut c, None, Some(at)).await)
    }

    async fn hub_state(&self, key: &str) -> Result<Option<String>> {
        on_conn!(self, |c| usage::hub_state(&mut c, key).await)
    }

    async fn set_hub_state(&self, key: &str, value: &str) -> Result<()> {
        in_tx!(self, |c| usage::set_hub_state(&mut c, key, value).await)
    }

    async fn set_budget(&self, scope: &str, limits: agensh_domain::budget::Limits) -> Result<()> {
        in_tx!(self, |c| usage::set_budget(&mut c, scope, &limits).await)
    }

    async fn budgets(&self) -> Result<Vec<(String, agensh_domain::budget::Limits)>> {
        on_conn!(self, |c| usage::budgets(&mut c).await)
    }

    async fn record_turn(
        &self,
        worker: &str,
        report: &agensh_protocol::dashboard::TurnReport,
    ) -> Result<()> {
        in_tx!(self, |c| turns::record(&mut c, worker, report).await)
    }

    async fn turns(
        &self,
        worker: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<agensh_protocol::dashboard::TurnReport>> {
        on_conn!(self, |c| turns::list(&mut c, worker, before, limit).await)
    }

    fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.bus.subscribe()
    }

    fn write_stats(&self) -> Option<crate::write_stats::WriteStatsSnapshot> {
        Some(self.db.write_stats())
    }
}
