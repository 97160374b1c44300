//! Pull requests in the SQLite store: numbering, the one-open-PR-per-branch rule, reviews
//! and comments, who may close, merges, and the events each step sends to whom.

mod common;

use agensh_domain::error::ErrorKind;
use agensh_domain::event::{kinds, Event, Priority};
use agensh_domain::pr::{NewPr, PrState, Verdict, BODY_LIMIT, TITLE_LIMIT};
use agensh_domain::Error;
use agensh_store::Store;
use common::TestStore;
use serde_json::json;

stores!(
    prs_survive_reopening_the_store,
    numbers_increase_from_one,
    opening_a_pr_tells_everyone_but_its_author,
    a_second_open_pr_on_the_same_branch_is_refused,
    a_branch_can_have_a_new_pr_after_close_or_merge,
    a_pr_from_another_workers_namespace_is_refused,
    title_and_body_limits_are_enforced,
    review_of_own_pr_is_refused,
    review_text_is_validated,
    review_by_peer_reaches_author_urgently_and_others_normally,
    comments_and_reviews_come_back_oldest_first,
    comments_are_allowed_on_closed_prs_and_broadcast,
    close_by_non_author_is_refused,
    close_by_author_is_allowed_and_broadcast,
    close_by_admin_is_allowed,
    mark_merged_emits_pr_merged_and_main_updated,
    acting_on_a_closed_or_merged_pr_is_a_conflict,
    merge_failed_reaches_the_author_urgently,
    merge_failed_is_not_sent_when_the_author_merged,
    main_updated_is_broadcast_once_per_commit,
    list_filters_by_state_and_author_newest_first,
    unknown_pr_is_not_found,
    subscribers_see_pr_events_and_nothing_from_a_refused_call,
);

const NOW: i64 = 1_700_000_000_000;

/// A store with workers w01, w02 and w03.
async fn store(store: TestStore) -> TestStore {
    let workers = store.add_workers(3, NOW).await.expect("workers added");
    let ids: Vec<_> = workers.iter().map(|w| w.id.as_str()).collect();
    assert_eq!(ids, ["w01", "w02", "w03"]);
    store
}

fn new_pr(branch: &str, title: &str) -> NewPr {
    NewPr {
        branch: branch.into(),
        title: title.into(),
        body: None,
    }
}

async fn open(store: &dyn Store, author: &str, branch: &str) -> i64 {
    store
        .open_pr(author, new_pr(branch, "a change"), NOW)
        .await
        .expect("PR opens")
        .number
}

async fn events(store: &dyn Store, worker: &str) -> Vec<Event> {
    store
        .pending_events(worker, 0, 100)
        .await
        .expect("pending events")
}

/// `worker`'s pending events of `kind`.
async fn events_of(store: &dyn Store, worker: &str, kind: &str) -> Vec<Event> {
    events(store, worker)
        .await
        .into_iter()
        .filter(|e| e.kind == kind)
        .collect()
}

fn assert_error(e: Error, kind: ErrorKind, code: &str) {
    assert_eq!((e.kind, e.code.as_str()), (kind, code), "{}", e.message);
}

async fn numbers_increase_from_one(t: TestStore) {
    let s = store(t).await;
    assert_eq!(open(&*s, "w01", "w01/a").await, 1);
    assert_eq!(open(&*s, "w02", "w02/a").await, 2);
    assert_eq!(open(&*s, "w01", "w01/b").await, 3);
    let pr = s.get_pr(2).await.unwrap();
    assert_eq!(
        (pr.author.as_str(), pr.branch.as_str(), pr.base.as_str()),
        ("w02", "w02/a", "main")
    );
    assert_eq!(pr.state, PrState::Open);
    assert_eq!((pr.created_at, pr.updated_at), (NOW, NOW));
}

async fn opening_a_pr_tells_everyone_but_its_author(t: TestStore) {
    let s = store(t).await;
    open(&*s, "w01", "w01/a").await;
    assert!(events_of(&*s, "w01", kinds::PR_OPENED).await.is_empty());
    let got = events_of(&*s, "w02", kinds::PR_OPENED).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].priority, Priority::Normal);
    assert_eq!(
        got[0].payload,
        json!({"number": 1, "author": "w01", "branch": "w01/a", "title": "a change"})
    );
    assert_eq!(got[0].dedup_key.as_deref(), Some("pr:1:opened"));
}

