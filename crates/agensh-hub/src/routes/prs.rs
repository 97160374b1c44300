//! Pull requests: open, list, view, review, comment, merge (done by the hub), close.

use std::time::Duration;

use agensh_domain::pr::{validate_text, NewPr, PrState, PullRequest, Review, Verdict};
use agensh_domain::{page, Error, ErrorKind};
use agensh_protocol::rest::{ListPrs, NewComment, NewReview};
use agensh_workspace::merge::{BranchSummary, Gate, MergeOutcome, MergeRequest};
use agensh_workspace::Workspace;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;
use serde_json::json;

use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery, ApiResult};
use crate::metrics::inc;
use crate::state::AppState;

/// Most PRs one list returns ([`page::PRS`]).
pub const LIST_LIMIT: usize = page::PRS.max;

/// The hub's workspace, or a refusal when it serves none.
pub(crate) fn workspace(s: &AppState) -> ApiResult<&Workspace> {
    s.workspace.as_ref().ok_or_else(|| {
        ApiError(Error::not_found(
            "no_workspace",
            "this hub serves no git workspace — start it on an organization made by `agensh init`",
        ))
    })
}

fn pr_number(n: &str) -> ApiResult<i64> {
    let digits = n.strip_prefix('#').unwrap_or(n);
    (!digits.is_empty() && digits.len() <= 18 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse::<i64>().ok())
        .flatten()
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            ApiError(Error::invalid(
                "bad_pr_number",
                format!(
                    "\"{}\" is not a PR number — use the number `agensh pr list` shows, like 3",
                    agensh_domain::ids::truncate_for_message(n)
                ),
            ))
        })
}

pub async fn open(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(pr): ApiJson<NewPr>,
) -> ApiResult<(StatusCode, Json<PullRequest>)> {
    Ok((StatusCode::CREATED, Json(open_pr(&s, &caller, pr).await?)))
}

/// Opens a PR from one of `caller`'s branches: REST and MCP both.
pub async fn open_pr(s: &AppState, caller: &Caller, pr: NewPr) -> ApiResult<PullRequest> {
    pr.validate(&caller.id)?;
    match workspace(s)?.branch_head(&pr.branch).await {
        Err(e) if e.kind == ErrorKind::NotFound => {
            return Err(super::ship::not_pushed(&pr.branch).into())
        }
        other => other?,
    };
    Ok(s.store.open_pr(&caller.id, pr, s.now()).await?)
}

pub async fn list(
    State(s): State<AppState>,
    _caller: Caller,
    ApiQuery(q): ApiQuery<ListPrs>,
) -> ApiResult<Json<Vec<PullRequest>>> {
    Ok(Json(
        list_prs(&s, q.state.as_deref(), q.author, q.limit).await?,
    ))
}

/// PRs newest first, optionally only in `state` and by `author`.
pub async fn list_prs(
    s: &AppState,
    state: Option<&str>,
    author: Option<String>,
    limit: Option<usize>,
) -> ApiResult<Vec<PullRequest>> {
    let state = state.map(PrState::parse).transpose()?;
    let limit = page::PRS.check(limit)?;
    Ok(s.store.list_prs(state, author, limit).await?)
}

/// A pull request with how its branch compares with `main` now.
#[derive(Serialize)]
pub struct PrView {
    #[serde(flatten)]
    pub pr: PullRequest,
    /// Reviewers whose latest review approves the branch's current commit.
    pub approvals: usize,
    /// The branch against `main`, while the PR is open and its branch exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch_summary: Option<BranchSummary>,
}

/// Reviewers whose latest review approves `head`, the branch's commit now (an approval of
/// an earlier commit is void: it did not see what was pushed since). Without a workspace
/// (`head` unknown) every latest approval counts.
fn approvals(pr: &PullRequest, head: Option<&str>) -> usize {
    let mut latest: Vec<&agensh_domain::pr::Review> = Vec::new();
    for r in &pr.reviews {
        match latest.iter_mut().find(|l| l.author == r.author) {
            Some(entry) => *entry = r,
            None => latest.push(r),
        }
    }
    latest
        .iter()
        .filter(|r| r.verdict == Verdict::Approve)
        .filter(|r| head.is_none() || r.commit.as_deref() == head)
        .count()
}

