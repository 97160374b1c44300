//! A throwaway PostgreSQL server for the benchmarks (`--postgres`): `initdb` in a
//! temporary directory, started on a free 127.0.0.1 port with fsync and
//! `synchronous_commit` on (a benchmark of durable writes must not skip the flush), and
//! stopped and removed when dropped. The programs and their steps are
//! `agensh_netns::pg::Programs`, as for the store tests' servers.

use std::path::PathBuf;

use agensh_netns::pg::{self, Programs, USER};
use anyhow::{anyhow, bail, Context, Result};

pub struct PgServer {
    dir: PathBuf,
    programs: Programs,
    pub port: u16,
}

/// Checks `--pg-setting`s: `NAME=VALUE`, no spaces, and not the two that make writes
/// durable.
fn check_settings(settings: &[String]) -> Result<()> {
    for s in settings {
        let name = s.split_once('=').and_then(|(name, value)| {
            let ok = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
                && !value.is_empty()
                && !value.contains(char::is_whitespace);
            ok.then(|| name.to_ascii_lowercase())
        });
        let Some(name) = name else {
            bail!(
                "--pg-setting takes NAME=VALUE with no spaces (max_wal_size=8GB, say), not {s:?}"
            );
        };
        if name == "fsync" || name == "synchronous_commit" {
            bail!("--pg-setting {s}: fsync and synchronous_commit stay on in a benchmark of durable writes");
        }
    }
    Ok(())
}

impl PgServer {
    /// Initializes and starts a new server; `settings`: more server settings, `NAME=VALUE`
    /// each (given to the server as `-c`, after the benchmark's own).
    pub fn start(settings: &[String]) -> Result<PgServer> {
        check_settings(settings)?;
        let programs = Programs::find().map_err(|e| {
            anyhow!("--postgres: {e}; or pass --store postgres://… to a server you run")
        })?;
        let dir = tempfile::Builder::new()
            .prefix("agensh-bench-pg-")
            .tempdir()?
            .keep();
        let mut server = PgServer {
            dir,
            programs,
            port: 0,
        };
        server.programs.give(&server.dir).map_err(|e| anyhow!(e))?;
        server
            .programs
            .initdb(&server.dir)
            .map_err(|e| anyhow!(e))?;
        server.port = server
            .programs
            .start_on_free_port(&server.dir, |port| {
                pg::options(port, &server.dir, 100, true, settings)
            })
            .map_err(|e| anyhow!(e))?;
        Ok(server)
    }

    /// Creates database `name` and returns its URL.
    pub fn database(&self, name: &str) -> Result<String> {
        let out = self
            .programs
            .command(None, "createdb")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", USER])
            .arg(name)
            .stdin(std::process::Stdio::null())
            .output()
            .context("cannot run createdb")?;
        if !out.status.success() {
            bail!("createdb failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(format!("postgres://{USER}@127.0.0.1:{}/{name}", self.port))
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.programs.stop(&self.dir, "fast");
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_name_value_and_leave_durability_alone() {
        assert!(check_settings(&["max_wal_size=8GB".into(), "wal_compression=lz4".into()]).is_ok());
        for bad in ["max_wal_size", "=1", "a b=1", "x=1 -c fsync=off"] {
            let e = check_settings(&[bad.into()]).unwrap_err().to_string();
            assert!(e.contains("NAME=VALUE"), "{bad}: {e}");
        }
        let e = check_settings(&["fsync=off".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("stay on"), "{e}");
        let e = check_settings(&["Synchronous_Commit=off".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("stay on"), "{e}");
    }
}
