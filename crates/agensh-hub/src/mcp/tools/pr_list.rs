//! `pr_list`: pull requests, newest first, one line each.

use agensh_domain::pr::PullRequest;
use agensh_domain::time::age;
use agensh_domain::Error;
use serde_json::{json, Value};

use super::common::{integer, object};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::prs;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "pr_list",
    title: "List pull requests",
    read_only: true,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(_: &Listing) -> String {
    format!(
        "Pull requests, newest first, one line each: number, state, author, branch, title. state: open, merged or closed (default all); \
         author: a worker id; limit: 1–{} (default 100).",
        prs::LIST_LIMIT
    )
}

fn schema(_: &Listing) -> Value {
    object(
        json!({
            "state": { "type": "string", "enum": ["open", "merged", "closed"], "description": "only PRs in this state" },
            "author": { "type": "string", "maxLength": 64, "description": "only this worker's PRs, like w01" },
            "limit": integer("at most this many (default 100)", 1, prs::LIST_LIMIT as u64),
        }),
        &[],
    )
}

async fn call(s: &AppState, _: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let state = a.opt_string("state", "open, merged or closed")?;
    let author = a.opt_string("author", "a worker id like w01")?;
    let limit = a.opt_usize("limit", "1 to 500")?;
    let list = prs::list_prs(s, state.as_deref(), author, limit).await?;
    let now = s.now();
    let text = if list.is_empty() {
        "no pull requests match".to_string()
    } else {
        let mut lines = vec![format!("{} pull request(s), newest first:", list.len())];
        lines.extend(list.iter().map(|p| pr_line(p, now)));
        lines.join("\n")
    };
    Ok(Done::new(text, json!({ "prs": list })))
}

/// `#3 [open] w01 w01/parser "title" (updated 2m ago)`.
fn pr_line(pr: &PullRequest, now: i64) -> String {
    format!(
        "#{} [{}] {} {} \"{}\" (updated {} ago)",
        pr.number,
        pr.state.as_str(),
        pr.author,
        pr.branch,
        pr.title,
        age(pr.updated_at, now).trim_start_matches('+')
    )
}
