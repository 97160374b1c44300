//! Board records: the five kinds, their limits and validation.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ids::{parse_record_id, record_id, truncate_for_message};
use crate::text::{self, Lines};
use crate::worker::WorkerStatus;

/// Text limit for FACT, OBSERVED, FAIL and CLAIM records.
pub const TEXT_LIMIT: usize = 100;
/// Text limit for PATCH_SUMMARY records.
pub const PATCH_SUMMARY_LIMIT: usize = 300;
/// Label limit, in characters.
pub const LABEL_LIMIT: usize = 64;
/// Detail limit, in characters.
pub const DETAIL_LIMIT: usize = 8_000;
/// Most paths one claim may list.
pub const PATHS_LIMIT: usize = 64;
/// Longest path a claim may list, in characters.
pub const PATH_LIMIT: usize = 256;
/// Longest claim lease, in seconds (one day); renew for longer work.
pub const MAX_LEASE_SECS: u64 = 86_400;

/// The kind of a board record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RecordKind {
    Observed,
    Fact,
    Fail,
    Claim,
    PatchSummary,
}

impl RecordKind {
    /// Every kind, in the order messages and help texts list them: the one list of kinds.
    pub const ALL: [RecordKind; 5] = [
        RecordKind::Observed,
        RecordKind::Fact,
        RecordKind::Fail,
        RecordKind::Claim,
        RecordKind::PatchSummary,
    ];

    /// The kind's name as written on the board (`PATCH_SUMMARY`).
    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Observed => "OBSERVED",
            RecordKind::Fact => "FACT",
            RecordKind::Fail => "FAIL",
            RecordKind::Claim => "CLAIM",
            RecordKind::PatchSummary => "PATCH_SUMMARY",
        }
    }

    /// Every kind's name, comma-separated in [`RecordKind::ALL`] order, for error messages
    /// and help texts (`OBSERVED, FACT, FAIL, CLAIM, PATCH_SUMMARY`).
    pub fn names() -> String {
        RecordKind::ALL.map(RecordKind::as_str).join(", ")
    }

    /// Parses a kind name, case-insensitively.
    pub fn parse(s: &str) -> Result<Self> {
        let upper = s.to_ascii_uppercase();
        RecordKind::ALL
            .into_iter()
            .find(|k| k.as_str() == upper)
            .ok_or_else(|| {
                Error::invalid(
                    "unknown_kind",
                    format!(
                        "unknown record kind \"{}\" — use one of {}",
                        truncate_for_message(s),
                        RecordKind::names()
                    ),
                )
            })
    }

    /// The most characters `text` may have for this kind.
    pub fn text_limit(self) -> usize {
        match self {
            RecordKind::PatchSummary => PATCH_SUMMARY_LIMIT,
            _ => TEXT_LIMIT,
        }
    }
}

impl std::fmt::Display for RecordKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A record as a client submits it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewRecord {
    pub kind: RecordKind,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Files or directories a CLAIM expects to touch (CLAIM only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// Lease of a CLAIM in seconds; the hub's default when absent (CLAIM only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_secs: Option<u64>,
    /// The id of a claim this CLAIM takes over (`G12`): one whose author is dead or
    /// stopped, or that is no longer live ([`check_takeover`]). CLAIM only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub takes_over: Option<String>,
}

impl NewRecord {
    /// A record with only kind and text.
    pub fn new(kind: RecordKind, text: impl Into<String>) -> Self {
        NewRecord {
            kind,
            text: text.into(),
            label: None,
            detail: None,
            paths: Vec::new(),
            lease_secs: None,
            takes_over: None,
        }
    }

