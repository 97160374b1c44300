//! `ship`: from "tests pass" to "merged" in one call — opens (or reuses) the PR of the
//! caller's branch, merges it through the gate, posts the PATCH_SUMMARY and releases the
//! claim. Through the node's organization tools it first commits what is left in the
//! checkout and pushes the branch (the node does that before the call reaches the hub).

use agensh_domain::pr::{BRANCH_LIMIT, TITLE_LIMIT};
use agensh_domain::record::{LABEL_LIMIT, PATCH_SUMMARY_LIMIT};
use agensh_domain::Error;
use agensh_protocol::rest::NewShip;
use serde_json::{json, Value};

use super::common::{object, string, RECORD_ID};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::ship;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "ship",
    title: "Ship a change: push, PR, merge, summary, release",
    read_only: false,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(l: &Listing) -> String {
    let (me, approvals, gate) = (&l.me, &l.approvals, &l.gate);
    format!(
        "When your tests pass, call ship once: it commits what is left in your checkout and pushes your branch (default {me}/work; \
         your node does this part — elsewhere push first with git push origin HEAD:{me}/work), opens its pull request (or reuses your \
         open one), merges it into main, posts summary as your PATCH_SUMMARY and releases your claim. \
         The answer lists each step done.{gate} {approvals} If a step fails, the answer says what was done and what to do: \
         on a gate failure the PR stays open — fix the code, and ship again; on a conflict pull main (git pull origin main), resolve, and ship again. \
         title: one line, at most {TITLE_LIMIT} characters. summary: one line, at most {PATCH_SUMMARY_LIMIT} characters \
         (e.g. `files=... | idea=... | evidence=<what passed> | risk=...`). Without claim it releases all your live claims \
         (only those with label, when you give one)."
    )
}

fn schema(l: &Listing) -> Value {
    object(
        json!({
            "title": string(&format!("the pull request's title: one line, at most {TITLE_LIMIT} characters"), TITLE_LIMIT),
            "summary": string(&format!("the PATCH_SUMMARY: one line, at most {PATCH_SUMMARY_LIMIT} characters — what changed and what passed"), PATCH_SUMMARY_LIMIT),
            "branch": string(&format!("the branch to ship (default {}/work)", l.me), BRANCH_LIMIT),
            "label": string(&format!("{}; the summary gets it and only your claims with it are released", l.label), LABEL_LIMIT),
            "claim": string(&format!("the one claim to release, {RECORD_ID}"), 24),
        }),
        &["title", "summary"],
    )
}

async fn call(s: &AppState, caller: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let req = NewShip {
        title: a.string("title", "one line, at most 200 characters")?,
        summary: a.string("summary", "one line, at most 300 characters")?,
        branch: a.opt_string("branch", "your branch, like w01/work")?,
        claim: a.opt_string("claim", "a claim's record id, like G14")?,
        label: a.opt_string("label", "the work item, e.g. parser-errors")?,
    };
    let shipped = ship::ship_change(s, caller, req).await?;
    let mut text = format!(
        "shipped PR #{} into main; peers are told:",
        shipped.pr.number
    );
    for (i, step) in shipped.steps.iter().enumerate() {
        text.push_str(&format!("\n{}. {step}", i + 1));
    }
    Ok(Done::of(text, &shipped))
}
