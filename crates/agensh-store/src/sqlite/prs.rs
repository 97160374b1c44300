//! Pull requests: open, review, comment, close, and the record of a merge.
//!
//! The store keeps the PR's state and emits its events; the merge itself (git) is done
//! by the hub, which then calls [`mark_merged`] or [`merge_failed`].

use agensh_domain::event::{kinds, NewEvent, Priority};
use agensh_domain::ids::ADMIN;
use agensh_domain::pr::{
    validate_text, Comment, NewPr, PrState, PullRequest, Review, Verdict, BASE,
};
use agensh_domain::{Error, Result};
use rusqlite::types::Type;
use rusqlite::{params, Connection, OptionalExtension, Row};
use serde_json::json;

use super::conn::{sql_err, WriteCtx};

const PR_COLUMNS: &str = "number, author, branch, base, title, body, state, created_at, updated_at, closed_by, merge_commit";

/// Turns a domain parse error on column `idx` into a rusqlite conversion error.
fn bad_column(idx: usize, e: Error) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, Box::new(e))
}

fn row_to_pr(row: &Row<'_>) -> rusqlite::Result<PullRequest> {
    let state: String = row.get(6)?;
    Ok(PullRequest {
        number: row.get(0)?,
        author: row.get(1)?,
        branch: row.get(2)?,
        base: row.get(3)?,
        title: row.get(4)?,
        body: row.get(5)?,
        state: PrState::parse(&state).map_err(|e| bad_column(6, e))?,
        created_at: row.get(7)?,
        updated_at: row.get(8)?,
        closed_by: row.get(9)?,
        merge_commit: row.get(10)?,
        reviews: Vec::new(),
        comments: Vec::new(),
    })
}

fn row_to_review(row: &Row<'_>) -> rusqlite::Result<Review> {
    let verdict: String = row.get(2)?;
    Ok(Review {
        id: row.get(0)?,
        author: row.get(1)?,
        verdict: Verdict::parse(&verdict).map_err(|e| bad_column(2, e))?,
        text: row.get(3)?,
        created_at: row.get(4)?,
        commit: row.get(5)?,
    })
}

fn row_to_comment(row: &Row<'_>) -> rusqlite::Result<Comment> {
    Ok(Comment {
        id: row.get(0)?,
        author: row.get(1)?,
        text: row.get(2)?,
        created_at: row.get(3)?,
    })
}

fn unknown_pr(number: i64) -> Error {
    Error::not_found(
        "unknown_pr",
        format!("there is no PR #{number} — `agensh pr list` shows them"),
    )
}

/// The refusal for acting on a PR that is merged or closed; `action` is a past participle.
fn not_open(pr: &PullRequest, action: &str) -> Error {
    Error::conflict(
        "pr_not_open",
        format!(
            "PR #{} is {}, so it cannot be {action} — open a new PR for further changes",
            pr.number,
            pr.state.as_str()
        ),
    )
}

/// A PR without its reviews and comments.
fn load(conn: &Connection, number: i64) -> Result<PullRequest> {
    conn.prepare_cached(&format!("SELECT {PR_COLUMNS} FROM prs WHERE number = ?1"))
        .and_then(|mut s| s.query_row([number], row_to_pr).optional())
        .map_err(sql_err)?
        .ok_or_else(|| unknown_pr(number))
}

/// Stores `event` and hands it to the writer to publish after the commit.
fn emit(ctx: &mut WriteCtx<'_>, event: NewEvent, now: i64) -> Result<()> {
    ctx.emit(&event, now).map(drop)
}

fn broadcast(kind: &str, payload: serde_json::Value, key: String, source: &str) -> NewEvent {
    NewEvent {
        kind: kind.into(),
        priority: Priority::Normal,
        payload,
        dedup_key: Some(key),
        source: Some(source.to_string()),
        target: None,
        except: None,
    }
}

fn direct_urgent(
    kind: &str,
    payload: serde_json::Value,
    key: String,
    source: &str,
    to: &str,
) -> NewEvent {
    NewEvent {
        kind: kind.into(),
        priority: Priority::Urgent,
        payload,
        dedup_key: Some(key),
        source: Some(source.to_string()),
        target: Some(to.to_string()),
        except: None,
    }
}

fn touch(conn: &Connection, number: i64, now: i64) -> Result<()> {
    conn.prepare_cached("UPDATE prs SET updated_at = ?2 WHERE number = ?1")
        .and_then(|mut s| s.execute(params![number, now]))
        .map_err(sql_err)?;
    Ok(())
}

