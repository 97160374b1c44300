//! Rows of every kind, as `tests/fixtures/store/vNNNN.sql` hold them, and the checks that
//! find each through the `Store` API — for any store, whatever engine or way it got them
//! (migrated in place, or moved from SQLite to PostgreSQL).

use std::path::Path;

use agensh_domain::issue::NewIssue;
use agensh_domain::message::NewMessage;
use agensh_domain::pr::{NewPr, PrState, Verdict};
use agensh_domain::query;
use agensh_domain::receipt::{ReceiptState, Via};
use agensh_domain::record::{NewRecord, RecordKind, TakeoverReason};
use agensh_domain::worker::WorkerStatus;
use agensh_store::{IssueQuery, MessageQuery, ModelRequest, Store};

/// Ten minutes after the fixtures' first row: w01's and w02's claims are still live.
pub const NOW: i64 = 1_796_040_600_000;
pub const LEASE: u64 = 3_600;

/// The fixture rows of `version`, if that version added any.
pub fn fixture(version: u32) -> Option<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/store/v{version:04}.sql"));
    path.exists()
        .then(|| std::fs::read_to_string(&path).expect("fixture reads"))
}

/// Inserts the fixture rows of every version up to `version` into a SQLite store.
pub fn insert_rows(conn: &rusqlite::Connection, version: u32) {
    for v in 1..=version {
        if let Some(sql) = fixture(v) {
            conn.execute_batch(&sql)
                .unwrap_or_else(|e| panic!("fixture v{v:04}.sql: {e}"));
        }
    }
}

fn grep_ids(q: &str) -> query::Query {
    query::parse(q).unwrap_or_else(|e| panic!("{q}: {e:?}"))
}

pub async fn found(store: &dyn Store, q: &str) -> Vec<String> {
    store
        .grep(&grep_ids(q), None, 50)
        .await
        .unwrap_or_else(|e| panic!("grep {q}: {e}"))
        .into_iter()
        .map(|r| r.id)
        .collect()
}

pub async fn pending(store: &dyn Store, worker: &str) -> Vec<i64> {
    store
        .pending_events(worker, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.seq)
        .collect()
}

/// `base` plus what the versions in `more` added, for a store at `version`.
fn with(version: u32, base: &[i64], more: &[(u32, &[i64])]) -> Vec<i64> {
    let mut out = base.to_vec();
    for (v, seqs) in more {
        if version >= *v {
            out.extend_from_slice(seqs);
        }
    }
    out.sort();
    out
}

