//! Ship: from "tests pass" to "merged" in one call. The steps are the ones a worker would
//! take one tool at a time — the branch is on the hub with commits main lacks, its PR is
//! opened (or the open one reused), merged through the gate, a PATCH_SUMMARY is posted
//! and the claims are released — each through the same function as its own endpoint.
//! Everything that can be checked before anything moves (title, branch, summary, claim)
//! is checked first; a later failure says which steps were done and what to do.

use agensh_domain::ids::parse_record_id;
use agensh_domain::pr::{NewPr, PullRequest};
use agensh_domain::record::{NewRecord, Record, RecordKind};
use agensh_domain::text::label_key;
use agensh_domain::{Error, ErrorKind, Result};
use agensh_protocol::rest::NewShip;
use agensh_workspace::checkout::work_branch;
use agensh_workspace::merge::{MergeOutcome, Mergeability};
use serde::Serialize;
use serde_json::json;

use super::{board, prs};
use crate::auth::Caller;
use crate::state::AppState;

/// What a ship did, step by step.
#[derive(Debug, Serialize)]
pub struct Shipped {
    /// The merged pull request.
    pub pr: PullRequest,
    /// Whether this call opened the PR (false: the caller's open PR for the branch was reused).
    pub opened: bool,
    /// The merge commit `main` points at now.
    pub merge_commit: String,
    /// The PATCH_SUMMARY posted.
    pub summary: Record,
    /// The claims released.
    pub released: Vec<Record>,
    /// Each step done, one line each, in order.
    pub steps: Vec<String>,
}

/// `text`'s non-blank lines, trimmed, joined with `sep` (`text` itself when it is one line).
fn one_line(text: &str, sep: &str) -> String {
    if !text.contains(['\n', '\r']) {
        return text.to_string();
    }
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(sep)
}

/// Ships `req.branch` (default `<caller>/work`) as `caller`.
pub async fn ship_change(s: &AppState, caller: &Caller, req: NewShip) -> Result<Shipped> {
    let worker = caller.worker()?.to_string();
    let shipped_at = std::time::Instant::now();
    let branch = req.branch.clone().unwrap_or_else(|| work_branch(&worker));
    // Models often write the title and summary over several lines: the PR keeps the summary
    // as written, the one-line places get its lines joined.
    let new_pr = NewPr {
        branch: branch.clone(),
        title: one_line(&req.title, " "),
        body: Some(req.summary.clone()),
    };
    new_pr.validate(&worker)?;
    let claims = claims_to_release(s, &worker, &req).await?;
    let label = req.label.clone().or_else(|| common_label(&claims));
    let mut record = NewRecord::new(RecordKind::PatchSummary, one_line(&req.summary, " | "));
    record.label = label;
    record.validate().map_err(|e| {
        Error::new(
            e.kind,
            &e.code,
            format!(
                "the summary is not a valid PATCH_SUMMARY: {} — nothing was done",
                e.message
            ),
        )
    })?;

    let mut steps = Vec::new();
    let ws = prs::workspace(s)?;
    let compared = match ws.summary(&branch).await {
        Ok(c) => c,
        Err(e) if e.kind == ErrorKind::NotFound => {
            return Err(not_pushed(&branch));
        }
        Err(e) => return Err(e),
    };
    if compared.commits.is_empty() || compared.mergeability == Mergeability::UpToDate {
        return Err(Error::conflict(
            "nothing_to_merge",
            format!(
                "{branch} has no commits that main lacks — commit your change (git add -A, then git commit) and push it \
                 (git push origin HEAD:{branch}), then ship again; through the node's organization tools ship commits and pushes for you"
            ),
        ));
    }
    steps.push(format!(
        "{branch} is on the hub at {} with {} commit(s) main lacks",
        short(&compared.head),
        compared.commits.len()
    ));

    let open = prs::list_prs(s, Some("open"), Some(worker.clone()), Some(prs::LIST_LIMIT))
        .await?
        .into_iter()
        .find(|p| p.branch == branch);
    let (number, opened) = match open {
        Some(p) => {
            steps.push(format!("reused your open PR #{} \"{}\"", p.number, p.title));
            (p.number, false)
        }
        None => {
            let p = prs::open_pr(s, caller, new_pr).await.map_err(|e| {
                stopped(
                    &steps,
                    e,
                    "opening the PR",
                    "fix what it says and ship again",
                )
            })?;
            steps.push(format!("opened PR #{} \"{}\"", p.number, p.title));
            (p.number, true)
        }
    };

    let merged = prs::merge_pr(s, caller, &number.to_string())
        .await
        .map_err(|e| {
            let todo = match e.code.as_str() {
                "gate_failed" => format!(
                    "PR #{number} stays open: fix the code until the gate's command passes in your checkout, commit, and ship again (it reuses PR #{number})"
                ),
                "merge_conflict" => format!(
                    "PR #{number} stays open: pull main into your checkout (git pull origin main), resolve the conflicts, commit, and ship again"
                ),
                "needs_approval" => format!(
                    "PR #{number} stays open: ask peers to review it (msg_post or msg_dm), then ship again"
                ),
                _ => format!("PR #{number} stays open: ship again once that is resolved"),
            };
            stopped(&steps, e, "merging", &todo)
        })?;
    if matches!(merged.outcome, MergeOutcome::Merged { .. }) {
        s.metrics.ship_to_merged.note(shipped_at.elapsed());
    }
    let merge_commit = match &merged.outcome {
        MergeOutcome::Merged { commit, .. } => commit.clone(),
        _ => merged.pr.merge_commit.clone().unwrap_or_default(),
    };
    let gate = if s.config.merge.gate.trim().is_empty() {
        String::new()
    } else {
        " (the gate passed)".to_string()
    };
    steps.push(format!(
        "merged PR #{number} into main at {}{gate}",
        short(&merge_commit)
    ));

    record.detail = Some(format!(
        "PR #{number} \"{}\" merged into main at {merge_commit} (branch {branch})",
        merged.pr.title
    ));
    let summary = board::append_record(s, caller, json!(record))
        .await
        .map_err(|e| {
            stopped(
                &steps,
                e,
                "posting the PATCH_SUMMARY",
                "post it with board_write (kind PATCH_SUMMARY) and release your claim",
            )
        })?
        .record;
    steps.push(format!(
        "posted {} PATCH_SUMMARY: {}",
        summary.id, summary.text
    ));

    let mut released = Vec::new();
    for c in &claims {
        let r = board::release_claim(s, caller, &c.id).await.map_err(|e| {
            stopped(
                &steps,
                e,
                "releasing your claim",
                "release it with the release tool",
            )
        })?;
        steps.push(format!("released {}: {}", r.id, r.text));
        released.push(r);
    }
    if claims.is_empty() {
        steps.push("no live claim of yours to release".to_string());
    }
    Ok(Shipped {
        pr: merged.pr,
        opened,
        merge_commit,
        summary,
        released,
        steps,
    })
}

