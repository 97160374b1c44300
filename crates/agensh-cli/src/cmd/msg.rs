//! `agensh msg send|read|status`.

use agensh_client::Client;
use agensh_client::MessageFilter;
use agensh_domain::message::NewMessage;
use agensh_domain::receipt::{MessageStatus, Receipt};
use agensh_domain::text::{escape, Lines};
use agensh_domain::time::{age, rfc3339};
use anyhow::Result;

use crate::cli::{Global, MsgArgs, MsgCommand};
use crate::connect::connect;
use crate::output::{json, now_ms};

/// Runs the command against the organization's hub (served here for the command when none
/// runs: see `connect::connect`).
pub async fn run(g: &Global, a: MsgArgs) -> Result<()> {
    let conn = connect(g).await?;
    let result = run_on(&conn.client, a).await;
    conn.close().await;
    result
}

async fn run_on(c: &Client, a: MsgArgs) -> Result<()> {
    match a.command {
        MsgCommand::Send { to, text, thread } => {
            let m = NewMessage { to, text, thread };
            m.validate()?;
            let sent = c.send_message(&m).await?;
            outln!("M{}", sent.seq);
        }
        MsgCommand::Read {
            all,
            with,
            limit,
            before,
            json: as_json,
        } => {
            let f = MessageFilter {
                with,
                limit,
                before,
            };
            let msgs = if all {
                c.message_history(&f).await?
            } else {
                c.read_messages(&f).await?
            };
            if as_json {
                json(&msgs);
            } else if msgs.is_empty() {
                eprintln!(
                    "{}",
                    if all {
                        "no messages"
                    } else {
                        "no unread messages"
                    }
                );
            } else {
                let now = now_ms();
                for m in &msgs {
                    outln!("{}", m.line(now));
                }
            }
        }
        MsgCommand::Status { id, json: as_json } => {
            let status = c.message_status(&id).await?;
            if as_json {
                json(&status);
            } else {
                for line in status_lines(&status) {
                    outln!("{line}");
                }
            }
        }
    }
    Ok(())
}

/// `M12 from w01 to w07 at …`, then a line per recipient: its state, when it was presented
/// and how (with the wait since the message was sent), when it was acknowledged.
fn status_lines(s: &MessageStatus) -> Vec<String> {
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
            status_lines(&s),
            [
                "M12 from w01 to #general at 2026-11-30T12:00:00Z",
                "WORKER  STATE         PRESENTED                    VIA           ACKNOWLEDGED",
                "w07     acknowledged  2026-11-30T12:00:35Z +35s    tool_result   2026-11-30T12:00:36Z",
                "w08     stored        -                            -             -",
            ]
        );
    }
}
