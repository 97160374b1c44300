//! `pr_close`: closes one of the caller's open pull requests without merging it.

use agensh_domain::Error;
use serde_json::{json, Value};

use super::common::{object, positive, PR_NUMBER};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::prs;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "pr_close",
    title: "Close a pull request",
    read_only: false,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(_: &Listing) -> String {
    "Close one of your open pull requests without merging it (its branch stays). Open a new PR for further changes.".to_string()
}

fn schema(_: &Listing) -> Value {
    object(json!({ "number": positive(PR_NUMBER) }), &["number"])
}

async fn call(s: &AppState, caller: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let n = a.ident("number", "the PR number, like 3")?;
    let pr = prs::close_pr(s, caller, &n).await?;
    Ok(Done::of(
        format!(
            "closed #{} without merging (branch {} stays)",
            pr.number, pr.branch
        ),
        &pr,
    ))
}
