//! Board records: the rules of an append (takeovers, leases, overlaps) and its events, of
//! renewing and releasing a claim, and the paging of the recent view.

use agensh_domain::event::{kinds, NewEvent, Priority};
use agensh_domain::ids::record_id;
use agensh_domain::record::{
    check_takeover, overlaps_of, ClaimOverlap, Lease, NewRecord, Record, RecordKind, TakeOver,
    TakeoverReason,
};
use agensh_domain::view::{RecentView, ViewEntry};
use agensh_domain::worker::WorkerStatus;
use agensh_domain::{Error, Result};

/// Most history rows one recent view reads before it stops looking further back.
pub const VIEW_SCAN_LIMIT: usize = 50_000;
/// Rows read per page while building a view.
pub const VIEW_PAGE: usize = 1_000;

pub fn unknown_record(seq: i64) -> Error {
    Error::not_found(
        "unknown_record",
        format!(
            "there is no record {} — search the board by content to find its id",
            record_id(seq)
        ),
    )
}

/// The refusal of a search the engine could not run (`e`).
pub fn bad_query(e: Error) -> Error {
    Error::invalid(
        "bad_query",
        format!(
            "the search could not run ({}) — simplify the query",
            e.message
        ),
    )
}

/// A claim being taken over: the old claim, whether its author is a worker (who hears of
/// it), and why it could be taken.
pub struct Takeover {
    pub old: Record,
    pub to_worker: bool,
    pub why: TakeoverReason,
}

impl Takeover {
    /// Checks that `taker` may take over `old` now ([`check_takeover`]; the engine reads
    /// them inside the write, so two takers cannot both pass): `status` is its author's
    /// (none when it is no worker), `taken_by` the record that took it over already.
    pub fn check(
        old: Record,
        taker: &str,
        status: Option<WorkerStatus>,
        taken_by: Option<&Record>,
        now: i64,
    ) -> Result<Takeover> {
        let why = check_takeover(&old, taker, status, taken_by, now)?;
        Ok(Takeover {
            old,
            to_worker: status.is_some(),
            why,
        })
    }

    /// A takeover that names no work of its own takes on the old claim's.
    pub fn lend_work(&self, new: &mut NewRecord) -> Result<()> {
        if new.label.is_none() && new.paths.is_empty() {
            new.label = self.old.label.clone();
            new.paths = self.old.paths.clone();
            new.validate()?;
        }
        Ok(())
    }

    /// What `record`, which took over this claim, says it took over.
    pub fn took_over(&self) -> TakeOver {
        TakeOver {
            id: self.old.id.clone(),
            author: self.old.author.clone(),
            why: self.why,
        }
    }
}

/// A record's paths as stored: JSON, or none when it has none.
pub fn paths_json(paths: &[String]) -> Option<String> {
    (!paths.is_empty()).then(|| serde_json::to_string(paths).expect("paths serialize"))
}

/// The lease of `new` appended at `now`: a claim's, for the seconds it asks (else
/// `default_lease_secs`); none for the other kinds.
pub fn lease_of(new: &NewRecord, default_lease_secs: u64, now: i64) -> Option<Lease> {
    (new.kind == RecordKind::Claim).then(|| {
        let secs = new.lease_secs.unwrap_or(default_lease_secs);
        Lease {
            expires_at: now + (secs as i64) * 1000,
            released_at: None,
            taken_over_by: None,
        }
    })
}

/// The other live claims a new claim `record` overlaps (`live`, but the one it took
/// over).
pub fn overlaps(
    record: &Record,
    live: Vec<Record>,
    taking: Option<&Takeover>,
) -> Vec<ClaimOverlap> {
    let taken = taking.map(|t| t.old.seq);
    let live: Vec<Record> = live.into_iter().filter(|c| Some(c.seq) != taken).collect();
    overlaps_of(record, &live)
}

/// The `board.record` event of `record`, for every worker but its author (and `except`).
pub fn record_event(record: &Record, except: Option<String>) -> NewEvent {
    NewEvent {
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
        source: Some(record.author.clone()),
        target: None,
        except,
    }
}

