//! Pull requests: the rules around each change and the events it emits. The store keeps
//! the PR's state; the merge itself (git) is the hub's.

use agensh_domain::event::{kinds, NewEvent};
use agensh_domain::ids::ADMIN;
use agensh_domain::pr::{
    validate_text, Comment, NewPr, PrState, PullRequest, Review, Verdict, BASE,
};
use agensh_domain::{Error, Result};
use serde_json::json;

use super::events::{broadcast, direct_urgent};

pub fn unknown_pr(number: i64) -> Error {
    Error::not_found(
        "unknown_pr",
        format!("there is no PR #{number} — `agensh pr list` shows them"),
    )
}

/// The refusal for acting on a PR that is merged or closed; `action` is a past participle.
fn not_open(pr: &PullRequest, action: &str) -> Error {
    Error::conflict(
        "pr_not_open",
        format!(
            "PR #{} is {}, so it cannot be {action} — open a new PR for further changes",
            pr.number,
            pr.state.as_str()
        ),
    )
}

/// Refuses a PR for `branch`, which has the open PR `open` already.
pub fn exists(branch: &str, open: i64) -> Error {
    Error::conflict(
        "pr_exists",
        format!(
            "branch {branch} already has an open PR #{open} — push more commits to the branch instead"
        ),
    )
}

/// The PR `pr` opens as `number`, and its `pr.opened` event.
pub fn opened(number: i64, author: &str, pr: NewPr, now: i64) -> (PullRequest, NewEvent) {
    let out = PullRequest {
        number,
        author: author.to_string(),
        branch: pr.branch,
        base: BASE.to_string(),
        title: pr.title,
        body: pr.body,
        state: PrState::Open,
        created_at: now,
        updated_at: now,
        closed_by: None,
        merge_commit: None,
        reviews: Vec::new(),
        comments: Vec::new(),
        queue: None,
    };
    let event = broadcast(
        kinds::PR_OPENED,
        json!({
            "number": number,
            "author": out.author,
            "branch": out.branch,
            "title": out.title,
        }),
        format!("pr:{number}:opened"),
        author,
    );
    (out, event)
}

/// Whether `reviewer` may review `pr` with `text`: an open PR of another worker.
pub fn check_review(pr: &PullRequest, reviewer: &str, text: &str) -> Result<()> {
    if pr.state != PrState::Open {
        return Err(not_open(pr, "reviewed"));
    }
    if pr.author == reviewer {
        return Err(Error::invalid(
            "own_pr",
            "you cannot review your own PR — ask a peer to review it",
        ));
    }
    validate_text("review", text)
}

/// The review stored as `id`.
pub fn review(
    id: i64,
    reviewer: &str,
    verdict: Verdict,
    text: &str,
    commit: Option<&str>,
    now: i64,
) -> Review {
    Review {
        id,
        author: reviewer.to_string(),
        verdict,
        text: text.to_string(),
        created_at: now,
        commit: commit.map(String::from),
    }
}

/// The events of `review` of `pr`: a normal `pr.reviewed` for everyone but the PR's
/// author, then an urgent `pr.review` for the author.
pub fn reviewed_events(pr: &PullRequest, review: &Review) -> [NewEvent; 2] {
    let number = pr.number;
    let key = format!("pr:{number}:review:{}", review.id);
    let mut everyone = broadcast(
        kinds::PR_REVIEWED,
        json!({
            "number": number,
            "title": pr.title,
            "author": pr.author,
            "reviewer": review.author,
            "verdict": review.verdict,
        }),
        key.clone(),
        &review.author,
    );
    // The author gets its own, urgent version.
    everyone.except = Some(pr.author.clone());
    let author = direct_urgent(
        kinds::PR_REVIEW,
        json!({
            "number": number,
            "title": pr.title,
            "reviewer": review.author,
            "verdict": review.verdict,
            "text": review.text,
        }),
        key,
        &review.author,
        &pr.author,
    );
    [everyone, author]
}

/// The comment stored as `id`.
pub fn comment(id: i64, author: &str, text: &str, now: i64) -> Comment {
    Comment {
        id,
        author: author.to_string(),
        text: text.to_string(),
        created_at: now,
    }
}

