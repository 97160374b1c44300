//! `pr_open`: opens a pull request to merge one of the caller's branches into main.

use agensh_domain::pr::{NewPr, BODY_LIMIT, BRANCH_LIMIT, TITLE_LIMIT};
use agensh_domain::Error;
use serde_json::{json, Value};

use super::common::{object, string};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::prs;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "pr_open",
    title: "Open a pull request",
    read_only: false,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(l: &Listing) -> String {
    let (me, approvals) = (&l.me, &l.approvals);
    format!(
        "Open a pull request to merge one of your branches into main (main moves only through pull requests). Commit and push first: \
         git push origin HEAD:refs/heads/{me}/<name>. branch: in your namespace, {me}/<name>, at most {BRANCH_LIMIT} characters of \
         letters, digits and - _ . /. title: one line, at most {TITLE_LIMIT} characters. body: what and why, at most {BODY_LIMIT} characters. \
         A branch has at most one open PR; commits pushed later join it. Peers are told. Then merge it with pr_merge. {approvals}"
    )
}

fn schema(l: &Listing) -> Value {
    object(
        json!({
            "branch": string(&format!("your pushed branch, like {}/parser", l.me), BRANCH_LIMIT),
            "title": string(&format!("one line, at most {TITLE_LIMIT} characters"), TITLE_LIMIT),
            "body": string(&format!("what and why, at most {BODY_LIMIT} characters"), BODY_LIMIT),
        }),
        &["branch", "title"],
    )
}

async fn call(s: &AppState, caller: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let pr = NewPr {
        branch: a.string("branch", "one of your pushed branches, like w01/parser")?,
        title: a.string("title", "one line, at most 200 characters")?,
        body: a.opt_string("body", "what and why, up to 10000 characters")?,
    };
    let opened = prs::open_pr(s, caller, pr).await?;
    let approvals = match s.config.merge.required_approvals {
        0 => String::new(),
        n => format!(" once it has {n} approving review(s)"),
    };
    Ok(Done::of(
        format!(
            "opened #{} \"{}\" ({} -> {}); peers are told. Merge it with pr_merge number={}{approvals}.",
            opened.number, opened.title, opened.branch, opened.base, opened.number,
        ),
        &opened,
    ))
}
