//! The PostgreSQL store's schema migrations on a real server: a database written before
//! versions (by the schema kept in `tests/fixtures/postgres/`, with rows of every kind) is
//! adopted and every row found through the `Store` API; a database a newer agensh wrote is
//! refused and left alone; stores opening one database at once apply each step once; a
//! step that fails leaves the version before it; and a new database has exactly the schema
//! of `src/postgres/schema.sql`.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use agensh_store::migrate::{self, Migration, CREATE_VERSION_TABLE, TOO_NEW, VERSION_TABLE};
use agensh_store::postgres::migrate::{status, upgrade, MIGRATIONS};
use agensh_store::{PostgresStore, Store};
use common::rows::{every_row_is_found, every_write_works};
use tokio_postgres::Client;

fn latest() -> u32 {
    migrate::latest(MIGRATIONS)
}

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/postgres")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

async fn client(url: &str) -> Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connects");
    tokio::spawn(conn);
    client
}

/// A new database holding what `sql` (fixture files, in order) makes.
async fn database_of(files: &[&str]) -> String {
    let url = common::pg::database().await;
    let c = client(&url).await;
    for f in files {
        c.batch_execute(&fixture(f))
            .await
            .unwrap_or_else(|e| panic!("{f}: {e}"));
    }
    url
}

