//! Events: what a worker must hear about, delivered through its durable queue.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::message::MESSAGE_LIMIT;
use crate::text::{self, Lines};

/// Longest dedup key an operator notice may carry, in characters.
pub const DEDUP_KEY_LIMIT: usize = 200;

/// Checks a poll's `wait` (seconds) against the longest the hub allows (`hub.max_wait_secs`).
pub fn check_wait(wait: u64, max_wait: u64) -> Result<()> {
    if wait > max_wait {
        return Err(Error::invalid(
            "bad_wait",
            format!(
                "wait {wait} s is too long; the limit is {max_wait} s — poll again when it returns"
            ),
        ));
    }
    Ok(())
}

/// Checks an operator notice's text: 1 to [`MESSAGE_LIMIT`] characters, not only blanks or
/// invisible characters, lines of plain text ([`text::check`]).
pub fn validate_notice_text(notice: &str) -> Result<()> {
    if text::is_blank(notice) || notice.chars().count() > MESSAGE_LIMIT {
        return Err(Error::invalid(
            "bad_notice",
            format!(
                "a notice needs 1 to {MESSAGE_LIMIT} characters of text — say what the workers must know"
            ),
        ));
    }
    text::check(
        "the notice",
        notice,
        Lines::Many,
        "control_chars",
        text::PLAIN_TEXT,
    )
}

/// Checks an operator notice's dedup key: 1 to [`DEDUP_KEY_LIMIT`] characters of one plain
/// line.
pub fn validate_dedup_key(key: &str) -> Result<()> {
    if key.is_empty() || key.chars().count() > DEDUP_KEY_LIMIT {
        return Err(Error::invalid(
            "bad_dedup_key",
            format!("a dedup key must have 1 to {DEDUP_KEY_LIMIT} characters"),
        ));
    }
    text::check(
        "the dedup key",
        key,
        Lines::One,
        "bad_dedup_key",
        "use letters, digits and punctuation on one line",
    )
}

/// How soon an event must reach its worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Attached to the result of the worker's next organization tool call.
    Urgent,
    /// Delivered at the worker's next turn boundary.
    Normal,
}

impl Priority {
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Urgent => "urgent",
            Priority::Normal => "normal",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "urgent" => Some(Priority::Urgent),
            "normal" => Some(Priority::Normal),
            _ => None,
        }
    }
}

