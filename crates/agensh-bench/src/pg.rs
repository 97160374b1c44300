//! A throwaway PostgreSQL server for the benchmarks (`--postgres`): `initdb` in a
//! temporary directory, started with `pg_ctl` on a free 127.0.0.1 port with fsync and
//! `synchronous_commit` on (a benchmark of durable writes must not skip the flush), and
//! stopped and removed when dropped. The steps of the store tests' `tests/common/pg.rs`,
//! without what only tests need (a watchdog, one server per test binary).
//!
//! The programs are found through `AGENSH_PG_BIN`, then Debian's
//! `/usr/lib/postgresql/*/bin/` (newest first). PostgreSQL refuses to run as root: as root
//! the directory is given to the `postgres` user and the programs run through `runuser`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{anyhow, bail, Context, Result};

/// The user the benchmark connects as (trust authentication, 127.0.0.1 only).
const USER: &str = "agensh";

pub struct PgServer {
    dir: PathBuf,
    bin: PathBuf,
    run_as: Option<String>,
    pub port: u16,
}

fn find_bin() -> Result<PathBuf> {
    let has = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
    if let Ok(d) = std::env::var("AGENSH_PG_BIN") {
        let d = PathBuf::from(d);
        return if has(&d) {
            Ok(d)
        } else {
            bail!("AGENSH_PG_BIN={} holds no initdb and pg_ctl", d.display())
        };
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
    found.pop().map(|(_, d)| d).ok_or_else(|| {
        anyhow!("--postgres needs PostgreSQL's server programs (initdb, pg_ctl) and found none in /usr/lib/postgresql/*/bin — install them (Debian/Ubuntu: apt-get install postgresql) or set AGENSH_PG_BIN, or pass --store postgres://… to a server you run")
    })
}

fn output_of(c: &mut Command, what: &str) -> Result<String> {
    let out = c
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl PgServer {
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

    /// Initializes and starts a new server.
    pub fn start() -> Result<PgServer> {
        let bin = find_bin()?;
        let root = output_of(Command::new("id").arg("-u"), "id -u")? == "0";
        let run_as = root.then(|| "postgres".to_string());
        let dir = tempfile::Builder::new()
            .prefix("agensh-bench-pg-")
            .tempdir()?
            .keep();
        let mut server = PgServer {
            dir,
            bin,
            run_as,
            port: 0,
        };
        if let Some(user) = &server.run_as {
            output_of(
                Command::new("chown").arg(user).arg(&server.dir),
                &format!("chown {user} (PostgreSQL refuses to run as root; Debian's postgresql package creates the user)"),
            )?;
        }
        output_of(
            server
                .command("initdb")
                .arg("-D")
                .arg(server.dir.join("data"))
                .args(["--auth=trust", "-U", USER, "--encoding=UTF8", "--locale=C"]),
            "initdb",
        )?;
        let mut last = None;
        for _ in 0..5 {
            server.port = free_port()?;
            let options = format!(
                "-c listen_addresses=127.0.0.1 -c port={} -k {} -c max_connections=100 -c fsync=on -c synchronous_commit=on",
                server.port,
                server.dir.display()
            );
            let started = output_of(
                server
                    .command("pg_ctl")
                    .arg("-D")
                    .arg(server.dir.join("data"))
                    .arg("-l")
                    .arg(server.dir.join("log"))
                    .args(["-w", "-t", "60", "-o", &options, "start"]),
                "pg_ctl start",
            );
            match started {
                Ok(_) => return Ok(server),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("tried"))
    }

    /// Creates database `name` and returns its URL.
    pub fn database(&self, name: &str) -> Result<String> {
        output_of(
            self.command("createdb")
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", USER])
                .arg(name),
            "createdb",
        )?;
        Ok(format!("postgres://{USER}@127.0.0.1:{}/{name}", self.port))
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-w", "-m", "fast", "stop"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
