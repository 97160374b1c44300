//! `issue_list`: issues, newest first, one line each.

use agensh_domain::issue::Issue;
use agensh_domain::time::age;
use agensh_domain::Error;
use agensh_protocol::rest::ListIssues;
use serde_json::{json, Value};

use super::common::{integer, object, positive};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::issues;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "issue_list",
    title: "List issues",
    read_only: true,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(_: &Listing) -> String {
    format!(
        "The organization's issues (work to do that people and workers wrote down), newest first, one line each: number, state, \
         assignee, labels, title. Use it to find work: assignee none lists the open issues nobody has taken; then read one with \
         issue_view and take it with issue_claim. state: open (default), closed or all; label: only issues with it; assignee: a \
         worker id or none; before: an issue number, to page back; limit: 1–{} (default 100).",
        issues::LIST_LIMIT
    )
}

fn schema(_: &Listing) -> Value {
    object(
        json!({
            "state": { "type": "string", "enum": ["open", "closed", "all"], "description": "open (default), closed or all" },
            "label": { "type": "string", "maxLength": 50, "description": "only issues with this label" },
            "assignee": { "type": "string", "maxLength": 64, "description": "only issues assigned to this worker (like w01), or none for unassigned ones" },
            "before": positive("only issues numbered below this, to page back"),
            "limit": integer("at most this many (default 100)", 1, issues::LIST_LIMIT as u64),
        }),
        &[],
    )
}

async fn call(s: &AppState, _: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let q = ListIssues {
        state: a.opt_string("state", "open, closed or all")?,
        label: a.opt_string("label", "a label like bug")?,
        assignee: a.opt_string("assignee", "a worker id like w01, or none")?,
        before: a
            .opt_u64("before", "an issue number, like 40")?
            .map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
        limit: a.opt_usize("limit", "1 to 500")?,
    };
    let list = issues::list_issues(s, q).await?;
    let now = s.now();
    let text = if list.is_empty() {
        "no issues match".to_string()
    } else {
        let mut lines = vec![format!("{} issue(s), newest first:", list.len())];
        lines.extend(list.iter().map(|i| issue_line(i, now)));
        lines.join("\n")
    };
    Ok(Done::new(text, json!({ "issues": list })))
}

/// `#3 [open] unassigned [bug, parser] "title" (2 comments, updated 2m ago)`.
pub(super) fn issue_line(i: &Issue, now: i64) -> String {
    let labels = if i.labels.is_empty() {
        String::new()
    } else {
        format!(" [{}]", i.labels.join(", "))
    };
    format!(
        "#{} [{}] {}{labels} \"{}\" ({} comment(s), updated {} ago)",
        i.number,
        i.state.as_str(),
        i.assignee
            .as_deref()
            .map_or("unassigned".to_string(), |a| format!("assigned to {a}")),
        i.title,
        i.comment_count,
        age(i.updated_at, now).trim_start_matches('+')
    )
}
