//! `agensh issue open|list|view|comment|label|assign|claim|close|reopen`, and the issues
//! file of `agensh init --issues`.

use std::path::Path;

use agensh_client::{show, Client};
use agensh_domain::issue::{parse_seed, NewIssue, SeedFormat};
use agensh_protocol::rest::ListIssues;
use anyhow::{Context, Result};

use crate::cli::{Global, IssueArgs, IssueCommand};
use crate::output::{json_or, now_ms, Local, Usage};

/// Runs the command against the organization's hub (served here for the command when none
/// runs: see `connect::with_hub`).
pub async fn run(c: &Client, g: &Global, a: IssueArgs) -> Result<()> {
    let now = now_ms();
    match a.command {
        IssueCommand::Open {
            title,
            body,
            labels,
            json: as_json,
        } => {
            let i = c
                .open_issue(&NewIssue {
                    title,
                    body,
                    labels,
                })
                .await?;
            json_or(as_json, &i, |i| {
                vec![format!("opened issue #{}: {}", i.number, i.title)]
            });
        }
        IssueCommand::List {
            state,
            label,
            assignee,
            before,
            limit,
            json: as_json,
        } => {
            let list = c
                .list_issues(&ListIssues {
                    state,
                    label,
                    assignee,
                    before,
                    limit,
                })
                .await?;
            if !as_json && list.is_empty() {
                eprintln!("no issues");
            } else {
                json_or(as_json, &list, |l| {
                    l.iter().map(|i| show::issue::line(i, now)).collect()
                });
            }
        }
        IssueCommand::View {
            number,
            json: as_json,
        } => {
            let i = c.view_issue(number).await?;
            json_or(as_json, &i, |i| show::issue::view(i, now));
        }
        IssueCommand::Comment {
            number,
            text,
            json: as_json,
        } => {
            let comment = c.comment_issue(number, &text).await?;
            json_or(as_json, &comment, |_| {
                vec![format!("commented on issue #{number}")]
            });
        }
        IssueCommand::Label {
            number,
            add,
            remove,
            json: as_json,
        } => {
            if add.is_empty() && remove.is_empty() {
                return Err(Usage(
                    "name a label to add or remove: --add LABEL or --remove LABEL".into(),
                )
                .into());
            }
            let i = c.label_issue(number, add, remove).await?;
            json_or(as_json, &i, |i| vec![show::issue::labels(i)]);
        }
        IssueCommand::Assign {
            number,
            assignee,
            json: as_json,
        } => {
            let who = (assignee != "none").then_some(assignee.as_str());
            let i = c.assign_issue(number, who).await?;
            json_or(as_json, &i, |i| vec![show::issue::assigned(i)]);
        }
        IssueCommand::Claim {
            number,
            json: as_json,
        } => {
            let me = match &g.as_worker {
                Some(w) => w.clone(),
                None => c.whoami().await?.id,
            };
            if me == agensh_domain::ids::ADMIN {
                return Err(Usage(
                    "the admin claims nothing for itself — claim as a worker with --as ID or that worker's token, or assign the issue to a worker with `agensh issue assign N ID`".into(),
                )
                .into());
            }
            let i = c.assign_issue(number, Some(&me)).await?;
            json_or(as_json, &i, |_| {
                vec![format!(
                "issue #{number} is yours ({me}); a PR that says \"closes #{number}\" closes it when it merges"
            )]
            });
        }
        IssueCommand::Close {
            number,
            json: as_json,
        } => {
            let i = c.close_issue(number).await?;
            json_or(as_json, &i, |_| vec![format!("closed issue #{number}")]);
        }
        IssueCommand::Reopen {
            number,
            json: as_json,
        } => {
            let i = c.reopen_issue(number).await?;
            json_or(as_json, &i, |_| vec![format!("reopened issue #{number}")]);
        }
    }
    Ok(())
}

/// The issues of an `agensh init --issues` file: TOML `[[issue]]` tables, or a JSON array
/// when the name ends in `.json`; every entry checked, the first bad one named.
pub fn read_seed_file(path: &Path) -> Result<Vec<NewIssue>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the issues file {}", path.display()))?;
    let format = match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("json") => SeedFormat::Json,
        _ => SeedFormat::Toml,
    };
    parse_seed(&text, format).map_err(|e| {
        Local(agensh_domain::Error::new(
            e.kind,
            &e.code,
            format!(
                "{}: {} — fix it and run init again; nothing was created",
                path.display(),
                e.message
            ),
        ))
        .into()
    })
}
