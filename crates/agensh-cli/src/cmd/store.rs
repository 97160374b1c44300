//! `agensh store version DIR`: the store's schema version, read without changing the store —
//! what it recorded, and what this agensh applies when the hub next opens it.

use agensh_domain::time::rfc3339;
use agensh_domain::Error;
use agensh_store::migrate::Status;
use anyhow::{Context, Result};

use crate::cli::{Global, StoreArgs, StoreCommand};
use crate::output::{json, Local};

pub async fn run(g: &Global, a: StoreArgs) -> Result<()> {
    match a.command {
        StoreCommand::Version { dir, json: as_json } => {
            let dir = g.org_dir(&dir);
            refuse_postgres(&dir)?;
            let file = agensh_hub::state_dir(&dir).join(agensh_hub::STORE_FILE);
            let status = agensh_store::sqlite::migrate::status(&file)
                .map_err(Local)
                .with_context(|| format!("cannot read the schema version of {}", dir.display()))?;
            if as_json {
                json(&serde_json::json!({
                    "store": file.display().to_string(),
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
                outln!("store {}", file.display());
                for line in describe(&status) {
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
    }
}

/// Refuses an organization whose store is PostgreSQL (`hub.store`, `AGENSH_STORE`): the file
/// this command reads is not the one its hub uses.
fn refuse_postgres(dir: &std::path::Path) -> Result<()> {
    let store = if dir.join(crate::cmd::config::CONFIG_FILE).exists() {
        crate::cmd::config::load(dir, &[])?.hub.store
    } else {
        std::env::var("AGENSH_STORE").unwrap_or_default()
    };
    if store.trim().is_empty() {
        return Ok(());
    }
    Err(Local(Error::invalid(
        "store_not_sqlite",
        format!(
            "the store of {} is PostgreSQL ({}, from hub.store or AGENSH_STORE): `agensh store version` reads the SQLite store only — the PostgreSQL store makes its tables when the hub opens it and records no schema version yet",
            dir.display(),
            agensh_store::postgres::redact(&store)
        ),
    ))
    .into())
}

/// The lines that tell where a store stands.
fn describe(s: &Status) -> Vec<String> {
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
            "schema {} of {}: the hub applies {} migration(s) when it next opens it (back up .agensh/ first)",
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
        let lines = describe(&status(2, 2));
        assert_eq!(lines[0], "schema 2: up to date");
        assert_eq!(
            lines[1],
            "     1  step_1                applied 1970-01-01T00:00:00Z"
        );
        assert_eq!(lines.len(), 3);
    }

    #[test]
    fn an_older_store_lists_what_the_hub_applies() {
        let lines = describe(&status(1, 3));
        assert!(lines[0].starts_with("schema 1 of 3: the hub applies 2 migration(s)"));
        assert_eq!(lines[2], "     2  later                 pending");
    }

    #[test]
    fn a_newer_store_is_named_as_such() {
        let lines = describe(&status(4, 3));
        assert_eq!(
            lines[0],
            "schema 4, written by a newer agensh (this one knows up to 3)"
        );
    }
}
