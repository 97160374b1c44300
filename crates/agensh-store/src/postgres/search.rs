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
//! is `words @> $n`; a prefix of one token (`pars*`) is `words && $n`, the words of the
//! vocabulary table `record_words` that start with it (read first: a range scan of its
//! byte-order btree; the overlap then uses the GIN index, or the newest records first when
//! the planner finds those words common); a phrase (or a word that tokenizes to
//! several tokens, like `http://x`) is `agensh_phrase(text_tokens, $n, prefix) OR
//! agensh_phrase(detail_tokens, …)`, a schema function that finds the tokens side by side,
//! the last one as a prefix for `pars*`. A word or phrase with no token matches nothing (as an empty FTS5 phrase does).
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

/// Most words a prefix is expanded to; a prefix that starts more words (a letter or two)
/// is matched by reading each record's words instead, which finds a page of such common
/// records as fast.
pub const EXPANSION_LIMIT: usize = 10_000;

/// The one-token prefixes of `query` (`pars*`): [`prefix_range`] of each is read from the
/// `record_words` vocabulary before the search, and the words found become a parameter.
pub fn prefixes(query: &Query) -> Vec<String> {
    let mut out = Vec::new();
    collect_prefixes(query, &mut out);
    out.sort();
    out.dedup();
    out
}

fn collect_prefixes(q: &Query, out: &mut Vec<String>) {
    match q {
        Query::Word { text, prefix: true } => {
            let t = tokens(text);
            if t.len() == 1 {
                out.extend(t);
            }
        }
        Query::Not(inner) => collect_prefixes(inner, out),
        Query::And(children) | Query::Or(children) => {
            for c in children {
                collect_prefixes(c, out);
            }
        }
        _ => {}
    }
}

/// What each prefix of [`prefixes`] was expanded to: the vocabulary's words that start
/// with it, or `None` when there are more than [`EXPANSION_LIMIT`].
pub type Expansions = std::collections::HashMap<String, Option<Vec<String>>>;

/// A SQL condition over the record columns (`r.`) and its bind parameters, numbered from
/// `first` on.
pub struct Condition<'a> {
    pub sql: String,
    pub params: Vec<Box<dyn ToSql + Sync + Send>>,
    first: usize,
    expansions: &'a Expansions,
}

impl<'a> Condition<'a> {
    /// The condition for `query`; its parameters are `$first`, `$first+1`, … A prefix
    /// missing from `expansions` reads each record's words.
    pub fn of(query: &Query, first: usize, expansions: &'a Expansions) -> Self {
        let mut c = Condition {
            sql: String::new(),
            params: Vec::new(),
            first,
            expansions,
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
            (1, true) => match self.expansions.get(&t[0]) {
                // The records holding any word that starts with it (the GIN index); a
                // parameter, so the planner weighs how common those words are.
                Some(Some(words)) if words.is_empty() => "FALSE".into(),
                Some(Some(words)) => {
                    let p = self.param(words.clone());
                    format!("r.words && {p}")
                }
                _ => {
                    let p = self.param(t[0].clone());
                    format!("EXISTS (SELECT 1 FROM unnest(r.words) w WHERE starts_with(w, {p}))")
                }
            },
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

/// The strings that start with `prefix`, in code point order (which is UTF-8's byte order,
/// `COLLATE "C"`): from `prefix` itself to below the first string that is greater than
/// all of them — `prefix` with its last character incremented (a last U+10FFFF dropped
/// first) — or to the end when there is none.
pub fn prefix_range(prefix: &str) -> (String, Option<String>) {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = (last as u32 + 1..=char::MAX as u32).find_map(char::from_u32);
        if let Some(next) = next {
            chars.push(next);
            return (prefix.to_string(), Some(chars.into_iter().collect()));
        }
    }
    (prefix.to_string(), None)
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
        let none = Expansions::new();
        let c = Condition::of(
            &parse("\"x'; DROP TABLE records; --\" label:ab").unwrap(),
            3,
            &none,
        );
        assert!(!c.sql.contains("DROP"), "{}", c.sql);
        assert!(c.sql.contains("$3") && c.sql.contains("$5"), "{}", c.sql);
        assert_eq!(c.params.len(), 3);
    }

    #[test]
    fn a_prefix_range_holds_exactly_the_strings_that_start_with_it() {
        assert_eq!(prefix_range("par"), ("par".into(), Some("pas".into())));
        assert_eq!(prefix_range("az"), ("az".into(), Some("a{".into())));
        // Past the surrogates, and past the last code point.
        assert_eq!(
            prefix_range("a\u{d7ff}"),
            ("a\u{d7ff}".into(), Some("a\u{e000}".into()))
        );
        assert_eq!(
            prefix_range("b\u{10ffff}"),
            ("b\u{10ffff}".into(), Some("c".into()))
        );
        assert_eq!(prefix_range("\u{10ffff}").1, None);
        let (from, below) = prefix_range("caf");
        let below = below.unwrap();
        for w in ["caf", "cafe", "caf\u{10ffff}x", "cafz"] {
            assert!(w >= from.as_str() && w < below.as_str(), "{w}");
        }
        for w in ["cae", "cag", "ca", "cb"] {
            assert!(!(w >= from.as_str() && w < below.as_str()), "{w}");
        }
    }

    #[test]
    fn empty_vectors_are_total() {
        let none = Expansions::new();
        assert_eq!(Condition::of(&Query::And(vec![]), 1, &none).sql, "TRUE");
        assert_eq!(Condition::of(&Query::Or(vec![]), 1, &none).sql, "FALSE");
        assert_eq!(Condition::of(&parse("...").unwrap(), 1, &none).sql, "FALSE");
    }

    #[test]
    fn a_prefix_is_its_expansion_or_else_each_records_words() {
        let q = parse("pars* (NOT zz*) \"a b*\" word").unwrap();
        assert_eq!(prefixes(&q), ["pars", "zz"]);
        let mut e = Expansions::new();
        e.insert("pars".into(), Some(vec!["parse".into(), "parser".into()]));
        e.insert("zz".into(), Some(Vec::new()));
        let c = Condition::of(&q, 1, &e);
        assert!(c.sql.contains("r.words && $1"), "{}", c.sql);
        assert!(c.sql.contains("(NOT FALSE)"), "{}", c.sql);
        let mut common = Expansions::new();
        common.insert("pars".into(), None);
        let c = Condition::of(&parse("pars*").unwrap(), 1, &common);
        assert!(c.sql.contains("starts_with"), "{}", c.sql);
    }
}
