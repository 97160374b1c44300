//! Issues in the SQLite store: numbering, labels, filters and paging, comments, who may
//! assign, close and reopen, the events each step sends to whom, issues closed by a merged
//! PR's `closes #N`, the all-or-nothing seeding of many, and older stores getting the
//! tables on open.

mod common;

use agensh_domain::error::ErrorKind;
use agensh_domain::event::{kinds, Event, Priority};
use agensh_domain::issue::{IssueState, NewIssue};
use agensh_domain::pr::NewPr;
use agensh_domain::Error;
use agensh_store::{AssigneeFilter, IssueQuery, Store};
use common::TestStore;

stores!(
    issues_are_numbered_from_one_with_sorted_labels_and_everyone_hears,
    lists_filter_by_state_label_and_assignee_and_page_back,
    comments_reach_the_author_assignee_and_earlier_commenters_but_not_the_commenter,
    a_worker_claims_only_for_itself_and_the_admin_assigns_anyone,
    the_author_assignee_or_admin_close_and_reopen_and_those_involved_hear,
    labels_are_added_and_removed_within_the_limit,
    a_merged_pr_closes_the_open_issues_it_names_and_ignores_the_rest,
    seeding_many_issues_is_all_or_nothing_and_names_the_bad_one,
);

const NOW: i64 = 1_700_000_000_000;

/// A store with workers w01, w02 and w03.
async fn store(store: TestStore) -> TestStore {
    store.add_workers(3, NOW).await.expect("workers added");
    store
}

fn new_issue(title: &str, labels: &[&str]) -> NewIssue {
    NewIssue {
        title: title.into(),
        body: None,
        labels: labels.iter().map(|s| s.to_string()).collect(),
    }
}

async fn open(s: &dyn Store, author: &str, title: &str) -> i64 {
    s.open_issue(author, new_issue(title, &[]), NOW)
        .await
        .expect("issue opens")
        .number
}

/// `worker`'s pending events of `kind`.
async fn events_of(s: &dyn Store, worker: &str, kind: &str) -> Vec<Event> {
    s.pending_events(worker, 0, 1000)
        .await
        .expect("pending events")
        .into_iter()
        .filter(|e| e.kind == kind)
        .collect()
}

fn assert_error(e: Error, kind: ErrorKind, code: &str) {
    assert_eq!((e.kind, e.code.as_str()), (kind, code), "{}", e.message);
}

fn query() -> IssueQuery {
    IssueQuery {
        limit: 100,
        ..IssueQuery::default()
    }
}

async fn numbers(s: &dyn Store, q: IssueQuery) -> Vec<i64> {
    s.list_issues(q)
        .await
        .expect("list")
        .iter()
        .map(|i| i.number)
        .collect()
}

async fn issues_are_numbered_from_one_with_sorted_labels_and_everyone_hears(t: TestStore) {
    let s = store(t).await;
    let i = s
        .open_issue(
            "admin",
            NewIssue {
                title: "Parser loses line numbers".into(),
                body: Some("Steps:\n1. parse".into()),
                labels: vec!["parser".into(), "bug".into(), "parser".into()],
            },
            NOW,
        )
        .await
        .unwrap();
    assert_eq!(i.number, 1);
    assert_eq!(i.labels, ["bug", "parser"]);
    assert_eq!((i.state, i.author.as_str()), (IssueState::Open, "admin"));
    assert_eq!(open(&*s, "w01", "second").await, 2);
    // The admin's issue reaches every worker; w01's every worker but w01.
    for w in ["w01", "w02", "w03"] {
        let got = events_of(&*s, w, kinds::ISSUE_OPENED).await;
        let nums: Vec<_> = got.iter().map(|e| e.payload["number"].clone()).collect();
        let want = if w == "w01" { vec![1] } else { vec![1, 2] };
        assert_eq!(nums, want, "{w}");
        assert!(got.iter().all(|e| e.priority == Priority::Normal));
    }
    let got = s.get_issue(1).await.unwrap();
    assert_eq!(got.body.as_deref(), Some("Steps:\n1. parse"));
    assert_eq!(got.labels, ["bug", "parser"]);
    assert_error(
        s.get_issue(9).await.unwrap_err(),
        ErrorKind::NotFound,
        "unknown_issue",
    );
    // Nothing refused is stored.
    assert_error(
        s.open_issue("w01", new_issue("a\u{1b}[2J", &[]), NOW)
            .await
            .unwrap_err(),
        ErrorKind::Invalid,
        "bad_title",
    );
    assert_eq!(numbers(&*s, query()).await, [2, 1]);
}

