//! Board records: append, claims and their leases, the recent view, grep and unfold —
//! the rules of `sqlite/board.rs`, in PostgreSQL.

use agensh_domain::event::{kinds, Event, NewEvent, Priority};
use agensh_domain::ids::{parse_record_id, record_id};
use agensh_domain::query::Query;
use agensh_domain::record::{validate_lease, Appended, NewRecord, Record, RecordKind};
use agensh_domain::view::ViewEntry;
use agensh_domain::worker::WorkerStatus;
use agensh_domain::{Error, Result};
use tokio_postgres::types::ToSql;

use super::db::{Conn, WriteCtx};
use super::search::{prefix_range, prefixes, Condition, Expansions, RecordTokens, EXPANSION_LIMIT};
use crate::common::board::{self as rules, record_event, Takeover, VIEW_PAGE};
use crate::common::label_token;
use crate::common::rows::{self, record_base_columns, RECORD_COLUMNS, TAKEOVER_JOINS};

/// The record's columns for rows that cannot be claims.
const NON_CLAIM_COLUMNS: &str = concat!(
    record_base_columns!(),
    ", NULL::bigint, NULL::text, NULL::text, NULL::bigint"
);

async fn query_records(
    conn: &mut Conn,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Record>> {
    conn.query(sql, params)
        .await?
        .iter()
        .map(rows::record)
        .collect()
}

/// One record by sequence number, or a not-found error that says where to look.
pub async fn get(conn: &mut Conn, seq: i64) -> Result<Record> {
    let sql = format!("SELECT {RECORD_COLUMNS} FROM records r LEFT JOIN claims c ON c.seq = r.seq {TAKEOVER_JOINS} WHERE r.seq = $1");
    query_records(conn, &sql, &[&seq])
        .await?
        .pop()
        .ok_or_else(|| rules::unknown_record(seq))
}

async fn worker_status(conn: &mut Conn, id: &str) -> Result<Option<WorkerStatus>> {
    let status: Option<String> = conn
        .query_opt("SELECT status FROM workers WHERE id = $1", &[&id])
        .await?
        .map(|r| r.get(0));
    status.as_deref().map(WorkerStatus::parse).transpose()
}

async fn takeover(conn: &mut Conn, taker: &str, seq: i64, now: i64) -> Result<Takeover> {
    let old = get(conn, seq).await?;
    let status = worker_status(conn, &old.author).await?;
    let taken_by = match old.lease.as_ref().and_then(|l| l.taken_over_by.as_deref()) {
        Some(id) => Some(get(conn, parse_record_id(id)?).await?),
        None => None,
    };
    Takeover::check(old, taker, status, taken_by.as_ref(), now)
}

/// The search tokens of a record about to be appended, made by the caller before the
/// write (tokenizing is the costliest part of an append, and the writer runs one job at a
/// time): `None` when `new` is not valid (`append` refuses it).
pub fn tokens_for(author: &str, new: &NewRecord) -> Option<RecordTokens> {
    new.validate().ok()?;
    Some(RecordTokens::of(
        &new.text,
        new.detail.as_deref(),
        author,
        new.label.as_deref(),
    ))
}

/// Appends `new` by `author`; `tokens` are [`tokens_for`]'s (made here when `None`).
pub async fn append(
    ctx: &mut WriteCtx<'_>,
    author: &str,
    mut new: NewRecord,
    tokens: Option<RecordTokens>,
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
        t.lend_work(&mut new)?;
    }
    let paths = rules::paths_json(&new.paths);
    let tokens = match tokens {
        // The label a takeover gave it was not known when they were made.
        Some(mut t) => {
            t.label = new.label.as_deref().map(label_token).unwrap_or_default();
            t
        }
        None => RecordTokens::of(
            &new.text,
            new.detail.as_deref(),
            author,
            new.label.as_deref(),
        ),
    };
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
    let lease = rules::lease_of(&new, default_lease_secs, now);
    if let Some(l) = &lease {
        conn.execute(
            "INSERT INTO claims(seq, author, expires_at) VALUES ($1, $2, $3)",
            &[&seq, &author, &l.expires_at],
        )
        .await?;
    }
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
        record.takes_over = Some(t.took_over());
    }
    let overlaps = if record.kind == RecordKind::Claim {
        rules::overlaps(&record, live_claims(conn, now).await?, taking.as_ref())
    } else {
        Vec::new()
    };
    for event in rules::appended_events(&record, taking.as_ref()) {
        ctx.emit(&event, now).await?;
    }
    Ok(Appended { record, overlaps })
}

