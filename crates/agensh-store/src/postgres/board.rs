//! Board records: append, claims and their leases, the recent view, grep and unfold —
//! the rules of `sqlite/board.rs`, in PostgreSQL.

use agensh_domain::event::{kinds, NewEvent, Priority};
use agensh_domain::ids::{parse_record_id, record_id};
use agensh_domain::query::Query;
use agensh_domain::record::{
    check_takeover, overlaps_of, validate_lease, Appended, Lease, NewRecord, Record, RecordKind,
    TakeOver, TakeoverReason,
};
use agensh_domain::view::{RecentView, ViewEntry};
use agensh_domain::worker::WorkerStatus;
use agensh_domain::{Error, Result};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::db::{Conn, WriteCtx};
use super::search::{Condition, RecordTokens};

/// Most history rows one recent view reads before it stops looking further back.
const VIEW_SCAN_LIMIT: usize = 50_000;
/// Rows read per page while building a view.
const VIEW_PAGE: usize = 1_000;

macro_rules! base_columns {
    () => {
        "r.seq, r.kind, r.author, r.text, r.label, r.detail, r.paths, r.created_at, c.expires_at, c.released_at"
    };
}

/// Every column [`row_to_record`] reads; needs [`TAKEOVER_JOINS`].
const RECORD_COLUMNS: &str = concat!(base_columns!(), ", t.old, t.old_author, t.why, tb.seq");

/// The record's columns for rows that cannot be claims.
const NON_CLAIM_COLUMNS: &str = concat!(
    base_columns!(),
    ", NULL::bigint, NULL::text, NULL::text, NULL::bigint"
);

const TAKEOVER_JOINS: &str =
    "LEFT JOIN takeovers t ON t.seq = r.seq LEFT JOIN takeovers tb ON tb.old = r.seq";

fn row_to_record(row: &Row) -> Record {
    let seq: i64 = row.get(0);
    let kind: String = row.get(1);
    let paths: Option<String> = row.get(6);
    let expires_at: Option<i64> = row.get(8);
    let old: Option<i64> = row.get(10);
    let why: Option<String> = row.get(12);
    let taken_over_by: Option<i64> = row.get(13);
    Record {
        seq,
        id: record_id(seq),
        kind: RecordKind::parse(&kind).unwrap_or(RecordKind::Observed),
        author: row.get(2),
        text: row.get(3),
        label: row.get(4),
        detail: row.get(5),
        paths: paths
            .and_then(|p| serde_json::from_str(&p).ok())
            .unwrap_or_default(),
        created_at: row.get(7),
        lease: expires_at.map(|expires_at| Lease {
            expires_at,
            released_at: row.get(9),
            taken_over_by: taken_over_by.map(record_id),
        }),
        takes_over: old.map(|old| TakeOver {
            id: record_id(old),
            author: row.get::<_, Option<String>>(11).unwrap_or_default(),
            why: why
                .as_deref()
                .and_then(TakeoverReason::parse)
                .unwrap_or(TakeoverReason::Expired),
        }),
    }
}

