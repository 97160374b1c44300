//! `agensh board post|read|grep|unfold|renew|release`.

use agensh_client::Client;
use agensh_domain::record::{NewRecord, Record, RecordKind};
use agensh_domain::view::ViewEntry;
use anyhow::Result;

use crate::cli::{BoardArgs, BoardCommand, Global};
use crate::connect::connect;
use crate::output::{json, now_ms, one_line};

/// Runs the command against the organization's hub (served here for the command when none
/// runs: see `connect::connect`).
pub async fn run(g: &Global, a: BoardArgs) -> Result<()> {
    let conn = connect(g).await?;
    let result = run_on(&conn.client, a).await;
    conn.close().await;
    result
}

async fn run_on(c: &Client, a: BoardArgs) -> Result<()> {
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
                if let Some(t) = &appended.record.takes_over {
                    eprintln!(
                        "took over {} from {} ({}); {} is told",
                        t.id,
                        one_line(&t.author),
                        t.why.as_str(),
                        one_line(&t.author)
                    );
                }
                for o in &appended.overlaps {
                    let what = if o.same_label {
                        format!("same label #{}", o.label.as_deref().unwrap_or(""))
                    } else {
                        format!("paths {}", o.paths.join(","))
                    };
                    eprintln!(
                        "overlap: {} by {} ({}): {} — settle it with `agensh msg send {} ...`",
                        o.id,
                        o.author,
                        one_line(&what),
                        one_line(&o.text),
                        o.author
                    );
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
                for e in &entries {
                    outln!("{}", view_line(e, now));
                }
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
                for r in &found {
                    outln!("{}", r.line(now));
                }
            }
        }
        BoardCommand::Unfold { id, json: as_json } => {
            let u = c.unfold(&id).await?;
            if as_json {
                json(&u);
            } else {
                print_whole(&u.record, now);
                if let Some(s) = &u.superseded_by {
                    outln!("superseded by: {}", s.line(now));
                }
                if let Some(f) = &u.invalidated_by {
                    outln!("invalidated by: {}", f.line(now));
                }
            }
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

fn view_line(e: &ViewEntry, now: i64) -> String {
    let mut line = e.record.line(now);
    if e.invalidated {
        line.push_str(" [invalidated]");
    }
    line
}

fn print_whole(r: &Record, now: i64) {
    outln!(
        "{} {} by {} at {}",
        r.id,
        r.kind,
        r.author,
        agensh_domain::time::rfc3339(r.created_at)
    );
    outln!("text: {}", r.text);
    if let Some(l) = &r.label {
        outln!("label: {l}");
    }
    if !r.paths.is_empty() {
        outln!("paths: {}", r.paths.join(", "));
    }
    if let Some(t) = &r.takes_over {
        outln!("takes over: {} ({}, {})", t.id, t.author, t.why.as_str());
    }
    if let Some(l) = &r.lease {
        let state = if let Some(by) = &l.taken_over_by {
            format!("taken over by {by}")
        } else if l.released_at.is_some() {
            "released".to_string()
        } else if l.is_live(now) {
            format!("live until {}", agensh_domain::time::rfc3339(l.expires_at))
        } else {
            format!("expired at {}", agensh_domain::time::rfc3339(l.expires_at))
        };
        outln!("lease: {state}");
    }
    if let Some(d) = &r.detail {
        outln!("detail:\n{d}");
    }
}
