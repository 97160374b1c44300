//! Schema migrations on real store files: a store written at any earlier schema — with its
//! version recorded, or from before versions — opens migrated, with every row it held found
//! through the `Store` API, takes every kind of write, and ends with exactly the schema of
//! a new store and of `src/sqlite/schema.sql`. A store a newer agensh wrote is refused and
//! left alone; opening a current store changes nothing.
//!
//! The rows are `tests/fixtures/store/vNNNN.sql`: what each version added, as agensh of that
//! time wrote it.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agensh_store::migrate::{self, CREATE_VERSION_TABLE, TOO_NEW, VERSION_TABLE};
use agensh_store::sqlite::migrate::{status, upgrade, MIGRATIONS};
use agensh_store::SqliteStore;
use common::rows::{every_row_is_found, every_write_works, insert_rows};
use rusqlite::Connection;

fn latest() -> u32 {
    migrate::latest(MIGRATIONS)
}

/// The newest schema a store written before versions can have: the steps made before
/// stores recorded their versions, each with its `present_if`.
fn last_unversioned() -> u32 {
    MIGRATIONS
        .iter()
        .take_while(|m| m.present_if.is_some())
        .count() as u32
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
    assert!(
        last_unversioned() >= 11,
        "stores before versions reached schema 11"
    );
    for version in 1..=last_unversioned() {
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
    common::assert_schema_sql_matches("sqlite", &got, &want);
}
