//! A typed client for the hub's REST API (`/api/v1`), used by the command line, the
//! node and the tests. Every call acts as the identity of its token (or, with the admin
//! token, as the worker named by [`Client::acting_as`]).

pub mod mcp;
pub mod retry;
pub mod show;

use std::time::Duration;

use agensh_domain::event::{Event, OverdueQuery, PollMany, PolledMany};
use agensh_domain::message::{Message, NewMessage};
use agensh_domain::node::{NewNode, NodeInfo, Registered};
use agensh_domain::pr::{Comment, NewPr, PullRequest, Review};
use agensh_domain::receipt::{MessageStatus, Via};
use agensh_domain::record::{Appended, NewRecord, Record};
use agensh_domain::view::ViewEntry;
use agensh_domain::worker::{NewWorker, StatusReport, StatusReports, WorkerInfo, WorkerStatus};
use agensh_domain::{Error, ErrorKind};
use agensh_protocol::rest::{
    Ack, Acked, AddNode, AddWorkers, CapQuery, ErrorBody, GrepQuery, ListPrs, NewComment,
    NewReview, NewShip, Notice, PollQuery, Polled, Presented, PresentedCount, ReadQuery,
    RegisterNode, Renew, SetStatus, Updated,
};
pub use agensh_protocol::rest::{QueueState, Stats, Unfolded, WhoAmI};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// How long an idle connection stays in a client's pool: below the hub's default
/// `hub.header_timeout_secs` (30 s), after which the hub closes an idle connection, so a
/// request never goes out on a connection the hub is closing.
pub const POOL_IDLE: Duration = Duration::from_secs(20);

/// Header with which the admin acts as a worker.
pub const AS_HEADER: &str = "x-agensh-as";

/// Result of a client call: the hub's own error, or a transport failure described the same way.
pub type Result<T> = std::result::Result<T, Error>;

/// A connection to one hub with one identity.
#[derive(Clone)]
pub struct Client {
    base: String,
    token: String,
    acting_as: Option<String>,
    http: reqwest::Client,
    /// How long a request keeps being sent again while the hub cannot be reached
    /// ([`retry`]); `None`: once.
    retry: Option<Duration>,
}

/// Messages to read: the conversation and how many.
#[derive(Debug, Clone, Default)]
pub struct MessageFilter {
    /// `#channel` or a worker id.
    pub with: Option<String>,
    pub limit: Option<usize>,
    /// Only messages older than this sequence number.
    pub before: Option<i64>,
}

impl Client {
    /// A client for the hub at `base` (e.g. `http://127.0.0.1:7420`) with `token`.
    pub fn new(base: &str, token: &str) -> Self {
        let http = reqwest::Client::builder()
            .pool_idle_timeout(POOL_IDLE)
            .build()
            .expect("HTTP client builds");
        Client {
            base: base.trim_end_matches('/').to_string(),
            token: token.to_string(),
            acting_as: None,
            http,
            retry: None,
        }
    }

    /// The same client, sending a request again while the hub cannot be reached, for up
    /// to `window` ([`retry::send`]): for the node, which must ride out a hub restart.
    pub fn retrying(mut self, window: Duration) -> Self {
        self.retry = Some(window);
        self
    }

    /// The same client (and connection pool) with another token.
    pub fn with_token(&self, token: &str) -> Self {
        Client {
            token: token.to_string(),
            ..self.clone()
        }
    }

    /// The same client acting as worker `id` (admin token only).
    pub fn acting_as(mut self, id: Option<String>) -> Self {
        self.acting_as = id;
        self
    }

    /// The hub's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let mut r = self
            .http
            .request(method, format!("{}/api/v1{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(id) = &self.acting_as {
            r = r.header(AS_HEADER, id);
        }
        r
    }

