//! `issue_view`: one issue in full, with its comments.

use agensh_domain::time::age;
use agensh_domain::Error;
use serde_json::{json, Value};

use super::common::{object, positive, ISSUE_NUMBER};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::issues;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "issue_view",
    title: "Show an issue",
    read_only: true,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(_: &Listing) -> String {
    "One issue in full: title, body, labels, assignee, state, who closed it, and every comment, oldest first. Read it before you \
     take an issue (issue_claim) or comment on it."
        .to_string()
}

fn schema(_: &Listing) -> Value {
    object(json!({ "number": positive(ISSUE_NUMBER) }), &["number"])
}

async fn call(s: &AppState, _: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let n = a.ident("number", "the issue number, like 3")?;
    let i = issues::view_issue(s, &n).await?;
    let now = s.now();
    let mut lines = vec![
        format!("#{} \"{}\" [{}]", i.number, i.title, i.state.as_str()),
        format!(
            "opened by {} {}; {}",
            i.author,
            age(i.created_at, now),
            i.assignee
                .as_deref()
                .map_or("unassigned".to_string(), |a| format!("assigned to {a}"))
        ),
    ];
    if !i.labels.is_empty() {
        lines.push(format!("labels: {}", i.labels.join(", ")));
    }
    if let Some(by) = &i.closed_by {
        lines.push(format!("closed by {by}"));
    }
    if let Some(b) = &i.body {
        lines.push(format!("body:\n{}", b.trim_end()));
    }
    for c in &i.comments {
        lines.push(format!(
            "  comment by {} {}: {}",
            c.author,
            age(c.created_at, now),
            c.text.trim_end().replace('\n', "\n    ")
        ));
    }
    Ok(Done::of(lines.join("\n"), &i))
}