    /// Checks every limit; the error says which one broke and what to do.
    pub fn validate(&self) -> Result<()> {
        if text::is_blank(&self.text) {
            return Err(Error::invalid(
                "empty_text",
                format!(
                    "{} text is empty or only invisible characters — say in one line what you found, did or claim",
                    self.kind
                ),
            ));
        }
        let n = self.text.chars().count();
        let limit = self.kind.text_limit();
        if n > limit {
            return Err(Error::invalid(
                "text_too_long",
                format!(
                    "{} text is {n} characters; the limit is {limit} — shorten it or move the rest to detail",
                    self.kind
                ),
            ));
        }
        text::check(
            &format!("{} text", self.kind),
            &self.text,
            Lines::One,
            "text_control_chars",
            "keep text to one plain line and put longer content in detail",
        )?;
        if let Some(label) = &self.label {
            validate_label(label)?;
        }
        if let Some(detail) = &self.detail {
            text::check(
                "detail",
                detail,
                Lines::Many,
                "control_chars",
                text::PLAIN_TEXT,
            )?;
            let n = detail.chars().count();
            if n > DETAIL_LIMIT {
                return Err(Error::invalid(
                    "detail_too_long",
                    format!(
                        "detail is {n} characters; the limit is {DETAIL_LIMIT} — keep the essentials and point to a file in the repository for the rest"
                    ),
                ));
            }
        }
        if self.kind != RecordKind::Claim {
            if !self.paths.is_empty() {
                return Err(Error::invalid(
                    "paths_not_claim",
                    format!(
                        "paths belong to CLAIM records only — drop them from this {}",
                        self.kind
                    ),
                ));
            }
            if self.lease_secs.is_some() {
                return Err(Error::invalid(
                    "lease_not_claim",
                    format!(
                        "a lease belongs to CLAIM records only — drop it from this {}",
                        self.kind
                    ),
                ));
            }
        }
        if self.paths.len() > PATHS_LIMIT {
            return Err(Error::invalid(
                "too_many_paths",
                format!(
                    "the claim lists {} paths; the limit is {PATHS_LIMIT} — claim a directory instead of its files",
                    self.paths.len()
                ),
            ));
        }
        for p in &self.paths {
            validate_path(p)?;
        }
        if let Some(lease) = self.lease_secs {
            validate_lease(lease)?;
        }
        if let Some(id) = &self.takes_over {
            if self.kind != RecordKind::Claim {
                return Err(Error::invalid(
                    "takeover_not_claim",
                    format!(
                        "only a CLAIM can take over a claim — drop takes_over from this {}",
                        self.kind
                    ),
                ));
            }
            parse_record_id(id)?;
        }
        Ok(())
    }

    /// The sequence number of the claim this record takes over, if it names one (checked
    /// by [`NewRecord::validate`]).
    pub fn takes_over_seq(&self) -> Result<Option<i64>> {
        self.takes_over.as_deref().map(parse_record_id).transpose()
    }
}

/// Checks a lease length in seconds.
pub fn validate_lease(lease: u64) -> Result<()> {
    if lease == 0 || lease > MAX_LEASE_SECS {
        return Err(Error::invalid(
            "bad_lease",
            format!(
                "a lease of {lease} s is out of range; use 1 to {MAX_LEASE_SECS} s and renew the claim while you work"
            ),
        ));
    }
    Ok(())
}

/// Whether a label may hold `c`: letters, digits and `-_./:#`.
pub fn is_label_char(c: char) -> bool {
    c.is_alphanumeric() || "-_./:#".contains(c)
}

/// Checks a label: at most 64 characters of letters, digits and `-_./:#`.
pub fn validate_label(label: &str) -> Result<()> {
    let n = label.chars().count();
    if n == 0 {
        return Err(Error::invalid(
            "empty_label",
            "label is empty — leave it out, or name the work item (e.g. parser-errors)",
        ));
    }
    if n > LABEL_LIMIT {
        return Err(Error::invalid(
            "label_too_long",
            format!(
                "label is {n} characters; the limit is {LABEL_LIMIT} — use a short name for the work item (e.g. parser-errors)"
            ),
        ));
    }
    if let Some(c) = label.chars().find(|c| !is_label_char(*c)) {
        return Err(Error::invalid(
            "bad_label",
            format!(
                "label \"{}\" contains {c:?} — use letters, digits and - _ . / : # only",
                truncate_for_message(label)
            ),
        ));
    }
    Ok(())
}

/// Checks a claimed path: relative, inside the repository, printable.
pub fn validate_path(p: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::invalid(
            "bad_path",
            format!(
                "path \"{}\" {why} — give paths relative to the repository root, like src/parser.rs or docs/",
                truncate_for_message(p)
            ),
        ))
    };
    if p.is_empty() {
        return bad("is empty");
    }
    if p.chars().count() > PATH_LIMIT {
        return bad("is longer than 256 characters");
    }
    if let Some((_, c)) = text::first_refused(p, Lines::One) {
        return bad(&format!(
            "contains a control character (U+{:04X})",
            c as u32
        ));
    }
    if p.chars().any(|c| c != ' ' && text::is_invisible(c)) {
        return bad("contains an invisible character or a space other than U+0020");
    }
    if p.starts_with('/') || p.starts_with('\\') {
        return bad("is absolute");
    }
    if p.split(['/', '\\']).any(|seg| seg == "..") {
        return bad("leaves the repository with ..");
    }
    Ok(())
}