/// The `pr.commented` event of comment `c` on `pr`.
pub fn commented_event(pr: &PullRequest, c: &Comment) -> NewEvent {
    let number = pr.number;
    broadcast(
        kinds::PR_COMMENTED,
        json!({
            "number": number,
            "title": pr.title,
            "author": pr.author,
            "by": c.author,
            "text": c.text,
        }),
        format!("pr:{number}:comment:{}", c.id),
        &c.author,
    )
}

/// Whether `by` may close `pr`: an open PR, and its author or the admin.
pub fn check_close(pr: &PullRequest, by: &str) -> Result<()> {
    if pr.state != PrState::Open {
        return Err(not_open(pr, "closed"));
    }
    if by != pr.author && by != ADMIN {
        return Err(Error::forbidden(
            "not_your_pr",
            format!(
                "PR #{} belongs to {}; only its author or the admin may close it — comment on it or message {} instead",
                pr.number, pr.author, pr.author
            ),
        ));
    }
    Ok(())
}

/// `pr` closed by `by` at `now`, and its `pr.closed` event.
pub fn closed(pr: &mut PullRequest, by: &str, now: i64) -> NewEvent {
    pr.state = PrState::Closed;
    pr.closed_by = Some(by.to_string());
    pr.updated_at = now;
    let number = pr.number;
    broadcast(
        kinds::PR_CLOSED,
        json!({
            "number": number,
            "title": pr.title,
            "author": pr.author,
            "branch": pr.branch,
            "closed_by": by,
        }),
        format!("pr:{number}:closed"),
        by,
    )
}

/// Whether `pr` may be recorded as merged: it is open.
pub fn check_merge(pr: &PullRequest) -> Result<()> {
    if pr.state != PrState::Open {
        return Err(not_open(pr, "merged"));
    }
    Ok(())
}

/// `pr` merged by `by` as `merge_commit` at `now`, and its `pr.merged` event.
pub fn merged(pr: &mut PullRequest, by: &str, merge_commit: &str, now: i64) -> NewEvent {
    pr.state = PrState::Merged;
    pr.closed_by = Some(by.to_string());
    pr.merge_commit = Some(merge_commit.to_string());
    pr.updated_at = now;
    let number = pr.number;
    broadcast(
        kinds::PR_MERGED,
        json!({
            "number": number,
            "title": pr.title,
            "author": pr.author,
            "branch": pr.branch,
            "merged_by": by,
            "commit": merge_commit,
        }),
        format!("pr:{number}:merged"),
        by,
    )
}

/// What a merged PR says, where `closes #N` is looked for: its title and body.
pub fn says(pr: &PullRequest) -> String {
    format!("{}\n{}", pr.title, pr.body.as_deref().unwrap_or(""))
}

/// The `main.updated` event of `commit` on `main`, pushed by `by` (merging PR `pr`, when a
/// merge moved it); once per commit.
pub fn main_updated_event(commit: &str, by: &str, pr: Option<i64>) -> NewEvent {
    let payload = match pr {
        Some(number) => json!({ "commit": commit, "by": by, "pr": number }),
        None => json!({ "commit": commit, "by": by }),
    };
    broadcast(kinds::MAIN_UPDATED, payload, format!("main:{commit}"), by)
}

/// The urgent `pr.merge_failed` event telling the author of `pr` why `by` could not merge
/// it at `now`; none when the author tried it itself (it got the reason in the answer).
pub fn merge_failed_event(
    pr: &PullRequest,
    by: &str,
    reason: serde_json::Value,
    now: i64,
) -> Option<NewEvent> {
    if by == pr.author {
        return None;
    }
    let number = pr.number;
    Some(direct_urgent(
        kinds::PR_MERGE_FAILED,
        json!({
            "number": number,
            "title": pr.title,
            "by": by,
            "reason": reason,
        }),
        // One event per attempt; a retried call with the same time is stored once.
        format!("pr:{number}:merge_failed:{now}"),
        by,
        &pr.author,
    ))
}
