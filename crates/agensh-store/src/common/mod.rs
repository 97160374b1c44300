//! Engine-neutral store code: what the SQLite store (`sqlite/`) and the PostgreSQL store
//! (`postgres/`) do alike, written once. Neither engine imports the other; both import
//! this.
//!
//! What lives here is free of SQL and of either engine's crate: tokens, the rules and
//! refusals around each write, the events a write emits, and the conversion of a result
//! row into a domain type ([`rows`], through a small trait each engine implements for its
//! own row type). Each engine keeps its SQL, its connections and its control flow (the
//! SQLite store's is synchronous, on one writer thread; the PostgreSQL store's is async),
//! and calls these functions around its statements.

pub mod board;
pub mod events;
pub mod issues;
pub mod messages;
pub mod prs;
pub mod receipts;
pub mod rows;
pub mod workers;

use agensh_domain::{Error, Result};

/// A random secret: `prefix` and 40 hex digits (160 bits).
pub fn new_token(prefix: &str) -> Result<String> {
    let mut bytes = [0u8; 20];
    getrandom::fill(&mut bytes)
        .map_err(|e| Error::internal(format!("no randomness for a token: {e}")))?;
    let mut s = String::with_capacity(prefix.len() + 40);
    s.push_str(prefix);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    Ok(s)
}

/// The single search token of a record's label, in both stores' search columns: `x`
/// followed by the lowercase hex of its UTF-8 bytes (`"ab"` -> `"x6162"`), so a label
/// matches exactly, case and all. An empty label (no label) gives the empty string.
pub fn label_token(label: &str) -> String {
    if label.is_empty() {
        return String::new();
    }
    let mut out = String::with_capacity(1 + 2 * label.len());
    out.push('x');
    for b in label.bytes() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// A count or number from the API as the stores keep it (a signed 64-bit integer),
/// capped at `i64::MAX`.
pub fn clamp_u64(n: u64) -> i64 {
    n.min(i64::MAX as u64) as i64
}

/// The key in `meta` under which the hub's state `key` lives, apart from the admin token.
pub fn hub_state_key(key: &str) -> String {
    format!("state.{key}")
}

/// A turn report as the stores keep it: JSON text.
pub fn encode_turn(report: &agensh_protocol::dashboard::TurnReport) -> Result<String> {
    serde_json::to_string(report)
        .map_err(|e| Error::internal(format!("cannot encode a turn report: {e}")))
}

/// A stored turn report read back.
pub fn decode_turn(text: &str) -> Result<agensh_protocol::dashboard::TurnReport> {
    serde_json::from_str(text)
        .map_err(|e| Error::internal(format!("a stored turn report does not read: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_token_encoding() {
        assert_eq!(label_token("ab"), "x6162");
        assert_eq!(label_token("parser-v2"), "x7061727365722d7632");
        assert_eq!(label_token("é"), "xc3a9");
        assert_eq!(label_token(""), "");
    }

    #[test]
    fn a_token_is_its_prefix_and_forty_hex_digits() {
        let t = new_token("agw_").unwrap();
        assert!(t.starts_with("agw_") && t.len() == 44, "{t}");
        assert!(t[4..].bytes().all(|b| b.is_ascii_hexdigit()), "{t}");
        assert_ne!(t, new_token("agw_").unwrap());
    }
}
