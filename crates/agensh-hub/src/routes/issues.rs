//! Issues: open, list, view, comment, label, assign (a worker: only itself, a claim),
//! close and reopen. A merged pull request that says `closes #N` closes issue N in the
//! store's merge record (`Store::mark_merged`).
//!
//! One function per operation, called by the REST handler and the MCP tool alike.

use agensh_domain::ids::{validate_worker_id, ADMIN};
use agensh_domain::issue::{
    parse_number, validate_text, Issue, IssueComment, IssueState, NewIssue,
};
use agensh_domain::{page, Error};
use agensh_protocol::rest::{Assign, LabelChange, ListIssues, NewComment};
use agensh_store::{AssigneeFilter, IssueQuery};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;

use crate::auth::Caller;
use crate::error::{ApiJson, ApiQuery, ApiResult};
use crate::metrics::inc;
use crate::state::AppState;

/// Most issues one list returns ([`page::ISSUES`]).
pub const LIST_LIMIT: usize = page::ISSUES.max;

/// Takes one from a worker's hourly message quota: opening an issue and commenting tell
/// people, as a message does. The admin is never limited.
fn take_message(s: &AppState, caller: &Caller) -> ApiResult<()> {
    if !caller.admin {
        if let Err(e) = s.limiter.message(&caller.id, s.now()) {
            inc(&s.metrics.rate_limited);
            return Err(e.into());
        }
    }
    Ok(())
}

pub async fn open(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(issue): ApiJson<NewIssue>,
) -> ApiResult<(StatusCode, Json<Issue>)> {
    Ok((
        StatusCode::CREATED,
        Json(open_issue(&s, &caller, issue).await?),
    ))
}

/// Opens an issue as `caller` (a worker, or `admin`).
pub async fn open_issue(s: &AppState, caller: &Caller, issue: NewIssue) -> ApiResult<Issue> {
    issue.validate()?;
    take_message(s, caller)?;
    Ok(s.store.open_issue(&caller.id, issue, s.now()).await?)
}

pub async fn list(
    State(s): State<AppState>,
    _caller: Caller,
    ApiQuery(q): ApiQuery<ListIssues>,
) -> ApiResult<Json<Vec<Issue>>> {
    Ok(Json(list_issues(&s, q).await?))
}

/// Issues newest first: `state` open (the default), closed or all; `label`; `assignee` a
/// worker id or `none`; `before` a number; `limit`.
pub async fn list_issues(s: &AppState, q: ListIssues) -> ApiResult<Vec<Issue>> {
    let state = match q.state.as_deref() {
        None => Some(IssueState::Open),
        Some(st) => IssueState::parse_filter(st)?,
    };
    let assignee = match q.assignee.as_deref() {
        None => None,
        Some("none") => Some(AssigneeFilter::Nobody),
        Some(w) => {
            validate_worker_id(w).map_err(|_| {
                Error::invalid(
                    "bad_assignee",
                    format!(
                        "assignee \"{}\" is neither a worker id like w01 nor none (unassigned issues)",
                        agensh_domain::ids::truncate_for_message(w)
                    ),
                )
            })?;
            Some(AssigneeFilter::Worker(w.to_string()))
        }
    };
    if let Some(l) = &q.label {
        agensh_domain::issue::validate_label(l)?;
    }
    if q.before.is_some_and(|b| b < 1) {
        return Err(Error::invalid(
            "bad_before",
            "before is an issue number, 1 or more — use the smallest number of the last page",
        )
        .into());
    }
    let limit = page::ISSUES.check(q.limit)?;
    Ok(s.store
        .list_issues(IssueQuery {
            state,
            label: q.label,
            assignee,
            before: q.before,
            limit,
        })
        .await?)
}

pub async fn view(
    State(s): State<AppState>,
    _caller: Caller,
    Path(n): Path<String>,
) -> ApiResult<Json<Issue>> {
    Ok(Json(view_issue(&s, &n).await?))
}

