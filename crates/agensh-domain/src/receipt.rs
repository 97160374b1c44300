//! Delivery receipts: where each message and urgent event stands with each of its
//! recipients. An event with receipts ([`has_receipts`]) is `stored` for a recipient until
//! it is shown to it (`presented`, and how: [`Via`]), then `acknowledged` once the tool call
//! or the turn that carried it completed. The sender of a message can read them
//! ([`MessageStatus`]), and the hub tells it when an urgent one waits too long
//! ([`unseen_text`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::event::{kinds, Event, Priority};
use crate::ids::truncate_for_message;
use crate::message::Message;
use crate::worker::WorkerStatus;

/// Kinds that have receipts whatever their priority: every message.
pub const ALWAYS: [&str; 2] = [kinds::DIRECT_MESSAGE, kinds::CHANNEL_POST];
/// Kinds that never have receipts, urgent or not: board records reach a worker as a digest,
/// not one by one.
pub const NEVER: [&str; 1] = [kinds::BOARD_RECORD];

/// Whether events of `kind` sent with `priority` get a receipt per recipient: every direct
/// message and channel post, and every other urgent event but a board record.
pub fn has_receipts(kind: &str, priority: Priority) -> bool {
    !NEVER.contains(&kind) && (priority == Priority::Urgent || ALWAYS.contains(&kind))
}

/// Kinds with receipts that never interrupt a turn: channel posts (news for many, read at
/// the next turn) and the hub's own word that a message of the worker's was not seen.
pub const NEVER_INTERRUPT: [&str; 2] = [kinds::CHANNEL_POST, kinds::MESSAGE_UNSEEN];

/// Whether events of `kind` sent with `priority` interrupt their worker's turn when they
/// wait unseen too long (`run.interrupt_after_secs`): urgent events with receipts (a direct
/// message, a review of its PR, its PR that failed to merge, its claim taken over, an
/// urgent notice), but never a board record or a channel post.
pub fn interrupts(kind: &str, priority: Priority) -> bool {
    priority == Priority::Urgent && has_receipts(kind, priority) && !NEVER_INTERRUPT.contains(&kind)
}

/// How an event was shown to its worker.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// In the `notices:` of one of its organization tool calls' results.
    ToolResult,
    /// In the prompt of a turn.
    #[default]
    Prompt,
    /// In the prompt of a turn that interrupted the one it was in.
    Interruption,
}

impl Via {
    pub const ALL: [Via; 3] = [Via::ToolResult, Via::Prompt, Via::Interruption];

    pub fn as_str(self) -> &'static str {
        match self {
            Via::ToolResult => "tool_result",
            Via::Prompt => "prompt",
            Via::Interruption => "interruption",
        }
    }

    pub fn parse(s: &str) -> Option<Via> {
        Via::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// How a person reads it: `in a tool result`, `in a prompt`, `by an interruption`.
    pub fn phrase(self) -> &'static str {
        match self {
            Via::ToolResult => "in a tool result",
            Via::Prompt => "in a prompt",
            Via::Interruption => "by an interruption",
        }
    }
}

/// Where an event stands with one recipient.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptState {
    /// Stored, not shown to it yet.
    Stored,
    /// Shown to it; the tool call or turn that carried it has not completed.
    Presented,
    /// Shown, and the tool call or turn that carried it completed.
    Acknowledged,
}

impl ReceiptState {
    pub fn as_str(self) -> &'static str {
        match self {
            ReceiptState::Stored => "stored",
            ReceiptState::Presented => "presented",
            ReceiptState::Acknowledged => "acknowledged",
        }
    }
}

/// One recipient's receipt of one event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    /// The recipient.
    pub worker: String,
    /// The event's sequence number.
    pub event: i64,
    pub kind: String,
    /// Unix ms the event was stored.
    pub stored_at: i64,
    pub state: ReceiptState,
    /// Unix ms it was first shown to the worker, and how.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presented_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<Via>,
    /// Unix ms the tool call or turn that carried it completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged_at: Option<i64>,
}

impl Receipt {
    /// The receipt of a recipient that was not shown the event yet.
    pub fn stored(worker: &str, event: i64, kind: &str, stored_at: i64) -> Receipt {
        Receipt {
            worker: worker.to_string(),
            event,
            kind: kind.to_string(),
            stored_at,
            state: ReceiptState::Stored,
            presented_at: None,
            via: None,
            acknowledged_at: None,
        }
    }

