//! Pull requests: open, review, comment, close, and the record of a merge.
//!
//! The store keeps the PR's state and emits its events; the merge itself (git) is done
//! by the hub, which then calls [`mark_merged`] or [`merge_failed`]. The rules and the
//! events are `common/prs.rs`'s.

use agensh_domain::event::NewEvent;
use agensh_domain::pr::{
    validate_text, Comment, NewPr, PrState, PullRequest, Review, Verdict, BASE,
};
use agensh_domain::Result;
use rusqlite::{params, Connection, OptionalExtension};

use super::conn::{sql_err, WriteCtx};
use crate::common::prs;
use crate::common::rows::{self, COMMENT_COLUMNS, PR_COLUMNS, REVIEW_COLUMNS};

/// A PR without its reviews and comments.
fn load(conn: &Connection, number: i64) -> Result<PullRequest> {
    conn.prepare_cached(&format!("SELECT {PR_COLUMNS} FROM prs WHERE number = ?1"))
        .and_then(|mut s| s.query_row([number], |r| rows::pr(r)).optional())
        .map_err(sql_err)?
        .ok_or_else(|| prs::unknown_pr(number))
}

/// Stores `event` and hands it to the writer to publish after the commit.
fn emit(ctx: &mut WriteCtx<'_>, event: NewEvent, now: i64) -> Result<()> {
    ctx.emit(&event, now).map(drop)
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
        return Err(prs::exists(&pr.branch, n));
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
    let (out, event) = prs::opened(number, author, pr, now);
    emit(ctx, event, now)?;
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
    let found = stmt
        .query_map(params![state.map(PrState::as_str), author, limit], |r| {
            rows::pr(r)
        })
        .map_err(sql_err)?;
    found.collect::<rusqlite::Result<_>>().map_err(sql_err)
}

/// One PR with its reviews and comments, oldest first, read from one snapshot.
pub fn get(conn: &Connection, number: i64) -> Result<PullRequest> {
    let tx = conn.unchecked_transaction().map_err(sql_err)?;
    let mut pr = load(&tx, number)?;
    pr.reviews = {
        let mut stmt = tx
            .prepare_cached(&format!(
                "SELECT {REVIEW_COLUMNS} FROM pr_reviews WHERE pr = ?1 ORDER BY id"
            ))
            .map_err(sql_err)?;
        let found = stmt
            .query_map([number], |r| rows::review(r))
            .map_err(sql_err)?;
        found.collect::<rusqlite::Result<_>>().map_err(sql_err)?
    };
    pr.comments = {
        let mut stmt = tx
            .prepare_cached(&format!(
                "SELECT {COMMENT_COLUMNS} FROM pr_comments WHERE pr = ?1 ORDER BY id"
            ))
            .map_err(sql_err)?;
        let found = stmt
            .query_map([number], |r| rows::comment(r))
            .map_err(sql_err)?;
        found.collect::<rusqlite::Result<_>>().map_err(sql_err)?
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
    prs::check_review(&pr, reviewer, text)?;
    conn.prepare_cached(
        "INSERT INTO pr_reviews(pr, author, verdict, text, created_at, commit_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .and_then(|mut s| s.execute(params![number, reviewer, verdict.as_str(), text, now, commit]))
    .map_err(sql_err)?;
    let review = prs::review(
        conn.last_insert_rowid(),
        reviewer,
        verdict,
        text,
        commit,
        now,
    );
    touch(conn, number, now)?;
    for e in prs::reviewed_events(&pr, &review) {
        emit(ctx, e, now)?;
    }
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
    let c = prs::comment(conn.last_insert_rowid(), author, text, now);
    touch(conn, number, now)?;
    emit(ctx, prs::commented_event(&pr, &c), now)?;
    Ok(c)
}

pub fn close(ctx: &mut WriteCtx<'_>, number: i64, by: &str, now: i64) -> Result<PullRequest> {
    let conn = ctx.conn;
    let mut pr = load(conn, number)?;
    prs::check_close(&pr, by)?;
    conn.prepare_cached(
        "UPDATE prs SET state = 'closed', closed_by = ?2, updated_at = ?3 WHERE number = ?1",
    )
    .and_then(|mut s| s.execute(params![number, by, now]))
    .map_err(sql_err)?;
    let event = prs::closed(&mut pr, by, now);
    emit(ctx, event, now)?;
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
    prs::check_merge(&pr)?;
    conn.prepare_cached(
        "UPDATE prs SET state = 'merged', closed_by = ?2, merge_commit = ?3, updated_at = ?4 WHERE number = ?1",
    )
    .and_then(|mut s| s.execute(params![number, by, merge_commit, now]))
    .map_err(sql_err)?;
    let event = prs::merged(&mut pr, by, merge_commit, now);
    emit(ctx, event, now)?;
    // The issues it closes, in the same write: a merge and its closings stand or fall
    // together.
    super::issues::close_by_pr(ctx, number, &prs::says(&pr), now)?;
    if main_moved {
        emit(
            ctx,
            prs::main_updated_event(merge_commit, by, Some(number)),
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
    match prs::merge_failed_event(&pr, by, reason, now) {
        Some(event) => emit(ctx, event, now),
        None => Ok(()),
    }
}

pub fn main_updated(ctx: &mut WriteCtx<'_>, by: &str, commit: &str, now: i64) -> Result<()> {
    emit(ctx, prs::main_updated_event(commit, by, None), now)
}