pub fn open(ctx: &mut WriteCtx<'_>, author: &str, pr: NewPr, now: i64) -> Result<PullRequest> {
    pr.validate(author)?;
    let conn = ctx.conn;
    let existing: Option<i64> = conn
        .prepare_cached("SELECT number FROM prs WHERE branch = ?1 AND state = 'open'")
        .and_then(|mut s| s.query_row([&pr.branch], |r| r.get(0)).optional())
        .map_err(sql_err)?;
    if let Some(n) = existing {
        return Err(Error::conflict(
            "pr_exists",
            format!(
                "branch {} already has an open PR #{n} — push more commits to the branch instead",
                pr.branch
            ),
        ));
    }
    let number: i64 = conn
        .query_row("SELECT ifnull(max(number), 0) + 1 FROM prs", [], |r| {
            r.get(0)
        })
        .map_err(sql_err)?;
    conn.prepare_cached(
        "INSERT INTO prs(number, author, branch, base, title, body, state, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'open', ?7, ?7)",
    )
    .and_then(|mut s| {
        s.execute(params![
            number, author, pr.branch, BASE, pr.title, pr.body, now
        ])
    })
    .map_err(sql_err)?;
    let out = PullRequest {
        number,
        author: author.to_string(),
        branch: pr.branch,
        base: BASE.to_string(),
        title: pr.title,
        body: pr.body,
        state: PrState::Open,
        created_at: now,
        updated_at: now,
        closed_by: None,
        merge_commit: None,
        reviews: Vec::new(),
        comments: Vec::new(),
    };
    emit(
        ctx,
        broadcast(
            kinds::PR_OPENED,
            json!({
                "number": number,
                "author": out.author,
                "branch": out.branch,
                "title": out.title,
            }),
            format!("pr:{number}:opened"),
            author,
        ),
        now,
    )?;
    Ok(out)
}

/// PRs newest first, without their reviews and comments.
pub fn list(
    conn: &Connection,
    state: Option<PrState>,
    author: Option<&str>,
    limit: usize,
) -> Result<Vec<PullRequest>> {
    let sql = format!(
        "SELECT {PR_COLUMNS} FROM prs WHERE (?1 IS NULL OR state = ?1) AND (?2 IS NULL OR author = ?2) \
         ORDER BY number DESC LIMIT ?3"
    );
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut stmt = conn.prepare_cached(&sql).map_err(sql_err)?;
    let rows = stmt
        .query_map(
            params![state.map(PrState::as_str), author, limit],
            row_to_pr,
        )
        .map_err(sql_err)?;
    rows.collect::<rusqlite::Result<_>>().map_err(sql_err)
}

/// One PR with its reviews and comments, oldest first, read from one snapshot.
pub fn get(conn: &Connection, number: i64) -> Result<PullRequest> {
    let tx = conn.unchecked_transaction().map_err(sql_err)?;
    let mut pr = load(&tx, number)?;
    pr.reviews = {
        let mut stmt = tx
            .prepare_cached(
                "SELECT id, author, verdict, text, created_at, commit_id FROM pr_reviews WHERE pr = ?1 ORDER BY id",
            )
            .map_err(sql_err)?;
        let rows = stmt.query_map([number], row_to_review).map_err(sql_err)?;
        rows.collect::<rusqlite::Result<_>>().map_err(sql_err)?
    };
    pr.comments = {
        let mut stmt = tx
            .prepare_cached(
                "SELECT id, author, text, created_at FROM pr_comments WHERE pr = ?1 ORDER BY id",
            )
            .map_err(sql_err)?;
        let rows = stmt.query_map([number], row_to_comment).map_err(sql_err)?;
        rows.collect::<rusqlite::Result<_>>().map_err(sql_err)?
    };
    Ok(pr)
}