/// Whether two claimed paths touch the same files: equal, or one is a directory holding the
/// other. Paths that look alike ([`text::path_key`]: `src/pаrser.rs` with a Cyrillic `а`)
/// are the same path.
pub fn paths_overlap(a: &str, b: &str) -> bool {
    keys_overlap(&text::path_key(a), &text::path_key(b))
}

/// [`paths_overlap`] on two [`text::path_key`]s.
fn keys_overlap(a: &str, b: &str) -> bool {
    a == b
        || a.is_empty()
        || b.is_empty()
        || b.strip_prefix(a).is_some_and(|r| r.starts_with('/'))
        || a.strip_prefix(b).is_some_and(|r| r.starts_with('/'))
}

/// The lease state of a CLAIM record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// When the lease ends (Unix ms) unless renewed.
    pub expires_at: i64,
    /// When the author released the claim (Unix ms), if they did, or when a peer took it
    /// over while its lease ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_at: Option<i64>,
    /// The claim that took this one over (`G15`), if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taken_over_by: Option<String>,
}

impl Lease {
    /// A claim is live while its lease runs and it is not released (nor taken over).
    pub fn is_live(&self, now: i64) -> bool {
        self.released_at.is_none() && self.taken_over_by.is_none() && self.expires_at > now
    }
}

/// Why a claim could be taken over: the first that held when it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TakeoverReason {
    /// Its author had released it.
    Released,
    /// Its author was dead (its agent could not be restarted).
    Dead,
    /// Its author was stopped (no node runs it: not started, run over, budget spent).
    Stopped,
    /// Its lease had run out.
    Expired,
}

