//! `agensh pr open|list|view|review|comment|merge|ship|close`.

use agensh_client::Client;
use agensh_domain::pr::{NewPr, Verdict};
use agensh_protocol::rest::NewShip;
use agensh_workspace::checkout::work_branch;
use agensh_workspace::ship::commit_and_push;
use anyhow::Result;
use serde_json::Value;

use crate::cli::{Global, PrArgs, PrCommand};
use crate::connect::connect;
use crate::output::{json, now_ms, Local, Usage};

/// Runs the command against the organization's hub (served here for the command when none
/// runs: see `connect::connect`).
pub async fn run(g: &Global, a: PrArgs) -> Result<()> {
    let conn = connect(g).await?;
    let result = run_on(&conn.client, g, a).await;
    conn.close().await;
    result
}

async fn run_on(c: &Client, g: &Global, a: PrArgs) -> Result<()> {
    let now = now_ms();
    match a.command {
        PrCommand::Open {
            branch,
            title,
            body,
            json: as_json,
        } => {
            let pr = c
                .open_pr(&NewPr {
                    branch,
                    title,
                    body,
                })
                .await?;
            if as_json {
                json(&pr);
            } else {
                outln!("#{} {} ({} -> {})", pr.number, pr.title, pr.branch, pr.base);
            }
        }
        PrCommand::List {
            state,
            author,
            limit,
            json: as_json,
        } => {
            let prs = c
                .list_prs(state.as_deref(), author.as_deref(), limit)
                .await?;
            if as_json {
                json(&prs);
            } else if prs.is_empty() {
                eprintln!("no pull requests");
            } else {
                for p in prs {
                    outln!(
                        "#{:<4} {:<7} {:<6} {:<24} {} ({}){}",
                        p.number,
                        p.state.as_str(),
                        p.author,
                        p.branch,
                        p.title,
                        agensh_domain::time::age(p.updated_at, now),
                        p.queue.as_ref().map_or(String::new(), queue_note)
                    );
                }
            }
        }
        PrCommand::View {
            number,
            json: as_json,
        } => {
            let v = c.view_pr(number).await?;
            if as_json {
                json(&v);
            } else {
                print_view(&v, now);
            }
        }
        PrCommand::Review {
            number,
            verdict,
            text,
        } => {
            Verdict::parse(&verdict)?;
            let r = c.review_pr(number, &verdict, &text).await?;
            outln!("reviewed #{number}: {}", r.verdict.as_str());
        }
        PrCommand::Comment { number, text } => {
            c.comment_pr(number, &text).await?;
            outln!("commented on #{number}");
        }
        PrCommand::Merge {
            number,
            json: as_json,
        } => {
            let m = c.merge_pr(number).await?;
            if as_json {
                json(&m);
            } else {
                let commit = m["pr"]["merge_commit"].as_str().unwrap_or("");
                let short = &commit[..commit.len().min(12)];
                if m["outcome"] == "up_to_date" {
                    outln!("#{number} is merged: main ({short}) already had every commit of it");
                } else {
                    outln!("merged #{number} into main at {short}");
                }
            }
        }
        PrCommand::Ship {
            title,
            summary,
            branch,
            claim,
            label,
            json: as_json,
        } => {
            let worker = match &g.as_worker {
                Some(w) => w.clone(),
                None => c.whoami().await?.id,
            };
            if worker == agensh_domain::ids::ADMIN {
                return Err(Usage(
                    "the admin ships nothing of its own — ship as a worker with --as ID or that worker's token".into(),
                )
                .into());
            }
            let branch = branch.unwrap_or_else(|| work_branch(&worker));
            let cwd = std::env::current_dir()?;
            let pushed = commit_and_push(&cwd, &worker, &branch, &title)
                .await
                .map_err(Local)?;
            if !as_json {
                outln!("{}", pushed.describe());
            }
            let shipped = c
                .ship(&NewShip {
                    title,
                    summary,
                    branch: Some(branch),
                    claim,
                    label,
                })
                .await?;
            if as_json {
                json(&shipped);
            } else {
                for step in shipped["steps"].as_array().into_iter().flatten() {
                    outln!("{}", step.as_str().unwrap_or(""));
                }
            }
        }
        PrCommand::Close { number } => {
            c.close_pr(number).await?;
            outln!("closed #{number}");
        }
    }
    Ok(())
}

/// A waiting merge's place, batch and gate run, as `pr list` shows it.
fn queue_note(q: &agensh_domain::pr::QueuePlace) -> String {
    let mut note = format!(" — merging: place {}", q.place);
    if let Some(b) = q.batch {
        note.push_str(&format!(", batch {b}"));
    }
    if let Some(r) = q.gate_run {
        note.push_str(&format!(", waits for gate run {r}"));
    }
    note
}

fn print_view(v: &Value, now: i64) {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    outln!("#{} {} [{}]", v["number"], s(&v["title"]), s(&v["state"]));
    outln!(
        "{} wants to merge {} into {}",
        s(&v["author"]),
        s(&v["branch"]),
        s(&v["base"])
    );
    if let Some(body) = v["body"].as_str() {
        outln!("\n{body}\n");
    }
    if let Some(commit) = v["merge_commit"].as_str() {
        outln!("merge commit: {commit} (by {})", s(&v["closed_by"]));
    }
    let b = &v["branch_summary"];
    if b.is_object() {
        match b["mergeability"]["state"].as_str() {
            Some("conflict") => {
                let files: Vec<String> = b["mergeability"]["files"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(s)
                    .collect();
                outln!("mergeable: no — conflicts in {}", files.join(", "));
            }
            Some("up_to_date") => outln!("mergeable: main already has every commit"),
            _ => outln!("mergeable: yes"),
        }
        outln!("commits:");
        for c in b["commits"].as_array().into_iter().flatten() {
            let sha = s(&c["sha"]);
            outln!(
                "  {} {} ({})",
                &sha[..sha.len().min(10)],
                s(&c["subject"]),
                s(&c["author"])
            );
        }
        outln!("files:");
        for f in b["files"].as_array().into_iter().flatten() {
            let n = |x: &Value| x.as_u64().map_or("-".to_string(), |n| n.to_string());
            outln!(
                "  +{:<5} -{:<5} {}",
                n(&f["added"]),
                n(&f["removed"]),
                s(&f["path"])
            );
        }
    }
    outln!(
        "approvals (of the branch's current commit): {}",
        v["approvals"]
    );
    for r in v["reviews"].as_array().into_iter().flatten() {
        let at = r["created_at"].as_i64().unwrap_or(now);
        let of = r["commit"]
            .as_str()
            .map(|c| format!(" of {}", &c[..c.len().min(10)]))
            .unwrap_or_default();
        outln!(
            "  review by {} {}{of}: {} ({})",
            s(&r["author"]),
            agensh_domain::time::age(at, now),
            s(&r["text"]),
            s(&r["verdict"])
        );
    }
    for c in v["comments"].as_array().into_iter().flatten() {
        let at = c["created_at"].as_i64().unwrap_or(now);
        outln!(
            "  comment by {} {}: {}",
            s(&c["author"]),
            agensh_domain::time::age(at, now),
            s(&c["text"])
        );
    }
}
