//! Pull requests: open, review, comment, close, and the record of a merge — the rules of
//! `sqlite/prs.rs`, in PostgreSQL.

use agensh_domain::pr::{
    validate_text, Comment, NewPr, PrState, PullRequest, Review, Verdict, BASE,
};
use agensh_domain::Result;

use super::db::{Conn, WriteCtx};
use crate::common::prs;
use crate::common::rows::{self, COMMENT_COLUMNS, PR_COLUMNS, REVIEW_COLUMNS};

async fn load(conn: &mut Conn, number: i64) -> Result<PullRequest> {
    match conn
        .query_opt(
            &format!("SELECT {PR_COLUMNS} FROM prs WHERE number = $1"),
            &[&number],
        )
        .await?
    {
        Some(r) => rows::pr(&r),
        None => Err(prs::unknown_pr(number)),
    }
}

async fn touch(conn: &mut Conn, number: i64, now: i64) -> Result<()> {
    conn.execute(
        "UPDATE prs SET updated_at = $2 WHERE number = $1",
        &[&number, &now],
    )
    .await?;
    Ok(())
}

pub async fn open(
    ctx: &mut WriteCtx<'_>,
    author: &str,
    pr: NewPr,
    now: i64,
) -> Result<PullRequest> {
    pr.validate(author)?;
    ctx.lock().await?;
    let conn = &mut ctx.conn;
    if let Some(r) = conn
        .query_opt(
            "SELECT number FROM prs WHERE branch = $1 AND state = 'open'",
            &[&pr.branch],
        )
        .await?
    {
        return Err(prs::exists(&pr.branch, r.get(0)));
    }
    let number: i64 = conn
        .query_one("SELECT coalesce(max(number), 0) + 1 FROM prs", &[])
        .await?
        .get(0);
    conn.execute(
        "INSERT INTO prs(number, author, branch, base, title, body, state, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, 'open', $7, $7)",
        &[&number, &author, &pr.branch, &BASE, &pr.title, &pr.body, &now],
    )
    .await?;
    let (out, event) = prs::opened(number, author, pr, now);
    ctx.emit(&event, now).await?;
    Ok(out)
}

pub async fn list(
    conn: &mut Conn,
    state: Option<PrState>,
    author: Option<&str>,
    limit: usize,
) -> Result<Vec<PullRequest>> {
    let sql = format!(
        "SELECT {PR_COLUMNS} FROM prs WHERE ($1::text IS NULL OR state = $1) AND ($2::text IS NULL OR author = $2) \
         ORDER BY number DESC LIMIT $3"
    );
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let found = conn
        .query(&sql, &[&state.map(PrState::as_str), &author, &limit])
        .await?;
    found.iter().map(rows::pr).collect()
}

/// One PR with its reviews and comments, oldest first (the caller reads it in one
/// snapshot: `Db::begin_snapshot`).
pub async fn get(conn: &mut Conn, number: i64) -> Result<PullRequest> {
    let mut pr = load(conn, number).await?;
    let found = conn
        .query(
            &format!("SELECT {REVIEW_COLUMNS} FROM pr_reviews WHERE pr = $1 ORDER BY id"),
            &[&number],
        )
        .await?;
    pr.reviews = found.iter().map(rows::review).collect::<Result<_>>()?;
    let found = conn
        .query(
            &format!("SELECT {COMMENT_COLUMNS} FROM pr_comments WHERE pr = $1 ORDER BY id"),
            &[&number],
        )
        .await?;
    pr.comments = found.iter().map(rows::comment).collect::<Result<_>>()?;
    Ok(pr)
}

