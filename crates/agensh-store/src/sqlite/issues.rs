//! Issues: open, list, read, comment, label, assign, close and reopen, and the closing of
//! issues a merged pull request names (`closes #N`).
//!
//! Every change and its events are one write job; the rules and the events, and who hears
//! of them, are `common/issues.rs`'s.

use agensh_domain::event::NewEvent;
use agensh_domain::issue::{
    self, apply_labels, check_close, closed_by_pr, validate_text, Issue, IssueComment, IssueState,
    NewIssue,
};
use agensh_domain::Result;
use rusqlite::{params, Connection, OptionalExtension};

use super::conn::{sql_err, WriteCtx};
use super::workers;
use crate::common::events::to_each;
use crate::common::issues as rules;
use crate::common::rows::{self, COMMENT_COLUMNS, ISSUE_COLUMNS};
use crate::IssueQuery;

fn labels_of(conn: &Connection, number: i64) -> Result<Vec<String>> {
    let mut stmt = conn
        .prepare_cached("SELECT label FROM issue_labels WHERE issue = ?1 ORDER BY label")
        .map_err(sql_err)?;
    let found = stmt
        .query_map([number], |r| r.get::<_, String>(0))
        .map_err(sql_err)?;
    found.collect::<rusqlite::Result<_>>().map_err(sql_err)
}

/// An issue with its labels, without its comments.
fn load(conn: &Connection, number: i64) -> Result<Issue> {
    let mut issue = conn
        .prepare_cached(&format!(
            "SELECT {ISSUE_COLUMNS} FROM issues WHERE number = ?1"
        ))
        .and_then(|mut s| s.query_row([number], |r| rows::issue(r)).optional())
        .map_err(sql_err)?
        .ok_or_else(|| rules::unknown_issue(number))?;
    issue.labels = labels_of(conn, number)?;
    Ok(issue)
}

fn set_labels(conn: &Connection, number: i64, labels: &[String]) -> Result<()> {
    conn.prepare_cached("DELETE FROM issue_labels WHERE issue = ?1")
        .and_then(|mut s| s.execute([number]))
        .map_err(sql_err)?;
    let mut stmt = conn
        .prepare_cached("INSERT INTO issue_labels(issue, label) VALUES (?1, ?2)")
        .map_err(sql_err)?;
    for l in labels {
        stmt.execute(params![number, l]).map_err(sql_err)?;
    }
    Ok(())
}

/// The workers involved in `issue` but `actor` ([`rules::involved`]), its commenters read
/// here.
fn involved(conn: &Connection, issue: &Issue, also: &[&str], actor: &str) -> Result<Vec<String>> {
    let mut stmt = conn
        .prepare_cached("SELECT author FROM issue_comments WHERE issue = ?1 ORDER BY id")
        .map_err(sql_err)?;
    let commenters = stmt
        .query_map([issue.number], |r| r.get::<_, String>(0))
        .map_err(sql_err)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(sql_err)?;
    Ok(rules::involved(issue, also, commenters, actor))
}

/// Sends `e` to each of `to`: normal, but urgent to `urgent` when it is one of them.
fn tell(
    ctx: &mut WriteCtx<'_>,
    to: &[String],
    e: NewEvent,
    urgent: Option<&str>,
    now: i64,
) -> Result<()> {
    for one in to_each(to, &e, urgent) {
        ctx.emit(&one, now)?;
    }
    Ok(())
}

fn touch(conn: &Connection, number: i64, now: i64) -> Result<()> {
    conn.prepare_cached("UPDATE issues SET updated_at = ?2 WHERE number = ?1")
        .and_then(|mut s| s.execute(params![number, now]))
        .map_err(sql_err)?;
    Ok(())
}