    async fn send<T: DeserializeOwned>(&self, req: RequestBuilder) -> Result<T> {
        let resp = match self.retry {
            Some(window) => retry::send(req, window).await,
            None => req.send().await,
        }
        .map_err(|e| self.transport(e))?;
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let bytes = resp.bytes().await.map_err(|e| self.transport(e))?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| {
                Error::internal(format!("the hub's answer was not understood ({e}) — are client and hub the same version?"))
            });
        }
        let kind = kind_of(status);
        let mut e = match serde_json::from_slice::<ErrorBody>(&bytes) {
            Ok(b) => Error::new(kind, &b.error.code, b.error.message),
            Err(_) => Error::new(kind, "http_error", format!("the hub answered {status}")),
        };
        e.retry_after_secs = retry_after;
        Err(e)
    }

    fn transport(&self, e: reqwest::Error) -> Error {
        Error::new(
            ErrorKind::Internal,
            "unreachable",
            format!(
                "cannot reach the hub at {}: {e} — is `agensh hub` running? (check --hub, AGENSH_HUB or .agensh/hub.json)",
                self.base
            ),
        )
    }

    /// Counts of workers, records, messages, events and PRs.
    pub async fn stats(&self) -> Result<Stats> {
        self.send(self.request(Method::GET, "/stats")).await
    }

    /// The organization's goal (`organization.done_when`) and its last checks.
    pub async fn goal(&self) -> Result<agensh_domain::goal::GoalStatus> {
        self.send(self.request(Method::GET, "/goal")).await
    }

    /// Model usage through the gateway per worker and model (a worker: its own).
    pub async fn usage(&self) -> Result<Vec<agensh_protocol::rest::ModelUsage>> {
        self.send(self.request(Method::GET, "/usage")).await
    }

    /// The budgets in force and what was spent (the admin: every worker's; a worker: its own).
    pub async fn budget(&self) -> Result<agensh_protocol::rest::BudgetView> {
        self.send(self.request(Method::GET, "/budget")).await
    }

    /// Changes a budget (admin); workers it stopped that may go on are told to.
    pub async fn set_budget(
        &self,
        change: &agensh_domain::budget::LimitsChange,
    ) -> Result<agensh_protocol::rest::BudgetView> {
        self.send(self.request(Method::PUT, "/budget").json(change))
            .await
    }

    /// A one-time link that logs a browser in to the dashboard (admin).
    pub async fn dashboard_link(&self) -> Result<agensh_protocol::dashboard::DashboardLink> {
        self.send(self.request(Method::POST, "/dashboard/links"))
            .await
    }

    /// The organization at a glance, as the dashboard shows it (admin).
    pub async fn overview(&self) -> Result<agensh_protocol::dashboard::Overview> {
        self.send(self.request(Method::GET, "/overview")).await
    }

    /// Tells the hub when the run began and ends, for the dashboard's time left (admin).
    pub async fn set_run_clock(
        &self,
        clock: &agensh_protocol::dashboard::RunClock,
    ) -> Result<agensh_protocol::dashboard::RunClock> {
        self.send(self.request(Method::PUT, "/run").json(clock))
            .await
    }

    /// Posts a score of `main` for the dashboard's curve (admin).
    pub async fn add_score(
        &self,
        score: &agensh_protocol::dashboard::Score,
    ) -> Result<agensh_protocol::dashboard::Score> {
        self.send(self.request(Method::POST, "/scores").json(score))
            .await
    }

    /// Reports one finished turn of `worker` (the worker's own token, or the admin's); the
    /// answer is the report as stored.
    pub async fn report_turn(
        &self,
        worker: &str,
        report: &agensh_protocol::dashboard::TurnReport,
    ) -> Result<agensh_protocol::dashboard::TurnReport> {
        self.send(
            self.request(Method::POST, &format!("/workers/{worker}/turns"))
                .json(report),
        )
        .await
    }

    /// `worker`'s turns numbered below `before` (all when none), newest first, at most
    /// `limit` (the hub's default when none).
    pub async fn turns(
        &self,
        worker: &str,
        before: Option<u64>,
        limit: Option<usize>,
    ) -> Result<Vec<agensh_protocol::dashboard::TurnReport>> {
        let mut query: Vec<(&str, String)> = Vec::new();
        if let Some(b) = before {
            query.push(("before", b.to_string()));
        }
        if let Some(l) = limit {
            query.push(("limit", l.to_string()));
        }
        self.send(
            self.request(Method::GET, &format!("/workers/{worker}/turns"))
                .query(&query),
        )
        .await
    }

    /// Opens the live stream (admin): frames of what changed, from the event after `after`
    /// (none: from now, with the whole worker table first).
    pub async fn stream(&self, after: Option<i64>) -> Result<FrameStream> {
        let mut req = self.request(Method::GET, "/stream");
        if let Some(n) = after {
            req = req.header("last-event-id", n.to_string());
        }
        let resp = req.send().await.map_err(|e| self.transport(e))?;
        if !resp.status().is_success() {
            let status = resp.status();
            let bytes = resp.bytes().await.unwrap_or_default();
            return Err(match serde_json::from_slice::<ErrorBody>(&bytes) {
                Ok(b) => Error::new(kind_of(status), &b.error.code, b.error.message),
                Err(_) => Error::new(
                    kind_of(status),
                    "http_error",
                    format!("the hub answered {status}"),
                ),
            });
        }
        Ok(FrameStream {
            resp,
            parser: agensh_protocol::framing::SseParser::new(),
            ready: std::collections::VecDeque::new(),
        })
    }

    pub async fn whoami(&self) -> Result<WhoAmI> {
        self.send(self.request(Method::GET, "/whoami")).await
    }

    /// Creates `count` workers (admin).
    pub async fn add_workers(&self, count: usize) -> Result<Vec<NewWorker>> {
        self.send(
            self.request(Method::POST, "/workers")
                .json(&AddWorkers { count }),
        )
        .await
    }

    pub async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        self.send(self.request(Method::GET, "/workers")).await
    }

    /// The ids and tokens of the organization's first `n` workers (admin), adding workers
    /// until there are `n`.
    pub async fn first_workers(&self, n: usize) -> Result<Vec<(String, String)>> {
        let mut known = self.workers().await?;
        if known.len() < n {
            self.add_workers(n - known.len()).await?;
            known = self.workers().await?;
        }
        let mut workers = Vec::with_capacity(n);
        for w in known.iter().take(n) {
            workers.push((w.id.clone(), self.worker_token(&w.id).await?.token));
        }
        Ok(workers)
    }

    /// Issues a node that may run `workers` workers (admin): its name and token.
    pub async fn add_node(&self, name: &str, workers: usize) -> Result<NewNode> {
        self.send(self.request(Method::POST, "/nodes").json(&AddNode {
            name: name.to_string(),
            workers,
        }))
        .await
    }

    /// Every node, without tokens (admin).
    pub async fn nodes(&self) -> Result<Vec<NodeInfo>> {
        self.send(self.request(Method::GET, "/nodes")).await
    }

    /// Revokes node `name` (admin): the ids of its workers, whose tokens were renewed.
    pub async fn revoke_node(&self, name: &str) -> Result<Vec<String>> {
        self.send(self.request(Method::POST, &format!("/nodes/{name}/revoke")))
            .await
    }

    /// Registers this client's node (a node token) for `workers` workers: their ids and
    /// tokens, the same ones on every registration.
    pub async fn register_node(&self, workers: usize) -> Result<Registered> {
        self.send(
            self.request(Method::POST, "/nodes/register")
                .json(&RegisterNode { workers }),
        )
        .await
    }

    /// A worker's secret token (admin).
    pub async fn worker_token(&self, id: &str) -> Result<NewWorker> {
        self.send(self.request(Method::GET, &format!("/workers/{id}/token")))
            .await
    }

    pub async fn set_status(&self, id: &str, status: WorkerStatus) -> Result<Value> {
        self.send(
            self.request(Method::PUT, &format!("/workers/{id}/status"))
                .json(&SetStatus {
                    status: status.as_str().to_string(),
                }),
        )
        .await
    }

    /// Sets many workers' statuses in one request (a node's report): all or none.
    pub async fn set_statuses(&self, reports: &[StatusReport]) -> Result<usize> {
        let u: Updated = self
            .send(
                self.request(Method::PUT, "/workers/status")
                    .json(&StatusReports {
                        workers: reports.to_vec(),
                    }),
            )
            .await?;
        Ok(u.updated)
    }

    pub async fn post_record(&self, record: &NewRecord) -> Result<Appended> {
        self.send(self.request(Method::POST, "/board/records").json(record))
            .await
    }

    /// The whole recent view.
    pub async fn recent(&self, cap: Option<usize>) -> Result<Vec<ViewEntry>> {
        self.send(
            self.request(Method::GET, "/board/recent")
                .query(&CapQuery { cap }),
        )
        .await
    }

    /// The recent-view entries not read yet; marks them read.
    pub async fn read_board(&self) -> Result<Vec<ViewEntry>> {
        self.send(self.request(Method::POST, "/board/read")).await
    }

    pub async fn grep(
        &self,
        query: &str,
        limit: Option<usize>,
        before: Option<&str>,
    ) -> Result<Vec<Record>> {
        let q = GrepQuery {
            q: query.to_string(),
            limit,
            before: before.map(str::to_string),
        };
        self.send(self.request(Method::GET, "/board/grep").query(&q))
            .await
    }

    pub async fn unfold(&self, id: &str) -> Result<Unfolded> {
        self.send(self.request(Method::GET, &format!("/board/records/{}", encode(id))))
            .await
    }

    pub async fn renew(&self, id: &str, lease_secs: Option<u64>) -> Result<Record> {
        self.send(
            self.request(Method::POST, &format!("/board/claims/{}/renew", encode(id)))
                .json(&Renew { lease_secs }),
        )
        .await
    }

    pub async fn release(&self, id: &str) -> Result<Record> {
        self.send(self.request(
            Method::POST,
            &format!("/board/claims/{}/release", encode(id)),
        ))
        .await
    }

    pub async fn send_message(&self, m: &NewMessage) -> Result<Message> {
        self.send(self.request(Method::POST, "/messages").json(m))
            .await
    }

    /// Unread messages; marks them read.
    pub async fn read_messages(&self, f: &MessageFilter) -> Result<Vec<Message>> {
        self.send(
            self.request(Method::POST, "/messages/read")
                .query(&filter_query(f)),
        )
        .await
    }

    /// Recent messages, read or not.
    pub async fn message_history(&self, f: &MessageFilter) -> Result<Vec<Message>> {
        self.send(
            self.request(Method::GET, "/messages")
                .query(&filter_query(f)),
        )
        .await
    }

    /// Where message `id` (`M12` or `12`) stands with each recipient: the sender, the
    /// recipient of a direct message and the admin may ask.
    pub async fn message_status(&self, id: &str) -> Result<MessageStatus> {
        self.send(self.request(Method::GET, &format!("/messages/{}/receipts", encode(id))))
            .await
    }

    /// Unacknowledged events above `after`; waits up to `wait` seconds for the first.
    pub async fn events(&self, after: i64, wait: u64) -> Result<Vec<Event>> {
        self.ack_and_poll(&[], after, wait).await
    }

    /// Acknowledges `acks`, then polls like [`Client::events`] — one request instead of two.
    pub async fn ack_and_poll(&self, acks: &[i64], after: i64, wait: u64) -> Result<Vec<Event>> {
        let q = PollQuery {
            after,
            wait,
            limit: None,
            ack: (!acks.is_empty()).then(|| {
                let list: Vec<String> = acks.iter().map(i64::to_string).collect();
                list.join(",")
            }),
        };
        let p: Polled = self
            .send(
                self.request(Method::GET, "/events")
                    .query(&q)
                    .timeout(Duration::from_secs(wait + 30)),
            )
            .await?;
        Ok(p.events)
    }

    /// One long-poll for many workers (a node's): acknowledges each entry's `ack`, then
    /// answers their pending events, waiting up to `poll.wait` seconds for the first.
    pub async fn poll_many(&self, poll: &PollMany) -> Result<PolledMany> {
        self.send(
            self.request(Method::POST, "/events/poll")
                .json(poll)
                .timeout(Duration::from_secs(poll.wait + 30)),
        )
        .await
    }

    /// Which of a node's workers (`q.workers`, each with its token) have urgent news waiting
    /// unseen longer than `q.older_than_ms`: those events, per worker.
    pub async fn overdue(&self, q: &OverdueQuery) -> Result<PolledMany> {
        self.send(self.request(Method::POST, "/events/overdue").json(q))
            .await
    }

    /// Acknowledges events; returns how many were newly acknowledged.
    pub async fn ack(&self, seqs: &[i64]) -> Result<usize> {
        let a: Acked = self
            .send(self.request(Method::POST, "/events/ack").json(&Ack {
                seqs: seqs.to_vec(),
            }))
            .await?;
        Ok(a.acked)
    }

    /// Records that the worker was shown its events `seqs` via `via` (their receipts);
    /// via a prompt the urgent ones also leave its queue. Returns how many were newly
    /// presented.
    pub async fn presented(&self, seqs: &[i64], via: Via) -> Result<usize> {
        let p: PresentedCount = self
            .send(
                self.request(Method::POST, "/events/presented")
                    .json(&Presented {
                        seqs: seqs.to_vec(),
                        via,
                    }),
            )
            .await?;
        Ok(p.presented)
    }

    pub async fn queue_state(&self) -> Result<QueueState> {
        self.send(self.request(Method::GET, "/events/state")).await
    }

    /// An operator notice to one worker or all (admin).
    pub async fn notice(
        &self,
        text: &str,
        to: Option<&str>,
        urgent: bool,
        dedup_key: Option<&str>,
    ) -> Result<Value> {
        self.send(self.request(Method::POST, "/events").json(&Notice {
            text: text.to_string(),
            to: to.map(str::to_string),
            urgent,
            dedup_key: dedup_key.map(str::to_string),
        }))
        .await
    }

    /// Opens a pull request from one of the caller's branches.
    pub async fn open_pr(&self, pr: &NewPr) -> Result<PullRequest> {
        self.send(self.request(Method::POST, "/prs").json(pr)).await
    }

    /// Pull requests, newest first (without reviews and comments).
    pub async fn list_prs(
        &self,
        state: Option<&str>,
        author: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<PullRequest>> {
        let q = ListPrs {
            state: state.map(str::to_string),
            author: author.map(str::to_string),
            limit,
        };
        self.send(self.request(Method::GET, "/prs").query(&q)).await
    }

    /// A pull request with reviews, comments, approvals and its branch against main.
    pub async fn view_pr(&self, number: i64) -> Result<Value> {
        self.send(self.request(Method::GET, &format!("/prs/{number}")))
            .await
    }

    pub async fn review_pr(&self, number: i64, verdict: &str, text: &str) -> Result<Review> {
        self.send(
            self.request(Method::POST, &format!("/prs/{number}/reviews"))
                .json(&NewReview {
                    verdict: verdict.to_string(),
                    text: text.to_string(),
                }),
        )
        .await
    }

    pub async fn comment_pr(&self, number: i64, text: &str) -> Result<Comment> {
        self.send(
            self.request(Method::POST, &format!("/prs/{number}/comments"))
                .json(&NewComment {
                    text: text.to_string(),
                }),
        )
        .await
    }

    /// Asks the hub to merge; the answer has the PR and the outcome.
    pub async fn merge_pr(&self, number: i64) -> Result<Value> {
        self.send(self.request(Method::POST, &format!("/prs/{number}/merge")))
            .await
    }

    /// Ships a pushed branch in one call: its PR opened or reused, merged through the gate,
    /// the PATCH_SUMMARY posted and the claims released; the answer lists each step.
    pub async fn ship(&self, ship: &NewShip) -> Result<Value> {
        self.send(self.request(Method::POST, "/ship").json(ship))
            .await
    }

    pub async fn close_pr(&self, number: i64) -> Result<PullRequest> {
        self.send(self.request(Method::POST, &format!("/prs/{number}/close")))
            .await
    }

    // issues

    /// Opens an issue as the caller.
    pub async fn open_issue(
        &self,
        issue: &agensh_domain::issue::NewIssue,
    ) -> Result<agensh_domain::issue::Issue> {
        self.send(self.request(Method::POST, "/issues").json(issue))
            .await
    }

    /// Issues, newest first (without their comments).
    pub async fn list_issues(
        &self,
        q: &agensh_protocol::rest::ListIssues,
    ) -> Result<Vec<agensh_domain::issue::Issue>> {
        self.send(self.request(Method::GET, "/issues").query(q))
            .await
    }

    /// One issue with its comments.
    pub async fn view_issue(&self, number: i64) -> Result<agensh_domain::issue::Issue> {
        self.send(self.request(Method::GET, &format!("/issues/{number}")))
            .await
    }

    pub async fn comment_issue(
        &self,
        number: i64,
        text: &str,
    ) -> Result<agensh_domain::issue::IssueComment> {
        self.send(
            self.request(Method::POST, &format!("/issues/{number}/comments"))
                .json(&NewComment {
                    text: text.to_string(),
                }),
        )
        .await
    }

    /// Adds and removes labels.
    pub async fn label_issue(
        &self,
        number: i64,
        add: Vec<String>,
        remove: Vec<String>,
    ) -> Result<agensh_domain::issue::Issue> {
        self.send(
            self.request(Method::POST, &format!("/issues/{number}/labels"))
                .json(&agensh_protocol::rest::LabelChange { add, remove }),
        )
        .await
    }

    /// Assigns the issue to `assignee`, or to nobody.
    pub async fn assign_issue(
        &self,
        number: i64,
        assignee: Option<&str>,
    ) -> Result<agensh_domain::issue::Issue> {
        self.send(
            self.request(Method::POST, &format!("/issues/{number}/assign"))
                .json(&agensh_protocol::rest::Assign {
                    assignee: assignee.map(str::to_string),
                }),
        )
        .await
    }

    pub async fn close_issue(&self, number: i64) -> Result<agensh_domain::issue::Issue> {
        self.send(self.request(Method::POST, &format!("/issues/{number}/close")))
            .await
    }

    pub async fn reopen_issue(&self, number: i64) -> Result<agensh_domain::issue::Issue> {
        self.send(self.request(Method::POST, &format!("/issues/{number}/reopen")))
            .await
    }
}

