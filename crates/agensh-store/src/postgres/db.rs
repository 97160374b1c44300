//! Connections to PostgreSQL: a small pool, the writer's write context, and the commit
//! broadcast.
//!
//! # Writes
//!
//! A write that numbers rows (records, messages, PRs, issues, workers) or creates events
//! runs in the writer (`writer.rs`): grouped with the others waiting into one transaction
//! that first takes one transaction-scoped advisory lock ([`WRITE_LOCK`]), each in a
//! savepoint, committed once and answered after the commit. The lock is released when the
//! commit is flushed, so those numbers are the greatest plus one, without gaps, and they
//! become visible in the order they were given — across processes too, as the lock is the
//! database's. Event cursors (a worker's queue, the dashboard's stream, the broadcast
//! below) rely on that: an event numbered N is never seen after N+1.
//!
//! The other writes — statuses, activity, acknowledgements, cursors, turns, usage,
//! budgets — are one transaction each on a pooled connection ([`Db::begin`],
//! [`Db::finish`]), without the lock, side by side: PostgreSQL's WAL writer flushes their
//! commit records together. Every write returns only after `COMMIT` did, with
//! `synchronous_commit` on, so the change is on disk when the caller hears of it.
//!
//! # The commit broadcast
//!
//! A transaction that created events sends `NOTIFY agensh_events` with its last number,
//! delivered by PostgreSQL at commit, to every process listening. Each [`Db`] keeps one
//! listening connection; on a notification it reads the events above the last one it
//! published and publishes them in order. The writer publishes a group's events right
//! after its commit (so their callers' subscribers have them when they return), first
//! reading any it has not seen below them. One mutex and one "last published" number make
//! the two paths publish each event once, in number order.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use agensh_domain::error::ErrorKind;
use agensh_domain::event::{Event, NewEvent};
use agensh_domain::record::Appended;
use agensh_domain::{Error, Result};
use std::future::poll_fn;
use tokio::sync::{broadcast, Mutex, Semaphore, SemaphorePermit};
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, Client, NoTls, Row, Statement};

use super::{events, writer};
use crate::common::rows;

/// The channel of the commit broadcast.
pub const CHANNEL: &str = "agensh_events";
/// The advisory lock that orders numbered writes (any 64-bit key of our own).
pub const WRITE_LOCK: i64 = 0x6167_656e_7368_0001;
/// The advisory lock held while the schema is applied.
pub(crate) const SCHEMA_LOCK: i64 = 0x6167_656e_7368_0002;

/// A parameter list for a query.
pub type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

pub(crate) fn pg_err(e: tokio_postgres::Error) -> Error {
    match e.as_db_error() {
        Some(db) => Error::internal(format!(
            "store error: {} ({})",
            db.message(),
            db.code().code()
        )),
        None => Error::internal(format!("store error: {e}")),
    }
}

/// PostgreSQL's rows, read by the engine-neutral conversions (`common::rows`). A read of
/// the wrong type panics, as `Row::get` does; only a value the domain refuses is an error.
impl rows::Columns for Row {
    type Error = Error;

    fn refused(&self, _: usize, e: Error) -> Error {
        e
    }
}

impl<T: for<'a> tokio_postgres::types::FromSql<'a>> rows::Column<T> for Row {
    fn col(&self, i: usize) -> Result<T> {
        Ok(self.get(i))
    }
}

/// Where the URL points without its password, for messages.
pub fn redact(url: &str) -> String {
    match url.parse::<tokio_postgres::Config>() {
        Ok(cfg) => {
            let hosts: Vec<String> = cfg
                .get_hosts()
                .iter()
                .map(|h| match h {
                    tokio_postgres::config::Host::Tcp(h) => h.clone(),
                    tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
                })
                .collect();
            let port = cfg.get_ports().first().copied().unwrap_or(5432);
            format!(
                "database {} on {}:{port} as {}",
                cfg.get_dbname().unwrap_or("(default)"),
                hosts.join(","),
                cfg.get_user().unwrap_or("(default user)")
            )
        }
        Err(_) => "a URL that does not parse".into(),
    }
}