/// The commit `pr`'s branch points at, when the hub serves a workspace and the branch exists.
async fn branch_head(s: &AppState, pr: &PullRequest) -> ApiResult<Option<String>> {
    let Some(ws) = &s.workspace else {
        return Ok(None);
    };
    match ws.branch_head(&pr.branch).await {
        Ok(h) => Ok(Some(h)),
        Err(e) if e.kind == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

pub async fn view(
    State(s): State<AppState>,
    _caller: Caller,
    Path(n): Path<String>,
) -> ApiResult<Json<PrView>> {
    Ok(Json(view_pr(&s, &n).await?))
}

/// PR `n` (`3` or `#3`) with its reviews, comments, approvals and branch summary.
pub async fn view_pr(s: &AppState, n: &str) -> ApiResult<PrView> {
    let pr = s.store.get_pr(pr_number(n)?).await?;
    let branch_summary = match (&s.workspace, pr.state) {
        (Some(ws), PrState::Open) => match ws.summary(&pr.branch).await {
            Ok(summary) => Some(summary),
            Err(e) if e.kind == ErrorKind::NotFound => None,
            Err(e) => return Err(e.into()),
        },
        _ => None,
    };
    let head = match pr.state {
        PrState::Open => branch_head(s, &pr).await?,
        _ => None,
    };
    Ok(PrView {
        approvals: approvals(&pr, head.as_deref()),
        pr,
        branch_summary,
    })
}

pub async fn review(
    State(s): State<AppState>,
    caller: Caller,
    Path(n): Path<String>,
    ApiJson(b): ApiJson<NewReview>,
) -> ApiResult<(StatusCode, Json<Review>)> {
    let r = review_pr(&s, &caller, &n, &b.verdict, &b.text).await?;
    Ok((StatusCode::CREATED, Json(r)))
}

/// Reviews PR `n` as `caller`: `verdict` is approve or request_changes.
pub async fn review_pr(
    s: &AppState,
    caller: &Caller,
    n: &str,
    verdict: &str,
    text: &str,
) -> ApiResult<Review> {
    let verdict = Verdict::parse(verdict)?;
    validate_text("review", text)?;
    let number = pr_number(n)?;
    // The review is of the branch as it is now: a later push voids an approval.
    let head = branch_head(s, &s.store.get_pr(number).await?).await?;
    Ok(s.store
        .review_pr(number, &caller.id, verdict, text, head.as_deref(), s.now())
        .await?)
}

pub async fn comment(
    State(s): State<AppState>,
    caller: Caller,
    Path(n): Path<String>,
    ApiJson(b): ApiJson<NewComment>,
) -> ApiResult<(StatusCode, Json<agensh_domain::pr::Comment>)> {
    Ok((
        StatusCode::CREATED,
        Json(comment_pr(&s, &caller, &n, &b.text).await?),
    ))
}

/// Comments on PR `n` as `caller`.
pub async fn comment_pr(
    s: &AppState,
    caller: &Caller,
    n: &str,
    text: &str,
) -> ApiResult<agensh_domain::pr::Comment> {
    validate_text("comment", text)?;
    Ok(s.store
        .comment_pr(pr_number(n)?, &caller.id, text, s.now())
        .await?)
}

pub async fn close(
    State(s): State<AppState>,
    caller: Caller,
    Path(n): Path<String>,
) -> ApiResult<Json<PullRequest>> {
    Ok(Json(close_pr(&s, &caller, &n).await?))
}

/// Closes PR `n` without merging it (its author, or the admin).
pub async fn close_pr(s: &AppState, caller: &Caller, n: &str) -> ApiResult<PullRequest> {
    let number = pr_number(n)?;
    // Closing while the hub merges the PR would leave its commits on main under a closed PR.
    let _slot = MergeSlot::take(s, number)?;
    Ok(s.store.close_pr(number, &caller.id, s.now()).await?)
}

/// Releases a PR's merge slot when the merge request ends, however it ends.
struct MergeSlot<'a> {
    s: &'a AppState,
    number: i64,
}

impl<'a> MergeSlot<'a> {
    /// Reserves PR `number` for one merge or close at a time.
    fn take(s: &'a AppState, number: i64) -> ApiResult<Self> {
        if !s.merging.lock().expect("merging lock").insert(number) {
            return Err(Error::conflict(
                "merge_in_progress",
                format!("PR #{number} is being merged right now — wait for that merge to finish"),
            )
            .into());
        }
        Ok(MergeSlot { s, number })
    }
}

impl Drop for MergeSlot<'_> {
    fn drop(&mut self) {
        self.s
            .merging
            .lock()
            .expect("merging lock")
            .remove(&self.number);
    }
}

/// What a successful merge answers.
#[derive(Serialize)]
pub struct Merged {
    pub pr: PullRequest,
    #[serde(flatten)]
    pub outcome: MergeOutcome,
}

pub async fn merge(
    State(s): State<AppState>,
    caller: Caller,
    Path(n): Path<String>,
) -> ApiResult<Json<Merged>> {
    Ok(Json(merge_pr(&s, &caller, &n).await?))
}

