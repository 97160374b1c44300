//! The board's recent view, derived from the append-only history and never stored.
//!
//! Rules (after DeLM and the Agensh report):
//! - a newer PATCH_SUMMARY from the same author and label supersedes the older one;
//! - a FAIL from the same author and label, newer than that author's latest
//!   PATCH_SUMMARY for the label, marks it invalidated;
//! - a CLAIM shows while it is live (lease running, not released, author not dead);
//! - the view holds at most `cap` entries, newest first.
//!
//! [`of_history`] states these rules over a whole history and [`fate`] what became of one
//! PATCH_SUMMARY (as `board unfold` shows it); stores compute both faster and are tested
//! against them.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::record::{Record, RecordKind};

/// One entry of the recent view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewEntry {
    #[serde(flatten)]
    pub record: Record,
    /// A PATCH_SUMMARY that a later FAIL of its author (same label) invalidated.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub invalidated: bool,
}

/// Builds the recent view from records fed newest first.
#[derive(Debug)]
pub struct RecentView {
    cap: usize,
    entries: Vec<ViewEntry>,
    /// (author, label) pairs whose newest PATCH_SUMMARY was already taken.
    summarized: HashSet<(String, String)>,
    /// (author, label) pairs with a FAIL newer than anything taken so far for them.
    failed: HashSet<(String, String)>,
}

impl RecentView {
    pub fn new(cap: usize) -> Self {
        RecentView {
            cap,
            entries: Vec::new(),
            summarized: HashSet::new(),
            failed: HashSet::new(),
        }
    }

    /// Whether the view has reached its cap; feeding more changes nothing.
    pub fn is_full(&self) -> bool {
        self.entries.len() >= self.cap
    }

    /// Feeds the next older record of history. CLAIM records are skipped here: live
    /// claims come from [`RecentView::finish`], whatever their age.
    pub fn push(&mut self, record: Record) {
        if self.is_full() {
            return;
        }
        let key = record
            .label
            .as_ref()
            .map(|l| (record.author.clone(), l.clone()));
        match record.kind {
            RecordKind::Claim => {}
            RecordKind::PatchSummary => {
                let invalidated = match &key {
                    Some(k) => {
                        if !self.summarized.insert(k.clone()) {
                            return;
                        }
                        self.failed.contains(k)
                    }
                    None => false,
                };
                self.entries.push(ViewEntry {
                    record,
                    invalidated,
                });
            }
            RecordKind::Fail => {
                if let Some(k) = key {
                    if !self.summarized.contains(&k) {
                        self.failed.insert(k);
                    }
                }
                self.entries.push(ViewEntry {
                    record,
                    invalidated: false,
                });
            }
            RecordKind::Fact | RecordKind::Observed => self.entries.push(ViewEntry {
                record,
                invalidated: false,
            }),
        }
    }

    /// Adds the live claims and returns the view, newest first, at most `cap` entries.
    pub fn finish(mut self, live_claims: Vec<Record>) -> Vec<ViewEntry> {
        self.entries
            .extend(live_claims.into_iter().map(|record| ViewEntry {
                record,
                invalidated: false,
            }));
        self.entries
            .sort_by_key(|e| std::cmp::Reverse(e.record.seq));
        self.entries.truncate(self.cap);
        self.entries
    }
}

/// The recent view of a whole `history` (oldest first) at `now`, at most `cap` entries,
/// where `dead(author)` says which authors are dead: every rule above in one function.
/// Stores build the same view faster (a [`RecentView`] fed back from the newest record,
/// live claims from an index); their tests check on generated histories that they agree.
pub fn of_history(
    history: &[Record],
    now: i64,
    cap: usize,
    dead: impl Fn(&str) -> bool,
) -> Vec<ViewEntry> {
    let mut view = RecentView::new(cap);
    for r in history.iter().rev() {
        view.push(r.clone());
    }
    let live = history
        .iter()
        .filter(|r| r.kind == RecordKind::Claim && !dead(&r.author))
        .filter(|r| r.lease.as_ref().is_some_and(|l| l.is_live(now)))
        .cloned()
        .collect();
    view.finish(live)
}