async fn lists_filter_by_state_label_and_assignee_and_page_back(t: TestStore) {
    let s = store(t).await;
    for (t, labels) in [
        ("one", vec!["bug"]),
        ("two", vec![]),
        ("three", vec!["bug", "docs"]),
        ("four", vec!["docs"]),
        ("five", vec!["bug"]),
    ] {
        s.open_issue("admin", new_issue(t, &labels), NOW)
            .await
            .unwrap();
    }
    s.assign_issue(3, "w02", false, Some("w02".into()), NOW)
        .await
        .unwrap();
    s.assign_issue(4, "admin", true, Some("w01".into()), NOW)
        .await
        .unwrap();
    s.close_issue(5, "admin", true, NOW).await.unwrap();
    s.comment_issue(1, "w01", "seen", NOW).await.unwrap();
    s.comment_issue(1, "w02", "me too", NOW).await.unwrap();

    assert_eq!(numbers(&*s, query()).await, [5, 4, 3, 2, 1]);
    let open = IssueQuery {
        state: Some(IssueState::Open),
        ..query()
    };
    assert_eq!(numbers(&*s, open.clone()).await, [4, 3, 2, 1]);
    let closed = IssueQuery {
        state: Some(IssueState::Closed),
        ..query()
    };
    assert_eq!(numbers(&*s, closed).await, [5]);
    let bug = IssueQuery {
        label: Some("bug".into()),
        ..query()
    };
    assert_eq!(numbers(&*s, bug).await, [5, 3, 1]);
    let unassigned = IssueQuery {
        assignee: Some(AssigneeFilter::Nobody),
        ..open.clone()
    };
    assert_eq!(numbers(&*s, unassigned).await, [2, 1]);
    let w01 = IssueQuery {
        assignee: Some(AssigneeFilter::Worker("w01".into())),
        ..query()
    };
    assert_eq!(numbers(&*s, w01).await, [4]);
    let page = IssueQuery {
        before: Some(4),
        limit: 2,
        ..query()
    };
    assert_eq!(numbers(&*s, page).await, [3, 2]);
    let listed = s.list_issues(query()).await.unwrap();
    let first = listed.iter().find(|i| i.number == 1).unwrap();
    assert_eq!(first.comment_count, 2);
    assert!(first.comments.is_empty(), "a list leaves comments out");
    let whole = s.get_issue(1).await.unwrap();
    let texts: Vec<_> = whole.comments.iter().map(|c| c.text.as_str()).collect();
    assert_eq!(texts, ["seen", "me too"]);
    assert_eq!(whole.comment_count, 2);
}

async fn comments_reach_the_author_assignee_and_earlier_commenters_but_not_the_commenter(
    t: TestStore,
) {
    let s = store(t).await;
    let n = open(&*s, "w01", "flaky test").await;
    s.assign_issue(n, "w02", false, Some("w02".into()), NOW + 1)
        .await
        .unwrap();
    s.comment_issue(n, "w02", "looking", NOW + 2).await.unwrap();
    // w01 (author) hears w02's comment; w02 does not hear its own.
    assert_eq!(events_of(&*s, "w01", kinds::ISSUE_COMMENTED).await.len(), 1);
    assert!(events_of(&*s, "w02", kinds::ISSUE_COMMENTED)
        .await
        .is_empty());
    assert!(events_of(&*s, "w03", kinds::ISSUE_COMMENTED)
        .await
        .is_empty());
    s.comment_issue(n, "w03", "same on mine", NOW + 3)
        .await
        .unwrap();
    s.comment_issue(n, "admin", "thanks", NOW + 4)
        .await
        .unwrap();
    // The admin's comment reaches the author, the assignee and the earlier commenter w03.
    for (w, count) in [("w01", 3), ("w02", 2), ("w03", 1)] {
        let got = events_of(&*s, w, kinds::ISSUE_COMMENTED).await;
        assert_eq!(got.len(), count, "{w}: {got:?}");
        assert!(got.iter().all(|e| e.priority == Priority::Normal));
    }
    let last = events_of(&*s, "w03", kinds::ISSUE_COMMENTED).await;
    assert_eq!(last[0].payload["by"], "admin");
    assert_eq!(last[0].payload["text"], "thanks");
    assert_eq!(s.get_issue(n).await.unwrap().updated_at, NOW + 4);
    assert_error(
        s.comment_issue(n, "w01", " \u{200b}", NOW)
            .await
            .unwrap_err(),
        ErrorKind::Invalid,
        "empty_text",
    );
    assert_error(
        s.comment_issue(7, "w01", "hi", NOW).await.unwrap_err(),
        ErrorKind::NotFound,
        "unknown_issue",
    );
}