/// Event kinds the hub emits.
pub mod kinds {
    /// A peer appended a board record (broadcast, urgent; shown as a digest).
    pub const BOARD_RECORD: &str = "board.record";
    /// A post to a channel (broadcast, normal).
    pub const CHANNEL_POST: &str = "msg.channel";
    /// A direct message (to one worker, urgent).
    pub const DIRECT_MESSAGE: &str = "msg.dm";
    /// Your urgent direct message has waited too long without being shown to its worker
    /// (`hub.unseen_notice_secs`; to its sender, urgent, once per message). Payload:
    /// `message` (its seq), `id` (`M12`), `to`, `waited_secs`, `busy`, `text` (the
    /// sentence to show).
    pub const MESSAGE_UNSEEN: &str = "msg.unseen";
    /// A notice from an operator (broadcast or direct; normal unless sent as urgent).
    pub const NOTICE: &str = "notice";
    /// A peer took over your claim (to the old claim's author, urgent). Payload: `id` (your
    /// claim), `text`, `label`, `by` (the new claim), `author` (who took it), `why`
    /// (`released`, `dead`, `stopped` or `expired`).
    pub const CLAIM_TAKEN_OVER: &str = "claim.taken_over";
    /// A pull request was opened (broadcast, normal).
    pub const PR_OPENED: &str = "pr.opened";
    /// A pull request was reviewed (broadcast, normal; its author gets `pr.review`).
    pub const PR_REVIEWED: &str = "pr.reviewed";
    /// A review of your pull request (to its author, urgent).
    pub const PR_REVIEW: &str = "pr.review";
    /// A pull request got a comment (broadcast, normal).
    pub const PR_COMMENTED: &str = "pr.commented";
    /// A pull request was merged (broadcast, normal).
    pub const PR_MERGED: &str = "pr.merged";
    /// A pull request was closed without merging (broadcast, normal).
    pub const PR_CLOSED: &str = "pr.closed";
    /// Your pull request could not merge: conflict or failing gate (to its author, urgent).
    pub const PR_MERGE_FAILED: &str = "pr.merge_failed";
    /// `main` moved: a merge or an admin push (broadcast, normal).
    pub const MAIN_UPDATED: &str = "main.updated";
    /// An issue was opened (broadcast, normal). Payload: `number`, `title`, `author`,
    /// `labels`.
    pub const ISSUE_OPENED: &str = "issue.opened";
    /// An issue got a comment (to its author, assignee and earlier commenters but the
    /// commenter; normal). Payload: `number`, `title`, `by`, `text`.
    pub const ISSUE_COMMENTED: &str = "issue.commented";
    /// An issue's assignee changed (to its author, the new and the old assignee and its
    /// commenters but the one who assigned; urgent for a worker assigned by someone else,
    /// normal otherwise). Payload: `number`, `title`, `by`, `assignee` (null: nobody),
    /// `previous`.
    pub const ISSUE_ASSIGNED: &str = "issue.assigned";
    /// An issue was closed (to those involved but the closer; normal). Payload: `number`,
    /// `title`, `by` (`pr#N` when a merged PR closed it), `pr` (that PR's number).
    pub const ISSUE_CLOSED: &str = "issue.closed";
    /// A closed issue was reopened (to those involved but the one who reopened it; normal).
    /// Payload: `number`, `title`, `by`.
    pub const ISSUE_REOPENED: &str = "issue.reopened";
    /// Stop: a budget is spent (to one worker, or broadcast when it is the organization's;
    /// normal, so its node takes it at the turn's end). Payload: `reason`, `organization`.
    pub const WORKER_STOP: &str = "worker.stop";
    /// Go on: the budget that stopped the worker was raised (to one worker, normal).
    pub const WORKER_RESUME: &str = "worker.resume";
}

/// An event to enqueue. `target: None` is a broadcast, stored once for every worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewEvent {
    pub kind: String,
    pub priority: Priority,
    pub payload: serde_json::Value,
    /// Events with the same key for the same target are stored once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_key: Option<String>,
    /// The worker whose action caused it; a worker does not hear its own broadcasts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// One worker, or none for everyone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// For a broadcast: one more worker that does not get it (because it gets its own
    /// direct, more urgent version, e.g. the author of a reviewed PR).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub except: Option<String>,
}

/// A stored event, as a worker receives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub seq: i64,
    pub kind: String,
    pub priority: Priority,
    pub payload: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub except: Option<String>,
    /// Unix ms.
    pub created_at: i64,
}

/// One worker in a poll for many workers (`POST /events/poll`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PollEntry {
    pub id: String,
    /// The worker's token; needed unless the request's own token is the admin's or this
    /// worker's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Only events with a sequence number above this (the ones already in hand).
    #[serde(default)]
    pub after: i64,
    /// Events of this worker to acknowledge first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ack: Vec<i64>,
}

/// The body of `POST /events/poll`: a node's one long-poll for many of its workers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PollMany {
    /// Seconds to wait when no named worker has an event pending (0: answer at once).
    #[serde(default)]
    pub wait: u64,
    /// Most events per worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    pub workers: Vec<PollEntry>,
}

/// The body of `POST /events/overdue`: which of a node's workers in a turn have news that
/// interrupts a turn ([`crate::receipt::interrupts`]) waiting unseen for longer than
/// `older_than_ms` (`run.interrupt_after_secs`). Each entry's `after` and `ack` are not
/// used. Answered with a [`PolledMany`]: the overdue events, per worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverdueQuery {
    pub older_than_ms: u64,
    pub workers: Vec<PollEntry>,
}