async fn a_second_open_pr_on_the_same_branch_is_refused(t: TestStore) {
    let s = store(t).await;
    open(&*s, "w01", "w01/a").await;
    let e = s
        .open_pr("w01", new_pr("w01/a", "again"), NOW)
        .await
        .unwrap_err();
    assert_error(e.clone(), ErrorKind::Conflict, "pr_exists");
    assert!(e.message.contains("#1"), "{}", e.message);
    assert!(
        e.message
            .contains("push more commits to the branch instead"),
        "{}",
        e.message
    );
}

async fn a_branch_can_have_a_new_pr_after_close_or_merge(t: TestStore) {
    let s = store(t).await;
    open(&*s, "w01", "w01/a").await;
    s.close_pr(1, "w01", NOW).await.unwrap();
    assert_eq!(open(&*s, "w01", "w01/a").await, 2);
    s.mark_merged(2, "w02", "abc123", true, NOW).await.unwrap();
    assert_eq!(open(&*s, "w01", "w01/a").await, 3);
}

async fn a_pr_from_another_workers_namespace_is_refused(t: TestStore) {
    let s = store(t).await;
    let e = s
        .open_pr("w01", new_pr("w02/work", "not mine"), NOW)
        .await
        .unwrap_err();
    assert_error(e, ErrorKind::Forbidden, "outside_namespace");
    assert!(s.list_prs(None, None, 10).await.unwrap().is_empty());
}

async fn title_and_body_limits_are_enforced(t: TestStore) {
    let s = store(t).await;
    let long_title = new_pr("w01/a", &"t".repeat(TITLE_LIMIT + 1));
    let e = s.open_pr("w01", long_title, NOW).await.unwrap_err();
    assert_error(e, ErrorKind::Invalid, "title_too_long");
    let e = s
        .open_pr("w01", new_pr("w01/a", "  "), NOW)
        .await
        .unwrap_err();
    assert_error(e, ErrorKind::Invalid, "empty_title");
    let mut long_body = new_pr("w01/a", "ok");
    long_body.body = Some("b".repeat(BODY_LIMIT + 1));
    let e = s.open_pr("w01", long_body, NOW).await.unwrap_err();
    assert_error(e, ErrorKind::Invalid, "text_too_long");

    let mut at_limits = new_pr("w01/a", &"t".repeat(TITLE_LIMIT));
    at_limits.body = Some("b".repeat(BODY_LIMIT));
    let pr = s.open_pr("w01", at_limits, NOW).await.unwrap();
    assert_eq!(pr.number, 1, "refused PRs use no number");
    assert_eq!(s.get_pr(1).await.unwrap().body.unwrap().len(), BODY_LIMIT);
}

async fn review_of_own_pr_is_refused(t: TestStore) {
    let s = store(t).await;
    open(&*s, "w01", "w01/a").await;
    let e = s
        .review_pr(1, "w01", Verdict::Approve, "looks good", None, NOW)
        .await
        .unwrap_err();
    assert_error(e.clone(), ErrorKind::Invalid, "own_pr");
    assert!(e.message.contains("ask a peer"), "{}", e.message);
    assert!(s.get_pr(1).await.unwrap().reviews.is_empty());
}

async fn review_text_is_validated(t: TestStore) {
    let s = store(t).await;
    open(&*s, "w01", "w01/a").await;
    let e = s
        .review_pr(1, "w02", Verdict::Approve, " ", None, NOW)
        .await
        .unwrap_err();
    assert_error(e, ErrorKind::Invalid, "empty_text");
}

