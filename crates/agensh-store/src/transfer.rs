//! `agensh store migrate`: moves an organization's whole store from its SQLite file into an
//! empty PostgreSQL database, numbers and all, so a hub started on the database carries on
//! where the SQLite hub stopped.
//!
//! - **Every table, or none.** The source's tables are read from its catalogue, not from a
//!   list: each is either one [`TABLES`] moves or one [`SKIPPED`] names with why; any other
//!   table (one a newer agensh made, or a table this code forgot) fails the move before
//!   anything is written. The target's tables are checked the same way, so a table the
//!   PostgreSQL schema gains is never left silently empty.
//! - **One transaction.** A target that holds rows is refused before anything changes; its
//!   schema is brought up to date (what a store does when it opens); then one transaction
//!   checks again that the database holds nothing,
//!   copies every table (binary `COPY`, fed in batches), checks each table's count against
//!   the source, moves the sequences past the moved numbers, and commits. A failure
//!   anywhere rolls it all back: the target is as it was, and the move can simply be run
//!   again.
//! - **One snapshot.** The source is read in one SQLite read transaction (WAL), on a thread
//!   of its own that hands batches to the writer, so the copy is of one moment. Run it with
//!   the organization's hub stopped: what a running hub writes later is not moved (the CLI
//!   refuses an organization whose hub runs).
//! - **The same numbers.** Records, messages, events, PRs, issues, reviews, comments and
//!   model requests keep their numbers; workers' cursors and acknowledgements keep pointing
//!   at the same events. The PostgreSQL store numbers new rows the greatest plus one, and
//!   the one sequence it has (`model_requests.id`, any serial or identity column in fact)
//!   is set to its table's greatest, so the next write gets the next number.
//! - **The grep index made again.** `records_fts` is not copied: each record gets the
//!   token columns the PostgreSQL store searches (`postgres/search.rs`), computed by the
//!   same tokenizer, so grep finds the same records on both; the prefix vocabulary
//!   (`record_words`, [`FILLED_BY_TARGET`]) is filled by its trigger as they are copied.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use agensh_domain::error::ErrorKind;
use agensh_domain::{Error, Result};
use rusqlite::types::Value;
use tokio::sync::mpsc;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Client;

use crate::migrate::{self as versions, VERSION_TABLE};
use crate::postgres::migrate as pg_migrate;
use crate::postgres::search::RecordTokens;
use crate::sqlite::migrate as sqlite_migrate;

/// How a table of the SQLite store moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// Row by row, column by column.
    Copy,
    /// As `Copy`, plus the grep token columns computed from the record.
    Records,
}

/// The tables moved, in an order that satisfies their foreign keys (a record before its
/// claim, a PR before its reviews, a node before its workers).
pub const TABLES: &[(&str, How)] = &[
    ("meta", How::Copy),
    ("workers", How::Copy),
    ("records", How::Records),
    ("claims", How::Copy),
    ("takeovers", How::Copy),
    ("messages", How::Copy),
    ("events", How::Copy),
    ("event_acks", How::Copy),
    ("receipts", How::Copy),
    ("prs", How::Copy),
    ("pr_reviews", How::Copy),
    ("pr_comments", How::Copy),
    ("model_requests", How::Copy),
    ("budgets", How::Copy),
    ("turns", How::Copy),
    ("issues", How::Copy),
    ("issue_labels", How::Copy),
    ("issue_comments", How::Copy),
    ("nodes", How::Copy),
    ("node_workers", How::Copy),
];

/// The SQLite tables not moved, and why. A name ending in `*` covers every table it starts.
pub const SKIPPED: &[(&str, &str)] = &[
    (
        "records_fts",
        "the grep index: made again as the records' token columns",
    ),
    (
        "records_fts_*",
        "the grep index's own tables: made again as the records' token columns",
    ),
    (
        VERSION_TABLE,
        "the schema version: each store records its own",
    ),
    (
        "sqlite_sequence",
        "SQLite's counters: PostgreSQL numbers from the moved rows",
    ),
];

