//! The SQLite store computes the recent view in its own way (paging back from the newest
//! record, live claims from the claims table joined with worker status) and `board unfold`
//! in SQL. These tests generate random histories — several authors and labels, every kind,
//! CLAIMs with leases that run out, renewals, releases, takeovers of claims (allowed or
//! refused as `record::check_takeover` says), authors dying and coming back, small caps,
//! unread reads by several workers — and check after each step that the store's
//! answers equal the domain's rules over the same history (`view::of_history`,
//! `view::fate`).

mod common;

use std::collections::{HashMap, HashSet};

use agensh_domain::record::{check_takeover, NewRecord, Record, RecordKind};
use agensh_domain::view::{fate, of_history, ViewEntry};
use agensh_domain::worker::WorkerStatus;
use common::{Kind, TestStore};

const NOW: i64 = 1_700_000_000_000;
const WORKERS: [&str; 4] = ["w01", "w02", "w03", "w04"];
/// Authors: the workers and the admin, who has no worker row (so no status).
const AUTHORS: [&str; 5] = ["w01", "w02", "w03", "w04", "admin"];
const LABELS: [Option<&str>; 4] = [None, Some("lexer"), Some("parser"), Some("docs")];
const SEEDS: u64 = 40;
const STEPS: usize = 120;

/// A small deterministic generator (xorshift64).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

/// The history as the store reported it, and what the domain needs besides.
#[derive(Default)]
struct Model {
    history: Vec<Record>,
    dead: HashSet<String>,
    /// Workers set idle (a worker starts `stopped`); the others of `WORKERS` are stopped
    /// or dead.
    idle: HashSet<String>,
    /// Each worker's board cursor: the newest record it has read.
    cursors: HashMap<String, i64>,
}

impl Model {
    fn top(&self) -> i64 {
        self.history.last().map_or(0, |r| r.seq)
    }

    fn replace(&mut self, record: Record) {
        let i = self
            .history
            .iter()
            .position(|r| r.seq == record.seq)
            .expect("the store changed a record it reported");
        self.history[i] = record;
    }

    fn status(&self, author: &str) -> Option<WorkerStatus> {
        if !WORKERS.contains(&author) {
            None
        } else if self.dead.contains(author) {
            Some(WorkerStatus::Dead)
        } else if self.idle.contains(author) {
            Some(WorkerStatus::Idle)
        } else {
            Some(WorkerStatus::Stopped)
        }
    }

    fn by_id(&self, id: &str) -> Option<&Record> {
        self.history.iter().find(|r| r.id == id)
    }

    fn view(&self, now: i64, cap: usize) -> Vec<ViewEntry> {
        of_history(&self.history, now, cap, |a| self.dead.contains(a))
    }

    /// What `worker` has not read: records after its cursor by other authors.
    fn unread(&self, worker: &str, now: i64, cap: usize) -> Vec<ViewEntry> {
        let cursor = self.cursors.get(worker).copied().unwrap_or(0);
        let unread: Vec<Record> = self
            .history
            .iter()
            .filter(|r| r.seq > cursor && r.author != worker)
            .cloned()
            .collect();
        of_history(&unread, now, cap, |a| self.dead.contains(a))
    }
}

fn kind(rng: &mut Rng) -> RecordKind {
    match rng.below(100) {
        0..=24 => RecordKind::PatchSummary,
        25..=44 => RecordKind::Fail,
        45..=64 => RecordKind::Claim,
        65..=84 => RecordKind::Fact,
        _ => RecordKind::Observed,
    }
}

fn summary(view: &[ViewEntry]) -> Vec<(String, bool)> {
    view.iter()
        .map(|e| (format!("{}:{}", e.record.id, e.record.kind), e.invalidated))
        .collect()
}

