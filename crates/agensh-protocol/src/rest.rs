//! The REST API's bodies and answers (`/api/v1`, docs/API.md) that are not domain types:
//! the hub deserializes what the client serializes from the same struct.

use agensh_domain::event::Event;
use agensh_domain::record::Record;
use serde::{Deserialize, Serialize};

/// The header with which the hub marks an answer to a request it did not process at all
/// (over `hub.max_connections`): a client may send it again as it was.
pub const UNPROCESSED_HEADER: &str = "x-agensh-unprocessed";

/// A record with what happened to it later, as `board unfold` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unfolded {
    pub record: Record,
    /// The newer PATCH_SUMMARY of the same author and label that replaced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<Record>,
    /// The FAIL of the same author and label that invalidated it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalidated_by: Option<Record>,
}

/// A worker's event queue as the hub reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueState {
    pub worker: String,
    /// Every event at or below this sequence number is acknowledged.
    pub cursor: i64,
    /// Events above the cursor acknowledged out of order.
    pub acked_above_cursor: usize,
}

/// How much the organization has produced, for summaries and the status view.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    pub workers: u64,
    pub records: u64,
    pub messages: u64,
    pub events: u64,
    pub prs_open: u64,
    pub prs_merged: u64,
    pub prs_closed: u64,
}

/// One model request that went through the model gateway, as recorded (issue 13).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    pub worker: String,
    /// The worker's turn, when the gateway knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u64>,
    /// The upstream's name.
    pub upstream: String,
    pub model: String,
    /// The upstream's HTTP status.
    pub status: u16,
    /// The whole prompt, cached tokens included.
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
    pub latency_ms: u64,
    /// Unix ms of the answer's end.
    pub at: i64,
}

/// Usage totals of one worker on one model (`GET /api/v1/usage`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelUsage {
    pub worker: String,
    pub model: String,
    pub requests: u64,
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
    /// Unix ms of the first of these requests.
    #[serde(default)]
    pub first_at: i64,
}

/// The budgets in force and what was spent (`GET`/`PUT /api/v1/budget`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetView {
    /// Unix ms the view was taken at (hours are counted to it).
    pub at: i64,
    /// The share of a budget at which a notice goes out.
    pub notice_at: f64,
    /// Every worker's budget unless one of its own was set.
    pub every_worker: agensh_domain::budget::Limits,
    pub organization: agensh_domain::budget::Limits,
    pub organization_spent: agensh_domain::budget::Spent,
    /// Why every worker is stopped, when the organization's budget is spent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub organization_stopped_for: Option<String>,
    pub workers: Vec<WorkerBudget>,
}

/// One worker's budget and what it spent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerBudget {
    pub worker: String,
    pub limits: agensh_domain::budget::Limits,
    pub spent: agensh_domain::budget::Spent,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_for: Option<String>,
}

/// Every refusal: `{"error":{"code","message"}}` with the HTTP status of its kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorInfo,
}

/// The inside of an [`ErrorBody`]: a stable code and a message that says what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorInfo {
    pub code: String,
    pub message: String,
}

/// Who the hub says the caller is (`GET /whoami`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WhoAmI {
    pub id: String,
    pub admin: bool,
}

/// `POST /workers`: how many workers to create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddWorkers {
    pub count: usize,
}

/// `POST /nodes`: a node to issue, and how many workers it may run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddNode {
    pub name: String,
    pub workers: usize,
}

/// `POST /nodes/register` (node token): how many workers the node runs now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterNode {
    pub workers: usize,
}

/// `PUT /workers/{id}/status`: the status as text (the hub names the valid ones).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetStatus {
    pub status: String,
}

/// The answer to `PUT /workers/status`: how many statuses were set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Updated {
    pub updated: usize,
}

/// `GET /board/recent`: at most this many entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap: Option<usize>,
}

/// `GET /board/grep`: the query, how many, and below which record id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrepQuery {
    pub q: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
}

/// `POST /board/claims/{id}/renew`: the new lease (the configured default when absent).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Renew {
    #[serde(default)]
    pub lease_secs: Option<u64>,
}

