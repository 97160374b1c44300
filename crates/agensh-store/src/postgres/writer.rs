//! The writer: numbered writes committed in groups, as the SQLite store's writer does.
//!
//! A write that numbers rows or creates events is a job handed to one task that owns one
//! connection. The task takes every job waiting (at most [`MAX_GROUP`]) and runs them in
//! one transaction that holds the write lock (`pg_advisory_xact_lock`, so numbers follow
//! commit order across every process on the database), each job inside its own savepoint:
//! a job that fails (bad input, a constraint) is rolled back to its savepoint and answered
//! with its own error, and the others go on. Then one `COMMIT` — one flush of the WAL for
//! the whole group, `synchronous_commit` on — and only after it: the group's events are
//! published in number order (`NOTIFY` with the last number, sent in the commit's round
//! trip, and the in-process bus), and each caller is answered.
//!
//! Consecutive plain board appends of a group ([`Writer::append`], [`Append::batchable`]:
//! not claims or takeovers) are stored together, in one savepoint, by one statement — all
//! their records and all their events ([`board::append_batch`]) — instead of two each. A
//! batch the server refuses is rolled back to its savepoint and its appends run one by one,
//! so a refused append still fails alone.
//!
//! Round trips are what bound one connection, so the fixed statements travel with the
//! next one: `BEGIN`, the lock and a job's `SAVEPOINT` go ahead of its first statement,
//! the `RELEASE` ahead of the next job's, and the `NOTIFY` with the `COMMIT`
//! ([`Conn::send_before_next`]).
//!
//! A connection that breaks fails the group's callers with an error that says so (the
//! transaction was not committed) and the next group connects again. A group that takes
//! longer than [`GROUP_TIMEOUT`] (a server that stopped answering) is abandoned with its
//! connection; its callers hear that the write was interrupted. A group runs on a task of
//! its own, so a panic in one job fails that group only.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agensh_domain::error::ErrorKind;
use agensh_domain::event::Event;
use agensh_domain::record::Appended;
use agensh_domain::{Error, Result};
use tokio::sync::{broadcast, mpsc, oneshot, Mutex};

use super::board::{self, Append};
use super::db::{connect, publish_committed, Conn, WriteCtx, CHANNEL, WRITE_LOCK};
use crate::write_stats::{WriteStats, WriteStatsSnapshot};

/// A future that may borrow for `'a`, as the writer's jobs return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Most jobs committed in one transaction. Each job that writes is a subtransaction, and
/// PostgreSQL keeps at most 64 of them per transaction in shared memory before other
/// sessions' snapshots must look them up on disk; at 64 a group still commits thousands of
/// writes a second.
const MAX_GROUP: usize = 64;
/// How long a group may run (its jobs, the lock wait and the commit) before the writer
/// gives up on its connection.
pub const GROUP_TIMEOUT: Duration = Duration::from_secs(60);

const SAVEPOINT: &str = "SAVEPOINT job";
const RELEASE: &str = "RELEASE SAVEPOINT job";
const ROLLBACK_TO: &str = "ROLLBACK TO SAVEPOINT job; RELEASE SAVEPOINT job";

/// A job that ran: whether it succeeded, and how to answer its caller once the group's
/// commit is known.
struct Finished {
    ok: bool,
    answer: Answer,
}

/// Answers a job's caller with its own result unless the group failed (`Err`); a job that
/// was refused on its own is answered with its own error, unless `broke_it` (its error
/// came from the connection breaking under it).
type Answer = Box<dyn FnOnce(Result<()>, bool) + Send>;

/// One write handed to the writer, whatever it returns.
trait Job: Send {
    /// Runs the write on `ctx` (inside its savepoint).
    fn run<'a, 'b>(self: Box<Self>, ctx: &'a mut WriteCtx<'b>) -> BoxFuture<'a, Finished>;
    /// Answers the caller with `e` without running the write.
    fn fail(self: Box<Self>, e: Error);
    /// The board append this job is, when it may share a batch ([`Append::batchable`]).
    fn batchable(&self) -> Option<&Append> {
        None
    }
    /// The job once a batch stored its append as record `seq` (only for
    /// [`Job::batchable`] jobs).
    fn batched(self: Box<Self>, _seq: i64) -> Finished {
        unreachable!("only a batchable job is batched")
    }
}

/// A board append ([`Writer::append`]).
struct AppendJob {
    append: Append,
    tx: oneshot::Sender<Result<Appended>>,
}

