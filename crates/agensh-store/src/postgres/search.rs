//! The PostgreSQL dialect of the grep query language: the tokens stored per record and the
//! translation of a parsed [`Query`] into one SQL condition with bind parameters.
//!
//! # The tokens
//!
//! Results must be those of the SQLite store, whose FTS5 table splits text with FTS5's
//! `unicode61` tokenizer (letters, digits and private-use characters make tokens; case
//! folded, diacritics removed). Rather than imitate that tokenizer, both sides of a match
//! are tokenized by it: [`tokens`] runs text through an in-memory FTS5 table of the bundled
//! SQLite (which this crate links anyway) and reads the tokens back in order with
//! `fts5vocab`. Each record row holds:
//!
//! - `text_tokens`, `detail_tokens`: the tokens of its text and detail in order (phrases
//!   match inside one column, as in FTS5),
//! - `words`: the distinct tokens of both, under a GIN index (a word is `words @> {w}`),
//! - `author_tokens`: the tokens of the author (the `author:` filter is a phrase there),
//! - `label_token`: `sqlite::fts::label_token` of its label (`''` when none), so a label
//!   matches exactly, case and all,
//! - `kind`: the kind's name.
//!
//! # The translation
//!
//! Each node becomes a boolean SQL expression over those columns; every piece of user
//! text becomes a bind parameter (its tokens as a `text[]`), never SQL. A word of one token
//! is `words @> $n`; a phrase (or a word that tokenizes to several tokens, like
//! `http://x`) is `agensh_phrase(text_tokens, $n, prefix) OR agensh_phrase(detail_tokens,
//! …)`, a schema function that finds the tokens side by side, the last one as a prefix for
//! `pars*`. A word or phrase with no token matches nothing (as an empty FTS5 phrase does).
//! `NOT`, `AND` and `OR` are SQL's own: every column is `NOT NULL`, so there is no third
//! truth value to make `NOT` differ from FTS5's subtraction.

use std::cell::RefCell;

use agensh_domain::query::Query;
use rusqlite::Connection;
use tokio_postgres::types::ToSql;

use crate::sqlite::fts::label_token;

thread_local! {
    static TOKENIZER: RefCell<Option<Connection>> = const { RefCell::new(None) };
}

fn tokenizer() -> rusqlite::Result<Connection> {
    let c = Connection::open_in_memory()?;
    c.execute_batch(
        "CREATE VIRTUAL TABLE t USING fts5(x);
         CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance');",
    )?;
    Ok(c)
}

fn run_tokenizer(c: &Connection, text: &str) -> rusqlite::Result<Vec<String>> {
    c.execute("INSERT INTO t(rowid, x) VALUES (1, ?1)", [text])?;
    let out = {
        let mut stmt = c.prepare_cached("SELECT term FROM v WHERE doc = 1 ORDER BY \"offset\"")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
    };
    c.execute("DELETE FROM t WHERE rowid = 1", [])?;
    out
}

/// The tokens FTS5's `unicode61` tokenizer makes of `text`, in order.
pub fn tokens(text: &str) -> Vec<String> {
    if text.is_empty() {
        return Vec::new();
    }
    TOKENIZER.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(tokenizer().expect("an in-memory FTS5 table opens"));
        }
        let c = slot.as_ref().expect("tokenizer");
        match run_tokenizer(c, text) {
            Ok(t) => t,
            Err(e) => {
                // Start again with a fresh table next time; this text gets none.
                tracing::error!("store: the tokenizer failed: {e}");
                *slot = None;
                Vec::new()
            }
        }
    })
}

/// The search columns of one record (see the module documentation).
pub struct RecordTokens {
    pub text: Vec<String>,
    pub detail: Vec<String>,
    pub words: Vec<String>,
    pub author: Vec<String>,
    pub label: String,
}

impl RecordTokens {
    pub fn of(text: &str, detail: Option<&str>, author: &str, label: Option<&str>) -> Self {
        let text = tokens(text);
        let detail = tokens(detail.unwrap_or(""));
        let mut words: Vec<String> = text.iter().chain(&detail).cloned().collect();
        words.sort();
        words.dedup();
        RecordTokens {
            text,
            detail,
            words,
            author: tokens(&author.to_ascii_lowercase()),
            label: label.map(label_token).unwrap_or_default(),
        }
    }
}