async fn query_records(
    conn: &mut Conn,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Record>> {
    Ok(conn
        .query(sql, params)
        .await?
        .iter()
        .map(row_to_record)
        .collect())
}

/// One record by sequence number, or a not-found error that says where to look.
pub async fn get(conn: &mut Conn, seq: i64) -> Result<Record> {
    let sql = format!("SELECT {RECORD_COLUMNS} FROM records r LEFT JOIN claims c ON c.seq = r.seq {TAKEOVER_JOINS} WHERE r.seq = $1");
    query_records(conn, &sql, &[&seq])
        .await?
        .pop()
        .ok_or_else(|| {
            Error::not_found(
                "unknown_record",
                format!(
                    "there is no record {} — search the board by content to find its id",
                    record_id(seq)
                ),
            )
        })
}

async fn worker_status(conn: &mut Conn, id: &str) -> Result<Option<WorkerStatus>> {
    let status: Option<String> = conn
        .query_opt("SELECT status FROM workers WHERE id = $1", &[&id])
        .await?
        .map(|r| r.get(0));
    status.as_deref().map(WorkerStatus::parse).transpose()
}

struct Takeover {
    old: Record,
    to_worker: bool,
    why: TakeoverReason,
}

async fn takeover(conn: &mut Conn, taker: &str, seq: i64, now: i64) -> Result<Takeover> {
    let old = get(conn, seq).await?;
    let status = worker_status(conn, &old.author).await?;
    let taken_by = match old.lease.as_ref().and_then(|l| l.taken_over_by.as_deref()) {
        Some(id) => Some(get(conn, parse_record_id(id)?).await?),
        None => None,
    };
    let why = check_takeover(&old, taker, status, taken_by.as_ref(), now)?;
    Ok(Takeover {
        old,
        to_worker: status.is_some(),
        why,
    })
}

pub async fn append(
    ctx: &mut WriteCtx<'_>,
    author: &str,
    mut new: NewRecord,
    now: i64,
    default_lease_secs: u64,
) -> Result<Appended> {
    new.validate()?;
    // The record's number, the takeover check and the claim overlap are read under the
    // write lock: appends happen one at a time, as in the SQLite store.
    ctx.lock().await?;
    let conn = &mut ctx.conn;
    let taking = match new.takes_over_seq()? {
        Some(seq) => Some(takeover(conn, author, seq, now).await?),
        None => None,
    };
    if let Some(t) = &taking {
        if new.label.is_none() && new.paths.is_empty() {
            new.label = t.old.label.clone();
            new.paths = t.old.paths.clone();
            new.validate()?;
        }
    }
    let paths = (!new.paths.is_empty())
        .then(|| serde_json::to_string(&new.paths).expect("paths serialize"));
    let tokens = RecordTokens::of(
        &new.text,
        new.detail.as_deref(),
        author,
        new.label.as_deref(),
    );
    let seq: i64 = conn
        .query_one(
            "INSERT INTO records(seq, kind, author, text, label, detail, paths, created_at, \
               text_tokens, detail_tokens, words, author_tokens, label_token) \
             SELECT coalesce(max(seq), 0) + 1, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12 FROM records \
             RETURNING seq",
            &[
                &new.kind.as_str(),
                &author,
                &new.text,
                &new.label,
                &new.detail,
                &paths,
                &now,
                &tokens.text,
                &tokens.detail,
                &tokens.words,
                &tokens.author,
                &tokens.label,
            ],
        )
        .await?
        .get(0);
    let lease = if new.kind == RecordKind::Claim {
        let secs = new.lease_secs.unwrap_or(default_lease_secs);
        let expires_at = now + (secs as i64) * 1000;
        conn.execute(
            "INSERT INTO claims(seq, author, expires_at) VALUES ($1, $2, $3)",
            &[&seq, &author, &expires_at],
        )
        .await?;
        Some(Lease {
            expires_at,
            released_at: None,
            taken_over_by: None,
        })
    } else {
        None
    };
    let mut record = Record::from_new(seq, author, new, now, lease);
    if let Some(t) = &taking {
        conn.execute(
            "INSERT INTO takeovers(seq, old, old_author, why) VALUES ($1, $2, $3, $4)",
            &[&seq, &t.old.seq, &t.old.author, &t.why.as_str()],
        )
        .await?;
        conn.execute(
            "UPDATE claims SET released_at = $2 WHERE seq = $1 AND released_at IS NULL AND expires_at > $2",
            &[&t.old.seq, &now],
        )
        .await?;
        record.takes_over = Some(TakeOver {
            id: t.old.id.clone(),
            author: t.old.author.clone(),
            why: t.why,
        });
    }
    let overlaps = if record.kind == RecordKind::Claim {
        let taken = taking.as_ref().map(|t| t.old.seq);
        let live: Vec<Record> = live_claims(conn, now)
            .await?
            .into_iter()
            .filter(|c| Some(c.seq) != taken)
            .collect();
        overlaps_of(&record, &live)
    } else {
        Vec::new()
    };

    let told = taking.as_ref().filter(|t| t.to_worker);
    let event = NewEvent {
        kind: kinds::BOARD_RECORD.into(),
        priority: Priority::Urgent,
        payload: serde_json::json!({
            "id": record.id,
            "kind": record.kind,
            "author": record.author,
            "text": record.text,
            "label": record.label,
            "takes_over": record.takes_over.as_ref().map(|t| &t.id),
        }),
        dedup_key: Some(format!("board:{}", record.id)),
        source: Some(author.to_string()),
        target: None,
        except: told.map(|t| t.old.author.clone()),
    };
    ctx.emit(&event, now).await?;
    if let Some(t) = told {
        ctx.emit(
            &NewEvent {
                kind: kinds::CLAIM_TAKEN_OVER.into(),
                priority: Priority::Urgent,
                payload: serde_json::json!({
                    "id": t.old.id,
                    "text": t.old.text,
                    "label": t.old.label,
                    "by": record.id,
                    "author": record.author,
                    "why": t.why,
                }),
                dedup_key: Some(format!("takeover:{}", t.old.id)),
                source: Some(author.to_string()),
                target: Some(t.old.author.clone()),
                except: None,
            },
            now,
        )
        .await?;
    }
    Ok(Appended { record, overlaps })
}

/// Claims whose lease runs, not released, whose author is not dead; oldest first.
pub async fn live_claims(conn: &mut Conn, now: i64) -> Result<Vec<Record>> {
    let sql = format!(
        "SELECT {RECORD_COLUMNS} FROM claims c JOIN records r ON r.seq = c.seq {TAKEOVER_JOINS} \
         LEFT JOIN workers w ON w.id = c.author \
         WHERE c.released_at IS NULL AND c.expires_at > $1 AND coalesce(w.status, '') != 'dead' \
         ORDER BY c.seq"
    );
    query_records(conn, &sql, &[&now]).await
}

/// The recent view over records with `after < seq <= upto`, leaving out `reader`'s own.
pub async fn recent_view(
    conn: &mut Conn,
    now: i64,
    cap: usize,
    (after, upto): (i64, i64),
    reader: Option<&str>,
) -> Result<Vec<ViewEntry>> {
    let mut view = RecentView::new(cap);
    let sql = format!(
        "SELECT {NON_CLAIM_COLUMNS} FROM records r LEFT JOIN claims c ON c.seq = r.seq \
         WHERE r.seq < $1 AND r.seq > $2 AND r.kind != 'CLAIM' ORDER BY r.seq DESC LIMIT $3"
    );
    let mut below = upto.saturating_add(1);
    let mut scanned = 0;
    while !view.is_full() && scanned < VIEW_SCAN_LIMIT {
        let page = query_records(conn, &sql, &[&below, &after, &(VIEW_PAGE as i64)]).await?;
        let n = page.len();
        for r in page {
            below = r.seq;
            if Some(r.author.as_str()) != reader {
                view.push(r);
            }
        }
        scanned += n;
        if n < VIEW_PAGE {
            break;
        }
    }
    let claims = live_claims(conn, now)
        .await?
        .into_iter()
        .filter(|c| c.seq > after && c.seq <= upto && Some(c.author.as_str()) != reader)
        .collect();
    Ok(view.finish(claims))
}

/// A worker's board cursor and the newest record sequence number now.
pub async fn unread_bounds(conn: &mut Conn, worker: &str) -> Result<(i64, i64)> {
    let cursor: i64 = conn
        .query_opt("SELECT board_cursor FROM workers WHERE id = $1", &[&worker])
        .await?
        .map(|r| r.get(0))
        .ok_or_else(|| agensh_domain::worker::unknown_worker(worker))?;
    let top: i64 = conn
        .query_one("SELECT coalesce(max(seq), 0) FROM records", &[])
        .await?
        .get(0);
    Ok((cursor, top))
}

pub async fn set_board_cursor(conn: &mut Conn, worker: &str, top: i64) -> Result<()> {
    conn.execute(
        "UPDATE workers SET board_cursor = greatest(board_cursor, $2) WHERE id = $1",
        &[&worker, &top],
    )
    .await?;
    Ok(())
}

/// Records matching `query` (translated by `search.rs`), newest first.
pub async fn grep(
    conn: &mut Conn,
    query: &Query,
    before: Option<i64>,
    limit: usize,
) -> Result<Vec<Record>> {
    let cond = Condition::of(query, 3);
    let sql = format!(
        "SELECT {RECORD_COLUMNS} FROM records r LEFT JOIN claims c ON c.seq = r.seq {TAKEOVER_JOINS} \
         WHERE r.seq < $1 AND ({}) ORDER BY r.seq DESC LIMIT $2",
        cond.sql
    );
    let before = before.unwrap_or(i64::MAX);
    let limit = limit as i64;
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&before, &limit];
    for p in &cond.params {
        params.push(p.as_ref() as &(dyn ToSql + Sync));
    }
    let rows = conn.query_once(&sql, &params).await.map_err(|e| {
        Error::invalid(
            "bad_query",
            format!(
                "the search could not run ({}) — simplify the query",
                e.message
            ),
        )
    })?;
    Ok(rows.iter().map(row_to_record).collect())
}

