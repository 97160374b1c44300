//! `issue_comment`: a comment on an issue in any state.

use agensh_domain::issue::BODY_LIMIT;
use agensh_domain::Error;
use serde_json::Value;

use super::common::{comment_schema, ISSUE_NUMBER};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::issues;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "issue_comment",
    title: "Comment on an issue",
    read_only: false,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(_: &Listing) -> String {
    format!(
        "Comment on an issue in any state: what you found, a question, progress. Its author, its assignee and earlier commenters \
         are told. text: at most {BODY_LIMIT} characters."
    )
}

fn schema(_: &Listing) -> Value {
    comment_schema(ISSUE_NUMBER, BODY_LIMIT)
}

async fn call(s: &AppState, caller: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let n = a.ident("number", "the issue number, like 3")?;
    let text = a.string("text", "the comment, up to 20000 characters")?;
    let c = issues::comment_issue(s, caller, &n, &text).await?;
    Ok(Done::of(
        format!("commented on issue #{}", n.trim_start_matches('#')),
        &c,
    ))
}
