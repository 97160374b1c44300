//! The board, messages and events: `agensh board post|read|unfold`, `msg status`, `events`.

use agensh_domain::event::Event;
use agensh_domain::receipt::{MessageStatus, Receipt};
use agensh_domain::record::{Appended, Record};
use agensh_domain::text::{escape, Lines};
use agensh_domain::time::{age, rfc3339};
use agensh_domain::view::ViewEntry;
use agensh_protocol::rest::Unfolded;

/// What a post did besides appending, for stderr: the claim it took over and the live
/// claims it overlaps, stored text escaped to one line.
pub fn post_notes(a: &Appended) -> Vec<String> {
    let one = |s: &str| escape(s, Lines::One).into_owned();
    let mut out = Vec::new();
    if let Some(t) = &a.record.takes_over {
        out.push(format!(
            "took over {} from {} ({}); {} is told",
            t.id,
            one(&t.author),
            t.why.as_str(),
            one(&t.author)
        ));
    }
    for o in &a.overlaps {
        let what = if o.same_label {
            format!("same label #{}", o.label.as_deref().unwrap_or(""))
        } else {
            format!("paths {}", o.paths.join(","))
        };
        out.push(format!(
            "overlap: {} by {} ({}): {} — settle it with `agensh msg send {} ...`",
            o.id,
            o.author,
            one(&what),
            one(&o.text),
            o.author
        ));
    }
    out
}

/// One record of the recent view, marked when it was invalidated.
pub fn view_line(e: &ViewEntry, now: i64) -> String {
    let mut line = e.record.line(now);
    if e.invalidated {
        line.push_str(" [invalidated]");
    }
    line
}

/// `board unfold`: the record whole, and what superseded or invalidated it.
pub fn unfolded(u: &Unfolded, now: i64) -> Vec<String> {
    let mut out = whole(&u.record, now);
    if let Some(s) = &u.superseded_by {
        out.push(format!("superseded by: {}", s.line(now)));
    }
    if let Some(f) = &u.invalidated_by {
        out.push(format!("invalidated by: {}", f.line(now)));
    }
    out
}

/// A record whole: who and when, text, label, paths, takeover, lease and detail.
pub fn whole(r: &Record, now: i64) -> Vec<String> {
    let mut out = vec![
        format!(
            "{} {} by {} at {}",
            r.id,
            r.kind,
            r.author,
            rfc3339(r.created_at)
        ),
        format!("text: {}", r.text),
    ];
    if let Some(l) = &r.label {
        out.push(format!("label: {l}"));
    }
    if !r.paths.is_empty() {
        out.push(format!("paths: {}", r.paths.join(", ")));
    }
    if let Some(t) = &r.takes_over {
        out.push(format!(
            "takes over: {} ({}, {})",
            t.id,
            t.author,
            t.why.as_str()
        ));
    }
    if let Some(l) = &r.lease {
        let state = if let Some(by) = &l.taken_over_by {
            format!("taken over by {by}")
        } else if l.released_at.is_some() {
            "released".to_string()
        } else if l.is_live(now) {
            format!("live until {}", rfc3339(l.expires_at))
        } else {
            format!("expired at {}", rfc3339(l.expires_at))
        };
        out.push(format!("lease: {state}"));
    }
    if let Some(d) = &r.detail {
        out.push(format!("detail:\n{d}"));
    }
    out
}

/// `M12 from w01 to w07 at …`, then a line per recipient: its state, when it was presented
/// and how (with the wait since the message was sent), when it was acknowledged.
pub fn message_status(s: &MessageStatus) -> Vec<String> {
    let mut out = vec![format!(
        "{} from {} to {} at {}",
        s.id,
        escape(&s.from, Lines::One),
        escape(&s.to, Lines::One),
        rfc3339(s.created_at)
    )];
    let width = s
        .receipts
        .iter()
        .map(|r| r.worker.chars().count())
        .max()
        .unwrap_or(0)
        .max("WORKER".len());
    out.push(format!(
        "{:<width$}  {:<12}  {:<27}  {:<12}  ACKNOWLEDGED",
        "WORKER", "STATE", "PRESENTED", "VIA"
    ));
    for r in &s.receipts {
        out.push(receipt_line(r, width));
    }
    out
}

fn receipt_line(r: &Receipt, width: usize) -> String {
    let presented = r.presented_at.map_or_else(
        || "-".to_string(),
        |p| format!("{} {}", rfc3339(p), age(r.stored_at, p)),
    );
    format!(
        "{:<width$}  {:<12}  {:<27}  {:<12}  {}",
        escape(&r.worker, Lines::One),
        r.state.as_str(),
        presented,
        r.via.map_or("-", |v| v.as_str()),
        r.acknowledged_at.map_or_else(|| "-".to_string(), rfc3339)
    )
}

/// One pending event of `agensh events`: sequence, priority, kind and payload.
pub fn event_line(e: &Event) -> String {
    format!(
        "{} {:<6} {:<13} {}",
        e.seq,
        e.priority.as_str(),
        e.kind,
        serde_json::to_string(&e.payload).unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use agensh_domain::receipt::Via;

    #[test]
    fn a_status_prints_a_line_per_recipient_with_its_times() {
        let t0 = 1_796_040_000_000;
        let shown = Receipt::recorded(
            Receipt::stored("w07", 40, "msg.dm", t0),
            Some((t0 + 35_000, Via::ToolResult)),
            Some(t0 + 36_000),
        );
        let s = MessageStatus {
            id: "M12".into(),
            seq: 12,
            from: "w01".into(),
            to: "#general".into(),
            created_at: t0,
            receipts: vec![shown, Receipt::stored("w08", 40, "msg.dm", t0)],
        };
        assert_eq!(
            message_status(&s),
            [
                "M12 from w01 to #general at 2026-11-30T12:00:00Z",
                "WORKER  STATE         PRESENTED                    VIA           ACKNOWLEDGED",
                "w07     acknowledged  2026-11-30T12:00:35Z +35s    tool_result   2026-11-30T12:00:36Z",
                "w08     stored        -                            -             -",
            ]
        );
    }
}
