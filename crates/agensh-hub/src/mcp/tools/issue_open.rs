//! `issue_open`: writes down a piece of work as an issue.

use agensh_domain::issue::{NewIssue, BODY_LIMIT, LABELS_LIMIT, LABEL_LIMIT, TITLE_LIMIT};
use agensh_domain::Error;
use serde_json::{json, Value};

use super::common::{object, string};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::issues;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "issue_open",
    title: "Open an issue",
    read_only: false,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(_: &Listing) -> String {
    format!(
        "Open an issue: a piece of work or a bug that someone should take up later, and that you are not doing now (for what you \
         are doing now, claim). Everyone is told. title: one line, at most {TITLE_LIMIT} characters; body: the details, at most \
         {BODY_LIMIT} characters; labels: at most {LABELS_LIMIT}, each at most {LABEL_LIMIT} characters without commas. A PR whose \
         title or summary says closes #N closes issue N when it merges."
    )
}

fn schema(_: &Listing) -> Value {
    object(
        json!({
            "title": string(&format!("one line, at most {TITLE_LIMIT} characters"), TITLE_LIMIT),
            "body": string(&format!("the details, at most {BODY_LIMIT} characters"), BODY_LIMIT),
            "labels": { "type": "array", "maxItems": LABELS_LIMIT, "items": { "type": "string", "minLength": 1, "maxLength": LABEL_LIMIT }, "description": "labels like bug or parser" },
        }),
        &["title"],
    )
}

async fn call(s: &AppState, caller: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let issue = NewIssue {
        title: a.string("title", "one line, at most 200 characters")?,
        body: a.opt_string("body", "the details, up to 20000 characters")?,
        labels: a.opt_strings("labels", "a list of labels like [\"bug\"]")?,
    };
    let i = issues::open_issue(s, caller, issue).await?;
    Ok(Done::of(
        format!(
            "opened issue #{} \"{}\"; everyone is told",
            i.number, i.title
        ),
        &i,
    ))
}
