//! Channels and direct messages.

use agensh_domain::message::{Message, NewMessage, Target};
use agensh_domain::receipt::{check_status_reader, parse_message_id, MessageStatus};
use agensh_domain::{page, Error, Result};
use agensh_protocol::rest::ReadQuery;
use agensh_store::MessageQuery;

use crate::auth::Caller;
use crate::metrics::inc;
use crate::state::AppState;

/// Most messages one read returns ([`page::MESSAGES`]).
pub const READ_LIMIT: usize = page::MESSAGES.max;

/// Posts `m` to a channel or a worker as `caller`.
pub async fn send_message(s: &AppState, caller: &Caller, m: NewMessage) -> Result<Message> {
    if let Target::Worker(w) = m.validate()? {
        if w == caller.id {
            return Err(Error::invalid(
                "message_to_self",
                "that is a direct message to yourself — post to a #channel or message another worker",
            ));
        }
    }
    if !caller.admin {
        if let Err(e) = s.limiter.message(&caller.id, s.now()) {
            inc(&s.metrics.rate_limited);
            return Err(e);
        }
    }
    let msg = s.store.post_message(&caller.id, m, s.now()).await?;
    inc(&s.metrics.messages_posted);
    Ok(msg)
}

fn message_query(q: ReadQuery, unread: bool) -> Result<MessageQuery> {
    if unread && (q.with.is_some() || q.before.is_some()) {
        return Err(Error::invalid(
            "bad_filter",
            "unread messages are read all together (one read cursor per worker) — leave out with and before, or read one conversation's whole history (with, without unread)",
        ));
    }
    if let Some(w) = &q.with {
        Target::parse(w)?;
    }
    let limit = page::MESSAGES.check(q.limit)?;
    Ok(MessageQuery {
        unread,
        with: q.with,
        limit,
        before: q.before,
    })
}

/// Recent messages visible to `caller` (does not mark anything read).
pub async fn history(s: &AppState, caller: &Caller, q: ReadQuery) -> Result<Vec<Message>> {
    s.store
        .read_messages(&caller.id, message_query(q, false)?)
        .await
}

/// Unread messages for the calling worker; marks them read.
pub async fn read_unread(s: &AppState, caller: &Caller, q: ReadQuery) -> Result<Vec<Message>> {
    let worker = caller.worker()?;
    s.store.read_messages(worker, message_query(q, true)?).await
}

/// Unread messages for the calling worker, at most `limit` (default 100); marks them read.
pub async fn unread_messages(
    s: &AppState,
    caller: &Caller,
    limit: Option<usize>,
) -> Result<Vec<Message>> {
    let q = ReadQuery {
        limit,
        ..ReadQuery::default()
    };
    read_unread(s, caller, q).await
}

/// Where message `id` (`M12` or `12`) stands with each of its recipients: a direct
/// message's worker, or every worker but its sender for a channel post (stored until shown,
/// then presented, then acknowledged). Only its sender, the recipient of a direct message
/// and the admin may ask.
pub async fn status(s: &AppState, caller: &Caller, id: &str) -> Result<MessageStatus> {
    let seq = parse_message_id(id)?;
    let Some((message, event)) = s.store.message_event(seq).await? else {
        return Err(Error::not_found(
            "unknown_message",
            format!("there is no message M{seq} — use the id msg_dm or msg_post answered with (inbox lists messages with theirs)"),
        ));
    };
    check_status_reader(&message, &caller.id, caller.admin)?;
    let event = event.ok_or_else(|| {
        Error::internal(format!(
            "message M{seq} is stored but not the event that carried it"
        ))
    })?;
    let recipients: Vec<String> = if message.is_direct() {
        vec![message.to.clone()]
    } else {
        s.worker_ids()
            .into_iter()
            .filter(|w| *w != message.from)
            .collect()
    };
    let recorded = s.store.receipts(vec![event.seq]).await?;
    Ok(MessageStatus::of(&message, &event, &recipients, recorded))
}
