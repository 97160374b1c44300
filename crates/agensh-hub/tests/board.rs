//! The board's derived views over HTTP: supersede and invalidate, unfold, the view cap,
//! and CLAIM leases, renewal, release and overlap reports.

mod common;

use std::time::Duration;

use agensh_domain::record::RecordKind;
use agensh_domain::worker::WorkerStatus;
use agensh_domain::ErrorKind;
use common::*;

/// The ids of `c`'s live claims as the workers list shows them, for worker `id`.
async fn live_claims_of(c: &agensh_client::Client, id: &str) -> Vec<String> {
    let workers = c.workers().await.expect("workers list");
    let w = workers
        .iter()
        .find(|w| w.id == id)
        .expect("worker is listed");
    record_ids(&w.claims)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newer_patch_summary_of_same_author_and_label_replaces_older_in_recent_view() {
    let hub = TestHub::start().await;
    let w = hub.workers(1).await.remove(0);
    let old = w
        .post_record(&labeled(RecordKind::PatchSummary, "lexer v1", "lexer"))
        .await
        .unwrap();
    let new = w
        .post_record(&labeled(RecordKind::PatchSummary, "lexer v2", "lexer"))
        .await
        .unwrap();
    let view = w.recent(None).await.unwrap();
    assert_eq!(
        view_ids(&view),
        vec![new.record.id.clone()],
        "{} must be replaced",
        old.record.id
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_summaries_of_different_authors_on_one_label_both_stay() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    let a = ws[0]
        .post_record(&labeled(RecordKind::PatchSummary, "lexer by w01", "lexer"))
        .await
        .unwrap();
    let b = ws[1]
        .post_record(&labeled(RecordKind::PatchSummary, "lexer by w02", "lexer"))
        .await
        .unwrap();
    let view = ws[0].recent(None).await.unwrap();
    assert_eq!(view_ids(&view), vec![b.record.id, a.record.id]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_of_same_author_and_label_marks_patch_summary_invalidated() {
    let hub = TestHub::start().await;
    let w = hub.workers(1).await.remove(0);
    let ps = w
        .post_record(&labeled(RecordKind::PatchSummary, "lexer done", "lexer"))
        .await
        .unwrap();
    let fail = w
        .post_record(&labeled(RecordKind::Fail, "lexer breaks ci", "lexer"))
        .await
        .unwrap();
    let view = w.recent(None).await.unwrap();
    let got: Vec<(String, bool)> = view
        .iter()
        .map(|e| (e.record.id.clone(), e.invalidated))
        .collect();
    assert_eq!(got, vec![(fail.record.id, false), (ps.record.id, true)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_of_another_author_does_not_invalidate_patch_summary() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    let ps = ws[0]
        .post_record(&labeled(RecordKind::PatchSummary, "lexer done", "lexer"))
        .await
        .unwrap();
    let fail = ws[1]
        .post_record(&labeled(RecordKind::Fail, "lexer breaks ci", "lexer"))
        .await
        .unwrap();
    let view = ws[0].recent(None).await.unwrap();
    let got: Vec<(String, bool)> = view
        .iter()
        .map(|e| (e.record.id.clone(), e.invalidated))
        .collect();
    assert_eq!(got, vec![(fail.record.id, false), (ps.record.id, false)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfold_names_the_patch_summary_that_superseded_a_record() {
    let hub = TestHub::start().await;
    let w = hub.workers(1).await.remove(0);
    let old = w
        .post_record(&labeled(RecordKind::PatchSummary, "lexer v1", "lexer"))
        .await
        .unwrap();
    let new = w
        .post_record(&labeled(RecordKind::PatchSummary, "lexer v2", "lexer"))
        .await
        .unwrap();
    let u = w.unfold(&old.record.id).await.unwrap();
    assert_eq!(u.record, old.record);
    assert_eq!(u.superseded_by.map(|r| r.id), Some(new.record.id.clone()));
    assert_eq!(u.invalidated_by, None);
    let latest = w.unfold(&new.record.id).await.unwrap();
    assert_eq!((latest.superseded_by, latest.invalidated_by), (None, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfold_names_the_fail_that_invalidated_a_patch_summary() {
    let hub = TestHub::start().await;
    let w = hub.workers(1).await.remove(0);
    let mut with_detail = labeled(RecordKind::PatchSummary, "lexer done", "lexer");
    with_detail.detail = Some("rewrote the tokenizer state machine".into());
    let ps = w.post_record(&with_detail).await.unwrap();
    let fail = w
        .post_record(&labeled(RecordKind::Fail, "lexer breaks ci", "lexer"))
        .await
        .unwrap();
    let u = w.unfold(&ps.record.id).await.unwrap();
    assert_eq!(
        u.record.detail.as_deref(),
        Some("rewrote the tokenizer state machine")
    );
    assert_eq!(u.invalidated_by.map(|r| r.id), Some(fail.record.id));
    assert_eq!(u.superseded_by, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recent_view_holds_at_most_view_cap_newest_entries() {
    let mut config = config();
    config.board.view_cap = 5;
    let hub = TestHub::with_config(config).await;
    let w = hub.workers(1).await.remove(0);
    let mut ids = Vec::new();
    for i in 0..8 {
        ids.push(
            w.post_record(&rec(RecordKind::Fact, &format!("fact {i}")))
                .await
                .unwrap()
                .record
                .id,
        );
    }
    let view = w.recent(None).await.unwrap();
    let newest_five: Vec<String> = ids.iter().rev().take(5).cloned().collect();
    assert_eq!(view_ids(&view), newest_five);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn board_read_returns_peers_unread_records_once() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    let peer = ws[0]
        .post_record(&rec(RecordKind::Fact, "peer fact"))
        .await
        .unwrap();
    ws[1]
        .post_record(&rec(RecordKind::Fact, "own fact"))
        .await
        .unwrap();
    assert_eq!(
        view_ids(&ws[1].read_board().await.unwrap()),
        vec![peer.record.id]
    );
    assert!(
        ws[1].read_board().await.unwrap().is_empty(),
        "a second read has nothing new"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_disappears_when_its_lease_ends() {
    let (hub, clock) = TestHub::with_manual_clock().await;
    let w = hub.workers(1).await.remove(0);
    let c = w
        .post_record(&claim("taking the lexer", Some("lexer"), &[], Some(1)))
        .await
        .unwrap();
    assert_eq!(
        view_ids(&w.recent(None).await.unwrap()),
        vec![c.record.id.clone()]
    );
    assert_eq!(live_claims_of(&w, "w01").await, vec![c.record.id.clone()]);
    clock.advance(Duration::from_millis(999));
    assert_eq!(
        view_ids(&w.recent(None).await.unwrap()),
        vec![c.record.id.clone()],
        "a claim stays live until its lease ends"
    );
    assert_eq!(live_claims_of(&w, "w01").await, vec![c.record.id.clone()]);
    clock.advance(Duration::from_millis(1));
    assert!(
        w.recent(None).await.unwrap().is_empty(),
        "expired claim left the recent view"
    );
    assert!(
        live_claims_of(&w, "w01").await.is_empty(),
        "expired claim left the worker's claims"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewed_claim_stays_live_past_its_original_lease() {
    let (hub, clock) = TestHub::with_manual_clock().await;
    let w = hub.workers(1).await.remove(0);
    let c = w
        .post_record(&claim("taking the lexer", Some("lexer"), &[], Some(1)))
        .await
        .unwrap();
    let original = c
        .record
        .lease
        .clone()
        .expect("a claim has a lease")
        .expires_at;
    let renewed = w.renew(&c.record.id, Some(30)).await.unwrap();
    assert!(renewed.lease.expect("lease").expires_at >= original + 28_000);
    clock.advance(Duration::from_secs(29));
    assert_eq!(
        view_ids(&w.recent(None).await.unwrap()),
        vec![c.record.id.clone()]
    );
    assert_eq!(live_claims_of(&w, "w01").await, vec![c.record.id]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_claim_is_hidden() {
    let hub = TestHub::start().await;
    let w = hub.workers(1).await.remove(0);
    let c = w
        .post_record(&claim("taking the lexer", Some("lexer"), &[], None))
        .await
        .unwrap();
    assert_eq!(
        view_ids(&w.recent(None).await.unwrap()),
        vec![c.record.id.clone()]
    );
    let released = w.release(&c.record.id).await.unwrap();
    assert!(released.lease.expect("lease").released_at.is_some());
    assert!(
        w.recent(None).await.unwrap().is_empty(),
        "released claim left the recent view"
    );
    assert!(
        live_claims_of(&w, "w01").await.is_empty(),
        "released claim left the worker's claims"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewing_another_workers_claim_is_forbidden() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    let c = ws[0]
        .post_record(&claim("taking the lexer", Some("lexer"), &[], Some(60)))
        .await
        .unwrap();
    let e = expect_err(
        ws[1].renew(&c.record.id, Some(600)).await,
        ErrorKind::Forbidden,
        "not_your_claim",
    );
    assert!(e.message.contains("w01"), "{}", e.message);
    let still = ws[0].unfold(&c.record.id).await.unwrap().record;
    assert_eq!(still.lease, c.record.lease, "the lease is unchanged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_on_the_same_label_reports_the_earlier_claim() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    let first = ws[0]
        .post_record(&claim("lexer rewrite", Some("lexer"), &[], None))
        .await
        .unwrap();
    assert!(first.overlaps.is_empty());
    let second = ws[1]
        .post_record(&claim("lexer fixes", Some("lexer"), &[], None))
        .await
        .unwrap();
    let got: Vec<(String, String, bool)> = second
        .overlaps
        .iter()
        .map(|o| (o.id.clone(), o.author.clone(), o.same_label))
        .collect();
    assert_eq!(got, vec![(first.record.id, "w01".to_string(), true)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_on_a_file_inside_a_claimed_directory_reports_the_earlier_claim() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    let first = ws[0]
        .post_record(&claim("all of src", Some("big"), &["src/"], None))
        .await
        .unwrap();
    let second = ws[1]
        .post_record(&claim("just a.rs", Some("small"), &["src/a.rs"], None))
        .await
        .unwrap();
    let got: Vec<(String, String, Vec<String>, bool)> = second
        .overlaps
        .iter()
        .map(|o| {
            (
                o.id.clone(),
                o.author.clone(),
                o.paths.clone(),
                o.same_label,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![(
            first.record.id,
            "w01".to_string(),
            vec!["src/".to_string()],
            false
        )]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_touching_nothing_claimed_reports_no_overlap() {
    let hub = TestHub::start().await;
    let ws = hub.workers(2).await;
    ws[0]
        .post_record(&claim("all of src", Some("code"), &["src/"], None))
        .await
        .unwrap();
    let second = ws[1]
        .post_record(&claim(
            "the docs",
            Some("docs"),
            &["docs/", "src2/a.rs"],
            None,
        ))
        .await
        .unwrap();
    assert!(second.overlaps.is_empty(), "{:?}", second.overlaps);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_of_a_dead_worker_is_not_live() {
    let hub = TestHub::start().await;
    let w = hub.workers(1).await.remove(0);
    let c = w
        .post_record(&claim("taking the lexer", Some("lexer"), &[], None))
        .await
        .unwrap();
    assert_eq!(
        view_ids(&w.recent(None).await.unwrap()),
        vec![c.record.id.clone()]
    );
    hub.admin()
        .set_status("w01", WorkerStatus::Dead)
        .await
        .unwrap();
    assert!(
        hub.admin().recent(None).await.unwrap().is_empty(),
        "a dead worker's claim left the view"
    );
    assert!(live_claims_of(&hub.admin(), "w01").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewing_an_expired_claim_is_a_conflict() {
    let (hub, clock) = TestHub::with_manual_clock().await;
    let w = hub.workers(1).await.remove(0);
    let c = w
        .post_record(&claim("taking the lexer", Some("lexer"), &[], Some(1)))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(1));
    let e = expect_err(
        w.renew(&c.record.id, Some(60)).await,
        ErrorKind::Conflict,
        "claim_expired",
    );
    assert!(e.message.contains("post a new CLAIM"), "{}", e.message);
    assert!(
        w.recent(None).await.unwrap().is_empty(),
        "the expired claim stays expired"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_a_claim_twice_is_a_conflict() {
    let hub = TestHub::start().await;
    let w = hub.workers(1).await.remove(0);
    let c = w
        .post_record(&claim("taking the lexer", Some("lexer"), &[], None))
        .await
        .unwrap();
    w.release(&c.record.id).await.unwrap();
    expect_err(
        w.release(&c.record.id).await,
        ErrorKind::Conflict,
        "claim_released",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfolding_an_unknown_record_is_404() {
    let hub = TestHub::start().await;
    let w = hub.workers(1).await.remove(0);
    let e = expect_err(w.unfold("G42").await, ErrorKind::NotFound, "unknown_record");
    assert!(e.message.contains("search the board"), "{}", e.message);
    assert!(
        !e.message.contains("agensh "),
        "a model reads this too: {}",
        e.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn board_read_fills_its_cap_with_peers_records_not_own_ones() {
    let mut config = config();
    config.board.view_cap = 3;
    let hub = TestHub::with_config(config).await;
    let ws = hub.workers(2).await;
    let mut peer_ids = Vec::new();
    for i in 0..3 {
        let r = rec(RecordKind::Fact, &format!("peer {i}"));
        peer_ids.push(ws[0].post_record(&r).await.unwrap().record.id);
    }
    for i in 0..3 {
        ws[1]
            .post_record(&rec(RecordKind::Fact, &format!("own {i}")))
            .await
            .unwrap();
    }
    let read = ws[1].read_board().await.unwrap();
    peer_ids.reverse();
    assert_eq!(view_ids(&read), peer_ids);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_can_release_a_claim_it_posted_itself() {
    let hub = TestHub::start().await;
    let admin = hub.admin();
    let mut claim = rec(RecordKind::Claim, "operator holds the release branch");
    claim.label = Some("release".into());
    let id = admin.post_record(&claim).await.unwrap().record.id;
    admin.release(&id).await.unwrap();
    assert!(admin.recent(None).await.unwrap().is_empty());
}