/// The PostgreSQL tables the move does not copy because the database fills them itself as
/// the rows they derive from are copied, and how.
pub const FILLED_BY_TARGET: &[(&str, &str)] = &[(
    "record_words",
    "the prefix vocabulary: its trigger on `records` adds the words of the records copied",
)];

/// The grep columns `How::Records` adds, in the order the reader appends them.
const TOKEN_COLUMNS: [&str; 5] = [
    "text_tokens",
    "detail_tokens",
    "words",
    "author_tokens",
    "label_token",
];

/// The error code of a target database that already holds something.
pub const NOT_EMPTY: &str = "target_not_empty";
/// The error code of a table the move does not know.
pub const UNKNOWN_TABLE: &str = "unknown_table";

/// Where the move stands, for a progress bar.
#[derive(Debug, Clone)]
pub struct Progress<'a> {
    /// The table being copied.
    pub table: &'a str,
    /// Rows copied so far, all tables.
    pub done: u64,
    /// Rows to copy, all tables.
    pub total: u64,
}

/// What a move did.
#[derive(Debug, Clone)]
pub struct Summary {
    /// The SQLite file read.
    pub from: String,
    /// The source's schema version (after `upgraded`).
    pub source_schema: u32,
    /// Versions applied to the source before reading it (it was older than this agensh).
    pub source_upgraded: Vec<u32>,
    /// The target's schema version.
    pub target_schema: u32,
    /// Rows moved per table, in [`TABLES`] order.
    pub tables: Vec<(String, u64)>,
    /// All rows moved.
    pub rows: u64,
    /// Sequences moved past the moved numbers: (sequence, its value).
    pub sequences: Vec<(String, i64)>,
    /// How long the move took.
    pub seconds: f64,
}

/// One value read from the source.
#[derive(Debug, Clone)]
enum Cell {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
    Texts(Vec<String>),
}

impl From<Value> for Cell {
    fn from(v: Value) -> Self {
        match v {
            Value::Null => Cell::Null,
            Value::Integer(i) => Cell::Int(i),
            Value::Real(f) => Cell::Real(f),
            Value::Text(s) => Cell::Text(s),
            Value::Blob(b) => Cell::Blob(b),
        }
    }
}

/// One table the reader found.
#[derive(Debug, Clone)]
struct Table {
    name: String,
    how: How,
    /// The columns of each row it sends, the computed ones last.
    columns: Vec<String>,
    rows: u64,
}

/// What the reader thread sends.
enum Read {
    /// First: the source's version, what was applied to it, and its tables.
    Plan {
        version: u32,
        upgraded: Vec<u32>,
        tables: Vec<Table>,
    },
    /// Rows of the table at this index of the plan.
    Rows(usize, Vec<Vec<Cell>>),
    /// The reader failed.
    Failed(Error),
}

fn internal(e: impl std::fmt::Display) -> Error {
    Error::internal(format!("store error: {e}"))
}

fn unknown_table(name: &str, side: &str) -> Error {
    Error::new(
        ErrorKind::Internal,
        UNKNOWN_TABLE,
        format!(
            "the {side} has a table `{name}` that agensh store migrate does not know how to move — nothing was moved; \
             if a newer agensh wrote it, migrate with that agensh; otherwise report this"
        ),
    )
}

/// Whether `name` is a table [`SKIPPED`] names.
fn skipped(name: &str) -> bool {
    SKIPPED.iter().any(|(s, _)| match s.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == *s,
    })
}

fn how(name: &str) -> Option<How> {
    TABLES.iter().find(|(t, _)| *t == name).map(|(_, h)| *h)
}