/// `GET /messages` and `POST /messages/read`: which conversation, how many, how far back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadQuery {
    /// `#channel` or a worker id: only that conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub with: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// Only messages older than this sequence number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<i64>,
}

/// `GET /events`: the long-poll of one worker.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PollQuery {
    /// Only events with a sequence number above this (the ones already in hand).
    #[serde(default)]
    pub after: i64,
    /// Seconds to wait for an event when none is pending (0 = answer at once).
    #[serde(default)]
    pub wait: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// Events to acknowledge first, comma-separated (saves a request per turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack: Option<String>,
}

/// The answer to `GET /events`: the pending events, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Polled {
    pub events: Vec<Event>,
}

/// `POST /events/ack`: the events to acknowledge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    pub seqs: Vec<i64>,
}

/// The answer to `POST /events/ack`: how many were newly acknowledged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acked {
    pub acked: usize,
}

/// `POST /events/presented`: the calling worker's events just shown to it, and how. Shown
/// in a prompt, the urgent ones among them also leave its queue (as `/events/ack` takes
/// them), so its tool results never repeat them; all are acknowledged when the turn ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Presented {
    pub seqs: Vec<i64>,
    pub via: agensh_domain::receipt::Via,
}

/// The answer to `POST /events/presented`: how many receipts were newly presented.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PresentedCount {
    pub presented: usize,
}

/// `POST /events`: an operator notice to one worker, or to all when `to` is absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    pub text: String,
    /// A worker id; everyone when absent.
    #[serde(default)]
    pub to: Option<String>,
    #[serde(default)]
    pub urgent: bool,
    #[serde(default)]
    pub dedup_key: Option<String>,
}

/// `GET /prs`: which pull requests, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListPrs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// `POST /prs/{n}/reviews`: the verdict as text (`approve`, `request_changes`, `comment`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewReview {
    pub verdict: String,
    pub text: String,
}

/// `POST /prs/{n}/comments`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewComment {
    pub text: String,
}

/// `GET /issues`: which issues, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListIssues {
    /// `open` (the default), `closed` or `all`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Only issues with this label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Only issues assigned to this worker, or `none`: to nobody.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignee: Option<String>,
    /// Only issues numbered below this (paging back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// `POST /issues/{n}/labels`: labels to add and to remove.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelChange {
    #[serde(default)]
    pub add: Vec<String>,
    #[serde(default)]
    pub remove: Vec<String>,
}

/// `POST /issues/{n}/assign`: a worker id, or `null` to unassign.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assign {
    pub assignee: Option<String>,
}

/// `POST /ship`: ship a branch in one call — open (or reuse) its PR, merge it through the
/// gate, post `summary` as a PATCH_SUMMARY and release claims.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewShip {
    /// The PR's title (one line).
    pub title: String,
    /// The PATCH_SUMMARY text (one line), also the PR's body.
    pub summary: String,
    /// The branch to ship; the caller's `<id>/work` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// The claim to release (a record id); when absent, the caller's live claims (those
    /// with `label`, when it is given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
    /// The work item: the PATCH_SUMMARY's label, and which claims to release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn absent_query_fields_are_left_out_and_read_back_as_none() {
        let q = GrepQuery {
            q: "x".into(),
            limit: None,
            before: Some("G9".into()),
        };
        assert_eq!(
            serde_json::to_value(&q).unwrap(),
            json!({ "q": "x", "before": "G9" })
        );
        let back: GrepQuery = serde_json::from_value(json!({ "q": "x" })).unwrap();
        assert_eq!((back.limit, back.before), (None, None));
    }

    #[test]
    fn a_renew_without_lease_is_accepted() {
        let r: Renew = serde_json::from_value(json!({})).unwrap();
        assert_eq!(r.lease_secs, None);
    }

    #[test]
    fn the_error_body_has_code_and_message_inside_error() {
        let b: ErrorBody =
            serde_json::from_value(json!({ "error": { "code": "bad_cap", "message": "m" } }))
                .unwrap();
        assert_eq!(b.error.code, "bad_cap");
        assert_eq!(b.error.message, "m");
    }
}