    /// A receipt as recorded: its state follows from the times it has.
    pub fn recorded(
        stored: Receipt,
        presented: Option<(i64, Via)>,
        acknowledged_at: Option<i64>,
    ) -> Receipt {
        let state = match (presented, acknowledged_at) {
            (_, Some(_)) => ReceiptState::Acknowledged,
            (Some(_), None) => ReceiptState::Presented,
            (None, None) => ReceiptState::Stored,
        };
        Receipt {
            state,
            presented_at: presented.map(|p| p.0),
            via: presented.map(|p| p.1),
            acknowledged_at,
            ..stored
        }
    }

    /// Milliseconds from being stored to being presented, once it was.
    pub fn wait_ms(&self) -> Option<i64> {
        self.presented_at.map(|p| (p - self.stored_at).max(0))
    }
}

/// A message's id as workers read it: `M12`.
pub fn message_id(seq: i64) -> String {
    format!("M{seq}")
}

/// Parses a message id: `M12`, `m12` or `12`.
pub fn parse_message_id(s: &str) -> Result<i64> {
    let digits = s
        .strip_prefix('M')
        .or_else(|| s.strip_prefix('m'))
        .unwrap_or(s);
    match crate::ids::parse_number(digits) {
        Some(n) if !digits.starts_with('#') => Ok(n),
        _ => Err(Error::invalid(
            "bad_message_id",
            format!(
                "\"{}\" is not a message id — message ids look like M12 (msg_dm and msg_post answer with one; inbox lists them)",
                truncate_for_message(s)
            ),
        )),
    }
}

/// A message and where it stands with each of its recipients.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageStatus {
    /// `M12`.
    pub id: String,
    pub seq: i64,
    pub from: String,
    /// A worker id or a `#channel`.
    pub to: String,
    /// Unix ms.
    pub created_at: i64,
    /// One per recipient, in recipient order.
    pub receipts: Vec<Receipt>,
}

impl MessageStatus {
    /// The status of `message`, carried by `event`, for each of `recipients`: the receipt
    /// recorded for it (`recorded`, any order), or `stored` when none was.
    pub fn of(
        message: &Message,
        event: &Event,
        recipients: &[String],
        recorded: Vec<Receipt>,
    ) -> MessageStatus {
        let mut by_worker: BTreeMap<String, Receipt> = recorded
            .into_iter()
            .filter(|r| r.event == event.seq)
            .map(|r| (r.worker.clone(), r))
            .collect();
        let receipts = recipients
            .iter()
            .map(|w| {
                by_worker
                    .remove(w)
                    .unwrap_or_else(|| Receipt::stored(w, event.seq, &event.kind, event.created_at))
            })
            .collect();
        MessageStatus {
            id: message_id(message.seq),
            seq: message.seq,
            from: message.from.clone(),
            to: message.to.clone(),
            created_at: message.created_at,
            receipts,
        }
    }

    /// How many recipients are in each state.
    pub fn counts(&self) -> BTreeMap<ReceiptState, usize> {
        let mut out = BTreeMap::new();
        for r in &self.receipts {
            *out.entry(r.state).or_default() += 1;
        }
        out
    }
}

/// Who may read a message's receipts: its sender, the recipient of a direct message, and
/// the admin. `caller` is the asking worker's id.
pub fn check_status_reader(message: &Message, caller: &str, admin: bool) -> Result<()> {
    if admin || caller == message.from || (message.is_direct() && caller == message.to) {
        return Ok(());
    }
    Err(Error::forbidden(
        "not_your_message",
        format!(
            "only the sender of {} ({}){} and the admin may read its receipts",
            message_id(message.seq),
            message.from,
            if message.is_direct() {
                format!(", its recipient ({})", message.to)
            } else {
                String::new()
            }
        ),
    ))
}

/// Stored → presented times of one kind of event: how many, and the p50 and p99 in ms.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindLatency {
    pub kind: String,
    pub samples: u64,
    pub p50_ms: u64,
    pub p99_ms: u64,
}

