//! `issue_claim`: assigns an issue to the caller — it takes the work.

use agensh_domain::Error;
use serde_json::{json, Value};

use super::common::{object, positive, ISSUE_NUMBER};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::issues;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "issue_claim",
    title: "Take an issue",
    read_only: false,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(l: &Listing) -> String {
    format!(
        "Take an open issue: it is assigned to you ({}), so others see it is being done. Refused when another worker has it \
         already — pick another (issue_list assignee=none). When your work is done, ship it with closes #N in the title or \
         summary: the merge closes the issue. If you give it up, say so with issue_comment.",
        l.me
    )
}

fn schema(_: &Listing) -> Value {
    object(json!({ "number": positive(ISSUE_NUMBER) }), &["number"])
}

async fn call(s: &AppState, caller: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let n = a.ident("number", "the issue number, like 3")?;
    let i = issues::claim_issue(s, caller, &n).await?;
    Ok(Done::of(
        format!(
            "issue #{} \"{}\" is yours. When done, ship with \"closes #{}\" in the title or summary; the merge closes it.",
            i.number, i.title, i.number
        ),
        &i,
    ))
}
