//! `agensh board post|read|grep|unfold|renew|release`.

use agensh_client::{show, Client};
use agensh_domain::record::{NewRecord, RecordKind};
use anyhow::Result;

use crate::cli::{BoardArgs, BoardCommand};
use crate::output::{json, json_or, lines, now_ms};

/// Runs the command against the organization's hub (served here for the command when none
/// runs: see `connect::with_hub`).
pub async fn run(c: &Client, a: BoardArgs) -> Result<()> {
    let now = now_ms();
    match a.command {
        BoardCommand::Post {
            kind,
            text,
            label,
            detail,
            paths,
            lease,
            take_over,
            json: as_json,
        } => {
            let record = NewRecord {
                kind: RecordKind::parse(&kind)?,
                text,
                label,
                detail,
                paths,
                lease_secs: lease,
                takes_over: take_over,
            };
            // Checked here too, so a bad record never leaves this machine.
            record.validate()?;
            let appended = c.post_record(&record).await?;
            if as_json {
                json(&appended);
            } else {
                outln!("{}", appended.record.id);
                for note in show::board::post_notes(&appended) {
                    eprintln!("{note}");
                }
            }
        }
        BoardCommand::Read { all, json: as_json } => {
            let entries = if all {
                c.recent(None).await?
            } else {
                c.read_board().await?
            };
            if as_json {
                json(&entries);
            } else if entries.is_empty() {
                eprintln!(
                    "{}",
                    if all {
                        "the board is empty"
                    } else {
                        "nothing new on the board"
                    }
                );
            } else {
                lines(entries.iter().map(|e| show::board::view_line(e, now)));
            }
        }
        BoardCommand::Grep {
            query,
            limit,
            before,
            json: as_json,
        } => {
            let found = c.grep(&query, limit, before.as_deref()).await?;
            if as_json {
                json(&found);
            } else if found.is_empty() {
                eprintln!("no records match");
            } else {
                lines(found.iter().map(|r| r.line(now)));
            }
        }
        BoardCommand::Unfold { id, json: as_json } => {
            let u = c.unfold(&id).await?;
            json_or(as_json, &u, |u| show::board::unfolded(u, now));
        }
        BoardCommand::Renew { id, lease } => {
            let r = c.renew(&id, lease).await?;
            let until = r
                .lease
                .map(|l| agensh_domain::time::rfc3339(l.expires_at))
                .unwrap_or_default();
            outln!("{} renewed until {until}", r.id);
        }
        BoardCommand::Release { id } => {
            let r = c.release(&id).await?;
            outln!("{} released", r.id);
        }
    }
    Ok(())
}
