//! The SQLite store's migrations, applied when it opens.
//!
//! [`MIGRATIONS`] is every change to the schema since the first stores, in order, each from
//! its file in `migrations/`. Stores written before versions (agensh before 2026-12-02:
//! `CREATE TABLE IF NOT EXISTS` at every open, and `pr_reviews.commit_id` added by hand)
//! have no `schema_migrations` table; their steps carry a `present_if` query, so the tables
//! such a store has are recorded as found and only what it lacks is applied.

use std::path::Path;

use agensh_domain::{Error, Result};
use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use super::conn::sql_err;
use crate::migrate::{self, Applied, Migration, Status, CREATE_VERSION_TABLE, VERSION_TABLE};

/// A table of the store exists.
macro_rules! table {
    ($name:literal) => {
        concat!(
            "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = '",
            $name,
            "'"
        )
    };
}

/// Every migration of the SQLite store, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("migrations/0001_initial.sql"),
        present_if: Some(table!("workers")),
    },
    Migration {
        version: 2,
        name: "fts_prefix",
        sql: include_str!("migrations/0002_fts_prefix.sql"),
        present_if: Some(
            "SELECT 1 FROM sqlite_schema WHERE name = 'records_fts' AND sql LIKE '%prefix=%'",
        ),
    },
    Migration {
        version: 3,
        name: "event_except",
        sql: include_str!("migrations/0003_event_except.sql"),
        present_if: Some("SELECT 1 FROM pragma_table_info('events') WHERE name = 'except_worker'"),
    },
    Migration {
        version: 4,
        name: "pull_requests",
        sql: include_str!("migrations/0004_pull_requests.sql"),
        present_if: Some(table!("prs")),
    },
    Migration {
        version: 5,
        name: "model_requests",
        sql: include_str!("migrations/0005_model_requests.sql"),
        present_if: Some(table!("model_requests")),
    },
    Migration {
        version: 6,
        name: "budgets",
        sql: include_str!("migrations/0006_budgets.sql"),
        present_if: Some(table!("budgets")),
    },
    Migration {
        version: 7,
        name: "review_commit",
        sql: include_str!("migrations/0007_review_commit.sql"),
        present_if: Some("SELECT 1 FROM pragma_table_info('pr_reviews') WHERE name = 'commit_id'"),
    },
    Migration {
        version: 8,
        name: "takeovers",
        sql: include_str!("migrations/0008_takeovers.sql"),
        present_if: Some(table!("takeovers")),
    },
    Migration {
        version: 9,
        name: "issues",
        sql: include_str!("migrations/0009_issues.sql"),
        present_if: Some(table!("issues")),
    },
    Migration {
        version: 10,
        name: "turns",
        sql: include_str!("migrations/0010_turns.sql"),
        present_if: Some(table!("turns")),
    },
    Migration {
        version: 11,
        name: "nodes",
        sql: include_str!("migrations/0011_nodes.sql"),
        present_if: Some(table!("nodes")),
    },
    Migration {
        version: 12,
        name: "receipts",
        sql: include_str!("migrations/0012_receipts.sql"),
        present_if: None,
    },
];

fn has_version_table(conn: &Connection) -> Result<bool> {
    conn.prepare_cached("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1")
        .and_then(|mut s| s.exists([VERSION_TABLE]))
        .map_err(sql_err)
}

/// The store's schema version: the highest migration recorded, 0 for none.
fn version(conn: &Connection) -> Result<u32> {
    if !has_version_table(conn)? {
        return Ok(0);
    }
    conn.query_row(
        &format!("SELECT ifnull(max(version), 0) FROM {VERSION_TABLE}"),
        [],
        |r| r.get(0),
    )
    .map_err(sql_err)
}

/// Brings the store on `conn` to the newest schema of `list`: each pending migration in an
/// immediate transaction of its own with its row in `schema_migrations`, so two processes
/// opening one store apply each step once. Returns the versions it applied or, for a store
/// written before versions, recorded as found. A store written by a newer agensh is refused
/// before anything changes.
pub fn upgrade(conn: &mut Connection, list: &[Migration]) -> Result<Vec<u32>> {
    let mut done = Vec::new();
    for m in migrate::pending(list, version(conn)?)? {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_err)?;
        let at = version(&tx)?;
        if at >= m.version {
            continue;
        }
        migrate::pending(list, at)?;
        let found = match m.present_if {
            Some(q) => tx
                .prepare(q)
                .and_then(|mut s| s.exists([]))
                .map_err(sql_err)?,
            None => false,
        };
        if !found {
            tx.execute_batch(m.sql)
                .map_err(|e| migrate::failed(m, at, e))?;
        }
        tx.execute_batch(CREATE_VERSION_TABLE)
            .and_then(|()| {
                tx.execute(
                    &format!(
                        "INSERT INTO {VERSION_TABLE}(version, name, applied_at) VALUES (?1, ?2, ?3)"
                    ),
                    rusqlite::params![m.version, m.name, migrate::now_ms()],
                )
            })
            .map_err(|e| migrate::failed(m, at, e))?;
        tx.commit().map_err(|e| migrate::failed(m, at, e))?;
        if found {
            tracing::info!(
                "store: schema {} ({}) found in a store written before versions",
                m.version,
                m.name
            );
        } else {
            tracing::info!("store: upgraded to schema {} ({})", m.version, m.name);
        }
        done.push(m.version);
    }
    Ok(done)
}