/// The stored → presented times of `waits` (kind, ms) per kind, in kind order; the
/// percentiles are nearest-rank.
pub fn latencies<'a>(waits: impl IntoIterator<Item = (&'a str, i64)>) -> Vec<KindLatency> {
    let mut by_kind: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (kind, ms) in waits {
        by_kind.entry(kind).or_default().push(ms.max(0) as u64);
    }
    by_kind
        .into_iter()
        .map(|(kind, mut v)| {
            v.sort_unstable();
            let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
            KindLatency {
                kind: kind.to_string(),
                samples: v.len() as u64,
                p50_ms: at(0.50),
                p99_ms: at(0.99),
            }
        })
        .collect()
}

/// Why a worker has not been shown an urgent item yet, from what the hub knows of it:
/// whether it is in a turn (`busy`) and its last reported status.
pub fn why_unseen(busy: bool, status: Option<WorkerStatus>) -> &'static str {
    if busy {
        return "it is busy in a turn that has called no organization tool since";
    }
    match status {
        Some(WorkerStatus::Stopped) => {
            "it is stopped (a budget, or the end of the run) and will see it if it starts again"
        }
        Some(WorkerStatus::Dead) => {
            "it is dead (its agent failed too often) and will not see it unless it is restarted"
        }
        Some(WorkerStatus::Starting | WorkerStatus::Stalled) => {
            "its agent is starting or restarting"
        }
        Some(WorkerStatus::Busy) => {
            "it is busy in a turn that has called no organization tool since"
        }
        _ => "it is between turns and its node has not taken it (is its node running?)",
    }
}

