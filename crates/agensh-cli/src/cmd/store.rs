//! `agensh store version DIR`: the store's schema version, read without changing the store —
//! what it recorded, and what this agensh applies when the hub next opens it — for the
//! SQLite file or the PostgreSQL database the hub would open.
//!
//! `agensh store migrate --from sqlite|DIR|FILE --to URL`: moves the organization's SQLite
//! store into an empty PostgreSQL database (`agensh_store::transfer`); here only the paths,
//! the refusal of a running hub, the progress bar and the summary.

use std::path::{Path, PathBuf};

use agensh_domain::config::redact_url_password;
use agensh_domain::time::rfc3339;
use agensh_domain::{Error, ErrorKind};
use agensh_store::migrate::{Status, TOO_NEW};
use agensh_store::transfer::{self, Summary};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cli::{Global, StoreArgs, StoreCommand};
use crate::output::{json, Local, Usage};

pub async fn run(g: &Global, a: StoreArgs) -> Result<()> {
    match a.command {
        StoreCommand::Version {
            dir,
            store,
            json: as_json,
        } => version(&g.org_dir(&dir), store, as_json).await,
        StoreCommand::Migrate {
            from,
            to,
            batch,
            json: as_json,
        } => migrate(&migrate_source(g, from)?, &to, batch, as_json).await,
    }
}

/// What `--from` names: an organization directory or its store file; the engine's name
/// `sqlite` (where no file or directory has that name) is the organization's own SQLite
/// store, of --dir or the current directory, as in `agensh store migrate --from sqlite --to
/// postgres://…`. A PostgreSQL URL is refused: the move goes one way.
fn migrate_source(g: &Global, from: Option<PathBuf>) -> Result<PathBuf> {
    match from {
        Some(p) if p.as_os_str() == "sqlite" && !p.exists() => Ok(g.dir.clone()),
        Some(p) if p.to_str().is_some_and(agensh_store::is_postgres_url) => Err(Usage(
            "--from takes the SQLite store (sqlite, an organization directory or its .agensh/store.sqlite): a store moves from SQLite into PostgreSQL, not back (for a copy of a PostgreSQL database use pg_dump)"
                .into(),
        )
        .into()),
        other => Ok(g.org_dir(&other)),
    }
}

/// The store `agensh hub DIR` would open: `--store`, else `AGENSH_STORE`, else `hub.store`
/// (empty: the organization's SQLite file).
fn store_of(dir: &Path, flag: Option<String>) -> Result<String> {
    if dir.join(crate::cmd::config::CONFIG_FILE).exists() {
        let flags: Vec<_> = flag
            .map(|value| agensh_domain::config::FlagValue {
                key: "hub.store",
                flag: "--store",
                value,
            })
            .into_iter()
            .collect();
        return Ok(crate::cmd::config::load(dir, &flags)?.hub.store);
    }
    Ok(flag
        .or_else(|| std::env::var("AGENSH_STORE").ok())
        .unwrap_or_default())
}

/// Errors that are this machine's to fix (exit 4) rather than a refusal or the server's.
fn local_if(e: Error, codes: &[&str]) -> anyhow::Error {
    if codes.contains(&e.code.as_str()) {
        Local(e).into()
    } else {
        e.into()
    }
}

async fn version(dir: &Path, flag: Option<String>, as_json: bool) -> Result<()> {
    let spec = store_of(dir, flag)?;
    let (shown, status, backup) = if agensh_store::is_postgres_url(&spec) {
        let status = agensh_store::postgres::migrate::status(&spec)
            .await
            .map_err(|e| local_if(e, &["bad_store_url"]))
            .context("cannot read the schema version of the PostgreSQL store")?;
        (redact_url_password(&spec), status, "the database")
    } else {
        let file = if spec.trim().is_empty() {
            agensh_hub::state_dir(dir).join(agensh_hub::STORE_FILE)
        } else {
            PathBuf::from(&spec)
        };
        let status = agensh_store::sqlite::migrate::status(&file)
            .map_err(Local)
            .with_context(|| format!("cannot read the schema version of {}", dir.display()))?;
        (file.display().to_string(), status, ".agensh/")
    };
    if as_json {
        json(&serde_json::json!({
            "store": shown,
            "engine": if agensh_store::is_postgres_url(&spec) { "postgres" } else { "sqlite" },
            "version": status.version,
            "latest": status.latest,
            "unversioned": status.unversioned,
            "too_new": status.too_new(),
            "applied": status.applied.iter().map(|m| serde_json::json!({
                "version": m.version,
                "name": m.name,
                "applied_at": m.applied_at,
            })).collect::<Vec<_>>(),
            "pending": status.pending.iter().map(|(version, name)| serde_json::json!({
                "version": version,
                "name": name,
            })).collect::<Vec<_>>(),
        }));
    } else {
        outln!("store {shown}");
        for line in describe(&status, backup) {
            outln!("{line}");
        }
    }
    if status.too_new() {
        return Err(Local(agensh_store::migrate::too_new(
            status.version,
            status.latest,
        ))
        .into());
    }
    Ok(())
}

/// The SQLite file `from` names (an organization directory or the file itself) and the
/// organization directory it belongs to, if any.
fn source_of(from: &Path) -> (PathBuf, Option<PathBuf>) {
    if from.is_dir() {
        let file = agensh_hub::state_dir(from).join(agensh_hub::STORE_FILE);
        return (file, Some(from.to_path_buf()));
    }
    let org = from
        .parent()
        .filter(|p| p.file_name().is_some_and(|n| n == ".agensh"))
        .and_then(Path::parent)
        .map(Path::to_path_buf);
    (from.to_path_buf(), org)
}

