//! The PostgreSQL dialect of the grep query language: the tokens stored per record and the
//! translation of a parsed [`Query`] into one SQL condition with bind parameters.
//!
//! # The tokens
//!
//! Results must be those of the SQLite store, whose FTS5 table splits text with FTS5's
//! `unicode61` tokenizer (letters, digits and private-use characters make tokens; case
//! folded, diacritics removed). Rather than imitate that tokenizer, both sides of a match
//! are tokenized by it: [`tokens`] calls it through the FTS5 API of the bundled SQLite
//! (which this crate links anyway). Each record row holds:
//!
//! - `text_tokens`, `detail_tokens`: the tokens of its text and detail in order (phrases
//!   match inside one column, as in FTS5),
//! - `words`: the distinct tokens of both, under a GIN index (a word is `words @> {w}`),
//! - `author_tokens`: the tokens of the author (the `author:` filter is a phrase there),
//! - `label_token`: `common::label_token` of its label (`''` when none), so a label
//!   matches exactly, case and all, as in the SQLite store's `label` column,
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
use std::ffi::{c_char, c_int, c_void};
use std::ptr;

use agensh_domain::query::Query;
use rusqlite::{ffi, Connection};
use tokio_postgres::types::ToSql;

use crate::common::label_token;

/// Longest token FTS5 stores, in bytes: it cuts longer ones there (`FTS5_MAX_TOKEN_SIZE`).
const MAX_TOKEN_BYTES: usize = 32_768;

/// FTS5's own `unicode61` tokenizer, called directly through the `fts5_api` of an
/// in-memory connection of the bundled SQLite, with the options a table declared
/// `fts5(x)` gives it (none): the SQLite store's index and these tokens come from the same
/// code. (Writing into an FTS5 table and reading the tokens back with `fts5vocab` made the
/// same tokens for several times the work: most of the hub's CPU per append.)
struct Unicode61 {
    /// The connection whose FTS5 module owns the tokenizer; it outlives `instance`.
    _conn: Connection,
    methods: ffi::fts5_tokenizer,
    instance: *mut ffi::Fts5Tokenizer,
}

impl Unicode61 {
    fn new() -> Result<Unicode61, String> {
        let conn = Connection::open_in_memory().map_err(|e| e.to_string())?;
        let failed = |what: &str| format!("FTS5's unicode61 tokenizer: {what}");
        // SAFETY: the pointers handed to SQLite live through each call; the statement is
        // finalized before returning; `fts5_api_ptr` is the pointer type FTS5's `fts5(?)`
        // function fills with its API, which lives as long as `conn`.
        unsafe {
            let db = conn.handle();
            let mut stmt = ptr::null_mut();
            let rc = ffi::sqlite3_prepare_v2(
                db,
                c"SELECT fts5(?1)".as_ptr(),
                -1,
                &mut stmt,
                ptr::null_mut(),
            );
            if rc != ffi::SQLITE_OK {
                return Err(failed("SELECT fts5(?) does not prepare"));
            }
            let mut api: *mut ffi::fts5_api = ptr::null_mut();
            ffi::sqlite3_bind_pointer(
                stmt,
                1,
                (&mut api as *mut *mut ffi::fts5_api).cast(),
                c"fts5_api_ptr".as_ptr(),
                None,
            );
            ffi::sqlite3_step(stmt);
            ffi::sqlite3_finalize(stmt);
            let find = match api.as_ref().and_then(|a| a.xFindTokenizer) {
                Some(f) => f,
                None => return Err(failed("FTS5 gave no API")),
            };
            let mut user_data = ptr::null_mut();
            let mut methods = ffi::fts5_tokenizer {
                xCreate: None,
                xDelete: None,
                xTokenize: None,
            };
            if find(api, c"unicode61".as_ptr(), &mut user_data, &mut methods) != ffi::SQLITE_OK {
                return Err(failed("not found"));
            }
            let (Some(create), Some(_), Some(_)) =
                (methods.xCreate, methods.xDelete, methods.xTokenize)
            else {
                return Err(failed("incomplete"));
            };
            let mut instance = ptr::null_mut();
            if create(user_data, ptr::null_mut(), 0, &mut instance) != ffi::SQLITE_OK
                || instance.is_null()
            {
                return Err(failed("cannot be created"));
            }
            Ok(Unicode61 {
                _conn: conn,
                methods,
                instance,
            })
        }
    }

