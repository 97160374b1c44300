//! Urgent events attached to tool results (DESIGN §4): after each `tools/call`, the
//! caller's pending *urgent* events — direct messages, peers' new board records (as a
//! digest), reviews of its PRs, its PRs that failed to merge, its claims a peer took over,
//! its DMs not seen in time, urgent operator notices —
//! become a `notices:` text block, recorded presented via the tool result (their receipts)
//! and acknowledged once the result is built. Normal
//! events stay queued for the turn boundary. A per-worker lock, held from reading the queue
//! to the acknowledgement, keeps two parallel calls from showing the same notice twice.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use agensh_domain::event::{kinds, Event, Priority};
use agensh_domain::ids::ADMIN;
use agensh_domain::receipt::Via;
use agensh_domain::time::age;
use serde_json::Value;
use tokio::sync::OwnedMutexGuard;

use super::McpState;
use crate::auth::Caller;
use crate::state::AppState;

/// Board records listed in a digest; the rest are counted.
pub const DIGEST_LINES: usize = 10;
/// Other notices (DMs, reviews, failed merges, operator notices) shown in full; the rest
/// are counted, left pending and shown with the next results.
pub const ITEM_LINES: usize = 20;
/// Events read from the queue per page, and pages read at most per call.
const PAGE: usize = 1_000;
const MAX_PAGES: usize = 10;

/// What a tool's own result already showed, so the notices do not repeat it (the events
/// are still acknowledged).
#[derive(Debug, Default)]
pub struct Covers {
    /// Message `seq`s the result listed (inbox).
    pub messages: HashSet<i64>,
    /// board_read moved the board cursor past this record `seq`: every record up to it
    /// was shown, superseded or deliberately skipped.
    pub records_upto: Option<i64>,
}

/// Urgent events read for one tool result, to acknowledge once it is built.
pub struct Pending {
    /// The `notices:` block, when anything is left to show.
    pub text: Option<String>,
    worker: String,
    seqs: Vec<i64>,
    _guard: OwnedMutexGuard<()>,
}

impl Pending {
    /// Records the events presented via the tool result (their receipts) and acknowledges
    /// them, the result being built: they are never shown again.
    pub async fn ack(self, s: &AppState) {
        if self.seqs.is_empty() {
            return;
        }
        match s
            .store
            .present_events(
                &self.worker,
                self.seqs.clone(),
                Via::ToolResult,
                false,
                s.now(),
            )
            .await
        {
            Ok(n) => {
                s.metrics
                    .events_presented
                    .fetch_add(n as u64, Ordering::Relaxed);
            }
            // The acknowledgement below records them presented, via prompt.
            Err(e) => tracing::warn!("could not record notices of {} presented: {e}", self.worker),
        }
        match s.store.ack_events(&self.worker, self.seqs, s.now()).await {
            Ok(n) => {
                s.metrics
                    .events_acked
                    .fetch_add(n as u64, Ordering::Relaxed);
            }
            // Not acknowledged: shown again with the next result (at-least-once).
            Err(e) => tracing::warn!("could not acknowledge notices of {}: {e}", self.worker),
        }
    }
}

/// Reads `caller`'s pending urgent events and renders those `covers` does not hold.
/// `None` for the admin acting as nobody (it has no queue).
pub async fn collect(
    s: &AppState,
    m: &McpState,
    caller: &Caller,
    covers: &Covers,
) -> agensh_domain::Result<Option<Pending>> {
    if caller.id == ADMIN {
        return Ok(None);
    }
    let worker = caller.id.clone();
    let guard = m.notice_lock(&worker).lock_owned().await;
    let mut urgent: Vec<Event> = Vec::new();
    let mut after = 0;
    for _ in 0..MAX_PAGES {
        let page = s.store.pending_events(&worker, after, PAGE).await?;
        let full = page.len() == PAGE;
        after = page.last().map_or(after, |e| e.seq);
        urgent.extend(page.into_iter().filter(|e| e.priority == Priority::Urgent));
        if !full {
            break;
        }
    }
    let shown: Vec<&Event> = urgent.iter().filter(|e| !covered(e, covers)).collect();
    // Acknowledge what this result shows or already covered; items past the cap stay
    // pending and come with the next result (board records are all covered by the digest
    // and `board_read`).
    let mut items = 0;
    let overflow: HashSet<i64> = shown
        .iter()
        .filter(|e| e.kind != kinds::BOARD_RECORD)
        .filter(|_| {
            items += 1;
            items > ITEM_LINES
        })
        .map(|e| e.seq)
        .collect();
    let seqs = urgent
        .iter()
        .map(|e| e.seq)
        .filter(|seq| !overflow.contains(seq))
        .collect();
    Ok(Some(Pending {
        text: render(&shown, s.now()),
        worker,
        seqs,
        _guard: guard,
    }))
}

