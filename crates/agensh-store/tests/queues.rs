//! The batched queue calls answer as the single ones do, on both stores:
//! `pending_events_many` is `pending_events` per worker, and `ack_events_many` leaves every
//! queue as `ack_events` one worker at a time would (results, cursors, acks above them).

mod common;

use agensh_domain::event::{NewEvent, Priority};
use agensh_domain::Result;
use agensh_store::Store;
use common::TestStore;

const NOW: i64 = 1_700_000_000_000;
const WORKERS: [&str; 6] = ["w01", "w02", "w03", "w04", "w05", "w06"];

/// The same history on any store: six workers; broadcasts, some from a worker (not for it)
/// or leaving one out; events for one worker each.
async fn fill(s: &dyn Store) {
    s.add_workers(WORKERS.len(), NOW).await.unwrap();
    for i in 0..90usize {
        let w = |k: usize| Some(WORKERS[k % WORKERS.len()].to_string());
        let (source, target, except) = match i % 5 {
            0 => (None, None, None),
            1 => (w(i), None, None),
            2 => (None, None, w(i + 2)),
            _ => (None, w(i), None),
        };
        let e = NewEvent {
            kind: "operator.notice".into(),
            priority: if i % 7 == 0 {
                Priority::Urgent
            } else {
                Priority::Normal
            },
            payload: serde_json::json!({ "i": i }),
            dedup_key: Some(format!("n{i}")),
            source,
            target,
            except,
        };
        s.enqueue(e, NOW).await.unwrap().expect("stored");
    }
}

async fn pending_seqs(s: &dyn Store, worker: &str) -> Vec<i64> {
    s.pending_events(worker, 0, 1_000)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect()
}

/// What a call answered, comparable across stores: the value or the error's code.
fn outcome<T>(r: Result<T>) -> std::result::Result<T, String> {
    r.map_err(|e| e.code)
}

async fn pending_for_many_workers_is_what_each_asks_alone(t: TestStore) {
    fill(&*t).await;
    // A cursor moved (w01's oldest acknowledged) and acks above a cursor (w02's).
    let w01 = pending_seqs(&*t, "w01").await;
    t.ack_events("w01", w01[..4].to_vec(), NOW).await.unwrap();
    let w02 = pending_seqs(&*t, "w02").await;
    t.ack_events("w02", vec![w02[1], w02[3], w02[4]], NOW)
        .await
        .unwrap();
    let queries: Vec<(String, i64)> = [
        ("w01", 0),
        ("w02", 0),
        ("w03", 10),
        ("w04", 0),
        ("w02", w02[2]),
        ("w05", 0),
        ("w06", 1_000),
    ]
    .iter()
    .map(|(w, a)| (w.to_string(), *a))
    .collect();
    for limit in [1, 3, 100] {
        let many: Vec<Vec<_>> = t
            .pending_events_many(queries.clone(), limit)
            .await
            .unwrap()
            .into_iter()
            .map(|events| events.iter().map(|e| (**e).clone()).collect())
            .collect();
        let mut alone = Vec::new();
        for (w, after) in &queries {
            alone.push(t.pending_events(w, *after, limit).await.unwrap());
        }
        assert_eq!(many, alone, "limit {limit}");
        assert!(many.iter().any(|m| !m.is_empty()));
    }
    assert!(t
        .pending_events_many(Vec::new(), 10)
        .await
        .unwrap()
        .is_empty());
    let unknown = t
        .pending_events_many(vec![("w01".into(), 0), ("w99".into(), 0)], 10)
        .await;
    assert_eq!(
        outcome(unknown).unwrap_err(),
        outcome(t.pending_events("w99", 0, 10).await).unwrap_err()
    );
}

async fn acks_for_many_workers_leave_what_each_would_alone(t: TestStore) {
    // Two stores of the kind with one history: batched acks on one, single on the other.
    let u = TestStore::new(t.kind).await;
    fill(&*t).await;
    fill(&*u).await;
    let mut mine = Vec::new();
    for w in WORKERS {
        let p = pending_seqs(&*t, w).await;
        assert_eq!(p, pending_seqs(&*u, w).await);
        mine.push(p);
    }
    let not_for_w03 = *mine[0].iter().find(|s| !mine[2].contains(s)).unwrap();
    let rounds: Vec<Vec<(String, Vec<i64>)>> = vec![
        vec![
            // The oldest three: the cursor moves.
            ("w01".into(), mine[0][..3].to_vec()),
            // Above a gap: stored above the cursor.
            ("w02".into(), vec![mine[1][1], mine[1][3], mine[1][3]]),
            // Refused: one of them is not in its queue; nothing of it is applied.
            ("w03".into(), vec![mine[2][0], not_for_w03]),
            ("w99".into(), vec![1]),
            ("w04".into(), mine[3].clone()),
            ("w05".into(), Vec::new()),
            ("w06".into(), (1..=10_001).collect()),
        ],
        vec![
            // Filling the gap moves the cursor past the stored acks too.
            ("w02".into(), vec![mine[1][0], mine[1][2]]),
            // Again, and below the cursor.
            ("w01".into(), vec![mine[0][0], mine[0][2], mine[0][5]]),
            ("w03".into(), vec![mine[2][0]]),
        ],
        // One worker twice: one entry after the other.
        vec![
            ("w05".into(), vec![mine[4][1]]),
            ("w05".into(), vec![mine[4][0], not_for_w03]),
            ("w05".into(), vec![mine[4][0]]),
        ],
    ];
    for (i, acks) in rounds.into_iter().enumerate() {
        let many: Vec<_> = t
            .ack_events_many(acks.clone(), NOW)
            .await
            .unwrap()
            .into_iter()
            .map(outcome)
            .collect();
        let mut alone = Vec::new();
        for (w, seqs) in acks {
            alone.push(outcome(u.ack_events(&w, seqs, NOW).await));
        }
        assert_eq!(many, alone, "round {i}");
        for w in WORKERS {
            assert_eq!(
                t.queue_state(w).await.unwrap(),
                u.queue_state(w).await.unwrap(),
                "round {i}: {w}'s queue"
            );
            assert_eq!(
                pending_seqs(&*t, w).await,
                pending_seqs(&*u, w).await,
                "round {i}: {w}'s pending events"
            );
        }
    }
    // The cursors did move: w01's past its oldest three, w02's past its filled gap.
    assert_eq!(t.queue_state("w01").await.unwrap().cursor, mine[0][2]);
    assert_eq!(t.queue_state("w02").await.unwrap().cursor, mine[1][3]);
    assert!(t.ack_events_many(Vec::new(), NOW).await.unwrap().is_empty());
}

stores!(
    pending_for_many_workers_is_what_each_asks_alone,
    acks_for_many_workers_leave_what_each_would_alone,
);