impl TakeoverReason {
    pub const ALL: [TakeoverReason; 4] = [
        TakeoverReason::Released,
        TakeoverReason::Dead,
        TakeoverReason::Stopped,
        TakeoverReason::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TakeoverReason::Released => "released",
            TakeoverReason::Dead => "dead",
            TakeoverReason::Stopped => "stopped",
            TakeoverReason::Expired => "expired",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        TakeoverReason::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// The claim a CLAIM took over, as the new claim records it: which, whose, and why it
/// could be taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TakeOver {
    /// The old claim (`G12`).
    pub id: String,
    /// Its author.
    pub author: String,
    pub why: TakeoverReason,
}

/// Whether `taker` may take over the record `old` at `now`, and why. `author_status` is the
/// status of `old`'s author (`None` when it is no worker, e.g. `admin`), `taken_by` the
/// claim that took `old` over already, if any.
///
/// A claim may be taken over when it was released, its author is dead or stopped, or its
/// lease ran out; a claim may be taken over once, and never by its own author. Every
/// refusal says what to do instead.
pub fn check_takeover(
    old: &Record,
    taker: &str,
    author_status: Option<WorkerStatus>,
    taken_by: Option<&Record>,
    now: i64,
) -> Result<TakeoverReason> {
    let lease = match (old.kind, &old.lease) {
        (RecordKind::Claim, Some(l)) => l,
        _ => {
            return Err(Error::invalid(
                "not_a_claim",
                format!(
                    "{} is a {}, not a CLAIM — takes_over names the claim you take over (search the board for kind:CLAIM to find it)",
                    old.id, old.kind
                ),
            ))
        }
    };
    if old.author == taker {
        return Err(Error::invalid(
            "own_claim",
            format!(
                "{} is your own claim — renew it while it is live, or post a new CLAIM without takes_over",
                old.id
            ),
        ));
    }
    if lease.taken_over_by.is_some() {
        let (id, by) = match taken_by {
            Some(r) => (r.id.clone(), r.author.clone()),
            None => (
                lease.taken_over_by.clone().unwrap_or_default(),
                "another worker".to_string(),
            ),
        };
        return Err(Error::conflict(
            "claim_taken_over",
            format!(
                "{} was already taken over by {id} ({by}) — message {by} to share the work, or claim something else (take over {id} only if {by} is dead or stopped)",
                old.id
            ),
        ));
    }
    if lease.released_at.is_some() {
        return Ok(TakeoverReason::Released);
    }
    match author_status {
        Some(WorkerStatus::Dead) => return Ok(TakeoverReason::Dead),
        Some(WorkerStatus::Stopped) => return Ok(TakeoverReason::Stopped),
        _ => {}
    }
    if lease.expires_at <= now {
        return Ok(TakeoverReason::Expired);
    }
    let who = match author_status {
        Some(s) => format!("{} is {}", old.author, s.as_str()),
        None => format!("{} is no worker", old.author),
    };
    let left = crate::time::age(now, lease.expires_at);
    Err(Error::conflict(
        "claim_alive",
        format!(
            "{} is {}'s live claim ({who}, lease {} left) — only a claim whose author is dead or stopped, or that was released or expired, can be taken over: message {} to hand it over, or claim something else",
            old.id,
            old.author,
            left.trim_start_matches('+'),
            old.author
        ),
    ))
}

/// A record as stored: append-only, never edited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Sequence number; the short id is `G{seq}`.
    pub seq: i64,
    pub id: String,
    pub kind: RecordKind,
    pub author: String,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// Unix ms.
    pub created_at: i64,
    /// CLAIM records only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
    /// The claim this CLAIM took over, if it took one over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub takes_over: Option<TakeOver>,
}

impl Record {
    /// Builds a stored record from its parts (the id is derived from `seq`).
    pub fn from_new(
        seq: i64,
        author: &str,
        new: NewRecord,
        created_at: i64,
        lease: Option<Lease>,
    ) -> Self {
        Record {
            seq,
            id: record_id(seq),
            kind: new.kind,
            author: author.to_string(),
            text: new.text,
            label: new.label,
            detail: new.detail,
            paths: new.paths,
            created_at,
            lease,
            takes_over: None,
        }
    }

    /// One compact line, as the board shows it: `G12 [w03/FACT +12m] text (label)`. What
    /// a one-line field may not hold (a record stored before the checks) is shown escaped
    /// ([`text::escape`]), so the line stays one line and acts on no terminal.
    pub fn line(&self, now: i64) -> String {
        let one = |s: &str| text::escape(s, Lines::One).into_owned();
        let mut s = format!(
            "{} [{}/{} {}] {}",
            self.id,
            one(&self.author),
            self.kind,
            crate::time::age(self.created_at, now),
            one(&self.text)
        );
        if let Some(l) = &self.label {
            s.push_str(&format!(" #{}", one(l)));
        }
        if !self.paths.is_empty() {
            s.push_str(&format!(" paths={}", one(&self.paths.join(","))));
        }
        if let Some(t) = &self.takes_over {
            s.push_str(&format!(
                " takes over {} ({}, {})",
                t.id,
                one(&t.author),
                t.why.as_str()
            ));
        }
        if let Some(by) = self.lease.as_ref().and_then(|l| l.taken_over_by.as_ref()) {
            s.push_str(&format!(" (taken over by {by})"));
        }
        if self.detail.is_some() {
            s.push_str(" (+detail)");
        }
        s
    }
}

