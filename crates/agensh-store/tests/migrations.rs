//! Schema migrations on real store files: a store written at any earlier schema — with its
//! version recorded, or from before versions — opens migrated, with every row it held found
//! through the `Store` API, takes every kind of write, and ends with exactly the schema of
//! a new store and of `src/sqlite/schema.sql`. A store a newer agensh wrote is refused and
//! left alone; opening a current store changes nothing.
//!
//! The rows are `tests/fixtures/store/vNNNN.sql`: what each version added, as agensh of that
//! time wrote it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agensh_domain::issue::NewIssue;
use agensh_domain::message::NewMessage;
use agensh_domain::pr::{NewPr, PrState, Verdict};
use agensh_domain::query;
use agensh_domain::record::{NewRecord, RecordKind, TakeoverReason};
use agensh_domain::worker::WorkerStatus;
use agensh_store::migrate::{self, CREATE_VERSION_TABLE, TOO_NEW, VERSION_TABLE};
use agensh_store::sqlite::migrate::{status, upgrade, MIGRATIONS};
use agensh_store::{IssueQuery, MessageQuery, ModelRequest, SqliteStore, Store};
use rusqlite::Connection;

/// Ten minutes after the fixtures' first row: w01's and w02's claims are still live.
const NOW: i64 = 1_796_040_600_000;
const LEASE: u64 = 3_600;

fn latest() -> u32 {
    migrate::latest(MIGRATIONS)
}

/// The fixture rows of `version`, if that version added any.
fn fixture(version: u32) -> Option<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/store/v{version:04}.sql"));
    path.exists()
        .then(|| std::fs::read_to_string(&path).expect("fixture reads"))
}

/// Inserts the fixture rows of every version up to `version`.
fn insert_rows(conn: &Connection, version: u32) {
    for v in 1..=version {
        if let Some(sql) = fixture(v) {
            conn.execute_batch(&sql)
                .unwrap_or_else(|e| panic!("fixture v{v:04}.sql: {e}"));
        }
    }
}

fn new_file() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store.sqlite");
    (dir, path)
}

/// A store file at schema `version`, recorded, with the rows of every version up to it.
fn store_at(version: u32) -> (tempfile::TempDir, PathBuf) {
    let (dir, path) = new_file();
    let mut conn = Connection::open(&path).unwrap();
    upgrade(&mut conn, &MIGRATIONS[..version as usize]).expect("migrations up to version");
    insert_rows(&conn, version);
    (dir, path)
}

/// A store as agensh wrote it before versions: the steps of `steps` made (at every open,
/// the tables of the agensh that opened it), no version recorded, the rows of `rows`.
fn unversioned(steps: &[u32], rows: u32) -> (tempfile::TempDir, PathBuf) {
    let (dir, path) = new_file();
    let conn = Connection::open(&path).unwrap();
    for v in steps {
        conn.execute_batch(MIGRATIONS[*v as usize - 1].sql).unwrap();
    }
    insert_rows(&conn, rows);
    (dir, path)
}