fn covered(e: &Event, covers: &Covers) -> bool {
    match e.kind.as_str() {
        kinds::DIRECT_MESSAGE => e.payload["seq"]
            .as_i64()
            .is_some_and(|seq| covers.messages.contains(&seq)),
        kinds::BOARD_RECORD => match (covers.records_upto, e.payload["id"].as_str()) {
            (Some(upto), Some(id)) => {
                agensh_domain::ids::parse_record_id(id).is_ok_and(|seq| seq <= upto)
            }
            _ => false,
        },
        _ => false,
    }
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// Indents every line after the first, so a multi-line text stays inside its bullet.
fn indent(text: &str) -> String {
    text.trim_end().replace('\n', "\n    ")
}

/// The `notices:` block for `events` (oldest first), or `None` when there are none.
pub fn render(events: &[&Event], now: i64) -> Option<String> {
    if events.is_empty() {
        return None;
    }
    let mut lines = vec!["notices:".to_string()];
    let mut board: Vec<&Event> = Vec::new();
    let mut items = 0;
    let mut more = 0;
    for e in events {
        let p = &e.payload;
        if e.kind == kinds::BOARD_RECORD {
            board.push(e);
            continue;
        }
        items += 1;
        if items > ITEM_LINES {
            more += 1;
            continue;
        }
        match e.kind.as_str() {
            kinds::DIRECT_MESSAGE => lines.push(format!(
                "- DM M{} from {} ({}): {} — answer with msg_dm to=\"{}\"",
                p["seq"],
                s(&p["from"]),
                age(e.created_at, now),
                indent(s(&p["text"])),
                s(&p["from"])
            )),
            kinds::PR_REVIEW => lines.push(format!(
                "- review of your PR #{} \"{}\" by {}: {} — {}",
                p["number"],
                s(&p["title"]),
                s(&p["reviewer"]),
                s(&p["verdict"]),
                indent(s(&p["text"]))
            )),
            kinds::PR_MERGE_FAILED => lines.push(format!(
                "- your PR #{} \"{}\" could not merge ({} tried): {}: {}",
                p["number"],
                s(&p["title"]),
                s(&p["by"]),
                s(&p["reason"]["code"]),
                indent(s(&p["reason"]["message"]))
            )),
            kinds::CLAIM_TAKEN_OVER => lines.push(format!(
                "- your claim {} \"{}\" was taken over by {} with {} ({}) — stop work on it; msg_dm {} to hand over what you have, then claim something else",
                s(&p["id"]),
                s(&p["text"]),
                s(&p["author"]),
                s(&p["by"]),
                takeover_why(s(&p["why"])),
                s(&p["author"])
            )),
            kinds::NOTICE => lines.push(format!("- operator notice: {}", indent(s(&p["text"])))),
            kinds::MESSAGE_UNSEEN => lines.push(format!(
                "- {} — msg_status {} shows where it stands",
                s(&p["text"]),
                s(&p["id"])
            )),
            other => lines.push(format!(
                "- {other}: {}",
                serde_json::to_string(p).unwrap_or_default()
            )),
        }
    }
    if more > 0 {
        lines.push(format!(
            "- … and {more} more, shown with your next tool results (inbox lists messages now)"
        ));
    }
    if !board.is_empty() {
        lines.push(format!(
            "- board: {} new record(s) by peers{}:",
            board.len(),
            if board.len() > DIGEST_LINES {
                format!(", the newest {DIGEST_LINES} here (board_read shows them all)")
            } else {
                String::new()
            }
        ));
        for e in board.iter().rev().take(DIGEST_LINES) {
            lines.push(format!("  {}", record_line(e, now)));
        }
    }
    Some(lines.join("\n"))
}

/// Why a claim could be taken over, said to its author.
fn takeover_why(why: &str) -> &'static str {
    match why {
        "dead" => "you were dead",
        "stopped" => "you were stopped",
        "released" => "you had released it",
        _ => "its lease had run out",
    }
}