/// Opens one connection and drives it on a task of its own. Notifications, if any, are
/// sent to `notify`.
pub(crate) async fn connect(
    url: &str,
    notify: Option<tokio::sync::mpsc::UnboundedSender<String>>,
) -> Result<Client> {
    let cfg: tokio_postgres::Config = url.parse().map_err(|e| {
        Error::invalid(
            "bad_store_url",
            format!(
                "the store URL does not parse ({e}) — write it as postgres://USER:PASSWORD@HOST:PORT/DATABASE"
            ),
        )
    })?;
    let (client, mut connection) =
        tokio::time::timeout(Duration::from_secs(15), cfg.connect(NoTls))
            .await
            .map_err(|_| unreachable_err(url, "no answer within 15 s"))?
            .map_err(|e| unreachable_err(url, &describe(&e)))?;
    tokio::spawn(async move {
        loop {
            match poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if let Some(tx) = &notify {
                        let _ = tx.send(n.payload().to_string());
                    }
                }
                Some(Ok(AsyncMessage::Notice(n))) => {
                    tracing::debug!("postgres notice: {}", n.message());
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::warn!("store: a PostgreSQL connection ended: {e}");
                    break;
                }
                None => break,
            }
        }
    });
    client
        .batch_execute("SET synchronous_commit TO on; SET client_min_messages TO warning")
        .await
        .map_err(pg_err)?;
    Ok(client)
}

pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_string(),
        None => {
            let mut s = e.to_string();
            let mut src = std::error::Error::source(e);
            while let Some(inner) = src {
                s.push_str(&format!(": {inner}"));
                src = inner.source();
            }
            s
        }
    }
}

fn unreachable_err(url: &str, why: &str) -> Error {
    Error::new(
        ErrorKind::Internal,
        "store_unreachable",
        format!(
            "cannot connect to the PostgreSQL store ({}): {why} — check the server runs, the URL's host, port, user, password and database are right, and the database exists (createdb NAME)",
            redact(url)
        ),
    )
}

/// One connection and its prepared statements.
pub struct Conn {
    client: Client,
    statements: HashMap<String, Statement>,
    /// SQL sent in the same round trip as the next statement, ahead of it (the writer's
    /// `BEGIN`, lock and savepoints: see `writer.rs`). Empty on a pooled connection.
    before: String,
}

impl Conn {
    pub(super) fn new(client: Client) -> Conn {
        Conn {
            client,
            statements: HashMap::new(),
            before: String::new(),
        }
    }

    /// Whether the server closed the connection (or it broke).
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Queues `sql` to be sent ahead of the next statement, in its round trip.
    pub(super) fn send_before_next(&mut self, sql: &str) {
        self.before.push_str(sql);
        self.before.push_str("; ");
    }

    /// What is queued and not sent yet (and forgets it).
    pub(super) fn take_unsent(&mut self) -> String {
        std::mem::take(&mut self.before)
    }

    /// How much is queued and not sent yet.
    pub(super) fn unsent_len(&self) -> usize {
        self.before.len()
    }

    /// Drops what was queued after the first `len` bytes (it was never sent).
    pub(super) fn forget_unsent_after(&mut self, len: usize) {
        self.before.truncate(len);
    }

    /// Sends what is queued now, on its own.
    async fn flush(&mut self) -> Result<()> {
        if !self.before.is_empty() {
            let sql = std::mem::take(&mut self.before);
            self.client.batch_execute(&sql).await.map_err(pg_err)?;
        }
        Ok(())
    }

    async fn statement(&mut self, sql: &str) -> Result<Statement> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        // What is queued runs before the statement is prepared.
        self.flush().await?;
        let s = self.client.prepare(sql).await.map_err(pg_err)?;
        self.statements.insert(sql.to_string(), s.clone());
        Ok(s)
    }

    /// Runs `query` with what is queued sent ahead of it, both in one round trip
    /// (tokio-postgres pipelines requests made together, in the order first polled).
    async fn pipelined<T>(
        client: &Client,
        before: String,
        query: impl std::future::Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    ) -> Result<T> {
        if before.is_empty() {
            return query.await.map_err(pg_err);
        }
        let (first, then) = tokio::join!(client.batch_execute(&before), query);
        first.map_err(pg_err)?;
        then.map_err(pg_err)
    }

    /// Runs `sql` (prepared once per connection) and returns its rows.
    pub async fn query(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Row>> {
        let s = self.statement(sql).await?;
        let before = std::mem::take(&mut self.before);
        Self::pipelined(&self.client, before, self.client.query(&s, params)).await
    }

    pub async fn query_opt(&mut self, sql: &str, params: Params<'_>) -> Result<Option<Row>> {
        let s = self.statement(sql).await?;
        let before = std::mem::take(&mut self.before);
        Self::pipelined(&self.client, before, self.client.query_opt(&s, params)).await
    }

    pub async fn query_one(&mut self, sql: &str, params: Params<'_>) -> Result<Row> {
        let s = self.statement(sql).await?;
        let before = std::mem::take(&mut self.before);
        Self::pipelined(&self.client, before, self.client.query_one(&s, params)).await
    }

    pub async fn execute(&mut self, sql: &str, params: Params<'_>) -> Result<u64> {
        let s = self.statement(sql).await?;
        let before = std::mem::take(&mut self.before);
        Self::pipelined(&self.client, before, self.client.execute(&s, params)).await
    }

    /// Runs a query built for one call (grep), without keeping its statement.
    pub async fn query_once(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Row>> {
        self.flush().await?;
        self.client.query(sql, params).await.map_err(pg_err)
    }

    /// Runs `sql` (statements without parameters) after what is queued, in one round trip.
    pub async fn batch(&mut self, sql: &str) -> Result<()> {
        let mut all = std::mem::take(&mut self.before);
        all.push_str(sql);
        self.client.batch_execute(&all).await.map_err(pg_err)
    }
}

/// A connection taken from the pool; back to it when dropped, unless it was left inside
/// a transaction (a cancelled write) or broke, when it is closed (and PostgreSQL rolls the
/// transaction back).
pub struct Pooled<'a> {
    db: &'a Db,
    conn: Option<Conn>,
    in_transaction: bool,
    _permit: SemaphorePermit<'a>,
}

