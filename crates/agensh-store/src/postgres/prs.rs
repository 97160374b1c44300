//! Pull requests: open, review, comment, close, and the record of a merge — the rules of
//! `sqlite/prs.rs`, in PostgreSQL.

use agensh_domain::event::{kinds, NewEvent, Priority};
use agensh_domain::ids::ADMIN;
use agensh_domain::pr::{
    validate_text, Comment, NewPr, PrState, PullRequest, Review, Verdict, BASE,
};
use agensh_domain::{Error, Result};
use serde_json::json;
use tokio_postgres::Row;

use super::db::{Conn, WriteCtx};

const PR_COLUMNS: &str = "number, author, branch, base, title, body, state, created_at, updated_at, closed_by, merge_commit";

fn row_to_pr(row: &Row) -> Result<PullRequest> {
    let state: String = row.get(6);
    Ok(PullRequest {
        number: row.get(0),
        author: row.get(1),
        branch: row.get(2),
        base: row.get(3),
        title: row.get(4),
        body: row.get(5),
        state: PrState::parse(&state)?,
        created_at: row.get(7),
        updated_at: row.get(8),
        closed_by: row.get(9),
        merge_commit: row.get(10),
        reviews: Vec::new(),
        comments: Vec::new(),
    })
}

fn unknown_pr(number: i64) -> Error {
    Error::not_found(
        "unknown_pr",
        format!("there is no PR #{number} — `agensh pr list` shows them"),
    )
}

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

async fn load(conn: &mut Conn, number: i64) -> Result<PullRequest> {
    match conn
        .query_opt(
            &format!("SELECT {PR_COLUMNS} FROM prs WHERE number = $1"),
            &[&number],
        )
        .await?
    {
        Some(r) => row_to_pr(&r),
        None => Err(unknown_pr(number)),
    }
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
        let n: i64 = r.get(0);
        return Err(Error::conflict(
            "pr_exists",
            format!(
                "branch {} already has an open PR #{n} — push more commits to the branch instead",
                pr.branch
            ),
        ));
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
    ctx.emit(
        &broadcast(
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
    )
    .await?;
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
    let rows = conn
        .query(&sql, &[&state.map(PrState::as_str), &author, &limit])
        .await?;
    rows.iter().map(row_to_pr).collect()
}

/// One PR with its reviews and comments, oldest first (the caller reads it in one
/// snapshot: `Db::begin_snapshot`).
pub async fn get(conn: &mut Conn, number: i64) -> Result<PullRequest> {
    let mut pr = load(conn, number).await?;
    let rows = conn
        .query(
            "SELECT id, author, verdict, text, created_at, commit_id FROM pr_reviews WHERE pr = $1 ORDER BY id",
            &[&number],
        )
        .await?;
    for r in rows {
        let verdict: String = r.get(2);
        pr.reviews.push(Review {
            id: r.get(0),
            author: r.get(1),
            verdict: Verdict::parse(&verdict)?,
            text: r.get(3),
            created_at: r.get(4),
            commit: r.get(5),
        });
    }
    let rows = conn
        .query(
            "SELECT id, author, text, created_at FROM pr_comments WHERE pr = $1 ORDER BY id",
            &[&number],
        )
        .await?;
    pr.comments = rows
        .iter()
        .map(|r| Comment {
            id: r.get(0),
            author: r.get(1),
            text: r.get(2),
            created_at: r.get(3),
        })
        .collect();
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
    let id: i64 = conn
        .query_one(
            "INSERT INTO pr_reviews(id, pr, author, verdict, text, created_at, commit_id) \
             SELECT coalesce(max(id), 0) + 1, $1, $2, $3, $4, $5, $6 FROM pr_reviews RETURNING id",
            &[&number, &reviewer, &verdict.as_str(), &text, &now, &commit],
        )
        .await?
        .get(0);
    let review = Review {
        id,
        author: reviewer.to_string(),
        verdict,
        text: text.to_string(),
        created_at: now,
        commit: commit.map(String::from),
    };
    touch(conn, number, now).await?;
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
    everyone.except = Some(pr.author.clone());
    ctx.emit(&everyone, now).await?;
    ctx.emit(
        &direct_urgent(
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
    )
    .await?;
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
    let c = Comment {
        id,
        author: author.to_string(),
        text: text.to_string(),
        created_at: now,
    };
    touch(conn, number, now).await?;
    ctx.emit(
        &broadcast(
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
    )
    .await?;
    Ok(c)
}

pub async fn close(ctx: &mut WriteCtx<'_>, number: i64, by: &str, now: i64) -> Result<PullRequest> {
    ctx.lock().await?;
    let conn = &mut ctx.conn;
    let mut pr = load(conn, number).await?;
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
    conn.execute(
        "UPDATE prs SET state = 'closed', closed_by = $2, updated_at = $3 WHERE number = $1",
        &[&number, &by, &now],
    )
    .await?;
    pr.state = PrState::Closed;
    pr.closed_by = Some(by.to_string());
    pr.updated_at = now;
    ctx.emit(
        &broadcast(
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
    )
    .await?;
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
    if pr.state != PrState::Open {
        return Err(not_open(&pr, "merged"));
    }
    conn.execute(
        "UPDATE prs SET state = 'merged', closed_by = $2, merge_commit = $3, updated_at = $4 WHERE number = $1",
        &[&number, &by, &merge_commit, &now],
    )
    .await?;
    pr.state = PrState::Merged;
    pr.closed_by = Some(by.to_string());
    pr.merge_commit = Some(merge_commit.to_string());
    pr.updated_at = now;
    ctx.emit(
        &broadcast(
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
    )
    .await?;
    // The issues it closes, in the same transaction.
    let says = format!("{}\n{}", pr.title, pr.body.as_deref().unwrap_or(""));
    super::issues::close_by_pr(ctx, number, &says, now).await?;
    if main_moved {
        ctx.emit(
            &broadcast(
                kinds::MAIN_UPDATED,
                json!({ "commit": merge_commit, "by": by, "pr": number }),
                format!("main:{merge_commit}"),
                by,
            ),
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
    if by == pr.author {
        return Ok(());
    }
    ctx.emit(
        &direct_urgent(
            kinds::PR_MERGE_FAILED,
            json!({
                "number": number,
                "title": pr.title,
                "by": by,
                "reason": reason,
            }),
            format!("pr:{number}:merge_failed:{now}"),
            by,
            &pr.author,
        ),
        now,
    )
    .await
    .map(drop)
}

pub async fn main_updated(ctx: &mut WriteCtx<'_>, by: &str, commit: &str, now: i64) -> Result<()> {
    ctx.emit(
        &broadcast(
            kinds::MAIN_UPDATED,
            json!({ "commit": commit, "by": by }),
            format!("main:{commit}"),
            by,
        ),
        now,
    )
    .await
    .map(drop)
}
