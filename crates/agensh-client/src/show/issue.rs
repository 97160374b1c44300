//! Issues: `agensh issue list|view|label|assign`.

use agensh_domain::issue::Issue;
use agensh_domain::time::age;

/// `#3    open   w01    [bug, parser] Parser loses line numbers (2 comments, +5m)`.
pub fn line(i: &Issue, now: i64) -> String {
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

/// `issue #3 labels: bug, parser` (or `none`).
pub fn labels(i: &Issue) -> String {
    let labels = if i.labels.is_empty() {
        "none".to_string()
    } else {
        i.labels.join(", ")
    };
    format!("issue #{} labels: {labels}", i.number)
}

/// `issue #3 is assigned to w01` (or `nobody`).
pub fn assigned(i: &Issue) -> String {
    match &i.assignee {
        Some(a) => format!("issue #{} is assigned to {a}", i.number),
        None => format!("issue #{} is assigned to nobody", i.number),
    }
}

/// `issue view`: the issue, who opened, holds and closed it, its labels, body and comments.
pub fn view(i: &Issue, now: i64) -> Vec<String> {
    let mut out = vec![
        format!("#{} {} [{}]", i.number, i.title, i.state.as_str()),
        format!(
            "opened by {} {}; {}",
            i.author,
            age(i.created_at, now),
            match &i.assignee {
                Some(a) => format!("assigned to {a}"),
                None => "unassigned".to_string(),
            }
        ),
    ];
    if !i.labels.is_empty() {
        out.push(format!("labels: {}", i.labels.join(", ")));
    }
    if let Some(by) = &i.closed_by {
        out.push(format!(
            "closed by {by} {}",
            i.closed_at.map(|t| age(t, now)).unwrap_or_default()
        ));
    }
    if let Some(body) = &i.body {
        out.push(format!("\n{body}\n"));
    }
    for c in &i.comments {
        out.push(format!(
            "  comment by {} {}: {}",
            c.author,
            age(c.created_at, now),
            c.text
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use agensh_domain::issue::{IssueComment, IssueState};

    #[test]
    fn an_issue_as_a_line_and_whole() {
        let now = 1_796_040_000_000;
        let mut i = Issue {
            number: 3,
            title: "Parser loses line numbers".into(),
            body: Some("see test_lines".into()),
            author: "admin".into(),
            state: IssueState::Open,
            labels: vec!["bug".into(), "parser".into()],
            assignee: Some("w01".into()),
            comment_count: 1,
            comments: vec![IssueComment {
                id: 1,
                author: "w02".into(),
                text: "mine too".into(),
                created_at: now - 120_000,
            }],
            created_at: now - 7_200_000,
            updated_at: now - 300_000,
            closed_at: None,
            closed_by: None,
        };
        assert_eq!(
            line(&i, now),
            "#3    open   w01    [bug, parser] Parser loses line numbers (1 comments, +5m)"
        );
        assert_eq!(
            view(&i, now),
            [
                "#3 Parser loses line numbers [open]",
                "opened by admin +2h; assigned to w01",
                "labels: bug, parser",
                "\nsee test_lines\n",
                "  comment by w02 +2m: mine too",
            ]
        );
        assert_eq!(labels(&i), "issue #3 labels: bug, parser");
        assert_eq!(assigned(&i), "issue #3 is assigned to w01");
        i.labels.clear();
        i.assignee = None;
        assert_eq!(labels(&i), "issue #3 labels: none");
        assert_eq!(assigned(&i), "issue #3 is assigned to nobody");
    }
}