/// An append handed to the writer: [`append`]'s arguments.
pub struct Append {
    pub author: String,
    pub new: NewRecord,
    pub tokens: Option<RecordTokens>,
    pub now: i64,
    pub default_lease_secs: u64,
}

impl Append {
    /// Runs it alone ([`append`]).
    pub async fn run(self, ctx: &mut WriteCtx<'_>) -> Result<Appended> {
        append(
            ctx,
            &self.author,
            self.new,
            self.tokens,
            self.now,
            self.default_lease_secs,
        )
        .await
    }

    /// Whether it may be written in a batch ([`append_batch`]): a valid record (its tokens
    /// were made) that is neither a claim (a lease, overlaps) nor a takeover (checks that
    /// read the board).
    pub fn batchable(&self) -> bool {
        self.tokens.is_some() && self.new.kind != RecordKind::Claim && self.new.takes_over.is_none()
    }

    /// What it became once stored as number `seq` by [`append_batch`].
    pub fn stored(self, seq: i64) -> Appended {
        Appended {
            record: Record::from_new(seq, &self.author, self.new, self.now, None),
            overlaps: Vec::new(),
        }
    }
}

/// Sums of `lens` from the start: where each of a batch's token lists ends in their
/// concatenation (a slice `[end before + 1 : end]` of the flat array).
fn ends(lens: impl Iterator<Item = usize>) -> Vec<i32> {
    lens.scan(0i32, |at, n| {
        *at += n as i32;
        Some(*at)
    })
    .collect()
}

/// The record `a` becomes as number `seq`, as its event shows it (no detail or paths).
fn shown(a: &Append, seq: i64) -> Record {
    Record {
        seq,
        id: record_id(seq),
        kind: a.new.kind,
        author: a.author.clone(),
        text: a.new.text.clone(),
        label: a.new.label.clone(),
        detail: None,
        paths: Vec::new(),
        created_at: a.now,
        lease: None,
        takes_over: None,
    }
}

/// `payload` as stored, split around the record id's value: the text up to it and after it
/// (the id is known only to the statement that numbers the record).
fn split_at_id(payload: &serde_json::Value) -> (String, String) {
    let mut p = payload.clone();
    p["id"] = serde_json::Value::String(String::new());
    let text = serde_json::to_string(&p).expect("json serializes");
    // Inside a JSON string every quote is escaped, so this is the top-level key.
    let key = "\"id\":\"";
    let at = text.find(key).expect("the payload has an id") + key.len();
    (text[..at].to_string(), text[at..].to_string())
}

