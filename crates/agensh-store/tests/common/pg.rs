//! A real PostgreSQL server for the tests: started once per test binary in a temporary
//! directory on a free 127.0.0.1 port, one database per test (so tests run in parallel),
//! and stopped and removed when the binary ends — by an `atexit` handler at a normal end,
//! and by a watchdog process that stops it when the binary dies any other way (it waits
//! for the end of a pipe only the binary holds).
//!
//! The server's programs and their steps (finding them, running them as `postgres` when
//! root, `initdb`, `pg_ctl`) are `agensh_netns::pg::Programs`, shared with the multi-host
//! tests and the benchmarks. A machine without PostgreSQL fails the tests with what to
//! install; they are never skipped.

#![allow(dead_code)]

use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use agensh_netns::pg::{self as server, Programs, USER};
use agensh_netns::quote;

/// One running server.
pub struct PgServer {
    fsync: bool,
    pub port: u16,
    /// The temporary directory: `data/`, the socket and the log.
    pub dir: PathBuf,
    programs: Programs,
    /// The watchdog's stdin: closed when this process ends, however it ends.
    watchdog: Option<(Child, ChildStdin)>,
}

impl PgServer {
    /// Initializes and starts a new server; it stops when the value is dropped (and when
    /// this process ends). `fsync` off makes a server for tests that never crash it (the
    /// shared one: databases are created many times faster); the durability test's own
    /// server has it on.
    pub fn start(fsync: bool) -> Result<PgServer, String> {
        let programs = Programs::find()?;
        let dir = tempfile::Builder::new()
            .prefix("agensh-pg-")
            .tempdir()
            .map_err(|e| format!("no temporary directory: {e}"))?
            .keep();
        programs.give(&dir)?;
        let mut server = PgServer {
            fsync,
            port: 0,
            dir,
            programs,
            watchdog: None,
        };
        server.watch()?;
        server.programs.initdb(&server.dir)?;
        server.port = server
            .programs
            .start_on_free_port(&server.dir, |port| server.options_at(port))?;
        Ok(server)
    }

    /// The server's options listening on `port`.
    fn options_at(&self, port: u16) -> String {
        server::options(
            port,
            &self.dir,
            300,
            self.fsync,
            &["shared_buffers=32MB".to_string()],
        )
    }

    /// Starts the server again after [`PgServer::stop`].
    pub fn restart(&self) {
        self.programs
            .start(None, &self.dir, &self.options_at(self.port))
            .expect("the server starts again");
    }

    /// Stops the server in `mode` (`fast`, `immediate`: as if the machine lost power for
    /// PostgreSQL — no checkpoint, recovery from the WAL at the next start).
    pub fn stop(&self, mode: &str) {
        self.programs.stop(&self.dir, mode);
    }

    /// The shell command that stops this server and removes its directory.
    fn teardown_script(&self) -> String {
        format!(
            "{} -D {} -w -m immediate stop >/dev/null 2>&1; rm -rf {}",
            self.programs.shell(None, "pg_ctl"),
            quote(&self.dir.join("data").to_string_lossy()),
            quote(&self.dir.to_string_lossy())
        )
    }

    /// Starts the watchdog: a shell in a process group of its own that waits for its stdin
    /// to close (this process ended, whatever way) and then stops the server.
    fn watch(&mut self) -> Result<(), String> {
        let script = format!("cat >/dev/null; {}", self.teardown_script());
        let mut child = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start the server's watchdog: {e}"))?;
        let stdin = child.stdin.take().expect("piped stdin");
        self.watchdog = Some((child, stdin));
        Ok(())
    }

    /// Stops the server and removes its directory now.
    pub fn teardown(&mut self) {
        if let Some((mut child, mut stdin)) = self.watchdog.take() {
            let _ = stdin.flush();
            drop(stdin);
            let _ = child.wait();
        }
    }

    /// A URL for database `db` on this server.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates a new, empty database and returns its URL.
    pub async fn database(&self) -> String {
        create_database(self.port).await
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.teardown();
    }
}

static SHARED: OnceLock<Mutex<Option<PgServer>>> = OnceLock::new();

extern "C" fn stop_shared_at_exit() {
    if let Some(m) = SHARED.get() {
        if let Ok(mut s) = m.lock() {
            if let Some(mut server) = s.take() {
                server.teardown();
                std::mem::forget(server);
            }
        }
    }
}

/// The test binary's server, started on first use. Panics with what to install when
/// PostgreSQL is missing.
pub fn shared() -> (u16, String) {
    let m = SHARED.get_or_init(|| {
        let server = PgServer::start(false)
            .unwrap_or_else(|e| panic!("no PostgreSQL server for the tests: {e}"));
        // SAFETY: registers a plain function to run at exit.
        unsafe { libc::atexit(stop_shared_at_exit) };
        Mutex::new(Some(server))
    });
    let s = m.lock().expect("server lock");
    let s = s.as_ref().expect("the server is running");
    (s.port, s.url("postgres"))
}

/// A new database on the shared server.
pub async fn database() -> String {
    create_database(shared().0).await
}

/// Creates a new, empty database on the server at `port` and returns its URL.
async fn create_database(port: u16) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let url_of = |db: &str| format!("postgres://{USER}@127.0.0.1:{port}/{db}");
    let name = format!(
        "t{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let (client, conn) = tokio_postgres::connect(&url_of("postgres"), tokio_postgres::NoTls)
        .await
        .expect("connect to the test server");
    let task = tokio::spawn(conn);
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create a test database");
    drop(client);
    let _ = task.await;
    url_of(&name)
}