/// Runs one generated history; returns how many comparisons it made.
async fn run(seed: u64, engine: Kind) -> usize {
    let store = TestStore::new(engine).await;
    let added = store
        .add_workers(WORKERS.len(), NOW)
        .await
        .expect("workers");
    assert_eq!(
        added.iter().map(|w| w.id.as_str()).collect::<Vec<_>>(),
        WORKERS
    );
    let mut rng = Rng::new(seed);
    let mut model = Model::default();
    let mut now = NOW;
    let mut checks = 0;
    for step in 0..STEPS {
        // Time moves by up to 4 s a step, so leases of 1 to 20 s run out during the history.
        now += rng.below(4_000) as i64;
        let at = format!("seed {seed}, step {step}, now {now}");
        match rng.below(100) {
            0..=49 => {
                let kind = kind(&mut rng);
                let author = rng.pick(&AUTHORS);
                let mut new = NewRecord::new(kind, format!("record of step {step}"));
                new.label = rng.pick(&LABELS).map(str::to_string);
                if kind == RecordKind::Claim && rng.below(2) == 0 {
                    new.lease_secs = Some(1 + rng.below(20));
                }
                // A third of the claims take over an earlier record, which the domain's
                // rule allows or refuses.
                let old = (kind == RecordKind::Claim
                    && rng.below(3) == 0
                    && !model.history.is_empty())
                .then(|| model.history[rng.below(model.history.len() as u64) as usize].clone());
                let Some(old) = old else {
                    let appended = store
                        .append_record(author, new, now, 10)
                        .await
                        .unwrap_or_else(|e| panic!("{at}: append: {e}"));
                    model.history.push(appended.record);
                    continue;
                };
                new.takes_over = Some(old.id.clone());
                let taken_by = old
                    .lease
                    .as_ref()
                    .and_then(|l| l.taken_over_by.as_deref())
                    .and_then(|id| model.by_id(id));
                let want = check_takeover(&old, author, model.status(&old.author), taken_by, now);
                match (store.append_record(author, new, now, 10).await, want) {
                    (Ok(appended), Ok(why)) => {
                        let t = appended.record.takes_over.clone().expect("takes_over");
                        assert_eq!((t.id, t.why), (old.id.clone(), why), "{at}");
                        model.history.push(appended.record);
                        model.replace(store.unfold(old.seq).await.unwrap().record);
                    }
                    (Err(got), Err(want)) => assert_eq!(got.code, want.code, "{at}: {got}"),
                    (got, want) => panic!(
                        "{at}: takeover of {} by {author}: store {got:?}, domain {want:?}",
                        old.id
                    ),
                }
            }
            50..=67 => {
                let claims: Vec<&Record> = model
                    .history
                    .iter()
                    .filter(|r| r.kind == RecordKind::Claim)
                    .collect();
                if claims.is_empty() {
                    continue;
                }
                let claim = claims[rng.below(claims.len() as u64) as usize];
                let live = claim.lease.as_ref().is_some_and(|l| l.is_live(now));
                let (author, seq) = (claim.author.clone(), claim.seq);
                let renew = rng.below(2) == 0;
                let answer = if renew {
                    store
                        .renew_claim(&author, seq, 1 + rng.below(20), now)
                        .await
                } else {
                    store.release_claim(&author, seq, now).await
                };
                match answer {
                    Ok(record) => {
                        assert!(live, "{at}: changed a claim that was not live: {record:?}");
                        model.replace(record);
                    }
                    Err(e) => assert!(!live, "{at}: refused to change a live claim: {e}"),
                }
            }
            68..=75 => {
                let worker = rng.pick(&WORKERS);
                let status = if rng.below(3) == 0 {
                    WorkerStatus::Idle
                } else {
                    WorkerStatus::Dead
                };
                store
                    .set_worker_status(worker, status)
                    .await
                    .unwrap_or_else(|e| panic!("{at}: status: {e}"));
                if status == WorkerStatus::Dead {
                    model.dead.insert(worker.to_string());
                    model.idle.remove(worker);
                } else {
                    model.dead.remove(worker);
                    model.idle.insert(worker.to_string());
                }
            }
            76..=89 => {
                let cap = 1 + rng.below(30) as usize;
                let got = store
                    .recent_view(now, cap)
                    .await
                    .unwrap_or_else(|e| panic!("{at}: view: {e}"));
                let want = model.view(now, cap);
                assert_eq!(
                    got,
                    want,
                    "{at}: recent view, cap {cap}\nstore  {:?}\ndomain {:?}",
                    summary(&got),
                    summary(&want)
                );
                checks += 1;
            }
            _ => {
                let worker = rng.pick(&WORKERS);
                let cap = 1 + rng.below(30) as usize;
                let got = store
                    .board_unread(worker, now, cap)
                    .await
                    .unwrap_or_else(|e| panic!("{at}: unread: {e}"));
                let want = model.unread(worker, now, cap);
                assert_eq!(
                    got,
                    want,
                    "{at}: unread of {worker}, cap {cap}\nstore  {:?}\ndomain {:?}",
                    summary(&got),
                    summary(&want)
                );
                model.cursors.insert(worker.to_string(), model.top());
                checks += 1;
            }
        }
    }
    let at = format!("seed {seed}, end");
    for cap in [1, 7, 10_000] {
        assert_eq!(
            store.recent_view(now, cap).await.unwrap(),
            model.view(now, cap),
            "{at}: recent view, cap {cap}"
        );
        checks += 1;
    }
    for r in &model.history {
        let unfolded = store.unfold(r.seq).await.unwrap();
        let (superseded_by, invalidated_by) = fate(&model.history, r);
        assert_eq!(
            (
                unfolded.superseded_by.map(|r| r.seq),
                unfolded.invalidated_by.map(|r| r.seq)
            ),
            (superseded_by.map(|r| r.seq), invalidated_by.map(|r| r.seq)),
            "{at}: unfold {}",
            r.id
        );
        checks += 1;
    }
    checks
}

stores!(store_views_agree_with_the_domain_rules_on_generated_histories);

async fn store_views_agree_with_the_domain_rules_on_generated_histories(t: TestStore) {
    let engine = t.kind;
    drop(t);
    let mut checks = 0;
    for seed in 0..SEEDS {
        checks += run(seed, engine).await;
    }
    // Guards the generator: the comparisons above must actually have happened.
    assert!(checks > SEEDS as usize * 50, "only {checks} comparisons");
}

#[test]
fn the_view_and_fate_tell_the_same_story_of_each_patch_summary() {
    // Pure domain: with no cap, a labelled PATCH_SUMMARY is in the view exactly when
    // nothing superseded it, and marked invalidated exactly when a FAIL did.
    for seed in 0..SEEDS {
        let mut rng = Rng::new(seed);
        let history: Vec<Record> = (1..=150)
            .map(|seq| {
                let mut new = NewRecord::new(kind(&mut rng), format!("r{seq}"));
                new.label = rng.pick(&LABELS).map(str::to_string);
                Record::from_new(seq, rng.pick(&AUTHORS), new, NOW, None)
            })
            .collect();
        let view = of_history(&history, NOW, usize::MAX, |_| false);
        for r in history
            .iter()
            .filter(|r| r.kind == RecordKind::PatchSummary)
        {
            let shown = view.iter().find(|e| e.record.seq == r.seq);
            if r.label.is_none() {
                assert!(
                    shown.is_some_and(|e| !e.invalidated),
                    "seed {seed}: {}",
                    r.id
                );
                continue;
            }
            let (superseded_by, invalidated_by) = fate(&history, r);
            assert_eq!(
                shown.map(|e| e.invalidated),
                superseded_by.is_none().then_some(invalidated_by.is_some()),
                "seed {seed}: {}",
                r.id
            );
        }
    }
}
