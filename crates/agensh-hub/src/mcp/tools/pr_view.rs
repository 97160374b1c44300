//! `pr_view`: one pull request in full, with its commits, files and mergeability.

use agensh_domain::time::age;
use agensh_domain::Error;
use agensh_workspace::merge::Mergeability;
use serde_json::{json, Value};

use super::common::{object, positive, PR_NUMBER};
use super::{Args, Done, Listing, Tool};
use crate::auth::Caller;
use crate::ops::prs;
use crate::state::AppState;

pub(super) const TOOL: Tool = Tool {
    name: "pr_view",
    title: "Show a pull request",
    read_only: true,
    description,
    schema,
    run: |s, caller, a| Box::pin(call(s, caller, a)),
};

fn description(_: &Listing) -> String {
    "One pull request in full: body, reviews, comments and approvals, and while it is open its commits, changed files and whether \
     it merges cleanly into main now. Read it before you review or merge."
        .to_string()
}

fn schema(_: &Listing) -> Value {
    object(json!({ "number": positive(PR_NUMBER) }), &["number"])
}

async fn call(s: &AppState, _: &Caller, a: Args<'_>) -> Result<Done, Error> {
    let n = a.ident("number", "the PR number, like 3")?;
    let v = prs::view_pr(s, &n).await?;
    let now = s.now();
    let pr = &v.pr;
    let mut lines = vec![
        format!("#{} \"{}\" [{}]", pr.number, pr.title, pr.state.as_str()),
        format!(
            "{} wants to merge {} into {}",
            pr.author, pr.branch, pr.base
        ),
    ];
    if let Some(b) = &pr.body {
        lines.push(format!("body:\n{}", b.trim_end()));
    }
    if let Some(c) = &pr.merge_commit {
        lines.push(format!(
            "merge commit: {c} (by {})",
            pr.closed_by.as_deref().unwrap_or("?")
        ));
    } else if let Some(by) = &pr.closed_by {
        lines.push(format!("closed by {by}"));
    }
    if let Some(b) = &v.branch_summary {
        lines.push(match &b.mergeability {
            Mergeability::Mergeable => "mergeable: yes (cleanly into main now)".to_string(),
            Mergeability::Conflict { files } => format!(
                "mergeable: no — conflicts with main in {}; merge main into {} (git pull origin main), resolve, push",
                files.join(", "),
                pr.branch
            ),
            Mergeability::UpToDate => "mergeable: main already has every commit".to_string(),
        });
        lines.push(format!("commits ({}):", b.commits.len()));
        for c in &b.commits {
            lines.push(format!(
                "  {} {} ({})",
                &c.sha[..c.sha.len().min(10)],
                c.subject,
                c.author
            ));
        }
        lines.push(format!("files ({}):", b.files.len()));
        for f in &b.files {
            let n = |x: Option<u64>| x.map_or("-".to_string(), |n| n.to_string());
            lines.push(format!("  +{} -{} {}", n(f.added), n(f.removed), f.path));
        }
    }
    lines.push(format!(
        "approvals: {} (needed to merge: {})",
        v.approvals, s.config.merge.required_approvals
    ));
    for r in &pr.reviews {
        lines.push(format!(
            "  review by {} {}: {} — {}",
            r.author,
            age(r.created_at, now),
            r.verdict.as_str(),
            r.text.trim_end().replace('\n', "\n    ")
        ));
    }
    for c in &pr.comments {
        lines.push(format!(
            "  comment by {} {}: {}",
            c.author,
            age(c.created_at, now),
            c.text.trim_end().replace('\n', "\n    ")
        ));
    }
    Ok(Done::of(lines.join("\n"), &v))
}
