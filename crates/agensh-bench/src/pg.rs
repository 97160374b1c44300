//! The throwaway PostgreSQL server of `--postgres`: agensh-testkit's `PgServer` in a
//! temporary directory on a free 127.0.0.1 port, with fsync and `synchronous_commit` on (a
//! benchmark of durable writes must not skip the flush) and the `--pg-setting`s, checked
//! here; stopped and removed when dropped.

use agensh_testkit::pg::PgServer;
use anyhow::{anyhow, bail, Result};

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

/// Starts the server; `settings`: more server settings, `NAME=VALUE` each (given to the
/// server as `-c`, after the benchmark's own).
pub fn start(settings: &[String]) -> Result<PgServer> {
    check_settings(settings)?;
    PgServer::start_with(true, 100, settings)
        .map_err(|e| anyhow!("--postgres: {e}; or pass --store postgres://… to a server you run"))
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
