//! `inbox`: the caller's unread messages, oldest first, marked read.

use agensh_domain::time::age;
use agensh_domain::Error;
use serde_json::{json, Value};

use super::common::{integer, object};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::messages;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "inbox",
    title: "Read unread messages",
    read_only: false,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(_: &Listing) -> String {
    format!(
        "Your unread messages — channel posts and direct messages to you — oldest first, and marks them read. \
         limit: 1–{} (default 100).",
        messages::READ_LIMIT
    )
}

fn schema(_: &Listing) -> Value {
    object(
        json!({ "limit": integer("at most this many messages (default 100)", 1, messages::READ_LIMIT as u64) }),
        &[],
    )
}

async fn call(s: &AppState, caller: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let limit = a.opt_usize("limit", "1 to 1000")?;
    let msgs = messages::unread_messages(s, caller, limit).await?;
    let now = s.now();
    let text = if msgs.is_empty() {
        "no unread messages".to_string()
    } else {
        let mut lines = vec![format!("{} unread message(s), oldest first:", msgs.len())];
        for m in &msgs {
            let place = if m.is_direct() {
                "DM".to_string()
            } else {
                m.to.clone()
            };
            let reply = m
                .thread
                .map_or(String::new(), |t| format!(" (reply to M{t})"));
            lines.push(format!(
                "M{} {place} from {} {}{reply}: {}",
                m.seq,
                m.from,
                age(m.created_at, now),
                m.text.trim_end().replace('\n', "\n    ")
            ));
        }
        if msgs.len() == limit.unwrap_or(100) {
            lines.push("(more may be unread — call inbox again)".to_string());
        }
        lines.join("\n")
    };
    let mut done = Done::new(text, json!({ "messages": msgs }));
    done.covers.messages = msgs.iter().map(|m| m.seq).collect();
    Ok(done)
}
