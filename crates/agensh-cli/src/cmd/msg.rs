//! `agensh msg send|read|status`.

use agensh_client::{show, Client, MessageFilter};
use agensh_domain::message::NewMessage;
use anyhow::Result;

use crate::cli::{MsgArgs, MsgCommand};
use crate::output::{json, json_or, lines, now_ms};

/// Runs the command against the organization's hub (served here for the command when none
/// runs: see `connect::with_hub`).
pub async fn run(c: &Client, a: MsgArgs) -> Result<()> {
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
                lines(msgs.iter().map(|m| m.line(now)));
            }
        }
        MsgCommand::Status { id, json: as_json } => {
            let status = c.message_status(&id).await?;
            json_or(as_json, &status, show::board::message_status);
        }
    }
    Ok(())
}