/// The answer of `POST /events/poll`: each event once, and which worker gets which.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PolledMany {
    /// Every event delivered to any of the workers, once, oldest first.
    pub events: Vec<Event>,
    /// Worker id → the `seq` of its events, oldest first; only workers with events.
    #[serde(default)]
    pub workers: BTreeMap<String, Vec<i64>>,
    /// Worker id → why its entry was refused (its acks: nothing of them was applied);
    /// such a worker gets no events in this answer.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, Error>,
}

impl PolledMany {
    /// The events of `worker`, oldest first.
    pub fn events_of(&self, worker: &str) -> Vec<Event> {
        let Some(seqs) = self.workers.get(worker) else {
            return Vec::new();
        };
        seqs.iter()
            .filter_map(|seq| {
                self.events
                    .binary_search_by_key(seq, |e| e.seq)
                    .ok()
                    .map(|i| self.events[i].clone())
            })
            .collect()
    }
}

impl Event {
    /// Whether `worker` should receive this event.
    pub fn is_for(&self, worker: &str) -> bool {
        match &self.target {
            Some(t) => t == worker,
            None => {
                self.source.as_deref() != Some(worker) && self.except.as_deref() != Some(worker)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_and_dedup_keys_refuse_controls() {
        assert_eq!(
            validate_notice_text("stop\u{1b}[2J").unwrap_err().code,
            "control_chars"
        );
        assert_eq!(
            validate_notice_text("\u{200B}").unwrap_err().code,
            "bad_notice"
        );
        assert!(validate_notice_text("deadline in 10 min\nmerge now").is_ok());
        assert_eq!(
            validate_dedup_key("k\u{202E}").unwrap_err().code,
            "bad_dedup_key"
        );
        assert!(validate_dedup_key("deadline-10").is_ok());
    }

    fn ev(source: Option<&str>, target: Option<&str>) -> Event {
        Event {
            seq: 1,
            kind: kinds::NOTICE.into(),
            priority: Priority::Normal,
            payload: serde_json::Value::Null,
            dedup_key: None,
            source: source.map(Into::into),
            target: target.map(Into::into),
            except: None,
            created_at: 0,
        }
    }

    #[test]
    fn broadcasts_reach_everyone_but_their_source() {
        let e = ev(Some("w01"), None);
        assert!(e.is_for("w02"));
        assert!(!e.is_for("w01"));
    }

    #[test]
    fn a_broadcast_can_leave_out_one_more_worker() {
        let mut e = ev(Some("w01"), None);
        e.except = Some("w02".into());
        assert!(!e.is_for("w02"));
        assert!(e.is_for("w03"));
    }

    #[test]
    fn direct_events_reach_only_their_target() {
        let e = ev(Some("w01"), Some("w03"));
        assert!(e.is_for("w03"));
        assert!(!e.is_for("w02"));
    }

    #[test]
    fn notice_text_and_dedup_key_have_limits() {
        assert!(validate_notice_text("deploy at noon").is_ok());
        assert_eq!(validate_notice_text(" ").unwrap_err().code, "bad_notice");
        let long = "x".repeat(MESSAGE_LIMIT + 1);
        assert_eq!(
            validate_notice_text(&long).unwrap_err().message,
            "a notice needs 1 to 4000 characters of text — say what the workers must know"
        );
        assert!(validate_dedup_key(&"k".repeat(DEDUP_KEY_LIMIT)).is_ok());
        assert_eq!(validate_dedup_key("").unwrap_err().code, "bad_dedup_key");
        assert_eq!(
            validate_dedup_key(&"k".repeat(DEDUP_KEY_LIMIT + 1))
                .unwrap_err()
                .message,
            "a dedup key must have 1 to 200 characters"
        );
    }

    #[test]
    fn a_wait_longer_than_the_hub_allows_is_refused() {
        assert!(check_wait(60, 60).is_ok());
        let e = check_wait(61, 60).unwrap_err();
        assert_eq!(e.code, "bad_wait");
        assert!(e.message.contains("the limit is 60 s"), "{}", e.message);
    }
}