fn filter_query(f: &MessageFilter) -> ReadQuery {
    ReadQuery {
        with: f.with.clone(),
        limit: f.limit,
        before: f.before,
    }
}

/// Keeps a user-given id from changing the request path.
fn encode(id: &str) -> String {
    id.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn kind_of(status: StatusCode) -> ErrorKind {
    match status.as_u16() {
        400 | 405 => ErrorKind::Invalid,
        401 => ErrorKind::Unauthorized,
        403 => ErrorKind::Forbidden,
        404 => ErrorKind::NotFound,
        409 => ErrorKind::Conflict,
        413 => ErrorKind::TooLarge,
        429 => ErrorKind::RateLimited,
        _ => ErrorKind::Internal,
    }
}

/// The live stream's frames, as [`Client::stream`] reads them.
pub struct FrameStream {
    resp: reqwest::Response,
    parser: agensh_protocol::framing::SseParser,
    ready: std::collections::VecDeque<agensh_protocol::dashboard::Frame>,
}

impl FrameStream {
    /// The next frame; `None` when the hub ended the stream (it is shutting down).
    pub async fn next(&mut self) -> Result<Option<agensh_protocol::dashboard::Frame>> {
        loop {
            if let Some(f) = self.ready.pop_front() {
                return Ok(Some(f));
            }
            let chunk = self.resp.chunk().await.map_err(|e| {
                Error::new(
                    ErrorKind::Internal,
                    "unreachable",
                    format!("the hub's stream broke off: {e} — open it again with the last frame's cursor"),
                )
            })?;
            let Some(chunk) = chunk else {
                return Ok(None);
            };
            for ev in self.parser.push(&chunk) {
                if ev.event.as_deref() != Some("frame") {
                    continue;
                }
                let frame = serde_json::from_str(&ev.data).map_err(|e| {
                    Error::internal(format!("a frame of the hub's stream was not understood ({e}) — are client and hub the same version?"))
                })?;
                self.ready.push_back(frame);
            }
        }
    }
}
