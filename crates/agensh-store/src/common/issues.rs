//! Issues: the rules around each change and the events it emits. `issue.opened` is a
//! broadcast; the other events go to the people involved — the author, the assignee (new
//! and previous) and earlier commenters that are workers — never to the one who acted.

use agensh_domain::event::{kinds, NewEvent};
use agensh_domain::ids::validate_worker_id;
use agensh_domain::issue::{
    check_assign, distinct_labels, Issue, IssueComment, IssueState, NewIssue,
};
use agensh_domain::{Error, Result};
use serde_json::json;

use super::events::broadcast;
use crate::AssigneeFilter;

pub fn unknown_issue(number: i64) -> Error {
    Error::not_found(
        "unknown_issue",
        format!("there is no issue #{number} — list the issues to see their numbers"),
    )
}

/// The workers involved in `issue` — its author, its assignee, `also` and every commenter
/// (`commenters`, oldest first) — but `actor`, each once, in that order. `admin` and
/// `pr#N` have no queue.
pub fn involved(
    issue: &Issue,
    also: &[&str],
    commenters: impl IntoIterator<Item = String>,
    actor: &str,
) -> Vec<String> {
    let mut people: Vec<String> = vec![issue.author.clone()];
    people.extend(issue.assignee.clone());
    people.extend(also.iter().map(|s| s.to_string()));
    people.extend(commenters);
    let mut out: Vec<String> = Vec::new();
    for p in people {
        if p != actor && validate_worker_id(&p).is_ok() && !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// The issue `new` (validated) opens as `number`, its labels each once, and its
/// `issue.opened` event: everyone hears of a new issue.
pub fn opened(number: i64, author: &str, new: NewIssue, now: i64) -> (Issue, NewEvent) {
    let out = Issue {
        number,
        title: new.title,
        body: new.body,
        author: author.to_string(),
        state: IssueState::Open,
        labels: distinct_labels(new.labels),
        assignee: None,
        comment_count: 0,
        comments: Vec::new(),
        created_at: now,
        updated_at: now,
        closed_at: None,
        closed_by: None,
    };
    let e = broadcast(
        kinds::ISSUE_OPENED,
        json!({
            "number": number,
            "title": out.title,
            "author": author,
            "labels": out.labels,
        }),
        format!("issue:{number}:opened"),
        author,
    );
    (out, e)
}

/// Checks every issue of `all` before any is opened; the first bad one is named by its
/// place, from 1.
pub fn check_all(all: &[NewIssue]) -> Result<()> {
    for (i, new) in all.iter().enumerate() {
        new.validate().map_err(|e| {
            Error::new(
                e.kind,
                &e.code,
                format!(
                    "issue {} (\"{}\"): {}",
                    i + 1,
                    agensh_domain::ids::truncate_for_message(&new.title),
                    e.message
                ),
            )
        })?;
    }
    Ok(())
}

/// The assignee filter of `list_issues` as three parameters: any assignee, only issues
/// nobody is assigned, only those of this worker.
pub fn assignee_params(filter: &Option<AssigneeFilter>) -> (bool, bool, Option<&str>) {
    match filter {
        None => (true, false, None),
        Some(AssigneeFilter::Nobody) => (false, true, None),
        Some(AssigneeFilter::Worker(w)) => (false, false, Some(w.as_str())),
    }
}

/// The comment stored as `id`, and its `issue.commented` event (for those involved).
pub fn commented(
    issue: &Issue,
    id: i64,
    author: &str,
    text: &str,
    now: i64,
) -> (IssueComment, NewEvent) {
    let number = issue.number;
    let c = IssueComment {
        id,
        author: author.to_string(),
        text: text.to_string(),
        created_at: now,
    };
    let e = broadcast(
        kinds::ISSUE_COMMENTED,
        json!({ "number": number, "title": issue.title, "by": author, "text": text }),
        format!("issue:{number}:comment:{id}"),
        author,
    );
    (c, e)
}

/// Whether `by` (with `admin_rights` or not) may assign `issue` to `assignee`
/// ([`check_assign`]); its assignee until now.
pub fn check_assignment(
    issue: &Issue,
    by: &str,
    admin_rights: bool,
    assignee: Option<&str>,
) -> Result<Option<String>> {
    let previous = issue.assignee.clone();
    check_assign(
        issue.number,
        by,
        admin_rights,
        issue.state,
        previous.as_deref(),
        assignee,
    )?;
    Ok(previous)
}

/// `issue` assigned by `by` to `assignee` (from `previous`) at `now`, and its
/// `issue.assigned` event (for those involved).
pub fn assigned(
    issue: &mut Issue,
    by: &str,
    assignee: Option<&str>,
    previous: &Option<String>,
    now: i64,
) -> NewEvent {
    issue.assignee = assignee.map(str::to_string);
    issue.updated_at = now;
    let number = issue.number;
    broadcast(
        kinds::ISSUE_ASSIGNED,
        json!({
            "number": number,
            "title": issue.title,
            "by": by,
            "assignee": assignee,
            "previous": previous,
        }),
        format!("issue:{number}:assigned:{now}:{}", assignee.unwrap_or("-")),
        by,
    )
}

/// `issue` closed or reopened (`state`) by `by` at `now`, and its event (for those
/// involved). `pr` is the merged PR that closed it, if one did.
pub fn set_state(
    issue: &mut Issue,
    state: IssueState,
    by: &str,
    pr: Option<i64>,
    now: i64,
) -> NewEvent {
    let number = issue.number;
    let (closed_at, closed_by) = match state {
        IssueState::Closed => (Some(now), Some(by.to_string())),
        IssueState::Open => (None, None),
    };
    issue.state = state;
    issue.closed_at = closed_at;
    issue.closed_by = closed_by;
    issue.updated_at = now;
    let (kind, what) = match state {
        IssueState::Closed => (kinds::ISSUE_CLOSED, "closed"),
        IssueState::Open => (kinds::ISSUE_REOPENED, "reopened"),
    };
    let mut payload = json!({ "number": number, "title": issue.title, "by": by });
    if let Some(pr) = pr {
        payload["pr"] = json!(pr);
    }
    broadcast(kind, payload, format!("issue:{number}:{what}:{now}"), by)
}

/// Whether merged PR `pr`, which says it closes issue `n`, closes it: the issue as loaded
/// (`loaded`) when it is open; none, logged, when there is no such issue or it is closed
/// already.
pub fn closed_by_pr(pr: i64, n: i64, loaded: Result<Issue>) -> Result<Option<Issue>> {
    let issue = match loaded {
        Ok(i) => i,
        Err(e) if e.code == "unknown_issue" => {
            tracing::info!("PR #{pr} says it closes issue #{n}, which does not exist: ignored");
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    if issue.state == IssueState::Closed {
        tracing::info!("PR #{pr} says it closes issue #{n}, which is closed already: ignored");
        return Ok(None);
    }
    Ok(Some(issue))
}
