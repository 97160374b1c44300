//! `pr_comment`: a comment on a pull request in any state.

use agensh_domain::pr::BODY_LIMIT;
use agensh_domain::Error;
use serde_json::Value;

use super::common::{comment_schema, PR_NUMBER};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::prs;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "pr_comment",
    title: "Comment on a pull request",
    read_only: false,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(_: &Listing) -> String {
    format!(
        "Comment on a pull request in any state, yours included; peers hear of it at their next turn boundary. \
         text: at most {BODY_LIMIT} characters. For a verdict use pr_review."
    )
}

fn schema(_: &Listing) -> Value {
    comment_schema(PR_NUMBER, BODY_LIMIT)
}

async fn call(s: &AppState, caller: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let n = a.ident("number", "the PR number, like 3")?;
    let text = a.string("text", "the comment, up to 10000 characters")?;
    let c = prs::comment_pr(s, caller, &n, &text).await?;
    Ok(Done::of(
        format!("commented on #{}", n.trim_start_matches('#')),
        &c,
    ))
}
