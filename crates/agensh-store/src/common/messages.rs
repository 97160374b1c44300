//! Channel posts and direct messages.

use agensh_domain::event::{kinds, NewEvent, Priority};
use agensh_domain::message::{Message, Target};
use agensh_domain::Error;

/// The refusal of a reply to message `t`, which does not exist.
pub fn unknown_thread(t: i64) -> Error {
    Error::invalid(
        "unknown_thread",
        format!("there is no message M{t} to reply to — reply_to takes the id of a message you have read, like M12"),
    )
}

/// The dedup key of the event that carries message `seq` (a direct message's or a channel
/// post's): how a message's event is found again.
pub fn dedup_key(seq: i64) -> String {
    format!("msg:M{seq}")
}

/// The message `from` posted to `target` stored as `seq`, and its event: a channel post
/// for everyone, or an urgent direct message for its worker.
pub fn posted(
    seq: i64,
    from: &str,
    target: &Target,
    text: String,
    thread: Option<i64>,
    now: i64,
) -> (Message, NewEvent) {
    let msg = Message {
        seq,
        from: from.to_string(),
        to: target.as_str().to_string(),
        text,
        thread,
        created_at: now,
    };
    let (kind, priority, to) = match target {
        Target::Channel(_) => (kinds::CHANNEL_POST, Priority::Normal, None),
        Target::Worker(w) => (kinds::DIRECT_MESSAGE, Priority::Urgent, Some(w.clone())),
    };
    let event = NewEvent {
        kind: kind.into(),
        priority,
        payload: serde_json::to_value(&msg).expect("message serializes"),
        dedup_key: Some(dedup_key(msg.seq)),
        source: Some(from.to_string()),
        target: to,
        except: None,
    };
    (msg, event)
}