pub async fn unfold(conn: &mut Conn, seq: i64) -> Result<crate::Unfolded> {
    let record = get(conn, seq).await?;
    let (mut superseded_by, mut invalidated_by) = (None, None);
    if record.kind == RecordKind::PatchSummary {
        if let Some(label) = &record.label {
            let sql = format!(
                "SELECT {NON_CLAIM_COLUMNS} FROM records r LEFT JOIN claims c ON c.seq = r.seq \
                 WHERE r.author = $1 AND r.label = $2 AND r.seq > $3 AND r.kind = $4 ORDER BY r.seq LIMIT 1"
            );
            superseded_by =
                query_records(conn, &sql, &[&record.author, label, &seq, &"PATCH_SUMMARY"])
                    .await?
                    .pop();
            let fail = query_records(conn, &sql, &[&record.author, label, &seq, &"FAIL"])
                .await?
                .pop();
            invalidated_by = fail.filter(|f| superseded_by.as_ref().is_none_or(|s| f.seq < s.seq));
        }
    }
    Ok(crate::Unfolded {
        record,
        superseded_by,
        invalidated_by,
    })
}

async fn own_live_claim(conn: &mut Conn, worker: &str, seq: i64, now: i64) -> Result<Record> {
    let r = get(conn, seq).await?;
    let lease = match (&r.kind, &r.lease) {
        (RecordKind::Claim, Some(l)) => l.clone(),
        _ => {
            let mine: Vec<String> = live_claims(conn, now)
                .await?
                .into_iter()
                .filter(|c| c.author == worker)
                .map(|c| format!("{} ({})", c.id, c.label.as_deref().unwrap_or(&c.text)))
                .collect();
            let yours = if mine.is_empty() {
                "you hold no live claim".to_string()
            } else {
                format!("your live claims: {}", mine.join(", "))
            };
            return Err(Error::invalid(
                "not_a_claim",
                format!(
                    "{} is a {}, not a CLAIM — pass the id of one of your claims ({yours})",
                    r.id, r.kind
                ),
            ));
        }
    };
    if let Some(by) = &lease.taken_over_by {
        let taker = get(conn, parse_record_id(by)?).await?;
        if r.author == worker {
            return Err(Error::conflict(
                "claim_taken_over",
                format!(
                    "{} was taken over by {by} ({}) while you were away — stop work on it; message {} to hand over what you have, or claim something else",
                    r.id, taker.author, taker.author
                ),
            ));
        }
    }
    if r.author != worker {
        return Err(Error::forbidden(
            "not_your_claim",
            format!(
                "{} is {}'s claim — you can only renew or release your own; message {} if you need the work",
                r.id, r.author, r.author
            ),
        ));
    }
    if lease.released_at.is_some() {
        return Err(Error::conflict(
            "claim_released",
            format!(
                "{} was already released — post a new CLAIM to take the work again",
                r.id
            ),
        ));
    }
    if lease.expires_at <= now {
        return Err(Error::conflict(
            "claim_expired",
            format!(
                "{} expired at {} — post a new CLAIM (others may have claimed the work since)",
                r.id,
                agensh_domain::time::rfc3339(lease.expires_at)
            ),
        ));
    }
    Ok(r)
}

pub async fn renew(
    ctx: &mut WriteCtx<'_>,
    worker: &str,
    seq: i64,
    lease_secs: u64,
    now: i64,
) -> Result<Record> {
    validate_lease(lease_secs)?;
    // Under the write lock: a takeover cannot slip between the check and the change.
    ctx.lock().await?;
    let conn = &mut ctx.conn;
    own_live_claim(conn, worker, seq, now).await?;
    let expires = now + lease_secs as i64 * 1000;
    conn.execute(
        "UPDATE claims SET expires_at = $2 WHERE seq = $1",
        &[&seq, &expires],
    )
    .await?;
    get(conn, seq).await
}

pub async fn release(ctx: &mut WriteCtx<'_>, worker: &str, seq: i64, now: i64) -> Result<Record> {
    ctx.lock().await?;
    let conn = &mut ctx.conn;
    own_live_claim(conn, worker, seq, now).await?;
    conn.execute(
        "UPDATE claims SET released_at = $2 WHERE seq = $1",
        &[&seq, &now],
    )
    .await?;
    get(conn, seq).await
}