/// Where the store file at `path` stands against [`MIGRATIONS`], read without changing it.
pub fn status(path: &Path) -> Result<Status> {
    if !path.is_file() {
        return Err(Error::not_found(
            "no_store",
            format!(
                "there is no store at {} — is this an organization directory? (`agensh init DIR` makes one)",
                path.display()
            ),
        ));
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| {
        Error::internal(format!(
            "cannot read the store at {}: {e} — check it is readable",
            path.display()
        ))
    })?;
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(sql_err)?;
    status_of(&conn, MIGRATIONS)
}

fn status_of(conn: &Connection, list: &[Migration]) -> Result<Status> {
    if has_version_table(conn)? {
        let mut stmt = conn
            .prepare(&format!(
                "SELECT version, name, applied_at FROM {VERSION_TABLE} ORDER BY version"
            ))
            .map_err(sql_err)?;
        let applied = stmt
            .query_map([], |r| {
                Ok(Applied {
                    version: r.get(0)?,
                    name: r.get(1)?,
                    applied_at: r.get(2)?,
                })
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(sql_err)?;
        let version = applied.last().map_or(0, |a| a.version);
        return Ok(Status::of(list, version, applied));
    }
    // Written before versions (or empty): every step is pending; those whose tables are
    // there will be recorded rather than applied.
    let mut status = Status::of(list, 0, Vec::new());
    status.unversioned = list
        .first()
        .and_then(|m| m.present_if)
        .map(|q| conn.prepare(q).and_then(|mut s| s.exists([])))
        .transpose()
        .map_err(sql_err)?
        .unwrap_or(false);
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("store.sqlite")).unwrap();
        (dir, conn)
    }

    fn tables(conn: &Connection) -> Vec<String> {
        let mut s = conn
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
            .unwrap();
        s.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    #[test]
    fn the_list_runs_from_one_without_gaps() {
        migrate::check_list(MIGRATIONS).unwrap();
    }

    #[test]
    fn every_file_in_migrations_is_listed_under_its_number_and_name() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/sqlite/migrations");
        migrate::check_files(&dir, MIGRATIONS);
    }

    const GOOD: Migration = Migration {
        version: 1,
        name: "one",
        sql: "CREATE TABLE one (x INTEGER);",
        present_if: None,
    };

    #[test]
    fn a_failed_migration_leaves_the_store_at_the_version_before_it() {
        let broken = Migration {
            version: 2,
            name: "broken",
            sql: "CREATE TABLE two (x INTEGER); INSERT INTO nowhere VALUES (1);",
            present_if: None,
        };
        let (_dir, mut conn) = open();
        let e = upgrade(&mut conn, &[GOOD, broken]).unwrap_err();
        assert!(
            e.message.starts_with("cannot upgrade the store to schema 2 (broken): no such table: nowhere — the store is unchanged at schema 1"),
            "{}",
            e.message
        );
        assert_eq!(version(&conn).unwrap(), 1);
        assert_eq!(
            tables(&conn),
            ["one", "schema_migrations"],
            "two was rolled back"
        );
    }

    #[test]
    fn a_step_present_in_an_unversioned_store_is_recorded_not_run() {
        let (_dir, mut conn) = open();
        conn.execute_batch("CREATE TABLE one (x INTEGER); INSERT INTO one VALUES (7);")
            .unwrap();
        let found = Migration {
            present_if: Some(table!("one")),
            ..GOOD
        };
        let two = Migration {
            version: 2,
            name: "two",
            sql: "CREATE TABLE two (x INTEGER);",
            present_if: Some(table!("two")),
        };
        assert!(status_of(&conn, &[found, two]).unwrap().unversioned);
        assert_eq!(upgrade(&mut conn, &[found, two]).unwrap(), [1, 2]);
        let kept: i64 = conn
            .query_row("SELECT x FROM one", [], |r| r.get(0))
            .unwrap();
        assert_eq!(kept, 7);
        assert_eq!(tables(&conn), ["one", "schema_migrations", "two"]);
        assert_eq!(
            upgrade(&mut conn, &[found, two]).unwrap(),
            Vec::<u32>::new()
        );
    }
}