/// How to answer a caller with `result` once its group's commit is known.
fn answer_with<T: Send + 'static>(tx: oneshot::Sender<Result<T>>, result: Result<T>) -> Finished {
    Finished {
        ok: result.is_ok(),
        answer: Box::new(move |group: Result<()>, broke_it: bool| {
            let answer = if broke_it {
                group.and(result)
            } else {
                result.and_then(|v| group.map(|()| v))
            };
            let _ = tx.send(answer);
        }),
    }
}

impl Job for AppendJob {
    fn run<'a, 'b>(self: Box<Self>, ctx: &'a mut WriteCtx<'b>) -> BoxFuture<'a, Finished> {
        let AppendJob { append, tx } = *self;
        Box::pin(async move { answer_with(tx, append.run(ctx).await) })
    }

    fn fail(self: Box<Self>, e: Error) {
        let _ = self.tx.send(Err(e));
    }

    fn batchable(&self) -> Option<&Append> {
        self.append.batchable().then_some(&self.append)
    }

    fn batched(self: Box<Self>, seq: i64) -> Finished {
        let AppendJob { append, tx } = *self;
        answer_with(tx, Ok(append.stored(seq)))
    }
}

struct Typed<T, F> {
    f: F,
    tx: oneshot::Sender<Result<T>>,
}

impl<T, F> Job for Typed<T, F>
where
    T: Send + 'static,
    F: for<'c, 'd> FnOnce(&'c mut WriteCtx<'d>) -> BoxFuture<'c, Result<T>> + Send + 'static,
{
    fn run<'a, 'b>(self: Box<Self>, ctx: &'a mut WriteCtx<'b>) -> BoxFuture<'a, Finished> {
        let Typed { f, tx } = *self;
        Box::pin(async move { answer_with(tx, f(ctx).await) })
    }

    fn fail(self: Box<Self>, e: Error) {
        let _ = self.tx.send(Err(e));
    }
}

/// A job and when it was handed to the writer.
struct Queued {
    at: Instant,
    job: Box<dyn Job>,
}

/// The handle of the writer task; the task ends when this is dropped.
pub struct Writer {
    jobs: mpsc::UnboundedSender<Queued>,
    stats: Arc<WriteStats>,
}

fn interrupted() -> Error {
    Error::new(
        ErrorKind::Internal,
        "store_write_interrupted",
        format!(
            "the write was interrupted: the PostgreSQL store's writer lost its connection or the server did not answer within {} s, so it may not be stored — check the server, then retry",
            GROUP_TIMEOUT.as_secs()
        ),
    )
}

fn connection_broke(e: &Error) -> Error {
    Error::new(
        ErrorKind::Internal,
        "store_connection_lost",
        format!(
            "the connection to the PostgreSQL store broke during the write ({}); nothing of it was stored — retry it",
            e.message
        ),
    )
}

impl Writer {
    /// Starts the writer task on the current runtime, connecting to `url` on its first
    /// job.
    pub fn start(
        url: String,
        bus: broadcast::Sender<Arc<Event>>,
        published: Arc<Mutex<i64>>,
    ) -> Writer {
        let (jobs, rx) = mpsc::unbounded_channel();
        let stats = Arc::new(WriteStats::default());
        let writer_stats = stats.clone();
        std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || {
                crate::writer_thread::prefer_this_thread();
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the writer's runtime starts");
                runtime.block_on(run(url, rx, bus, published, writer_stats));
            })
            .expect("the writer thread starts");
        Writer { jobs, stats }
    }

    /// Runs `f` in the next group; returns once the group committed (or failed).
    pub async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'c, 'd> FnOnce(&'c mut WriteCtx<'d>) -> BoxFuture<'c, Result<T>> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        self.jobs
            .send(Queued {
                at: Instant::now(),
                job: Box::new(Typed { f, tx }),
            })
            .map_err(|_| Error::internal("the PostgreSQL store's writer has stopped"))?;
        rx.await.map_err(|_| interrupted())?
    }

    /// Appends a board record in the next group: with the group's other plain appends in
    /// one batch when it can ([`board::append_batch`]), alone otherwise.
    pub async fn append(&self, append: Append) -> Result<Appended> {
        let (tx, rx) = oneshot::channel();
        self.jobs
            .send(Queued {
                at: Instant::now(),
                job: Box::new(AppendJob { append, tx }),
            })
            .map_err(|_| Error::internal("the PostgreSQL store's writer has stopped"))?;
        rx.await.map_err(|_| interrupted())?
    }

    /// How long writes waited, ran and committed.
    pub fn stats(&self) -> WriteStatsSnapshot {
        self.stats.snapshot()
    }
}