async fn migrate(from: &Path, to: &str, batch: usize, as_json: bool) -> Result<()> {
    if !agensh_store::is_postgres_url(to) {
        return Err(Usage(
            "--to takes a PostgreSQL URL: postgres://USER:PASSWORD@HOST:PORT/DATABASE".into(),
        )
        .into());
    }
    if batch == 0 {
        return Err(Usage("--batch takes 1 or more rows".into()).into());
    }
    let (file, org) = source_of(from);
    if let Some(hub) = org.as_deref().and_then(crate::cmd::hub::running_hub) {
        return Err(Local(Error::new(
            ErrorKind::Conflict,
            "hub_running",
            format!(
                "the hub of {} runs (pid {}) — stop it first: what it writes during the move would not be moved",
                org.as_deref().unwrap_or(from).display(),
                hub.pid
            ),
        ))
        .into());
    }
    let shown = redact_url_password(to);
    let bar = if as_json {
        ProgressBar::hidden()
    } else {
        ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr())
    };
    bar.set_style(
        ProgressStyle::with_template(
            "moving {msg:<16} [{bar:40}] {pos}/{len} rows {per_sec} eta {eta}",
        )
        .expect("template")
        .progress_chars("=> "),
    );
    let summary = transfer::sqlite_to_postgres(&file, to, batch, |p| {
        bar.set_length(p.total);
        bar.set_position(p.done);
        bar.set_message(p.table.to_string());
    })
    .await;
    bar.finish_and_clear();
    let summary = summary
        .map_err(|e| {
            local_if(
                e,
                &[
                    "no_store",
                    TOO_NEW,
                    transfer::UNKNOWN_TABLE,
                    "bad_store_url",
                ],
            )
        })
        .with_context(|| format!("cannot move {} into {shown}", file.display()))?;
    if as_json {
        json(&summary_json(&summary, &shown));
    } else {
        for line in summary_lines(&summary, &shown) {
            outln!("{line}");
        }
    }
    Ok(())
}

fn summary_json(s: &Summary, to: &str) -> serde_json::Value {
    serde_json::json!({
        "from": s.from,
        "to": to,
        "source_schema": s.source_schema,
        "source_upgraded": s.source_upgraded,
        "target_schema": s.target_schema,
        "tables": s.tables.iter().map(|(t, n)| (t.clone(), serde_json::json!(n))).collect::<serde_json::Map<_, _>>(),
        "rows": s.rows,
        "sequences": s.sequences.iter().map(|(q, v)| (q.clone(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
        "seconds": s.seconds,
    })
}

fn summary_lines(s: &Summary, to: &str) -> Vec<String> {
    let mut out = vec![format!(
        "moved {} (schema {}) into {to} (schema {}): {} rows in {:.1} s",
        s.from, s.source_schema, s.target_schema, s.rows, s.seconds
    )];
    if !s.source_upgraded.is_empty() {
        out.push(format!(
            "  the SQLite store was upgraded first to schema {} (as the hub would have)",
            s.source_schema
        ));
    }
    for (table, n) in &s.tables {
        out.push(format!("  {table:<16} {n:>10}"));
    }
    out.push(
        "next: start the hub on it — agensh hub DIR --store URL, or set hub.store in agensh.toml          (or AGENSH_STORE); the SQLite file is left as it was, keep it until the hub runs on PostgreSQL"
            .into(),
    );
    out
}

/// The lines that tell where a store stands; `backup` is what to back up before an upgrade.
fn describe(s: &Status, backup: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.unversioned {
        out.push(format!(
            "no schema version: written by an agensh from before versions; the hub finds its version from its tables when it next opens it (newest: {})",
            s.latest
        ));
    } else if s.too_new() {
        out.push(format!(
            "schema {}, written by a newer agensh (this one knows up to {})",
            s.version, s.latest
        ));
    } else if s.pending.is_empty() {
        out.push(format!("schema {}: up to date", s.version));
    } else {
        out.push(format!(
            "schema {} of {}: the hub applies {} migration(s) when it next opens it (back up {backup} first)",
            s.version,
            s.latest,
            s.pending.len()
        ));
    }
    for m in &s.applied {
        out.push(format!(
            "  {:>4}  {:<20}  applied {}",
            m.version,
            m.name,
            rfc3339(m.applied_at)
        ));
    }
    if !s.unversioned {
        for (version, name) in &s.pending {
            out.push(format!("  {version:>4}  {name:<20}  pending"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use agensh_store::migrate::Applied;

    fn status(version: u32, latest: u32) -> Status {
        Status {
            version,
            latest,
            unversioned: false,
            applied: (1..=version)
                .map(|v| Applied {
                    version: v,
                    name: format!("step_{v}"),
                    applied_at: 0,
                })
                .collect(),
            pending: (version + 1..=latest).map(|v| (v, "later")).collect(),
        }
    }

    #[test]
    fn a_current_store_says_up_to_date_and_lists_its_migrations() {
        let lines = describe(&status(2, 2), ".agensh/");
        assert_eq!(lines[0], "schema 2: up to date");
        assert_eq!(
            lines[1],
            "     1  step_1                applied 1970-01-01T00:00:00Z"
        );
        assert_eq!(lines.len(), 3);
    }

    #[test]
    fn an_older_store_lists_what_the_hub_applies() {
        let lines = describe(&status(1, 3), ".agensh/");
        assert!(lines[0].starts_with("schema 1 of 3: the hub applies 2 migration(s)"));
        assert_eq!(lines[2], "     2  later                 pending");
    }

    #[test]
    fn a_newer_store_is_named_as_such() {
        let lines = describe(&status(4, 3), ".agensh/");
        assert_eq!(
            lines[0],
            "schema 4, written by a newer agensh (this one knows up to 3)"
        );
    }
}