async fn recorded(url: &str) -> Vec<(i32, String, i64)> {
    client(url)
        .await
        .query(
            &format!("SELECT version, name, applied_at FROM {VERSION_TABLE} ORDER BY version"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// The database's tables, columns, indexes, constraints and functions, each described so
/// that two databases that would behave alike compare equal.
async fn describe(url: &str) -> BTreeMap<String, String> {
    let c = client(url).await;
    let mut out = BTreeMap::new();
    for r in c
        .query(
            "SELECT table_name::text, column_name::text, udt_name::text, is_nullable::text, \
                    coalesce(column_default, '')::text, coalesce(collation_name, '')::text \
             FROM information_schema.columns WHERE table_schema = current_schema()",
            &[],
        )
        .await
        .unwrap()
    {
        let (t, col): (String, String) = (r.get(0), r.get(1));
        let what: Vec<String> = (2..6).map(|i| r.get::<_, String>(i)).collect();
        out.insert(format!("column {t}.{col}"), what.join(" "));
    }
    for r in c
        .query(
            "SELECT indexname::text, indexdef FROM pg_indexes WHERE schemaname = current_schema()",
            &[],
        )
        .await
        .unwrap()
    {
        out.insert(format!("index {}", r.get::<_, String>(0)), r.get(1));
    }
    for r in c
        .query(
            "SELECT conrelid::regclass::text, conname::text, pg_get_constraintdef(oid) \
             FROM pg_constraint WHERE connamespace = current_schema()::regnamespace",
            &[],
        )
        .await
        .unwrap()
    {
        out.insert(
            format!(
                "constraint {}.{}",
                r.get::<_, String>(0),
                r.get::<_, String>(1)
            ),
            r.get(2),
        );
    }
    for r in c
        .query(
            "SELECT proname::text, pg_get_functiondef(oid) FROM pg_proc \
             WHERE pronamespace = current_schema()::regnamespace",
            &[],
        )
        .await
        .unwrap()
    {
        out.insert(format!("function {}", r.get::<_, String>(0)), r.get(1));
    }
    for r in c
        .query(
            "SELECT tgname::text, pg_get_triggerdef(t.oid) FROM pg_trigger t \
             JOIN pg_class c ON c.oid = t.tgrelid \
             WHERE c.relnamespace = current_schema()::regnamespace AND NOT t.tgisinternal",
            &[],
        )
        .await
        .unwrap()
    {
        out.insert(format!("trigger {}", r.get::<_, String>(0)), r.get(1));
    }
    out
}

/// What a new database's schema is: a store opened on an empty database.
async fn new_database_schema() -> BTreeMap<String, String> {
    let url = common::pg::database().await;
    drop(PostgresStore::connect(&url).await.unwrap());
    describe(&url).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_written_before_versions_is_adopted_with_every_row_found() {
    let url = database_of(&[
        "unversioned_schema.sql",
        "unversioned_rows.sql",
        "unversioned_rows_nodes.sql",
    ])
    .await;
    let before = status(&url).await.unwrap();
    assert!(before.unversioned);
    assert_eq!(
        (before.version, before.pending.len()),
        (0, latest() as usize)
    );

    let store = PostgresStore::connect(&url).await.expect("opens");
    let versions: Vec<i32> = recorded(&url).await.iter().map(|r| r.0).collect();
    assert_eq!(versions, (1..=latest() as i32).collect::<Vec<_>>());
    let after = status(&url).await.unwrap();
    assert!(!after.unversioned);
    assert_eq!((after.version, after.pending.len()), (latest(), 0));
    every_row_is_found(&store, 11).await;
    every_write_works(&store).await;
    drop(store);
    assert_eq!(describe(&url).await, new_database_schema().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_from_before_nodes_gets_the_nodes_tables_and_keeps_its_rows() {
    let url = database_of(&[
        "unversioned_before_nodes_schema.sql",
        "unversioned_rows.sql",
    ])
    .await;
    assert!(status(&url).await.unwrap().unversioned);
    let store = PostgresStore::connect(&url).await.expect("opens");
    // Schema 10 of the SQLite fixtures: everything but nodes.
    every_row_is_found(&store, 10).await;
    let node = store.add_node("n9", 2, common::rows::NOW).await.unwrap();
    assert_eq!(node.name, "n9");
    every_write_works(&store).await;
    drop(store);
    assert_eq!(describe(&url).await, new_database_schema().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_written_by_a_newer_agensh_is_refused_and_left_alone() {
    let url = common::pg::database().await;
    drop(PostgresStore::connect(&url).await.unwrap());
    let next = latest() + 1;
    client(&url)
        .await
        .execute(
            &format!(
                "INSERT INTO {VERSION_TABLE}(version, name, applied_at) VALUES ($1, 'from_the_future', 0)"
            ),
            &[&(next as i32)],
        )
        .await
        .unwrap();
    let before = (recorded(&url).await, describe(&url).await);
    let e = PostgresStore::connect(&url).await.err().expect("refused");
    assert_eq!(e.code, TOO_NEW);
    assert_eq!(
        e.message,
        format!(
            "this store was written by a newer agensh (schema {next}, this one knows {}): upgrade agensh",
            latest()
        )
    );
    assert_eq!((recorded(&url).await, describe(&url).await), before);
    let s = status(&url).await.unwrap();
    assert!(s.too_new());
    assert_eq!((s.version, s.latest), (next, latest()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stores_opening_an_old_database_at_once_adopt_it_once() {
    let url = database_of(&[
        "unversioned_schema.sql",
        "unversioned_rows.sql",
        "unversioned_rows_nodes.sql",
    ])
    .await;
    let openers: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { PostgresStore::connect(&url).await.map(drop) })
        })
        .collect();
    for o in openers {
        o.await.unwrap().expect("every opener opens the database");
    }
    let versions: Vec<i32> = recorded(&url).await.iter().map(|r| r.0).collect();
    assert_eq!(versions, (1..=latest() as i32).collect::<Vec<_>>());
    let store = PostgresStore::connect(&url).await.unwrap();
    every_row_is_found(&store, 11).await;
}

/// Steps for the tests of the mechanism: slow enough that concurrent upgraders wait for
/// each other; the second and third count how often they ran.
const STEPS: [Migration; 3] = [
    Migration {
        version: 1,
        name: "one",
        sql: "CREATE TABLE runs (step INTEGER NOT NULL); SELECT pg_sleep(0.3)",
        present_if: None,
    },
    Migration {
        version: 2,
        name: "two",
        sql: "SELECT pg_sleep(0.3); INSERT INTO runs VALUES (2)",
        present_if: None,
    },
    Migration {
        version: 3,
        name: "three",
        sql: "INSERT INTO runs VALUES (3)",
        present_if: None,
    },
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_upgraders_each_on_its_own_connection_apply_each_step_once() {
    let url = common::pg::database().await;
    let mut clients = Vec::new();
    for _ in 0..5 {
        clients.push(client(&url).await);
    }
    // All connected first, so they start together and meet at step 1's lock.
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|c| tokio::spawn(async move { upgrade(&c, &STEPS).await }))
        .collect();
    let mut applied: Vec<u32> = Vec::new();
    for t in tasks {
        applied.extend(t.await.unwrap().expect("every upgrader succeeds"));
    }
    applied.sort();
    assert_eq!(
        applied,
        [1, 2, 3],
        "each step applied by exactly one of them"
    );
    let runs: Vec<i32> = client(&url)
        .await
        .query("SELECT step FROM runs ORDER BY step", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(runs, [2, 3]);
    let versions: Vec<i32> = recorded(&url).await.iter().map(|r| r.0).collect();
    assert_eq!(versions, [1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_that_fails_leaves_the_database_at_the_version_before_it() {
    let url = common::pg::database().await;
    let broken = Migration {
        version: 2,
        name: "broken",
        sql: "CREATE TABLE two (x INTEGER); INSERT INTO nowhere VALUES (1)",
        present_if: None,
    };
    let c = client(&url).await;
    let e = upgrade(&c, &[STEPS[0], broken]).await.unwrap_err();
    assert!(
        e.message.starts_with(
            "cannot upgrade the store to schema 2 (broken): relation \"nowhere\" does not exist — the store is unchanged at schema 1"
        ),
        "{}",
        e.message
    );
    let versions: Vec<i32> = recorded(&url).await.iter().map(|r| r.0).collect();
    assert_eq!(versions, [1]);
    let two: bool = c
        .query_one("SELECT to_regclass('two') IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    assert!(!two, "the failed step's table was rolled back");
    // The connection is usable again: the next upgrade with a fixed step goes on.
    assert_eq!(upgrade(&c, &STEPS).await.unwrap(), [2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_a_current_database_again_changes_nothing() {
    let url = common::pg::database().await;
    drop(PostgresStore::connect(&url).await.unwrap());
    let first = (recorded(&url).await, describe(&url).await);
    assert_eq!(first.0.len(), latest() as usize);
    drop(PostgresStore::connect(&url).await.unwrap());
    assert_eq!((recorded(&url).await, describe(&url).await), first);
    let s = status(&url).await.unwrap();
    assert_eq!(
        (s.version, s.latest, s.pending.len(), s.unversioned),
        (latest(), latest(), 0, false)
    );
    assert_eq!(s.applied[0].name, "initial");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_database_has_exactly_the_schema_of_schema_sql() {
    let reference = common::pg::database().await;
    let c = client(&reference).await;
    c.batch_execute(include_str!("../src/postgres/schema.sql"))
        .await
        .unwrap();
    c.batch_execute(CREATE_VERSION_TABLE).await.unwrap();
    let want = describe(&reference).await;
    let got = new_database_schema().await;
    common::assert_schema_sql_matches("postgres", &got, &want);
}
