//! Issues: open, list, read, comment, label, assign, close and reopen, and the closing of
//! issues a merged pull request names — the rules of `sqlite/issues.rs`, in PostgreSQL.

use agensh_domain::event::NewEvent;
use agensh_domain::issue::{
    self, apply_labels, check_close, closed_by_pr, validate_text, Issue, IssueComment, IssueState,
    NewIssue,
};
use agensh_domain::Result;

use super::db::{Conn, WriteCtx};
use super::workers;
use crate::common::events::to_each;
use crate::common::issues as rules;
use crate::common::rows::{self, COMMENT_COLUMNS, ISSUE_COLUMNS};
use crate::IssueQuery;

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
        .ok_or_else(|| rules::unknown_issue(number))?;
    let mut issue = rows::issue(&row)?;
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

/// The workers involved in `issue` but `actor` ([`rules::involved`]), its commenters read
/// here.
async fn involved(
    conn: &mut Conn,
    issue: &Issue,
    also: &[&str],
    actor: &str,
) -> Result<Vec<String>> {
    let found = conn
        .query(
            "SELECT author FROM issue_comments WHERE issue = $1 ORDER BY id",
            &[&issue.number],
        )
        .await?;
    let commenters = found.iter().map(|r| r.get::<_, String>(0));
    Ok(rules::involved(issue, also, commenters, actor))
}

/// Sends `e` to each of `to`: normal, but urgent to `urgent` when it is one of them.
async fn tell(
    ctx: &mut WriteCtx<'_>,
    to: &[String],
    e: NewEvent,
    urgent: Option<&str>,
    now: i64,
) -> Result<()> {
    for one in to_each(to, &e, urgent) {
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
    let (out, e) = rules::opened(number, author, new, now);
    conn.execute(
        "INSERT INTO issues(number, title, body, author, state, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, 'open', $5, $5)",
        &[&number, &out.title, &out.body, &author, &now],
    )
    .await?;
    set_labels(conn, number, &out.labels).await?;
    ctx.emit(&e, now).await?;
    Ok(out)
}

pub async fn open_many(
    ctx: &mut WriteCtx<'_>,
    author: &str,
    all: Vec<NewIssue>,
    now: i64,
) -> Result<Vec<Issue>> {
    rules::check_all(&all)?;
    let mut out = Vec::with_capacity(all.len());
    for n in all {
        out.push(open(ctx, author, n, now).await?);
    }
    Ok(out)
}

pub async fn list(conn: &mut Conn, q: &IssueQuery) -> Result<Vec<Issue>> {
    let (assignee_any, assignee_none, assignee) = rules::assignee_params(&q.assignee);
    let sql = format!(
        "SELECT {ISSUE_COLUMNS} FROM issues \
         WHERE ($1::text IS NULL OR state = $1) \
           AND ($2::text IS NULL OR EXISTS (SELECT 1 FROM issue_labels l WHERE l.issue = issues.number AND l.label = $2)) \
           AND ($3 OR ($4 AND assignee IS NULL) OR assignee = $5) \
           AND ($6::bigint IS NULL OR number < $6) \
         ORDER BY number DESC LIMIT $7"
    );
    let limit = i64::try_from(q.limit).unwrap_or(i64::MAX);
    let found = conn
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
    let mut out = Vec::with_capacity(found.len());
    for r in &found {
        let mut i = rows::issue(r)?;
        i.labels = labels_of(conn, i.number).await?;
        out.push(i);
    }
    Ok(out)
}

/// One issue with its labels and comments, oldest first (the caller reads it in one
/// snapshot).
pub async fn get(conn: &mut Conn, number: i64) -> Result<Issue> {
    let mut issue = load(conn, number).await?;
    let found = conn
        .query(
            &format!("SELECT {COMMENT_COLUMNS} FROM issue_comments WHERE issue = $1 ORDER BY id"),
            &[&number],
        )
        .await?;
    issue.comments = found
        .iter()
        .map(rows::issue_comment)
        .collect::<Result<_>>()?;
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
    let (c, e) = rules::commented(&issue, id, author, text, now);
    touch(conn, number, now).await?;
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
    let previous = rules::check_assignment(&issue, by, admin_rights, assignee)?;
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
    let e = rules::assigned(&mut issue, by, assignee, &previous, now);
    let also: Vec<&str> = previous.iter().map(String::as_str).collect();
    let to = involved(conn, &issue, &also, by).await?;
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
    let e = rules::set_state(&mut issue, state, by, pr, now);
    conn.execute(
        "UPDATE issues SET state = $2, closed_at = $3, closed_by = $4, updated_at = $5 WHERE number = $1",
        &[&issue.number, &state.as_str(), &issue.closed_at, &issue.closed_by, &now],
    )
    .await?;
    let to = involved(conn, &issue, &[], by).await?;
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
        let Some(issue) = rules::closed_by_pr(pr, n, load(ctx.conn, n).await)? else {
            continue;
        };
        let issue = set_state(ctx, issue, IssueState::Closed, &by, Some(pr), now).await?;
        closed.push(issue.number);
    }
    Ok(closed)
}