async fn a_worker_claims_only_for_itself_and_the_admin_assigns_anyone(t: TestStore) {
    let s = store(t).await;
    let n = open(&*s, "admin", "add --json").await;
    // w01 may not give it to w02.
    assert_error(
        s.assign_issue(n, "w01", false, Some("w02".into()), NOW)
            .await
            .unwrap_err(),
        ErrorKind::Forbidden,
        "not_yourself",
    );
    // w01 claims it: the others involved (nobody but the admin) hear nothing urgent.
    let i = s
        .assign_issue(n, "w01", false, Some("w01".into()), NOW + 1)
        .await
        .unwrap();
    assert_eq!(i.assignee.as_deref(), Some("w01"));
    assert!(events_of(&*s, "w01", kinds::ISSUE_ASSIGNED)
        .await
        .is_empty());
    // Claiming it again changes nothing and says nothing.
    s.assign_issue(n, "w01", false, Some("w01".into()), NOW + 2)
        .await
        .unwrap();
    // w02 cannot take it while w01 holds it, nor unassign w01.
    assert_error(
        s.assign_issue(n, "w02", false, Some("w02".into()), NOW)
            .await
            .unwrap_err(),
        ErrorKind::Conflict,
        "issue_assigned",
    );
    assert_error(
        s.assign_issue(n, "w02", false, None, NOW)
            .await
            .unwrap_err(),
        ErrorKind::Forbidden,
        "not_your_issue",
    );
    // The admin gives it to w02: w02 hears it urgently, w01 (the previous) normally.
    let i = s
        .assign_issue(n, "admin", true, Some("w02".into()), NOW + 3)
        .await
        .unwrap();
    assert_eq!(i.assignee.as_deref(), Some("w02"));
    let to_w02 = events_of(&*s, "w02", kinds::ISSUE_ASSIGNED).await;
    assert_eq!(to_w02.len(), 1);
    assert_eq!(to_w02[0].priority, Priority::Urgent);
    assert_eq!(to_w02[0].payload["assignee"], "w02");
    assert_eq!(to_w02[0].payload["previous"], "w01");
    let to_w01 = events_of(&*s, "w01", kinds::ISSUE_ASSIGNED).await;
    assert_eq!(to_w01.len(), 1);
    assert_eq!(to_w01[0].priority, Priority::Normal);
    assert!(events_of(&*s, "w03", kinds::ISSUE_ASSIGNED)
        .await
        .is_empty());
    // w02 lets it go.
    let i = s
        .assign_issue(n, "w02", false, None, NOW + 4)
        .await
        .unwrap();
    assert_eq!(i.assignee, None);
    assert_error(
        s.assign_issue(n, "admin", true, Some("w09".into()), NOW)
            .await
            .unwrap_err(),
        ErrorKind::NotFound,
        "unknown_worker",
    );
    assert_error(
        s.assign_issue(n, "admin", true, Some("bob".into()), NOW)
            .await
            .unwrap_err(),
        ErrorKind::Invalid,
        "bad_worker_id",
    );
    assert_eq!(s.get_issue(n).await.unwrap().assignee, None);
}

async fn the_author_assignee_or_admin_close_and_reopen_and_those_involved_hear(t: TestStore) {
    let s = store(t).await;
    let n = open(&*s, "w01", "crash on empty input").await;
    s.assign_issue(n, "w02", false, Some("w02".into()), NOW)
        .await
        .unwrap();
    s.comment_issue(n, "w03", "repro attached", NOW)
        .await
        .unwrap();
    let outsider = open(&*s, "w01", "other").await;
    assert_error(
        s.close_issue(outsider, "w03", false, NOW)
            .await
            .unwrap_err(),
        ErrorKind::Forbidden,
        "not_your_issue",
    );
    let i = s.close_issue(n, "w02", false, NOW + 5).await.unwrap();
    assert_eq!(i.state, IssueState::Closed);
    assert_eq!(
        (i.closed_at, i.closed_by.as_deref()),
        (Some(NOW + 5), Some("w02"))
    );
    for (w, heard) in [("w01", 1), ("w02", 0), ("w03", 1)] {
        assert_eq!(
            events_of(&*s, w, kinds::ISSUE_CLOSED).await.len(),
            heard,
            "{w}"
        );
    }
    assert_error(
        s.close_issue(n, "admin", true, NOW).await.unwrap_err(),
        ErrorKind::Conflict,
        "issue_closed",
    );
    assert_error(
        s.assign_issue(n, "w03", false, Some("w03".into()), NOW)
            .await
            .unwrap_err(),
        ErrorKind::Conflict,
        "issue_closed",
    );
    let i = s.reopen_issue(n, "w01", false, NOW + 6).await.unwrap();
    assert_eq!(
        (i.state, i.closed_at, i.closed_by),
        (IssueState::Open, None, None)
    );
    assert_eq!(events_of(&*s, "w02", kinds::ISSUE_REOPENED).await.len(), 1);
    assert!(events_of(&*s, "w01", kinds::ISSUE_REOPENED)
        .await
        .is_empty());
    assert_error(
        s.reopen_issue(n, "admin", true, NOW).await.unwrap_err(),
        ErrorKind::Conflict,
        "issue_open",
    );
}

