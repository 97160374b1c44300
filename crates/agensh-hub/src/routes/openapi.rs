//! The OpenAPI 3.1 document of the REST API, served at `GET /api/v1/openapi.json`.
//!
//! Written here with serde_json, not derived by a proc-macro crate: the limits and enums
//! come from the domain's constants (`RecordKind::ALL`, `WorkerStatus::ALL`, the `page`
//! limits, the text limits), so they cannot drift from the validators, and the hub gains no
//! dependency. What keeps the rest true is `tests/openapi.rs`: the operations listed here
//! must be exactly [`super::operations`] (plus `/healthz` and `/metrics`), and every one is
//! called against a real hub with its examples, its answer's status documented and its
//! JSON body checked against the schema.

use std::sync::OnceLock;

use agensh_domain::config::MAX_WAIT_SECS;
use agensh_domain::event::DEDUP_KEY_LIMIT;
use agensh_domain::issue::{
    IssueState, BODY_LIMIT as ISSUE_BODY_LIMIT, LABELS_LIMIT, LABEL_LIMIT as ISSUE_LABEL_LIMIT,
    TITLE_LIMIT as ISSUE_TITLE_LIMIT,
};
use agensh_domain::message::{CHANNEL_LIMIT, MESSAGE_LIMIT};
use agensh_domain::node;
use agensh_domain::page;
use agensh_domain::pr::{BODY_LIMIT, BRANCH_LIMIT, TITLE_LIMIT};
use agensh_domain::receipt::Via;
use agensh_domain::record::{
    RecordKind, TakeoverReason, DETAIL_LIMIT, LABEL_LIMIT, MAX_LEASE_SECS, PATCH_SUMMARY_LIMIT,
    PATHS_LIMIT, PATH_LIMIT, TEXT_LIMIT,
};
use agensh_domain::turn;
use agensh_domain::worker::{WorkerStatus, ADD_LIMIT, BATCH_LIMIT};
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use serde_json::{json, Map, Value};

/// The document as served, built on first use.
pub fn text() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| serde_json::to_string_pretty(&document()).expect("the document is JSON"))
}

/// `GET /api/v1/openapi.json`: the document, to anyone (it takes no token).
pub async fn serve() -> impl IntoResponse {
    ([(CONTENT_TYPE, "application/json")], text())
}

/// A string with no control character (line breaks included), as the one-line fields are.
const ONE_LINE: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$";

