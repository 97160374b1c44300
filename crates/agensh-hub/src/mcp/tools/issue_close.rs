//! `issue_close`: closes an issue the caller opened or was assigned.

use agensh_domain::Error;
use serde_json::{json, Value};

use super::common::{object, positive, ISSUE_NUMBER};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::issues;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "issue_close",
    title: "Close an issue",
    read_only: false,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(_: &Listing) -> String {
    "Close an issue you opened or were assigned, when it is done another way or no longer needed (say why with issue_comment \
     first). An issue done by a PR closes by itself when the PR says closes #N and merges."
        .to_string()
}

fn schema(_: &Listing) -> Value {
    object(json!({ "number": positive(ISSUE_NUMBER) }), &["number"])
}

async fn call(s: &AppState, caller: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let n = a.ident("number", "the issue number, like 3")?;
    let i = issues::close_issue(s, caller, &n).await?;
    Ok(Done::of(
        format!("closed issue #{} \"{}\"", i.number, i.title),
        &i,
    ))
}
