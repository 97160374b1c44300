//! `board_grep`: searches the whole board history with the grep query language.

use agensh_domain::query::MAX_QUERY_CHARS;
use agensh_domain::Error;
use serde_json::{json, Value};

use super::common::{integer, object, string};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::board;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "board_grep",
    title: "Search the board",
    read_only: true,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(_: &Listing) -> String {
    format!(
        "Search the whole board history, newest first — superseded records and ended claims included. Use it before you start \
         anything: a peer may have found it, claimed it or failed at it (look for FAIL). Query language: words match a record's text \
         and detail, ignoring case and accents; `pars*` is a prefix; \"a phrase\" in double quotes; terms side by side mean AND; \
         OR and NOT in uppercase; parentheses group; `-x` means NOT x; filters kind:FAIL, author:w01, label:parser-v2 (exact label). \
         Examples: `(lexer OR parser) kind:FAIL`, `label:parser \"unary minus\"`, `pars* -kind:CLAIM`. At most {MAX_QUERY_CHARS} characters. \
         limit: 1–{} records (default 50); before: a record id — only older records, to page on from the last id you got.",
        board::GREP_LIMIT
    )
}

fn schema(_: &Listing) -> Value {
    object(
        json!({
            "query": string("the search, e.g. parser kind:FAIL", MAX_QUERY_CHARS),
            "limit": integer("at most this many records (default 50)", 1, board::GREP_LIMIT as u64),
            "before": string("only records older than this id, like G120 (paging)", 24),
        }),
        &["query"],
    )
}

async fn call(s: &AppState, _: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let q = a.string("query", "the search, e.g. parser kind:FAIL")?;
    let limit = a.opt_usize("limit", "1 to 500")?;
    let before = a.opt_string("before", "a record id like G120, for the next page")?;
    let found = board::grep_records(s, &q, limit, before.as_deref()).await?;
    let now = s.now();
    let text = if found.is_empty() {
        format!(
            "no records match {q}{}",
            before.map_or(String::new(), |b| format!(" before {b}"))
        )
    } else {
        let mut lines = vec![format!("{} record(s) match, newest first:", found.len())];
        lines.extend(found.iter().map(|r| r.line(now)));
        if found.len() == limit.unwrap_or(50) {
            let last = &found[found.len() - 1].id;
            lines.push(format!(
                "(there may be more — call board_grep again with before=\"{last}\")"
            ));
        }
        lines.join("\n")
    };
    Ok(Done::new(text, json!({ "records": found })))
}