/// Every fixture row of the versions up to `version` is found through the `Store` API.
pub async fn every_row_is_found(store: &dyn Store, version: u32) {
    let at = |v: u32| version >= v;

    // Workers and the admin token.
    assert_eq!(
        store.admin_token().await.unwrap(),
        "aga_5f1d9c0e7b2a4c6e8f0a1b3c5d7e9f1a2b4c6d8e"
    );
    let tokens = store.worker_tokens().await.unwrap();
    assert_eq!(tokens.len(), 3);
    assert_eq!(
        tokens[1],
        (
            "w02".to_string(),
            "agw_0202020202020202020202020202020202020202".to_string()
        )
    );
    let workers = store.list_workers(NOW).await.unwrap();
    let states: Vec<_> = workers.iter().map(|w| (w.id.as_str(), w.status)).collect();
    assert_eq!(
        states,
        [
            ("w01", WorkerStatus::Busy),
            ("w02", WorkerStatus::Idle),
            ("w03", WorkerStatus::Dead)
        ]
    );
    let claims =
        |i: usize| -> Vec<&str> { workers[i].claims.iter().map(|c| c.id.as_str()).collect() };
    assert_eq!(claims(0), ["G3"]);
    assert_eq!(claims(1), if at(8) { vec!["G9"] } else { vec![] });
    assert!(claims(2).is_empty(), "a dead worker's claim is not live");
    assert_eq!(workers[0].last_activity, Some(1_796_040_540_000));

    // The board: grep over all history (the index made again with prefixes at 2), the
    // recent view, a worker's unread records, unfold.
    assert_eq!(found(store, "parser").await, ["G3", "G1"]);
    assert_eq!(found(store, "unic*").await, ["G2"]);
    assert_eq!(found(store, "spec").await, ["G2"], "words of a detail");
    assert_eq!(found(store, "\"error recovery\"").await, ["G3"]);
    assert_eq!(found(store, "kind:FACT").await, ["G2"]);
    assert_eq!(found(store, "kind:PATCH_SUMMARY").await, ["G6", "G5"]);
    assert_eq!(found(store, "author:w03").await, ["G4"]);
    assert_eq!(found(store, "label:lexer").await, ["G8", "G6", "G5", "G2"]);
    assert_eq!(
        found(store, "label:docs").await,
        if at(8) { vec!["G9", "G4"] } else { vec!["G4"] }
    );
    let mut view: Vec<String> = store
        .recent_view(NOW, 50)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.record.id)
        .collect();
    view.sort();
    let mut want = vec!["G1", "G2", "G3", "G6", "G7"];
    if at(8) {
        want.push("G9");
    }
    assert_eq!(view, want, "G5 superseded, G4's author dead, G8 released");
    let unfolded = store.unfold(5).await.unwrap();
    assert_eq!(unfolded.superseded_by.unwrap().id, "G6");
    let g8 = store.unfold(8).await.unwrap().record;
    assert_eq!(g8.paths, ["src/lexer.rs"]);
    assert_eq!(g8.lease.unwrap().released_at, Some(1_796_040_300_000));
    if at(8) {
        let g9 = store.unfold(9).await.unwrap().record;
        let took = g9.takes_over.expect("G9 took over G4");
        assert_eq!((took.id.as_str(), took.why), ("G4", TakeoverReason::Dead));
        let g4 = store.unfold(4).await.unwrap().record.lease.unwrap();
        assert_eq!(g4.taken_over_by.as_deref(), Some("G9"));
    }
    let unread: Vec<String> = store
        .board_unread("w02", NOW, 50)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.record.id)
        .collect();
    assert_eq!(
        unread,
        ["G7"],
        "after w02's cursor, without its own records"
    );

    // Messages and their threads.
    let all = MessageQuery {
        limit: 50,
        ..MessageQuery::default()
    };
    let seen: Vec<(i64, Option<i64>)> = store
        .read_messages("w02", all.clone())
        .await
        .unwrap()
        .iter()
        .map(|m| (m.seq, m.thread))
        .collect();
    assert_eq!(seen, [(1, None), (2, None), (3, Some(2))]);
    let w03: Vec<i64> = store
        .read_messages("w03", all)
        .await
        .unwrap()
        .iter()
        .map(|m| m.seq)
        .collect();
    assert_eq!(w03, [1], "others' direct messages stay private");

    // Event queues: cursors, acks above them, broadcasts that leave one out.
    assert_eq!(
        pending(store, "w01").await,
        with(
            version,
            &[3, 4, 7, 8, 9, 10],
            &[(3, &[12]), (4, &[14]), (8, &[15]), (9, &[16])]
        )
    );
    assert_eq!(
        pending(store, "w02").await,
        with(version, &[6, 7, 11], &[(3, &[12]), (4, &[13]), (9, &[16])])
    );
    assert_eq!(
        pending(store, "w03").await,
        with(
            version,
            &[1, 2, 3, 6, 8, 9, 10, 11],
            &[(4, &[13]), (8, &[15]), (9, &[16])]
        ),
        "the notice left w03 out"
    );
    let queue = store.queue_state("w02").await.unwrap();
    assert_eq!((queue.cursor, queue.acked_above_cursor), (2, 1));
    let events = store.events_after(0, 100).await.unwrap();
    assert_eq!(events[3].kind, "msg.dm");
    assert_eq!(events[3].target.as_deref(), Some("w01"));
    assert_eq!(
        events[3].payload["text"],
        "I have the lexer; tell me what tokens you need"
    );

    let stats = store.stats().await.unwrap();
    assert_eq!(
        (stats.workers, stats.records, stats.messages),
        (3, if at(8) { 9 } else { 8 }, 3)
    );
    assert_eq!(
        (stats.prs_open, stats.prs_merged),
        if at(4) { (1, 1) } else { (0, 0) }
    );

    // Pull requests with their reviews and comments.
    let prs: Vec<i64> = store
        .list_prs(None, None, 10)
        .await
        .unwrap()
        .iter()
        .map(|p| p.number)
        .collect();
    assert_eq!(prs, if at(4) { vec![2, 1] } else { vec![] });
    if at(4) {
        let pr = store.get_pr(1).await.unwrap();
        assert_eq!((pr.state, pr.branch.as_str()), (PrState::Open, "w01/work"));
        let reviews: Vec<_> = pr
            .reviews
            .iter()
            .map(|r| (r.author.as_str(), r.verdict, r.commit.as_deref()))
            .collect();
        let mut want = vec![("w02", Verdict::RequestChanges, None)];
        if at(7) {
            want.push((
                "w03",
                Verdict::Approve,
                Some("9a8b7c6d5e4f30211203f4e5d6c7b8a9f0e1d2c3"),
            ));
        }
        assert_eq!(reviews, want);
        assert_eq!(pr.comments[0].text, "does this cover nested arrays?");
        let merged = store.get_pr(2).await.unwrap();
        assert_eq!(
            merged.merge_commit.as_deref(),
            Some("3c9f2e1d4b5a69788796a5b4c3d2e1f001122334")
        );
    }

    // Model usage and budgets.
    let usage = store.model_usage(None).await.unwrap();
    if at(5) {
        let rows: Vec<_> = usage
            .iter()
            .map(|u| {
                (
                    u.worker.as_str(),
                    u.model.as_str(),
                    u.requests,
                    u.input_tokens,
                    u.cached_input_tokens,
                    u.output_tokens,
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                ("w01", "qwen2.5-coder-1.5b", 2, 3600, 1000, 450),
                ("w02", "gpt-5-mini", 2, 3000, 0, 500)
            ]
        );
        assert!((usage[1].cost_usd - 0.0125).abs() < 1e-9);
    } else {
        assert!(usage.is_empty());
    }
    let budgets: Vec<_> = store
        .budgets()
        .await
        .unwrap()
        .into_iter()
        .map(|(scope, l)| (scope, l.tokens, l.requests))
        .collect();
    if at(6) {
        assert_eq!(
            budgets,
            [
                ("*".to_string(), 2_000_000, 0),
                ("organization".to_string(), 0, 0),
                ("w02".to_string(), 0, 200)
            ]
        );
    } else {
        assert!(budgets.is_empty());
    }

    // Issues with labels and comments, one closed by a PR.
    let issues: Vec<i64> = store
        .list_issues(IssueQuery {
            limit: 10,
            ..IssueQuery::default()
        })
        .await
        .unwrap()
        .iter()
        .map(|i| i.number)
        .collect();
    assert_eq!(issues, if at(9) { vec![2, 1] } else { vec![] });
    if at(9) {
        let one = store.get_issue(1).await.unwrap();
        assert_eq!(one.labels, ["bug", "parser"]);
        assert_eq!(one.assignee.as_deref(), Some("w01"));
        assert_eq!(one.comments.len(), 1);
        let two = store.get_issue(2).await.unwrap();
        assert_eq!(two.closed_by.as_deref(), Some("pr#2"));
        let labelled: Vec<i64> = store
            .list_issues(IssueQuery {
                label: Some("parser".into()),
                limit: 10,
                ..IssueQuery::default()
            })
            .await
            .unwrap()
            .iter()
            .map(|i| i.number)
            .collect();
        assert_eq!(labelled, [1]);
    }

    // Turn reports.
    let turns = store.turns("w01", None, 10).await.unwrap();
    if at(10) {
        let got: Vec<_> = turns
            .iter()
            .map(|t| (t.turn, t.restarts, t.tool_calls.len()))
            .collect();
        assert_eq!(got, [(2, 1, 1), (1, 0, 2)]);
        assert_eq!(turns[0].events, [4]);
    } else {
        assert!(turns.is_empty());
    }

    // Delivery receipts: recorded ones, the event of a message, and urgent events nobody
    // was shown (event 5 was acknowledged before receipts were kept).
    let receipts: Vec<_> = store
        .receipts(vec![2, 4, 5])
        .await
        .unwrap()
        .into_iter()
        .map(|r| {
            (
                r.event,
                r.worker,
                r.kind,
                r.stored_at,
                r.state,
                r.presented_at.zip(r.via),
                r.acknowledged_at,
            )
        })
        .collect();
    if at(12) {
        assert_eq!(
            receipts,
            [
                (
                    2,
                    "w02".to_string(),
                    "msg.channel".to_string(),
                    1_796_040_070_000,
                    ReceiptState::Acknowledged,
                    Some((1_796_040_080_000, Via::Prompt)),
                    Some(1_796_040_095_000)
                ),
                (
                    4,
                    "w01".to_string(),
                    "msg.dm".to_string(),
                    1_796_040_130_000,
                    ReceiptState::Presented,
                    Some((1_796_040_135_000, Via::Prompt)),
                    None
                )
            ]
        );
    } else {
        assert!(receipts.is_empty());
    }
    let (m2, event) = store.message_event(2).await.unwrap().expect("M2 is stored");
    assert_eq!((m2.from.as_str(), m2.to.as_str()), ("w02", "w01"));
    assert_eq!(event.map(|e| e.seq), Some(4));
    let (_, post) = store.message_event(1).await.unwrap().expect("M1 is stored");
    assert_eq!(post.map(|e| e.seq), Some(2), "a channel post's event");
    assert!(store.message_event(99).await.unwrap().is_none());
    let unseen: Vec<i64> = store
        .unseen_events(0, NOW, 10)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    let mut want = Vec::new();
    if !at(12) {
        want.push(4);
    }
    if at(4) {
        want.push(14);
    }
    assert_eq!(unseen, want, "DMs and reviews nobody was shown");

    // Nodes and the workers they were given.
    let nodes = store.list_nodes().await.unwrap();
    if at(11) {
        let got: Vec<_> = nodes
            .iter()
            .map(|n| (n.name.as_str(), n.workers, n.assigned.clone()))
            .collect();
        assert_eq!(got, [("n1", 8, vec!["w01".to_string()])]);
        assert_eq!(nodes[0].registered_at, Some(1_796_040_030_000));
        assert_eq!(
            store.node_tokens().await.unwrap(),
            [(
                "n1".to_string(),
                "agn_1111111111111111111111111111111111111111".to_string()
            )]
        );
    } else {
        assert!(nodes.is_empty());
    }
}

