//! `agensh store migrate`'s move (`transfer::sqlite_to_postgres`) on a real SQLite store and
//! a real PostgreSQL server: a store holding rows of every kind arrives whole — every row
//! found through the `Store` API with the same numbers, grep answering the same, new
//! writes numbered after the moved ones; a target that holds anything, a source with a
//! table the move does not know, and a source a newer agensh wrote are refused with the
//! target left as it was.

mod common;

use std::path::{Path, PathBuf};

use agensh_domain::message::NewMessage;
use agensh_domain::query;
use agensh_domain::record::{NewRecord, RecordKind};
use agensh_store::migrate::{self, VERSION_TABLE};
use agensh_store::sqlite::migrate::{upgrade, MIGRATIONS};
use agensh_store::transfer::{self, sqlite_to_postgres, Summary};
use agensh_store::{ModelRequest, PostgresStore, SqliteStore, Store};
use common::rows::{every_row_is_found, every_write_works, insert_rows, LEASE, NOW};
use rusqlite::Connection;

/// A SQLite store file at the newest schema holding the fixture rows of every version.
fn full_store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store.sqlite");
    let mut conn = Connection::open(&path).unwrap();
    upgrade(&mut conn, MIGRATIONS).unwrap();
    insert_rows(&conn, migrate::latest(MIGRATIONS));
    (dir, path)
}

/// Rows per moved table of the SQLite file at `path`.
fn source_counts(path: &Path) -> Vec<(String, u64)> {
    let conn = Connection::open(path).unwrap();
    transfer::TABLES
        .iter()
        .map(|(t, _)| {
            let n: i64 = conn
                .query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
                .unwrap();
            (t.to_string(), n as u64)
        })
        .collect()
}

async fn move_it(from: &Path, to: &str) -> agensh_domain::Result<Summary> {
    sqlite_to_postgres(from, to, 3, |_| {}).await
}

/// Rows per table of the database at `url`, the version table aside.
async fn target_counts(url: &str) -> Vec<(String, i64)> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut out = Vec::new();
    for (t, _) in transfer::TABLES {
        let n: i64 = client
            .query_one(&format!("SELECT count(*) FROM {t}"), &[])
            .await
            .map(|r| r.get(0))
            .unwrap_or(-1);
        out.push((t.to_string(), n));
    }
    out
}

/// Queries over the fixture's words, filters and operators.
const QUERIES: &[&str] = &[
    "parser",
    "pars*",
    "lex*",
    "\"error recovery\"",
    "\"escapes and numbers\"",
    "lexer OR docs",
    "lexer -escapes",
    "NOT parser",
    "kind:CLAIM",
    "kind:patchsummary OR kind:FAIL",
    "author:w02",
    "author:W02 numbers",
    "label:lexer",
    "label:parser (recursive OR recovery)",
    "spec",
    "json",
    "10000",
    "u*",
    "nothing_like_this",
];

