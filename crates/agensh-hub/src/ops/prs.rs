//! Pull requests: open, list, view, review, comment, merge (done by the hub), close.

use std::time::Duration;

use agensh_domain::pr::{validate_text, NewPr, PrState, PullRequest, Review, Verdict};
use agensh_domain::{page, Error, ErrorKind, Result};
use agensh_workspace::merge::{BranchSummary, Gate, MergeOutcome, MergeRequest};
use agensh_workspace::Workspace;
use serde::Serialize;
use serde_json::json;

use crate::auth::Caller;
use crate::metrics::inc;
use crate::state::AppState;

/// Most PRs one list returns ([`page::PRS`]).
pub const LIST_LIMIT: usize = page::PRS.max;

/// The hub's workspace, or a refusal when it serves none.
pub fn workspace(s: &AppState) -> Result<&Workspace> {
    s.workspace.as_ref().ok_or_else(|| {
        Error::not_found(
            "no_workspace",
            "this hub serves no git workspace — start it on an organization made by `agensh init`",
        )
    })
}

fn pr_number(n: &str) -> Result<i64> {
    agensh_domain::ids::parse_number(n).ok_or_else(|| {
        Error::invalid(
            "bad_pr_number",
            format!(
                "\"{}\" is not a PR number — use the number `agensh pr list` shows, like 3",
                agensh_domain::ids::truncate_for_message(n)
            ),
        )
    })
}

/// Opens a PR from one of `caller`'s branches: REST and MCP both.
pub async fn open_pr(s: &AppState, caller: &Caller, pr: NewPr) -> Result<PullRequest> {
    pr.validate(&caller.id)?;
    match workspace(s)?.branch_head(&pr.branch).await {
        Err(e) if e.kind == ErrorKind::NotFound => return Err(super::ship::not_pushed(&pr.branch)),
        other => other?,
    };
    s.store.open_pr(&caller.id, pr, s.now()).await
}

/// PRs newest first, optionally only in `state` and by `author`.
pub async fn list_prs(
    s: &AppState,
    state: Option<&str>,
    author: Option<String>,
    limit: Option<usize>,
) -> Result<Vec<PullRequest>> {
    let state = state.map(PrState::parse).transpose()?;
    let limit = page::PRS.check(limit)?;
    let mut prs = s.store.list_prs(state, author, limit).await?;
    if let Some(ws) = &s.workspace {
        let queue = ws.merge_queue();
        for pr in prs.iter_mut() {
            pr.queue = queue_place(&queue, pr);
        }
    }
    Ok(prs)
}