async fn labels_are_added_and_removed_within_the_limit(t: TestStore) {
    let s = store(t).await;
    let n = s
        .open_issue("admin", new_issue("x", &["bug"]), NOW)
        .await
        .unwrap()
        .number;
    let i = s
        .label_issue(
            n,
            vec!["parser".into(), "p1".into()],
            vec!["bug".into()],
            NOW + 1,
        )
        .await
        .unwrap();
    assert_eq!(i.labels, ["p1", "parser"]);
    assert_eq!(s.get_issue(n).await.unwrap().labels, ["p1", "parser"]);
    let many: Vec<String> = (0..9).map(|i| format!("l{i}")).collect();
    assert_error(
        s.label_issue(n, many, vec![], NOW).await.unwrap_err(),
        ErrorKind::Invalid,
        "too_many_labels",
    );
    assert_eq!(s.get_issue(n).await.unwrap().labels, ["p1", "parser"]);
}

async fn a_merged_pr_closes_the_open_issues_it_names_and_ignores_the_rest(t: TestStore) {
    let s = store(t).await;
    let a = open(&*s, "admin", "parser").await;
    let b = open(&*s, "admin", "lexer").await;
    let done = open(&*s, "admin", "done already").await;
    let untouched = open(&*s, "admin", "not named").await;
    s.assign_issue(a, "w01", false, Some("w01".into()), NOW)
        .await
        .unwrap();
    s.close_issue(done, "admin", true, NOW + 1).await.unwrap();
    let pr = s
        .open_pr(
            "w01",
            NewPr {
                branch: "w01/work".into(),
                title: format!("Parser (fixes #{a})"),
                body: Some(format!(
                    "Also Resolves: #{b}, closes #{done} and closes #99.\nSee #{untouched}."
                )),
            },
            NOW,
        )
        .await
        .unwrap();
    s.mark_merged(pr.number, "w01", "abc123", true, NOW + 10)
        .await
        .unwrap();
    for n in [a, b] {
        let i = s.get_issue(n).await.unwrap();
        assert_eq!(i.state, IssueState::Closed, "#{n}");
        assert_eq!(i.closed_by.as_deref(), Some("pr#1"), "#{n}");
        assert_eq!(i.closed_at, Some(NOW + 10));
    }
    let i = s.get_issue(done).await.unwrap();
    assert_eq!(
        (i.closed_by.as_deref(), i.closed_at),
        (Some("admin"), Some(NOW + 1))
    );
    assert_eq!(
        s.get_issue(untouched).await.unwrap().state,
        IssueState::Open
    );
    assert_error(
        s.get_issue(99).await.unwrap_err(),
        ErrorKind::NotFound,
        "unknown_issue",
    );
    // The assignee hears its issue was closed by the PR, even though it merged it.
    let heard = events_of(&*s, "w01", kinds::ISSUE_CLOSED).await;
    assert_eq!(heard.len(), 1, "{heard:?}");
    assert_eq!(heard[0].payload["number"], a);
    assert_eq!(heard[0].payload["by"], "pr#1");
    assert_eq!(heard[0].payload["pr"], 1);
}

async fn seeding_many_issues_is_all_or_nothing_and_names_the_bad_one(t: TestStore) {
    let s = store(t).await;
    let bad = vec![
        new_issue("fine", &["a"]),
        new_issue("has a, comma in a label", &["a,b"]),
    ];
    let e = s.open_issues("admin", bad, NOW).await.unwrap_err();
    assert_eq!(e.code, "bad_label");
    assert!(
        e.message
            .starts_with("issue 2 (\"has a, comma in a label\"): "),
        "{}",
        e.message
    );
    assert!(s.list_issues(query()).await.unwrap().is_empty());
    let made = s
        .open_issues(
            "admin",
            vec![new_issue("one", &[]), new_issue("two", &["x"])],
            NOW,
        )
        .await
        .unwrap();
    let nums: Vec<_> = made.iter().map(|i| i.number).collect();
    assert_eq!(nums, [1, 2]);
}