/// Opens the SQLite store at `path` for the move: brought to the newest schema first (as
/// opening it with the hub would), refused when a newer agensh wrote it.
fn open_source(path: &Path) -> Result<(rusqlite::Connection, Vec<u32>)> {
    if !path.is_file() {
        return Err(Error::not_found(
            "no_store",
            format!(
                "there is no store at {} — give an organization directory (the one `agensh init` made) or its .agensh/store.sqlite",
                path.display()
            ),
        ));
    }
    let mut conn = crate::sqlite::conn_for_transfer(path)?;
    let upgraded = sqlite_migrate::upgrade(&mut conn, sqlite_migrate::MIGRATIONS)?;
    Ok((conn, upgraded))
}

/// The plan of the store on `conn` (inside its read transaction): every table, known or
/// refused.
fn plan(conn: &rusqlite::Connection) -> Result<Vec<Table>> {
    let names: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        .and_then(|mut s| {
            s.query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<String>>>()
        })
        .map_err(internal)?;
    for name in &names {
        if how(name).is_none() && !skipped(name) {
            return Err(unknown_table(name, "SQLite store"));
        }
    }
    let mut tables = Vec::new();
    for (name, how) in TABLES {
        if !names.iter().any(|n| n == name) {
            // Made by every migration this agensh applied; absent only in a store no
            // migration made. Nothing to move.
            tables.push(Table {
                name: name.to_string(),
                how: *how,
                columns: Vec::new(),
                rows: 0,
            });
            continue;
        }
        let mut columns: Vec<String> = conn
            .prepare(&format!(
                "SELECT name FROM pragma_table_info('{name}') ORDER BY cid"
            ))
            .and_then(|mut s| {
                s.query_map([], |r| r.get(0))?
                    .collect::<rusqlite::Result<Vec<String>>>()
            })
            .map_err(internal)?;
        if *how == How::Records {
            for needed in ["text", "detail", "author", "label"] {
                if !columns.iter().any(|c| c == needed) {
                    return Err(internal(format!("the source's records have no {needed}")));
                }
            }
            columns.extend(TOKEN_COLUMNS.iter().map(|c| c.to_string()));
        }
        let rows: i64 = conn
            .query_row(&format!("SELECT count(*) FROM \"{name}\""), [], |r| {
                r.get(0)
            })
            .map_err(internal)?;
        tables.push(Table {
            name: name.to_string(),
            how: *how,
            columns,
            rows: rows as u64,
        });
    }
    Ok(tables)
}

