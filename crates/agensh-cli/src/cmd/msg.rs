//! `agensh msg send|read`.

use agensh_client::Client;
use agensh_client::MessageFilter;
use agensh_domain::message::NewMessage;
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
    }
    Ok(())
}