/// Where `pr`'s merge waits in the merge queue `queue`, while it is open and waits there.
fn queue_place(
    queue: &[agensh_workspace::merge::QueuedMerge],
    pr: &PullRequest,
) -> Option<agensh_domain::pr::QueuePlace> {
    if pr.state != PrState::Open {
        return None;
    }
    queue
        .iter()
        .find(|q| q.branch == pr.branch)
        .map(|q| agensh_domain::pr::QueuePlace {
            place: q.place,
            batch: q.batch,
            gate_run: q.gate_run,
        })
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
async fn branch_head(s: &AppState, pr: &PullRequest) -> Result<Option<String>> {
    let Some(ws) = &s.workspace else {
        return Ok(None);
    };
    match ws.branch_head(&pr.branch).await {
        Ok(h) => Ok(Some(h)),
        Err(e) if e.kind == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// PR `n` (`3` or `#3`) with its reviews, comments, approvals and branch summary.
pub async fn view_pr(s: &AppState, n: &str) -> Result<PrView> {
    let mut pr = s.store.get_pr(pr_number(n)?).await?;
    if let Some(ws) = &s.workspace {
        pr.queue = queue_place(&ws.merge_queue(), &pr);
    }
    let branch_summary = match (&s.workspace, pr.state) {
        (Some(ws), PrState::Open) => match ws.summary(&pr.branch).await {
            Ok(summary) => Some(summary),
            Err(e) if e.kind == ErrorKind::NotFound => None,
            Err(e) => return Err(e),
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

/// Reviews PR `n` as `caller`: `verdict` is approve or request_changes.
pub async fn review_pr(
    s: &AppState,
    caller: &Caller,
    n: &str,
    verdict: &str,
    text: &str,
) -> Result<Review> {
    let verdict = Verdict::parse(verdict)?;
    validate_text("review", text)?;
    let number = pr_number(n)?;
    // The review is of the branch as it is now: a later push voids an approval.
    let head = branch_head(s, &s.store.get_pr(number).await?).await?;
    s.store
        .review_pr(number, &caller.id, verdict, text, head.as_deref(), s.now())
        .await
}

/// Comments on PR `n` as `caller`.
pub async fn comment_pr(
    s: &AppState,
    caller: &Caller,
    n: &str,
    text: &str,
) -> Result<agensh_domain::pr::Comment> {
    validate_text("comment", text)?;
    s.store
        .comment_pr(pr_number(n)?, &caller.id, text, s.now())
        .await
}

/// Closes PR `n` without merging it (its author, or the admin).
pub async fn close_pr(s: &AppState, caller: &Caller, n: &str) -> Result<PullRequest> {
    let number = pr_number(n)?;
    // Closing while the hub merges the PR would leave its commits on main under a closed PR.
    let _slot = MergeSlot::take(s, number)?;
    s.store.close_pr(number, &caller.id, s.now()).await
}

/// Releases a PR's merge slot when the merge request ends, however it ends.
struct MergeSlot<'a> {
    s: &'a AppState,
    number: i64,
}

impl<'a> MergeSlot<'a> {
    /// Reserves PR `number` for one merge or close at a time.
    fn take(s: &'a AppState, number: i64) -> Result<Self> {
        if !s.merging.lock().expect("merging lock").insert(number) {
            return Err(Error::conflict(
                "merge_in_progress",
                format!("PR #{number} is being merged right now — wait for that merge to finish"),
            ));
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

/// Merges PR `n` into `main` as `caller`, in the hub's repository (gate included): REST
/// and MCP both. A refused merge tells the PR's author (`pr.merge_failed`).
pub async fn merge_pr(s: &AppState, caller: &Caller, n: &str) -> Result<Merged> {
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
        ));
    }
    let needed = s.config.merge.required_approvals as usize;
    // What merges is the branch's commit now (the one any approvals are for), however the
    // branch moves while the merge waits.
    let head = ws.branch_head(&pr.branch).await?;
    let refused_before = s
        .gate_refused
        .lock()
        .expect("gate_refused lock")
        .get(&number)
        .cloned();
    // `main` is read only for a PR the gate refused before: most merges never need it.
    let unchanged = match refused_before {
        Some((h, m)) if h == head => m == ws.main_commit().await?,
        _ => false,
    };
    if unchanged {
        return Err(Error::conflict(
            "gate_failed",
            format!(
                "the merge gate `{}` already refused PR #{number} at commit {}, and neither its branch nor main has moved since; main did not move — fix the branch, push, and merge again",
                s.config.merge.gate,
                &head[..head.len().min(10)]
            ),
        ));
    }
    let head = Some(head);
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
        ));
    }
    let gate = (!s.config.merge.gate.trim().is_empty()).then(|| Gate {
        command: s.config.merge.gate.clone(),
        timeout: Duration::from_secs(s.config.merge.gate_timeout_secs),
        batch: s.config.merge.gate_batch,
        jobs: match s.config.merge.gate_jobs {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        },
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
    // own merge-tree check and merge commit); gated ones go through its merge train.
    let outcome = ws.merge(&req).await?;
    if let (MergeOutcome::GateFailed { .. }, Some(head)) = (&outcome, &req.head) {
        let main = ws.main_commit().await?;
        s.gate_refused
            .lock()
            .expect("gate_refused lock")
            .insert(number, (head.clone(), main));
    }
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
    Err(refused)
}
