//! The PostgreSQL store: the same [`Store`] as `sqlite/`, on a server that several hubs
//! can share (`agensh hub DIR --store postgres://…`).
//!
//! `db.rs` has the connections (a small pool of our own), write transactions, the write
//! lock that keeps numbers in commit order, and the commit broadcast across processes
//! (LISTEN/NOTIFY); `search.rs` the grep language's translation; the other files one
//! concept each, as in `sqlite/`.

mod board;
mod db;
mod events;
mod issues;
mod messages;
mod nodes;
mod prs;
pub mod search;
mod turns;
mod usage;
mod workers;

use std::sync::Arc;

use agensh_domain::event::{Event, NewEvent};
use agensh_domain::issue::{Issue, IssueComment, NewIssue};
use agensh_domain::message::{Message, NewMessage};
use agensh_domain::node::{NewNode, NodeInfo};
use agensh_domain::pr::{Comment, NewPr, PrState, PullRequest, Review, Verdict};
use agensh_domain::query::Query;
use agensh_domain::record::{Appended, NewRecord, Record};
use agensh_domain::view::ViewEntry;
use agensh_domain::worker::{NewWorker, WorkerInfo, WorkerStatus};
use agensh_domain::Result;
use tokio::sync::broadcast;

use crate::{IssueQuery, MessageQuery, QueueState, Store, Unfolded};
use db::Db;

pub use db::redact;

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

/// Runs `$body` with `$ctx` a write transaction, committed (or rolled back) after it.
macro_rules! in_tx {
    ($self:ident, |$ctx:ident| $body:expr) => {{
        let mut $ctx = $self.db.begin().await?;
        let result = $body;
        $self.db.finish($ctx, result).await
    }};
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
        let db = Db::open(url, include_str!("schema.sql"), POOL_SIZE, bus.clone()).await?;
        let listener = db.listen();
        Ok(PostgresStore { db, bus, listener })
    }
}

#[async_trait::async_trait]
impl Store for PostgresStore {
    async fn admin_token(&self) -> Result<String> {
        in_tx!(self, |ctx| workers::admin_token(&mut ctx).await)
    }

    async fn add_workers(&self, count: usize, now: i64) -> Result<Vec<NewWorker>> {
        in_tx!(self, |ctx| workers::add(&mut ctx, count, now).await)
    }

    async fn worker_tokens(&self) -> Result<Vec<(String, String)>> {
        on_conn!(self, |c| workers::tokens(&mut c).await)
    }

    async fn add_node(&self, name: &str, workers: usize, now: i64) -> Result<NewNode> {
        in_tx!(self, |ctx| nodes::add(&mut ctx, name, workers, now).await)
    }

    async fn list_nodes(&self) -> Result<Vec<NodeInfo>> {
        on_conn!(self, |c| nodes::list(&mut c).await)
    }

    async fn node_tokens(&self) -> Result<Vec<(String, String)>> {
        on_conn!(self, |c| nodes::tokens(&mut c).await)
    }

    async fn register_node(&self, name: &str, workers: usize, now: i64) -> Result<Vec<NewWorker>> {
        in_tx!(self, |ctx| nodes::register(&mut ctx, name, workers, now)
            .await)
    }

    async fn revoke_node(&self, name: &str) -> Result<Vec<NewWorker>> {
        in_tx!(self, |ctx| nodes::revoke(&mut ctx, name).await)
    }

    async fn list_workers(&self, now: i64) -> Result<Vec<WorkerInfo>> {
        on_conn!(self, |c| workers::list(&mut c, now).await)
    }

    async fn set_worker_status(&self, id: &str, status: WorkerStatus) -> Result<()> {
        let one = [(id.to_string(), status)];
        in_tx!(self, |ctx| workers::set_statuses(&mut ctx.conn, &one).await)
    }

    async fn set_worker_statuses(&self, statuses: Vec<(String, WorkerStatus)>) -> Result<()> {
        in_tx!(self, |ctx| workers::set_statuses(&mut ctx.conn, &statuses)
            .await)
    }

    async fn touch_workers(&self, activity: Vec<(String, i64)>) -> Result<()> {
        in_tx!(self, |ctx| workers::touch(&mut ctx.conn, &activity).await)
    }

    async fn append_record(
        &self,
        author: &str,
        record: NewRecord,
        now: i64,
        default_lease_secs: u64,
    ) -> Result<Appended> {
        in_tx!(self, |ctx| board::append(
            &mut ctx,
            author,
            record,
            now,
            default_lease_secs
        )
        .await)
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
        in_tx!(self, |ctx| board::set_board_cursor(
            &mut ctx.conn,
            worker,
            top
        )
        .await)?;
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
        in_tx!(self, |ctx| board::renew(
            &mut ctx, worker, seq, lease_secs, now
        )
        .await)
    }

    async fn release_claim(&self, worker: &str, seq: i64, now: i64) -> Result<Record> {
        in_tx!(self, |ctx| board::release(&mut ctx, worker, seq, now).await)
    }

    async fn post_message(&self, from: &str, message: NewMessage, now: i64) -> Result<Message> {
        in_tx!(self, |ctx| messages::post(&mut ctx, from, message, now)
            .await)
    }

