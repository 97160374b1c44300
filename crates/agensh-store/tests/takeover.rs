//! Taking over a claim in the store: the new CLAIM names the old one, and in the same
//! transaction the old one stops being live; a live author's claim is refused; two takers
//! racing for one claim get one winner; the old author hears of it.

mod common;

use std::sync::Arc;

use agensh_domain::event::{kinds, Priority};
use agensh_domain::record::{NewRecord, RecordKind, TakeoverReason};
use agensh_domain::worker::WorkerStatus;
use agensh_domain::ErrorKind;
use agensh_store::Store;
use common::TestStore;

stores!(
    two_takers_racing_for_one_claim_get_one_winner,
    a_dead_workers_claim_is_taken_over_and_only_the_new_one_is_live,
    a_live_workers_claim_is_refused_and_nothing_is_stored,
    a_released_or_expired_claim_is_taken_over_whatever_its_author_does,
    overlaps_of_a_takeover_leave_out_the_claim_it_takes_and_name_the_rest,
);

const NOW: i64 = 1_700_000_000_000;
const LEASE: u64 = 3_600;

async fn store(store: TestStore) -> TestStore {
    store.add_workers(4, NOW).await.expect("workers");
    for w in ["w01", "w02", "w03", "w04"] {
        store
            .set_worker_status(w, WorkerStatus::Busy)
            .await
            .expect("status");
    }
    store
}

fn claim(text: &str, label: Option<&str>, paths: &[&str]) -> NewRecord {
    let mut n = NewRecord::new(RecordKind::Claim, text);
    n.label = label.map(str::to_string);
    n.paths = paths.iter().map(|p| p.to_string()).collect();
    n
}

fn taking(text: &str, old: &str) -> NewRecord {
    let mut n = NewRecord::new(RecordKind::Claim, text);
    n.takes_over = Some(old.to_string());
    n
}

async fn a_dead_workers_claim_is_taken_over_and_only_the_new_one_is_live(t: TestStore) {
    let store = store(t).await;
    let old = store
        .append_record(
            "w01",
            claim("the parser", Some("parser"), &["src/parser/"]),
            NOW,
            LEASE,
        )
        .await
        .unwrap()
        .record;
    store
        .set_worker_status("w01", WorkerStatus::Dead)
        .await
        .unwrap();
    let got = store
        .append_record(
            "w02",
            taking("finishing the parser", &old.id),
            NOW + 1,
            LEASE,
        )
        .await
        .unwrap();
    let new = &got.record;
    let t = new
        .takes_over
        .as_ref()
        .expect("the new claim names the old");
    assert_eq!(
        (t.id.as_str(), t.author.as_str(), t.why),
        (old.id.as_str(), "w01", TakeoverReason::Dead)
    );
    assert_eq!(
        (new.label.as_deref(), new.paths.clone()),
        (Some("parser"), vec!["src/parser/".to_string()]),
        "a takeover that names no work of its own takes on the old claim's"
    );
    assert!(got.overlaps.is_empty(), "{:?}", got.overlaps);

    // The old claim ended with the takeover: if w01 comes back it is still not live.
    store
        .set_worker_status("w01", WorkerStatus::Idle)
        .await
        .unwrap();
    let view = store.recent_view(NOW + 2, 100).await.unwrap();
    let ids: Vec<&str> = view.iter().map(|e| e.record.id.as_str()).collect();
    assert_eq!(ids, vec![new.id.as_str()]);
    assert!(view[0]
        .record
        .line(NOW + 2)
        .contains("takes over G1 (w01, dead)"));
    let unfolded = store.unfold(old.seq).await.unwrap().record;
    let lease = unfolded.lease.expect("a lease");
    assert_eq!(lease.released_at, Some(NOW + 1));
    assert_eq!(lease.taken_over_by.as_deref(), Some(new.id.as_str()));
    // grep and unfold show both sides.
    assert_eq!(
        store.unfold(new.seq).await.unwrap().record.takes_over,
        new.takes_over
    );

    // w01 is told directly and urgently, and not again through the broadcast.
    let events = store.pending_events("w01", 0, 100).await.unwrap();
    let kinds_seen: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds_seen, vec![kinds::CLAIM_TAKEN_OVER], "{events:?}");
    let e = &events[0];
    assert_eq!(e.priority, Priority::Urgent);
    assert_eq!(e.payload["id"], old.id);
    assert_eq!(e.payload["by"], new.id);
    assert_eq!(e.payload["author"], "w02");
    assert_eq!(e.payload["why"], "dead");
    // Others get the board record, which names what it took over.
    let others = store.pending_events("w03", 0, 100).await.unwrap();
    let board: Vec<_> = others
        .iter()
        .filter(|e| e.kind == kinds::BOARD_RECORD && e.payload["id"] == new.id)
        .collect();
    assert_eq!(board.len(), 1);
    assert_eq!(board[0].payload["takes_over"], old.id);

    // w01, back, cannot renew what was taken.
    let e = store
        .renew_claim("w01", old.seq, 60, NOW + 3)
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind, e.code.as_str()),
        (ErrorKind::Conflict, "claim_taken_over")
    );
    assert!(
        e.message.contains("taken over by G2 (w02)"),
        "{}",
        e.message
    );
}

