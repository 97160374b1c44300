//! Result rows read into domain types, the same way in both engines.
//!
//! Each engine implements [`Columns`] and [`Column`] for its own row type (`rusqlite::Row`,
//! `tokio_postgres::Row`); the conversions here read columns by number through them. A
//! SQLite read can fail (its error is `rusqlite::Error`, as `query_map` wants it); a
//! PostgreSQL read of the wrong type panics, as `Row::get` does, so its error is only the
//! domain's, for a value the domain refuses ([`Columns::refused`]).

use agensh_domain::event::{Event, Priority};
use agensh_domain::ids::record_id;
use agensh_domain::issue::{Issue, IssueComment, IssueState};
use agensh_domain::message::Message;
use agensh_domain::pr::{Comment, PrState, PullRequest, Review, Verdict};
use agensh_domain::record::{Lease, Record, RecordKind, TakeOver, TakeoverReason};
use agensh_domain::Error;

use crate::ModelUsage;

/// A result row of one engine.
pub trait Columns {
    /// What a failed read is.
    type Error;
    /// The error for column `i`, whose value the domain refused with `e`.
    fn refused(&self, i: usize, e: Error) -> Self::Error;
}

/// A row whose columns read as `T`.
pub trait Column<T>: Columns {
    /// Column `i` (from 0).
    fn col(&self, i: usize) -> Result<T, Self::Error>;
}

/// A row whose columns read as every type the conversions here need.
pub trait AnyRow:
    Column<i64> + Column<Option<i64>> + Column<String> + Column<Option<String>> + Column<f64>
{
}

impl<R> AnyRow for R where
    R: Column<i64> + Column<Option<i64>> + Column<String> + Column<Option<String>> + Column<f64>
{
}

/// The columns [`message`] reads.
pub const MESSAGE_COLUMNS: &str = "seq, sender, target, text, thread, created_at";

pub fn message<R: AnyRow + ?Sized>(row: &R) -> Result<Message, R::Error> {
    Ok(Message {
        seq: row.col(0)?,
        from: row.col(1)?,
        to: row.col(2)?,
        text: row.col(3)?,
        thread: row.col(4)?,
        created_at: row.col(5)?,
    })
}

/// The columns [`pr`] reads.
pub const PR_COLUMNS: &str = "number, author, branch, base, title, body, state, created_at, updated_at, closed_by, merge_commit";

/// A PR without its reviews and comments.
pub fn pr<R: AnyRow + ?Sized>(row: &R) -> Result<PullRequest, R::Error> {
    let state: String = row.col(6)?;
    Ok(PullRequest {
        number: row.col(0)?,
        author: row.col(1)?,
        branch: row.col(2)?,
        base: row.col(3)?,
        title: row.col(4)?,
        body: row.col(5)?,
        state: PrState::parse(&state).map_err(|e| row.refused(6, e))?,
        created_at: row.col(7)?,
        updated_at: row.col(8)?,
        closed_by: row.col(9)?,
        merge_commit: row.col(10)?,
        reviews: Vec::new(),
        comments: Vec::new(),
        queue: None,
    })
}

/// The columns [`review`] reads.
pub const REVIEW_COLUMNS: &str = "id, author, verdict, text, created_at, commit_id";

pub fn review<R: AnyRow + ?Sized>(row: &R) -> Result<Review, R::Error> {
    let verdict: String = row.col(2)?;
    Ok(Review {
        id: row.col(0)?,
        author: row.col(1)?,
        verdict: Verdict::parse(&verdict).map_err(|e| row.refused(2, e))?,
        text: row.col(3)?,
        created_at: row.col(4)?,
        commit: row.col(5)?,
    })
}

/// The columns [`comment`] and [`issue_comment`] read.
pub const COMMENT_COLUMNS: &str = "id, author, text, created_at";

pub fn comment<R: AnyRow + ?Sized>(row: &R) -> Result<Comment, R::Error> {
    Ok(Comment {
        id: row.col(0)?,
        author: row.col(1)?,
        text: row.col(2)?,
        created_at: row.col(3)?,
    })
}

pub fn issue_comment<R: AnyRow + ?Sized>(row: &R) -> Result<IssueComment, R::Error> {
    Ok(IssueComment {
        id: row.col(0)?,
        author: row.col(1)?,
        text: row.col(2)?,
        created_at: row.col(3)?,
    })
}

/// The columns [`issue`] reads, its comment count last.
pub const ISSUE_COLUMNS: &str =
    "number, title, body, author, state, assignee, created_at, updated_at, closed_at, closed_by, \
     (SELECT count(*) FROM issue_comments c WHERE c.issue = issues.number)";

