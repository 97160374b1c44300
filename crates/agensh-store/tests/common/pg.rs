//! A real PostgreSQL server for the tests: started once per test binary in a temporary
//! directory on a free 127.0.0.1 port, one database per test (so tests run in parallel),
//! and stopped and removed when the binary ends — by an `atexit` handler at a normal end,
//! and by a watchdog process that stops it when the binary dies any other way (it waits
//! for the end of a pipe only the binary holds).
//!
//! The server's programs are found through `AGENSH_PG_BIN`, then `PATH` (`initdb`), then
//! Debian's `/usr/lib/postgresql/*/bin/` (newest first). PostgreSQL refuses to run as
//! root: as root the data directory is given to the `postgres` user (Debian's package
//! creates it) and the programs run as that user through `runuser`. A machine without
//! PostgreSQL fails the tests with what to install; they are never skipped.

#![allow(dead_code)]

use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

/// The user the tests connect as (trust authentication on 127.0.0.1 only).
const USER: &str = "agensh";

/// One running server.
pub struct PgServer {
    fsync: bool,
    pub port: u16,
    /// The temporary directory: `data/`, the socket and the log.
    pub dir: PathBuf,
    bin: PathBuf,
    run_as: Option<String>,
    /// The watchdog's stdin: closed when this process ends, however it ends.
    watchdog: Option<(Child, ChildStdin)>,
}

fn install_hint() -> String {
    "PostgreSQL's server programs (initdb, pg_ctl, postgres) are needed by the PostgreSQL store's tests and were not found — install them (Debian/Ubuntu: apt-get install postgresql; scripts/test does so when run as root) or set AGENSH_PG_BIN to the directory that holds them".into()
}

/// The directory holding `initdb`, `pg_ctl` and `postgres`.
fn find_bin() -> Result<PathBuf, String> {
    let has = |d: &Path| {
        d.join("initdb").is_file() && d.join("pg_ctl").is_file() && d.join("postgres").is_file()
    };
    if let Ok(d) = std::env::var("AGENSH_PG_BIN") {
        let d = PathBuf::from(d);
        return if has(&d) {
            Ok(d)
        } else {
            Err(format!(
                "AGENSH_PG_BIN={} holds no initdb, pg_ctl and postgres",
                d.display()
            ))
        };
    }
    if let Some(path) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&path) {
            if has(&d) {
                // Follow a link (Debian's are under /usr/lib/postgresql/N/bin).
                let real = std::fs::canonicalize(d.join("initdb")).ok();
                return Ok(real
                    .and_then(|p| p.parent().map(Path::to_path_buf))
                    .unwrap_or(d));
            }
        }
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let d = e.path().join("bin");
            has(&d).then_some((v, d))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, d)| d).ok_or_else(install_hint)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The uid and gid of `user`.
fn ids_of(user: &str) -> Result<(u32, u32), String> {
    let id = |flag: &str| -> Result<u32, String> {
        let out = Command::new("id")
            .args([flag, user])
            .output()
            .map_err(|e| format!("cannot run id: {e}"))?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|_| format!("there is no user {user} to run PostgreSQL as (PostgreSQL refuses root) — install Debian's postgresql package, which creates it, or run the tests as another user"))
    };
    Ok((id("-u")?, id("-g")?))
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("address").port()
}

impl PgServer {
    /// A program of the server, run as the server's user.
    fn command(&self, program: &str) -> Command {
        let exe = self.bin.join(program);
        match &self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(exe);
                c
            }
            None => Command::new(exe),
        }
    }

    /// Initializes and starts a new server; it stops when the value is dropped (and when
    /// this process ends). `fsync` off makes a server for tests that never crash it (the
    /// shared one: databases are created many times faster); the durability test's own
    /// server has it on.
    pub fn start(fsync: bool) -> Result<PgServer, String> {
        let bin = find_bin()?;
        let run_as = is_root().then(|| "postgres".to_string());
        let dir = tempfile::Builder::new()
            .prefix("agensh-pg-")
            .tempdir()
            .map_err(|e| format!("no temporary directory: {e}"))?
            .keep();
        if let Some(user) = &run_as {
            let (uid, gid) = ids_of(user)?;
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .map_err(|e| format!("cannot give {} to {user}: {e}", dir.display()))?;
        }
        let mut server = PgServer {
            fsync,
            port: 0,
            dir,
            bin,
            run_as,
            watchdog: None,
        };
        server.watch()?;
        let out = server
            .command("initdb")
            .arg("-D")
            .arg(server.dir.join("data"))
            .args([
                "--auth=trust",
                "-U",
                USER,
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .output()
            .map_err(|e| format!("cannot run initdb: {e} — {}", install_hint()))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let mut last = String::new();
        for _ in 0..5 {
            server.port = free_port();
            match server.pg_ctl_start() {
                Ok(()) => return Ok(server),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn pg_ctl_start(&self) -> Result<(), String> {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -c port={} -k {} -c max_connections=300 -c shared_buffers=32MB -c fsync={} -c synchronous_commit=on",
            self.port,
            self.dir.display(),
            if self.fsync { "on" } else { "off" }
        );
        let out = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-l")
            .arg(self.dir.join("log"))
            .args(["-w", "-t", "60", "-o", &options, "start"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run pg_ctl: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
            Err(format!(
                "pg_ctl start failed: {}{}\nlog:\n{log}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Starts the server again after [`PgServer::stop`].
    pub fn restart(&self) {
        self.pg_ctl_start().expect("the server starts again");
    }

    /// Stops the server in `mode` (`fast`, `immediate`: as if the machine lost power for
    /// PostgreSQL — no checkpoint, recovery from the WAL at the next start).
    pub fn stop(&self, mode: &str) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-w", "-m", mode, "stop"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// The shell command that stops this server and removes its directory.
    fn teardown_script(&self) -> String {
        let pg_ctl = self.bin.join("pg_ctl");
        let as_user = match &self.run_as {
            Some(u) => format!("runuser -u {u} -- "),
            None => String::new(),
        };
        format!(
            "{as_user}'{}' -D '{}' -w -m immediate stop >/dev/null 2>&1; rm -rf '{}'",
            pg_ctl.display(),
            self.dir.join("data").display(),
            self.dir.display()
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