impl Deref for Pooled<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        self.conn.as_ref().expect("pooled connection")
    }
}

impl DerefMut for Pooled<'_> {
    fn deref_mut(&mut self) -> &mut Conn {
        self.conn.as_mut().expect("pooled connection")
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            if !self.in_transaction && !c.client.is_closed() {
                self.db.idle.lock().expect("pool lock").push(c);
            }
        }
    }
}

/// What a write sees: its connection inside the transaction, and the events it created
/// (published after the commit).
pub struct WriteCtx<'a> {
    pub conn: &'a mut Conn,
    emitted: Vec<Event>,
    locked: bool,
}

impl<'a> WriteCtx<'a> {
    /// A write on `conn`, inside a transaction that holds the write lock when `locked`.
    pub(super) fn new(conn: &'a mut Conn, locked: bool) -> Self {
        WriteCtx {
            conn,
            emitted: Vec::new(),
            locked,
        }
    }

    /// The events the write created, oldest first.
    pub(super) fn into_emitted(self) -> Vec<Event> {
        self.emitted
    }

    /// Takes the write lock (see the module documentation), once per transaction. The
    /// writer's groups hold it from their start, so there it does nothing.
    pub async fn lock(&mut self) -> Result<()> {
        if !self.locked {
            self.conn
                .execute("SELECT pg_advisory_xact_lock($1)", &[&WRITE_LOCK])
                .await?;
            self.locked = true;
        }
        Ok(())
    }

    /// Stores `event` (unless its dedup key was used) and publishes it after the commit.
    pub async fn emit(&mut self, event: &NewEvent, now: i64) -> Result<Option<Event>> {
        self.lock().await?;
        let stored = events::insert(self.conn, event, now).await?;
        if let Some(e) = &stored {
            self.emitted.push(e.clone());
        }
        Ok(stored)
    }
}

/// The pool, the writer, the bus and the listener.
pub struct Db {
    url: String,
    idle: StdMutex<Vec<Conn>>,
    permits: Semaphore,
    bus: broadcast::Sender<Arc<Event>>,
    /// The greatest event number published on the bus.
    published: Arc<Mutex<i64>>,
    writer: writer::Writer,
}

impl Db {
    /// Connects to `url`, brings its database to the newest schema (`migrate.rs`) and
    /// returns the pool of `size` connections and
    /// the writer.
    pub async fn open(
        url: &str,
        size: usize,
        bus: broadcast::Sender<Arc<Event>>,
    ) -> Result<Arc<Db>> {
        let mut first = Conn::new(connect(url, None).await?);
        super::migrate::upgrade(&first.client, super::migrate::MIGRATIONS).await?;
        let top: i64 = first
            .query_one("SELECT coalesce(max(seq), 0) FROM events", &[])
            .await?
            .get(0);
        let published = Arc::new(Mutex::new(top));
        let writer = writer::Writer::start(url.to_string(), bus.clone(), published.clone());
        let db = Arc::new(Db {
            url: url.to_string(),
            idle: StdMutex::new(vec![first]),
            permits: Semaphore::new(size.max(2)),
            bus,
            published,
            writer,
        });
        Ok(db)
    }

