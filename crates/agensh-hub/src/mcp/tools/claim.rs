//! `claim`: posts a CLAIM record with a lease and names the live claims it overlaps.

use agensh_domain::record::{
    Appended, DETAIL_LIMIT, LABEL_LIMIT, MAX_LEASE_SECS, PATHS_LIMIT, PATH_LIMIT, TEXT_LIMIT,
};
use agensh_domain::Error;
use serde_json::{json, Value};

use super::common::{in_time, integer, lease_state, object, string};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::board;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "claim",
    title: "Claim a sub-task",
    read_only: false,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(l: &Listing) -> String {
    format!(
        "Claim one sub-task in public before you work on it: posts a CLAIM record with a lease (default {} s, at most {MAX_LEASE_SECS}). \
         text: what you take on, one line, at most {TEXT_LIMIT} characters. label: the work item; paths: the files or directories you expect \
         to touch (relative to the repository root, at most {PATHS_LIMIT}). The answer lists other workers' live claims that overlap yours \
         (same label, or overlapping paths) and who holds them: then do not duplicate the work — msg_dm the holder to split or hand it over, \
         or release your claim and pick other work. Renew before the lease ends; release when merged or abandoned. \
         takes_over: the id of a claim whose author is dead or stopped, or that was released or expired, to take its work on \
         (without label and paths yours gets the old claim's); a live worker's claim is refused: msg_dm its holder instead.",
        l.lease()
    )
}

fn schema(l: &Listing) -> Value {
    object(
        json!({
            "text": string(&format!("what you take on, one line, at most {TEXT_LIMIT} characters"), TEXT_LIMIT),
            "label": string(&l.label, LABEL_LIMIT),
            "paths": {
                "type": "array",
                "maxItems": PATHS_LIMIT,
                "items": string("a file or directory relative to the repository root, like src/parser/ (no leading /, no ..)", PATH_LIMIT),
                "description": "files or directories you expect to touch"
            },
            "lease_secs": integer(&format!("lease in seconds (default {})", l.lease()), 1, MAX_LEASE_SECS),
            "detail": string(&format!("optional longer body: plan, acceptance criteria (at most {DETAIL_LIMIT} characters)"), DETAIL_LIMIT),
            "takes_over": {
                "type": "string",
                "pattern": "^[Gg]?[0-9]+$",
                "description": "the id of a dead or stopped worker's claim (or a released or expired one) whose work you take on, like G12"
            },
        }),
        &["text"],
    )
}

async fn call(s: &AppState, caller: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let mut body = json!({
        "kind": "CLAIM",
        "text": a.string("text", "what you take on, one line, at most 100 characters")?,
    });
    if let Some(l) = a.opt_string("label", "the work item, e.g. parser-errors")? {
        body["label"] = Value::String(l);
    }
    let paths = a.opt_strings(
        "paths",
        "a list of files or directories, like [\"src/parser/\"]",
    )?;
    if !paths.is_empty() {
        body["paths"] = json!(paths);
    }
    if let Some(d) = a.opt_string("detail", "a longer body, up to 8000 characters")? {
        body["detail"] = Value::String(d);
    }
    if let Some(l) = a.opt_u64("lease_secs", "seconds, 1 to 86400")? {
        body["lease_secs"] = json!(l);
    }
    if let Some(id) = a.opt_string("takes_over", "a claim id, like G12")? {
        body["takes_over"] = Value::String(id);
    }
    let appended = board::append_record(s, caller, body).await?;
    Ok(claimed(s.now(), appended))
}

/// The answer to a new claim at `now`: the claim, its lease, and the overlaps with who
/// holds them.
pub(super) fn claimed(now: i64, appended: Appended) -> Done {
    let r = &appended.record;
    let mut lines = vec![format!("claimed {}", r.line(now))];
    if let Some(t) = &r.takes_over {
        lines.push(format!(
            "took over {} from {} ({}): {} no longer holds it and is told; read its detail with board_unfold id=\"{}\"",
            t.id,
            t.author,
            t.why.as_str(),
            t.author,
            t.id
        ));
    }
    if let Some(l) = &r.lease {
        lines.push(format!(
            "lease: {} — renew id=\"{}\" to keep it, release id=\"{}\" when done",
            lease_state(l, now),
            r.id,
            r.id
        ));
    }
    if appended.overlaps.is_empty() {
        lines.push("no other worker's live claim overlaps it".to_string());
    } else {
        lines.push(format!(
            "OVERLAP: {} live claim(s) by other workers collide with {}:",
            appended.overlaps.len(),
            r.id
        ));
        for o in &appended.overlaps {
            let why = if o.same_label {
                format!("same label #{}", o.label.as_deref().unwrap_or(""))
            } else {
                format!("paths {}", o.paths.join(", "))
            };
            lines.push(format!(
                "- {} held by {} ({why}; expires in {}): {}",
                o.id,
                o.author,
                in_time(o.expires_at, now),
                o.text
            ));
        }
        let holders: Vec<&str> = appended
            .overlaps
            .iter()
            .map(|o| o.author.as_str())
            .collect();
        lines.push(format!(
            "Settle it now: msg_dm the holder ({}) to split or hand over the work, or release {} and pick other work.",
            holders.join(", "),
            r.id
        ));
    }
    Done::of(lines.join("\n"), &appended)
}
