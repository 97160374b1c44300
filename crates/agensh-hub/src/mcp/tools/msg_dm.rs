//! `msg_dm`: sends a direct message, which reaches its worker urgently.

use agensh_domain::message::{NewMessage, MESSAGE_LIMIT};
use agensh_domain::Error;
use serde_json::{json, Value};

use super::common::{object, positive, string, thread};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::messages;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "msg_dm",
    title: "Message a worker",
    read_only: false,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(_: &Listing) -> String {
    format!(
        "Send a direct message to one worker; it reaches them urgently, inside their current turn. Use it to settle a claim overlap, \
         ask the author of a record or PR, ask for a review, or hand over work. to: a worker id like w02 (workers lists them; not yourself). \
         text: at most {MESSAGE_LIMIT} characters, may span lines. thread: the number of the message you answer."
    )
}

fn schema(_: &Listing) -> Value {
    object(
        json!({
            "to": { "type": "string", "pattern": "^w[0-9]{1,11}$", "description": "a worker id, like w02" },
            "text": string(&format!("the message, at most {MESSAGE_LIMIT} characters"), MESSAGE_LIMIT),
            "thread": positive("optional: the number of the message you answer (7 for M7)"),
        }),
        &["to", "text"],
    )
}

async fn call(s: &AppState, caller: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let to = a.string("to", "a worker id like w02")?;
    if to.starts_with('#') {
        return Err(Error::invalid(
            "bad_target",
            format!("msg_dm sends to one worker (like w02), not to {to} — post to a channel with msg_post"),
        ));
    }
    let m = NewMessage {
        to,
        text: a.string("text", "the message, up to 4000 characters")?,
        thread: thread(&a)?,
    };
    let msg = messages::send_message(s, caller, m).await?;
    Ok(Done::of(format!("sent M{} to {}", msg.seq, msg.to), &msg))
}
