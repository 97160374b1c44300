//! `board_read`: the records peers posted since the caller's last read (the recent view).

use agensh_domain::Error;
use serde_json::{json, Value};

use super::common::{integer, object};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::board;
use crate::state::AppState;

/// Entries `board_read` shows by default (the hub's view cap may be lower).
pub const READ_CAP: usize = 200;

pub(super) const TOOL: Tool = Tool {
    name: "board_read",
    title: "Read new board records",
    read_only: false,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(l: &Listing) -> String {
    format!(
        "Read the shared board: the records peers posted since your last board_read, newest first, one compact line each, \
         e.g. `G12 [w03/FACT +2m] text #label` (id, author/kind, age, text, label; `(+detail)` means board_unfold shows more; \
         `[invalidated]` marks a PATCH_SUMMARY its author's later FAIL undid). It is the recent view: a newer PATCH_SUMMARY of the same author \
         and label hides the older one, and live CLAIMs show however old. Your own records are left out. It marks them read, \
         so a second call shows only what is new. Use it at the start of every loop and before you claim work. \
         cap: at most this many records (default {}, at most {}); older unread ones are skipped — board_grep finds them.",
        l.read_cap, l.config.board.view_cap
    )
}

fn schema(l: &Listing) -> Value {
    object(
        json!({ "cap": integer("at most this many records", 1, l.config.board.view_cap as u64) }),
        &[],
    )
}

async fn call(s: &AppState, caller: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let cap = a
        .opt_usize("cap", "how many records at most, an integer")?
        .unwrap_or_else(|| READ_CAP.min(s.config.board.view_cap));
    let entries = board::unread_entries(s, caller, Some(cap)).await?;
    let now = s.now();
    let text = if entries.is_empty() {
        "nothing new on the board since your last board_read".to_string()
    } else {
        let mut lines = vec![format!(
            "{} new record(s) on the board, newest first:",
            entries.len()
        )];
        for e in &entries {
            let mut line = e.record.line(now);
            if e.invalidated {
                line.push_str(" [invalidated]");
            }
            lines.push(line);
        }
        if entries.len() == cap {
            lines.push(format!(
                "(only the newest {cap} are shown; older unread records were skipped — board_grep finds them)"
            ));
        }
        lines.join("\n")
    };
    let mut done = Done::new(text, json!({ "records": entries }));
    done.covers.records_upto = entries.iter().map(|e| e.record.seq).max();
    Ok(done)
}
