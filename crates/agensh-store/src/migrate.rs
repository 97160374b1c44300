//! Schema versions, whatever the engine: the ordered list of migrations a store applies
//! when it opens, which of them a store at some version still needs, and the refusal of a
//! store that a newer agensh wrote.
//!
//! A store records each migration it has applied in one table, [`VERSION_TABLE`] (the same
//! SQL in SQLite and PostgreSQL); its schema version is the highest recorded. An engine
//! keeps its migrations' SQL in files (`sqlite/migrations/NNNN_name.sql`) and applies each
//! pending one in a transaction of its own together with its row in the table, so a store
//! is always at exactly one version, even when an upgrade stops half-way.

use agensh_domain::{Error, ErrorKind, Result};

/// The table of applied migrations: one row per version, with its name and when it was
/// recorded (Unix ms). Created by the first migration an engine applies.
pub const VERSION_TABLE: &str = "schema_migrations";

/// The SQL that creates [`VERSION_TABLE`]; valid in SQLite and PostgreSQL alike.
pub const CREATE_VERSION_TABLE: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at BIGINT NOT NULL
)";

/// The error code of a store written by a newer agensh.
pub const TOO_NEW: &str = "store_too_new";

/// One step of an engine's schema.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// 1, 2, 3, … in the order they apply.
    pub version: u32,
    /// What the step does, as in its file's name (`pr_review_commit`).
    pub name: &'static str,
    /// The step's SQL, run as one batch inside the step's transaction.
    pub sql: &'static str,
    /// For a step made before stores recorded their version: a query that returns a row
    /// when a store already has the step (an agensh of that time created its tables at
    /// open). Such a store gets the step recorded rather than applied. `None` for every
    /// step made since.
    pub present_if: Option<&'static str>,
}

/// A migration a store has recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub version: u32,
    pub name: String,
    /// Unix ms it was applied (or, for a store written before versions, found).
    pub applied_at: i64,
}

/// Where a store stands against the migrations this agensh knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The store's schema version: the highest migration it recorded (0: none yet).
    pub version: u32,
    /// The newest version this agensh knows.
    pub latest: u32,
    /// Whether the store was written before stores recorded versions (its version is found
    /// from its tables when it next opens).
    pub unversioned: bool,
    /// The migrations the store recorded, in order.
    pub applied: Vec<Applied>,
    /// The migrations this agensh would apply at open: (version, name), in order.
    pub pending: Vec<(u32, &'static str)>,
}

impl Status {
    /// Where a store at `version` with `applied` recorded stands against `list`.
    pub fn of(list: &[Migration], version: u32, applied: Vec<Applied>) -> Status {
        let pending = list
            .iter()
            .filter(|m| m.version > version)
            .map(|m| (m.version, m.name))
            .collect();
        Status {
            version,
            latest: latest(list),
            unversioned: false,
            applied,
            pending,
        }
    }

    /// Whether a newer agensh wrote the store (this one refuses to open it).
    pub fn too_new(&self) -> bool {
        self.version > self.latest
    }
}

/// The newest version of `list` (0 for none).
pub fn latest(list: &[Migration]) -> u32 {
    list.last().map_or(0, |m| m.version)
}

/// Checks that `list` is numbered 1, 2, 3, … with a name of lowercase words each: an
/// engine's tests call it on its list.
pub fn check_list(list: &[Migration]) -> std::result::Result<(), String> {
    for (i, m) in list.iter().enumerate() {
        let want = i as u32 + 1;
        if m.version != want {
            return Err(format!(
                "migration {} ({}) is at place {want}: versions must run 1, 2, 3, … without gaps",
                m.version, m.name
            ));
        }
        let word = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
        if m.name.is_empty() || !m.name.chars().all(word) {
            return Err(format!(
                "migration {} is named {:?}: use lowercase words joined by _",
                m.version, m.name
            ));
        }
        if m.sql.trim().is_empty() {
            return Err(format!("migration {} ({}) has no SQL", m.version, m.name));
        }
    }
    Ok(())
}

/// Checks that the files of `dir` are exactly `list`'s, one `NNNN_name.sql` per entry,
/// each holding that entry's SQL: an engine's tests call it on its migrations directory.
#[cfg(test)]
pub(crate) fn check_files(dir: &std::path::Path, list: &[Migration]) {
    let file = |m: &Migration| format!("{:04}_{}.sql", m.version, m.name);
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let listed: Vec<String> = list.iter().map(file).collect();
    assert_eq!(
        files,
        listed,
        "each file of {} is one entry of MIGRATIONS",
        dir.display()
    );
    for m in list {
        let text = std::fs::read_to_string(dir.join(file(m))).unwrap();
        assert_eq!(text, m.sql, "migration {} includes its own file", m.version);
    }
}

/// The migrations of `list` a store at `version` still needs, in order; an error when a
/// newer agensh wrote it.
pub fn pending(list: &[Migration], version: u32) -> Result<&[Migration]> {
    let latest = latest(list);
    if version > latest {
        return Err(too_new(version, latest));
    }
    Ok(&list[version as usize..])
}

/// The refusal of a store at schema `found` by an agensh that knows up to `known`.
pub fn too_new(found: u32, known: u32) -> Error {
    Error::new(
        ErrorKind::Conflict,
        TOO_NEW,
        format!(
            "this store was written by a newer agensh (schema {found}, this one knows {known}): upgrade agensh"
        ),
    )
}

/// Unix ms now: when a migration was applied.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The error of a migration that failed: the store stays at the version before it.
pub fn failed(m: &Migration, at: u32, why: impl std::fmt::Display) -> Error {
    Error::internal(format!(
        "cannot upgrade the store to schema {} ({}): {why} — the store is unchanged at schema {at}; \
         run the agensh that wrote it, and report this with the store's `agensh store version`",
        m.version, m.name
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn step(version: u32, name: &'static str) -> Migration {
        Migration {
            version,
            name,
            sql: "CREATE TABLE t (x INTEGER)",
            present_if: None,
        }
    }

    const LIST: [Migration; 3] = [step(1, "initial"), step(2, "second"), step(3, "third")];

    #[test]
    fn a_store_needs_the_steps_above_its_version() {
        let names =
            |v| -> Vec<&str> { pending(&LIST, v).unwrap().iter().map(|m| m.name).collect() };
        assert_eq!(names(0), ["initial", "second", "third"]);
        assert_eq!(names(2), ["third"]);
        assert!(names(3).is_empty());
    }

    #[test]
    fn a_store_from_a_newer_agensh_is_refused_saying_what_to_do() {
        let e = pending(&LIST, 4).unwrap_err();
        assert_eq!(e.code, TOO_NEW);
        assert_eq!(
            e.message,
            "this store was written by a newer agensh (schema 4, this one knows 3): upgrade agensh"
        );
    }

    #[test]
    fn a_list_with_a_gap_or_a_bad_name_is_caught() {
        assert!(check_list(&LIST).is_ok());
        let gap = [step(1, "initial"), step(3, "third")];
        assert!(check_list(&gap).unwrap_err().contains("without gaps"));
        let named = [step(1, "Initial Schema")];
        assert!(check_list(&named).unwrap_err().contains("lowercase"));
    }

    #[test]
    fn status_lists_what_is_pending_and_knows_a_newer_store() {
        let s = Status::of(&LIST, 1, Vec::new());
        assert_eq!(s.pending, [(2, "second"), (3, "third")]);
        assert!(!s.too_new());
        assert!(Status::of(&LIST, 5, Vec::new()).too_new());
    }
}
