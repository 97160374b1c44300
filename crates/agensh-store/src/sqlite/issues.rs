//! Issues: open, list, read, comment, label, assign, close and reopen, and the closing of
//! issues a merged pull request names (`closes #N`).
//!
//! Every change and its events are one write job. `issue.opened` is a broadcast; the other
//! events go to the people involved — the author, the assignee (new and previous) and
//! earlier commenters that are workers — never to the one who acted.

use agensh_domain::event::{kinds, NewEvent, Priority};
use agensh_domain::ids::validate_worker_id;
use agensh_domain::issue::{
    self, apply_labels, check_assign, check_close, closed_by_pr, distinct_labels, validate_text,
    Issue, IssueComment, IssueState, NewIssue,
};
use agensh_domain::{Error, Result};
use rusqlite::types::Type;
use rusqlite::{params, Connection, OptionalExtension, Row};
use serde_json::json;

use super::conn::{sql_err, WriteCtx};
use super::workers;
use crate::{AssigneeFilter, IssueQuery};

const ISSUE_COLUMNS: &str =
    "number, title, body, author, state, assignee, created_at, updated_at, closed_at, closed_by, \
     (SELECT count(*) FROM issue_comments c WHERE c.issue = issues.number)";

fn row_to_issue(row: &Row<'_>) -> rusqlite::Result<Issue> {
    let state: String = row.get(4)?;
    let count: i64 = row.get(10)?;
    Ok(Issue {
        number: row.get(0)?,
        title: row.get(1)?,
        body: row.get(2)?,
        author: row.get(3)?,
        state: IssueState::parse(&state)
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(4, Type::Text, Box::new(e)))?,
        labels: Vec::new(),
        assignee: row.get(5)?,
        comment_count: count.max(0) as u64,
        comments: Vec::new(),
        created_at: row.get(6)?,
        updated_at: row.get(7)?,
        closed_at: row.get(8)?,
        closed_by: row.get(9)?,
    })
}

fn unknown_issue(number: i64) -> Error {
    Error::not_found(
        "unknown_issue",
        format!("there is no issue #{number} — list the issues to see their numbers"),
    )
}

fn labels_of(conn: &Connection, number: i64) -> Result<Vec<String>> {
    let mut stmt = conn
        .prepare_cached("SELECT label FROM issue_labels WHERE issue = ?1 ORDER BY label")
        .map_err(sql_err)?;
    let rows = stmt
        .query_map([number], |r| r.get::<_, String>(0))
        .map_err(sql_err)?;
    rows.collect::<rusqlite::Result<_>>().map_err(sql_err)
}