/// Issue `n` (`3` or `#3`) with its comments.
pub async fn view_issue(s: &AppState, n: &str) -> ApiResult<Issue> {
    Ok(s.store.get_issue(parse_number(n)?).await?)
}

pub async fn comment(
    State(s): State<AppState>,
    caller: Caller,
    Path(n): Path<String>,
    ApiJson(b): ApiJson<NewComment>,
) -> ApiResult<(StatusCode, Json<IssueComment>)> {
    Ok((
        StatusCode::CREATED,
        Json(comment_issue(&s, &caller, &n, &b.text).await?),
    ))
}

/// Comments on issue `n` as `caller`.
pub async fn comment_issue(
    s: &AppState,
    caller: &Caller,
    n: &str,
    text: &str,
) -> ApiResult<IssueComment> {
    let number = parse_number(n)?;
    validate_text("comment", text)?;
    take_message(s, caller)?;
    Ok(s.store
        .comment_issue(number, &caller.id, text, s.now())
        .await?)
}

pub async fn labels(
    State(s): State<AppState>,
    _caller: Caller,
    Path(n): Path<String>,
    ApiJson(b): ApiJson<LabelChange>,
) -> ApiResult<Json<Issue>> {
    Ok(Json(label_issue(&s, &n, b).await?))
}

/// Adds and removes labels of issue `n`.
pub async fn label_issue(s: &AppState, n: &str, change: LabelChange) -> ApiResult<Issue> {
    let number = parse_number(n)?;
    Ok(s.store
        .label_issue(number, change.add, change.remove, s.now())
        .await?)
}

pub async fn assign(
    State(s): State<AppState>,
    caller: Caller,
    Path(n): Path<String>,
    ApiJson(b): ApiJson<Assign>,
) -> ApiResult<Json<Issue>> {
    Ok(Json(assign_issue(&s, &caller, &n, b.assignee).await?))
}

/// Sets (or, with `None`, clears) the assignee of issue `n` as `caller`: the admin may
/// assign anyone, a worker only itself (a claim).
pub async fn assign_issue(
    s: &AppState,
    caller: &Caller,
    n: &str,
    assignee: Option<String>,
) -> ApiResult<Issue> {
    let number = parse_number(n)?;
    if assignee.as_deref() == Some(ADMIN) {
        return Err(Error::invalid(
            "bad_worker_id",
            "issues are assigned to workers, not to the admin — name a worker like w01",
        )
        .into());
    }
    Ok(s.store
        .assign_issue(number, &caller.id, caller.admin, assignee, s.now())
        .await?)
}

/// Assigns issue `n` to the calling worker: a claim.
pub async fn claim_issue(s: &AppState, caller: &Caller, n: &str) -> ApiResult<Issue> {
    let me = caller.worker()?.to_string();
    assign_issue(s, caller, n, Some(me)).await
}

pub async fn close(
    State(s): State<AppState>,
    caller: Caller,
    Path(n): Path<String>,
) -> ApiResult<Json<Issue>> {
    Ok(Json(close_issue(&s, &caller, &n).await?))
}

/// Closes issue `n` as `caller` (its author, its assignee, or the admin).
pub async fn close_issue(s: &AppState, caller: &Caller, n: &str) -> ApiResult<Issue> {
    let number = parse_number(n)?;
    let closed = s
        .store
        .close_issue(number, &caller.id, caller.admin, s.now())
        .await?;
    s.goal.nudge();
    Ok(closed)
}

pub async fn reopen(
    State(s): State<AppState>,
    caller: Caller,
    Path(n): Path<String>,
) -> ApiResult<Json<Issue>> {
    Ok(Json(reopen_issue(&s, &caller, &n).await?))
}

/// Reopens issue `n` as `caller` (its author, its assignee, or the admin).
pub async fn reopen_issue(s: &AppState, caller: &Caller, n: &str) -> ApiResult<Issue> {
    let number = parse_number(n)?;
    Ok(s.store
        .reopen_issue(number, &caller.id, caller.admin, s.now())
        .await?)
}
