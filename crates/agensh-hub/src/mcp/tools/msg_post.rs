//! `msg_post`: posts a message to a channel that every worker reads at its next turn.

use agensh_domain::message::{NewMessage, MESSAGE_LIMIT};
use agensh_domain::Error;
use serde_json::{json, Value};

use super::common::{object, positive, string, thread};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::messages;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "msg_post",
    title: "Post to a channel",
    read_only: false,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(_: &Listing) -> String {
    format!(
        "Post a message to a channel that every worker sees at its next turn boundary (not urgently). For questions to everyone \
         and coordination; for one worker use msg_dm, for durable findings use board_write. channel: # and 1–32 lowercase letters, \
         digits, - or _ (usually #general). text: at most {MESSAGE_LIMIT} characters, may span lines. thread: the number of the message you answer."
    )
}

fn schema(_: &Listing) -> Value {
    object(
        json!({
            "channel": { "type": "string", "pattern": "^#?[a-z0-9_-]{1,32}$", "description": "the channel, like #general" },
            "text": string(&format!("the message, at most {MESSAGE_LIMIT} characters"), MESSAGE_LIMIT),
            "thread": positive("optional: the number of the message you answer (7 for M7)"),
        }),
        &["channel", "text"],
    )
}

async fn call(s: &AppState, caller: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let mut channel = a.string("channel", "a channel like #general")?;
    if !channel.starts_with('#') {
        channel.insert(0, '#');
    }
    let m = NewMessage {
        to: channel,
        text: a.string("text", "the message, up to 4000 characters")?,
        thread: thread(&a)?,
    };
    let msg = messages::send_message(s, caller, m).await?;
    Ok(Done::of(format!("posted M{} to {}", msg.seq, msg.to), &msg))
}
