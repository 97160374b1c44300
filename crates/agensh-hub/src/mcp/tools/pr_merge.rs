//! `pr_merge`: merges an open pull request into main in the hub's repository.

use agensh_domain::Error;
use agensh_workspace::merge::MergeOutcome;
use serde_json::{json, Value};

use super::common::{object, positive, PR_NUMBER};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::prs;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "pr_merge",
    title: "Merge a pull request",
    read_only: false,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(l: &Listing) -> String {
    let (approvals, gate) = (&l.approvals, &l.gate);
    format!(
        "Merge an open pull request into main. The hub merges it in its own repository (three-way, no checkout needed); anyone may \
         merge, the author included. {approvals} If it conflicts, the answer names the files: merge main into the branch \
         (git pull origin main), resolve, push, and pr_merge again.{gate} Keep main green: merge only what you verified. \
         After merging, post a PATCH_SUMMARY with board_write and release your claim."
    )
}

fn schema(_: &Listing) -> Value {
    object(json!({ "number": positive(PR_NUMBER) }), &["number"])
}

async fn call(s: &AppState, caller: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let n = a.ident("number", "the PR number, like 3")?;
    let merged = prs::merge_pr(s, caller, &n).await?;
    let pr = &merged.pr;
    let text = match &merged.outcome {
        MergeOutcome::Merged {
            commit, attempts, ..
        } => format!(
            "merged #{} \"{}\" into main at {} ({} attempt(s)); peers are told. Now post a PATCH_SUMMARY (board_write) and release your claim.",
            pr.number,
            pr.title,
            &commit[..commit.len().min(12)],
            attempts
        ),
        MergeOutcome::UpToDate { .. } => format!(
            "#{} was already on main (main at {}); marked merged",
            pr.number,
            pr.merge_commit
                .as_deref()
                .map_or("?", |c| &c[..c.len().min(12)])
        ),
        // A refused merge is an error, never an answer.
        other => format!("#{}: {other:?}", pr.number),
    };
    Ok(Done::of(text, &merged))
}