async fn review_by_peer_reaches_author_urgently_and_others_normally(t: TestStore) {
    let s = store(t).await;
    open(&*s, "w01", "w01/a").await;
    let r = s
        .review_pr(
            1,
            "w02",
            Verdict::RequestChanges,
            "add a test",
            None,
            NOW + 5,
        )
        .await
        .unwrap();
    assert_eq!(
        (r.author.as_str(), r.verdict, r.text.as_str()),
        ("w02", Verdict::RequestChanges, "add a test")
    );

    // The author: one urgent pr.review, and no pr.reviewed.
    let author: Vec<_> = events(&*s, "w01")
        .await
        .into_iter()
        .filter(|e| e.kind.starts_with("pr.review"))
        .collect();
    assert_eq!(author.len(), 1, "{author:?}");
    assert_eq!(author[0].kind, kinds::PR_REVIEW);
    assert_eq!(author[0].priority, Priority::Urgent);
    assert_eq!(author[0].target.as_deref(), Some("w01"));
    assert_eq!(
        author[0].payload,
        json!({"number": 1, "title": "a change", "reviewer": "w02",
               "verdict": "request_changes", "text": "add a test"})
    );

    // A bystander: one normal pr.reviewed.
    let other: Vec<_> = events(&*s, "w03")
        .await
        .into_iter()
        .filter(|e| e.kind.starts_with("pr.review"))
        .collect();
    assert_eq!(other.len(), 1, "{other:?}");
    assert_eq!(other[0].kind, kinds::PR_REVIEWED);
    assert_eq!(other[0].priority, Priority::Normal);

    // The reviewer hears neither.
    assert!(events(&*s, "w02")
        .await
        .iter()
        .all(|e| !e.kind.starts_with("pr.review")));
    assert_eq!(s.get_pr(1).await.unwrap().updated_at, NOW + 5);
}

async fn comments_and_reviews_come_back_oldest_first(t: TestStore) {
    let s = store(t).await;
    open(&*s, "w01", "w01/a").await;
    s.comment_pr(1, "w02", "first", NOW + 1).await.unwrap();
    s.review_pr(1, "w02", Verdict::RequestChanges, "fix x", None, NOW + 2)
        .await
        .unwrap();
    s.comment_pr(1, "w01", "second", NOW + 3).await.unwrap();
    s.review_pr(1, "w03", Verdict::Approve, "ok now", None, NOW + 4)
        .await
        .unwrap();
    let pr = s.get_pr(1).await.unwrap();
    let comments: Vec<_> = pr
        .comments
        .iter()
        .map(|c| (c.author.as_str(), c.text.as_str()))
        .collect();
    assert_eq!(comments, [("w02", "first"), ("w01", "second")]);
    let reviews: Vec<_> = pr
        .reviews
        .iter()
        .map(|r| (r.author.as_str(), r.verdict))
        .collect();
    assert_eq!(
        reviews,
        [("w02", Verdict::RequestChanges), ("w03", Verdict::Approve)]
    );
    assert_eq!(pr.updated_at, NOW + 4);
}

async fn comments_are_allowed_on_closed_prs_and_broadcast(t: TestStore) {
    let s = store(t).await;
    open(&*s, "w01", "w01/a").await;
    s.close_pr(1, "w01", NOW).await.unwrap();
    s.comment_pr(1, "w02", "why closed?", NOW + 1)
        .await
        .unwrap();
    let got = events_of(&*s, "w01", kinds::PR_COMMENTED).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].priority, Priority::Normal);
    assert_eq!(got[0].payload["by"], "w02");
    assert_eq!(got[0].payload["text"], "why closed?");
    assert!(events_of(&*s, "w02", kinds::PR_COMMENTED).await.is_empty());
}

async fn close_by_non_author_is_refused(t: TestStore) {
    let s = store(t).await;
    open(&*s, "w01", "w01/a").await;
    let e = s.close_pr(1, "w02", NOW).await.unwrap_err();
    assert_error(e, ErrorKind::Forbidden, "not_your_pr");
    assert_eq!(s.get_pr(1).await.unwrap().state, PrState::Open);
}

async fn close_by_author_is_allowed_and_broadcast(t: TestStore) {
    let s = store(t).await;
    open(&*s, "w01", "w01/a").await;
    let pr = s.close_pr(1, "w01", NOW + 9).await.unwrap();
    assert_eq!(pr.state, PrState::Closed);
    assert_eq!(pr.closed_by.as_deref(), Some("w01"));
    assert_eq!(s.get_pr(1).await.unwrap(), pr);
    assert_eq!(pr.updated_at, NOW + 9);
    assert_eq!(events_of(&*s, "w02", kinds::PR_CLOSED).await.len(), 1);
    assert!(events_of(&*s, "w01", kinds::PR_CLOSED).await.is_empty());
}