pub fn open(ctx: &mut WriteCtx<'_>, author: &str, new: NewIssue, now: i64) -> Result<Issue> {
    new.validate()?;
    let conn = ctx.conn;
    let number: i64 = conn
        .query_row("SELECT ifnull(max(number), 0) + 1 FROM issues", [], |r| {
            r.get(0)
        })
        .map_err(sql_err)?;
    let (out, e) = rules::opened(number, author, new, now);
    conn.prepare_cached(
        "INSERT INTO issues(number, title, body, author, state, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, 'open', ?5, ?5)",
    )
    .and_then(|mut s| s.execute(params![number, out.title, out.body, author, now]))
    .map_err(sql_err)?;
    set_labels(conn, number, &out.labels)?;
    ctx.emit(&e, now)?;
    Ok(out)
}

/// Opens every issue of `all` in order, or none (the first bad one is named by its place).
pub fn open_many(
    ctx: &mut WriteCtx<'_>,
    author: &str,
    all: Vec<NewIssue>,
    now: i64,
) -> Result<Vec<Issue>> {
    rules::check_all(&all)?;
    all.into_iter().map(|n| open(ctx, author, n, now)).collect()
}

/// Issues newest first, without their comments, as `q` filters them.
pub fn list(conn: &Connection, q: &IssueQuery) -> Result<Vec<Issue>> {
    let (assignee_any, assignee_none, assignee) = rules::assignee_params(&q.assignee);
    let sql = format!(
        "SELECT {ISSUE_COLUMNS} FROM issues \
         WHERE (?1 IS NULL OR state = ?1) \
           AND (?2 IS NULL OR EXISTS (SELECT 1 FROM issue_labels l WHERE l.issue = issues.number AND l.label = ?2)) \
           AND (?3 OR (?4 AND assignee IS NULL) OR assignee = ?5) \
           AND (?6 IS NULL OR number < ?6) \
         ORDER BY number DESC LIMIT ?7"
    );
    let limit = i64::try_from(q.limit).unwrap_or(i64::MAX);
    let mut stmt = conn.prepare_cached(&sql).map_err(sql_err)?;
    let found = stmt
        .query_map(
            params![
                q.state.map(IssueState::as_str),
                q.label,
                assignee_any,
                assignee_none,
                assignee,
                q.before,
                limit
            ],
            |r| rows::issue(r),
        )
        .map_err(sql_err)?;
    let mut out: Vec<Issue> = found.collect::<rusqlite::Result<_>>().map_err(sql_err)?;
    for i in &mut out {
        i.labels = labels_of(conn, i.number)?;
    }
    Ok(out)
}

/// One issue with its labels and comments (oldest first), from one snapshot.
pub fn get(conn: &Connection, number: i64) -> Result<Issue> {
    let tx = conn.unchecked_transaction().map_err(sql_err)?;
    let mut issue = load(&tx, number)?;
    issue.comments = {
        let mut stmt = tx
            .prepare_cached(&format!(
                "SELECT {COMMENT_COLUMNS} FROM issue_comments WHERE issue = ?1 ORDER BY id"
            ))
            .map_err(sql_err)?;
        let found = stmt
            .query_map([number], |r| rows::issue_comment(r))
            .map_err(sql_err)?;
        found.collect::<rusqlite::Result<_>>().map_err(sql_err)?
    };
    Ok(issue)
}

pub fn comment(
    ctx: &mut WriteCtx<'_>,
    number: i64,
    author: &str,
    text: &str,
    now: i64,
) -> Result<IssueComment> {
    validate_text("comment", text)?;
    let conn = ctx.conn;
    let issue = load(conn, number)?;
    // Those who commented before hear of it; the commenter does not.
    let to = involved(conn, &issue, &[], author)?;
    conn.prepare_cached(
        "INSERT INTO issue_comments(issue, author, text, created_at) VALUES (?1, ?2, ?3, ?4)",
    )
    .and_then(|mut s| s.execute(params![number, author, text, now]))
    .map_err(sql_err)?;
    let (c, e) = rules::commented(&issue, conn.last_insert_rowid(), author, text, now);
    touch(conn, number, now)?;
    tell(ctx, &to, e, None, now)?;
    Ok(c)
}