/// `G12 [w03/FACT +2m] text #label`, from a `board.record` event.
fn record_line(e: &Event, now: i64) -> String {
    let p = &e.payload;
    let mut line = format!(
        "{} [{}/{} {}] {}",
        s(&p["id"]),
        s(&p["author"]),
        s(&p["kind"]),
        age(e.created_at, now),
        s(&p["text"])
    );
    if let Some(l) = p["label"].as_str() {
        line.push_str(&format!(" #{l}"));
    }
    if let Some(old) = p["takes_over"].as_str() {
        line.push_str(&format!(" takes over {old}"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(seq: i64, kind: &str, payload: Value) -> Event {
        Event {
            seq,
            kind: kind.into(),
            priority: Priority::Urgent,
            payload,
            dedup_key: None,
            source: None,
            target: None,
            except: None,
            created_at: 0,
        }
    }

    #[test]
    fn nothing_to_tell_renders_nothing() {
        assert_eq!(render(&[], 0), None);
    }

    #[test]
    fn dms_reviews_and_failed_merges_name_who_and_what() {
        let dm = ev(
            1,
            kinds::DIRECT_MESSAGE,
            json!({"seq":7,"from":"w02","to":"w01","text":"can I take\nsrc/x.rs?"}),
        );
        let review = ev(
            2,
            kinds::PR_REVIEW,
            json!({"number":1,"title":"Parser","reviewer":"w03","verdict":"request_changes","text":"return a Result"}),
        );
        let failed = ev(
            3,
            kinds::PR_MERGE_FAILED,
            json!({"number":2,"title":"Eval","by":"w03","reason":{"code":"merge_conflict","message":"PR #2 conflicts with main in src/p.rs"}}),
        );
        let text = render(&[&dm, &review, &failed], 120_000).unwrap();
        assert!(text.starts_with("notices:\n"), "{text}");
        assert!(
            text.contains(
                "- DM M7 from w02 (+2m): can I take\n    src/x.rs? — answer with msg_dm to=\"w02\""
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "review of your PR #1 \"Parser\" by w03: request_changes — return a Result"
            ),
            "{text}"
        );
        assert!(text.contains("your PR #2 \"Eval\" could not merge (w03 tried): merge_conflict: PR #2 conflicts with main in src/p.rs"), "{text}");
    }

    #[test]
    fn a_taken_over_claim_tells_its_author_who_took_it_and_what_to_do() {
        let e = ev(
            1,
            kinds::CLAIM_TAKEN_OVER,
            json!({"id":"G12","text":"the parser","label":"parser","by":"G15","author":"w04","why":"dead"}),
        );
        let text = render(&[&e], 0).unwrap();
        assert_eq!(
            text,
            "notices:\n- your claim G12 \"the parser\" was taken over by w04 with G15 (you were dead) — stop work on it; msg_dm w04 to hand over what you have, then claim something else"
        );
        let b = ev(
            2,
            kinds::BOARD_RECORD,
            json!({"id":"G15","kind":"CLAIM","author":"w04","text":"the parser","label":"parser","takes_over":"G12"}),
        );
        let text = render(&[&b], 0).unwrap();
        assert!(
            text.ends_with("G15 [w04/CLAIM +0s] the parser #parser takes over G12"),
            "{text}"
        );
    }

    #[test]
    fn a_dm_not_seen_in_time_is_told_with_how_to_follow_it() {
        let e = ev(
            4,
            kinds::MESSAGE_UNSEEN,
            json!({"message":12,"id":"M12","to":"w07","busy":false,"text":"w07 has not seen your message M12 for 3 minutes: it is between turns"}),
        );
        assert_eq!(
            render(&[&e], 0).unwrap(),
            "notices:\n- w07 has not seen your message M12 for 3 minutes: it is between turns — msg_status M12 shows where it stands"
        );
    }

    #[test]
    fn a_flood_of_dms_is_shown_up_to_a_cap_and_counted() {
        let events: Vec<Event> = (1..=25)
            .map(|i| {
                ev(
                    i,
                    kinds::DIRECT_MESSAGE,
                    json!({"seq":i,"from":"w02","text":"hi"}),
                )
            })
            .collect();
        let refs: Vec<&Event> = events.iter().collect();
        let text = render(&refs, 0).unwrap();
        assert_eq!(
            text.lines().filter(|l| l.starts_with("- DM")).count(),
            ITEM_LINES
        );
        assert!(
            text.ends_with(
                "- … and 5 more, shown with your next tool results (inbox lists messages now)"
            ),
            "{text}"
        );
    }

    #[test]
    fn board_read_covers_every_record_up_to_what_it_read() {
        let covers = Covers {
            records_upto: Some(7),
            ..Covers::default()
        };
        let rec = |id: &str| ev(1, kinds::BOARD_RECORD, json!({"id": id}));
        assert!(covered(&rec("G7"), &covers));
        assert!(covered(&rec("G3"), &covers));
        assert!(!covered(&rec("G8"), &covers));
        assert!(!covered(&rec("G3"), &Covers::default()));
    }

    #[test]
    fn board_records_become_a_digest_of_the_newest_ten() {
        let events: Vec<Event> = (1..=12)
            .map(|i| {
                ev(i, kinds::BOARD_RECORD, json!({"id":format!("G{i}"),"kind":"FACT","author":"w02","text":format!("fact {i}"),"label":if i == 12 { json!("parser") } else { Value::Null }}))
            })
            .collect();
        let refs: Vec<&Event> = events.iter().collect();
        let text = render(&refs, 0).unwrap();
        assert!(
            text.contains("- board: 12 new record(s) by peers, the newest 10 here"),
            "{text}"
        );
        assert!(
            text.contains("  G12 [w02/FACT +0s] fact 12 #parser\n  G11 [w02/FACT +0s] fact 11"),
            "{text}"
        );
        assert!(!text.contains("G2 ["), "{text}");
    }
}
