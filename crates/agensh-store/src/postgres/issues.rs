//! Issues: open, list, read, comment, label, assign, close and reopen, and the closing of
//! issues a merged pull request names — the rules of `sqlite/issues.rs`, in PostgreSQL.

use agensh_domain::event::{kinds, NewEvent, Priority};
use agensh_domain::ids::validate_worker_id;
use agensh_domain::issue::{
    self, apply_labels, check_assign, check_close, closed_by_pr, distinct_labels, validate_text,
    Issue, IssueComment, IssueState, NewIssue,
};
use agensh_domain::{Error, Result};
use serde_json::json;
use tokio_postgres::Row;

use super::db::{Conn, WriteCtx};
use super::workers;
use crate::{AssigneeFilter, IssueQuery};

const ISSUE_COLUMNS: &str =
    "number, title, body, author, state, assignee, created_at, updated_at, closed_at, closed_by, \
     (SELECT count(*) FROM issue_comments c WHERE c.issue = issues.number)";

fn row_to_issue(row: &Row) -> Result<Issue> {
    let state: String = row.get(4);
    let count: i64 = row.get(10);
    Ok(Issue {
        number: row.get(0),
        title: row.get(1),
        body: row.get(2),
        author: row.get(3),
        state: IssueState::parse(&state)?,
        labels: Vec::new(),
        assignee: row.get(5),
        comment_count: count.max(0) as u64,
        comments: Vec::new(),
        created_at: row.get(6),
        updated_at: row.get(7),
        closed_at: row.get(8),
        closed_by: row.get(9),
    })
}

fn unknown_issue(number: i64) -> Error {
    Error::not_found(
        "unknown_issue",
        format!("there is no issue #{number} — list the issues to see their numbers"),
    )
}