    async fn read_messages(&self, reader: &str, query: MessageQuery) -> Result<Vec<Message>> {
        if query.unread {
            in_tx!(self, |ctx| messages::read(&mut ctx.conn, reader, &query)
                .await)
        } else {
            on_conn!(self, |c| messages::read(&mut c, reader, &query).await)
        }
    }

    async fn enqueue(&self, event: NewEvent, now: i64) -> Result<Option<Event>> {
        in_tx!(self, |ctx| ctx.emit(&event, now).await)
    }

    async fn pending_events(&self, worker: &str, after: i64, limit: usize) -> Result<Vec<Event>> {
        on_conn!(self, |c| events::pending(&mut c, worker, after, limit)
            .await)
    }

    async fn ack_events(&self, worker: &str, seqs: Vec<i64>) -> Result<usize> {
        in_tx!(self, |ctx| events::ack(&mut ctx.conn, worker, &seqs).await)
    }

    async fn events_after(&self, after: i64, limit: usize) -> Result<Vec<Event>> {
        on_conn!(self, |c| events::after(&mut c, after, limit).await)
    }

    async fn queue_state(&self, worker: &str) -> Result<QueueState> {
        on_conn!(self, |c| events::queue_state(&mut c, worker).await)
    }

    async fn open_pr(&self, author: &str, pr: NewPr, now: i64) -> Result<PullRequest> {
        in_tx!(self, |ctx| prs::open(&mut ctx, author, pr, now).await)
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
        let mut ctx = self.db.begin_snapshot().await?;
        let r = prs::get(&mut ctx.conn, number).await;
        self.db.finish(ctx, r).await
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
        in_tx!(self, |ctx| prs::review(
            &mut ctx, number, reviewer, verdict, text, commit, now
        )
        .await)
    }

    async fn comment_pr(&self, number: i64, author: &str, text: &str, now: i64) -> Result<Comment> {
        in_tx!(self, |ctx| prs::comment(
            &mut ctx, number, author, text, now
        )
        .await)
    }

    async fn close_pr(&self, number: i64, by: &str, now: i64) -> Result<PullRequest> {
        in_tx!(self, |ctx| prs::close(&mut ctx, number, by, now).await)
    }

    async fn mark_merged(
        &self,
        number: i64,
        by: &str,
        merge_commit: &str,
        main_moved: bool,
        now: i64,
    ) -> Result<PullRequest> {
        in_tx!(self, |ctx| prs::mark_merged(
            &mut ctx,
            number,
            by,
            merge_commit,
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
        in_tx!(self, |ctx| prs::merge_failed(
            &mut ctx, number, by, reason, now
        )
        .await)
    }

    async fn main_updated(&self, by: &str, commit: &str, now: i64) -> Result<()> {
        in_tx!(self, |ctx| prs::main_updated(&mut ctx, by, commit, now)
            .await)
    }

    async fn open_issue(&self, author: &str, issue: NewIssue, now: i64) -> Result<Issue> {
        in_tx!(self, |ctx| issues::open(&mut ctx, author, issue, now).await)
    }

    async fn open_issues(&self, author: &str, all: Vec<NewIssue>, now: i64) -> Result<Vec<Issue>> {
        in_tx!(self, |ctx| issues::open_many(&mut ctx, author, all, now)
            .await)
    }

    async fn list_issues(&self, query: IssueQuery) -> Result<Vec<Issue>> {
        on_conn!(self, |c| issues::list(&mut c, &query).await)
    }

    async fn get_issue(&self, number: i64) -> Result<Issue> {
        let mut ctx = self.db.begin_snapshot().await?;
        let r = issues::get(&mut ctx.conn, number).await;
        self.db.finish(ctx, r).await
    }

    async fn comment_issue(
        &self,
        number: i64,
        author: &str,
        text: &str,
        now: i64,
    ) -> Result<IssueComment> {
        in_tx!(self, |ctx| issues::comment(
            &mut ctx, number, author, text, now
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
        in_tx!(self, |ctx| issues::label(
            &mut ctx, number, &add, &remove, now
        )
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
        in_tx!(self, |ctx| issues::assign(
            &mut ctx,
            number,
            by,
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
        in_tx!(self, |ctx| issues::close(
            &mut ctx,
            number,
            by,
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
        in_tx!(self, |ctx| issues::reopen(
            &mut ctx,
            number,
            by,
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
        in_tx!(self, |ctx| usage::record(&mut ctx.conn, &r).await)
    }

    async fn model_usage(&self, worker: Option<&str>) -> Result<Vec<crate::ModelUsage>> {
        on_conn!(self, |c| usage::totals(&mut c, worker).await)
    }

    async fn set_budget(&self, scope: &str, limits: agensh_domain::budget::Limits) -> Result<()> {
        in_tx!(self, |ctx| usage::set_budget(&mut ctx.conn, scope, &limits)
            .await)
    }

    async fn budgets(&self) -> Result<Vec<(String, agensh_domain::budget::Limits)>> {
        on_conn!(self, |c| usage::budgets(&mut c).await)
    }

    async fn record_turn(
        &self,
        worker: &str,
        report: &agensh_protocol::dashboard::TurnReport,
    ) -> Result<()> {
        in_tx!(self, |ctx| turns::record(&mut ctx.conn, worker, report)
            .await)
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
}