/// An issue without its labels and comments.
pub fn issue<R: AnyRow + ?Sized>(row: &R) -> Result<Issue, R::Error> {
    let state: String = row.col(4)?;
    let count: i64 = row.col(10)?;
    Ok(Issue {
        number: row.col(0)?,
        title: row.col(1)?,
        body: row.col(2)?,
        author: row.col(3)?,
        state: IssueState::parse(&state).map_err(|e| row.refused(4, e))?,
        labels: Vec::new(),
        assignee: row.col(5)?,
        comment_count: count.max(0) as u64,
        comments: Vec::new(),
        created_at: row.col(6)?,
        updated_at: row.col(7)?,
        closed_at: row.col(8)?,
        closed_by: row.col(9)?,
    })
}

/// A record's own columns and its claim's lease (`records r LEFT JOIN claims c`); the
/// engines add the four takeover columns ([`RECORD_COLUMNS`], or typed NULLs).
macro_rules! record_base_columns {
    () => {
        "r.seq, r.kind, r.author, r.text, r.label, r.detail, r.paths, r.created_at, c.expires_at, c.released_at"
    };
}
pub(crate) use record_base_columns;

/// Every column [`record`] reads: the base columns and the takeovers, which need
/// [`TAKEOVER_JOINS`].
pub const RECORD_COLUMNS: &str = concat!(
    record_base_columns!(),
    ", t.old, t.old_author, t.why, tb.seq"
);

/// What a record took over (`t`) and what took it over (`tb`), for [`RECORD_COLUMNS`].
pub const TAKEOVER_JOINS: &str =
    "LEFT JOIN takeovers t ON t.seq = r.seq LEFT JOIN takeovers tb ON tb.old = r.seq";

pub fn record<R: AnyRow + ?Sized>(row: &R) -> Result<Record, R::Error> {
    let seq: i64 = row.col(0)?;
    let kind: String = row.col(1)?;
    let paths: Option<String> = row.col(6)?;
    let expires_at: Option<i64> = row.col(8)?;
    let old: Option<i64> = row.col(10)?;
    let why: Option<String> = row.col(12)?;
    let taken_over_by: Option<i64> = row.col(13)?;
    Ok(Record {
        seq,
        id: record_id(seq),
        kind: RecordKind::parse(&kind).unwrap_or(RecordKind::Observed),
        author: row.col(2)?,
        text: row.col(3)?,
        label: row.col(4)?,
        detail: row.col(5)?,
        paths: paths
            .and_then(|p| serde_json::from_str(&p).ok())
            .unwrap_or_default(),
        created_at: row.col(7)?,
        lease: expires_at.map(|expires_at| Lease {
            expires_at,
            released_at: row.col(9).ok().flatten(),
            taken_over_by: taken_over_by.map(record_id),
        }),
        takes_over: match old {
            Some(old) => Some(TakeOver {
                id: record_id(old),
                author: Column::<Option<String>>::col(row, 11)?.unwrap_or_default(),
                why: why
                    .as_deref()
                    .and_then(TakeoverReason::parse)
                    .unwrap_or(TakeoverReason::Expired),
            }),
            None => None,
        },
    })
}

/// The columns [`event_at`] reads.
pub const EVENT_COLUMNS: &str =
    "seq, kind, priority, payload, dedup_key, source, target, except_worker, created_at";

/// The event whose [`EVENT_COLUMNS`] start at column `at` of `row`.
pub fn event_at<R: AnyRow + ?Sized>(row: &R, at: usize) -> Result<Event, R::Error> {
    let priority: String = row.col(at + 2)?;
    let payload: String = row.col(at + 3)?;
    Ok(Event {
        seq: row.col(at)?,
        kind: row.col(at + 1)?,
        priority: Priority::parse(&priority).unwrap_or(Priority::Normal),
        payload: serde_json::from_str(&payload).unwrap_or(serde_json::Value::Null),
        dedup_key: row.col(at + 4)?,
        source: row.col(at + 5)?,
        target: row.col(at + 6)?,
        except: row.col(at + 7)?,
        created_at: row.col(at + 8)?,
    })
}

/// One usage total: worker, model, requests, input, cached input and output tokens, cost,
/// first request.
pub fn model_usage<R: AnyRow + ?Sized>(row: &R) -> Result<ModelUsage, R::Error> {
    Ok(ModelUsage {
        worker: row.col(0)?,
        model: row.col(1)?,
        requests: Column::<i64>::col(row, 2)? as u64,
        input_tokens: Column::<i64>::col(row, 3)? as u64,
        cached_input_tokens: Column::<i64>::col(row, 4)? as u64,
        output_tokens: Column::<i64>::col(row, 5)? as u64,
        cost_usd: row.col(6)?,
        first_at: row.col(7)?,
    })
}

/// One budget: scope, tokens, cost, requests, hours.
pub fn budget<R: AnyRow + ?Sized>(
    row: &R,
) -> Result<(String, agensh_domain::budget::Limits), R::Error> {
    Ok((
        row.col(0)?,
        agensh_domain::budget::Limits {
            tokens: Column::<i64>::col(row, 1)? as u64,
            cost_usd: row.col(2)?,
            requests: Column::<i64>::col(row, 3)? as u64,
            hours: row.col(4)?,
        },
    ))
}