async fn grep(store: &dyn Store, q: &str) -> Vec<agensh_domain::record::Record> {
    store
        .grep(&query::parse(q).unwrap(), None, 50)
        .await
        .unwrap_or_else(|e| panic!("grep {q}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_store_moves_whole_with_its_numbers_and_new_writes_number_after_them() {
    let (_dir, path) = full_store();
    let url = common::pg::database().await;
    let mut seen = Vec::new();
    let summary = sqlite_to_postgres(&path, &url, 4, |p| seen.push((p.done, p.total)))
        .await
        .expect("the store moves");

    // The summary: every table, as many rows as the source held; the progress ended at all.
    let counts = source_counts(&path);
    assert_eq!(summary.tables, counts);
    let total: u64 = counts.iter().map(|(_, n)| n).sum();
    assert_eq!(summary.rows, total);
    assert!(counts.iter().all(|(_, n)| *n > 0), "{counts:?}");
    assert_eq!(seen.last(), Some(&(total, total)));
    assert!(seen.len() > 10, "progress after each batch of 4: {seen:?}");
    assert_eq!(summary.source_schema, migrate::latest(MIGRATIONS));
    assert!(summary.source_upgraded.is_empty());
    assert_eq!(
        summary.sequences,
        [("public.model_requests_id_seq".to_string(), 4)]
    );

    let pg = PostgresStore::connect(&url).await.unwrap();
    let sqlite = SqliteStore::open(&path).unwrap();
    every_row_is_found(&pg, migrate::latest(MIGRATIONS)).await;

    // The same answers on both, record for record, event for event.
    for q in QUERIES {
        assert_eq!(grep(&pg, q).await, grep(&sqlite, q).await, "grep {q}");
    }
    assert_eq!(
        json(&pg.events_after(0, 100).await.unwrap()),
        json(&sqlite.events_after(0, 100).await.unwrap())
    );
    assert_eq!(
        json(&pg.list_workers(NOW).await.unwrap()),
        json(&sqlite.list_workers(NOW).await.unwrap())
    );
    for w in ["w01", "w02", "w03"] {
        assert_eq!(
            json(&pg.queue_state(w).await.unwrap()),
            json(&sqlite.queue_state(w).await.unwrap()),
            "{w}'s cursor and acks"
        );
        assert_eq!(
            json(&pg.pending_events(w, 0, 100).await.unwrap()),
            json(&sqlite.pending_events(w, 0, 100).await.unwrap())
        );
    }
    assert_eq!(
        json(&pg.stats().await.unwrap()),
        json(&sqlite.stats().await.unwrap())
    );
    assert_eq!(
        json(&pg.recent_view(NOW, 50).await.unwrap()),
        json(&sqlite.recent_view(NOW, 50).await.unwrap())
    );
    assert_eq!(
        json(&pg.model_usage(None).await.unwrap()),
        json(&sqlite.model_usage(None).await.unwrap())
    );

    // New writes get the next numbers, not the moved ones again.
    let last_event = pg.events_after(0, 100).await.unwrap().last().unwrap().seq;
    let got = pg
        .append_record(
            "w01",
            NewRecord::new(RecordKind::Observed, "after the move"),
            NOW,
            LEASE,
        )
        .await
        .unwrap();
    assert_eq!(got.record.id, "G10");
    let msg = pg
        .post_message(
            "w02",
            NewMessage {
                to: "#general".into(),
                text: "moved".into(),
                thread: None,
            },
            NOW,
        )
        .await
        .unwrap();
    assert_eq!(msg.seq, 4);
    let events: Vec<i64> = pg
        .events_after(last_event, 10)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(events, [last_event + 1, last_event + 2]);
    pg.record_model_request(ModelRequest {
        worker: "w01".into(),
        upstream: "local".into(),
        model: "m".into(),
        status: 200,
        at: NOW,
        ..ModelRequest::default()
    })
    .await
    .expect("the request is numbered after the moved ones");
    every_write_works(&pg).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_holds_anything_is_refused_and_left_unchanged() {
    let (_dir, path) = full_store();
    let url = common::pg::database().await;
    let store = PostgresStore::connect(&url).await.unwrap();
    let admin = store.admin_token().await.unwrap();
    store.add_workers(2, NOW).await.unwrap();
    let before = target_counts(&url).await;

    let e = move_it(&path, &url).await.expect_err("refused");
    assert_eq!(e.code, transfer::NOT_EMPTY);
    assert!(
        e.message.starts_with(
            "the target database is not empty (meta: 1, workers: 2) — agensh store migrate moves a store into an empty database only, and changed nothing"
        ),
        "{}",
        e.message
    );
    assert!(e.message.contains("createdb NAME"), "{}", e.message);
    assert_eq!(target_counts(&url).await, before);
    assert_eq!(store.admin_token().await.unwrap(), admin);
    assert_eq!(store.worker_tokens().await.unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_from_before_versions_that_holds_rows_is_refused_before_its_schema_is_touched() {
    let (_dir, path) = full_store();
    let url = common::pg::database().await;
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/postgres");
    for f in [
        "unversioned_before_nodes_schema.sql",
        "unversioned_rows.sql",
    ] {
        client
            .batch_execute(&std::fs::read_to_string(fixtures.join(f)).unwrap())
            .await
            .unwrap();
    }
    let e = move_it(&path, &url).await.expect_err("refused");
    assert_eq!(e.code, transfer::NOT_EMPTY);
    let status = agensh_store::postgres::migrate::status(&url).await.unwrap();
    assert!(status.unversioned, "not adopted: no version recorded");
    let nodes: bool = client
        .query_one("SELECT to_regclass('nodes') IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    assert!(!nodes, "no table made");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_table_the_move_does_not_know_fails_it_before_anything_is_written() {
    let (_dir, path) = full_store();
    Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE webhooks (url TEXT); INSERT INTO webhooks VALUES ('x');")
        .unwrap();
    let url = common::pg::database().await;
    let e = move_it(&path, &url).await.expect_err("refused");
    assert_eq!(e.code, transfer::UNKNOWN_TABLE);
    assert!(
        e.message.starts_with(
            "the SQLite store has a table `webhooks` that agensh store migrate does not know how to move — nothing was moved"
        ),
        "{}",
        e.message
    );
    assert!(target_counts(&url).await.iter().all(|(_, n)| *n == 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_half_way_leaves_the_target_empty_and_the_move_can_run_again() {
    let (_dir, path) = full_store();
    // A value the target cannot take (bytes where text goes), in the last table moved.
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "INSERT INTO nodes(name, token, workers, created_at) VALUES ('n2', x'2a', 1, 0);",
        )
        .unwrap();
    let url = common::pg::database().await;
    let e = move_it(&path, &url).await.expect_err("fails");
    assert_eq!(
        e.message,
        "store error: nodes.token: binary data (1 bytes) does not fit a column of type text — nothing was moved"
    );
    assert!(target_counts(&url).await.iter().all(|(_, n)| *n == 0));
    Connection::open(&path)
        .unwrap()
        .execute_batch("DELETE FROM nodes WHERE name = 'n2';")
        .unwrap();
    let summary = move_it(&path, &url).await.expect("the second run moves it");
    assert_eq!(summary.tables, source_counts(&path));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_source_is_upgraded_first_and_a_newer_one_refused() {
    // At schema 3: the move brings it to the newest first, as opening it would.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.sqlite");
    let mut conn = Connection::open(&path).unwrap();
    upgrade(&mut conn, &MIGRATIONS[..3]).unwrap();
    insert_rows(&conn, 3);
    drop(conn);
    let url = common::pg::database().await;
    let summary = move_it(&path, &url).await.expect("moves");
    assert_eq!(
        summary.source_upgraded,
        (4..=migrate::latest(MIGRATIONS)).collect::<Vec<_>>()
    );
    let pg = PostgresStore::connect(&url).await.unwrap();
    every_row_is_found(&pg, 3).await;

    let (_dir2, newer) = full_store();
    let next = migrate::latest(MIGRATIONS) + 1;
    Connection::open(&newer)
        .unwrap()
        .execute(
            &format!(
                "INSERT INTO {VERSION_TABLE}(version, name, applied_at) VALUES (?1, 'later', 0)"
            ),
            [next],
        )
        .unwrap();
    let url = common::pg::database().await;
    let e = move_it(&newer, &url).await.expect_err("refused");
    assert_eq!(e.code, migrate::TOO_NEW);
    assert!(target_counts(&url).await.iter().all(|(_, n)| *n == 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_source_says_what_to_give() {
    let url = common::pg::database().await;
    let e = move_it(Path::new("/nonexistent/store.sqlite"), &url)
        .await
        .expect_err("refused");
    assert_eq!(e.code, "no_store");
    assert!(
        e.message.contains("organization directory"),
        "{}",
        e.message
    );
}

/// A value as JSON, to compare what two stores answer.
fn json<T: serde::Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).expect("serializes")
}
