//! Connections: one writer thread that commits in groups, and a pool of readers.
//!
//! All writes go through one thread. It takes every job waiting in its queue, runs each
//! inside its own savepoint of one transaction, commits once (one fsync for the group),
//! and only then answers each caller and publishes the events the jobs emitted. So each
//! write is durable before it is acknowledged, and many concurrent writers share the
//! cost of the sync.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;

use agensh_domain::event::Event;
use agensh_domain::{Error, Result};
use rusqlite::Connection;
use tokio::sync::{broadcast, oneshot};

use crate::common::rows;
use crate::write_stats::{WriteStats, WriteStatsSnapshot};

/// How often the checkpointer copies what the WAL holds into the database file.
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_millis(500);
/// WAL pages past which the writer checkpoints itself (SQLite's own rule, at 1,000 by
/// default): only a safety net, should the checkpointer fall behind by this much (64 MiB of
/// 4 KiB pages).
const WRITER_CHECKPOINT_PAGES: u32 = 16_384;

/// Most jobs committed in one transaction.
const MAX_GROUP: usize = 512;
/// A group that takes longer is logged with its slowest jobs: every write queued meanwhile
/// waited that long.
const SLOW_GROUP: std::time::Duration = std::time::Duration::from_millis(250);
/// Most reads running at once, and so most reader connections (each has its own page
/// cache): more would not run faster on a few cores, only use more memory.
const MAX_READERS: usize = 8;

/// What a write job sees: the connection inside the group's transaction, and where to
/// put the events it creates (published after the commit).
pub struct WriteCtx<'a> {
    pub conn: &'a Connection,
    pub emitted: Vec<Event>,
}

impl WriteCtx<'_> {
    /// Stores `event` (unless its dedup key was used) and publishes it after the commit.
    pub fn emit(
        &mut self,
        event: &agensh_domain::event::NewEvent,
        now: i64,
    ) -> Result<Option<Event>> {
        let stored = super::events::insert(self.conn, event, now)?;
        if let Some(e) = &stored {
            self.emitted.push(e.clone());
        }
        Ok(stored)
    }
}

type Completion = Box<dyn FnOnce(Result<()>, &broadcast::Sender<Arc<Event>>) + Send>;
type Job = Box<dyn FnOnce(&Connection) -> Completion + Send>;
/// A job, when it was handed to the writer, and what made it (for the slow-group log).
type Queued = (Instant, &'static str, Job);

/// The writer thread's queue and the reader pool.
pub struct Db {
    jobs: Mutex<mpsc::Sender<Queued>>,
    readers: Mutex<Vec<Connection>>,
    reading: tokio::sync::Semaphore,
    path: std::path::PathBuf,
    stats: Arc<WriteStats>,
    /// Dropped with the store, which stops the checkpointer.
    _checkpointer: mpsc::Sender<()>,
}

pub(crate) fn sql_err(e: rusqlite::Error) -> Error {
    Error::internal(format!("store error: {e}"))
}

/// SQLite's rows, read by the engine-neutral conversions (`common::rows`).
impl rows::Columns for rusqlite::Row<'_> {
    type Error = rusqlite::Error;

    fn refused(&self, i: usize, e: Error) -> rusqlite::Error {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
    }
}

impl<T: rusqlite::types::FromSql> rows::Column<T> for rusqlite::Row<'_> {
    fn col(&self, i: usize) -> rusqlite::Result<T> {
        self.get(i)
    }
}

pub(crate) fn open_conn(path: &Path) -> Result<Connection> {
    let conn = Connection::open(path).map_err(|e| {
        Error::internal(format!(
            "cannot open the store at {}: {e} — check the directory exists and is writable",
            path.display()
        ))
    })?;
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(sql_err)?;
    // Keep each prepared statement's plan: without it SQLite re-plans the long-poll query
    // on every step (a fifth of the hub's CPU when 1,024 workers wake at once).
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )
    .map_err(sql_err)?;
    conn.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON; PRAGMA temp_store=MEMORY;",
    )
    .map_err(sql_err)?;
    Ok(conn)
}

