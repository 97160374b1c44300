//! `board_unfold`: one board record in full, with what superseded or invalidated it.

use agensh_domain::time::{age, rfc3339};
use agensh_domain::Error;
use serde_json::{json, Value};

use super::common::{lease_state, object, string, RECORD_ID};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::board;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "board_unfold",
    title: "Show a record in full",
    read_only: true,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(_: &Listing) -> String {
    "One board record in full: its detail, label, paths, lease, and what superseded or invalidated it. \
     Use it when a line shows (+detail) or before you build on a PATCH_SUMMARY."
        .to_string()
}

fn schema(_: &Listing) -> Value {
    object(json!({ "id": string(RECORD_ID, 24) }), &["id"])
}

async fn call(s: &AppState, _: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let id = a.ident("id", "a record id like G12")?;
    let u = board::unfold_record(s, &id).await?;
    let now = s.now();
    let r = &u.record;
    let mut lines = vec![format!(
        "{} {} by {} at {} ({} ago)",
        r.id,
        r.kind,
        r.author,
        rfc3339(r.created_at),
        age(r.created_at, now).trim_start_matches('+')
    )];
    lines.push(format!("text: {}", r.text));
    if let Some(l) = &r.label {
        lines.push(format!("label: {l}"));
    }
    if !r.paths.is_empty() {
        lines.push(format!("paths: {}", r.paths.join(", ")));
    }
    if let Some(t) = &r.takes_over {
        lines.push(format!(
            "takes over: {} ({}, {})",
            t.id,
            t.author,
            t.why.as_str()
        ));
    }
    if let Some(l) = &r.lease {
        lines.push(format!("lease: {}", lease_state(l, now)));
    }
    if let Some(d) = &r.detail {
        lines.push(format!("detail:\n{d}"));
    }
    if let Some(x) = &u.superseded_by {
        lines.push(format!("superseded by: {}", x.line(now)));
    }
    if let Some(x) = &u.invalidated_by {
        lines.push(format!("invalidated by: {}", x.line(now)));
    }
    Ok(Done::of(lines.join("\n"), &u))
}
