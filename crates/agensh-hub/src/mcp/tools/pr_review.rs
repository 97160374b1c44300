//! `pr_review`: a verdict on a peer's open pull request, sent to its author urgently.

use agensh_domain::pr::BODY_LIMIT;
use agensh_domain::Error;
use serde_json::{json, Value};

use super::common::{object, positive, string, PR_NUMBER};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::prs;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "pr_review",
    title: "Review a pull request",
    read_only: false,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(l: &Listing) -> String {
    format!(
        "Review a peer's open pull request (not your own) after reading it with pr_view: verdict approve or request_changes, and a \
         text with concrete reasons (at most {BODY_LIMIT} characters). Its author gets it urgently. A later review of yours replaces \
         your earlier verdict. {}",
        l.approvals
    )
}

fn schema(_: &Listing) -> Value {
    object(
        json!({
            "number": positive(PR_NUMBER),
            "verdict": { "type": "string", "enum": ["approve", "request_changes"], "description": "approve, or request_changes" },
            "text": string(&format!("your reasons, at most {BODY_LIMIT} characters"), BODY_LIMIT),
        }),
        &["number", "verdict", "text"],
    )
}

async fn call(s: &AppState, caller: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let n = a.ident("number", "the PR number, like 3")?;
    let verdict = a.string("verdict", "approve or request_changes")?;
    let text = a.string("text", "why, up to 10000 characters")?;
    let r = prs::review_pr(s, caller, &n, &verdict, &text).await?;
    Ok(Done::of(
        format!(
            "reviewed #{}: {}; its author is told",
            n.trim_start_matches('#'),
            r.verdict.as_str()
        ),
        &r,
    ))
}