/// The claims a ship releases: the one named by `req.claim`, else `worker`'s live claims
/// (only those labelled `req.label`, when it is given).
async fn claims_to_release(s: &AppState, worker: &str, req: &NewShip) -> Result<Vec<Record>> {
    let live: Vec<Record> = s
        .store
        .list_workers(s.now())
        .await?
        .into_iter()
        .find(|w| w.id == worker)
        .map(|w| w.claims)
        .unwrap_or_default();
    if let Some(id) = &req.claim {
        let seq = parse_record_id(id)?;
        return match live.iter().find(|c| c.seq == seq) {
            Some(c) => Ok(vec![c.clone()]),
            None => {
                let yours: Vec<&str> = live.iter().map(|c| c.id.as_str()).collect();
                let yours = if yours.is_empty() {
                    "you hold none".to_string()
                } else {
                    format!("yours: {}", yours.join(", "))
                };
                Err(Error::invalid(
                    "not_your_live_claim",
                    format!(
                        "G{seq} is not one of your live claims ({yours}) — name one of them as claim, or leave claim out; nothing was done"
                    ),
                ))
            }
        };
    }
    Ok(match &req.label {
        Some(l) => {
            // Labels that look alike are one label, as in the claim overlap check.
            let key = label_key(l);
            live.into_iter()
                .filter(|c| c.label.as_deref().map(label_key).as_ref() == Some(&key))
                .collect()
        }
        None => live,
    })
}

/// The label every claim in `claims` shares, if they share one.
fn common_label(claims: &[Record]) -> Option<String> {
    let first = claims.first()?.label.clone()?;
    claims
        .iter()
        .all(|c| c.label.as_deref() == Some(first.as_str()))
        .then_some(first)
}

/// The refusal for a branch the hub does not have: exactly how to push it.
pub fn not_pushed(branch: &str) -> Error {
    Error::not_found(
        "unknown_branch",
        format!(
            "branch {branch} is not on the hub yet — push it first, from your checkout: git push origin HEAD:{branch}. \
             ship does this for you when called through the node's organization tools: it commits what is left, pushes, \
             opens the PR, merges it and posts the PATCH_SUMMARY in one call"
        ),
    )
}

/// A step that failed after others were done: its error, with the step, what to do and
/// what was done already.
fn stopped(done: &[String], e: Error, step: &str, todo: &str) -> Error {
    let done = if done.is_empty() {
        String::new()
    } else {
        format!(" Done before it: {}.", done.join("; "))
    };
    Error::new(
        e.kind,
        &e.code,
        format!("ship stopped at {step}: {}\n{todo}.{done}", e.message),
    )
}

/// The first 12 characters of a commit id.
fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(seq: i64, label: Option<&str>) -> Record {
        let mut n = NewRecord::new(RecordKind::Claim, "x");
        n.label = label.map(str::to_string);
        Record::from_new(seq, "w01", n, 0, None)
    }

    #[test]
    fn the_summary_takes_the_label_its_claims_share() {
        assert_eq!(
            common_label(&[claim(1, Some("a")), claim(2, Some("a"))]).as_deref(),
            Some("a")
        );
        assert_eq!(
            common_label(&[claim(1, Some("a")), claim(2, Some("b"))]),
            None
        );
        assert_eq!(common_label(&[claim(1, None)]), None);
        assert_eq!(common_label(&[]), None);
    }

    #[test]
    fn a_failed_step_keeps_its_code_and_says_what_was_done_and_what_to_do() {
        let e = stopped(
            &["opened PR #3".to_string()],
            Error::conflict("gate_failed", "the gate exited with 1"),
            "merging",
            "fix it and ship again",
        );
        assert_eq!(e.code, "gate_failed");
        assert_eq!(
            e.message,
            "ship stopped at merging: the gate exited with 1\nfix it and ship again. Done before it: opened PR #3."
        );
    }

    #[test]
    fn an_unpushed_branch_is_answered_with_the_push_command() {
        let e = not_pushed("w01/work");
        assert!(
            e.message.contains("git push origin HEAD:w01/work"),
            "{}",
            e.message
        );
        assert!(e.message.contains("ship"), "{}", e.message);
    }
}
