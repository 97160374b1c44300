//! `agensh pr open|list|view|review|comment|merge|ship|close`.

use agensh_client::{show, Client};
use agensh_domain::pr::{NewPr, Verdict};
use agensh_protocol::rest::NewShip;
use agensh_workspace::checkout::work_branch;
use agensh_workspace::ship::commit_and_push;
use anyhow::Result;

use crate::cli::{Global, PrArgs, PrCommand};
use crate::output::{json_or, now_ms, Local, Usage};

/// Runs the command against the organization's hub (served here for the command when none
/// runs: see `connect::with_hub`).
pub async fn run(c: &Client, g: &Global, a: PrArgs) -> Result<()> {
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
            json_or(as_json, &pr, |pr| vec![show::pr::opened(pr)]);
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
            if !as_json && prs.is_empty() {
                eprintln!("no pull requests");
            } else {
                json_or(as_json, &prs, |prs| {
                    prs.iter().map(|p| show::pr::line(p, now)).collect()
                });
            }
        }
        PrCommand::View {
            number,
            json: as_json,
        } => {
            let v = c.view_pr(number).await?;
            json_or(as_json, &v, |v| show::pr::view(v, now));
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
            json_or(as_json, &m, |m| vec![show::pr::merged(number, m)]);
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
            json_or(as_json, &shipped, |s| {
                let steps = s["steps"].as_array().into_iter().flatten();
                steps
                    .map(|t| t.as_str().unwrap_or("").to_string())
                    .collect()
            });
        }
        PrCommand::Close { number } => {
            c.close_pr(number).await?;
            outln!("closed #{number}");
        }
    }
    Ok(())
}