/// The events of appending `record`: its `board.record`, and when it took over a worker's
/// claim, the urgent `claim.taken_over` for that worker (who hears of it directly, like a
/// DM: it may come back and must not go on with the work, and so not through the
/// broadcast).
pub fn appended_events(record: &Record, taking: Option<&Takeover>) -> Vec<NewEvent> {
    let told = taking.filter(|t| t.to_worker);
    let mut out = vec![record_event(record, told.map(|t| t.old.author.clone()))];
    if let Some(t) = told {
        out.push(NewEvent {
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
            source: Some(record.author.clone()),
            target: Some(t.old.author.clone()),
            except: None,
        });
    }
    out
}

/// The paging of the recent view over records with `after < seq <= upto`: pages of
/// non-claim records, newest first, until the view is full or [`VIEW_SCAN_LIMIT`] rows
/// were read; `reader`'s own records are left out (it knows what it wrote).
pub struct ViewScan<'a> {
    view: RecentView,
    reader: Option<&'a str>,
    /// The next page is of records below this number.
    pub below: i64,
    scanned: usize,
}

impl<'a> ViewScan<'a> {
    pub fn new(cap: usize, upto: i64, reader: Option<&'a str>) -> Self {
        ViewScan {
            view: RecentView::new(cap),
            reader,
            below: upto.saturating_add(1),
            scanned: 0,
        }
    }

    /// Whether to read another page.
    pub fn wants_more(&self) -> bool {
        !self.view.is_full() && self.scanned < VIEW_SCAN_LIMIT
    }

    /// Takes the next page (at most [`VIEW_PAGE`] records below `below`, newest first);
    /// whether the history ended.
    pub fn take(&mut self, page: Vec<Record>) -> bool {
        let n = page.len();
        for r in page {
            self.below = r.seq;
            if Some(r.author.as_str()) != self.reader {
                self.view.push(r);
            }
        }
        self.scanned += n;
        n < VIEW_PAGE
    }

    /// The view, with the live claims `live` in its range that are not `reader`'s.
    pub fn finish(self, live: Vec<Record>, (after, upto): (i64, i64)) -> Vec<ViewEntry> {
        let reader = self.reader;
        let claims = live
            .into_iter()
            .filter(|c| c.seq > after && c.seq <= upto && Some(c.author.as_str()) != reader)
            .collect();
        self.view.finish(claims)
    }
}

/// What unfolding `record` shows: the newer patch summary of its author and label that
/// superseded it, and a FAIL of theirs that invalidated it (`fail`, before any such
/// summary).
pub fn unfolded(
    record: Record,
    superseded_by: Option<Record>,
    fail: Option<Record>,
) -> crate::Unfolded {
    let invalidated_by = fail.filter(|f| superseded_by.as_ref().is_none_or(|s| f.seq < s.seq));
    crate::Unfolded {
        record,
        superseded_by,
        invalidated_by,
    }
}

/// The lease of `r` when it is a claim.
pub fn claim_lease(r: &Record) -> Option<Lease> {
    match (&r.kind, &r.lease) {
        (RecordKind::Claim, Some(l)) => Some(l.clone()),
        _ => None,
    }
}

/// The refusal to renew or release `r`, which is no claim; it names `worker`'s live claims
/// (`live`: every live claim).
pub fn not_a_claim(r: &Record, worker: &str, live: Vec<Record>) -> Error {
    let mine: Vec<String> = live
        .into_iter()
        .filter(|c| c.author == worker)
        .map(|c| format!("{} ({})", c.id, c.label.as_deref().unwrap_or(&c.text)))
        .collect();
    let yours = if mine.is_empty() {
        "you hold no live claim".to_string()
    } else {
        format!("your live claims: {}", mine.join(", "))
    };
    Error::invalid(
        "not_a_claim",
        format!(
            "{} is a {}, not a CLAIM — pass the id of one of your claims ({yours})",
            r.id, r.kind
        ),
    )
}

/// Whether `worker` may renew or release claim `r` (whose lease is `lease`) at `now`: its
/// own, not taken over (by `taker`, read when the lease names one), released or expired.
pub fn check_own_claim(
    r: &Record,
    lease: &Lease,
    worker: &str,
    taker: Option<&Record>,
    now: i64,
) -> Result<()> {
    if let (Some(by), Some(taker)) = (&lease.taken_over_by, taker) {
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
    Ok(())
}