/// A SQL condition over the record columns (`r.`) and its bind parameters, numbered from
/// `first` on.
pub struct Condition {
    pub sql: String,
    pub params: Vec<Box<dyn ToSql + Sync + Send>>,
    first: usize,
}

impl Condition {
    /// The condition for `query`; its parameters are `$first`, `$first+1`, …
    pub fn of(query: &Query, first: usize) -> Self {
        let mut c = Condition {
            sql: String::new(),
            params: Vec::new(),
            first,
        };
        c.sql = c.node(query);
        c
    }

    fn param(&mut self, p: impl ToSql + Sync + Send + 'static) -> String {
        self.params.push(Box::new(p));
        format!("${}", self.first + self.params.len() - 1)
    }

    fn node(&mut self, q: &Query) -> String {
        match q {
            Query::Word { text, prefix } => self.phrase(tokens(text), *prefix),
            Query::Phrase(p) => self.phrase(tokens(p), false),
            Query::Kind(k) => {
                let p = self.param(k.as_str().to_string());
                format!("r.kind = {p}")
            }
            Query::Author(a) => {
                let t = tokens(&a.to_lowercase());
                if t.is_empty() {
                    return "FALSE".into();
                }
                let p = self.param(t);
                format!("(r.author_tokens @> {p} AND agensh_phrase(r.author_tokens, {p}, false))")
            }
            Query::Label(l) => {
                let t = label_token(l);
                if t.is_empty() {
                    return "FALSE".into();
                }
                let p = self.param(t);
                format!("r.label_token = {p}")
            }
            Query::Not(inner) => format!("(NOT {})", self.node(inner)),
            Query::And(children) => self.join(children, " AND ", "TRUE"),
            Query::Or(children) => self.join(children, " OR ", "FALSE"),
        }
    }

    fn join(&mut self, children: &[Query], op: &str, empty: &str) -> String {
        if children.is_empty() {
            return empty.into();
        }
        let parts: Vec<String> = children.iter().map(|c| self.node(c)).collect();
        format!("({})", parts.join(op))
    }

    fn phrase(&mut self, t: Vec<String>, prefix: bool) -> String {
        match (t.len(), prefix) {
            (0, _) => "FALSE".into(),
            (1, false) => {
                let p = self.param(t);
                format!("r.words @> {p}")
            }
            (1, true) => {
                let p = self.param(t[0].clone());
                format!("EXISTS (SELECT 1 FROM unnest(r.words) w WHERE starts_with(w, {p}))")
            }
            (n, _) => {
                // Every whole token must be among the words (the index), then side by side.
                let whole: Vec<String> = if prefix {
                    t[..n - 1].to_vec()
                } else {
                    t.clone()
                };
                let w = self.param(whole);
                let p = self.param(t);
                format!(
                    "(r.words @> {w} AND (agensh_phrase(r.text_tokens, {p}, {prefix}) OR agensh_phrase(r.detail_tokens, {p}, {prefix})))"
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use agensh_domain::query::parse;

    use super::*;

    #[test]
    fn tokens_are_unicode61s() {
        assert_eq!(
            tokens("The parser-v2, http://x 1.85"),
            ["the", "parser", "v2", "http", "x", "1", "85"]
        );
        assert_eq!(tokens("Café ÜBER naïve"), ["cafe", "uber", "naive"]);
        assert!(tokens("...").is_empty());
        assert!(tokens("").is_empty());
    }

    #[test]
    fn user_text_is_only_in_parameters() {
        let c = Condition::of(
            &parse("\"x'; DROP TABLE records; --\" label:ab").unwrap(),
            3,
        );
        assert!(!c.sql.contains("DROP"), "{}", c.sql);
        assert!(c.sql.contains("$3") && c.sql.contains("$5"), "{}", c.sql);
        assert_eq!(c.params.len(), 3);
    }

    #[test]
    fn empty_vectors_are_total() {
        assert_eq!(Condition::of(&Query::And(vec![]), 1).sql, "TRUE");
        assert_eq!(Condition::of(&Query::Or(vec![]), 1).sql, "FALSE");
        assert_eq!(Condition::of(&parse("...").unwrap(), 1).sql, "FALSE");
    }
}