async fn close_by_admin_is_allowed(t: TestStore) {
    let s = store(t).await;
    open(&*s, "w01", "w01/a").await;
    let pr = s.close_pr(1, "admin", NOW).await.unwrap();
    assert_eq!(pr.state, PrState::Closed);
    assert_eq!(pr.closed_by.as_deref(), Some("admin"));
    assert_eq!(events_of(&*s, "w01", kinds::PR_CLOSED).await.len(), 1);
}

async fn mark_merged_emits_pr_merged_and_main_updated(t: TestStore) {
    let s = store(t).await;
    open(&*s, "w01", "w01/a").await;
    let pr = s
        .mark_merged(1, "w02", "c0ffee", true, NOW + 1)
        .await
        .unwrap();
    assert_eq!(pr.state, PrState::Merged);
    assert_eq!(pr.closed_by.as_deref(), Some("w02"));
    assert_eq!(pr.merge_commit.as_deref(), Some("c0ffee"));
    assert_eq!(s.get_pr(1).await.unwrap(), pr);

    let merged = events_of(&*s, "w01", kinds::PR_MERGED).await;
    assert_eq!(merged.len(), 1);
    assert_eq!(merged[0].priority, Priority::Normal);
    assert_eq!(
        merged[0].payload,
        json!({"number": 1, "title": "a change", "author": "w01", "branch": "w01/a",
               "merged_by": "w02", "commit": "c0ffee"})
    );
    let main = events_of(&*s, "w03", kinds::MAIN_UPDATED).await;
    assert_eq!(main.len(), 1);
    assert_eq!(main[0].priority, Priority::Normal);
    assert_eq!(
        main[0].payload,
        json!({"commit": "c0ffee", "by": "w02", "pr": 1})
    );
    // The merger caused both and hears neither.
    let own = events(&*s, "w02").await;
    assert!(own
        .iter()
        .all(|e| e.kind != kinds::PR_MERGED && e.kind != kinds::MAIN_UPDATED));
}

async fn acting_on_a_closed_or_merged_pr_is_a_conflict(t: TestStore) {
    let s = store(t).await;
    open(&*s, "w01", "w01/a").await;
    open(&*s, "w01", "w01/b").await;
    s.close_pr(1, "w01", NOW).await.unwrap();
    s.mark_merged(2, "w01", "abc", true, NOW).await.unwrap();
    for (n, state) in [(1, "closed"), (2, "merged")] {
        let e = s.mark_merged(n, "w01", "def", true, NOW).await.unwrap_err();
        assert!(e.message.contains(state), "{}", e.message);
        assert_error(e, ErrorKind::Conflict, "pr_not_open");
        let e = s.close_pr(n, "w01", NOW).await.unwrap_err();
        assert_error(e, ErrorKind::Conflict, "pr_not_open");
        let e = s
            .review_pr(n, "w02", Verdict::Approve, "late", None, NOW)
            .await
            .unwrap_err();
        assert_error(e, ErrorKind::Conflict, "pr_not_open");
    }
    assert_eq!(
        s.get_pr(2).await.unwrap().merge_commit.as_deref(),
        Some("abc")
    );
}

async fn merge_failed_reaches_the_author_urgently(t: TestStore) {
    let s = store(t).await;
    open(&*s, "w01", "w01/a").await;
    let reason = json!({"conflicts": ["src/lib.rs"]});
    s.merge_failed(1, "w02", reason.clone(), NOW).await.unwrap();
    let got = events_of(&*s, "w01", kinds::PR_MERGE_FAILED).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].priority, Priority::Urgent);
    assert_eq!(got[0].target.as_deref(), Some("w01"));
    assert_eq!(
        got[0].payload,
        json!({"number": 1, "title": "a change", "by": "w02", "reason": reason})
    );
    assert!(events_of(&*s, "w03", kinds::PR_MERGE_FAILED)
        .await
        .is_empty());
    assert_eq!(s.get_pr(1).await.unwrap().state, PrState::Open);
}

async fn merge_failed_is_not_sent_when_the_author_merged(t: TestStore) {
    let s = store(t).await;
    open(&*s, "w01", "w01/a").await;
    s.merge_failed(1, "w01", json!("gate failed"), NOW)
        .await
        .unwrap();
    assert!(events_of(&*s, "w01", kinds::PR_MERGE_FAILED)
        .await
        .is_empty());
}

