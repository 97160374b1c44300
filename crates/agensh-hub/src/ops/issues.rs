//! Issues: open, list, view, comment, label, assign (a worker: only itself, a claim),
//! close and reopen. A merged pull request that says `closes #N` closes issue N in the
//! store's merge record (`Store::mark_merged`).

use agensh_domain::ids::{validate_worker_id, ADMIN};
use agensh_domain::issue::{
    parse_number, validate_text, Issue, IssueComment, IssueState, NewIssue,
};
use agensh_domain::{page, Error, Result};
use agensh_protocol::rest::{LabelChange, ListIssues};
use agensh_store::{AssigneeFilter, IssueQuery};

use crate::auth::Caller;
use crate::metrics::inc;
use crate::state::AppState;

/// Most issues one list returns ([`page::ISSUES`]).
pub const LIST_LIMIT: usize = page::ISSUES.max;

/// Takes one from a worker's hourly message quota: opening an issue and commenting tell
/// people, as a message does. The admin is never limited.
fn take_message(s: &AppState, caller: &Caller) -> Result<()> {
    if !caller.admin {
        if let Err(e) = s.limiter.message(&caller.id, s.now()) {
            inc(&s.metrics.rate_limited);
            return Err(e);
        }
    }
    Ok(())
}

/// Opens an issue as `caller` (a worker, or `admin`).
pub async fn open_issue(s: &AppState, caller: &Caller, issue: NewIssue) -> Result<Issue> {
    issue.validate()?;
    take_message(s, caller)?;
    s.store.open_issue(&caller.id, issue, s.now()).await
}

/// Issues newest first: `state` open (the default), closed or all; `label`; `assignee` a
/// worker id or `none`; `before` a number; `limit`.
pub async fn list_issues(s: &AppState, q: ListIssues) -> Result<Vec<Issue>> {
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
        ));
    }
    let limit = page::ISSUES.check(q.limit)?;
    s.store
        .list_issues(IssueQuery {
            state,
            label: q.label,
            assignee,
            before: q.before,
            limit,
        })
        .await
}

/// Issue `n` (`3` or `#3`) with its comments.
pub async fn view_issue(s: &AppState, n: &str) -> Result<Issue> {
    s.store.get_issue(parse_number(n)?).await
}

/// Comments on issue `n` as `caller`.
pub async fn comment_issue(
    s: &AppState,
    caller: &Caller,
    n: &str,
    text: &str,
) -> Result<IssueComment> {
    let number = parse_number(n)?;
    validate_text("comment", text)?;
    take_message(s, caller)?;
    s.store
        .comment_issue(number, &caller.id, text, s.now())
        .await
}

/// Adds and removes labels of issue `n`.
pub async fn label_issue(s: &AppState, n: &str, change: LabelChange) -> Result<Issue> {
    let number = parse_number(n)?;
    s.store
        .label_issue(number, change.add, change.remove, s.now())
        .await
}

/// Sets (or, with `None`, clears) the assignee of issue `n` as `caller`: the admin may
/// assign anyone, a worker only itself (a claim).
pub async fn assign_issue(
    s: &AppState,
    caller: &Caller,
    n: &str,
    assignee: Option<String>,
) -> Result<Issue> {
    let number = parse_number(n)?;
    if assignee.as_deref() == Some(ADMIN) {
        return Err(Error::invalid(
            "bad_worker_id",
            "issues are assigned to workers, not to the admin — name a worker like w01",
        ));
    }
    s.store
        .assign_issue(number, &caller.id, caller.admin, assignee, s.now())
        .await
}

/// Assigns issue `n` to the calling worker: a claim.
pub async fn claim_issue(s: &AppState, caller: &Caller, n: &str) -> Result<Issue> {
    let me = caller.worker()?.to_string();
    assign_issue(s, caller, n, Some(me)).await
}

/// Closes issue `n` as `caller` (its author, its assignee, or the admin).
pub async fn close_issue(s: &AppState, caller: &Caller, n: &str) -> Result<Issue> {
    let number = parse_number(n)?;
    let closed = s
        .store
        .close_issue(number, &caller.id, caller.admin, s.now())
        .await?;
    s.goal.nudge();
    Ok(closed)
}

/// Reopens issue `n` as `caller` (its author, its assignee, or the admin).
pub async fn reopen_issue(s: &AppState, caller: &Caller, n: &str) -> Result<Issue> {
    let number = parse_number(n)?;
    s.store
        .reopen_issue(number, &caller.id, caller.admin, s.now())
        .await
}