    /// The tokens of `text` in order, as FTS5 indexes them.
    fn tokens(&self, text: &str) -> Result<Vec<String>, String> {
        unsafe extern "C" fn push(
            ctx: *mut c_void,
            _flags: c_int,
            token: *const c_char,
            len: c_int,
            _start: c_int,
            _end: c_int,
        ) -> c_int {
            // SAFETY: `ctx` is the `Vec` `tokens` passes, and `token` points at `len`
            // bytes for the duration of this call.
            let out = unsafe { &mut *ctx.cast::<Vec<String>>() };
            // SAFETY: as above: `token` points at `len` readable bytes during this call.
            let bytes =
                unsafe { std::slice::from_raw_parts(token.cast::<u8>(), len.max(0) as usize) };
            let bytes = &bytes[..bytes.len().min(MAX_TOKEN_BYTES)];
            out.push(String::from_utf8_lossy(bytes).into_owned());
            ffi::SQLITE_OK
        }
        let len =
            c_int::try_from(text.len()).map_err(|_| "text too long to tokenize".to_string())?;
        let mut out: Vec<String> = Vec::new();
        let tokenize = self.methods.xTokenize.expect("checked when created");
        // SAFETY: `instance` was made by this tokenizer's xCreate and is deleted only on
        // drop; `text` and `out` outlive the call, which is synchronous.
        let rc = unsafe {
            tokenize(
                self.instance,
                (&mut out as *mut Vec<String>).cast(),
                ffi::FTS5_TOKENIZE_DOCUMENT,
                text.as_ptr().cast(),
                len,
                Some(push),
            )
        };
        if rc != ffi::SQLITE_OK {
            return Err(format!("FTS5's unicode61 tokenizer failed ({rc})"));
        }
        Ok(out)
    }
}

impl Drop for Unicode61 {
    fn drop(&mut self) {
        if let Some(delete) = self.methods.xDelete {
            // SAFETY: made by xCreate, deleted once, before the connection closes.
            unsafe { delete(self.instance) };
        }
    }
}

thread_local! {
    static TOKENIZER: RefCell<Option<Unicode61>> = const { RefCell::new(None) };
}

/// The tokens FTS5's `unicode61` tokenizer makes of `text`, in order.
pub fn tokens(text: &str) -> Vec<String> {
    if text.is_empty() {
        return Vec::new();
    }
    TOKENIZER.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(Unicode61::new().expect("FTS5's unicode61 tokenizer is built in"));
        }
        let t = slot.as_ref().expect("tokenizer");
        match t.tokens(text) {
            Ok(t) => t,
            Err(e) => {
                // Start again with a fresh tokenizer next time; this text gets none.
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

    /// The tokens an FTS5 table declared `fts5(x)` indexes for `text`, read back in order
    /// with `fts5vocab`: what the SQLite store's index holds.
    fn indexed(c: &Connection, text: &str) -> Vec<String> {
        c.execute("INSERT INTO t(rowid, x) VALUES (1, ?1)", [text])
            .unwrap();
        let mut stmt = c
            .prepare_cached("SELECT term FROM v WHERE doc = 1 ORDER BY \"offset\"")
            .unwrap();
        let out = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .unwrap()
            .collect::<rusqlite::Result<Vec<_>>>()
            .unwrap();
        c.execute("DELETE FROM t WHERE rowid = 1", []).unwrap();
        out
    }

    #[test]
    fn tokens_are_those_an_fts5_table_indexes() {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch(
            "CREATE VIRTUAL TABLE t USING fts5(x);
             CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance');",
        )
        .unwrap();
        // Letters, digits, marks, punctuation, symbols, spaces and private-use characters
        // of many scripts, mixed by a fixed pseudo-random sequence.
        let alphabet: Vec<char> =
            "aZ09_-.,:/'\"ÀéÎõüßÆøÇñ İıſﬁ Ωωάϊ Жжё אב عربي 中文字 かなカナ 한글 ½²٣ \
             \u{0301}\u{0308}\u{200b}\u{00a0}\u{3000}\t\n\u{e000}\u{f8ff}😀👍🏽 ﬀＡｂ１"
                .chars()
                .collect();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        for _ in 0..2_000 {
            let len = next(40);
            let text: String = (0..len).map(|_| alphabet[next(alphabet.len())]).collect();
            assert_eq!(tokens(&text), indexed(&c, &text), "{text:?}");
        }
        let long = "w".repeat(9_000);
        assert_eq!(tokens(&long), indexed(&c, &long));
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