fn recorded(path: &Path) -> Vec<(u32, String, i64)> {
    let conn = Connection::open(path).unwrap();
    let mut s = conn
        .prepare(&format!(
            "SELECT version, name, applied_at FROM {VERSION_TABLE} ORDER BY version"
        ))
        .unwrap();
    s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

fn grep_ids(q: &str) -> query::Query {
    query::parse(q).unwrap_or_else(|e| panic!("{q}: {e:?}"))
}

async fn found(store: &SqliteStore, q: &str) -> Vec<String> {
    store
        .grep(&grep_ids(q), None, 50)
        .await
        .unwrap_or_else(|e| panic!("grep {q}: {e}"))
        .into_iter()
        .map(|r| r.id)
        .collect()
}

async fn pending(store: &SqliteStore, worker: &str) -> Vec<i64> {
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
async fn every_row_is_found(store: &SqliteStore, version: u32) {
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
async fn every_write_works(store: &SqliteStore) {
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

/// The store's tables, indexes and virtual tables, each described so that two stores that
/// would behave alike compare equal (columns by name: a column added later sits last).
fn describe(conn: &Connection) -> BTreeMap<String, String> {
    fn normal(sql: &str) -> String {
        let mut out = String::new();
        for line in sql.lines() {
            out.push_str(line.split("--").next().unwrap_or(""));
            out.push(' ');
        }
        let out = out.to_lowercase().replace("if not exists ", "");
        let words: Vec<&str> = out.split_whitespace().collect();
        let mut s = words.join(" ");
        for p in ["(", ")", ",", "="] {
            s = s.replace(&format!(" {p}"), p).replace(&format!("{p} "), p);
        }
        s
    }
    let mut objects = conn
        .prepare(
            "SELECT type, name, ifnull(sql, '') FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'",
        )
        .unwrap();
    let rows: Vec<(String, String, String)> = objects
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    let mut out = BTreeMap::new();
    for (kind, name, sql) in rows {
        let sql = normal(&sql);
        let what = if kind == "table" && !sql.contains("virtual table") {
            let mut cols: Vec<String> = conn
                .prepare(&format!("SELECT name, type, \"notnull\", ifnull(dflt_value, ''), pk FROM pragma_table_info('{name}')"))
                .unwrap()
                .query_map([], |r| {
                    Ok(format!(
                        "{} {} notnull={} default={} pk={}",
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, i64>(4)?
                    ))
                })
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            cols.sort();
            let mut keys: Vec<String> = conn
                .prepare(&format!("SELECT \"table\", \"from\", ifnull(\"to\", '') FROM pragma_foreign_key_list('{name}')"))
                .unwrap()
                .query_map([], |r| {
                    Ok(format!("{}->{}.{}", r.get::<_, String>(1)?, r.get::<_, String>(0)?, r.get::<_, String>(2)?))
                })
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            keys.sort();
            let mut unique: Vec<String> = conn
                .prepare(&format!("SELECT l.origin, group_concat(i.name) FROM pragma_index_list('{name}') l, pragma_index_info(l.name) i WHERE l.origin != 'c' GROUP BY l.name"))
                .unwrap()
                .query_map([], |r| Ok(format!("{}({})", r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            unique.sort();
            format!(
                "table [{}] fk [{}] unique [{}] without_rowid={} autoincrement={}",
                cols.join("; "),
                keys.join(", "),
                unique.join(", "),
                sql.contains("without rowid"),
                sql.contains("autoincrement")
            )
        } else {
            format!("{kind} {sql}")
        };
        out.insert(name, what);
    }
    out
}

fn schema_of_file(path: &Path) -> BTreeMap<String, String> {
    describe(&Connection::open(path).unwrap())
}

/// What a new store's schema is: `SqliteStore::open` on a new file.
fn new_store_schema() -> BTreeMap<String, String> {
    let (_dir, path) = new_file();
    drop(SqliteStore::open(&path).unwrap());
    schema_of_file(&path)
}

#[tokio::test]
async fn a_store_at_each_version_opens_migrated_with_every_record_found() {
    let fresh = new_store_schema();
    for version in 1..=latest() {
        let (_dir, path) = store_at(version);
        let store = SqliteStore::open(&path)
            .unwrap_or_else(|e| panic!("a store at schema {version} opens: {e}"));
        let versions: Vec<u32> = recorded(&path).iter().map(|r| r.0).collect();
        assert_eq!(
            versions,
            (1..=latest()).collect::<Vec<_>>(),
            "from {version}"
        );
        every_row_is_found(&store, version).await;
        every_write_works(&store).await;
        drop(store);
        assert_eq!(
            schema_of_file(&path),
            fresh,
            "a store migrated from {version}"
        );
    }
}

#[tokio::test]
async fn a_store_written_before_versions_is_found_at_its_version_and_migrated() {
    let fresh = new_store_schema();
    for version in 1..=latest() {
        let steps: Vec<u32> = (1..=version).collect();
        let (_dir, path) = unversioned(&steps, version);
        let before = status(&path).unwrap();
        assert!(before.unversioned);
        assert_eq!(before.version, 0);
        let store = SqliteStore::open(&path)
            .unwrap_or_else(|e| panic!("an unversioned store of schema {version} opens: {e}"));
        assert_eq!(recorded(&path).len(), latest() as usize);
        every_row_is_found(&store, version).await;
        every_write_works(&store).await;
        drop(store);
        assert_eq!(
            schema_of_file(&path),
            fresh,
            "an unversioned store of {version}"
        );
    }
}

#[tokio::test]
async fn a_first_store_later_agensh_opened_without_versions_gets_the_steps_it_missed() {
    // Made at schema 1, then opened by an agensh of schema 6 before versions: it created
    // the new tables (IF NOT EXISTS) but neither rebuilt the index with prefixes (2) nor
    // added the events' except_worker column (3).
    let (_dir, path) = unversioned(&[1, 4, 5, 6], 1);
    let store = SqliteStore::open(&path).expect("opens");
    every_row_is_found(&store, 1).await;
    every_write_works(&store).await;
    drop(store);
    assert_eq!(schema_of_file(&path), new_store_schema());
}

#[tokio::test]
async fn a_store_written_by_a_newer_agensh_is_refused_and_left_alone() {
    let (_dir, path) = store_at(latest());
    let next = latest() + 1;
    Connection::open(&path)
        .unwrap()
        .execute(
            &format!("INSERT INTO {VERSION_TABLE}(version, name, applied_at) VALUES (?1, 'from_the_future', 0)"),
            [next],
        )
        .unwrap();
    let before = recorded(&path);
    let e = SqliteStore::open(&path).err().expect("refused");
    assert_eq!(e.code, TOO_NEW);
    assert_eq!(
        e.message,
        format!(
            "this store was written by a newer agensh (schema {next}, this one knows {}): upgrade agensh",
            latest()
        )
    );
    assert_eq!(recorded(&path), before);
    let s = status(&path).unwrap();
    assert!(s.too_new());
    assert_eq!((s.version, s.latest), (next, latest()));
}

#[tokio::test]
async fn opening_a_current_store_again_changes_nothing() {
    let (_dir, path) = new_file();
    drop(SqliteStore::open(&path).unwrap());
    let first = recorded(&path);
    assert_eq!(first.len(), latest() as usize);
    let schema = schema_of_file(&path);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let store = SqliteStore::open(&path).unwrap();
    drop(store);
    assert_eq!(
        recorded(&path),
        first,
        "no migration ran or was recorded again"
    );
    assert_eq!(schema_of_file(&path), schema);
    let s = status(&path).unwrap();
    assert_eq!(
        (s.version, s.latest, s.pending.len()),
        (latest(), latest(), 0)
    );
    assert!(!s.unversioned);
}

#[test]
fn openers_of_an_old_store_at_once_each_on_its_own_connection_apply_each_migration_once() {
    let (_dir, path) = unversioned(&[1, 2, 3, 4], 4);
    let openers: Vec<_> = (0..4)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || SqliteStore::open(&path).map(drop))
        })
        .collect();
    for o in openers {
        o.join().unwrap().expect("every opener opens the store");
    }
    let versions: Vec<u32> = recorded(&path).iter().map(|r| r.0).collect();
    assert_eq!(
        versions,
        (1..=latest()).collect::<Vec<_>>(),
        "each version once"
    );
    assert_eq!(schema_of_file(&path), new_store_schema());
}

#[test]
fn status_of_a_store_at_an_older_version_lists_what_open_will_apply() {
    let (_dir, path) = store_at(3);
    let s = status(&path).unwrap();
    assert_eq!(s.version, 3);
    assert_eq!(
        s.applied
            .iter()
            .map(|a| a.name.as_str())
            .collect::<Vec<_>>(),
        ["initial", "fts_prefix", "event_except"]
    );
    assert_eq!(s.pending.first(), Some(&(4, "pull_requests")));
    assert_eq!(s.pending.len(), latest() as usize - 3);
    let (_none, missing) = new_file();
    let e = status(&missing).unwrap_err();
    assert!(e.message.contains("agensh init"), "{}", e.message);
}

#[test]
fn a_new_store_has_exactly_the_schema_of_schema_sql() {
    let reference = Connection::open_in_memory().unwrap();
    reference
        .execute_batch(include_str!("../src/sqlite/schema.sql"))
        .unwrap();
    reference.execute_batch(CREATE_VERSION_TABLE).unwrap();
    let want = describe(&reference);
    let got = new_store_schema();
    let only = |a: &BTreeMap<String, String>, b: &BTreeMap<String, String>| -> Vec<String> {
        a.iter()
            .filter(|(k, v)| b.get(*k) != Some(v))
            .map(|(k, v)| format!("{k}: {v}"))
            .collect()
    };
    assert!(
        got == want,
        "the migrations and src/sqlite/schema.sql differ — a schema change is a new file in \
         src/sqlite/migrations/ (listed in MIGRATIONS) and the same change in schema.sql.\n\
         only from the migrations: {:#?}\nonly in schema.sql: {:#?}",
        only(&got, &want),
        only(&want, &got)
    );
}