impl Db {
    /// Opens (creating if needed) the database at `path`, brings its schema up to date
    /// (`migrate::upgrade`), and starts the writer thread.
    pub fn open(path: &Path, events: broadcast::Sender<Arc<Event>>) -> Result<Self> {
        let mut writer = open_conn(path)?;
        super::migrate::upgrade(&mut writer, super::migrate::MIGRATIONS)?;
        // A commit that falls due for a checkpoint runs it before it returns, copying the
        // WAL into the database and syncing that too: under load that held one commit, and
        // every write queued behind it, for up to a second. A thread of its own checkpoints
        // instead, without blocking the writer (PASSIVE).
        writer
            .pragma_update(None, "wal_autocheckpoint", WRITER_CHECKPOINT_PAGES)
            .map_err(sql_err)?;
        let (tx, rx) = mpsc::channel::<Queued>();
        let stats = Arc::new(WriteStats::default());
        let counted = stats.clone();
        let (stop, stopped) = mpsc::channel::<()>();
        let checkpoints = open_conn(path)?;
        let timed = stats.clone();
        std::thread::Builder::new()
            .name("agensh-store-checkpoint".into())
            .spawn(move || checkpoint_loop(checkpoints, stopped, &timed))
            .map_err(|e| Error::internal(format!("cannot start the store checkpointer: {e}")))?;
        std::thread::Builder::new()
            .name("agensh-store-writer".into())
            .spawn(move || writer_loop(writer, rx, events, &counted))
            .map_err(|e| Error::internal(format!("cannot start the store writer: {e}")))?;
        Ok(Db {
            jobs: Mutex::new(tx),
            readers: Mutex::new(Vec::new()),
            reading: tokio::sync::Semaphore::new(MAX_READERS),
            path: path.to_path_buf(),
            stats,
            _checkpointer: stop,
        })
    }

    /// Runs `f` in the writer's transaction; returns after the commit.
    pub async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut WriteCtx<'_>) -> Result<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel::<Result<T>>();
        let job: Job = Box::new(move |conn: &Connection| {
            let mut ctx = WriteCtx {
                conn,
                emitted: Vec::new(),
            };
            let result = match conn.execute_batch("SAVEPOINT job") {
                Err(e) => Err(sql_err(e)),
                Ok(()) => {
                    let r = f(&mut ctx);
                    let end = if r.is_ok() {
                        "RELEASE job"
                    } else {
                        "ROLLBACK TO job; RELEASE job"
                    };
                    match conn.execute_batch(end) {
                        Ok(()) => r,
                        Err(e) => Err(sql_err(e)),
                    }
                }
            };
            let emitted = if result.is_ok() {
                ctx.emitted
            } else {
                Vec::new()
            };
            Box::new(
                move |commit: Result<()>, bus: &broadcast::Sender<Arc<Event>>| {
                    let answer = commit.and(result);
                    if answer.is_ok() {
                        for e in emitted {
                            let _ = bus.send(Arc::new(e));
                        }
                    }
                    let _ = tx.send(answer);
                },
            )
        });
        self.jobs
            .lock()
            .expect("writer queue lock")
            .send((Instant::now(), job_name::<F>(), job))
            .map_err(|_| Error::internal("the store writer has stopped"))?;
        rx.await
            .map_err(|_| Error::internal("the store writer stopped before answering"))?
    }

    /// How long writes have waited, run and committed.
    pub fn write_stats(&self) -> WriteStatsSnapshot {
        self.stats.snapshot()
    }

    /// Runs `f` on a reader connection on the blocking pool.
    pub async fn read<T, F>(self: &Arc<Self>, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let _permit = self
            .reading
            .acquire()
            .await
            .map_err(|_| Error::internal("the store is closed"))?;
        let db = self.clone();
        tokio::task::spawn_blocking(move || {
            let conn = db.readers.lock().expect("reader pool lock").pop();
            let conn = match conn {
                Some(c) => c,
                None => open_conn(&db.path)?,
            };
            let r = f(&conn);
            db.readers.lock().expect("reader pool lock").push(conn);
            r
        })
        .await
        .map_err(|e| Error::internal(format!("store reader failed: {e}")))?
    }
}

/// What made a write job: the type of its closure, which names the function it is in.
fn job_name<F>() -> &'static str {
    std::any::type_name::<F>()
}

/// A job's name as a log shows it: `sqlite::SqliteStore::append` for the closure in
/// `<agensh_store::sqlite::SqliteStore as agensh_store::Store>::append`.
fn short_name(full: &str) -> String {
    let mut name = full;
    while let Some(outer) = name.strip_suffix("::{{closure}}") {
        name = outer;
    }
    let name = match name
        .strip_prefix('<')
        .and_then(|n| n.split_once(" as "))
        .and_then(|(ty, rest)| Some((ty, rest.split_once(">::")?.1)))
    {
        Some((ty, method)) => format!("{ty}::{method}"),
        None => name.to_string(),
    };
    name.strip_prefix("agensh_store::")
        .map_or(name.clone(), str::to_string)
}

