//! A throwaway PostgreSQL server inside one host of a [`Testnet`]: a new data directory
//! (`initdb`, trust authentication, user `agensh`), listening on 127.0.0.1:5432 *inside the
//! host's namespace* only, so just the processes of that host reach it — the hub beside it.
//! It is stopped (`pg_ctl stop -m immediate`) and its directory removed by the testnet's
//! teardown, the watchdog's included.
//!
//! The programs are found through `AGENSH_PG_BIN`, then `PATH` (`initdb`), then Debian's
//! `/usr/lib/postgresql/*/bin/` (newest first). PostgreSQL refuses to run as root: the data
//! directory is given to the `postgres` user (Debian's package creates it) and the
//! programs run as that user through `runuser`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{quote, Testnet};

/// The user clients connect as (trust authentication, loopback of the host only).
pub const USER: &str = "agensh";
/// The port inside the host's namespace (nothing else listens there).
pub const PORT: u16 = 5432;

/// A server running inside a host; stopped by the testnet's teardown.
#[derive(Debug, Clone)]
pub struct Postgres {
    /// The temporary directory: `data/`, the socket and `log`.
    pub dir: PathBuf,
    bin: PathBuf,
    netns: String,
}

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

/// `postgres`'s uid and gid.
fn postgres_ids() -> Result<(u32, u32), String> {
    let id = |flag: &str| -> Result<u32, String> {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .map_err(|e| format!("cannot run id: {e}"))?;
        String::from_utf8_lossy(&out.stdout).trim().parse().map_err(|_| {
            "there is no user postgres to run PostgreSQL as (it refuses root) — install Debian's postgresql package, which creates it".to_string()
        })
    };
    Ok((id("-u")?, id("-g")?))
}

impl Postgres {
    /// Initializes a server and starts it inside host `host` of `net`. `fsync` off makes
    /// a faster server for runs that never crash it; a benchmark of durable writes wants it
    /// on.
    pub fn start_in(net: &mut Testnet, host: &str, fsync: bool) -> Result<Postgres, String> {
        let bin = find_bin()?;
        let netns = net.host(host).netns.clone();
        let dir = std::env::temp_dir().join(format!("{}-pg", netns));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let (uid, gid) = postgres_ids()?;
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
            .map_err(|e| format!("cannot give {} to postgres: {e}", dir.display()))?;
        let pg = Postgres { dir, bin, netns };
        // Registered before it starts: the teardown stops it and removes its directory
        // whatever happens next.
        net.at_teardown(&format!(
            "ip netns exec {} runuser -u postgres -- {} -D {} -w -m immediate stop",
            quote(&pg.netns),
            quote(&pg.bin.join("pg_ctl").to_string_lossy()),
            quote(&pg.dir.join("data").to_string_lossy())
        ))?;
        net.remove_at_teardown(&pg.dir)?;
        let out = pg
            .as_postgres("initdb")
            .arg("-D")
            .arg(pg.dir.join("data"))
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
        let options = format!(
            "-c listen_addresses=127.0.0.1 -c port={PORT} -k {} -c max_connections=400 -c shared_buffers=64MB -c fsync={} -c synchronous_commit=on",
            pg.dir.display(),
            if fsync { "on" } else { "off" }
        );
        let out = Command::new("ip")
            .args([
                "netns", "exec", &pg.netns, "runuser", "-u", "postgres", "--",
            ])
            .arg(pg.bin.join("pg_ctl"))
            .arg("-D")
            .arg(pg.dir.join("data"))
            .arg("-l")
            .arg(pg.dir.join("log"))
            .args(["-w", "-t", "60", "-o", &options, "start"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run pg_ctl: {e}"))?;
        if !out.status.success() {
            let log = std::fs::read_to_string(pg.dir.join("log")).unwrap_or_default();
            return Err(format!(
                "pg_ctl start failed: {}{}\nlog:\n{log}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(pg)
    }

    /// A program of the server, run as `postgres` (outside any namespace: no network).
    fn as_postgres(&self, program: &str) -> Command {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(self.bin.join(program));
        c
    }

    /// The URL of its `postgres` database, for processes of its host.
    pub fn url(&self) -> String {
        format!("postgres://{USER}@127.0.0.1:{PORT}/postgres")
    }
}
