//! `agensh issue open|list|view|comment|label|assign|claim|close|reopen`, and the issues
//! file of `agensh init --issues`.

use std::path::Path;

use agensh_client::Client;
use agensh_domain::issue::{parse_seed, Issue, NewIssue, SeedFormat};
use agensh_domain::time::age;
use agensh_protocol::rest::ListIssues;
use anyhow::{Context, Result};

use crate::cli::{Global, IssueArgs, IssueCommand};
use crate::connect::connect;
use crate::output::{json, now_ms, Local, Usage};

/// Runs the command against the organization's hub (served here for the command when none
/// runs: see `connect::connect`).
pub async fn run(g: &Global, a: IssueArgs) -> Result<()> {
    let conn = connect(g).await?;
    let result = run_on(&conn.client, g, a).await;
    conn.close().await;
    result
}

async fn run_on(c: &Client, g: &Global, a: IssueArgs) -> Result<()> {
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
            show(
                &i,
                as_json,
                &format!("opened issue #{}: {}", i.number, i.title),
            );
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
            if as_json {
                json(&list);
            } else if list.is_empty() {
                eprintln!("no issues");
            } else {
                for i in list {
                    outln!("{}", line(&i, now));
                }
            }
        }
        IssueCommand::View {
            number,
            json: as_json,
        } => {
            let i = c.view_issue(number).await?;
            if as_json {
                json(&i);
            } else {
                print_view(&i, now);
            }
        }
        IssueCommand::Comment {
            number,
            text,
            json: as_json,
        } => {
            let comment = c.comment_issue(number, &text).await?;
            if as_json {
                json(&comment);
            } else {
                outln!("commented on issue #{number}");
            }
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
            let labels = if i.labels.is_empty() {
                "none".to_string()
            } else {
                i.labels.join(", ")
            };
            show(&i, as_json, &format!("issue #{number} labels: {labels}"));
        }
        IssueCommand::Assign {
            number,
            assignee,
            json: as_json,
        } => {
            let who = (assignee != "none").then_some(assignee.as_str());
            let i = c.assign_issue(number, who).await?;
            let text = match &i.assignee {
                Some(a) => format!("issue #{number} is assigned to {a}"),
                None => format!("issue #{number} is assigned to nobody"),
            };
            show(&i, as_json, &text);
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
            show(
                &i,
                as_json,
                &format!(
                    "issue #{number} is yours ({me}); a PR that says \"closes #{number}\" closes it when it merges"
                ),
            );
        }
        IssueCommand::Close {
            number,
            json: as_json,
        } => {
            let i = c.close_issue(number).await?;
            show(&i, as_json, &format!("closed issue #{number}"));
        }
        IssueCommand::Reopen {
            number,
            json: as_json,
        } => {
            let i = c.reopen_issue(number).await?;
            show(&i, as_json, &format!("reopened issue #{number}"));
        }
    }
    Ok(())
}

/// The issue as JSON, or one line of text.
fn show(i: &Issue, as_json: bool, text: &str) {
    if as_json {
        json(i);
    } else {
        outln!("{text}");
    }
}

/// `#3    open   w01    [bug, parser] Parser loses line numbers (2 comments, +5m)`.
fn line(i: &Issue, now: i64) -> String {
    let labels = if i.labels.is_empty() {
        String::new()
    } else {
        format!("[{}] ", i.labels.join(", "))
    };
    format!(
        "#{:<4} {:<6} {:<6} {labels}{} ({} comments, {})",
        i.number,
        i.state.as_str(),
        i.assignee.as_deref().unwrap_or("-"),
        i.title,
        i.comment_count,
        age(i.updated_at, now)
    )
}

fn print_view(i: &Issue, now: i64) {
    outln!("#{} {} [{}]", i.number, i.title, i.state.as_str());
    outln!(
        "opened by {} {}; {}",
        i.author,
        age(i.created_at, now),
        match &i.assignee {
            Some(a) => format!("assigned to {a}"),
            None => "unassigned".to_string(),
        }
    );
    if !i.labels.is_empty() {
        outln!("labels: {}", i.labels.join(", "));
    }
    if let Some(by) = &i.closed_by {
        outln!(
            "closed by {by} {}",
            i.closed_at.map(|t| age(t, now)).unwrap_or_default()
        );
    }
    if let Some(body) = &i.body {
        outln!("\n{body}\n");
    }
    for c in &i.comments {
        outln!(
            "  comment by {} {}: {}",
            c.author,
            age(c.created_at, now),
            c.text
        );
    }
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