pub fn label(
    ctx: &mut WriteCtx<'_>,
    number: i64,
    add: &[String],
    remove: &[String],
    now: i64,
) -> Result<Issue> {
    let conn = ctx.conn;
    let mut issue = load(conn, number)?;
    let labels = apply_labels(&issue.labels, add, remove)?;
    if labels != issue.labels {
        set_labels(conn, number, &labels)?;
        touch(conn, number, now)?;
        issue.labels = labels;
        issue.updated_at = now;
    }
    Ok(issue)
}

pub fn assign(
    ctx: &mut WriteCtx<'_>,
    number: i64,
    by: &str,
    admin_rights: bool,
    assignee: Option<&str>,
    now: i64,
) -> Result<Issue> {
    let conn = ctx.conn;
    let mut issue = load(conn, number)?;
    let previous = rules::check_assignment(&issue, by, admin_rights, assignee)?;
    if let Some(w) = assignee {
        workers::ensure_exists(conn, w)?;
    }
    if previous.as_deref() == assignee {
        // Nothing changes: no event.
        return Ok(issue);
    }
    conn.prepare_cached("UPDATE issues SET assignee = ?2, updated_at = ?3 WHERE number = ?1")
        .and_then(|mut s| s.execute(params![number, assignee, now]))
        .map_err(sql_err)?;
    let e = rules::assigned(&mut issue, by, assignee, &previous, now);
    let also: Vec<&str> = previous.iter().map(String::as_str).collect();
    let to = involved(conn, &issue, &also, by)?;
    // Someone else gave this worker the issue: it should hear at once.
    tell(ctx, &to, e, assignee.filter(|w| *w != by), now)?;
    Ok(issue)
}

/// Closes or reopens (`state`) an issue as `by` after `check` allowed it, and tells those
/// involved. `pr` is the merged PR that closed it, if one did.
fn set_state(
    ctx: &mut WriteCtx<'_>,
    mut issue: Issue,
    state: IssueState,
    by: &str,
    pr: Option<i64>,
    now: i64,
) -> Result<Issue> {
    let conn = ctx.conn;
    let e = rules::set_state(&mut issue, state, by, pr, now);
    conn.prepare_cached(
        "UPDATE issues SET state = ?2, closed_at = ?3, closed_by = ?4, updated_at = ?5 WHERE number = ?1",
    )
    .and_then(|mut s| {
        s.execute(params![
            issue.number,
            state.as_str(),
            issue.closed_at,
            issue.closed_by,
            now
        ])
    })
    .map_err(sql_err)?;
    let to = involved(conn, &issue, &[], by)?;
    tell(ctx, &to, e, None, now)?;
    Ok(issue)
}

pub fn close(
    ctx: &mut WriteCtx<'_>,
    number: i64,
    by: &str,
    admin_rights: bool,
    now: i64,
) -> Result<Issue> {
    let issue = load(ctx.conn, number)?;
    check_close(&issue, by, admin_rights, "close")?;
    set_state(ctx, issue, IssueState::Closed, by, None, now)
}

pub fn reopen(
    ctx: &mut WriteCtx<'_>,
    number: i64,
    by: &str,
    admin_rights: bool,
    now: i64,
) -> Result<Issue> {
    let issue = load(ctx.conn, number)?;
    check_close(&issue, by, admin_rights, "reopen")?;
    set_state(ctx, issue, IssueState::Open, by, None, now)
}

/// Closes every open issue that merged PR `pr` names with `closes #N` in `text` (its title
/// and body), as `pr#<pr>`: the events come from the PR, so everyone involved hears it —
/// the worker that shipped the PR too. A number with no issue, or an issue already closed,
/// is left alone and logged. Returns the numbers closed.
pub fn close_by_pr(ctx: &mut WriteCtx<'_>, pr: i64, text: &str, now: i64) -> Result<Vec<i64>> {
    let by = closed_by_pr(pr);
    let mut closed = Vec::new();
    for n in issue::closes_refs(text) {
        if let Some(issue) = rules::closed_by_pr(pr, n, load(ctx.conn, n))? {
            let issue = set_state(ctx, issue, IssueState::Closed, &by, Some(pr), now)?;
            closed.push(issue.number);
        }
    }
    Ok(closed)
}
