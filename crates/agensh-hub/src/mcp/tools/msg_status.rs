//! `msg_status`: whether the recipients of a message one sent have been shown it yet.

use agensh_domain::receipt::{MessageStatus, Receipt, ReceiptState};
use agensh_domain::time::age;
use agensh_domain::Error;
use serde_json::{json, Value};

use super::common::{object, string};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::messages;
use crate::state::AppState;

/// Recipients of a channel post listed one by one; the others not shown it yet are counted.
const LISTED: usize = 20;

pub(super) const TOOL: Tool = Tool {
    name: "msg_status",
    title: "Has my message been seen?",
    read_only: true,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(_: &Listing) -> String {
    "Whether the recipients of a message you sent have seen it: for each, stored (not shown to it yet), presented (shown, \
     in a tool result's notices or in a turn's prompt, and when) or acknowledged (the tool call or turn that showed it \
     completed). Use it before you wait on an answer to a msg_dm, or to decide whether to message someone else instead. \
     id: the message id msg_dm or msg_post answered with, like M12. Only the sender and the recipient of a direct message \
     may ask. A worker busy in a long command sees a DM only at its next organization tool call or turn; if your urgent \
     DM waits too long, the hub tells you in your notices."
        .to_string()
}

fn schema(_: &Listing) -> Value {
    object(
        json!({ "id": string("the message id, like M12 (12 works too)", 24) }),
        &["id"],
    )
}

async fn call(s: &AppState, caller: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let id = a.ident("id", "a message id like M12")?;
    let status = messages::status(s, caller, &id).await?;
    Ok(Done::of(render(&status, s.now()), &status))
}

/// `35s`, `4m`: a span of milliseconds as the board's ages read.
fn took(ms: i64) -> String {
    age(0, ms).trim_start_matches('+').to_string()
}

/// One recipient's receipt, for a model.
fn line(r: &Receipt) -> String {
    let shown = |at: i64| {
        format!(
            "presented {} {} after it was sent",
            r.via.map_or("", |v| v.phrase()),
            took(at - r.stored_at)
        )
    };
    match (r.state, r.presented_at, r.acknowledged_at) {
        (ReceiptState::Acknowledged, Some(p), Some(a)) => format!(
            "- {}: {}; acknowledged {} later",
            r.worker,
            shown(p),
            took(a - p)
        ),
        (ReceiptState::Presented, Some(p), _) => format!(
            "- {}: {}; its tool call or turn is still going",
            r.worker,
            shown(p)
        ),
        _ => format!("- {}: stored, not shown to it yet", r.worker),
    }
}

/// The status as a model reads it: the message, then a line per recipient (a channel
/// post's recipients not shown it yet counted past [`LISTED`]).
fn render(st: &MessageStatus, now: i64) -> String {
    let mut lines = vec![format!(
        "{} from {} to {}, sent {} ago:",
        st.id,
        st.from,
        st.to,
        age(st.created_at, now).trim_start_matches('+')
    )];
    if st.receipts.is_empty() {
        lines.push("- nobody else to show it to yet".to_string());
        return lines.join("\n");
    }
    let counts = st.counts();
    if st.receipts.len() > 1 {
        let n = |k: ReceiptState| counts.get(&k).copied().unwrap_or(0);
        lines.push(format!(
            "acknowledged by {}, presented to {}, not shown yet to {} of {} workers",
            n(ReceiptState::Acknowledged),
            n(ReceiptState::Presented),
            n(ReceiptState::Stored),
            st.receipts.len()
        ));
    }
    // Those shown it first, then those still waiting, up to the cap.
    let mut ordered: Vec<&Receipt> = st
        .receipts
        .iter()
        .filter(|r| r.state != ReceiptState::Stored)
        .collect();
    ordered.extend(
        st.receipts
            .iter()
            .filter(|r| r.state == ReceiptState::Stored),
    );
    for r in ordered.iter().take(LISTED) {
        lines.push(line(r));
    }
    if ordered.len() > LISTED {
        lines.push(format!("- … and {} more", ordered.len() - LISTED));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use agensh_domain::receipt::Via;

    fn receipt(w: &str, presented: Option<(i64, Via)>, acked: Option<i64>) -> Receipt {
        Receipt::recorded(Receipt::stored(w, 40, "msg.dm", 1_000), presented, acked)
    }

    #[test]
    fn a_dm_says_whether_and_how_its_worker_was_shown_it() {
        let status = |r: Receipt| MessageStatus {
            id: "M12".into(),
            seq: 12,
            from: "w01".into(),
            to: "w07".into(),
            created_at: 1_000,
            receipts: vec![r],
        };
        let now = 241_000;
        assert_eq!(
            render(&status(receipt("w07", None, None)), now),
            "M12 from w01 to w07, sent 4m ago:\n- w07: stored, not shown to it yet"
        );
        assert_eq!(
            render(
                &status(receipt("w07", Some((36_000, Via::ToolResult)), None)),
                now
            ),
            "M12 from w01 to w07, sent 4m ago:\n- w07: presented in a tool result 35s after it was sent; its tool call or turn is still going"
        );
        assert_eq!(
            render(
                &status(receipt("w07", Some((36_000, Via::Prompt)), Some(156_000))),
                now
            ),
            "M12 from w01 to w07, sent 4m ago:\n- w07: presented in a prompt 35s after it was sent; acknowledged 2m later"
        );
    }

    #[test]
    fn a_channel_post_counts_its_recipients_and_lists_those_shown_first() {
        let mut receipts: Vec<Receipt> = (2..=30)
            .map(|i| receipt(&format!("w{i:02}"), None, None))
            .collect();
        receipts[20] = receipt("w22", Some((2_000, Via::Prompt)), Some(3_000));
        let st = MessageStatus {
            id: "M3".into(),
            seq: 3,
            from: "w01".into(),
            to: "#general".into(),
            created_at: 1_000,
            receipts,
        };
        let text = render(&st, 61_000);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "M3 from w01 to #general, sent 1m ago:");
        assert_eq!(
            lines[1],
            "acknowledged by 1, presented to 0, not shown yet to 28 of 29 workers"
        );
        assert!(
            lines[2].starts_with("- w22: presented in a prompt 1s after"),
            "{text}"
        );
        assert_eq!(lines.last(), Some(&"- … and 9 more"));
    }
}