fn writer_loop(
    mut conn: Connection,
    rx: mpsc::Receiver<Queued>,
    bus: broadcast::Sender<Arc<Event>>,
    stats: &WriteStats,
) {
    crate::writer_thread::prefer_this_thread();
    let own = crate::write_stats::ThreadTimes::own_file();
    if let Some(file) = &own {
        let _ = stats.writer_thread.set(file.clone());
    }
    // Kept open: the times are read at every group's start, one `pread` each.
    let schedstat = own.as_deref().and_then(|f| std::fs::File::open(f).ok());
    let times = || {
        schedstat
            .as_ref()
            .and_then(crate::write_stats::ThreadTimes::read_open)
    };
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(j) => group.push(j),
                Err(_) => break,
            }
        }
        let began = Instant::now();
        let times_before = times();
        for (queued, _, _) in &group {
            stats.wait.observe(began.saturating_duration_since(*queued));
        }
        let tx = match conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate) {
            Ok(tx) => tx,
            Err(e) => {
                // The jobs never ran: dropping them answers each caller with an error.
                tracing::error!(
                    "store: cannot begin a transaction for {} write(s): {e}",
                    group.len()
                );
                continue;
            }
        };
        let jobs = group.len() as u64;
        let mut took = Vec::with_capacity(group.len());
        let completions: Vec<Completion> = group
            .into_iter()
            .map(|(_, name, job)| {
                let started = Instant::now();
                let c = job(&tx);
                took.push((started.elapsed(), name));
                c
            })
            .collect();
        let committing = Instant::now();
        let commit = tx.commit().map_err(sql_err);
        let done = Instant::now();
        if done - began > SLOW_GROUP {
            let scheduled = times_before.zip(times()).map(|(b, a)| {
                (
                    a.on_cpu.saturating_sub(b.on_cpu),
                    a.run_queue.saturating_sub(b.run_queue),
                )
            });
            log_slow_group(done - began, done - committing, scheduled, &mut took);
        }
        stats.commit.observe(done - committing);
        stats.group.observe(done - began);
        stats.groups.fetch_add(1, Ordering::Relaxed);
        stats.jobs.fetch_add(jobs, Ordering::Relaxed);
        if let Err(e) = &commit {
            tracing::error!("store: commit failed: {e}");
        }
        for c in completions {
            c(commit.clone(), &bus);
        }
        stats.publish.observe(done.elapsed());
    }
}

/// Logs a group that took `total`, naming its slowest jobs and, where the kernel tells,
/// how much of it the writer thread spent on a CPU and waiting for one (`scheduled`).
fn log_slow_group(
    total: std::time::Duration,
    commit: std::time::Duration,
    scheduled: Option<(std::time::Duration, std::time::Duration)>,
    took: &mut [(std::time::Duration, &'static str)],
) {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
    took.sort_by_key(|t| std::cmp::Reverse(t.0));
    let jobs: std::time::Duration = took.iter().map(|(d, _)| *d).sum();
    let slowest: Vec<String> = took
        .iter()
        .take(3)
        .map(|(d, name)| format!("{} {:.1} ms", short_name(name), ms(*d)))
        .collect();
    let thread = scheduled.map_or(String::new(), |(cpu, queue)| {
        format!(
            "; the writer thread on a CPU {:.0} ms, waiting for one {:.0} ms",
            ms(cpu),
            ms(queue)
        )
    });
    tracing::warn!(
        "store: a group of {} writes took {:.0} ms (its jobs {:.0} ms, the commit {:.0} ms{thread}); slowest: {}",
        took.len(),
        ms(total),
        ms(jobs),
        ms(commit),
        slowest.join(", ")
    );
}

/// Every [`CHECKPOINT_EVERY`] copies the WAL's committed pages into the database file
/// without waiting for readers or the writer, until the store is dropped.
fn checkpoint_loop(conn: Connection, stop: mpsc::Receiver<()>, stats: &WriteStats) {
    loop {
        let last = matches!(
            stop.recv_timeout(CHECKPOINT_EVERY),
            Err(mpsc::RecvTimeoutError::Disconnected) | Ok(())
        );
        let began = Instant::now();
        let copied = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        });
        match copied {
            // Nothing was waiting to be copied: not counted as a checkpoint.
            Ok((log, done)) if log <= 0 || done <= 0 => {}
            Ok(_) => stats.checkpoint.observe(began.elapsed()),
            Err(e) => tracing::warn!("store: checkpoint failed: {e}"),
        }
        if last {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_is_named_by_the_function_its_closure_is_in() {
        fn name_of<F: FnOnce()>(_: F) -> &'static str {
            job_name::<F>()
        }
        assert_eq!(
            short_name(name_of(|| ())),
            "sqlite::conn::tests::a_job_is_named_by_the_function_its_closure_is_in"
        );
        assert_eq!(
            short_name("<agensh_store::sqlite::SqliteStore as agensh_store::Store>::append::{{closure}}::{{closure}}"),
            "sqlite::SqliteStore::append"
        );
    }
}