async fn a_live_workers_claim_is_refused_and_nothing_is_stored(t: TestStore) {
    let store = store(t).await;
    let old = store
        .append_record("w01", claim("the parser", Some("parser"), &[]), NOW, LEASE)
        .await
        .unwrap()
        .record;
    let e = store
        .append_record("w02", taking("mine now", &old.id), NOW + 60_000, LEASE)
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind, e.code.as_str()),
        (ErrorKind::Conflict, "claim_alive")
    );
    assert!(
        e.message
            .starts_with("G1 is w01's live claim (w01 is busy, lease 59m left)"),
        "{}",
        e.message
    );
    assert_eq!(store.stats().await.unwrap().records, 1, "nothing stored");
    let view = store.recent_view(NOW + 60_000, 100).await.unwrap();
    assert_eq!(view.len(), 1);
    assert!(view[0]
        .record
        .lease
        .as_ref()
        .unwrap()
        .taken_over_by
        .is_none());

    // Unknown records, non-claims and one's own claim get their own errors.
    let e = store
        .append_record("w02", taking("x", "G99"), NOW, LEASE)
        .await
        .unwrap_err();
    assert_eq!(e.code, "unknown_record");
    let fact = store
        .append_record("w01", NewRecord::new(RecordKind::Fact, "f"), NOW, LEASE)
        .await
        .unwrap()
        .record;
    let e = store
        .append_record("w02", taking("x", &fact.id), NOW, LEASE)
        .await
        .unwrap_err();
    assert_eq!(e.code, "not_a_claim");
    let e = store
        .append_record("w01", taking("x", &old.id), NOW, LEASE)
        .await
        .unwrap_err();
    assert_eq!(e.code, "own_claim");
}

async fn a_released_or_expired_claim_is_taken_over_whatever_its_author_does(t: TestStore) {
    let store = store(t).await;
    let mut short = claim("short", Some("a"), &[]);
    short.lease_secs = Some(1);
    let expired = store
        .append_record("w01", short, NOW, LEASE)
        .await
        .unwrap()
        .record;
    let released = store
        .append_record("w01", claim("released", Some("b"), &[]), NOW, LEASE)
        .await
        .unwrap()
        .record;
    store
        .release_claim("w01", released.seq, NOW + 10)
        .await
        .unwrap();
    let a = store
        .append_record("w02", taking("a again", &expired.id), NOW + 5_000, LEASE)
        .await
        .unwrap()
        .record;
    assert_eq!(a.takes_over.unwrap().why, TakeoverReason::Expired);
    let b = store
        .append_record("w02", taking("b again", &released.id), NOW + 5_000, LEASE)
        .await
        .unwrap()
        .record;
    assert_eq!(b.takes_over.unwrap().why, TakeoverReason::Released);
    // An expired claim keeps its lease as it was: it ran out, nobody released it.
    let old = store.unfold(expired.seq).await.unwrap().record;
    assert_eq!(old.lease.unwrap().released_at, None);
    let old = store.unfold(released.seq).await.unwrap().record;
    assert_eq!(old.lease.unwrap().released_at, Some(NOW + 10));
}

async fn two_takers_racing_for_one_claim_get_one_winner(t: TestStore) {
    let kind = t.kind;
    drop(t);
    for round in 0..20 {
        let kept = store(TestStore::new(kind).await).await;
        let store: Arc<dyn Store> = kept.store.clone();
        let old = store
            .append_record("w01", claim("the parser", Some("parser"), &[]), NOW, LEASE)
            .await
            .unwrap()
            .record;
        store
            .set_worker_status("w01", WorkerStatus::Stopped)
            .await
            .unwrap();
        let race = |who: &'static str| {
            let store = store.clone();
            let id = old.id.clone();
            tokio::spawn(async move {
                store
                    .append_record(who, taking("taking the parser", &id), NOW + 1, LEASE)
                    .await
            })
        };
        let (a, b) = (race("w02"), race("w03"));
        let (a, b) = (a.await.unwrap(), b.await.unwrap());
        let (won, lost) = match (a, b) {
            (Ok(w), Err(l)) | (Err(l), Ok(w)) => (w.record, l),
            other => panic!("round {round}: exactly one wins: {other:?}"),
        };
        assert_eq!(
            (lost.kind, lost.code.as_str()),
            (ErrorKind::Conflict, "claim_taken_over")
        );
        assert!(
            lost.message.contains(&format!(
                "G1 was already taken over by {} ({})",
                won.id, won.author
            )),
            "round {round}: {}",
            lost.message
        );
        let view = store.recent_view(NOW + 2, 100).await.unwrap();
        let ids: Vec<&str> = view.iter().map(|e| e.record.id.as_str()).collect();
        assert_eq!(ids, vec![won.id.as_str()], "round {round}");
        assert_eq!(store.stats().await.unwrap().records, 2, "round {round}");
        let told = store.pending_events("w01", 0, 100).await.unwrap();
        assert_eq!(told.len(), 1, "round {round}: the old author is told once");
    }
}

async fn overlaps_of_a_takeover_leave_out_the_claim_it_takes_and_name_the_rest(t: TestStore) {
    let store = store(t).await;
    let old = store
        .append_record(
            "w01",
            claim("lexer", Some("lexer"), &["src/lex.rs"]),
            NOW,
            LEASE,
        )
        .await
        .unwrap()
        .record;
    store
        .append_record(
            "w03",
            claim("lexer docs", None, &["src/lex.rs"]),
            NOW,
            LEASE,
        )
        .await
        .unwrap();
    store
        .set_worker_status("w01", WorkerStatus::Dead)
        .await
        .unwrap();
    let got = store
        .append_record("w02", taking("lexer", &old.id), NOW + 1, LEASE)
        .await
        .unwrap();
    let who: Vec<&str> = got.overlaps.iter().map(|o| o.author.as_str()).collect();
    assert_eq!(who, vec!["w03"]);
}