/// Every kind of write works on the migrated store, and what it wrote reads back.
pub async fn every_write_works(store: &dyn Store) {
    let added = store.add_workers(1, NOW).await.unwrap();
    assert_eq!(
        added[0].id, "w04",
        "numbering goes on after the stored workers"
    );
    store
        .set_worker_status("w04", WorkerStatus::Busy)
        .await
        .unwrap();
    let mut claim = NewRecord::new(RecordKind::Claim, "search: ranking");
    claim.label = Some("search".into());
    claim.paths = vec!["src/search.rs".into()];
    let got = store.append_record("w04", claim, NOW, LEASE).await.unwrap();
    let id = got.record.id;
    assert_eq!(found(store, "rank*").await, [id.as_str()]);
    assert_eq!(found(store, "label:search").await, [id.as_str()]);
    let mut taking = NewRecord::new(RecordKind::Claim, "lexer: numbers again");
    taking.takes_over = Some("G8".into());
    let took = store
        .append_record("w04", taking, NOW, LEASE)
        .await
        .unwrap();
    assert_eq!(
        took.record.takes_over.unwrap().why,
        TakeoverReason::Released
    );
    store
        .post_message(
            "w04",
            NewMessage {
                to: "w01".into(),
                text: "search is mine".into(),
                thread: None,
            },
            NOW,
        )
        .await
        .unwrap();
    assert!(pending(store, "w01").await.len() >= 2);
    let pr = store
        .open_pr(
            "w04",
            NewPr {
                branch: "w04/search".into(),
                title: "Ranking".into(),
                body: None,
            },
            NOW,
        )
        .await
        .unwrap();
    let review = store
        .review_pr(
            pr.number,
            "w01",
            Verdict::Approve,
            "good",
            Some("abc123"),
            NOW,
        )
        .await
        .unwrap();
    assert_eq!(review.commit.as_deref(), Some("abc123"));
    let issue = store
        .open_issue(
            "admin",
            NewIssue {
                title: "Rank by recency".into(),
                body: None,
                labels: vec!["search".into()],
            },
            NOW,
        )
        .await
        .unwrap();
    assert_eq!(
        store.get_issue(issue.number).await.unwrap().labels,
        ["search"]
    );
    store
        .record_model_request(ModelRequest {
            worker: "w04".into(),
            upstream: "local".into(),
            model: "m".into(),
            status: 200,
            input_tokens: 10,
            output_tokens: 5,
            at: NOW,
            ..ModelRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(store.model_usage(Some("w04")).await.unwrap()[0].requests, 1);
    store
        .set_budget(
            "w04",
            agensh_domain::budget::Limits {
                tokens: 10,
                cost_usd: 0.0,
                requests: 0,
                hours: 0.0,
            },
        )
        .await
        .unwrap();
    let report = agensh_protocol::dashboard::TurnReport {
        turn: 1,
        started_at: NOW,
        ended_at: NOW + 1,
        prompt: "p".into(),
        stop_reason: "end_turn".into(),
        ..Default::default()
    };
    store.record_turn("w04", &report).await.unwrap();
    assert_eq!(store.turns("w04", None, 10).await.unwrap().len(), 1);
}