/// The text of the urgent notice its sender gets for message `message` that `to` has not
/// been shown for `waited_ms`: `w07 has not seen your message M12 for 3 minutes: why`.
pub fn unseen_text(to: &str, message: i64, waited_ms: i64, why: &str) -> String {
    format!(
        "{to} has not seen your message {} for {}: {why}",
        message_id(message),
        crate::time::span((waited_ms.max(0) / 1000) as u64)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urgent_news_interrupts_board_records_channel_posts_and_normal_events_never() {
        assert!(interrupts(kinds::DIRECT_MESSAGE, Priority::Urgent));
        assert!(interrupts(kinds::PR_REVIEW, Priority::Urgent));
        assert!(interrupts(kinds::PR_MERGE_FAILED, Priority::Urgent));
        assert!(interrupts(kinds::NOTICE, Priority::Urgent));
        assert!(!interrupts(kinds::NOTICE, Priority::Normal));
        assert!(!interrupts(kinds::BOARD_RECORD, Priority::Urgent));
        assert!(!interrupts(kinds::CHANNEL_POST, Priority::Urgent));
        assert!(!interrupts(kinds::CHANNEL_POST, Priority::Normal));
        assert!(!interrupts(kinds::MESSAGE_UNSEEN, Priority::Urgent));
    }

    #[test]
    fn messages_and_urgent_events_have_receipts_board_records_never() {
        assert!(has_receipts(kinds::DIRECT_MESSAGE, Priority::Urgent));
        assert!(has_receipts(kinds::CHANNEL_POST, Priority::Normal));
        assert!(has_receipts(kinds::PR_REVIEW, Priority::Urgent));
        assert!(has_receipts(kinds::NOTICE, Priority::Urgent));
        assert!(!has_receipts(kinds::NOTICE, Priority::Normal));
        assert!(!has_receipts(kinds::PR_OPENED, Priority::Normal));
        assert!(!has_receipts(kinds::BOARD_RECORD, Priority::Urgent));
    }

    #[test]
    fn via_reads_and_writes_as_snake_case() {
        for v in Via::ALL {
            assert_eq!(Via::parse(v.as_str()), Some(v));
            assert_eq!(
                serde_json::to_value(v).unwrap(),
                serde_json::Value::String(v.as_str().into())
            );
        }
        assert_eq!(Via::parse("tool_result"), Some(Via::ToolResult));
        assert_eq!(Via::parse("toolresult"), None);
    }

    #[test]
    fn message_ids_parse_with_or_without_their_letter() {
        assert_eq!(parse_message_id("M12").unwrap(), 12);
        assert_eq!(parse_message_id("m12").unwrap(), 12);
        assert_eq!(parse_message_id("12").unwrap(), 12);
        for bad in ["", "M", "M0", "M-1", "G12", "M#12", "#12", "M1x"] {
            assert_eq!(
                parse_message_id(bad).unwrap_err().code,
                "bad_message_id",
                "{bad}"
            );
        }
        assert_eq!(message_id(7), "M7");
    }

    fn msg(from: &str, to: &str) -> Message {
        Message {
            seq: 12,
            from: from.into(),
            to: to.into(),
            text: "hi".into(),
            thread: None,
            created_at: 1_000,
        }
    }

    fn event(seq: i64, kind: &str) -> Event {
        Event {
            seq,
            kind: kind.into(),
            priority: Priority::Urgent,
            payload: serde_json::Value::Null,
            dedup_key: None,
            source: None,
            target: None,
            except: None,
            created_at: 1_000,
        }
    }

    #[test]
    fn a_status_has_one_receipt_per_recipient_stored_when_none_was_recorded() {
        let e = event(40, kinds::CHANNEL_POST);
        let shown = Receipt::recorded(
            Receipt::stored("w03", 40, kinds::CHANNEL_POST, 1_000),
            Some((4_000, Via::Prompt)),
            Some(9_000),
        );
        let other_event = Receipt::recorded(
            Receipt::stored("w02", 41, kinds::CHANNEL_POST, 1_000),
            Some((2_000, Via::Prompt)),
            None,
        );
        let recipients = vec!["w02".to_string(), "w03".to_string()];
        let s = MessageStatus::of(
            &msg("w01", "#general"),
            &e,
            &recipients,
            vec![shown.clone(), other_event],
        );
        assert_eq!(s.id, "M12");
        assert_eq!(s.receipts.len(), 2);
        assert_eq!(s.receipts[0].state, ReceiptState::Stored);
        assert_eq!(s.receipts[0].event, 40);
        assert_eq!(s.receipts[1], shown);
        assert_eq!(s.receipts[1].state, ReceiptState::Acknowledged);
        assert_eq!(s.receipts[1].wait_ms(), Some(3_000));
        assert_eq!(s.counts()[&ReceiptState::Stored], 1);
    }

    #[test]
    fn only_the_sender_the_recipient_of_a_dm_and_the_admin_read_receipts() {
        let dm = msg("w01", "w02");
        assert!(check_status_reader(&dm, "w01", false).is_ok());
        assert!(check_status_reader(&dm, "w02", false).is_ok());
        assert!(check_status_reader(&dm, "admin", true).is_ok());
        let e = check_status_reader(&dm, "w03", false).unwrap_err();
        assert_eq!(e.code, "not_your_message");
        assert_eq!(
            e.message,
            "only the sender of M12 (w01), its recipient (w02) and the admin may read its receipts"
        );
        let post = msg("w01", "#general");
        assert!(check_status_reader(&post, "w01", false).is_ok());
        assert_eq!(
            check_status_reader(&post, "w02", false).unwrap_err().code,
            "not_your_message"
        );
    }

    #[test]
    fn latencies_are_nearest_rank_per_kind() {
        let mut waits: Vec<(&str, i64)> = (1..=100).map(|i| (kinds::DIRECT_MESSAGE, i)).collect();
        waits.push((kinds::PR_REVIEW, 7));
        let l = latencies(waits);
        assert_eq!(
            l,
            [
                KindLatency {
                    kind: kinds::DIRECT_MESSAGE.into(),
                    samples: 100,
                    p50_ms: 50,
                    p99_ms: 99
                },
                KindLatency {
                    kind: kinds::PR_REVIEW.into(),
                    samples: 1,
                    p50_ms: 7,
                    p99_ms: 7
                }
            ]
        );
        assert!(latencies([]).is_empty());
    }

    #[test]
    fn the_unseen_notice_says_who_what_how_long_and_why() {
        assert_eq!(
            unseen_text("w07", 12, 181_000, why_unseen(true, None)),
            "w07 has not seen your message M12 for 3 minutes: it is busy in a turn that has called no organization tool since"
        );
        assert!(why_unseen(false, Some(WorkerStatus::Stopped)).starts_with("it is stopped"));
        assert!(why_unseen(false, Some(WorkerStatus::Idle)).starts_with("it is between turns"));
    }
}