fn schema(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn array(items: Value) -> Value {
    json!({ "type": "array", "items": items })
}

fn int() -> Value {
    json!({ "type": "integer", "format": "int64" })
}

fn count() -> Value {
    json!({ "type": "integer", "format": "int64", "minimum": 0 })
}

fn ms(description: &str) -> Value {
    json!({ "type": "integer", "format": "int64", "description": format!("Unix ms: {description}") })
}

fn string(description: &str) -> Value {
    json!({ "type": "string", "description": description })
}

fn range(min: usize, max: usize, description: &str) -> Value {
    json!({ "type": "integer", "format": "int64", "minimum": min, "maximum": max, "description": description })
}

/// A long-poll's `wait`: bounded by `hub.max_wait_secs`, which is at most
/// [`MAX_WAIT_SECS`] on any hub (a longer wait is `bad_wait`; a fuzzer must not park
/// requests for hours).
fn wait(description: &str) -> Value {
    json!({ "type": "integer", "format": "int64", "minimum": 0, "maximum": MAX_WAIT_SECS, "default": 0, "description": format!("{description}; at most `hub.max_wait_secs` (60 by default, {MAX_WAIT_SECS} at most)") })
}

fn bounded(min: usize, max: usize, description: &str) -> Value {
    json!({ "type": "string", "minLength": min, "maxLength": max, "description": description })
}

fn object(required: &[&str], properties: Value) -> Value {
    json!({ "type": "object", "required": required, "properties": properties })
}

/// The fields of a board record, shared by `Record` and `ViewEntry`.
fn record_properties() -> Map<String, Value> {
    let v = json!({
        "seq": json!({ "type": "integer", "format": "int64", "minimum": 1 }),
        "id": string("`G` and the seq, e.g. `G12`"),
        "kind": schema("RecordKind"),
        "author": string("a worker id, or `admin`"),
        "text": string("one line"),
        "label": string("the work item"),
        "detail": string("may span lines"),
        "paths": array(json!({ "type": "string" })),
        "created_at": ms("when it was posted"),
        "lease": schema("Lease"),
        "takes_over": schema("TakeOver"),
    });
    v.as_object().cloned().expect("an object")
}

/// The fields of a pull request, shared by `PullRequest` and `PrView`.
fn pr_properties() -> Map<String, Value> {
    let v = json!({
        "number": json!({ "type": "integer", "format": "int64", "minimum": 1 }),
        "author": string("the worker (or `admin`) that opened it"),
        "branch": string("e.g. `w01/work`"),
        "base": json!({ "type": "string", "enum": ["main"] }),
        "title": string("one line"),
        "body": string("may span lines"),
        "state": schema("PrState"),
        "created_at": ms("opened"),
        "updated_at": ms("the last review, comment, merge or close"),
        "closed_by": string("who merged or closed it"),
        "merge_commit": string("once merged: the merge commit on `main`"),
        "reviews": json!({ "type": "array", "items": schema("Review"), "description": "oldest first; filled only by `GET /prs/{n}`" }),
        "comments": json!({ "type": "array", "items": schema("Comment"), "description": "oldest first; filled only by `GET /prs/{n}`" }),
    });
    v.as_object().cloned().expect("an object")
}

const PR_REQUIRED: [&str; 10] = [
    "number",
    "author",
    "branch",
    "base",
    "title",
    "state",
    "created_at",
    "updated_at",
    "reviews",
    "comments",
];

fn schemas() -> Value {
    let kinds: Vec<Value> = RecordKind::ALL.iter().map(|k| json!(k.as_str())).collect();
    let statuses: Vec<Value> = WorkerStatus::ALL
        .iter()
        .map(|s| json!(s.as_str()))
        .collect();
    let record = json!({
        "type": "object",
        "required": ["seq", "id", "kind", "author", "text", "created_at"],
        "properties": record_properties(),
    });
    let mut view_properties = record_properties();
    view_properties.insert(
        "invalidated".into(),
        json!({ "type": "boolean", "description": "a newer FAIL of the same author and label; left out when false" }),
    );
    let mut pr_view_properties = pr_properties();
    pr_view_properties.insert(
        "approvals".into(),
        json!({ "type": "integer", "minimum": 0, "description": "reviewers whose latest review approves the branch's current commit" }),
    );
    pr_view_properties.insert("branch_summary".into(), schema("BranchSummary"));
    let mut pr_view_required = PR_REQUIRED.to_vec();
    pr_view_required.push("approvals");
    let limits = object(
        &["tokens", "cost_usd", "requests", "hours"],
        json!({
            "tokens": count(),
            "cost_usd": { "type": "number", "minimum": 0 },
            "requests": count(),
            "hours": { "type": "number", "minimum": 0 },
        }),
    );
    let vias: Vec<Value> = Via::ALL.iter().map(|v| json!(v.as_str())).collect();
    let entries: Vec<(&str, Value)> = vec![
        (
            "Error",
            json!({
                "type": "object",
                "description": "Every refusal. `code` is stable and meant for programs (docs/API.md, \"Error codes\"); `message` says what to do and its wording may change.",
                "required": ["error"],
                "properties": {
                    "error": object(&["code", "message"], json!({
                        "code": { "type": "string", "example": "text_too_long" },
                        "message": { "type": "string" },
                    })),
                },
                "example": { "error": { "code": "text_too_long", "message": "FACT text is 143 characters; the limit is 100 — shorten it or move the rest to detail" } },
            }),
        ),
        (
            "DomainError",
            object(
                &["kind", "code", "message"],
                json!({
                    "kind": { "type": "string", "enum": ["invalid", "unauthorized", "forbidden", "not_found", "conflict", "too_large", "internal"] },
                    "code": { "type": "string" },
                    "message": { "type": "string" },
                }),
            ),
        ),
        (
            "WorkerId",
            json!({
                "type": "string",
                "pattern": "^w[0-9]{1,11}$",
                "description": "`w` and digits, at most 12 characters",
                "example": "w01",
            }),
        ),
        (
            "WhoAmI",
            object(
                &["id", "admin"],
                json!({
                    "id": string("a worker id, or `admin`"),
                    "admin": { "type": "boolean", "description": "whether the request carries the admin token" },
                }),
            ),
        ),
        (
            "Stats",
            object(
                &[
                    "workers",
                    "records",
                    "messages",
                    "events",
                    "prs_open",
                    "prs_merged",
                    "prs_closed",
                ],
                json!({
                    "workers": count(), "records": count(), "messages": count(), "events": count(),
                    "prs_open": count(), "prs_merged": count(), "prs_closed": count(),
                }),
            ),
        ),
        (
            "GoalStatus",
            object(
                &["conditions", "checks", "runs"],
                json!({
                    "conditions": array(string("a condition as written in organization.done_when (`command: CMD`, `issues`, `score: X`)")),
                    "checks": array(schema("ConditionCheck")),
                    "runs": count(),
                    "met_at": ms("when every condition held; absent while the goal is not met"),
                    "met_commit": string("the commit of main the goal was met at"),
                    "economy": { "type": "object", "description": "what the run spent through the model gateway (total, before and after the goal was met or the last merge), per merged PR, and the share of requests after it" },
                }),
            ),
        ),
        (
            "ConditionCheck",
            object(
                &["condition", "met", "commit", "at"],
                json!({
                    "condition": string("the condition as written"),
                    "met": { "type": "boolean" },
                    "commit": string("the commit of main it was checked on"),
                    "at": ms("when the check ended"),
                    "took_ms": count(),
                    "exit": int(),
                    "timed_out": { "type": "boolean", "description": "a command cut at organization.done_timeout_secs (not met)" },
                    "detail": string("a command's last output, the issues still open, or the score"),
                }),
            ),
        ),
        (
            "ModelUsage",
            object(
                &[
                    "worker",
                    "model",
                    "requests",
                    "input_tokens",
                    "cached_input_tokens",
                    "output_tokens",
                    "cost_usd",
                    "first_at",
                ],
                json!({
                    "worker": string("a worker id"),
                    "model": string("as the requests named it"),
                    "requests": count(),
                    "input_tokens": count(),
                    "cached_input_tokens": count(),
                    "output_tokens": count(),
                    "cost_usd": { "type": "number" },
                    "first_at": ms("the first of these requests"),
                }),
            ),
        ),
        ("Limits", limits),
        (
            "Spent",
            object(
                &["tokens", "cost_usd", "requests", "first_at"],
                json!({
                    "tokens": count(),
                    "cost_usd": { "type": "number" },
                    "requests": count(),
                    "first_at": ms("the first model request; 0: none yet"),
                }),
            ),
        ),
        (
            "WorkerBudget",
            object(
                &["worker", "limits", "spent"],
                json!({
                    "worker": string("a worker id"),
                    "limits": schema("Limits"),
                    "spent": schema("Spent"),
                    "stopped_for": string("why a spent budget keeps the worker stopped"),
                }),
            ),
        ),
        (
            "BudgetView",
            object(
                &[
                    "at",
                    "notice_at",
                    "every_worker",
                    "organization",
                    "organization_spent",
                    "workers",
                ],
                json!({
                    "at": ms("when the view was taken"),
                    "notice_at": { "type": "number", "description": "the share of a budget at which a notice goes out" },
                    "every_worker": schema("Limits"),
                    "organization": schema("Limits"),
                    "organization_spent": schema("Spent"),
                    "organization_stopped_for": string("why every worker is stopped"),
                    "workers": array(schema("WorkerBudget")),
                }),
            ),
        ),
        (
            "LimitsChange",
            json!({
                "type": "object",
                "description": "One worker's budget (`worker`), the organization's (`organization: true`), or neither: every worker's default. Fields left out stay; 0 removes a limit. Unlike other bodies, unknown fields are refused (`bad_body`).",
                "additionalProperties": false,
                "properties": {
                    "worker": schema("WorkerId"),
                    "organization": { "type": "boolean", "default": false },
                    "tokens": count(),
                    "cost_usd": { "type": "number", "minimum": 0 },
                    "requests": count(),
                    "hours": { "type": "number", "minimum": 0 },
                },
                "anyOf": [
                    { "required": ["tokens"] }, { "required": ["cost_usd"] },
                    { "required": ["requests"] }, { "required": ["hours"] },
                ],
            }),
        ),
        (
            "WorkerStatus",
            json!({ "type": "string", "enum": statuses }),
        ),
        (
            "WorkerProgress",
            object(
                &["step", "since", "tokens"],
                json!({
                    "step": string("the current step, e.g. `model request 3 (1204 tokens in)`"),
                    "since": ms("when the step began"),
                    "tokens": count(),
                    "tokens_per_sec": { "type": "number", "default": 0, "description": "of the last model reply" },
                }),
            ),
        ),
        (
            "WorkerInfo",
            object(
                &["id", "status", "claims", "created_at"],
                json!({
                    "id": schema("WorkerId"),
                    "status": schema("WorkerStatus"),
                    "progress": schema("WorkerProgress"),
                    "agent": string("which agent the worker runs, as its node reported"),
                    "stopped_for": string("why a spent budget keeps the worker stopped"),
                    "claims": json!({ "type": "array", "items": schema("Record"), "description": "its live CLAIM records" }),
                    "last_activity": ms("the last request made as this worker"),
                    "created_at": ms("registered"),
                }),
            ),
        ),
        (
            "NewWorker",
            object(
                &["id", "token"],
                json!({
                    "id": schema("WorkerId"),
                    "token": string("`agw_` and 40 hex digits"),
                }),
            ),
        ),
        (
            "AddNode",
            object(
                &["name", "workers"],
                json!({
                    "name": { "type": "string", "minLength": 1, "maxLength": node::NAME_MAX, "description": "letters, digits, '-', '_' or '.', starting with a letter or digit" },
                    "workers": range(1, node::WORKERS_MAX, "how many workers the node may run"),
                }),
            ),
        ),
        (
            "NewNode",
            object(
                &["name", "token", "workers"],
                json!({
                    "name": string("the node's name"),
                    "token": string("`agn_` and 40 hex digits: shown this once"),
                    "workers": range(1, node::WORKERS_MAX, "how many workers the node may run"),
                }),
            ),
        ),
        (
            "NodeInfo",
            object(
                &["name", "workers", "assigned", "created_at"],
                json!({
                    "name": string("the node's name"),
                    "workers": range(1, node::WORKERS_MAX, "how many workers the node may run"),
                    "assigned": json!({ "type": "array", "items": schema("WorkerId"), "description": "the workers it was given, in id order" }),
                    "created_at": ms("issued"),
                    "registered_at": json!({ "type": ["integer", "null"], "format": "int64", "description": "Unix ms: its last registration; null when it never registered" }),
                }),
            ),
        ),
        (
            "RegisterNode",
            object(
                &["workers"],
                json!({ "workers": range(1, node::WORKERS_MAX, "how many workers the node runs now; at most what it may run") }),
            ),
        ),
        (
            "Registered",
            object(
                &[
                    "node",
                    "workers",
                    "goal",
                    "organization_size",
                    "pack",
                    "notices_minutes",
                ],
                json!({
                    "node": string("the node's name"),
                    "workers": json!({ "type": "array", "items": schema("NewWorker"), "description": "its workers with their tokens: the same ones on every registration" }),
                    "goal": string("the organization's goal, for the workers' prompt"),
                    "organization_size": count(),
                    "pack": json!({ "type": "array", "items": { "type": "string" }, "description": "the task pack's fragments (`organization.pack`), appended to every worker's prompt in order" }),
                    "ends_at": ms("the run's end (the run clock); left out when the run has no deadline"),
                    "notices_minutes": json!({ "type": "array", "items": { "type": "number", "exclusiveMinimum": 0 }, "description": "minutes before the end at which each worker gets a deadline notice (`run.notices_minutes`)" }),
                }),
            ),
        ),
        (
            "AddWorkers",
            object(
                &["count"],
                json!({ "count": range(1, ADD_LIMIT, "how many workers to create") }),
            ),
        ),
        (
            "SetStatus",
            object(&["status"], json!({ "status": schema("WorkerStatus") })),
        ),
        (
            "StatusSet",
            object(
                &["id", "status"],
                json!({
                    "id": schema("WorkerId"),
                    "status": schema("WorkerStatus"),
                }),
            ),
        ),
        (
            "StatusReport",
            object(
                &["id", "status"],
                json!({
                    "id": schema("WorkerId"),
                    "token": string("the worker's token; needed unless the request's own token is the admin's or this worker's"),
                    "status": schema("WorkerStatus"),
                    "progress": schema("WorkerProgress"),
                    "agent": string("which agent the worker runs, on which model"),
                }),
            ),
        ),
        (
            "StatusReports",
            object(
                &["workers"],
                json!({
                    "workers": { "type": "array", "items": schema("StatusReport"), "minItems": 1, "maxItems": BATCH_LIMIT },
                }),
            ),
        ),
        (
            "Updated",
            object(&["updated"], json!({ "updated": count() })),
        ),
        (
            "ToolCallSummary",
            object(
                &["name", "title", "status"],
                json!({
                    "name": json!({ "type": "string", "maxLength": turn::NAME_CHARS, "description": "the tool (`claim`, `pr_merge`, `run`), or an ACP call's kind (`execute`, `edit`) when it is not an organization tool" }),
                    "title": json!({ "type": "string", "maxLength": turn::TITLE_CHARS, "description": "what it worked on, as the agent titled it" }),
                    "status": json!({ "type": "string", "maxLength": turn::STATUS_CHARS, "description": "how it ended: `completed`, `failed`, … (`in_progress` when the turn ended first)" }),
                }),
            ),
        ),
        (
            "TurnReport",
            object(
                &[
                    "turn",
                    "started_at",
                    "ended_at",
                    "prompt",
                    "events",
                    "tool_calls",
                    "tool_calls_dropped",
                    "input_tokens",
                    "output_tokens",
                    "stop_reason",
                    "last_action",
                    "restarts",
                    "memory_kills",
                ],
                json!({
                    "turn": json!({ "type": "integer", "format": "int64", "minimum": 1, "description": "the worker's turn number; a report sent again replaces the first" }),
                    "started_at": ms("the prompt was sent"),
                    "ended_at": ms("the turn ended; not before `started_at`"),
                    "prompt": json!({ "type": "string", "description": format!("what the agent was sent, at most {} bytes: the node cuts a longer one at a character boundary and ends it with a marker. Controls other than line breaks and tabs are stored escaped (`\\u{{1b}}`)", turn::PROMPT_BYTES) }),
                    "events": json!({ "type": "array", "items": { "type": "integer", "format": "int64", "minimum": 1 }, "maxItems": turn::EVENTS, "description": "the seqs of the events the prompt carried (notices delivered)" }),
                    "tool_calls": json!({ "type": "array", "items": schema("ToolCallSummary"), "maxItems": turn::TOOL_CALLS, "description": "in the order the agent made them" }),
                    "tool_calls_dropped": count(),
                    "input_tokens": count(),
                    "output_tokens": count(),
                    "stop_reason": json!({ "type": "string", "maxLength": turn::STATUS_CHARS, "description": "`end_turn`, `max_tokens`, `cancelled`, …" }),
                    "last_action": json!({ "type": "string", "maxLength": turn::LAST_ACTION_CHARS, "description": "the last tool called, else the stop reason" }),
                    "restarts": json!({ "type": "integer", "format": "int64", "minimum": 0, "description": "restarts of the worker's agent so far" }),
                    "memory_kills": json!({ "type": "integer", "format": "int64", "minimum": 0, "description": "times so far the worker's agent was killed by its memory limit (`run.worker_memory`; each also a restart)" }),
                }),
            ),
        ),
        ("RecordKind", json!({ "type": "string", "enum": kinds })),
        (
            "Lease",
            object(
                &["expires_at"],
                json!({
                    "expires_at": ms("when the claim stops being live"),
                    "released_at": ms("when it was released, or taken over while its lease ran"),
                    "taken_over_by": string("the claim that took it over, e.g. `G15`"),
                }),
            ),
        ),
        (
            "TakeOver",
            object(
                &["id", "author", "why"],
                json!({
                    "id": string("the claim taken over, e.g. `G12`"),
                    "author": string("its author"),
                    "why": json!({ "type": "string", "enum": TakeoverReason::ALL.map(TakeoverReason::as_str), "description": "why it could be taken: its author had released it, was dead or stopped, or its lease had run out" }),
                }),
            ),
        ),
        ("Record", record),
        (
            "ViewEntry",
            json!({ "type": "object", "required": ["seq", "id", "kind", "author", "text", "created_at"], "properties": view_properties }),
        ),
        (
            "NewRecord",
            json!({
                "type": "object",
                "required": ["kind", "text"],
                "properties": {
                    "kind": json!({ "type": "string", "enum": kinds, "description": "matched without regard to case" }),
                    "text": { "type": "string", "minLength": 1, "maxLength": PATCH_SUMMARY_LIMIT, "pattern": ONE_LINE, "description": format!("one line, not only whitespace; at most {TEXT_LIMIT} characters ({PATCH_SUMMARY_LIMIT} for a PATCH_SUMMARY)") },
                    "label": { "type": "string", "minLength": 1, "maxLength": LABEL_LIMIT, "description": "letters and digits of any script and `- _ . / : #`" },
                    "detail": { "type": "string", "maxLength": DETAIL_LIMIT },
                    "paths": { "type": "array", "maxItems": PATHS_LIMIT, "items": { "type": "string", "minLength": 1, "maxLength": PATH_LIMIT }, "description": "CLAIM only: relative paths, no `..` segment" },
                    "lease_secs": json!({ "type": "integer", "format": "int64", "minimum": 1, "maximum": MAX_LEASE_SECS, "description": "CLAIM only; default `board.claim_lease_secs`" }),
                    "takes_over": json!({ "type": "string", "pattern": "^[Gg]?[0-9]+$", "description": "CLAIM only: the id of a claim to take over — its author dead or stopped, or it released or expired (else `claim_alive`); without `label` and `paths` the new claim gets the old one's" }),
                },
            }),
        ),
        (
            "ClaimOverlap",
            object(
                &["id", "author", "text", "same_label", "expires_at"],
                json!({
                    "id": string("the other claim"),
                    "author": string("its author"),
                    "text": string("its text"),
                    "label": string("its label"),
                    "paths": json!({ "type": "array", "items": { "type": "string" }, "description": "its paths that touch the new claim's" }),
                    "same_label": { "type": "boolean" },
                    "expires_at": ms("when its lease runs out"),
                }),
            ),
        ),
        (
            "Appended",
            object(
                &["record"],
                json!({
                    "record": schema("Record"),
                    "overlaps": json!({ "type": "array", "items": schema("ClaimOverlap"), "description": "other authors' live claims that collide; left out when none" }),
                }),
            ),
        ),
        (
            "Unfolded",
            object(
                &["record"],
                json!({
                    "record": schema("Record"),
                    "superseded_by": schema("Record"),
                    "invalidated_by": schema("Record"),
                }),
            ),
        ),
        (
            "Renew",
            json!({
                "type": "object",
                "properties": {
                    "lease_secs": json!({ "type": ["integer", "null"], "format": "int64", "minimum": 1, "maximum": MAX_LEASE_SECS, "description": "default `board.claim_lease_secs`" }),
                },
            }),
        ),
        (
            "Message",
            object(
                &["seq", "from", "to", "text", "created_at"],
                json!({
                    "seq": json!({ "type": "integer", "format": "int64", "minimum": 1 }),
                    "from": string("a worker id, or `admin`"),
                    "to": string("`#channel` or a worker id"),
                    "text": string("may span lines"),
                    "thread": int(),
                    "created_at": ms("sent"),
                }),
            ),
        ),
        (
            "NewMessage",
            object(
                &["to", "text"],
                json!({
                    "to": json!({ "type": "string", "pattern": format!("^(#[a-z0-9_-]{{1,{CHANNEL_LIMIT}}}|w[0-9]{{1,11}})$"), "description": "`#channel` or a registered worker id (not the sender)" }),
                    "text": bounded(1, MESSAGE_LIMIT, "not only whitespace; may span lines"),
                    "thread": json!({ "type": "integer", "format": "int64", "minimum": 1, "description": "the seq of the message answered" }),
                }),
            ),
        ),
        (
            "Priority",
            json!({ "type": "string", "enum": ["urgent", "normal"] }),
        ),
        (
            "Event",
            object(
                &["seq", "kind", "priority", "payload", "created_at"],
                json!({
                    "seq": json!({ "type": "integer", "format": "int64", "minimum": 1 }),
                    "kind": string("`board.record`, `msg.channel`, `msg.dm`, `msg.unseen`, `notice`, `pr.*`, `issue.*`, `main.updated`, `worker.stop`, `worker.resume` (docs/API.md, \"Events\")"),
                    "priority": schema("Priority"),
                    "payload": { "type": "object", "description": "depends on the kind" },
                    "dedup_key": string("events with the same target and key are stored once"),
                    "source": string("the worker or `admin` whose action caused it"),
                    "target": string("left out for broadcasts"),
                    "except": string("a broadcast only: one more worker that does not get it"),
                    "created_at": ms("stored"),
                }),
            ),
        ),
        (
            "Polled",
            object(&["events"], json!({ "events": array(schema("Event")) })),
        ),
        (
            "PollEntry",
            object(
                &["id"],
                json!({
                    "id": schema("WorkerId"),
                    "token": string("the worker's token; needed unless the request's own token is the admin's or this worker's"),
                    "after": json!({ "type": "integer", "format": "int64", "default": 0 }),
                    "ack": json!({ "type": "array", "items": int(), "maxItems": 10000 }),
                }),
            ),
        ),
        (
            "PollMany",
            object(
                &["workers"],
                json!({
                    "workers": { "type": "array", "items": schema("PollEntry"), "minItems": 1, "maxItems": BATCH_LIMIT },
                    "wait": wait("seconds"),
                    "limit": range(1, page::POLL_MANY.max, "most events per worker"),
                }),
            ),
        ),
        (
            "OverdueQuery",
            object(
                &["older_than_ms", "workers"],
                json!({
                    "older_than_ms": json!({ "type": "integer", "format": "int64", "minimum": 0, "description": "how long an event waited unseen (run.interrupt_after_secs)" }),
                    "workers": { "type": "array", "items": schema("PollEntry"), "minItems": 1, "maxItems": BATCH_LIMIT, "description": "`after` and `ack` are not used" },
                }),
            ),
        ),
        (
            "PolledMany",
            object(
                &["events", "workers"],
                json!({
                    "events": json!({ "type": "array", "items": schema("Event"), "description": "each event once, oldest first" }),
                    "workers": { "type": "object", "additionalProperties": array(int()), "description": "worker id → the seq of its events" },
                    "errors": { "type": "object", "additionalProperties": schema("DomainError"), "description": "worker id → why its entry was refused" },
                }),
            ),
        ),
        (
            "Ack",
            object(
                &["seqs"],
                json!({ "seqs": { "type": "array", "items": int(), "maxItems": 10000 } }),
            ),
        ),
        ("Acked", object(&["acked"], json!({ "acked": count() }))),
        (
            "Via",
            json!({ "type": "string", "enum": vias, "description": "how an event was shown to its worker: in a tool result's `notices`, in a turn's prompt, or in the prompt of a turn that interrupted the one it was in" }),
        ),
        (
            "Presented",
            object(
                &["seqs", "via"],
                json!({
                    "seqs": { "type": "array", "items": int(), "maxItems": 10000 },
                    "via": schema("Via"),
                }),
            ),
        ),
        (
            "PresentedCount",
            object(&["presented"], json!({ "presented": count() })),
        ),
        (
            "Receipt",
            object(
                &["worker", "event", "kind", "stored_at", "state"],
                json!({
                    "worker": schema("WorkerId"),
                    "event": json!({ "type": "integer", "format": "int64", "minimum": 1, "description": "the event's seq" }),
                    "kind": string("the event's kind"),
                    "stored_at": ms("the event was stored"),
                    "state": { "type": "string", "enum": ["stored", "presented", "acknowledged"] },
                    "presented_at": ms("first shown to the worker"),
                    "via": schema("Via"),
                    "acknowledged_at": ms("the tool call or turn that carried it completed"),
                }),
            ),
        ),
        (
            "MessageStatus",
            object(
                &["id", "seq", "from", "to", "created_at", "receipts"],
                json!({
                    "id": string("`M` and the seq, e.g. `M12`"),
                    "seq": json!({ "type": "integer", "format": "int64", "minimum": 1 }),
                    "from": string("a worker id, or `admin`"),
                    "to": string("`#channel` or a worker id"),
                    "created_at": ms("sent"),
                    "receipts": json!({ "type": "array", "items": schema("Receipt"), "description": "one per recipient: a direct message's worker, or every worker but the sender" }),
                }),
            ),
        ),
        (
            "QueueState",
            object(
                &["worker", "cursor", "acked_above_cursor"],
                json!({
                    "worker": schema("WorkerId"),
                    "cursor": int(),
                    "acked_above_cursor": count(),
                }),
            ),
        ),
        (
            "Notice",
            object(
                &["text"],
                json!({
                    "text": bounded(1, MESSAGE_LIMIT, "not only whitespace"),
                    "to": schema("WorkerId"),
                    "urgent": { "type": "boolean", "default": false },
                    "dedup_key": bounded(1, DEDUP_KEY_LIMIT, "stored as `notice:<key>`"),
                }),
            ),
        ),
        (
            "NoticeAnswer",
            object(
                &["event", "duplicate"],
                json!({
                    "event": { "oneOf": [schema("Event"), { "type": "null" }] },
                    "duplicate": { "type": "boolean" },
                }),
            ),
        ),
        (
            "PrState",
            json!({ "type": "string", "enum": ["open", "merged", "closed"] }),
        ),
        (
            "Review",
            object(
                &["id", "author", "verdict", "text", "created_at"],
                json!({
                    "id": int(),
                    "author": string("the reviewer"),
                    "verdict": { "type": "string", "enum": ["approve", "request_changes"] },
                    "text": string("may span lines"),
                    "created_at": ms("reviewed"),
                    "commit": string("the branch's commit the review saw"),
                }),
            ),
        ),
        (
            "Comment",
            object(
                &["id", "author", "text", "created_at"],
                json!({
                    "id": int(),
                    "author": string("the commenter"),
                    "text": string("may span lines"),
                    "created_at": ms("commented"),
                }),
            ),
        ),
        (
            "PullRequest",
            json!({ "type": "object", "required": PR_REQUIRED, "properties": pr_properties() }),
        ),
        (
            "CommitInfo",
            object(
                &["sha", "author", "subject"],
                json!({
                    "sha": string("the commit"), "author": string("its author name"), "subject": string("its first line"),
                }),
            ),
        ),
        (
            "FileStat",
            object(
                &["path", "added", "removed"],
                json!({
                    "path": string("a renamed file is listed under its new path"),
                    "added": { "type": ["integer", "null"], "minimum": 0, "description": "null for a binary file" },
                    "removed": { "type": ["integer", "null"], "minimum": 0, "description": "null for a binary file" },
                }),
            ),
        ),
        (
            "IssueState",
            json!({ "type": "string", "enum": IssueState::ALL.map(IssueState::as_str) }),
        ),
        (
            "IssueComment",
            object(
                &["id", "author", "text", "created_at"],
                json!({
                    "id": json!({ "type": "integer", "format": "int64", "minimum": 1 }),
                    "author": string("a worker id, or `admin`"),
                    "text": string("may span lines"),
                    "created_at": ms("posted"),
                }),
            ),
        ),
        (
            "Issue",
            object(
                &[
                    "number",
                    "title",
                    "author",
                    "state",
                    "labels",
                    "comment_count",
                    "comments",
                    "created_at",
                    "updated_at",
                ],
                json!({
                    "number": json!({ "type": "integer", "format": "int64", "minimum": 1 }),
                    "title": string("one line"),
                    "body": string("may span lines"),
                    "author": string("a worker id, or `admin`"),
                    "state": schema("IssueState"),
                    "labels": json!({ "type": "array", "items": { "type": "string" }, "description": "sorted, each once" }),
                    "assignee": schema("WorkerId"),
                    "comment_count": count(),
                    "comments": json!({ "type": "array", "items": schema("IssueComment"), "description": "oldest first; filled only by `GET /issues/{n}`" }),
                    "created_at": ms("opened"),
                    "updated_at": ms("the last change or comment"),
                    "closed_at": ms("closed, while it is"),
                    "closed_by": string("who closed it: a worker id, `admin`, or `pr#N` when merged pull request N said `closes #N`"),
                }),
            ),
        ),
        (
            "NewIssue",
            object(
                &["title"],
                json!({
                    "title": json!({ "type": "string", "minLength": 1, "maxLength": ISSUE_TITLE_LIMIT, "pattern": ONE_LINE, "description": "one line, not only whitespace" }),
                    "body": bounded(1, ISSUE_BODY_LIMIT, "not only whitespace; may span lines"),
                    "labels": json!({ "type": "array", "maxItems": LABELS_LIMIT, "items": { "type": "string", "minLength": 1, "maxLength": ISSUE_LABEL_LIMIT, "pattern": "^[^,\\u0000-\\u001f\\u007f-\\u009f]*$" }, "description": "one line each, no comma, no space at either end" }),
                }),
            ),
        ),
        (
            "NewIssueComment",
            object(
                &["text"],
                json!({ "text": bounded(1, ISSUE_BODY_LIMIT, "not only whitespace; may span lines") }),
            ),
        ),
        (
            "LabelChange",
            json!({
                "type": "object",
                "description": "at least one label in `add` or `remove`",
                "properties": {
                    "add": json!({ "type": "array", "maxItems": LABELS_LIMIT, "items": { "type": "string", "minLength": 1, "maxLength": ISSUE_LABEL_LIMIT } }),
                    "remove": json!({ "type": "array", "items": { "type": "string", "minLength": 1, "maxLength": ISSUE_LABEL_LIMIT } }),
                },
            }),
        ),
        (
            "Assign",
            object(
                &["assignee"],
                json!({ "assignee": json!({ "type": ["string", "null"], "pattern": "^w[0-9]{1,11}$", "description": "a worker id, or null to unassign; a worker may name only itself" }) }),
            ),
        ),
        (
            "Mergeability",
            json!({
                "oneOf": [
                    object(&["state"], json!({ "state": { "type": "string", "enum": ["mergeable"] } })),
                    object(&["state", "files"], json!({ "state": { "type": "string", "enum": ["conflict"] }, "files": array(json!({ "type": "string" })) })),
                    object(&["state"], json!({ "state": { "type": "string", "enum": ["up_to_date"] } })),
                ],
            }),
        ),
        (
            "BranchSummary",
            object(
                &["head", "base", "commits", "files", "mergeability"],
                json!({
                    "head": string("the commit the branch points at"),
                    "base": string("the commit `main` points at"),
                    "commits": json!({ "type": "array", "items": schema("CommitInfo"), "maxItems": 100, "description": "commits `main` lacks, newest first" }),
                    "files": json!({ "type": "array", "items": schema("FileStat"), "description": "changed since the branch forked from `main`" }),
                    "mergeability": schema("Mergeability"),
                }),
            ),
        ),
        (
            "PrView",
            json!({ "type": "object", "required": pr_view_required, "properties": pr_view_properties }),
        ),
        (
            "NewPr",
            object(
                &["branch", "title"],
                json!({
                    "branch": json!({ "type": "string", "minLength": 1, "maxLength": BRANCH_LIMIT, "pattern": "^[A-Za-z0-9_./-]+$", "description": "in the caller's namespace, `<caller>/<name>`, already pushed" }),
                    "title": json!({ "type": "string", "minLength": 1, "maxLength": TITLE_LIMIT, "pattern": ONE_LINE, "description": "one line, not only whitespace" }),
                    "body": bounded(1, BODY_LIMIT, "not only whitespace; may span lines"),
                }),
            ),
        ),
        (
            "NewReview",
            object(
                &["verdict", "text"],
                json!({
                    "verdict": { "type": "string", "enum": ["approve", "request_changes", "request-changes"] },
                    "text": bounded(1, BODY_LIMIT, "not only whitespace; may span lines"),
                }),
            ),
        ),
        (
            "NewComment",
            object(
                &["text"],
                json!({ "text": bounded(1, BODY_LIMIT, "not only whitespace; may span lines") }),
            ),
        ),
        (
            "Merged",
            object(
                &["pr", "outcome", "head"],
                json!({
                    "pr": schema("PullRequest"),
                    "outcome": { "type": "string", "enum": ["merged", "up_to_date"], "description": "`up_to_date`: `main` already had every commit and did not move" },
                    "commit": string("outcome `merged`: the merge commit `main` now points at"),
                    "head": string("the branch's commit that was merged"),
                    "attempts": json!({ "type": "integer", "minimum": 1, "description": "outcome `merged`: compare-and-swap rounds" }),
                }),
            ),
        ),
        (
            "NewShip",
            object(
                &["title", "summary"],
                json!({
                    "title": json!({ "type": "string", "minLength": 1, "maxLength": TITLE_LIMIT, "pattern": ONE_LINE, "description": "the PR's title" }),
                    "summary": json!({ "type": "string", "minLength": 1, "maxLength": PATCH_SUMMARY_LIMIT, "pattern": ONE_LINE, "description": "the PATCH_SUMMARY's text, also the PR's body" }),
                    "branch": json!({ "type": "string", "minLength": 1, "maxLength": BRANCH_LIMIT, "description": "default `<caller>/work`" }),
                    "claim": string("the claim to release (one of the caller's live claims)"),
                    "label": json!({ "type": "string", "minLength": 1, "maxLength": LABEL_LIMIT, "description": "the PATCH_SUMMARY's label, and which claims to release" }),
                }),
            ),
        ),
        (
            "Shipped",
            object(
                &[
                    "pr",
                    "opened",
                    "merge_commit",
                    "summary",
                    "released",
                    "steps",
                ],
                json!({
                    "pr": schema("PullRequest"),
                    "opened": { "type": "boolean", "description": "false: the caller's open PR for the branch was reused" },
                    "merge_commit": string("the commit `main` points at now"),
                    "summary": schema("Record"),
                    "released": array(schema("Record")),
                    "steps": json!({ "type": "array", "items": { "type": "string" }, "description": "what was done, in order" }),
                }),
            ),
        ),
        (
            "WorkerRow",
            object(
                &[
                    "id", "status", "turns", "tokens", "cost_usd", "restarts", "open_prs",
                ],
                json!({
                    "id": string("the worker's id"),
                    "status": { "type": "string", "enum": statuses.clone() },
                    "agent": string("its agent, as its node reported"),
                    "step": string("the step of its turn, while busy"),
                    "step_since": ms("when the step began"),
                    "claim": string("its newest live claim's label (or text)"),
                    "claim_id": string("that claim's record id"),
                    "last_activity": ms("its last request to the hub"),
                    "last_action": string("what its agent did last in its last finished turn"),
                    "last_action_at": ms("when that turn ended"),
                    "turns": count(),
                    "tokens": count(),
                    "cost_usd": { "type": "number", "minimum": 0 },
                    "restarts": count(),
                    "open_prs": count(),
                    "stopped_for": string("why the hub stopped it (a budget)"),
                }),
            ),
        ),
        (
            "KindLatency",
            object(
                &["kind", "samples", "p50_ms", "p99_ms"],
                json!({
                    "kind": string("an event kind"),
                    "samples": count(),
                    "p50_ms": count(),
                    "p99_ms": count(),
                }),
            ),
        ),
        (
            "Health",
            object(
                &[
                    "delivery_p50_ms",
                    "delivery_p99_ms",
                    "delivery_samples",
                    "claims",
                    "claim_overlaps",
                    "idle_share",
                    "prs_waiting",
                    "urgent_waiting",
                ],
                json!({
                    "delivery_p50_ms": count(),
                    "delivery_p99_ms": count(),
                    "delivery_samples": count(),
                    "claims": count(),
                    "claim_overlaps": count(),
                    "idle_share": { "type": "number", "minimum": 0, "maximum": 1 },
                    "prs_waiting": count(),
                    "urgent_waiting": json!({ "type": "integer", "format": "int64", "minimum": 0, "description": "urgent items stored in the last hour that their worker has not been shown yet" }),
                    "presented": json!({ "type": "array", "items": schema("KindLatency"), "description": "stored → presented times per kind, over the last hour's presentations" }),
                }),
            ),
        ),
        (
            "RunClock",
            object(
                &["started_at"],
                json!({ "started_at": ms("the run's start"), "ends_at": ms("the run's end; none: no deadline") }),
            ),
        ),
        (
            "Score",
            object(
                &["at", "score", "label"],
                json!({
                    "at": ms("when the scored commit was taken"),
                    "score": { "type": "number", "minimum": 0, "maximum": 1 },
                    "label": string("what scored it"),
                    "commit": string("the scored commit"),
                }),
            ),
        ),
        (
            "Overview",
            object(
                &[
                    "goal", "now", "states", "stats", "health", "merges", "scores", "budget",
                    "notices", "done",
                ],
                json!({
                    "goal": string("the organization's goal"),
                    "now": ms("when the overview was taken"),
                    "run": schema("RunClock"),
                    "states": { "type": "object", "additionalProperties": count(), "description": "workers per state, every state present" },
                    "stats": schema("Stats"),
                    "health": schema("Health"),
                    "merges": array(object(&["pr", "author", "at"], json!({ "pr": int(), "author": string("the PR's author"), "at": ms("merged at") }))),
                    "scores": array(schema("Score")),
                    "budget": schema("BudgetView"),
                    "notices": array(schema("Event")),
                    "done": schema("GoalStatus"),
                }),
            ),
        ),
        (
            "DashboardLink",
            object(
                &["url", "expires_at"],
                json!({ "url": string("open it once in a browser"), "expires_at": ms("after this it no longer works") }),
            ),
        ),
        (
            "MergeFailure",
            object(
                &["number", "at", "reason"],
                json!({ "number": int(), "at": ms("when"), "reason": { "type": "object", "description": "`code`, `message` and `details` (the conflicting files, or the gate's exit and output)" } }),
            ),
        ),
        (
            "BranchDiff",
            object(
                &[
                    "branch",
                    "branches",
                    "head",
                    "base",
                    "commits",
                    "files",
                    "mergeability",
                    "patch",
                    "truncated",
                ],
                json!({
                    "branch": string("the branch shown"),
                    "branches": { "type": "array", "items": { "type": "string" }, "description": "the worker's branches, the most recently committed first" },
                    "head": string("the branch's commit"),
                    "base": string("main's commit"),
                    "commits": { "type": "array", "items": { "type": "object" } },
                    "files": { "type": "array", "items": { "type": "object" } },
                    "mergeability": { "type": "object" },
                    "patch": string("git diff from where the branch left main to its head"),
                    "truncated": { "type": "boolean", "description": "the patch was cut at 512 KiB" },
                }),
            ),
        ),
    ];
    Value::Object(
        entries
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

/// One operation being described.
struct Op {
    method: &'static str,
    path: &'static str,
    value: Map<String, Value>,
    parameters: Vec<Value>,
    responses: Map<String, Value>,
    has_body: bool,
    public: bool,
    conflicts: bool,
}

/// `method` of `/api/v1{path}`, for a token.
fn op(method: &'static str, path: &'static str, id: &str, tag: &str, summary: &str) -> Op {
    let mut value = Map::new();
    value.insert("operationId".into(), json!(id));
    value.insert("tags".into(), json!([tag]));
    value.insert("summary".into(), json!(summary));
    Op {
        method,
        path,
        value,
        parameters: Vec::new(),
        responses: Map::new(),
        has_body: false,
        public: false,
        conflicts: false,
    }
}

impl Op {
    /// Who may call it and what it does, beyond the summary.
    fn doc(mut self, description: &str) -> Self {
        self.value.insert("description".into(), json!(description));
        self
    }

    /// Taken without a token (and with no `X-Agensh-As`).
    fn public(mut self) -> Self {
        self.public = true;
        self
    }

    fn param(mut self, p: Value) -> Self {
        self.parameters.push(p);
        self
    }

    fn query(self, name: &str, required: bool, schema: Value, example: Option<Value>) -> Self {
        let mut p = json!({ "name": name, "in": "query", "required": required, "schema": schema });
        if let Some(e) = example {
            p["example"] = e;
        }
        self.param(p)
    }

    fn body(mut self, name: &str, example: Value) -> Self {
        self.has_body = true;
        self.value.insert(
            "requestBody".into(),
            json!({
                "required": true,
                "content": { "application/json": { "schema": schema(name), "example": example } },
            }),
        );
        self
    }

    fn answers(mut self, status: u16, description: &str, body: Value) -> Self {
        self.responses.insert(
            status.to_string(),
            json!({ "description": description, "content": { "application/json": { "schema": body } } }),
        );
        self
    }

    fn answers_text(mut self, media: &str, description: &str) -> Self {
        self.responses.insert(
            "200".into(),
            json!({ "description": description, "content": { media: { "schema": { "type": "string" } } } }),
        );
        self
    }

    /// Answers a server-sent event stream that does not end.
    fn stream(mut self) -> Self {
        self.value.insert("x-agensh-stream".into(), json!(true));
        self.responses.insert(
            "200".into(),
            json!({ "description": "server-sent events, one `frame` at a time", "content": { "text/event-stream": { "schema": { "type": "string" } } } }),
        );
        self
    }

    /// Can be refused with 409 (the state does not allow it now).
    fn conflicts(mut self) -> Self {
        self.conflicts = true;
        self
    }

    fn finish(self) -> (&'static str, &'static str, Value) {
        let Op {
            method,
            path,
            mut value,
            mut parameters,
            mut responses,
            has_body,
            public,
            conflicts,
        } = self;
        let refusal = |name: &str| json!({ "$ref": format!("#/components/responses/{name}") });
        responses.insert("403".into(), refusal("Forbidden"));
        responses.insert("503".into(), refusal("Unavailable"));
        if public {
            value.insert("security".into(), json!([]));
        } else {
            if !parameters.iter().any(|p| p["name"] == "X-Agensh-As") {
                parameters.push(json!({ "$ref": "#/components/parameters/AsWorker" }));
            }
            responses.insert("400".into(), refusal("Invalid"));
            responses.insert("401".into(), refusal("Unauthorized"));
            responses.insert("404".into(), refusal("NotFound"));
            responses.insert("429".into(), refusal("RateLimited"));
            responses.insert("500".into(), refusal("Internal"));
        }
        if conflicts {
            responses.insert("409".into(), refusal("Conflict"));
        }
        if has_body {
            responses.insert("413".into(), refusal("TooLarge"));
        }
        let mut sorted: Vec<(String, Value)> = responses.into_iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        if !parameters.is_empty() {
            value.insert("parameters".into(), Value::Array(parameters));
        }
        value.insert(
            "responses".into(),
            Value::Object(sorted.into_iter().collect()),
        );
        (method, path, Value::Object(value))
    }
}

fn param(name: &str) -> Value {
    json!({ "$ref": format!("#/components/parameters/{name}") })
}

fn operations() -> Vec<Op> {
    let cap = json!({ "type": "integer", "format": "int64", "minimum": 1, "maximum": page::MAX_VIEW_CAP, "description": "1 to `board.view_cap` (default 2000), which is also the default" });
    let limit = |l: page::Limit| json!({ "type": "integer", "format": "int64", "minimum": 1, "maximum": l.max, "default": l.default });
    let record_example = json!({"kind":"CLAIM","text":"parser error messages","label":"parser","paths":["src/parser.rs"],"lease_secs":1800});
    vec![
        op("get", "/openapi.json", "openapi", "meta", "This document")
            .doc("Takes no token: the document is no secret, and a tool can read it before it has one.")
            .public()
            .answers(200, "the OpenAPI document", json!({ "type": "object", "required": ["openapi", "info", "paths", "components"] })),
        op("get", "/whoami", "whoami", "workers", "Who the token, with `X-Agensh-As`, acts as")
            .answers(200, "the caller", schema("WhoAmI")),
        op("get", "/stats", "stats", "workers", "Counts of what the organization has produced")
            .answers(200, "the counts", schema("Stats")),
        op("get", "/goal", "goal", "workers", "The organization's goal: its conditions, their last checks, when it was met")
            .doc("`organization.done_when`: every condition must hold on one commit of main. A `command:` condition runs after each move of main, in a scratch clone; `issues` holds when every issue is closed; `score: X` when a kept score of at least X was posted. `conditions` is empty when the organization has no goal to meet.")
            .answers(200, "the goal's state", schema("GoalStatus")),
        op("get", "/usage", "usage", "workers", "Model usage through the gateway, per worker and model")
            .doc("The admin gets every worker's; a worker's token its own only.")
            .answers(200, "usage, in worker and model order", array(schema("ModelUsage"))),
        op("get", "/budget", "budget", "workers", "The model budgets in force and what was spent")
            .doc("The admin gets every worker; a worker's token its own only.")
            .answers(200, "the budgets", schema("BudgetView")),
        op("put", "/budget", "setBudget", "workers", "Change a budget (admin)")
            .doc("Admin only. Stored and in force at once; workers a spent budget stopped and that may go on get `worker.resume`. `bad_budget` for a change that names no limit, both scopes or a negative amount.")
            .body("LimitsChange", json!({ "worker": "w01", "tokens": 2000000 }))
            .answers(200, "the budgets after the change", schema("BudgetView")),
        op("get", "/workers", "listWorkers", "workers", "Every worker, in id order")
            .answers(200, "the workers (never their tokens)", array(schema("WorkerInfo"))),
        op("post", "/workers", "addWorkers", "workers", "Create workers (admin)")
            .doc("Admin only. New ids continue after the highest; each gets a secret token that works at once.")
            .body("AddWorkers", json!({ "count": 1 }))
            .answers(201, "the new workers and their tokens", array(schema("NewWorker"))),
        op("get", "/workers/{id}/token", "workerToken", "workers", "A worker's token (admin)")
            .param(param("WorkerIdPath"))
            .answers(200, "the worker and its token", schema("NewWorker")),
        op("get", "/nodes", "listNodes", "nodes", "Every node, in name order (admin)")
            .doc("Admin only. How many workers each node may run and which it was given; never a token.")
            .answers(200, "the nodes", array(schema("NodeInfo"))),
        op("post", "/nodes", "addNode", "nodes", "Issue a node token (admin)")
            .doc("Admin only. A node on another host registers with the token (`agensh node --hub URL --node-token T`); the token may do nothing else. `node_exists` for a name taken.")
            .body("AddNode", json!({ "name": "gpu-host-1", "workers": 2 }))
            .conflicts()
            .answers(201, "the node and its token, shown this once", schema("NewNode")),
        op("post", "/nodes/register", "registerNode", "nodes", "Register a node and receive its workers (node token)")
            .doc("A node token only; every other token gets `node_only`, and a node token gets `node_token` from every other operation. The node's workers with their tokens: the same ones on every registration — those it was given before, then workers no node has, then new ones — never more than it may run (`too_many_workers`). The node acts for each worker with that worker's token.")
            .body("RegisterNode", json!({ "workers": 2 }))
            .answers(200, "the node's workers, the goal, the organization's size, the task pack and the run's end", schema("Registered")),
        op("post", "/nodes/{name}/revoke", "revokeNode", "nodes", "Revoke a node (admin)")
            .doc("Admin only. The node token stops working, and so do the worker tokens the node was given: its workers get new tokens and belong to no node.")
            .param(json!({ "name": "name", "in": "path", "required": true, "schema": { "type": "string", "maxLength": node::NAME_MAX }, "example": "gpu-host-1" }))
            .answers(200, "the workers whose tokens were renewed", array(schema("WorkerId"))),
        op("put", "/workers/{id}/status", "setWorkerStatus", "workers", "Set a worker's status")
            .doc("The admin sets any worker's; a worker token only its own (`impersonation`).")
            .param(param("WorkerIdPath"))
            .body("SetStatus", json!({ "status": "idle" }))
            .answers(200, "the status set", schema("StatusSet")),
        op("put", "/workers/status", "setWorkerStatuses", "workers", "Set many workers' statuses (a node's report)")
            .doc("Each entry is authorised for its worker (docs/API.md, \"Requests for many workers\"); all are set or none. Takes bodies up to 8 MiB, or `hub.body_limit` when larger.")
            .body("StatusReports", json!({ "workers": [{ "id": "w01", "status": "busy", "progress": { "step": "model request 3 (1204 tokens in)", "since": 1796001791861_i64, "tokens": 2408, "tokens_per_sec": 9.5 } }] }))
            .answers(200, "how many were set", schema("Updated")),
        op("post", "/workers/{id}/turns", "reportTurn", "workers", "Report a finished turn (the worker's node)")
            .doc("The worker itself, or the admin. A node sends one per turn; a report of a turn already stored replaces it. Sizes over the limits are refused (`bad_turn`, `too_many_events`, `too_many_tool_calls`, `text_too_long`); controls in its texts, which come from agents, are stored escaped rather than refused. Takes bodies up to 1 MiB, or `hub.body_limit` when larger.")
            .param(param("WorkerIdPath"))
            .body("TurnReport", json!({ "turn": 1, "started_at": 1796001791861_i64, "ended_at": 1796001851861_i64, "prompt": "You are worker w01 …", "events": [], "tool_calls": [{ "name": "claim", "title": "claim", "status": "completed" }, { "name": "execute", "title": "git push origin HEAD:w01/work", "status": "completed" }], "tool_calls_dropped": 0, "input_tokens": 12040, "output_tokens": 311, "stop_reason": "end_turn", "last_action": "claim", "restarts": 0, "memory_kills": 0 }))
            .answers(201, "the report as stored", schema("TurnReport")),
        op("get", "/workers/{id}/turns", "workerTurns", "workers", "A worker's turns, newest first")
            .doc("The admin, or the worker itself. Page back with `before` (a turn number).")
            .param(param("WorkerIdPath"))
            .query("limit", false, limit(page::TURNS), None)
            .query("before", false, json!({ "type": "integer", "format": "int64", "minimum": 0, "description": "only turns numbered below this" }), None)
            .answers(200, "the turns, newest first", array(schema("TurnReport"))),
        op("post", "/board/records", "appendRecord", "board", "Post a board record")
            .doc("The author is the caller. A CLAIM succeeds whatever it overlaps; `overlaps` lists other authors' live claims that collide with it. A CLAIM with `takes_over` ends the old claim in the same transaction, or is refused (`claim_alive`, `claim_taken_over`, `own_claim`, `not_a_claim`, `unknown_record`). Emits `board.record`, and `claim.taken_over` to the old claim's author.")
            .body("NewRecord", record_example)
            .conflicts()
            .answers(201, "the record and the claims it overlaps", schema("Appended")),
        op("get", "/board/records/{id}", "unfoldRecord", "board", "One whole record, with what later replaced it")
            .param(param("RecordIdPath"))
            .answers(200, "the record", schema("Unfolded")),
        op("get", "/board/recent", "recentView", "board", "The recent view, newest first")
            .doc("Marks nothing read.")
            .query("cap", false, cap.clone(), None)
            .answers(200, "the recent view", array(schema("ViewEntry"))),
        op("post", "/board/read", "readBoard", "board", "What the worker has not read yet (worker)")
            .doc("Worker only (the admin with `X-Agensh-As`). No body. Moves the worker's board cursor.")
            .query("cap", false, cap, None)
            .answers(200, "the unread part of the recent view, newest first", array(schema("ViewEntry"))),
        op("get", "/board/grep", "grepBoard", "board", "Search the whole history")
            .doc("The query language is in docs/API.md, \"The grep query language\". Newest first; page with `before`.")
            .query("q", true, json!({ "type": "string", "minLength": 1, "maxLength": agensh_domain::query::MAX_QUERY_CHARS }), Some(json!("parser -kind:CLAIM")))
            .query("limit", false, limit(page::GREP), None)
            .query("before", false, json!({ "type": "string", "pattern": "^[Gg]?[0-9]+$", "description": "a record id: only older records" }), None)
            .answers(200, "matching records, newest first", array(schema("Record"))),
        op("post", "/board/claims/{id}/renew", "renewClaim", "board", "Renew a claim's lease (its author)")
            .doc("Only the claim's author, while it is neither released nor expired. The body may be `{}`.")
            .param(param("RecordIdPath"))
            .body("Renew", json!({ "lease_secs": 7200 }))
            .conflicts()
            .answers(200, "the claim", schema("Record")),
        op("post", "/board/claims/{id}/release", "releaseClaim", "board", "Release a claim (its author)")
            .doc("Only the claim's author, while it is neither released nor expired. No body.")
            .param(param("RecordIdPath"))
            .conflicts()
            .answers(200, "the claim with `lease.released_at`", schema("Record")),
        op("get", "/messages", "messageHistory", "messages", "Recent messages the caller may see, oldest first")
            .doc("Marks nothing read.")
            .query("with", false, json!({ "type": "string", "description": "`#channel` or a worker id: only that conversation" }), Some(json!("#general")))
            .query("limit", false, limit(page::MESSAGES), None)
            .query("before", false, json!({ "type": "integer", "format": "int64", "description": "only messages older than this seq" }), None)
            .answers(200, "the newest `limit` matching messages, oldest first", array(schema("Message"))),
        op("post", "/messages", "sendMessage", "messages", "Send a message to a channel or a worker")
            .doc("Emits `msg.channel` or `msg.dm`.")
            .body("NewMessage", json!({ "to": "#general", "text": "parser lands today" }))
            .answers(201, "the message", schema("Message")),
        op("post", "/messages/read", "readMessages", "messages", "Unread messages (worker)")
            .doc("Worker only. No body. Moves the worker's message cursor to the last message returned. `with` and `before` are refused (`bad_filter`).")
            .query("limit", false, limit(page::MESSAGES), None)
            .answers(200, "unread messages, oldest first", array(schema("Message"))),
        op("get", "/messages/{id}/receipts", "messageReceipts", "messages", "Where a message stands with each recipient")
            .doc("Its sender, the recipient of a direct message, or the admin (else `not_your_message`). One receipt per recipient — a direct message's worker, or every worker but the sender of a channel post: `stored` until shown to it, `presented` (when, and `via` a tool result's notices, a prompt or an interruption), then `acknowledged` when the tool call or turn that carried it completed. `unknown_message` for an id without a message.")
            .param(json!({ "name": "id", "in": "path", "required": true, "description": "a message id: `M12`, `m12` or `12`", "schema": { "type": "string", "pattern": "^[Mm]?[0-9]+$" }, "example": "M1" }))
            .answers(200, "the message and its receipts", schema("MessageStatus")),
        op("get", "/events", "pollEvents", "events", "The worker's pending events; long-poll with `wait` (worker)")
            .doc("Worker only. Marks nothing: an event comes back until acknowledged.")
            .query("after", false, json!({ "type": "integer", "format": "int64", "default": 0 }), None)
            .query("wait", false, wait("seconds to wait when nothing is pending"), Some(json!(0)))
            .query("limit", false, limit(page::POLL), None)
            .query("ack", false, json!({ "type": "string", "pattern": "^[0-9]+(,[0-9]+)*$", "description": "event seqs to acknowledge first, comma-separated" }), None)
            .answers(200, "pending events, oldest first", schema("Polled")),
        op("post", "/events", "postNotice", "events", "An operator notice to every worker or one (admin)")
            .body("Notice", json!({ "text": "stop merging to main", "urgent": true }))
            .answers(201, "the event", schema("NoticeAnswer"))
            .answers(200, "the `dedup_key` was used before: nothing stored", schema("NoticeAnswer")),
        op("post", "/events/poll", "pollMany", "events", "One long-poll for many workers (a node's)")
            .doc("Each entry is authorised for its worker (docs/API.md, \"Requests for many workers\"). Takes bodies up to 8 MiB, or `hub.body_limit` when larger.")
            .body("PollMany", json!({ "workers": [{ "id": "w01", "after": 0 }], "wait": 0 }))
            .answers(200, "each event once, and which worker gets which", schema("PolledMany")),
        op("post", "/events/overdue", "overdueEvents", "events", "Which of a node's workers have urgent news waiting too long")
            .doc("Each entry is authorised for its worker, as in `/events/poll`. Answers, per worker, the events in its queue that interrupt a turn (urgent, with a receipt, neither a board record, a channel post nor `msg.unseen`) stored more than `older_than_ms` ago and not presented to it, at most 20 each. Reads only: the node interrupts those workers' turns.")
            .body("OverdueQuery", json!({ "workers": [{ "id": "w01" }], "older_than_ms": 120000 }))
            .answers(200, "the overdue events once, and which worker has which", schema("PolledMany")),
        op("post", "/events/ack", "ackEvents", "events", "Acknowledge events (worker)")
            .body("Ack", json!({ "seqs": [] }))
            .answers(200, "how many were newly acknowledged", schema("Acked")),
        op("post", "/events/presented", "presentedEvents", "events", "Record events shown to the worker, and how (worker)")
            .doc("Worker only. Each of its events with a receipt (messages, urgent events but board records) is recorded presented `via` (the first presentation wins; numbers of other events are left out). Via `prompt` or `interruption`, the urgent ones also leave the queue as `/events/ack` takes them (refused the same way, `not_your_event`), so tool results never show them again; acknowledge them all when the turn ends.")
            .body("Presented", json!({ "seqs": [], "via": "prompt" }))
            .answers(200, "how many receipts were newly presented", schema("PresentedCount")),
        op("get", "/events/state", "queueState", "events", "The worker's queue cursor (worker)")
            .answers(200, "the queue state", schema("QueueState")),
        op("get", "/prs", "listPrs", "prs", "Pull requests, newest first")
            .query("state", false, schema("PrState"), None)
            .query("author", false, json!({ "type": "string", "description": "matched exactly, not checked" }), None)
            .query("limit", false, limit(page::PRS), None)
            .answers(200, "pull requests with empty `reviews` and `comments`", array(schema("PullRequest"))),
        op("post", "/prs", "openPr", "prs", "Open a pull request from a pushed branch")
            .doc("The branch must be in the caller's namespace and pushed. Emits `pr.opened`.")
            .body("NewPr", json!({ "branch": "w01/work", "title": "Parser skeleton", "body": "Adds src/parser.rs with an empty parse()." }))
            .conflicts()
            .answers(201, "the pull request", schema("PullRequest")),
        op("get", "/prs/{n}", "viewPr", "prs", "One pull request with reviews, comments and its branch against `main`")
            .param(param("PrNumberPath"))
            .answers(200, "the pull request", schema("PrView")),
        op("post", "/prs/{n}/reviews", "reviewPr", "prs", "Review a pull request (anyone but its author)")
            .param(param("PrNumberPath"))
            .param(json!({ "name": "X-Agensh-As", "in": "header", "required": false, "schema": schema("WorkerId"), "example": "w02", "description": "with the admin token: act as this worker (a reviewer other than the PR's author)" }))
            .body("NewReview", json!({ "verdict": "approve", "text": "fine for a skeleton" }))
            .conflicts()
            .answers(201, "the review", schema("Review")),
        op("post", "/prs/{n}/comments", "commentPr", "prs", "Comment on a pull request")
            .param(param("PrNumberPath"))
            .body("NewComment", json!({ "text": "I will call parse() from the evaluator" }))
            .answers(201, "the comment", schema("Comment")),
        op("post", "/prs/{n}/merge", "mergePr", "prs", "Merge a pull request into `main`, through the gate")
            .doc("No body. Takes as long as the gate (`merge.gate`); give the request a generous timeout. A refusal (`merge_conflict`, `gate_failed`, `needs_approval`, …) leaves the PR open.")
            .param(param("PrNumberPath"))
            .conflicts()
            .answers(200, "the merged pull request and the outcome", schema("Merged")),
        op("post", "/prs/{n}/close", "closePr", "prs", "Close a pull request without merging (its author, or the admin)")
            .doc("No body. The branch stays.")
            .param(param("PrNumberPath"))
            .conflicts()
            .answers(200, "the closed pull request", schema("PullRequest")),
        op("get", "/issues", "listIssues", "issues", "Issues, newest first")
            .query("state", false, json!({ "type": "string", "enum": ["open", "closed", "all"], "default": "open" }), None)
            .query("label", false, json!({ "type": "string", "minLength": 1, "maxLength": ISSUE_LABEL_LIMIT }), Some(json!("bug")))
            .query("assignee", false, json!({ "type": "string", "pattern": "^(none|w[0-9]{1,11})$", "description": "a worker id, or `none`: unassigned" }), None)
            .query("before", false, json!({ "type": "integer", "format": "int64", "minimum": 1, "description": "only issues numbered below this" }), None)
            .query("limit", false, range(1, page::ISSUES.max, &format!("default {}", page::ISSUES.default)), None)
            .answers(200, "the issues, without their comments", array(schema("Issue"))),
        op("post", "/issues", "openIssue", "issues", "Open an issue")
            .doc("As the caller (`admin` with the admin token). Counts against a worker's `limits.messages_per_hour`. Emits `issue.opened` to every worker.")
            .body("NewIssue", json!({ "title": "Parser loses line numbers", "body": "parse(\"a\\nb\") reports line 1 for b.", "labels": ["bug", "parser"] }))
            .answers(201, "the issue", schema("Issue")),
        op("get", "/issues/{n}", "viewIssue", "issues", "One issue with its comments")
            .param(param("IssueNumberPath"))
            .answers(200, "the issue", schema("Issue")),
        op("post", "/issues/{n}/comments", "commentIssue", "issues", "Comment on an issue")
            .doc("In any state. Its author, assignee and earlier commenters get `issue.commented`. Counts against a worker's `limits.messages_per_hour`.")
            .param(param("IssueNumberPath"))
            .body("NewIssueComment", json!({ "text": "I can reproduce it with a CRLF file too" }))
            .answers(201, "the comment", schema("IssueComment")),
        op("post", "/issues/{n}/labels", "labelIssue", "issues", "Add and remove labels")
            .doc("Anyone may; an issue has at most 10 labels.")
            .param(param("IssueNumberPath"))
            .body("LabelChange", json!({ "add": ["p1"], "remove": ["parser"] }))
            .answers(200, "the issue", schema("Issue")),
        op("post", "/issues/{n}/assign", "assignIssue", "issues", "Assign an issue, or unassign it")
            .doc("The admin may assign anyone; a worker only itself (a claim: `issue_assigned` while another worker has it) and may unassign only itself. Emits `issue.assigned`: urgent to a worker assigned by someone else.")
            .param(param("IssueNumberPath"))
            .body("Assign", json!({ "assignee": "w01" }))
            .conflicts()
            .answers(200, "the issue", schema("Issue")),
        op("post", "/issues/{n}/close", "closeIssue", "issues", "Close an issue (its author, assignee or the admin)")
            .doc("No body. A merged pull request whose title or body says `closes #N` (or fixes, resolves, …) closes issue N by itself, `closed_by` `pr#<number>`.")
            .param(param("IssueNumberPath"))
            .conflicts()
            .answers(200, "the closed issue", schema("Issue")),
        op("post", "/issues/{n}/reopen", "reopenIssue", "issues", "Reopen a closed issue (its author, assignee or the admin)")
            .doc("No body.")
            .param(param("IssueNumberPath"))
            .conflicts()
            .answers(200, "the reopened issue", schema("Issue")),
        op("post", "/ship", "ship", "prs", "From a pushed branch to merged in one call (worker)")
            .doc("Opens (or reuses) the caller's PR for the branch, merges it through the gate, posts `summary` as a PATCH_SUMMARY and releases claims. A failed step answers its own code and lists the steps done.")
            .body("NewShip", json!({ "title": "roman: implement", "summary": "files=textkit/roman.py | evidence=tests.test_roman passed", "branch": "w01/ship" }))
            .conflicts()
            .answers(200, "what was done", schema("Shipped")),
        op("get", "/overview", "overview", "dashboard", "The organization at a glance (admin)")
            .doc("Admin only (the token, or the dashboard's session cookie). Goal, the run's clock, workers per state, counts, coordination health, every merge into main, scores, budgets and the newest operator notices.")
            .answers(200, "the overview", schema("Overview")),
        op("get", "/stream", "stream", "dashboard", "The live stream of changes (admin; server-sent events)")
            .doc("Admin only. `text/event-stream`: each `frame` event is a JSON object — `cursor`, `events` (every event committed since the previous frame, oldest first), `workers` (changed rows; all of them in a connection's first frame), and `states`, `stats`, `health` when they changed; `reset` when the client should reload what it shows. At most four frames a second. Reconnect with `Last-Event-ID` (or `after`) to get every event after it, once. Does not end.")
            .query("after", false, json!({ "type": "integer", "format": "int64", "minimum": 0, "description": "resume after this event, as Last-Event-ID" }), None)
            .stream(),
        op("post", "/dashboard/links", "dashboardLink", "dashboard", "A one-time link to log in to the dashboard (admin)")
            .doc("Admin token only. The link works once, for ten minutes; it sets an HTTP-only session cookie for twelve hours. `agensh dashboard` prints and opens one.")
            .answers(201, "the link", schema("DashboardLink")),
        op("put", "/run", "setRunClock", "dashboard", "The run's start and end, for the dashboard's time left (admin)")
            .doc("Admin only; `agensh run` sets it. Kept in memory.")
            .body("RunClock", json!({ "started_at": 1796001791861_i64, "ends_at": 1796012591861_i64 }))
            .answers(200, "the clock", schema("RunClock")),
        op("post", "/scores", "addScore", "dashboard", "A score of main, for the dashboard's curve (admin)")
            .doc("Admin only; an evaluation posts each checkpoint's score. Kept in memory (the last 10,000).")
            .body("Score", json!({ "at": 1796001791861_i64, "score": 0.42, "label": "programbench kept" }))
            .answers(201, "the score", schema("Score")),
        op("get", "/merge-failures", "mergeFailures", "dashboard", "The newest failed merges (admin)")
            .doc("Admin only. The last 200 since the hub started, oldest first: the conflicting files or the gate's output.")
            .answers(200, "failed merges", array(schema("MergeFailure"))),
        op("get", "/workers/{id}/diff", "workerDiff", "dashboard", "A worker's branch against main (admin)")
            .doc("Admin only. The branch of its namespace it committed to last, unless `branch` names another; `unknown_branch` before it pushed one.")
            .param(param("WorkerIdPath"))
            .query("branch", false, json!({ "type": "string" }), None)
            .answers(200, "the summary and the patch (at most 512 KiB)", schema("BranchDiff")),
    ]
}

/// Operations at the root, outside `/api/v1`.
fn root_operations() -> Vec<Op> {
    vec![
        op("get", "/healthz", "healthz", "meta", "Liveness")
            .public()
            .answers_text("text/plain", "`ok` and a newline"),
        op(
            "get",
            "/metrics",
            "metrics",
            "meta",
            "Counters and gauges in the Prometheus text format",
        )
        .public()
        .answers_text("text/plain", "the Prometheus text format, version 0.0.4"),
    ]
}

const DESCRIPTION: &str = "\
The REST+JSON API of an agensh hub: the organization's board, messages, events, workers, \
pull requests and budgets, under `/api/v1`, plus `GET /healthz` and `GET /metrics`. \
docs/API.md is the full reference (every rule, limit and error code); this document is \
its machine-readable part, checked against the hub's router by the hub's tests.\n\n\
**Not here**, because they are other protocols: the organization tools over MCP at `/mcp` \
(JSON-RPC 2.0, streamable HTTP), the workspace repository over git's smart HTTP at \
`/git/workspace.git`, and the model gateway at `/model/openai|anthropic|gemini/…` (each \
provider's own API). docs/API.md describes all three.\n\n\
**Authentication**: `Authorization: Bearer <token>` with a worker token (`agw_…`, that \
worker) or the admin token (`aga_…`, from `.agensh/hub.json`). With the admin token, \
`X-Agensh-As: w03` acts as worker `w03` and keeps admin rights. `/api/v1/openapi.json`, \
`/healthz` and `/metrics` take no token.\n\n\
**Errors**: every refusal is `{\"error\":{\"code\",\"message\"}}` with the status of its kind \
(400 invalid, 401 unauthorized, 403 forbidden, 404 not found, 409 conflict, 413 too large, \
429 past a worker's `[limits]`, with `Retry-After`, 500 internal; 503 with `Retry-After` when \
the hub is at `hub.max_connections` or a request passed `hub.request_timeout_secs`). Any route may answer 403 `bad_origin` or `bad_host` (browser origins, DNS \
rebinding). A wrong method on a known path is 405 `method_not_allowed`.\n\n\
**Bodies**: JSON with `Content-Type: application/json`, at most `hub.body_limit` bytes \
(65,536 by default). Unknown fields and query parameters are ignored (except in \
`PUT /budget`). Times are Unix milliseconds.";

/// The whole document.
pub fn document() -> Value {
    let mut paths = Map::new();
    let api = operations().into_iter().map(|o| ("/api/v1", o));
    let root = root_operations().into_iter().map(|o| ("", o));
    for (prefix, o) in api.chain(root) {
        let (method, path, value) = o.finish();
        let item = paths
            .entry(format!("{prefix}{path}"))
            .or_insert_with(|| json!({}));
        item[method] = value;
    }
    let refusal = |description: &str| json!({ "description": description, "content": { "application/json": { "schema": schema("Error") } } });
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "agensh hub",
            "version": env!("CARGO_PKG_VERSION"),
            "description": DESCRIPTION,
            "license": { "name": "see the repository" },
        },
        "tags": [
            { "name": "meta", "description": "this document, health and metrics" },
            { "name": "workers", "description": "workers, their tokens and statuses, usage and budgets" },
            { "name": "nodes", "description": "nodes on other hosts: node tokens, registration, revocation" },
            { "name": "board", "description": "the append-only board: records, claims, the recent view, grep" },
            { "name": "messages", "description": "channel and direct messages" },
            { "name": "events", "description": "per-worker event queues" },
            { "name": "prs", "description": "pull requests, merges through the gate, ship" },
            { "name": "issues", "description": "the issue tracker: work written down, claimed, closed by merged pull requests" },
        ],
        "security": [{ "bearer": [] }],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A worker token (`agw_` and 40 hex digits) or the admin token (`aga_` and 40 hex digits). The word `Bearer` with a capital B.",
                },
            },
            "parameters": {
                "AsWorker": {
                    "name": "X-Agensh-As",
                    "in": "header",
                    "required": false,
                    "description": "With the admin token: act as this registered worker (its author name, queue, cursors and claims), keeping admin rights. With a worker token: only its own id (else `impersonation`).",
                    "schema": schema("WorkerId"),
                    "example": "w01",
                },
                "WorkerIdPath": {
                    "name": "id", "in": "path", "required": true,
                    "schema": schema("WorkerId"), "example": "w01",
                },
                "RecordIdPath": {
                    "name": "id", "in": "path", "required": true,
                    "description": "a record id: `G12`, `g12` or `12`",
                    "schema": { "type": "string", "pattern": "^[Gg]?[0-9]+$" },
                    "example": "G1",
                },
                "IssueNumberPath": {
                    "name": "n", "in": "path", "required": true,
                    "description": "an issue number: `3` or `#3` (sent as `%233`)",
                    "schema": { "type": "string", "pattern": "^#?[0-9]+$" },
                    "example": "1",
                },
                "PrNumberPath": {
                    "name": "n", "in": "path", "required": true,
                    "description": "a PR number: `3` or `#3` (sent as `%233`)",
                    "schema": { "type": "string", "pattern": "^#?[0-9]+$" },
                    "example": "1",
                },
            },
            "responses": {
                "Invalid": refusal("invalid: a malformed request or a broken rule (`bad_body`, `bad_content_type`, `bad_query_string`, `needs_worker`, `bad_worker_id`, `text_too_long`, …)"),
                "Unauthorized": refusal("`unauthorized` (no token, not `Bearer <token>`, or unknown), or `wrong_token`"),
                "Forbidden": refusal("`bad_origin`, `bad_host`, `admin_only`, `impersonation`, `needs_token`, `not_your_claim`, `outside_namespace`, `not_your_pr`, `not_your_issue`, `not_your_message`, `not_yourself`, …"),
                "NotFound": refusal("`unknown_worker` (the path, a body field or `X-Agensh-As`), `unknown_record`, `unknown_message`, `unknown_pr`, `unknown_issue`, `unknown_branch`, `no_workspace`"),
                "Conflict": refusal("the state does not allow it now: `claim_released`, `claim_expired`, `claim_alive`, `claim_taken_over`, `pr_exists`, `pr_not_open`, `merge_conflict`, `gate_failed`, `needs_approval`, `nothing_to_merge`, `issue_assigned`, `issue_closed`, `issue_open`, …"),
                "TooLarge": refusal("`body_too_large`: over `hub.body_limit`"),
                "Internal": refusal("`internal`: a failure inside the hub or its store"),
                "RateLimited": {
                    "description": "a worker past one of its `[limits]`: `rate_limited` (requests per second), `record_quota`, `message_quota`; the message says how long to wait",
                    "headers": { "Retry-After": { "description": "seconds to wait before trying again", "schema": { "type": "integer", "minimum": 1 } } },
                    "content": { "application/json": { "schema": schema("Error") } },
                },
                "Unavailable": {
                    "description": "`too_many_connections` (over `hub.max_connections`) or `request_timeout` (over `hub.request_timeout_secs`)",
                    "headers": { "Retry-After": { "description": "seconds to wait before trying again", "schema": { "type": "integer", "minimum": 1 } } },
                    "content": { "application/json": { "schema": schema("Error") } },
                },
            },
            "schemas": schemas(),
        },
    })
}