/// An issue with its labels, without its comments.
fn load(conn: &Connection, number: i64) -> Result<Issue> {
    let mut issue = conn
        .prepare_cached(&format!(
            "SELECT {ISSUE_COLUMNS} FROM issues WHERE number = ?1"
        ))
        .and_then(|mut s| s.query_row([number], row_to_issue).optional())
        .map_err(sql_err)?
        .ok_or_else(|| unknown_issue(number))?;
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

/// The workers involved in `issue` — its author, its assignee, `also` and every commenter
/// — but `actor`, each once, in that order. `admin` and `pr#N` have no queue.
fn involved(conn: &Connection, issue: &Issue, also: &[&str], actor: &str) -> Result<Vec<String>> {
    let mut people: Vec<String> = vec![issue.author.clone()];
    people.extend(issue.assignee.clone());
    people.extend(also.iter().map(|s| s.to_string()));
    let mut stmt = conn
        .prepare_cached("SELECT author FROM issue_comments WHERE issue = ?1 ORDER BY id")
        .map_err(sql_err)?;
    let rows = stmt
        .query_map([issue.number], |r| r.get::<_, String>(0))
        .map_err(sql_err)?;
    for r in rows {
        people.push(r.map_err(sql_err)?);
    }
    let mut out: Vec<String> = Vec::new();
    for p in people {
        if p != actor && validate_worker_id(&p).is_ok() && !out.contains(&p) {
            out.push(p);
        }
    }
    Ok(out)
}

/// An event of `kind` from `actor`, to be sent to each worker involved under `key`.
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

/// Sends `e` to each of `to`: normal, but urgent to `urgent` when it is one of them.
fn tell(
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
    conn.prepare_cached(
        "INSERT INTO issues(number, title, body, author, state, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, 'open', ?5, ?5)",
    )
    .and_then(|mut s| s.execute(params![number, new.title, new.body, author, now]))
    .map_err(sql_err)?;
    let labels = distinct_labels(new.labels);
    set_labels(conn, number, &labels)?;
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
    // Everyone hears of a new issue: a broadcast.
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
    for (i, new) in all.iter().enumerate() {
        new.validate().map_err(|e| {
            Error::new(
                e.kind,
                &e.code,
                format!("issue {} (\"{}\"): {}", i + 1, short(&new.title), e.message),
            )
        })?;
    }
    all.into_iter().map(|n| open(ctx, author, n, now)).collect()
}

fn short(s: &str) -> String {
    agensh_domain::ids::truncate_for_message(s)
}

/// Issues newest first, without their comments, as `q` filters them.
pub fn list(conn: &Connection, q: &IssueQuery) -> Result<Vec<Issue>> {
    let (assignee_any, assignee_none, assignee): (bool, bool, Option<&str>) = match &q.assignee {
        None => (true, false, None),
        Some(AssigneeFilter::Nobody) => (false, true, None),
        Some(AssigneeFilter::Worker(w)) => (false, false, Some(w.as_str())),
    };
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
    let rows = stmt
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
            row_to_issue,
        )
        .map_err(sql_err)?;
    let mut out: Vec<Issue> = rows.collect::<rusqlite::Result<_>>().map_err(sql_err)?;
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
            .prepare_cached(
                "SELECT id, author, text, created_at FROM issue_comments WHERE issue = ?1 ORDER BY id",
            )
            .map_err(sql_err)?;
        let rows = stmt
            .query_map([number], |r| {
                Ok(IssueComment {
                    id: r.get(0)?,
                    author: r.get(1)?,
                    text: r.get(2)?,
                    created_at: r.get(3)?,
                })
            })
            .map_err(sql_err)?;
        rows.collect::<rusqlite::Result<_>>().map_err(sql_err)?
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
    let c = IssueComment {
        id: conn.last_insert_rowid(),
        author: author.to_string(),
        text: text.to_string(),
        created_at: now,
    };
    touch(conn, number, now)?;
    let e = event(
        kinds::ISSUE_COMMENTED,
        json!({ "number": number, "title": issue.title, "by": author, "text": text }),
        format!("issue:{number}:comment:{}", c.id),
        author,
    );
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
        workers::ensure_exists(conn, w)?;
    }
    if previous.as_deref() == assignee {
        // Nothing changes: no event.
        return Ok(issue);
    }
    conn.prepare_cached("UPDATE issues SET assignee = ?2, updated_at = ?3 WHERE number = ?1")
        .and_then(|mut s| s.execute(params![number, assignee, now]))
        .map_err(sql_err)?;
    issue.assignee = assignee.map(str::to_string);
    issue.updated_at = now;
    let also: Vec<&str> = previous.iter().map(String::as_str).collect();
    let to = involved(conn, &issue, &also, by)?;
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
    let number = issue.number;
    let (closed_at, closed_by) = match state {
        IssueState::Closed => (Some(now), Some(by.to_string())),
        IssueState::Open => (None, None),
    };
    conn.prepare_cached(
        "UPDATE issues SET state = ?2, closed_at = ?3, closed_by = ?4, updated_at = ?5 WHERE number = ?1",
    )
    .and_then(|mut s| s.execute(params![number, state.as_str(), closed_at, closed_by, now]))
    .map_err(sql_err)?;
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
    let to = involved(conn, &issue, &[], by)?;
    let e = event(kind, payload, format!("issue:{number}:{what}:{now}"), by);
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
        let issue = match load(ctx.conn, n) {
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
        let issue = set_state(ctx, issue, IssueState::Closed, &by, Some(pr), now)?;
        closed.push(issue.number);
    }
    Ok(closed)
}