/// Another worker's live claim that overlaps a new claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimOverlap {
    pub id: String,
    pub author: String,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The overlapping claim's paths that touch the new claim's paths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// True when the overlap is the same label.
    pub same_label: bool,
    pub expires_at: i64,
}

/// The answer to appending a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Appended {
    pub record: Record,
    /// For a CLAIM: other workers' live claims on the same label or paths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overlaps: Vec<ClaimOverlap>,
}

/// Finds the live claims in `live` (by other authors) that overlap `claim`: the same label
/// or overlapping paths, compared by their look-alike keys ([`text::label_key`],
/// [`text::path_key`]), so `pаrser` with a Cyrillic `а` meets `parser`.
pub fn overlaps_of(claim: &Record, live: &[Record]) -> Vec<ClaimOverlap> {
    let label = claim.label.as_deref().map(text::label_key);
    let mine: Vec<String> = claim.paths.iter().map(|p| text::path_key(p)).collect();
    live.iter()
        .filter(|c| c.author != claim.author && c.seq != claim.seq)
        .filter_map(|c| {
            let same_label = label.is_some() && c.label.as_deref().map(text::label_key) == label;
            let paths: Vec<String> = c
                .paths
                .iter()
                .filter(|p| {
                    let key = text::path_key(p);
                    mine.iter().any(|q| keys_overlap(&key, q))
                })
                .cloned()
                .collect();
            (same_label || !paths.is_empty()).then(|| ClaimOverlap {
                id: c.id.clone(),
                author: c.author.clone(),
                text: c.text.clone(),
                label: c.label.clone(),
                paths,
                same_label,
                expires_at: c.lease.as_ref().map_or(0, |l| l.expires_at),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(seq: i64, author: &str, label: Option<&str>, paths: &[&str]) -> Record {
        let mut n = NewRecord::new(RecordKind::Claim, "x");
        n.label = label.map(str::to_string);
        n.paths = paths.iter().map(|p| p.to_string()).collect();
        Record::from_new(
            seq,
            author,
            n,
            0,
            Some(Lease {
                expires_at: 10,
                released_at: None,
                taken_over_by: None,
            }),
        )
    }

    #[test]
    fn fact_over_100_characters_is_rejected_with_advice() {
        let e = NewRecord::new(RecordKind::Fact, "x".repeat(143))
            .validate()
            .unwrap_err();
        assert_eq!(
            e.message,
            "FACT text is 143 characters; the limit is 100 — shorten it or move the rest to detail"
        );
    }

    #[test]
    fn limit_messages_name_the_field_not_a_command_line_flag() {
        for r in [
            NewRecord::new(RecordKind::Fact, "x".repeat(143)),
            NewRecord::new(RecordKind::Fact, "a\nb"),
        ] {
            let e = r.validate().unwrap_err();
            assert!(
                e.message.ends_with("in detail") || e.message.ends_with("to detail"),
                "{}",
                e.message
            );
            assert!(!e.message.contains("--"), "{}", e.message);
        }
    }

    #[test]
    fn patch_summary_may_have_300_characters() {
        assert!(NewRecord::new(RecordKind::PatchSummary, "é".repeat(300))
            .validate()
            .is_ok());
        assert!(NewRecord::new(RecordKind::PatchSummary, "é".repeat(301))
            .validate()
            .is_err());
    }

    #[test]
    fn limits_count_characters_not_bytes() {
        assert!(NewRecord::new(RecordKind::Fact, "é".repeat(100))
            .validate()
            .is_ok());
    }

    #[test]
    fn empty_and_multiline_text_are_rejected() {
        assert_eq!(
            NewRecord::new(RecordKind::Fact, "  ")
                .validate()
                .unwrap_err()
                .code,
            "empty_text"
        );
        assert_eq!(
            NewRecord::new(RecordKind::Fact, "a\nb")
                .validate()
                .unwrap_err()
                .code,
            "text_control_chars"
        );
    }

    #[test]
    fn kind_names_parse_case_insensitively_and_unknown_ones_fail() {
        assert_eq!(
            RecordKind::parse("patch_summary").unwrap(),
            RecordKind::PatchSummary
        );
        let e = RecordKind::parse("TRIED").unwrap_err();
        assert!(e
            .message
            .contains("use one of OBSERVED, FACT, FAIL, CLAIM, PATCH_SUMMARY"));
    }

    #[test]
    fn names_list_every_kind_once_in_order() {
        assert_eq!(
            RecordKind::names(),
            "OBSERVED, FACT, FAIL, CLAIM, PATCH_SUMMARY"
        );
        for k in RecordKind::ALL {
            assert_eq!(RecordKind::parse(k.as_str()).unwrap(), k);
        }
    }

    #[test]
    fn labels_are_short_and_plain() {
        assert!(validate_label("parser-v2").is_ok());
        assert_eq!(
            validate_label(&"a".repeat(65)).unwrap_err().code,
            "label_too_long"
        );
        assert_eq!(validate_label("a b").unwrap_err().code, "bad_label");
    }

    #[test]
    fn paths_must_stay_inside_the_repository() {
        assert!(validate_path("src/main.rs").is_ok());
        assert!(validate_path("/etc/passwd").is_err());
        assert!(validate_path("src/../../x").is_err());
    }

    #[test]
    fn only_claims_take_paths_and_leases() {
        let mut n = NewRecord::new(RecordKind::Fact, "x");
        n.paths = vec!["src".into()];
        assert_eq!(n.validate().unwrap_err().code, "paths_not_claim");
    }

    #[test]
    fn a_directory_overlaps_the_files_inside_it() {
        assert!(paths_overlap("src/", "src/main.rs"));
        assert!(paths_overlap("src/main.rs", "src"));
        assert!(paths_overlap("a.rs", "a.rs"));
        assert!(!paths_overlap("src/a.rs", "src/ab.rs"));
        assert!(!paths_overlap("src2", "src/a.rs"));
    }

    #[test]
    fn an_escape_in_detail_is_refused_with_where_and_what_to_do() {
        let mut n = NewRecord::new(RecordKind::Fact, "parser fails on tabs");
        n.detail = Some("line one\n\u{1b}]0;owned\u{7}".into());
        let e = n.validate().unwrap_err();
        assert_eq!(e.code, "control_chars");
        assert_eq!(
            e.message,
            "detail contains an escape character (U+001B) at character 10 — remove terminal control sequences; plain text only"
        );
        n.detail = Some("line one\n\tindented\r\nline three".into());
        assert!(n.validate().is_ok());
    }

    #[test]
    fn record_text_of_only_zero_width_characters_is_empty() {
        for t in [
            "\u{200B}",
            "\u{200B}\u{200C}\u{200D}\u{2060}\u{FEFF}",
            " \u{FE0F} ",
        ] {
            let e = NewRecord::new(RecordKind::Fact, t).validate().unwrap_err();
            assert_eq!(e.code, "empty_text", "{t:?}");
        }
    }

    #[test]
    fn a_right_to_left_override_is_refused_in_text_and_detail() {
        let e = NewRecord::new(RecordKind::Fact, "tests pass \u{202E}lin")
            .validate()
            .unwrap_err();
        assert_eq!(e.code, "text_control_chars");
        assert!(
            e.message.contains("(U+202E) at character 12"),
            "{}",
            e.message
        );
        let mut n = NewRecord::new(RecordKind::Fact, "x");
        n.detail = Some("\u{2067}hidden\u{2069}".into());
        assert_eq!(n.validate().unwrap_err().code, "control_chars");
    }

    #[test]
    fn non_english_records_are_accepted() {
        let mut n = NewRecord::new(RecordKind::Fact, "le café est prêt — 日本語のテスト");
        n.label = Some("パーサー".into());
        n.detail = Some("Проверка: всё работает\nשלום".into());
        assert!(n.validate().is_ok());
    }

    #[test]
    fn paths_with_controls_or_invisible_characters_are_refused() {
        assert!(validate_path("src/a\u{202E}b.rs").is_err());
        assert!(validate_path("src/a\u{200B}b.rs").is_err());
        assert!(validate_path("docs/my notes.md").is_ok());
        assert!(validate_path("src/café.rs").is_ok());
    }

    #[test]
    fn a_label_with_a_cyrillic_look_alike_overlaps_the_latin_one() {
        let new = claim(10, "w02", Some("p\u{0430}rser"), &[]);
        let o = overlaps_of(&new, &[claim(1, "w01", Some("parser"), &[])]);
        assert_eq!(o.len(), 1);
        assert!(o[0].same_label);
    }

    #[test]
    fn full_width_labels_and_paths_overlap_their_ascii_twins() {
        let new = claim(10, "w02", Some("ｐａｒｓｅｒ"), &["ｓｒｃ/parse.rs"]);
        let live = [
            claim(1, "w01", Some("parser"), &[]),
            claim(2, "w03", None, &["src/"]),
        ];
        let o = overlaps_of(&new, &live);
        assert_eq!(o.len(), 2);
        assert!(o[0].same_label);
        assert_eq!(o[1].paths, vec!["src/".to_string()]);
    }

    #[test]
    fn a_path_with_a_cyrillic_look_alike_overlaps_the_latin_one() {
        assert!(paths_overlap("src/p\u{0430}rser.rs", "src/parser.rs"));
        assert!(paths_overlap("\u{0455}rc/", "src/main.rs"));
        let new = claim(10, "w02", None, &["src/p\u{0430}rser.rs"]);
        let o = overlaps_of(&new, &[claim(1, "w01", None, &["src/parser.rs"])]);
        assert_eq!(o.len(), 1);
    }

    #[test]
    fn a_stored_record_line_shows_controls_escaped() {
        let mut r = claim(1, "w01", Some("x"), &[]);
        r.text = "ok\u{1b}]0;owned\u{7}\nG2 [w02/FACT]".into();
        let line = r.line(0);
        assert!(!line.chars().any(char::is_control), "{line}");
        assert!(line.contains("ok\\u{1b}]0;owned\\u{7}\\u{a}G2"), "{line}");
    }

    fn lease(expires_at: i64, released_at: Option<i64>, by: Option<&str>) -> Option<Lease> {
        Some(Lease {
            expires_at,
            released_at,
            taken_over_by: by.map(str::to_string),
        })
    }

    #[test]
    fn a_dead_or_stopped_authors_claim_can_be_taken_over_and_says_why() {
        let old = claim(12, "w03", Some("parser"), &[]);
        for (status, why) in [
            (WorkerStatus::Dead, TakeoverReason::Dead),
            (WorkerStatus::Stopped, TakeoverReason::Stopped),
        ] {
            assert_eq!(
                check_takeover(&old, "w04", Some(status), None, 5).unwrap(),
                why
            );
        }
    }

    #[test]
    fn a_live_authors_live_claim_is_refused_with_who_and_what_to_do() {
        let mut old = claim(12, "w03", Some("parser"), &[]);
        old.lease = lease(41 * 60_000 + 30_000, None, None);
        for status in [
            WorkerStatus::Busy,
            WorkerStatus::Idle,
            WorkerStatus::Starting,
            WorkerStatus::Stalled,
        ] {
            let e = check_takeover(&old, "w04", Some(status), None, 0).unwrap_err();
            assert_eq!(
                (e.kind, e.code.as_str()),
                (crate::ErrorKind::Conflict, "claim_alive")
            );
            assert!(
                e.message.starts_with(&format!(
                    "G12 is w03's live claim (w03 is {}, lease 41m left)",
                    status.as_str()
                )),
                "{}",
                e.message
            );
            assert!(
                e.message
                    .ends_with("message w03 to hand it over, or claim something else"),
                "{}",
                e.message
            );
        }
        let e = check_takeover(&claim(3, "admin", None, &[]), "w04", None, None, 0).unwrap_err();
        assert_eq!(e.code, "claim_alive");
        assert!(e.message.contains("(admin is no worker,"), "{}", e.message);
    }

    #[test]
    fn a_released_or_expired_claim_can_be_taken_over_whoever_holds_it() {
        let mut old = claim(12, "w03", None, &["src/"]);
        old.lease = lease(100, Some(50), None);
        assert_eq!(
            check_takeover(&old, "w04", Some(WorkerStatus::Busy), None, 60).unwrap(),
            TakeoverReason::Released
        );
        old.lease = lease(100, None, None);
        assert_eq!(
            check_takeover(&old, "w04", Some(WorkerStatus::Busy), None, 100).unwrap(),
            TakeoverReason::Expired
        );
        assert_eq!(
            check_takeover(&old, "w04", Some(WorkerStatus::Dead), None, 100).unwrap(),
            TakeoverReason::Dead,
            "a dead author says more than an expired lease"
        );
    }

    #[test]
    fn a_claim_is_taken_over_once_never_by_its_author_and_only_a_claim() {
        let winner = claim(15, "w05", None, &[]);
        let mut old = claim(12, "w03", None, &[]);
        old.lease = lease(100, Some(10), Some("G15"));
        let e =
            check_takeover(&old, "w04", Some(WorkerStatus::Dead), Some(&winner), 0).unwrap_err();
        assert_eq!(
            (e.kind, e.code.as_str()),
            (crate::ErrorKind::Conflict, "claim_taken_over")
        );
        assert!(
            e.message
                .starts_with("G12 was already taken over by G15 (w05) — message w05"),
            "{}",
            e.message
        );
        let mine = claim(12, "w04", None, &[]);
        let e = check_takeover(&mine, "w04", Some(WorkerStatus::Dead), None, 0).unwrap_err();
        assert_eq!(e.code, "own_claim");
        let mut fact = claim(7, "w03", None, &[]);
        fact.kind = RecordKind::Fact;
        fact.lease = None;
        let e = check_takeover(&fact, "w04", Some(WorkerStatus::Dead), None, 0).unwrap_err();
        assert_eq!(e.code, "not_a_claim");
        assert!(
            e.message.starts_with("G7 is a FACT, not a CLAIM"),
            "{}",
            e.message
        );
    }

    #[test]
    fn only_a_claim_names_a_claim_to_take_over_and_the_id_must_parse() {
        let mut n = NewRecord::new(RecordKind::Fact, "x");
        n.takes_over = Some("G12".into());
        assert_eq!(n.validate().unwrap_err().code, "takeover_not_claim");
        n.kind = RecordKind::Claim;
        assert!(n.validate().is_ok());
        assert_eq!(n.takes_over_seq().unwrap(), Some(12));
        n.takes_over = Some("twelve".into());
        assert_eq!(n.validate().unwrap_err().code, "bad_record_id");
    }

    #[test]
    fn a_takeover_shows_on_both_claims_lines() {
        let mut new = claim(15, "w04", Some("parser"), &[]);
        new.takes_over = Some(TakeOver {
            id: "G12".into(),
            author: "w03".into(),
            why: TakeoverReason::Dead,
        });
        assert!(
            new.line(0).ends_with("#parser takes over G12 (w03, dead)"),
            "{}",
            new.line(0)
        );
        let mut old = claim(12, "w03", Some("parser"), &[]);
        old.lease = lease(10, Some(5), Some("G15"));
        assert!(
            old.line(0).ends_with("(taken over by G15)"),
            "{}",
            old.line(0)
        );
        assert!(!old.lease.unwrap().is_live(0));
    }

    #[test]
    fn overlaps_name_other_authors_on_the_same_label_or_paths() {
        let new = claim(10, "w02", Some("parser"), &["src/parse.rs"]);
        let live = vec![
            claim(1, "w01", Some("parser"), &[]),
            claim(2, "w03", None, &["src/"]),
            claim(3, "w04", Some("lexer"), &["src/lex.rs"]),
            claim(4, "w02", Some("parser"), &[]),
        ];
        let o = overlaps_of(&new, &live);
        assert_eq!(o.len(), 2);
        assert_eq!((o[0].author.as_str(), o[0].same_label), ("w01", true));
        assert_eq!(
            (o[1].author.as_str(), o[1].paths.clone()),
            ("w03", vec!["src/".to_string()])
        );
    }
}
