//! `agensh events [--wait S]`, `agensh events ack`, `agensh notice`.

use agensh_client::show;
use anyhow::Result;

use crate::cli::{EventsArgs, EventsCommand, Global, NoticeArgs};
use crate::connect::client;
use crate::output::{json, lines};

pub async fn run(g: &Global, a: EventsArgs) -> Result<()> {
    let c = client(g)?;
    match a.command {
        Some(EventsCommand::Ack { seqs }) => {
            let seqs = if seqs.is_empty() {
                c.events(0, 0).await?.iter().map(|e| e.seq).collect()
            } else {
                seqs
            };
            let n = c.ack(&seqs).await?;
            outln!("acknowledged {n} event(s)");
        }
        None => {
            let events = c.events(a.after, a.wait).await?;
            if a.json {
                json(&events);
            } else if events.is_empty() {
                eprintln!("no pending events");
            } else {
                lines(events.iter().map(show::board::event_line));
            }
        }
    }
    Ok(())
}

pub async fn notice(g: &Global, a: NoticeArgs) -> Result<()> {
    let c = client(g)?;
    let r = c
        .notice(&a.text, a.to.as_deref(), a.urgent, a.dedup_key.as_deref())
        .await?;
    if r["duplicate"].as_bool() == Some(true) {
        outln!("already sent (same dedup key)");
    } else {
        outln!("sent event {}", r["event"]["seq"]);
    }
    Ok(())
}