/// Merges PR `n` into `main` as `caller`, in the hub's repository (gate included): REST
/// and MCP both. A refused merge tells the PR's author (`pr.merge_failed`).
pub async fn merge_pr(s: &AppState, caller: &Caller, n: &str) -> ApiResult<Merged> {
    let number = pr_number(n)?;
    let ws = workspace(s)?;
    let _slot = MergeSlot::take(s, number)?;
    let pr = s.store.get_pr(number).await?;
    if pr.state != PrState::Open {
        return Err(Error::conflict(
            "pr_not_open",
            format!(
                "PR #{number} is {} — only open PRs merge; open a new PR for further changes",
                pr.state.as_str()
            ),
        )
        .into());
    }
    let needed = s.config.merge.required_approvals as usize;
    // With approvals required, what merges is the commit they approved, however the
    // branch moves while the merge runs.
    let head = if needed > 0 {
        Some(ws.branch_head(&pr.branch).await?)
    } else {
        None
    };
    let have = approvals(&pr, head.as_deref());
    if have < needed {
        let stale = approvals(&pr, None) - have;
        let head = head.as_deref().unwrap_or("");
        let short = &head[..head.len().min(10)];
        let why = if stale > 0 {
            format!(" ({stale} more approved an earlier commit; the branch is at {short} now, and an approval counts only for the commit it saw)")
        } else {
            String::new()
        };
        return Err(Error::conflict(
            "needs_approval",
            format!("PR #{number} has {have} approving review(s) of its branch's current commit; this organization needs {needed}{why} — ask peers to review it"),
        )
        .into());
    }
    let gate = (!s.config.merge.gate.trim().is_empty()).then(|| Gate {
        command: s.config.merge.gate.clone(),
        timeout: Duration::from_secs(s.config.merge.gate_timeout_secs),
    });
    let req = MergeRequest {
        branch: pr.branch.clone(),
        head,
        message: format!(
            "Merge PR #{number}: {}\n\nBranch: {}\nAuthor: {}\nMerged-by: {}\n",
            pr.title, pr.branch, pr.author, caller.id
        ),
        gate,
    };
    // The workspace's merge queue: merges waiting together move main once (each still its
    // own merge-tree check and merge commit); a gated merge goes alone, its gate run once
    // on its own merge commit.
    let outcome = ws.merge(&req).await?;
    let now = s.now();
    let refused = match &outcome {
        MergeOutcome::Merged { commit, .. } => {
            inc(&s.metrics.merges);
            let pr = s
                .store
                .mark_merged(number, &caller.id, commit, true, now)
                .await?;
            // main moved, and the PR may have closed issues: the goal may be met.
            s.goal.nudge();
            return Ok(Merged { pr, outcome });
        }
        MergeOutcome::UpToDate { .. } => {
            // Every commit of the branch is on main already: the PR is done.
            let main = ws
                .git()
                .resolve("refs/heads/main")
                .await?
                .unwrap_or_default();
            let pr = s
                .store
                .mark_merged(number, &caller.id, &main, false, now)
                .await?;
            return Ok(Merged { pr, outcome });
        }
        MergeOutcome::Conflict { files } => {
            inc(&s.metrics.merge_conflicts);
            Error::conflict(
                "merge_conflict",
                format!(
                    "PR #{number} conflicts with main in {} — merge main into {} (git pull origin main), resolve, push, and merge again",
                    files.join(", "),
                    pr.branch
                ),
            )
        }
        MergeOutcome::GateFailed {
            exit,
            timed_out,
            output_tail,
        } => {
            inc(&s.metrics.gate_failures);
            let how = if *timed_out {
                format!("ran longer than {} s", s.config.merge.gate_timeout_secs)
            } else {
                format!(
                    "exited with {}",
                    exit.map_or("a signal".to_string(), |c| c.to_string())
                )
            };
            let tail = s.redact_tokens(output_tail);
            let shown = if tail.trim().is_empty() {
                "It printed nothing.".to_string()
            } else {
                format!("Last output:\n{tail}")
            };
            Error::conflict(
                "gate_failed",
                format!(
                    "the merge gate `{}` {how} on the merged tree of PR #{number}; main did not move — fix the branch and merge again. {shown}",
                    s.config.merge.gate
                ),
            )
        }
    };
    let details = match outcome {
        MergeOutcome::GateFailed {
            exit,
            timed_out,
            output_tail,
        } => MergeOutcome::GateFailed {
            exit,
            timed_out,
            output_tail: s.redact_tokens(&output_tail),
        },
        other => other,
    };
    let reason = json!({ "code": refused.code, "message": refused.message, "details": details });
    s.dashboard.note_failure(number, &reason, now);
    s.store
        .merge_failed(number, &caller.id, reason, now)
        .await?;
    Err(refused.into())
}
