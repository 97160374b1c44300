//! Board records: append, claims and their leases, the recent view, grep and unfold.

use agensh_domain::ids::parse_record_id;
use agensh_domain::record::{validate_lease, Appended, NewRecord, Record, RecordKind};
use agensh_domain::view::ViewEntry;
use agensh_domain::worker::WorkerStatus;
use agensh_domain::Result;
use rusqlite::{params, Connection, OptionalExtension};

use super::conn::{sql_err, WriteCtx};
use super::fts::{kind_token, label_token};
use crate::common::board::{self as rules, Takeover, VIEW_PAGE};
use crate::common::rows::{self, record_base_columns, RECORD_COLUMNS, TAKEOVER_JOINS};

/// The record's columns for rows that cannot be claims (no takeover to look up).
const NON_CLAIM_COLUMNS: &str = concat!(record_base_columns!(), ", NULL, NULL, NULL, NULL");

fn query_records(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<Vec<Record>> {
    let mut stmt = conn.prepare_cached(sql).map_err(sql_err)?;
    let found = stmt
        .query_map(params, |r| rows::record(r))
        .map_err(sql_err)?;
    found.collect::<rusqlite::Result<_>>().map_err(sql_err)
}

/// One record by sequence number, or a not-found error that says where to look.
pub fn get(conn: &Connection, seq: i64) -> Result<Record> {
    let sql = format!("SELECT {RECORD_COLUMNS} FROM records r LEFT JOIN claims c ON c.seq = r.seq {TAKEOVER_JOINS} WHERE r.seq = ?1");
    query_records(conn, &sql, [seq])?
        .pop()
        .ok_or_else(|| rules::unknown_record(seq))
}

/// The status of worker `id`, or `None` when it is no worker (`admin`).
fn worker_status(conn: &Connection, id: &str) -> Result<Option<WorkerStatus>> {
    let status: Option<String> = conn
        .query_row("SELECT status FROM workers WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .optional()
        .map_err(sql_err)?;
    status.as_deref().map(WorkerStatus::parse).transpose()
}

/// Checks that `taker` may take over claim `seq` now ([`Takeover::check`], inside the
/// write transaction, so two takers cannot both pass).
fn takeover(conn: &Connection, taker: &str, seq: i64, now: i64) -> Result<Takeover> {
    let old = get(conn, seq)?;
    let status = worker_status(conn, &old.author)?;
    let taken_by = match old.lease.as_ref().and_then(|l| l.taken_over_by.as_deref()) {
        Some(id) => Some(get(conn, parse_record_id(id)?)?),
        None => None,
    };
    Takeover::check(old, taker, status, taken_by.as_ref(), now)
}

pub fn append(
    ctx: &mut WriteCtx<'_>,
    author: &str,
    mut new: NewRecord,
    now: i64,
    default_lease_secs: u64,
) -> Result<Appended> {
    new.validate()?;
    let conn = ctx.conn;
    let taking = match new.takes_over_seq()? {
        Some(seq) => Some(takeover(conn, author, seq, now)?),
        None => None,
    };
    if let Some(t) = &taking {
        t.lend_work(&mut new)?;
    }
    let paths = rules::paths_json(&new.paths);
    conn.prepare_cached(
        "INSERT INTO records(kind, author, text, label, detail, paths, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )
    .and_then(|mut s| {
        s.execute(params![new.kind.as_str(), author, new.text, new.label, new.detail, paths, now])
    })
    .map_err(sql_err)?;
    let seq = conn.last_insert_rowid();
    conn.prepare_cached(
        "INSERT INTO records_fts(rowid, text, detail, kind, author, label) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .and_then(|mut s| {
        s.execute(params![
            seq,
            new.text,
            new.detail.as_deref().unwrap_or(""),
            kind_token(new.kind),
            author.to_ascii_lowercase(),
            new.label.as_deref().map(label_token).unwrap_or_default(),
        ])
    })
    .map_err(sql_err)?;

    let lease = rules::lease_of(&new, default_lease_secs, now);
    if let Some(l) = &lease {
        conn.prepare_cached("INSERT INTO claims(seq, author, expires_at) VALUES (?1, ?2, ?3)")
            .and_then(|mut s| s.execute(params![seq, author, l.expires_at]))
            .map_err(sql_err)?;
    }
    let mut record = Record::from_new(seq, author, new, now, lease);
    if let Some(t) = &taking {
        conn.prepare_cached(
            "INSERT INTO takeovers(seq, old, old_author, why) VALUES (?1, ?2, ?3, ?4)",
        )
        .and_then(|mut s| s.execute(params![seq, t.old.seq, t.old.author, t.why.as_str()]))
        .map_err(sql_err)?;
        // A claim whose lease still runs (its author dead or stopped) ends now, so it
        // cannot come back to life with its author; a released or expired one stays so.
        conn.prepare_cached(
            "UPDATE claims SET released_at = ?2 WHERE seq = ?1 AND released_at IS NULL AND expires_at > ?2",
        )
        .and_then(|mut s| s.execute(params![t.old.seq, now]))
        .map_err(sql_err)?;
        record.takes_over = Some(t.took_over());
    }
    let overlaps = if record.kind == RecordKind::Claim {
        rules::overlaps(&record, live_claims(conn, now)?, taking.as_ref())
    } else {
        Vec::new()
    };
    for event in rules::appended_events(&record, taking.as_ref()) {
        ctx.emit(&event, now)?;
    }
    Ok(Appended { record, overlaps })
}

/// Claims whose lease runs, not released, whose author is not dead; oldest first.
pub fn live_claims(conn: &Connection, now: i64) -> Result<Vec<Record>> {
    let sql = format!(
        "SELECT {RECORD_COLUMNS} FROM claims c JOIN records r ON r.seq = c.seq {TAKEOVER_JOINS} \
         LEFT JOIN workers w ON w.id = c.author \
         WHERE c.released_at IS NULL AND c.expires_at > ?1 AND ifnull(w.status, '') != 'dead' \
         ORDER BY c.seq"
    );
    query_records(conn, &sql, [now])
}

/// The recent view over records with `after < seq <= upto` (`0, i64::MAX` for all
/// history), leaving out the records of `reader` (who knows what it wrote).
pub fn recent_view(
    conn: &Connection,
    now: i64,
    cap: usize,
    (after, upto): (i64, i64),
    reader: Option<&str>,
) -> Result<Vec<ViewEntry>> {
    let sql = format!(
        "SELECT {NON_CLAIM_COLUMNS} FROM records r LEFT JOIN claims c ON c.seq = r.seq \
         WHERE r.seq < ?1 AND r.seq > ?2 AND r.kind != 'CLAIM' ORDER BY r.seq DESC LIMIT ?3"
    );
    let mut scan = rules::ViewScan::new(cap, upto, reader);
    while scan.wants_more() {
        let page = query_records(conn, &sql, params![scan.below, after, VIEW_PAGE as i64])?;
        if scan.take(page) {
            break;
        }
    }
    Ok(scan.finish(live_claims(conn, now)?, (after, upto)))
}

/// A worker's board cursor and the newest record sequence number now.
pub fn unread_bounds(conn: &Connection, worker: &str) -> Result<(i64, i64)> {
    let cursor: Option<i64> = conn
        .query_row(
            "SELECT board_cursor FROM workers WHERE id = ?1",
            [worker],
            |r| r.get(0),
        )
        .optional()
        .map_err(sql_err)?;
    let cursor = cursor.ok_or_else(|| agensh_domain::worker::unknown_worker(worker))?;
    let top: i64 = conn
        .query_row("SELECT ifnull(max(seq), 0) FROM records", [], |r| r.get(0))
        .map_err(sql_err)?;
    Ok((cursor, top))
}

pub fn set_board_cursor(conn: &Connection, worker: &str, top: i64) -> Result<()> {
    conn.execute(
        "UPDATE workers SET board_cursor = max(board_cursor, ?2) WHERE id = ?1",
        params![worker, top],
    )
    .map_err(sql_err)?;
    Ok(())
}

pub fn grep(
    conn: &Connection,
    fts: &str,
    before: Option<i64>,
    limit: usize,
) -> Result<Vec<Record>> {
    let sql = format!(
        "SELECT {RECORD_COLUMNS} FROM records_fts f JOIN records r ON r.seq = f.rowid \
         LEFT JOIN claims c ON c.seq = r.seq {TAKEOVER_JOINS} \
         WHERE records_fts MATCH ?1 AND f.rowid < ?2 ORDER BY f.rowid DESC LIMIT ?3"
    );
    query_records(
        conn,
        &sql,
        params![fts, before.unwrap_or(i64::MAX), limit as i64],
    )
    .map_err(rules::bad_query)
}

pub fn unfold(conn: &Connection, seq: i64) -> Result<crate::Unfolded> {
    let record = get(conn, seq)?;
    let (mut superseded_by, mut fail) = (None, None);
    if record.kind == RecordKind::PatchSummary {
        if let Some(label) = &record.label {
            let sql = format!(
                "SELECT {NON_CLAIM_COLUMNS} FROM records r LEFT JOIN claims c ON c.seq = r.seq \
                 WHERE r.author = ?1 AND r.label = ?2 AND r.seq > ?3 AND r.kind = ?4 ORDER BY r.seq LIMIT 1"
            );
            superseded_by = query_records(
                conn,
                &sql,
                params![record.author, label, seq, "PATCH_SUMMARY"],
            )?
            .pop();
            fail = query_records(conn, &sql, params![record.author, label, seq, "FAIL"])?.pop();
        }
    }
    Ok(rules::unfolded(record, superseded_by, fail))
}

/// Loads `worker`'s own live claim `seq`, or says why it cannot be changed.
fn own_live_claim(conn: &Connection, worker: &str, seq: i64, now: i64) -> Result<Record> {
    let r = get(conn, seq)?;
    let Some(lease) = rules::claim_lease(&r) else {
        return Err(rules::not_a_claim(&r, worker, live_claims(conn, now)?));
    };
    let taker = match &lease.taken_over_by {
        Some(by) => Some(get(conn, parse_record_id(by)?)?),
        None => None,
    };
    rules::check_own_claim(&r, &lease, worker, taker.as_ref(), now)?;
    Ok(r)
}

pub fn renew(
    conn: &Connection,
    worker: &str,
    seq: i64,
    lease_secs: u64,
    now: i64,
) -> Result<Record> {
    validate_lease(lease_secs)?;
    own_live_claim(conn, worker, seq, now)?;
    conn.execute(
        "UPDATE claims SET expires_at = ?2 WHERE seq = ?1",
        params![seq, now + lease_secs as i64 * 1000],
    )
    .map_err(sql_err)?;
    get(conn, seq)
}

pub fn release(conn: &Connection, worker: &str, seq: i64, now: i64) -> Result<Record> {
    own_live_claim(conn, worker, seq, now)?;
    conn.execute(
        "UPDATE claims SET released_at = ?2 WHERE seq = ?1",
        params![seq, now],
    )
    .map_err(sql_err)?;
    get(conn, seq)
}
