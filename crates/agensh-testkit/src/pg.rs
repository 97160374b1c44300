//! Every throwaway PostgreSQL server of the project, in one place.
//!
//! [`Programs`] finds the server's programs — `AGENSH_PG_BIN`, then `PATH` (`initdb`), then
//! Debian's `/usr/lib/postgresql/*/bin/` (newest first) — and runs them as `postgres`
//! through `runuser` when this process is root (PostgreSQL refuses to run as root; Debian's
//! package creates the user): `initdb` of a new data directory with trust authentication for
//! [`USER`], `pg_ctl start` with the options of [`options`], a stop. On them:
//!
//! - [`PgServer`] — a server in a temporary directory on a free 127.0.0.1 port, stopped and
//!   removed when dropped — and when this process ends however it ends, by a watchdog
//!   process that waits for the end of a pipe only this process holds. The tests share one
//!   per test binary ([`shared`], [`database`]: one database per test, so tests run in
//!   parallel); a test that stops its server has its own; `agensh-bench --postgres` starts
//!   one with fsync on and its own settings.
//! - [`Postgres`] — a server inside one host of a [`Testnet`], listening on 127.0.0.1:5432
//!   *inside the host's namespace* only, so just the processes of that host reach it (the
//!   hub beside it); it is stopped (`pg_ctl stop -m immediate`) and its directory removed by
//!   the testnet's teardown, the watchdog's included. The multi-host test and
//!   `agensh-bench cluster` use it.
//!
//! A machine without PostgreSQL fails the tests with what to install; they are never
//! skipped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use agensh_netns::{enter, is_root, quote, Testnet, Watchdog};

/// The user clients connect as (trust authentication, loopback only).
pub const USER: &str = "agensh";
/// The port inside a host's namespace (nothing else listens there).
pub const PORT: u16 = 5432;

fn install_hint() -> String {
    "PostgreSQL's server programs (initdb, pg_ctl, postgres) were not found — install them (Debian/Ubuntu: apt-get install postgresql; scripts/test does so as root) or set AGENSH_PG_BIN to the directory that holds them".into()
}

/// The directory holding `initdb`, `pg_ctl` and `postgres`.
pub fn find_bin() -> Result<PathBuf, String> {
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

/// The uid and gid of `user`.
fn ids_of(user: &str) -> Result<(u32, u32), String> {
    let id = |flag: &str| -> Result<u32, String> {
        let out = Command::new("id")
            .args([flag, user])
            .output()
            .map_err(|e| format!("cannot run id: {e}"))?;
        String::from_utf8_lossy(&out.stdout).trim().parse().map_err(|_| {
            format!("there is no user {user} to run PostgreSQL as (it refuses root) — install Debian's postgresql package, which creates it, or run this as another user")
        })
    };
    Ok((id("-u")?, id("-g")?))
}

/// A free TCP port on 127.0.0.1 (free when asked; [`Programs::start_on_free_port`] tries
/// again on another when the server could not take it).
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port on 127.0.0.1: {e}"))
}

/// The server options for `pg_ctl -o`: listening on 127.0.0.1:`port` only, its socket in
/// `socket_dir`, `synchronous_commit` on, `fsync` as asked (off makes a faster server for
/// runs that never crash it; a benchmark of durable writes wants it on), then `more`
/// (`NAME=VALUE` each, given as `-c`; they come last, so they win).
pub fn options(
    port: u16,
    socket_dir: &Path,
    max_connections: u32,
    fsync: bool,
    more: &[String],
) -> String {
    let mut o = format!(
        "-c listen_addresses=127.0.0.1 -c port={port} -k {} -c max_connections={max_connections} -c fsync={} -c synchronous_commit=on",
        socket_dir.display(),
        if fsync { "on" } else { "off" }
    );
    for m in more {
        o.push_str(" -c ");
        o.push_str(m);
    }
    o
}

/// PostgreSQL's server programs, and the user to run them as.
#[derive(Debug, Clone)]
pub struct Programs {
    bin: PathBuf,
    run_as: Option<String>,
}

impl Programs {
    /// Finds the programs; as root they will run as `postgres`.
    pub fn find() -> Result<Programs, String> {
        Ok(Programs {
            bin: find_bin()?,
            run_as: is_root().then(|| "postgres".to_string()),
        })
    }