/// What became of the PATCH_SUMMARY `record` later in `history` (oldest first): the next
/// PATCH_SUMMARY of its author and label, which supersedes it, and the first FAIL of theirs
/// before that one, which invalidates it. Both `None` for other kinds and unlabelled records.
pub fn fate<'a>(
    history: &'a [Record],
    record: &Record,
) -> (Option<&'a Record>, Option<&'a Record>) {
    if record.kind != RecordKind::PatchSummary || record.label.is_none() {
        return (None, None);
    }
    let mut later = history
        .iter()
        .filter(|r| r.seq > record.seq && r.author == record.author && r.label == record.label);
    let superseded_by = later.clone().find(|r| r.kind == RecordKind::PatchSummary);
    let invalidated_by =
        later.find(|r| r.kind == RecordKind::Fail && superseded_by.is_none_or(|s| r.seq < s.seq));
    (superseded_by, invalidated_by)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Lease, NewRecord};

    fn rec(seq: i64, author: &str, kind: RecordKind, label: Option<&str>) -> Record {
        let mut n = NewRecord::new(kind, format!("r{seq}"));
        n.label = label.map(str::to_string);
        let lease = (kind == RecordKind::Claim).then_some(Lease {
            expires_at: 100,
            released_at: None,
            taken_over_by: None,
        });
        Record::from_new(seq, author, n, 0, lease)
    }

    fn seqs(view: Vec<ViewEntry>) -> Vec<(i64, bool)> {
        view.into_iter()
            .map(|e| (e.record.seq, e.invalidated))
            .collect()
    }

    /// Feeds `history` (oldest first) newest first, as the store does.
    fn view(history: &[Record], live: Vec<Record>, cap: usize) -> Vec<(i64, bool)> {
        let mut v = RecentView::new(cap);
        for r in history.iter().rev() {
            v.push(r.clone());
        }
        seqs(v.finish(live))
    }

    #[test]
    fn newer_patch_summary_supersedes_older_of_same_author_and_label() {
        let h = [
            rec(1, "w01", RecordKind::PatchSummary, Some("lexer")),
            rec(2, "w01", RecordKind::PatchSummary, Some("lexer")),
        ];
        assert_eq!(view(&h, vec![], 10), vec![(2, false)]);
    }

    #[test]
    fn patch_summaries_of_other_authors_or_labels_all_stay() {
        let h = [
            rec(1, "w01", RecordKind::PatchSummary, Some("lexer")),
            rec(2, "w02", RecordKind::PatchSummary, Some("lexer")),
            rec(3, "w01", RecordKind::PatchSummary, Some("parser")),
            rec(4, "w01", RecordKind::PatchSummary, None),
            rec(5, "w01", RecordKind::PatchSummary, None),
        ];
        assert_eq!(view(&h, vec![], 10).len(), 5);
    }

    #[test]
    fn fail_of_same_author_and_label_invalidates_latest_patch_summary() {
        let h = [
            rec(1, "w01", RecordKind::PatchSummary, Some("lexer")),
            rec(2, "w01", RecordKind::Fail, Some("lexer")),
        ];
        assert_eq!(view(&h, vec![], 10), vec![(2, false), (1, true)]);
    }

    #[test]
    fn fail_of_another_author_does_not_invalidate() {
        let h = [
            rec(1, "w01", RecordKind::PatchSummary, Some("lexer")),
            rec(2, "w02", RecordKind::Fail, Some("lexer")),
        ];
        assert_eq!(view(&h, vec![], 10), vec![(2, false), (1, false)]);
    }

    #[test]
    fn patch_summary_after_a_fail_is_valid_again() {
        let h = [
            rec(1, "w01", RecordKind::PatchSummary, Some("lexer")),
            rec(2, "w01", RecordKind::Fail, Some("lexer")),
            rec(3, "w01", RecordKind::PatchSummary, Some("lexer")),
        ];
        assert_eq!(view(&h, vec![], 10), vec![(3, false), (2, false)]);
    }

    #[test]
    fn claims_come_only_from_the_live_set() {
        let h = [
            rec(1, "w01", RecordKind::Claim, Some("a")),
            rec(2, "w01", RecordKind::Fact, None),
        ];
        assert_eq!(view(&h, vec![], 10), vec![(2, false)]);
        let live = vec![rec(1, "w01", RecordKind::Claim, Some("a"))];
        assert_eq!(view(&h, live, 10), vec![(2, false), (1, false)]);
    }

    #[test]
    fn view_is_capped_to_the_newest_entries() {
        let h: Vec<Record> = (1..=50)
            .map(|s| rec(s, "w01", RecordKind::Fact, None))
            .collect();
        let v = view(&h, vec![], 20);
        assert_eq!(v.len(), 20);
        assert_eq!(v[0].0, 50);
        assert_eq!(v[19].0, 31);
    }

    #[test]
    fn a_claim_shows_while_its_lease_runs_unreleased_and_its_author_lives() {
        let mut released = rec(3, "w03", RecordKind::Claim, None);
        released.lease = Some(Lease {
            expires_at: 100,
            released_at: Some(50),
            taken_over_by: None,
        });
        let h = [
            rec(1, "w01", RecordKind::Claim, None),
            rec(2, "w02", RecordKind::Claim, None),
            released,
        ];
        let dead = |a: &str| a == "w02";
        assert_eq!(seqs(of_history(&h, 99, 10, dead)), vec![(1, false)]);
        assert_eq!(seqs(of_history(&h, 100, 10, dead)), vec![]);
        assert_eq!(
            seqs(of_history(&h, 99, 10, |_| false)),
            vec![(2, false), (1, false)]
        );
    }

    #[test]
    fn of_history_applies_supersede_invalidate_and_the_cap() {
        let h = [
            rec(1, "w01", RecordKind::PatchSummary, Some("lexer")),
            rec(2, "w01", RecordKind::PatchSummary, Some("lexer")),
            rec(3, "w01", RecordKind::Fail, Some("lexer")),
            rec(4, "w02", RecordKind::Fact, None),
        ];
        assert_eq!(
            seqs(of_history(&h, 0, 10, |_| false)),
            vec![(4, false), (3, false), (2, true)]
        );
        assert_eq!(
            seqs(of_history(&h, 0, 2, |_| false)),
            vec![(4, false), (3, false)]
        );
    }

    #[test]
    fn fate_names_the_superseding_summary_and_the_fail_before_it() {
        let h = [
            rec(1, "w01", RecordKind::PatchSummary, Some("lexer")),
            rec(2, "w02", RecordKind::Fail, Some("lexer")),
            rec(3, "w01", RecordKind::Fail, Some("lexer")),
            rec(4, "w01", RecordKind::PatchSummary, Some("lexer")),
            rec(5, "w01", RecordKind::Fail, Some("lexer")),
            rec(6, "w01", RecordKind::PatchSummary, None),
        ];
        let seq = |r: Option<&Record>| r.map(|r| r.seq);
        let of = |i: usize| {
            let (s, f) = fate(&h, &h[i]);
            (seq(s), seq(f))
        };
        assert_eq!(of(0), (Some(4), Some(3)));
        assert_eq!(of(3), (None, Some(5)));
        assert_eq!(of(5), (None, None));
        assert_eq!(of(2), (None, None));
    }
}