async fn labels_of(conn: &mut Conn, number: i64) -> Result<Vec<String>> {
    let rows = conn
        .query(
            "SELECT label FROM issue_labels WHERE issue = $1 ORDER BY label COLLATE \"C\"",
            &[&number],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

async fn load(conn: &mut Conn, number: i64) -> Result<Issue> {
    let row = conn
        .query_opt(
            &format!("SELECT {ISSUE_COLUMNS} FROM issues WHERE number = $1"),
            &[&number],
        )
        .await?
        .ok_or_else(|| unknown_issue(number))?;
    let mut issue = row_to_issue(&row)?;
    issue.labels = labels_of(conn, number).await?;
    Ok(issue)
}

async fn set_labels(conn: &mut Conn, number: i64, labels: &[String]) -> Result<()> {
    conn.execute("DELETE FROM issue_labels WHERE issue = $1", &[&number])
        .await?;
    let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
    conn.execute(
        "INSERT INTO issue_labels(issue, label) SELECT $1, unnest($2::text[])",
        &[&number, &labels],
    )
    .await?;
    Ok(())
}

/// The workers involved in `issue` — author, assignee, `also`, every commenter — but
/// `actor`, each once, in that order.
async fn involved(
    conn: &mut Conn,
    issue: &Issue,
    also: &[&str],
    actor: &str,
) -> Result<Vec<String>> {
    let mut people: Vec<String> = vec![issue.author.clone()];
    people.extend(issue.assignee.clone());
    people.extend(also.iter().map(|s| s.to_string()));
    let rows = conn
        .query(
            "SELECT author FROM issue_comments WHERE issue = $1 ORDER BY id",
            &[&issue.number],
        )
        .await?;
    people.extend(rows.iter().map(|r| r.get::<_, String>(0)));
    let mut out: Vec<String> = Vec::new();
    for p in people {
        if p != actor && validate_worker_id(&p).is_ok() && !out.contains(&p) {
            out.push(p);
        }
    }
    Ok(out)
}

fn event(kind: &str, payload: serde_json::Value, key: String, actor: &str) -> NewEvent {
    NewEvent {
        kind: kind.into(),
        priority: Priority::Normal,
        payload,
        dedup_key: Some(key),
        source: Some(actor.to_string()),
        target: None,
        except: None,
    }
}

async fn tell(
    ctx: &mut WriteCtx<'_>,
    to: &[String],
    e: NewEvent,
    urgent: Option<&str>,
    now: i64,
) -> Result<()> {
    for w in to {
        let mut one = e.clone();
        if urgent == Some(w.as_str()) {
            one.priority = Priority::Urgent;
        }
        one.target = Some(w.clone());
        ctx.emit(&one, now).await?;
    }
    Ok(())
}

async fn touch(conn: &mut Conn, number: i64, now: i64) -> Result<()> {
    conn.execute(
        "UPDATE issues SET updated_at = $2 WHERE number = $1",
        &[&number, &now],
    )
    .await?;
    Ok(())
}

pub async fn open(ctx: &mut WriteCtx<'_>, author: &str, new: NewIssue, now: i64) -> Result<Issue> {
    new.validate()?;
    ctx.lock().await?;
    let conn = &mut ctx.conn;
    let number: i64 = conn
        .query_one("SELECT coalesce(max(number), 0) + 1 FROM issues", &[])
        .await?
        .get(0);
    conn.execute(
        "INSERT INTO issues(number, title, body, author, state, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, 'open', $5, $5)",
        &[&number, &new.title, &new.body, &author, &now],
    )
    .await?;
    let labels = distinct_labels(new.labels);
    set_labels(conn, number, &labels).await?;
    let out = Issue {
        number,
        title: new.title,
        body: new.body,
        author: author.to_string(),
        state: IssueState::Open,
        labels,
        assignee: None,
        comment_count: 0,
        comments: Vec::new(),
        created_at: now,
        updated_at: now,
        closed_at: None,
        closed_by: None,
    };
    let e = event(
        kinds::ISSUE_OPENED,
        json!({
            "number": number,
            "title": out.title,
            "author": author,
            "labels": out.labels,
        }),
        format!("issue:{number}:opened"),
        author,
    );
    ctx.emit(&e, now).await?;
    Ok(out)
}

pub async fn open_many(
    ctx: &mut WriteCtx<'_>,
    author: &str,
    all: Vec<NewIssue>,
    now: i64,
) -> Result<Vec<Issue>> {
    for (i, new) in all.iter().enumerate() {
        new.validate().map_err(|e| {
            Error::new(
                e.kind,
                &e.code,
                format!(
                    "issue {} (\"{}\"): {}",
                    i + 1,
                    agensh_domain::ids::truncate_for_message(&new.title),
                    e.message
                ),
            )
        })?;
    }
    let mut out = Vec::with_capacity(all.len());
    for n in all {
        out.push(open(ctx, author, n, now).await?);
    }
    Ok(out)
}

pub async fn list(conn: &mut Conn, q: &IssueQuery) -> Result<Vec<Issue>> {
    let (assignee_any, assignee_none, assignee): (bool, bool, Option<&str>) = match &q.assignee {
        None => (true, false, None),
        Some(AssigneeFilter::Nobody) => (false, true, None),
        Some(AssigneeFilter::Worker(w)) => (false, false, Some(w.as_str())),
    };
    let sql = format!(
        "SELECT {ISSUE_COLUMNS} FROM issues \
         WHERE ($1::text IS NULL OR state = $1) \
           AND ($2::text IS NULL OR EXISTS (SELECT 1 FROM issue_labels l WHERE l.issue = issues.number AND l.label = $2)) \
           AND ($3 OR ($4 AND assignee IS NULL) OR assignee = $5) \
           AND ($6::bigint IS NULL OR number < $6) \
         ORDER BY number DESC LIMIT $7"
    );
    let limit = i64::try_from(q.limit).unwrap_or(i64::MAX);
    let rows = conn
        .query(
            &sql,
            &[
                &q.state.map(IssueState::as_str),
                &q.label,
                &assignee_any,
                &assignee_none,
                &assignee,
                &q.before,
                &limit,
            ],
        )
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let mut i = row_to_issue(r)?;
        i.labels = labels_of(conn, i.number).await?;
        out.push(i);
    }
    Ok(out)
}

/// One issue with its labels and comments, oldest first (the caller reads it in one
/// snapshot).
pub async fn get(conn: &mut Conn, number: i64) -> Result<Issue> {
    let mut issue = load(conn, number).await?;
    let rows = conn
        .query(
            "SELECT id, author, text, created_at FROM issue_comments WHERE issue = $1 ORDER BY id",
            &[&number],
        )
        .await?;
    issue.comments = rows
        .iter()
        .map(|r| IssueComment {
            id: r.get(0),
            author: r.get(1),
            text: r.get(2),
            created_at: r.get(3),
        })
        .collect();
    Ok(issue)
}

pub async fn comment(
    ctx: &mut WriteCtx<'_>,
    number: i64,
    author: &str,
    text: &str,
    now: i64,
) -> Result<IssueComment> {
    validate_text("comment", text)?;
    ctx.lock().await?;
    let conn = &mut ctx.conn;
    let issue = load(conn, number).await?;
    let to = involved(conn, &issue, &[], author).await?;
    let id: i64 = conn
        .query_one(
            "INSERT INTO issue_comments(id, issue, author, text, created_at) \
             SELECT coalesce(max(id), 0) + 1, $1, $2, $3, $4 FROM issue_comments RETURNING id",
            &[&number, &author, &text, &now],
        )
        .await?
        .get(0);
    let c = IssueComment {
        id,
        author: author.to_string(),
        text: text.to_string(),
        created_at: now,
    };
    touch(conn, number, now).await?;
    let e = event(
        kinds::ISSUE_COMMENTED,
        json!({ "number": number, "title": issue.title, "by": author, "text": text }),
        format!("issue:{number}:comment:{}", c.id),
        author,
    );
    tell(ctx, &to, e, None, now).await?;
    Ok(c)
}

pub async fn label(
    ctx: &mut WriteCtx<'_>,
    number: i64,
    add: &[String],
    remove: &[String],
    now: i64,
) -> Result<Issue> {
    ctx.lock().await?;
    let conn = &mut ctx.conn;
    let mut issue = load(conn, number).await?;
    let labels = apply_labels(&issue.labels, add, remove)?;
    if labels != issue.labels {
        set_labels(conn, number, &labels).await?;
        touch(conn, number, now).await?;
        issue.labels = labels;
        issue.updated_at = now;
    }
    Ok(issue)
}

pub async fn assign(
    ctx: &mut WriteCtx<'_>,
    number: i64,
    by: &str,
    admin_rights: bool,
    assignee: Option<&str>,
    now: i64,
) -> Result<Issue> {
    ctx.lock().await?;
    let conn = &mut ctx.conn;
    let mut issue = load(conn, number).await?;
    let previous = issue.assignee.clone();
    check_assign(
        number,
        by,
        admin_rights,
        issue.state,
        previous.as_deref(),
        assignee,
    )?;
    if let Some(w) = assignee {
        workers::ensure_exists(conn, w).await?;
    }
    if previous.as_deref() == assignee {
        return Ok(issue);
    }
    conn.execute(
        "UPDATE issues SET assignee = $2, updated_at = $3 WHERE number = $1",
        &[&number, &assignee, &now],
    )
    .await?;
    issue.assignee = assignee.map(str::to_string);
    issue.updated_at = now;
    let also: Vec<&str> = previous.iter().map(String::as_str).collect();
    let to = involved(conn, &issue, &also, by).await?;
    let e = event(
        kinds::ISSUE_ASSIGNED,
        json!({
            "number": number,
            "title": issue.title,
            "by": by,
            "assignee": assignee,
            "previous": previous,
        }),
        format!("issue:{number}:assigned:{now}:{}", assignee.unwrap_or("-")),
        by,
    );
    tell(ctx, &to, e, assignee.filter(|w| *w != by), now).await?;
    Ok(issue)
}

async fn set_state(
    ctx: &mut WriteCtx<'_>,
    mut issue: Issue,
    state: IssueState,
    by: &str,
    pr: Option<i64>,
    now: i64,
) -> Result<Issue> {
    let conn = &mut ctx.conn;
    let number = issue.number;
    let (closed_at, closed_by) = match state {
        IssueState::Closed => (Some(now), Some(by.to_string())),
        IssueState::Open => (None, None),
    };
    conn.execute(
        "UPDATE issues SET state = $2, closed_at = $3, closed_by = $4, updated_at = $5 WHERE number = $1",
        &[&number, &state.as_str(), &closed_at, &closed_by, &now],
    )
    .await?;
    issue.state = state;
    issue.closed_at = closed_at;
    issue.closed_by = closed_by;
    issue.updated_at = now;
    let (kind, what) = match state {
        IssueState::Closed => (kinds::ISSUE_CLOSED, "closed"),
        IssueState::Open => (kinds::ISSUE_REOPENED, "reopened"),
    };
    let mut payload = json!({ "number": number, "title": issue.title, "by": by });
    if let Some(pr) = pr {
        payload["pr"] = json!(pr);
    }
    let to = involved(conn, &issue, &[], by).await?;
    let e = event(kind, payload, format!("issue:{number}:{what}:{now}"), by);
    tell(ctx, &to, e, None, now).await?;
    Ok(issue)
}

pub async fn close(
    ctx: &mut WriteCtx<'_>,
    number: i64,
    by: &str,
    admin_rights: bool,
    now: i64,
) -> Result<Issue> {
    ctx.lock().await?;
    let issue = load(ctx.conn, number).await?;
    check_close(&issue, by, admin_rights, "close")?;
    set_state(ctx, issue, IssueState::Closed, by, None, now).await
}

pub async fn reopen(
    ctx: &mut WriteCtx<'_>,
    number: i64,
    by: &str,
    admin_rights: bool,
    now: i64,
) -> Result<Issue> {
    ctx.lock().await?;
    let issue = load(ctx.conn, number).await?;
    check_close(&issue, by, admin_rights, "reopen")?;
    set_state(ctx, issue, IssueState::Open, by, None, now).await
}

/// Closes every open issue that merged PR `pr` names with `closes #N` in `text`, as
/// `pr#<pr>`, in the merge's transaction. Returns the numbers closed.
pub async fn close_by_pr(
    ctx: &mut WriteCtx<'_>,
    pr: i64,
    text: &str,
    now: i64,
) -> Result<Vec<i64>> {
    let by = closed_by_pr(pr);
    let mut closed = Vec::new();
    for n in issue::closes_refs(text) {
        let issue = match load(ctx.conn, n).await {
            Ok(i) => i,
            Err(e) if e.code == "unknown_issue" => {
                tracing::info!("PR #{pr} says it closes issue #{n}, which does not exist: ignored");
                continue;
            }
            Err(e) => return Err(e),
        };
        if issue.state == IssueState::Closed {
            tracing::info!("PR #{pr} says it closes issue #{n}, which is closed already: ignored");
            continue;
        }
        let issue = set_state(ctx, issue, IssueState::Closed, &by, Some(pr), now).await?;
        closed.push(issue.number);
    }
    Ok(closed)
}
