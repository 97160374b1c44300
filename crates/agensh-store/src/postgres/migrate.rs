//! The PostgreSQL store's migrations, applied when a store opens its database.
//!
//! [`MIGRATIONS`] is every change to the schema, in order, each from its file in
//! `migrations/`. PostgreSQL's numbering is its own, not the SQLite store's: the first
//! PostgreSQL stores already had every table SQLite reached in eleven steps, so schema 1 is
//! that whole schema, and a step made since is 2, 3, … here whatever number SQLite gives its
//! counterpart (the engines' SQL differs anyway: token columns rather than FTS5, `COLLATE
//! "C"`). One number per engine keeps "schema N" true of the tables a database has.
//!
//! Each pending step runs under the schema lock (an advisory lock of the session, taken
//! before the step's transaction begins) in a transaction of its own that reads the
//! version again, and records the step in
//! `schema_migrations` with its SQL: of processes opening one database at once, the first
//! applies a step and the others find it recorded; a step that fails leaves the database
//! at the version before it. A database a newer agensh wrote is refused before anything
//! changes.
//!
//! Databases written before versions (agensh before 2026-12-03 applied `schema.sql`, all
//! `IF NOT EXISTS`, at every open) have no `schema_migrations`. Step 1 is idempotent for
//! them: it creates only what such a database lacks (the nodes tables, for one made before
//! nodes) and is recorded, so the database is adopted at schema 1 with every row kept.

use agensh_domain::Result;
use tokio_postgres::Client;

use super::db::{connect, describe, pg_err, SCHEMA_LOCK};
use crate::migrate::{self, Applied, Migration, Status, CREATE_VERSION_TABLE, VERSION_TABLE};

/// Every migration of the PostgreSQL store, in order. A new step is a new file
/// `migrations/NNNN_name.sql` and an entry here (and its mirror in `schema.sql`).
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("migrations/0001_initial.sql"),
        // Idempotent (see the module documentation): applied to a database from before
        // versions too, where it creates only what is missing.
        present_if: None,
    },
    Migration {
        version: 2,
        name: "record_words",
        sql: include_str!("migrations/0002_record_words.sql"),
        present_if: None,
    },
    Migration {
        version: 3,
        name: "record_words_per_statement",
        sql: include_str!("migrations/0003_record_words_per_statement.sql"),
        present_if: None,
    },
    Migration {
        version: 4,
        name: "receipts",
        sql: include_str!("migrations/0004_receipts.sql"),
        present_if: None,
    },
];

/// Whether the table `name` exists in the schema the connection uses.
async fn has_table(client: &Client, name: &str) -> Result<bool> {
    let row = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])
        .await
        .map_err(pg_err)?;
    Ok(row.get(0))
}

/// The database's schema version: the highest migration recorded, 0 for none.
async fn version(client: &Client) -> Result<u32> {
    if !has_table(client, VERSION_TABLE).await? {
        return Ok(0);
    }
    let row = client
        .query_one(
            &format!("SELECT coalesce(max(version), 0) FROM {VERSION_TABLE}"),
            &[],
        )
        .await
        .map_err(pg_err)?;
    let v: i32 = row.get(0);
    Ok(v.max(0) as u32)
}

/// Brings the database on `client` to the newest schema of `list`: each pending migration
/// in a transaction of its own under the schema lock, with its row in `schema_migrations`,
/// so several processes opening one database apply each step once. Returns the versions
/// this call applied. A database a newer agensh wrote is refused before anything changes.
/// `client` must not be inside a transaction.
pub async fn upgrade(client: &Client, list: &[Migration]) -> Result<Vec<u32>> {
    let mut done = Vec::new();
    let first = version(client).await?;
    for m in migrate::pending(list, first)? {
        // The lock is the session's, taken before the transaction begins: a transaction
        // that began before another process's step committed would read the catalogue as
        // it was (a lock on no table does not refresh it) and miss that step's table.
        client
            .execute("SELECT pg_advisory_lock($1)", &[&SCHEMA_LOCK])
            .await
            .map_err(pg_err)?;
        let result = in_transaction(client, list, m).await;
        let unlocked = client
            .execute("SELECT pg_advisory_unlock($1)", &[&SCHEMA_LOCK])
            .await
            .map_err(pg_err);
        let applied = result?;
        unlocked?;
        if let Some(adopted) = applied {
            if adopted {
                tracing::info!(
                    "store: a PostgreSQL database written before versions, adopted at schema {} ({})",
                    m.version,
                    m.name
                );
            } else {
                tracing::info!("store: upgraded to schema {} ({})", m.version, m.name);
            }
            done.push(m.version);
        }
    }
    Ok(done)
}

/// One step in a transaction of its own, committed, or rolled back when it fails.
async fn in_transaction(
    client: &Client,
    list: &[Migration],
    m: &Migration,
) -> Result<Option<bool>> {
    client.batch_execute("BEGIN").await.map_err(pg_err)?;
    match step(client, list, m).await {
        Ok(applied) => {
            client
                .batch_execute("COMMIT")
                .await
                .map_err(|e| migrate::failed(m, m.version - 1, describe(&e)))?;
            Ok(applied)
        }
        Err(e) => {
            let _ = client.batch_execute("ROLLBACK").await;
            Err(e)
        }
    }
}

/// One step inside its transaction, under the schema lock: `None` when another process
/// applied it meanwhile, else whether the database was one from before versions.
async fn step(client: &Client, list: &[Migration], m: &Migration) -> Result<Option<bool>> {
    let at = version(client).await?;
    migrate::pending(list, at)?;
    if at >= m.version {
        return Ok(None);
    }
    let adopted = at == 0 && has_table(client, "workers").await?;
    client
        .batch_execute(m.sql)
        .await
        .map_err(|e| migrate::failed(m, at, describe(&e)))?;
    client
        .batch_execute(CREATE_VERSION_TABLE)
        .await
        .map_err(|e| migrate::failed(m, at, describe(&e)))?;
    client
        .execute(
            &format!("INSERT INTO {VERSION_TABLE}(version, name, applied_at) VALUES ($1, $2, $3)"),
            &[&(m.version as i32), &m.name, &migrate::now_ms()],
        )
        .await
        .map_err(|e| migrate::failed(m, at, describe(&e)))?;
    Ok(Some(adopted))
}

/// Where the database at `url` stands against [`MIGRATIONS`], read without changing it.
pub async fn status(url: &str) -> Result<Status> {
    let client = connect(url, None).await?;
    status_of(&client, MIGRATIONS).await
}

/// Where the database on `client` stands against `list`.
pub async fn status_of(client: &Client, list: &[Migration]) -> Result<Status> {
    if has_table(client, VERSION_TABLE).await? {
        let rows = client
            .query(
                &format!("SELECT version, name, applied_at FROM {VERSION_TABLE} ORDER BY version"),
                &[],
            )
            .await
            .map_err(pg_err)?;
        let applied: Vec<Applied> = rows
            .iter()
            .map(|r| Applied {
                version: r.get::<_, i32>(0).max(0) as u32,
                name: r.get(1),
                applied_at: r.get(2),
            })
            .collect();
        let version = applied.last().map_or(0, |a| a.version);
        return Ok(Status::of(list, version, applied));
    }
    let mut status = Status::of(list, 0, Vec::new());
    status.unversioned = has_table(client, "workers").await?;
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_list_runs_from_one_without_gaps() {
        migrate::check_list(MIGRATIONS).unwrap();
    }

    #[test]
    fn every_file_in_migrations_is_listed_under_its_number_and_name() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/postgres/migrations");
        migrate::check_files(&dir, MIGRATIONS);
    }
}