async fn run(
    url: String,
    mut rx: mpsc::UnboundedReceiver<Queued>,
    bus: broadcast::Sender<Arc<Event>>,
    published: Arc<Mutex<i64>>,
    stats: Arc<WriteStats>,
) {
    let mut kept: Option<Conn> = None;
    while let Some(first) = rx.recv().await {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(q) => group.push(q),
                Err(_) => break,
            }
        }
        let began = Instant::now();
        for q in &group {
            stats.wait.observe(began.saturating_duration_since(q.at));
        }
        let conn = match kept.take().filter(|c| !c.is_closed()) {
            Some(c) => c,
            None => match connect(&url, None).await {
                Ok(client) => Conn::new(client),
                Err(e) => {
                    tracing::warn!("store: the writer cannot connect: {e}");
                    for q in group {
                        q.job.fail(e.clone());
                    }
                    continue;
                }
            },
        };
        let jobs = group.len();
        let (bus, published, stats) = (bus.clone(), published.clone(), stats.clone());
        let mut task = tokio::spawn(async move {
            let mut conn = conn;
            let keep = run_group(&mut conn, group, &bus, &published, &stats).await;
            keep.then_some(conn)
        });
        kept = match tokio::time::timeout(GROUP_TIMEOUT, &mut task).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => {
                tracing::error!("store: a group of {jobs} write(s) failed: {e}");
                None
            }
            Err(_) => {
                task.abort();
                tracing::error!(
                    "store: a group of {jobs} write(s) took more than {} s; its connection is dropped",
                    GROUP_TIMEOUT.as_secs()
                );
                None
            }
        };
    }
}

/// Runs one job in its savepoint, keeping its answer and (when it succeeded) its events;
/// the error when the connection broke under it.
async fn run_one(
    conn: &mut Conn,
    q: Queued,
    events: &mut Vec<Event>,
    answers: &mut Vec<Answer>,
) -> Option<Error> {
    let mark = conn.unsent_len();
    conn.send_before_next(SAVEPOINT);
    let mut ctx = WriteCtx::new(&mut *conn, true);
    let done = q.job.run(&mut ctx).await;
    let emitted = ctx.into_emitted();
    let mut broken = None;
    if done.ok {
        events.extend(emitted);
        conn.send_before_next(RELEASE);
    } else if conn.unsent_len() > mark {
        // It failed before sending anything: its savepoint was never made.
        conn.forget_unsent_after(mark);
    } else if let Err(e) = conn.batch(ROLLBACK_TO).await {
        broken = Some(connection_broke(&e));
    }
    answers.push(done.answer);
    broken
}

/// What became of a batch of appends.
enum Batch {
    /// All stored (their answers and events kept).
    Stored,
    /// The server refused the batch, which was undone: each is to run alone.
    Refused(Vec<Queued>),
    /// The connection broke: the batch's jobs are not answered yet.
    Broke(Error, Vec<Queued>),
}

/// Runs `run` (two or more [`Job::batchable`] appends, in queue order) as one batch in one
/// savepoint ([`board::append_batch`]).
async fn run_batch(
    conn: &mut Conn,
    run: Vec<Queued>,
    events: &mut Vec<Event>,
    answers: &mut Vec<Answer>,
) -> Batch {
    let mark = conn.unsent_len();
    conn.send_before_next(SAVEPOINT);
    let appends: Vec<&Append> = run.iter().filter_map(|q| q.job.batchable()).collect();
    let stored = board::append_batch(conn, &appends).await;
    drop(appends);
    match stored {
        Ok(stored) => {
            conn.send_before_next(RELEASE);
            for (q, (seq, event)) in run.into_iter().zip(stored) {
                answers.push(q.job.batched(seq).answer);
                events.push(event);
            }
            Batch::Stored
        }
        Err(_) if conn.unsent_len() > mark => {
            conn.forget_unsent_after(mark);
            Batch::Refused(run)
        }
        Err(e) => match conn.batch(ROLLBACK_TO).await {
            Ok(()) => {
                tracing::debug!(
                    "store: a batch of {} appends was refused ({e}); each runs alone",
                    run.len()
                );
                Batch::Refused(run)
            }
            Err(e) => Batch::Broke(connection_broke(&e), run),
        },
    }
}