async fn main_updated_is_broadcast_once_per_commit(t: TestStore) {
    let s = store(t).await;
    s.main_updated("admin", "f00d", NOW).await.unwrap();
    s.main_updated("admin", "f00d", NOW + 1).await.unwrap();
    let got = events_of(&*s, "w01", kinds::MAIN_UPDATED).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload, json!({"commit": "f00d", "by": "admin"}));
    assert_eq!(got[0].dedup_key.as_deref(), Some("main:f00d"));
}

async fn list_filters_by_state_and_author_newest_first(t: TestStore) {
    let s = store(t).await;
    open(&*s, "w01", "w01/a").await; // 1 open
    open(&*s, "w02", "w02/a").await; // 2 closed
    open(&*s, "w01", "w01/b").await; // 3 merged
    open(&*s, "w01", "w01/c").await; // 4 open
    s.close_pr(2, "w02", NOW).await.unwrap();
    s.mark_merged(3, "w02", "abc", true, NOW).await.unwrap();
    let numbers = |prs: Vec<agensh_domain::pr::PullRequest>| {
        prs.into_iter().map(|p| p.number).collect::<Vec<_>>()
    };
    assert_eq!(
        numbers(s.list_prs(None, None, 100).await.unwrap()),
        [4, 3, 2, 1]
    );
    assert_eq!(numbers(s.list_prs(None, None, 2).await.unwrap()), [4, 3]);
    assert_eq!(
        numbers(s.list_prs(Some(PrState::Open), None, 100).await.unwrap()),
        [4, 1]
    );
    assert_eq!(
        numbers(s.list_prs(None, Some("w01".into()), 100).await.unwrap()),
        [4, 3, 1]
    );
    assert_eq!(
        numbers(
            s.list_prs(Some(PrState::Closed), Some("w02".into()), 100)
                .await
                .unwrap()
        ),
        [2]
    );
    assert!(s
        .list_prs(Some(PrState::Merged), Some("w02".into()), 100)
        .await
        .unwrap()
        .is_empty());
}

async fn unknown_pr_is_not_found(t: TestStore) {
    let s = store(t).await;
    let e = s.get_pr(7).await.unwrap_err();
    assert_error(e.clone(), ErrorKind::NotFound, "unknown_pr");
    assert!(e.message.contains("no PR #7"), "{}", e.message);
    assert!(e.message.contains("agensh pr list"), "{}", e.message);
    for e in [
        s.review_pr(7, "w02", Verdict::Approve, "x", None, NOW)
            .await
            .map(drop)
            .unwrap_err(),
        s.comment_pr(7, "w02", "x", NOW)
            .await
            .map(drop)
            .unwrap_err(),
        s.close_pr(7, "w02", NOW).await.map(drop).unwrap_err(),
        s.mark_merged(7, "w02", "abc", true, NOW)
            .await
            .map(drop)
            .unwrap_err(),
        s.merge_failed(7, "w02", json!(null), NOW)
            .await
            .unwrap_err(),
    ] {
        assert_error(e, ErrorKind::NotFound, "unknown_pr");
    }
}

async fn prs_survive_reopening_the_store(t: TestStore) {
    {
        let s = &t;
        s.open_pr("w01", new_pr("w01/a", "kept"), NOW)
            .await
            .unwrap();
        s.comment_pr(1, "w02", "noted", NOW).await.unwrap();
    }
    let s = t.reopen().await;
    let pr = s.get_pr(1).await.unwrap();
    assert_eq!(pr.title, "kept");
    assert_eq!(pr.comments.len(), 1);
    assert_eq!(open(&*s, "w01", "w01/b").await, 2);
}

async fn subscribers_see_pr_events_and_nothing_from_a_refused_call(t: TestStore) {
    let s = store(t).await;
    let mut bus = s.subscribe();
    open(&*s, "w01", "w01/a").await;
    s.open_pr("w01", new_pr("w01/a", "again"), NOW)
        .await
        .unwrap_err();
    s.review_pr(1, "w02", Verdict::Approve, "fine", None, NOW)
        .await
        .unwrap();
    let seen: Vec<String> = (0..3)
        .map(|_| bus.try_recv().expect("published").kind.clone())
        .collect();
    assert_eq!(
        seen,
        [kinds::PR_OPENED, kinds::PR_REVIEWED, kinds::PR_REVIEW]
    );
    assert!(bus.try_recv().is_err(), "nothing else was published");
}
