//! What `agensh store version|migrate` tell about a store: where its schema stands (as
//! lines and as JSON) and what a move into PostgreSQL did. The command line only prints
//! them.

use agensh_domain::time::rfc3339;
use serde_json::{json, Value};

use crate::migrate::Status;
use crate::transfer::Summary;

/// The engine's name of a store spec: `postgres` for a PostgreSQL URL, else `sqlite`.
pub fn engine(spec: &str) -> &'static str {
    if crate::is_postgres_url(spec) {
        "postgres"
    } else {
        "sqlite"
    }
}

/// What to back up before the hub upgrades a store of `spec`'s engine.
pub fn backup(spec: &str) -> &'static str {
    if crate::is_postgres_url(spec) {
        "the database"
    } else {
        ".agensh/"
    }
}

/// `agensh store version --json`: the store `shown` (its password redacted) of `spec`'s
/// engine, and where it stands.
pub fn status_json(shown: &str, spec: &str, status: &Status) -> Value {
    json!({
        "store": shown,
        "engine": engine(spec),
        "version": status.version,
        "latest": status.latest,
        "unversioned": status.unversioned,
        "too_new": status.too_new(),
        "applied": status.applied.iter().map(|m| json!({
            "version": m.version,
            "name": m.name,
            "applied_at": m.applied_at,
        })).collect::<Vec<_>>(),
        "pending": status.pending.iter().map(|(version, name)| json!({
            "version": version,
            "name": name,
        })).collect::<Vec<_>>(),
    })
}

/// `agensh store migrate --json`: what the move into `to` (its password redacted) did.
pub fn summary_json(s: &Summary, to: &str) -> Value {
    json!({
        "from": s.from,
        "to": to,
        "source_schema": s.source_schema,
        "source_upgraded": s.source_upgraded,
        "target_schema": s.target_schema,
        "tables": s.tables.iter().map(|(t, n)| (t.clone(), json!(n))).collect::<serde_json::Map<_, _>>(),
        "rows": s.rows,
        "sequences": s.sequences.iter().map(|(q, v)| (q.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "seconds": s.seconds,
    })
}

/// What the move into `to` (its password redacted) did, as lines, with what to do next.
pub fn summary_lines(s: &Summary, to: &str) -> Vec<String> {
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
pub fn describe(s: &Status, backup: &str) -> Vec<String> {
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
    use crate::migrate::Applied;

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
    fn the_engine_and_what_to_back_up_follow_the_spec() {
        assert_eq!(engine("postgres://u@h/db"), "postgres");
        assert_eq!(engine("/x/store.sqlite"), "sqlite");
        assert_eq!(backup(""), ".agensh/");
        assert_eq!(backup("postgresql://u@h/db"), "the database");
        let j = status_json("s", "", &status(1, 2));
        assert_eq!(j["engine"], "sqlite");
        assert_eq!(j["pending"][0]["version"], 2);
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