    /// A connection from the pool (a new one when none is idle).
    pub async fn conn(&self) -> Result<Pooled<'_>> {
        let permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| Error::internal("the store is closed"))?;
        // A connection the server closed (a restart) is dropped here.
        let idle = loop {
            match self.idle.lock().expect("pool lock").pop() {
                Some(c) if c.client.is_closed() => continue,
                other => break other,
            }
        };
        let conn = match idle {
            Some(c) => c,
            None => Conn::new(connect(&self.url, None).await?),
        };
        Ok(Pooled {
            db: self,
            conn: Some(conn),
            in_transaction: false,
            _permit: permit,
        })
    }

    /// A pooled connection inside a new transaction (one that takes the write lock only
    /// if it asks for it): for writes that number nothing (statuses, acknowledgements,
    /// cursors, usage), which run side by side. End it with [`Db::finish`].
    pub async fn begin(&self) -> Result<Pooled<'_>> {
        self.begin_with("BEGIN").await
    }

    /// A pooled connection inside a read-only transaction that reads one snapshot; end it
    /// with [`Db::finish`].
    pub async fn begin_snapshot(&self) -> Result<Pooled<'_>> {
        self.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
    }

    async fn begin_with(&self, begin: &str) -> Result<Pooled<'_>> {
        let mut conn = self.conn().await?;
        conn.in_transaction = true;
        conn.batch(begin).await?;
        Ok(conn)
    }

    /// Ends a transaction of [`Db::begin`]: commits when `result` is a success (and
    /// answers only after the commit), rolls back otherwise.
    pub async fn finish<T>(&self, mut conn: Pooled<'_>, result: Result<T>) -> Result<T> {
        match result {
            Ok(v) => {
                conn.batch("COMMIT").await?;
                conn.in_transaction = false;
                Ok(v)
            }
            Err(e) => {
                conn.batch("ROLLBACK").await?;
                conn.in_transaction = false;
                Err(e)
            }
        }
    }

    /// Runs `f` as one write of the writer's next group (see `writer.rs`): in a savepoint
    /// of a transaction that holds the write lock; returns after that transaction
    /// committed, with the events `f` created published.
    pub async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'c, 'd> FnOnce(&'c mut WriteCtx<'d>) -> writer::BoxFuture<'c, Result<T>>
            + Send
            + 'static,
    {
        self.writer.write(f).await
    }

    /// Appends a board record as a write of the writer's next group ([`Db::write`]), in
    /// one batch with the group's other plain appends when it can (`writer.rs`).
    pub async fn append(&self, append: super::board::Append) -> Result<Appended> {
        self.writer.append(append).await
    }

    /// How long the writer's writes waited, ran and committed.
    pub fn write_stats(&self) -> crate::write_stats::WriteStatsSnapshot {
        self.writer.stats()
    }

    /// Listens for other writers' commits (and its own) until the returned task is
    /// aborted; reconnects when the connection breaks, reading what it missed.
    pub fn listen(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        let url = self.url.clone();
        tokio::spawn(async move {
            loop {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                let client = match connect(&url, Some(tx)).await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!("store: the commit listener cannot connect: {e}; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        if weak.strong_count() == 0 {
                            return;
                        }
                        continue;
                    }
                };
                let mut conn = Conn::new(client);
                if let Err(e) = conn.batch(&format!("LISTEN {CHANNEL}")).await {
                    tracing::warn!("store: LISTEN failed: {e}; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                // Whatever was committed while nobody listened.
                let mut seen = None;
                loop {
                    let Some(db) = weak.upgrade() else { return };
                    let wanted = match seen {
                        None => true,
                        Some(s) => s > *db.published.lock().await,
                    };
                    if wanted {
                        let mut last = db.published.lock().await;
                        if let Err(e) = publish_from(&mut conn, &db.bus, &mut last, None).await {
                            tracing::warn!("store: the commit listener cannot read events: {e}");
                            break;
                        }
                    }
                    drop(db);
                    match rx.recv().await {
                        Some(payload) => seen = Some(payload.parse::<i64>().unwrap_or(i64::MAX)),
                        None => break,
                    }
                }
                if weak.strong_count() == 0 {
                    return;
                }
                tracing::warn!("store: the commit listener lost its connection; reconnecting");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    }
}

/// Publishes `mine` (just committed, in number order), after any event below them not yet
/// published (another process's, read on `conn`).
pub(super) async fn publish_committed(
    conn: &mut Conn,
    bus: &broadcast::Sender<Arc<Event>>,
    published: &Mutex<i64>,
    mine: Vec<Event>,
) {
    let mut last = published.lock().await;
    let first = mine[0].seq;
    if first > *last + 1 {
        if let Err(e) = publish_from(conn, bus, &mut last, Some(first)).await {
            tracing::warn!("store: cannot read the events committed before {first}: {e}");
        }
    }
    for e in mine {
        if e.seq > *last {
            *last = e.seq;
            let _ = bus.send(Arc::new(e));
        }
    }
}

/// Publishes the committed events above `*last` (below `below` when given), in order.
async fn publish_from(
    conn: &mut Conn,
    bus: &broadcast::Sender<Arc<Event>>,
    last: &mut i64,
    below: Option<i64>,
) -> Result<()> {
    loop {
        let page = events::after(conn, *last, 1_000).await?;
        let n = page.len();
        for e in page {
            if below.is_some_and(|b| e.seq >= b) {
                return Ok(());
            }
            *last = e.seq;
            let _ = bus.send(Arc::new(e));
        }
        if n < 1_000 {
            return Ok(());
        }
    }
}