/// Appends `batch` (each [`Append::batchable`]) with one statement: all their records and
/// all their events, numbered in the batch's order; returns each one's record number and
/// its event. The caller holds the write lock. An error leaves the transaction aborted
/// (the caller's savepoint undoes it), and so does an event whose dedup key is taken (a
/// unique violation: no `ON CONFLICT`, whose check of every arbiter index before each row
/// cost more than the insert): the batch would leave a gap in the event numbers, so it is
/// refused and the caller appends each alone ([`append`] skips such an event).
pub async fn append_batch(conn: &mut Conn, batch: &[&Append]) -> Result<Vec<(i64, Event)>> {
    let n = batch.len();
    let tokens: Vec<&RecordTokens> = batch
        .iter()
        .map(|a| a.tokens.as_ref().expect("a batched append has its tokens"))
        .collect();
    let kinds: Vec<&str> = batch.iter().map(|a| a.new.kind.as_str()).collect();
    let authors: Vec<&str> = batch.iter().map(|a| a.author.as_str()).collect();
    let texts: Vec<&str> = batch.iter().map(|a| a.new.text.as_str()).collect();
    let labels: Vec<Option<&str>> = batch.iter().map(|a| a.new.label.as_deref()).collect();
    let details: Vec<Option<&str>> = batch.iter().map(|a| a.new.detail.as_deref()).collect();
    let paths: Vec<Option<String>> = batch
        .iter()
        .map(|a| {
            (!a.new.paths.is_empty())
                .then(|| serde_json::to_string(&a.new.paths).expect("paths serialize"))
        })
        .collect();
    let created: Vec<i64> = batch.iter().map(|a| a.now).collect();
    let label_tokens: Vec<&str> = tokens.iter().map(|t| t.label.as_str()).collect();
    let flat = |f: fn(&RecordTokens) -> &Vec<String>| -> (Vec<&str>, Vec<i32>) {
        let all = tokens
            .iter()
            .flat_map(|t| f(t).iter().map(String::as_str))
            .collect();
        (all, ends(tokens.iter().map(|t| f(t).len())))
    };
    let (text_t, text_e) = flat(|t| &t.text);
    let (detail_t, detail_e) = flat(|t| &t.detail);
    let (words_t, words_e) = flat(|t| &t.words);
    let (author_t, author_e) = flat(|t| &t.author);
    // The events as `append` makes them, their payloads split where the id goes.
    let events: Vec<NewEvent> = batch
        .iter()
        .map(|a| record_event(&shown(a, 0), None))
        .collect();
    let (heads, tails): (Vec<String>, Vec<String>) =
        events.iter().map(|e| split_at_id(&e.payload)).unzip();
    let id_prefix = record_id(0).trim_end_matches('0').to_string();
    let dedup_prefix = format!("board:{id_prefix}");
    let (event_kind, priority) = (kinds::BOARD_RECORD, Priority::Urgent.as_str());
    // A record's token lists are slices of one flat array per column (arrays of arrays
    // must be rectangular in PostgreSQL), `b.*b` where the one before ends. Both inserts
    // read the numbers before the statement (one snapshot), so record i is `top.r + i`
    // and its event `top.e + i`.
    let row = conn
        .query_one(
            "WITH top AS (SELECT (SELECT coalesce(max(seq), 0) FROM records) AS r, \
                                 (SELECT coalesce(max(seq), 0) FROM events) AS e), \
             u AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
                     $6::text[], $7::bigint[], $8::text[], $9::int[], $11::int[], $13::int[], $15::int[], \
                     $17::text[], $18::text[]) \
                   WITH ORDINALITY AS u(kind, author, text, label, detail, paths, created_at, label_token, \
                     te, de, we, ae, head, tail, i)), \
             b AS (SELECT u.*, coalesce(lag(te) OVER w, 0) AS tb, coalesce(lag(de) OVER w, 0) AS db, \
                     coalesce(lag(we) OVER w, 0) AS wb, coalesce(lag(ae) OVER w, 0) AS ab \
                   FROM u WINDOW w AS (ORDER BY i)), \
             rec AS (INSERT INTO records(seq, kind, author, text, label, detail, paths, created_at, \
                       text_tokens, detail_tokens, words, author_tokens, label_token) \
                     SELECT top.r + b.i, b.kind, b.author, b.text, b.label, b.detail, b.paths, b.created_at, \
                       coalesce(($10::text[])[b.tb + 1 : b.te], '{}'), coalesce(($12::text[])[b.db + 1 : b.de], '{}'), \
                       coalesce(($14::text[])[b.wb + 1 : b.we], '{}'), coalesce(($16::text[])[b.ab + 1 : b.ae], '{}'), \
                       b.label_token \
                     FROM b, top ORDER BY b.i RETURNING seq), \
             ev AS (INSERT INTO events(seq, kind, priority, payload, dedup_key, source, target, except_worker, created_at) \
                    SELECT top.e + b.i, $19, $20, b.head || $21 || (top.r + b.i)::text || b.tail, \
                      $22 || (top.r + b.i)::text, b.author, NULL, NULL, b.created_at \
                    FROM b, top ORDER BY b.i RETURNING seq) \
             SELECT top.r, top.e, (SELECT count(*) FROM rec), (SELECT count(*) FROM ev) FROM top",
            &[
                &kinds, &authors, &texts, &labels, &details, &paths, &created, &label_tokens,
                &text_e, &text_t, &detail_e, &detail_t, &words_e, &words_t, &author_e, &author_t,
                &heads, &tails, &event_kind, &priority, &id_prefix, &dedup_prefix,
            ],
        )
        .await?;
    let (records_top, events_top): (i64, i64) = (row.get(0), row.get(1));
    let (records, stored): (i64, i64) = (row.get(2), row.get(3));
    if records != n as i64 || stored != n as i64 {
        return Err(Error::internal(format!(
            "a batch of {n} appends stored {records} records and {stored} events (an event's dedup key was taken)"
        )));
    }
    Ok(batch
        .iter()
        .zip(events)
        .enumerate()
        .map(|(i, (a, e))| {
            let seq = records_top + 1 + i as i64;
            let shown = shown(a, seq);
            let mut payload = e.payload;
            payload["id"] = serde_json::Value::String(shown.id.clone());
            let event = Event {
                seq: events_top + 1 + i as i64,
                kind: e.kind,
                priority: e.priority,
                payload,
                dedup_key: Some(format!("board:{}", shown.id)),
                source: e.source,
                target: e.target,
                except: e.except,
                created_at: a.now,
            };
            (seq, event)
        })
        .collect())
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
    let sql = format!(
        "SELECT {NON_CLAIM_COLUMNS} FROM records r LEFT JOIN claims c ON c.seq = r.seq \
         WHERE r.seq < $1 AND r.seq > $2 AND r.kind != 'CLAIM' ORDER BY r.seq DESC LIMIT $3"
    );
    let mut scan = rules::ViewScan::new(cap, upto, reader);
    while scan.wants_more() {
        let page = query_records(conn, &sql, &[&scan.below, &after, &(VIEW_PAGE as i64)]).await?;
        if scan.take(page) {
            break;
        }
    }
    Ok(scan.finish(live_claims(conn, now).await?, (after, upto)))
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
    let mut expansions = Expansions::new();
    for p in prefixes(query) {
        let (from, below) = prefix_range(&p);
        let cap = EXPANSION_LIMIT as i64 + 1;
        let rows = match below {
            Some(b) => {
                conn.query(
                    "SELECT word FROM record_words WHERE word >= $1 AND word < $2 ORDER BY word LIMIT $3",
                    &[&from, &b, &cap],
                )
                .await?
            }
            None => {
                conn.query(
                    "SELECT word FROM record_words WHERE word >= $1 ORDER BY word LIMIT $2",
                    &[&from, &cap],
                )
                .await?
            }
        };
        let words: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        expansions.insert(p, (words.len() <= EXPANSION_LIMIT).then_some(words));
    }
    let cond = Condition::of(query, 3, &expansions);
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
    let found = conn
        .query_once(&sql, &params)
        .await
        .map_err(rules::bad_query)?;
    found.iter().map(rows::record).collect()
}

pub async fn unfold(conn: &mut Conn, seq: i64) -> Result<crate::Unfolded> {
    let record = get(conn, seq).await?;
    let (mut superseded_by, mut fail) = (None, None);
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
            fail = query_records(conn, &sql, &[&record.author, label, &seq, &"FAIL"])
                .await?
                .pop();
        }
    }
    Ok(rules::unfolded(record, superseded_by, fail))
}

async fn own_live_claim(conn: &mut Conn, worker: &str, seq: i64, now: i64) -> Result<Record> {
    let r = get(conn, seq).await?;
    let Some(lease) = rules::claim_lease(&r) else {
        return Err(rules::not_a_claim(
            &r,
            worker,
            live_claims(conn, now).await?,
        ));
    };
    let taker = match &lease.taken_over_by {
        Some(by) => Some(get(conn, parse_record_id(by)?).await?),
        None => None,
    };
    rules::check_own_claim(&r, &lease, worker, taker.as_ref(), now)?;
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
