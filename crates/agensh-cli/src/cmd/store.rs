//! `agensh store version DIR`: the store's schema version, read without changing the store —
//! what it recorded, and what this agensh applies when the hub next opens it — for the
//! SQLite file or the PostgreSQL database the hub would open.
//!
//! `agensh store migrate --from sqlite|DIR|FILE --to URL`: moves the organization's SQLite
//! store into an empty PostgreSQL database (`agensh_store::transfer`); here only the paths,
//! the refusal of a running hub, the progress bar and the summary (whose lines, like the
//! version's, are `agensh_store::admin`'s).

use std::path::{Path, PathBuf};

use agensh_domain::config::redact_url_password;
use agensh_domain::{Error, ErrorKind};
use agensh_store::admin;
use agensh_store::migrate::TOO_NEW;
use agensh_store::transfer;
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
    if dir.join(agensh_hub::org::CONFIG_FILE).exists() {
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
    let (shown, status) = if agensh_store::is_postgres_url(&spec) {
        let status = agensh_store::postgres::migrate::status(&spec)
            .await
            .map_err(|e| local_if(e, &["bad_store_url"]))
            .context("cannot read the schema version of the PostgreSQL store")?;
        (redact_url_password(&spec), status)
    } else {
        let file = agensh_hub::org::sqlite_file(dir, &spec);
        let status = agensh_store::sqlite::migrate::status(&file)
            .map_err(Local)
            .with_context(|| format!("cannot read the schema version of {}", dir.display()))?;
        (file.display().to_string(), status)
    };
    if as_json {
        json(&admin::status_json(&shown, &spec, &status));
    } else {
        outln!("store {shown}");
        for line in admin::describe(&status, admin::backup(&spec)) {
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
    let (file, org) = agensh_hub::org::sqlite_store(from);
    if let Some(hub) = org.as_deref().and_then(agensh_hub::org::running_hub) {
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
        json(&admin::summary_json(&summary, &shown));
    } else {
        for line in admin::summary_lines(&summary, &shown) {
            outln!("{line}");
        }
    }
    Ok(())
}