pub async fn review(
    ctx: &mut WriteCtx<'_>,
    number: i64,
    reviewer: &str,
    verdict: Verdict,
    text: &str,
    commit: Option<&str>,
    now: i64,
) -> Result<Review> {
    ctx.lock().await?;
    let conn = &mut ctx.conn;
    let pr = load(conn, number).await?;
    prs::check_review(&pr, reviewer, text)?;
    let id: i64 = conn
        .query_one(
            "INSERT INTO pr_reviews(id, pr, author, verdict, text, created_at, commit_id) \
             SELECT coalesce(max(id), 0) + 1, $1, $2, $3, $4, $5, $6 FROM pr_reviews RETURNING id",
            &[&number, &reviewer, &verdict.as_str(), &text, &now, &commit],
        )
        .await?
        .get(0);
    let review = prs::review(id, reviewer, verdict, text, commit, now);
    touch(conn, number, now).await?;
    for e in prs::reviewed_events(&pr, &review) {
        ctx.emit(&e, now).await?;
    }
    Ok(review)
}

pub async fn comment(
    ctx: &mut WriteCtx<'_>,
    number: i64,
    author: &str,
    text: &str,
    now: i64,
) -> Result<Comment> {
    ctx.lock().await?;
    let conn = &mut ctx.conn;
    let pr = load(conn, number).await?;
    validate_text("comment", text)?;
    let id: i64 = conn
        .query_one(
            "INSERT INTO pr_comments(id, pr, author, text, created_at) \
             SELECT coalesce(max(id), 0) + 1, $1, $2, $3, $4 FROM pr_comments RETURNING id",
            &[&number, &author, &text, &now],
        )
        .await?
        .get(0);
    let c = prs::comment(id, author, text, now);
    touch(conn, number, now).await?;
    ctx.emit(&prs::commented_event(&pr, &c), now).await?;
    Ok(c)
}

pub async fn close(ctx: &mut WriteCtx<'_>, number: i64, by: &str, now: i64) -> Result<PullRequest> {
    ctx.lock().await?;
    let conn = &mut ctx.conn;
    let mut pr = load(conn, number).await?;
    prs::check_close(&pr, by)?;
    conn.execute(
        "UPDATE prs SET state = 'closed', closed_by = $2, updated_at = $3 WHERE number = $1",
        &[&number, &by, &now],
    )
    .await?;
    let event = prs::closed(&mut pr, by, now);
    ctx.emit(&event, now).await?;
    Ok(pr)
}

pub async fn mark_merged(
    ctx: &mut WriteCtx<'_>,
    number: i64,
    by: &str,
    merge_commit: &str,
    main_moved: bool,
    now: i64,
) -> Result<PullRequest> {
    ctx.lock().await?;
    let conn = &mut ctx.conn;
    let mut pr = load(conn, number).await?;
    prs::check_merge(&pr)?;
    conn.execute(
        "UPDATE prs SET state = 'merged', closed_by = $2, merge_commit = $3, updated_at = $4 WHERE number = $1",
        &[&number, &by, &merge_commit, &now],
    )
    .await?;
    let event = prs::merged(&mut pr, by, merge_commit, now);
    ctx.emit(&event, now).await?;
    // The issues it closes, in the same transaction.
    super::issues::close_by_pr(ctx, number, &prs::says(&pr), now).await?;
    if main_moved {
        ctx.emit(
            &prs::main_updated_event(merge_commit, by, Some(number)),
            now,
        )
        .await?;
    }
    Ok(pr)
}

pub async fn merge_failed(
    ctx: &mut WriteCtx<'_>,
    number: i64,
    by: &str,
    reason: serde_json::Value,
    now: i64,
) -> Result<()> {
    let pr = load(ctx.conn, number).await?;
    match prs::merge_failed_event(&pr, by, reason, now) {
        Some(event) => ctx.emit(&event, now).await.map(drop),
        None => Ok(()),
    }
}

pub async fn main_updated(ctx: &mut WriteCtx<'_>, by: &str, commit: &str, now: i64) -> Result<()> {
    ctx.emit(&prs::main_updated_event(commit, by, None), now)
        .await
        .map(drop)
}
