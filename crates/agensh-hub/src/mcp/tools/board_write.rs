//! `board_write`: appends a FACT, OBSERVED, FAIL or PATCH_SUMMARY record to the board.

use agensh_domain::record::{
    RecordKind, DETAIL_LIMIT, LABEL_LIMIT, PATCH_SUMMARY_LIMIT, TEXT_LIMIT,
};
use agensh_domain::Error;
use serde_json::{json, Value};

use super::claim::claimed;
use super::common::{object, string};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::board;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "board_write",
    title: "Post a board record",
    read_only: false,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

/// The kinds this tool posts, in the order its schema offers them, each with what it is
/// for; every other kind of [`RecordKind::ALL`] has a tool of its own (CLAIM: `claim`).
const KINDS: [(RecordKind, &str); 4] = [
    (RecordKind::Fact, "something verified"),
    (RecordKind::Observed, "something seen, not yet explained"),
    (RecordKind::Fail, "an approach that did not work"),
    (RecordKind::PatchSummary, "a change you merged"),
];

fn description(_: &Listing) -> String {
    format!(
        "Append a record to the shared board, which every worker reads (append-only: records are never edited). \
         Share useful findings early: FACT for something verified, OBSERVED for something seen, FAIL for an approach that did not work \
         (it saves peers repeating it), PATCH_SUMMARY after a merge (e.g. `files=... | idea=... | evidence=<what passed> | risk=...`). \
         text: one line, at most {TEXT_LIMIT} characters (PATCH_SUMMARY {PATCH_SUMMARY_LIMIT}); put longer content in detail \
         (at most {DETAIL_LIMIT} characters, shown by board_unfold). A newer PATCH_SUMMARY of yours with the same label replaces your older one; \
         a FAIL of yours with that label marks it invalidated. No chatter (\"starting now\"): record what a peer can use. \
         To take on work use claim instead."
    )
}

fn schema(l: &Listing) -> Value {
    let meanings: Vec<String> = KINDS
        .iter()
        .map(|(k, meaning)| format!("{k}: {meaning}."))
        .collect();
    object(
        json!({
            "kind": {
                "type": "string",
                "enum": KINDS.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
                "description": format!("{} (To claim work use the claim tool.)", meanings.join(" ")),
            },
            "text": string(&format!("one line, no line breaks: at most {TEXT_LIMIT} characters ({PATCH_SUMMARY_LIMIT} for PATCH_SUMMARY)"), PATCH_SUMMARY_LIMIT),
            "label": string(&l.label, LABEL_LIMIT),
            "detail": string(&format!("optional longer body, may span lines, at most {DETAIL_LIMIT} characters"), DETAIL_LIMIT),
        }),
        &["kind", "text"],
    )
}

/// `A, B, C or D` of the kinds' names.
fn kind_list() -> String {
    let names: Vec<&str> = KINDS.iter().map(|(k, _)| k.as_str()).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.concat(),
    }
}

async fn call(s: &AppState, caller: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let kind = a.string("kind", &kind_list())?;
    let mut body = json!({
        "kind": kind,
        "text": a.string("text", "one line, at most 100 characters (PATCH_SUMMARY 300)")?,
    });
    if let Some(l) = a.opt_string("label", "the work item, e.g. parser-errors")? {
        body["label"] = Value::String(l);
    }
    if let Some(d) = a.opt_string("detail", "a longer body, up to 8000 characters")? {
        body["detail"] = Value::String(d);
    }
    let appended = board::append_record(s, caller, body).await?;
    if !appended.overlaps.is_empty() || appended.record.lease.is_some() {
        return Ok(claimed(s.now(), appended));
    }
    Ok(Done::of(
        format!("posted {}", appended.record.line(s.now())),
        &appended,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_record_kind_but_claim_is_posted_here() {
        for k in RecordKind::ALL {
            let offered = KINDS.iter().any(|(o, _)| *o == k);
            assert_eq!(offered, k != RecordKind::Claim, "{k}");
        }
    }

    #[test]
    fn the_kind_argument_names_every_kind_it_takes() {
        assert_eq!(kind_list(), "FACT, OBSERVED, FAIL or PATCH_SUMMARY");
    }
}