pub fn review(
    ctx: &mut WriteCtx<'_>,
    number: i64,
    reviewer: &str,
    verdict: Verdict,
    text: &str,
    commit: Option<&str>,
    now: i64,
) -> Result<Review> {
    let conn = ctx.conn;
    let pr = load(conn, number)?;
    if pr.state != PrState::Open {
        return Err(not_open(&pr, "reviewed"));
    }
    if pr.author == reviewer {
        return Err(Error::invalid(
            "own_pr",
            "you cannot review your own PR — ask a peer to review it",
        ));
    }
    validate_text("review", text)?;
    conn.prepare_cached(
        "INSERT INTO pr_reviews(pr, author, verdict, text, created_at, commit_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .and_then(|mut s| s.execute(params![number, reviewer, verdict.as_str(), text, now, commit]))
    .map_err(sql_err)?;
    let review = Review {
        id: conn.last_insert_rowid(),
        author: reviewer.to_string(),
        verdict,
        text: text.to_string(),
        created_at: now,
        commit: commit.map(String::from),
    };
    touch(conn, number, now)?;
    let key = format!("pr:{number}:review:{}", review.id);
    let mut everyone = broadcast(
        kinds::PR_REVIEWED,
        json!({
            "number": number,
            "title": pr.title,
            "author": pr.author,
            "reviewer": reviewer,
            "verdict": verdict,
        }),
        key.clone(),
        reviewer,
    );
    // The author gets its own, urgent version below.
    everyone.except = Some(pr.author.clone());
    emit(ctx, everyone, now)?;
    emit(
        ctx,
        direct_urgent(
            kinds::PR_REVIEW,
            json!({
                "number": number,
                "title": pr.title,
                "reviewer": reviewer,
                "verdict": verdict,
                "text": text,
            }),
            key,
            reviewer,
            &pr.author,
        ),
        now,
    )?;
    Ok(review)
}

pub fn comment(
    ctx: &mut WriteCtx<'_>,
    number: i64,
    author: &str,
    text: &str,
    now: i64,
) -> Result<Comment> {
    let conn = ctx.conn;
    let pr = load(conn, number)?;
    validate_text("comment", text)?;
    conn.prepare_cached(
        "INSERT INTO pr_comments(pr, author, text, created_at) VALUES (?1, ?2, ?3, ?4)",
    )
    .and_then(|mut s| s.execute(params![number, author, text, now]))
    .map_err(sql_err)?;
    let c = Comment {
        id: conn.last_insert_rowid(),
        author: author.to_string(),
        text: text.to_string(),
        created_at: now,
    };
    touch(conn, number, now)?;
    emit(
        ctx,
        broadcast(
            kinds::PR_COMMENTED,
            json!({
                "number": number,
                "title": pr.title,
                "author": pr.author,
                "by": author,
                "text": text,
            }),
            format!("pr:{number}:comment:{}", c.id),
            author,
        ),
        now,
    )?;
    Ok(c)
}

pub fn close(ctx: &mut WriteCtx<'_>, number: i64, by: &str, now: i64) -> Result<PullRequest> {
    let conn = ctx.conn;
    let mut pr = load(conn, number)?;
    if pr.state != PrState::Open {
        return Err(not_open(&pr, "closed"));
    }
    if by != pr.author && by != ADMIN {
        return Err(Error::forbidden(
            "not_your_pr",
            format!(
                "PR #{number} belongs to {}; only its author or the admin may close it — comment on it or message {} instead",
                pr.author, pr.author
            ),
        ));
    }
    conn.prepare_cached(
        "UPDATE prs SET state = 'closed', closed_by = ?2, updated_at = ?3 WHERE number = ?1",
    )
    .and_then(|mut s| s.execute(params![number, by, now]))
    .map_err(sql_err)?;
    pr.state = PrState::Closed;
    pr.closed_by = Some(by.to_string());
    pr.updated_at = now;
    emit(
        ctx,
        broadcast(
            kinds::PR_CLOSED,
            json!({
                "number": number,
                "title": pr.title,
                "author": pr.author,
                "branch": pr.branch,
                "closed_by": by,
            }),
            format!("pr:{number}:closed"),
            by,
        ),
        now,
    )?;
    Ok(pr)
}

pub fn mark_merged(
    ctx: &mut WriteCtx<'_>,
    number: i64,
    by: &str,
    merge_commit: &str,
    main_moved: bool,
    now: i64,
) -> Result<PullRequest> {
    let conn = ctx.conn;
    let mut pr = load(conn, number)?;
    if pr.state != PrState::Open {
        return Err(not_open(&pr, "merged"));
    }
    conn.prepare_cached(
        "UPDATE prs SET state = 'merged', closed_by = ?2, merge_commit = ?3, updated_at = ?4 WHERE number = ?1",
    )
    .and_then(|mut s| s.execute(params![number, by, merge_commit, now]))
    .map_err(sql_err)?;
    pr.state = PrState::Merged;
    pr.closed_by = Some(by.to_string());
    pr.merge_commit = Some(merge_commit.to_string());
    pr.updated_at = now;
    emit(
        ctx,
        broadcast(
            kinds::PR_MERGED,
            json!({
                "number": number,
                "title": pr.title,
                "author": pr.author,
                "branch": pr.branch,
                "merged_by": by,
                "commit": merge_commit,
            }),
            format!("pr:{number}:merged"),
            by,
        ),
        now,
    )?;
    // The issues it closes, in the same write: a merge and its closings stand or fall
    // together.
    let says = format!("{}\n{}", pr.title, pr.body.as_deref().unwrap_or(""));
    super::issues::close_by_pr(ctx, number, &says, now)?;
    if main_moved {
        emit(
            ctx,
            broadcast(
                kinds::MAIN_UPDATED,
                json!({ "commit": merge_commit, "by": by, "pr": number }),
                format!("main:{merge_commit}"),
                by,
            ),
            now,
        )?;
    }
    Ok(pr)
}

pub fn merge_failed(
    ctx: &mut WriteCtx<'_>,
    number: i64,
    by: &str,
    reason: serde_json::Value,
    now: i64,
) -> Result<()> {
    let pr = load(ctx.conn, number)?;
    if by == pr.author {
        // The author tried the merge itself and got the reason in the answer.
        return Ok(());
    }
    emit(
        ctx,
        direct_urgent(
            kinds::PR_MERGE_FAILED,
            json!({
                "number": number,
                "title": pr.title,
                "by": by,
                "reason": reason,
            }),
            // One event per attempt; a retried call with the same time is stored once.
            format!("pr:{number}:merge_failed:{now}"),
            by,
            &pr.author,
        ),
        now,
    )
}

pub fn main_updated(ctx: &mut WriteCtx<'_>, by: &str, commit: &str, now: i64) -> Result<()> {
    emit(
        ctx,
        broadcast(
            kinds::MAIN_UPDATED,
            json!({ "commit": commit, "by": by }),
            format!("main:{commit}"),
            by,
        ),
        now,
    )
}