/// The reader thread: opens the source, sends the plan, then every table's rows in
/// batches of `batch`, all from one read transaction.
fn read_source(path: &Path, batch: usize, out: mpsc::Sender<Read>) {
    let fail = |e: Error| {
        let _ = out.blocking_send(Read::Failed(e));
    };
    let (mut conn, upgraded) = match open_source(path) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let version = versions::latest(sqlite_migrate::MIGRATIONS);
    let tx = match conn.transaction() {
        Ok(t) => t,
        Err(e) => return fail(internal(e)),
    };
    let tables = match plan(&tx) {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    if out
        .blocking_send(Read::Plan {
            version,
            upgraded,
            tables: tables.clone(),
        })
        .is_err()
    {
        return;
    }
    for (i, t) in tables.iter().enumerate() {
        if t.rows == 0 {
            continue;
        }
        if let Err(e) = send_rows(&tx, i, t, batch, &out) {
            return fail(e);
        }
    }
}

fn send_rows(
    conn: &rusqlite::Connection,
    index: usize,
    t: &Table,
    batch: usize,
    out: &mpsc::Sender<Read>,
) -> Result<()> {
    let stored = match t.how {
        How::Copy => t.columns.len(),
        How::Records => t.columns.len() - TOKEN_COLUMNS.len(),
    };
    let list = t.columns[..stored]
        .iter()
        .map(|c| format!("\"{c}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let mut stmt = conn
        .prepare(&format!("SELECT {list} FROM \"{}\"", t.name))
        .map_err(internal)?;
    let at = |name: &str| t.columns.iter().position(|c| c == name);
    let (text, detail, author, label) = (at("text"), at("detail"), at("author"), at("label"));
    let mut rows = stmt.query([]).map_err(internal)?;
    let mut pending = Vec::with_capacity(batch);
    while let Some(row) = rows.next().map_err(internal)? {
        let mut cells = Vec::with_capacity(t.columns.len());
        for i in 0..stored {
            cells.push(Cell::from(row.get::<_, Value>(i).map_err(internal)?));
        }
        if t.how == How::Records {
            let text_of = |i: Option<usize>| match i.map(|i| &cells[i]) {
                Some(Cell::Text(s)) => Some(s.as_str()),
                _ => None,
            };
            let tokens = RecordTokens::of(
                text_of(text).unwrap_or(""),
                text_of(detail),
                text_of(author).unwrap_or(""),
                text_of(label),
            );
            cells.push(Cell::Texts(tokens.text));
            cells.push(Cell::Texts(tokens.detail));
            cells.push(Cell::Texts(tokens.words));
            cells.push(Cell::Texts(tokens.author));
            cells.push(Cell::Text(tokens.label));
        }
        pending.push(cells);
        if pending.len() >= batch {
            let full = std::mem::replace(&mut pending, Vec::with_capacity(batch));
            if out.blocking_send(Read::Rows(index, full)).is_err() {
                return Ok(());
            }
        }
    }
    if !pending.is_empty() {
        let _ = out.blocking_send(Read::Rows(index, pending));
    }
    Ok(())
}

/// A column of the target: its name and type.
#[derive(Debug, Clone)]
struct Column {
    name: String,
    ty: Type,
}

/// The target's tables (in the connection's schema) and their columns.
async fn target_tables(client: &Client) -> Result<BTreeMap<String, Vec<Column>>> {
    let rows = client
        .query(
            "SELECT c.table_name::text, c.column_name::text, c.udt_name::text \
             FROM information_schema.columns c \
             JOIN information_schema.tables t \
               ON t.table_schema = c.table_schema AND t.table_name = c.table_name \
             WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE' \
             ORDER BY c.table_name, c.ordinal_position",
            &[],
        )
        .await
        .map_err(pg_error)?;
    let mut out: BTreeMap<String, Vec<Column>> = BTreeMap::new();
    for r in rows {
        let table: String = r.get(0);
        let name: String = r.get(1);
        let udt: String = r.get(2);
        let ty = match udt.as_str() {
            "int8" => Type::INT8,
            "int4" => Type::INT4,
            "float8" => Type::FLOAT8,
            "text" => Type::TEXT,
            "_text" => Type::TEXT_ARRAY,
            "bool" => Type::BOOL,
            other => {
                return Err(internal(format!(
                    "the target's column {table}.{name} is of type {other}, which agensh store migrate does not fill"
                )))
            }
        };
        out.entry(table).or_default().push(Column { name, ty });
    }
    Ok(out)
}

fn pg_error(e: tokio_postgres::Error) -> Error {
    internal(crate::postgres::describe_error(&e))
}

/// One source value as a parameter for a target column of type `ty`.
fn param(cell: Cell, ty: &Type) -> std::result::Result<Box<dyn ToSql + Sync + Send>, String> {
    Ok(match (cell, ty) {
        (Cell::Null, t) if *t == Type::INT8 => Box::new(None::<i64>),
        (Cell::Null, t) if *t == Type::INT4 => Box::new(None::<i32>),
        (Cell::Null, t) if *t == Type::FLOAT8 => Box::new(None::<f64>),
        (Cell::Null, t) if *t == Type::TEXT => Box::new(None::<String>),
        (Cell::Null, t) if *t == Type::TEXT_ARRAY => Box::new(None::<Vec<String>>),
        (Cell::Null, t) if *t == Type::BOOL => Box::new(None::<bool>),
        (Cell::Int(i), t) if *t == Type::INT8 => Box::new(i),
        (Cell::Int(i), t) if *t == Type::INT4 => {
            Box::new(i32::try_from(i).map_err(|_| format!("{i} does not fit a 32-bit integer"))?)
        }
        (Cell::Int(i), t) if *t == Type::FLOAT8 => Box::new(i as f64),
        (Cell::Int(i), t) if *t == Type::BOOL => Box::new(i != 0),
        (Cell::Real(f), t) if *t == Type::FLOAT8 => Box::new(f),
        (Cell::Real(f), t) if *t == Type::INT8 && f.fract() == 0.0 => Box::new(f as i64),
        (Cell::Text(s), t) if *t == Type::TEXT => Box::new(s),
        (Cell::Texts(v), t) if *t == Type::TEXT_ARRAY => Box::new(v),
        (cell, t) => {
            let what = match cell {
                Cell::Null => "NULL".to_string(),
                Cell::Int(i) => format!("the integer {i}"),
                Cell::Real(f) => format!("the number {f}"),
                Cell::Text(s) => format!("the text {:?}", s.chars().take(40).collect::<String>()),
                Cell::Blob(b) => format!("binary data ({} bytes)", b.len()),
                Cell::Texts(v) => format!("{} tokens", v.len()),
            };
            return Err(format!("{what} does not fit a column of type {t}"));
        }
    })
}

/// Moves the SQLite store at `from` into the PostgreSQL database at `to`, which must hold
/// no rows: see the module documentation. `batch` rows are read and written at a time;
/// `progress` hears after each batch.
pub async fn sqlite_to_postgres(
    from: &Path,
    to: &str,
    batch: usize,
    mut progress: impl FnMut(Progress<'_>),
) -> Result<Summary> {
    let started = Instant::now();
    let batch = batch.max(1);
    // The target first: an unreachable server, a database that holds rows (refused
    // before its schema is touched) or one a newer agensh wrote is found before the
    // source is touched.
    let client = crate::postgres::connect_one(to).await?;
    refuse_rows(&client).await?;
    pg_migrate::upgrade(&client, pg_migrate::MIGRATIONS).await?;
    let target_schema = pg_migrate::status_of(&client, pg_migrate::MIGRATIONS)
        .await?
        .version;

    let (tx, mut rx) = mpsc::channel::<Read>(4);
    let path = from.to_path_buf();
    let reader = std::thread::Builder::new()
        .name("agensh-store-migrate".into())
        .spawn(move || read_source(&path, batch, tx))
        .map_err(|e| Error::internal(format!("cannot start the reader thread: {e}")))?;
    let (source_schema, upgraded, tables) = match rx.recv().await {
        Some(Read::Plan {
            version,
            upgraded,
            tables,
        }) => (version, upgraded, tables),
        Some(Read::Failed(e)) => return Err(e),
        _ => return Err(Error::internal("the source reader ended before its plan")),
    };

    client.batch_execute("BEGIN").await.map_err(pg_error)?;
    let moved = copy_all(&client, &tables, &mut rx, &mut progress).await;
    let moved = match moved {
        Ok(m) => client
            .batch_execute("COMMIT")
            .await
            .map(|()| m)
            .map_err(pg_error),
        Err(e) => Err(e),
    };
    drop(rx);
    let _ = reader.join();
    let (counts, sequences) = match moved {
        Ok(m) => m,
        Err(e) => {
            let _ = client.batch_execute("ROLLBACK").await;
            return Err(e);
        }
    };
    let rows = counts.iter().map(|(_, n)| n).sum();
    Ok(Summary {
        from: from.display().to_string(),
        source_schema,
        source_upgraded: upgraded,
        target_schema,
        tables: counts,
        rows,
        sequences,
        seconds: started.elapsed().as_secs_f64(),
    })
}

type Moved = (Vec<(String, u64)>, Vec<(String, i64)>);

/// Inside the target's transaction: checks, copies every table, checks the counts, moves
/// the sequences.
async fn copy_all(
    client: &Client,
    tables: &[Table],
    rx: &mut mpsc::Receiver<Read>,
    progress: &mut impl FnMut(Progress<'_>),
) -> Result<Moved> {
    // Numbered writes of any hub on this database wait; two moves into it take turns.
    client
        .execute(
            "SELECT pg_advisory_xact_lock($1)",
            &[&crate::postgres::WRITE_LOCK],
        )
        .await
        .map_err(pg_error)?;
    let target = target_tables(client).await?;
    for name in target.keys() {
        let filled = FILLED_BY_TARGET.iter().any(|(t, _)| t == name);
        if how(name).is_none() && name != VERSION_TABLE && !filled {
            return Err(unknown_table(name, "PostgreSQL database"));
        }
    }
    for (name, _) in TABLES {
        if !target.contains_key(*name) {
            return Err(internal(format!(
                "the target has no table {name} although its schema is the newest — run `agensh store version --store URL` and report this"
            )));
        }
    }
    refuse_rows(client).await?;
    // Every source column must have a place in the target.
    let mut types: Vec<Vec<Type>> = Vec::new();
    for t in tables {
        let cols = &target[&t.name];
        let mut tys = Vec::new();
        for c in &t.columns {
            match cols.iter().find(|k| &k.name == c) {
                Some(k) => tys.push(k.ty.clone()),
                None => {
                    return Err(internal(format!(
                        "the source's column {}.{c} has no place in the PostgreSQL schema — nothing was moved; report this",
                        t.name
                    )))
                }
            }
        }
        types.push(tys);
    }

    let total: u64 = tables.iter().map(|t| t.rows).sum();
    let mut done = 0u64;
    let mut counts = Vec::new();
    let mut writer: Option<(usize, std::pin::Pin<Box<BinaryCopyInWriter>>)> = None;
    let mut copied = vec![0u64; tables.len()];
    progress(Progress {
        table: tables.first().map_or("", |t| t.name.as_str()),
        done,
        total,
    });
    // Batches arrive table by table, in plan order; the channel closes after the last.
    loop {
        let (index, rows) = match rx.recv().await {
            Some(Read::Rows(i, rows)) => (i, rows),
            Some(Read::Failed(e)) => return Err(e),
            Some(Read::Plan { .. }) => return Err(Error::internal("a second plan")),
            None => {
                if let Some((i, w)) = writer.take() {
                    finish(w, &tables[i]).await?;
                }
                break;
            }
        };
        if writer.as_ref().is_some_and(|(i, _)| *i != index) {
            let (i, w) = writer.take().expect("writer");
            finish(w, &tables[i]).await?;
        }
        if writer.is_none() {
            let t = &tables[index];
            let list = t
                .columns
                .iter()
                .map(|c| format!("\"{c}\""))
                .collect::<Vec<_>>()
                .join(", ");
            let sink = client
                .copy_in(&format!("COPY \"{}\" ({list}) FROM STDIN BINARY", t.name))
                .await
                .map_err(pg_error)?;
            writer = Some((
                index,
                Box::pin(BinaryCopyInWriter::new(sink, &types[index])),
            ));
        }
        let (_, w) = writer.as_mut().expect("writer");
        let t = &tables[index];
        let n = rows.len() as u64;
        for row in rows {
            let mut params = Vec::with_capacity(row.len());
            for (i, cell) in row.into_iter().enumerate() {
                params.push(param(cell, &types[index][i]).map_err(|why| {
                    internal(format!(
                        "{}.{}: {why} — nothing was moved",
                        t.name, t.columns[i]
                    ))
                })?);
            }
            let refs: Vec<&(dyn ToSql + Sync)> = params
                .iter()
                .map(|p| p.as_ref() as &(dyn ToSql + Sync))
                .collect();
            w.as_mut()
                .write(&refs)
                .await
                .map_err(|e| copy_failed(t, &e))?;
        }
        copied[index] += n;
        done += n;
        progress(Progress {
            table: &t.name,
            done,
            total,
        });
    }

    // Each table holds what the source held.
    for (i, t) in tables.iter().enumerate() {
        let n: i64 = client
            .query_one(&format!("SELECT count(*) FROM \"{}\"", t.name), &[])
            .await
            .map_err(pg_error)?
            .get(0);
        if n as u64 != t.rows || copied[i] != t.rows {
            return Err(internal(format!(
                "{}: the source holds {} rows but {n} arrived — nothing was moved",
                t.name, t.rows
            )));
        }
        counts.push((t.name.clone(), t.rows));
    }
    let sequences = move_sequences(client).await?;
    Ok((counts, sequences))
}

/// Refuses a database where any table of [`TABLES`] that exists holds a row.
async fn refuse_rows(client: &Client) -> Result<()> {
    let mut held = Vec::new();
    for (name, _) in TABLES {
        let exists: bool = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[name])
            .await
            .map_err(pg_error)?
            .get(0);
        if !exists {
            continue;
        }
        let n: i64 = client
            .query_one(&format!("SELECT count(*) FROM \"{name}\""), &[])
            .await
            .map_err(pg_error)?
            .get(0);
        if n > 0 {
            held.push(format!("{name}: {n}"));
        }
    }
    if held.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Conflict,
        NOT_EMPTY,
        format!(
            "the target database is not empty ({}) — agensh store migrate moves a store into an empty database only, and changed nothing; \
             give the URL of a new database (createdb NAME), or drop and create this one again if what it holds is not wanted",
            held.join(", ")
        ),
    ))
}

fn copy_failed(t: &Table, e: &tokio_postgres::Error) -> Error {
    internal(format!(
        "copying {}: {} — nothing was moved",
        t.name,
        crate::postgres::describe_error(e)
    ))
}

async fn finish(w: std::pin::Pin<Box<BinaryCopyInWriter>>, t: &Table) -> Result<()> {
    let mut w = w;
    w.as_mut().finish().await.map_err(|e| copy_failed(t, &e))?;
    Ok(())
}

/// Sets every serial or identity column's sequence to its table's greatest value, so the
/// next row gets the next number.
async fn move_sequences(client: &Client) -> Result<Vec<(String, i64)>> {
    let rows = client
        .query(
            "SELECT table_name::text, column_name::text, \
                    pg_get_serial_sequence(quote_ident(table_name), column_name)::text \
             FROM information_schema.columns \
             WHERE table_schema = current_schema() \
               AND pg_get_serial_sequence(quote_ident(table_name), column_name) IS NOT NULL \
             ORDER BY table_name, column_name",
            &[],
        )
        .await
        .map_err(pg_error)?;
    let mut out = Vec::new();
    for r in rows {
        let (table, column, seq): (String, String, String) = (r.get(0), r.get(1), r.get(2));
        let set = client
            .query_opt(
                &format!(
                    "SELECT setval($1::text::regclass, m) FROM (SELECT max(\"{column}\") AS m FROM \"{table}\") s WHERE m IS NOT NULL"
                ),
                &[&seq],
            )
            .await
            .map_err(pg_error)?;
        if let Some(r) = set {
            out.push((seq, r.get::<_, i64>(0)));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_tables_and_the_counters_are_skipped_and_nothing_else() {
        assert!(skipped("records_fts"));
        assert!(skipped("records_fts_data"));
        assert!(skipped("sqlite_sequence"));
        assert!(skipped("schema_migrations"));
        assert!(!skipped("records"));
        assert!(!skipped("workers"));
        assert!(how("records_fts_idx").is_none());
    }

    #[test]
    fn a_value_that_does_not_fit_its_column_is_named() {
        assert!(param(Cell::Int(7), &Type::INT8).is_ok());
        assert!(param(Cell::Int(7), &Type::FLOAT8).is_ok());
        assert!(param(Cell::Null, &Type::TEXT).is_ok());
        let e = param(Cell::Text("seven".into()), &Type::INT8)
            .err()
            .unwrap();
        assert_eq!(e, "the text \"seven\" does not fit a column of type int8");
        let e = param(Cell::Int(1 << 40), &Type::INT4).err().unwrap();
        assert!(e.contains("32-bit"), "{e}");
    }
}