    /// `program` (`pg_ctl`, `createdb`, …), run as the server's user, inside network
    /// namespace `netns` when one is given (`nsenter --net`, as [`Testnet::command`]).
    pub fn command(&self, netns: Option<&str>, program: &str) -> Command {
        let mut words: Vec<String> = Vec::new();
        if let Some(ns) = netns {
            words.extend(enter(ns));
        }
        if let Some(user) = &self.run_as {
            words.extend(["runuser", "-u", user, "--"].map(String::from));
        }
        words.push(self.bin.join(program).to_string_lossy().into_owned());
        let mut c = Command::new(&words[0]);
        c.args(&words[1..]);
        c
    }

    /// The same as [`Programs::command`], as a line for `sh` (for teardown scripts that
    /// run after this process is gone).
    pub fn shell(&self, netns: Option<&str>, program: &str) -> String {
        let c = self.command(netns, program);
        std::iter::once(c.get_program())
            .chain(c.get_args())
            .map(|w| quote(&w.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Gives `dir` to the server's user (when it is not this process's).
    pub fn give(&self, dir: &Path) -> Result<(), String> {
        if let Some(user) = &self.run_as {
            let (uid, gid) = ids_of(user)?;
            std::os::unix::fs::chown(dir, Some(uid), Some(gid))
                .map_err(|e| format!("cannot give {} to {user}: {e}", dir.display()))?;
        }
        Ok(())
    }

    /// A new data directory `dir/data`: trust authentication for [`USER`], UTF-8, locale C.
    pub fn initdb(&self, dir: &Path) -> Result<(), String> {
        let out = self
            .command(None, "initdb")
            .arg("-D")
            .arg(dir.join("data"))
            .args([
                "--auth=trust",
                "-U",
                USER,
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run initdb: {e} — {}", install_hint()))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    }

    /// Starts the server of `dir/data` with `options` (see [`options`]), its log in
    /// `dir/log`, inside `netns` when given; waits until it takes connections (60 s at most).
    pub fn start(&self, netns: Option<&str>, dir: &Path, options: &str) -> Result<(), String> {
        let out = self
            .command(netns, "pg_ctl")
            .arg("-D")
            .arg(dir.join("data"))
            .arg("-l")
            .arg(dir.join("log"))
            .args(["-w", "-t", "60", "-o", options, "start"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run pg_ctl: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
        Err(format!(
            "pg_ctl start failed: {}{}\nlog:\n{log}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }

    /// Starts the server of `dir/data` on a free port of 127.0.0.1 with the options
    /// `options_at(port)` makes, trying another port when one was taken before the server
    /// could listen (five tries); returns the port.
    pub fn start_on_free_port(
        &self,
        dir: &Path,
        options_at: impl Fn(u16) -> String,
    ) -> Result<u16, String> {
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port()?;
            match self.start(None, dir, &options_at(port)) {
                Ok(()) => return Ok(port),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Stops the server of `dir/data` in `mode` (`fast`; `immediate`: as if the machine
    /// lost power — no checkpoint, recovery from the WAL at the next start), quietly.
    pub fn stop(&self, dir: &Path, mode: &str) {
        let _ = self
            .command(None, "pg_ctl")
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-w", "-m", mode, "stop"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A server running inside a host; stopped by the testnet's teardown.
#[derive(Debug, Clone)]
pub struct Postgres {
    /// The temporary directory: `data/`, the socket and `log`.
    pub dir: PathBuf,
}

impl Postgres {
    /// Initializes a server and starts it inside host `host` of `net`. `fsync` off makes
    /// a faster server for runs that never crash it; a benchmark of durable writes wants it
    /// on.
    pub fn start_in(net: &mut Testnet, host: &str, fsync: bool) -> Result<Postgres, String> {
        let programs = Programs::find()?;
        let netns = net.host(host).netns.clone();
        let dir = std::env::temp_dir().join(format!("{netns}-pg"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        programs.give(&dir)?;
        // Registered before it starts: the teardown stops it and removes its directory
        // whatever happens next.
        net.at_teardown(&format!(
            "{} -D {} -w -m immediate stop",
            programs.shell(Some(&netns), "pg_ctl"),
            quote(&dir.join("data").to_string_lossy())
        ))?;
        net.remove_at_teardown(&dir)?;
        programs.initdb(&dir)?;
        let options = options(PORT, &dir, 400, fsync, &["shared_buffers=64MB".to_string()]);
        programs.start(Some(&netns), &dir, &options)?;
        Ok(Postgres { dir })
    }

    /// The URL of its `postgres` database, for processes of its host.
    pub fn url(&self) -> String {
        format!("postgres://{USER}@127.0.0.1:{PORT}/postgres")
    }
}

/// One running server on a free port of 127.0.0.1.
pub struct PgServer {
    fsync: bool,
    max_connections: u32,
    /// More server settings, `NAME=VALUE` each.
    settings: Vec<String>,
    pub port: u16,
    /// The temporary directory: `data/`, the socket and the log.
    pub dir: PathBuf,
    programs: Programs,
    /// Stops the server and removes its directory when this process ends, however it ends.
    watchdog: Option<Watchdog>,
}

impl PgServer {
    /// Initializes and starts a new server for tests (300 connections, 32 MB of shared
    /// buffers); it stops when the value is dropped (and when this process ends). `fsync`
    /// off makes a server for tests that never crash it (the shared one: databases are
    /// created many times faster); the durability test's own server has it on.
    pub fn start(fsync: bool) -> Result<PgServer, String> {
        PgServer::start_with(fsync, 300, &["shared_buffers=32MB".to_string()])
    }

    /// [`PgServer::start`] with `max_connections` and `settings` (`NAME=VALUE` each, given
    /// to the server as `-c` after the others, so they win).
    pub fn start_with(
        fsync: bool,
        max_connections: u32,
        settings: &[String],
    ) -> Result<PgServer, String> {
        let programs = Programs::find()?;
        let dir = tempfile::Builder::new()
            .prefix("agensh-pg-")
            .tempdir()
            .map_err(|e| format!("no temporary directory: {e}"))?
            .keep();
        programs.give(&dir)?;
        let mut server = PgServer {
            fsync,
            max_connections,
            settings: settings.to_vec(),
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
        options(
            port,
            &self.dir,
            self.max_connections,
            self.fsync,
            &self.settings,
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

    /// Starts the watchdog that stops the server when this process ends, however it ends.
    fn watch(&mut self) -> Result<(), String> {
        self.watchdog = Some(Watchdog::start(
            &self.teardown_script(),
            None,
            "the server",
        )?);
        Ok(())
    }

    /// Stops the server and removes its directory now.
    pub fn teardown(&mut self) {
        if let Some(mut watchdog) = self.watchdog.take() {
            watchdog.fire();
        }
    }

    /// A URL for database `db` on this server.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates a new, empty database and returns its URL.
    pub async fn database(&self) -> String {
        new_database(self.port).await
    }

    /// Creates the database `name` and returns its URL.
    pub async fn create_database(&self, name: &str) -> Result<String, String> {
        create_database(self.port, name).await
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
    new_database(shared().0).await
}

/// Creates a new, empty database with a name of its own on the server at `port`; its URL.
async fn new_database(port: u16) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "t{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    create_database(port, &name)
        .await
        .unwrap_or_else(|e| panic!("no test database: {e}"))
}

/// Creates the database `name` on the server at `port` and returns its URL.
async fn create_database(port: u16, name: &str) -> Result<String, String> {
    let url_of = |db: &str| format!("postgres://{USER}@127.0.0.1:{port}/{db}");
    let (client, conn) = tokio_postgres::connect(&url_of("postgres"), tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("cannot connect to the server on port {port}: {e}"))?;
    let task = tokio::spawn(conn);
    let made = client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .map_err(|e| format!("cannot create the database {name}: {e}"));
    drop(client);
    let _ = task.await;
    made.map(|()| url_of(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_runs_in_the_namespace_then_as_the_servers_user() {
        let p = Programs {
            bin: PathBuf::from("/usr/lib/postgresql/15/bin"),
            run_as: Some("postgres".into()),
        };
        assert_eq!(
            p.shell(Some("agbc-hub"), "pg_ctl"),
            "'nsenter' '--net=/run/netns/agbc-hub' '--' 'runuser' '-u' 'postgres' '--' '/usr/lib/postgresql/15/bin/pg_ctl'"
        );
        let mine = Programs { run_as: None, ..p };
        assert_eq!(
            mine.shell(None, "initdb"),
            "'/usr/lib/postgresql/15/bin/initdb'"
        );
    }

    #[test]
    fn settings_given_last_win_over_the_defaults() {
        let o = options(
            5433,
            Path::new("/tmp/s"),
            100,
            true,
            &["max_wal_size=8GB".into()],
        );
        assert!(o.starts_with("-c listen_addresses=127.0.0.1 -c port=5433 -k /tmp/s"));
        assert!(o.contains("-c fsync=on -c synchronous_commit=on"));
        assert!(o.ends_with(" -c max_wal_size=8GB"), "{o}");
    }
}
