//! Identifiers: worker ids (`w01`, widened as the organization grows) and record ids (`G123`).

use crate::error::{Error, Result};

/// The author name used when an operator acts with the admin token and no `--as`.
pub const ADMIN: &str = "admin";

/// The ids for `count` new workers after `existing` ones, e.g. `w01`..`w08`.
///
/// Numbers are at least two digits wide and as wide as the largest number needs, so
/// 1,024 workers added at once are `w0001`..`w1024`. Ids of earlier workers keep their
/// width, so list workers by number (the store does), not by text.
pub fn new_worker_ids(existing: usize, count: usize) -> Vec<String> {
    let last = existing + count;
    let width = last.to_string().len().max(2);
    (existing + 1..=last)
        .map(|n| format!("w{n:0width$}"))
        .collect()
}

/// The number inside a worker id (`w007` → 7), if it is one.
pub fn worker_number(id: &str) -> Option<usize> {
    let digits = id.strip_prefix('w')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Checks that `id` looks like a worker id, so it can be used in paths and branch names.
pub fn validate_worker_id(id: &str) -> Result<()> {
    if worker_number(id).is_some() && id.len() <= 12 {
        Ok(())
    } else {
        Err(Error::invalid(
            "bad_worker_id",
            format!(
                "\"{}\" is not a worker id — worker ids look like w01; list the workers to see theirs",
                truncate_for_message(id)
            ),
        ))
    }
}

/// Formats a record sequence number as its short id (`G123`).
pub fn record_id(seq: i64) -> String {
    format!("G{seq}")
}

/// Parses a record id: `G123`, `g123` or `123`.
pub fn parse_record_id(s: &str) -> Result<i64> {
    let digits = s
        .strip_prefix('G')
        .or_else(|| s.strip_prefix('g'))
        .unwrap_or(s);
    match digits.parse::<i64>() {
        Ok(n) if n > 0 && !digits.starts_with('+') => Ok(n),
        _ => Err(Error::invalid(
            "bad_record_id",
            format!(
                "\"{}\" is not a record id — record ids look like G123 (see `board read` or `board grep`)",
                truncate_for_message(s)
            ),
        )),
    }
}

/// A number as people and models write it, `3` or `#3`: positive, at most 18 digits.
pub fn parse_number(s: &str) -> Option<i64> {
    let digits = s.strip_prefix('#').unwrap_or(s);
    (!digits.is_empty() && digits.len() <= 18 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse::<i64>().ok())
        .flatten()
        .filter(|n| *n > 0)
}

/// Cuts user input quoted inside an error message to a readable length.
pub fn truncate_for_message(s: &str) -> String {
    const MAX: usize = 40;
    if s.chars().count() <= MAX {
        s.chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect()
    } else {
        let head: String = s.chars().take(MAX).collect();
        format!("{}…", head.replace(|c: char| c.is_control(), "?"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_ids_are_two_digits_for_small_organizations() {
        assert_eq!(new_worker_ids(0, 3), vec!["w01", "w02", "w03"]);
    }

    #[test]
    fn worker_ids_widen_for_large_organizations() {
        let ids = new_worker_ids(0, 1024);
        assert_eq!(ids[0], "w0001");
        assert_eq!(ids[1023], "w1024");
    }

    #[test]
    fn adding_workers_continues_the_numbering() {
        assert_eq!(new_worker_ids(99, 2), vec!["w100", "w101"]);
    }

    #[test]
    fn worker_id_validation_rejects_paths_and_names() {
        assert!(validate_worker_id("w01").is_ok());
        assert!(validate_worker_id("w").is_err());
        assert!(validate_worker_id("../w01").is_err());
        assert!(validate_worker_id("admin").is_err());
    }

    #[test]
    fn record_ids_round_trip() {
        assert_eq!(record_id(42), "G42");
        assert_eq!(parse_record_id("G42").unwrap(), 42);
        assert_eq!(parse_record_id("g42").unwrap(), 42);
        assert_eq!(parse_record_id("42").unwrap(), 42);
        assert!(parse_record_id("G0").is_err());
        assert!(parse_record_id("Gx").is_err());
        assert!(parse_record_id("G+1").is_err());
    }
}