/// Runs one group on `conn` and answers its callers; whether `conn` is still good.
async fn run_group(
    conn: &mut Conn,
    group: Vec<Queued>,
    bus: &broadcast::Sender<Arc<Event>>,
    published: &Mutex<i64>,
    stats: &WriteStats,
) -> bool {
    let began = Instant::now();
    let jobs = group.len() as u64;
    conn.send_before_next(&format!(
        "BEGIN; SELECT pg_advisory_xact_lock({WRITE_LOCK})"
    ));
    let mut answers = Vec::with_capacity(group.len());
    let mut events: Vec<Event> = Vec::new();
    // The connection broke: the error, and whether under the last job answered.
    let mut broken: Option<(Error, bool)> = None;
    let mut rest = group.into_iter().peekable();
    while let Some(q) = rest.next() {
        let batchable = |q: &Queued| q.job.batchable().is_some();
        if !batchable(&q) || !rest.peek().is_some_and(batchable) {
            broken = run_one(conn, q, &mut events, &mut answers)
                .await
                .map(|e| (e, true));
        } else {
            let mut run = vec![q];
            while let Some(q) = rest.next_if(batchable) {
                run.push(q);
            }
            let n = run.len() as u64;
            match run_batch(conn, run, &mut events, &mut answers).await {
                Batch::Stored => {
                    stats.batched.fetch_add(n, Ordering::Relaxed);
                }
                Batch::Broke(e, run) => {
                    for q in run {
                        q.job.fail(e.clone());
                    }
                    broken = Some((e, false));
                }
                Batch::Refused(run) => {
                    let mut run = run.into_iter();
                    for q in run.by_ref() {
                        broken = run_one(conn, q, &mut events, &mut answers)
                            .await
                            .map(|e| (e, true));
                        if broken.is_some() {
                            break;
                        }
                    }
                    if let Some((e, _)) = &broken {
                        for q in run {
                            q.job.fail(e.clone());
                        }
                    }
                }
            }
        }
        if broken.is_some() {
            break;
        }
    }
    if let Some((e, last_broke_it)) = broken {
        tracing::warn!("store: {}", e.message);
        for q in rest {
            q.job.fail(e.clone());
        }
        let last = answers.len();
        for (i, a) in answers.into_iter().enumerate() {
            a(Err(e.clone()), last_broke_it && i + 1 == last);
        }
        return false;
    }
    let unsent = conn.take_unsent();
    let commit = if unsent.starts_with("BEGIN") {
        // No job sent a statement: there is no transaction to commit.
        Ok(())
    } else {
        let last = match events.last() {
            Some(e) => format!("SELECT pg_notify('{CHANNEL}', '{}')", e.seq),
            // A statement that fails in a transaction some error aborted, where COMMIT
            // alone would roll back without an error.
            None => "SELECT 1".to_string(),
        };
        let committing = Instant::now();
        let r = conn.batch(&format!("{last}; COMMIT")).await;
        stats.commit.observe(committing.elapsed());
        match r {
            Ok(()) => Ok(()),
            Err(e) if conn.is_closed() => Err(Error::new(
                ErrorKind::Internal,
                "store_connection_lost",
                format!(
                    "the connection to the PostgreSQL store broke while committing ({}); the write may or may not be stored — check before retrying",
                    e.message
                ),
            )),
            Err(e) => {
                let _ = conn.batch("ROLLBACK").await;
                Err(Error::new(
                    ErrorKind::Internal,
                    "store_commit_failed",
                    format!(
                        "the PostgreSQL store could not commit the write ({}); it was not stored — retry it",
                        e.message
                    ),
                ))
            }
        }
    };
    let done = Instant::now();
    stats.group.observe(done - began);
    stats.groups.fetch_add(1, Ordering::Relaxed);
    stats.jobs.fetch_add(jobs, Ordering::Relaxed);
    if let Err(e) = &commit {
        tracing::error!("store: {}", e.message);
    } else if !events.is_empty() {
        publish_committed(conn, bus, published, events).await;
    }
    for a in answers {
        a(commit.clone(), false);
    }
    stats.publish.observe(done.elapsed());
    !conn.is_closed()
}
