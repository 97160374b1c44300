//! Runs compiled grep queries against a real SQLite FTS5 table laid out like the store's
//! (`text, detail, kind, author, label`, default unicode61 tokenizer) and checks, against a
//! hand-checked corpus, which records each query returns; then runs the same hand-checked
//! and generated queries through `Store::grep` of the SQLite store and of the PostgreSQL
//! store (its own translation, `postgres/search.rs`) over the corpus and Unicode rows, and
//! requires the same records from both.

mod common;

use agensh_domain::query::{parse, Query, MAX_NESTING};
use agensh_domain::record::NewRecord;
use agensh_domain::record::RecordKind;
use agensh_store::sqlite::fts::{kind_token, label_token, match_expression};
use rusqlite::{params, Connection};

/// (rowid, kind, author, label, text, detail)
type Row = (
    i64,
    &'static str,
    &'static str,
    Option<&'static str>,
    &'static str,
    &'static str,
);

const CORPUS: &[Row] = &[
    (
        1,
        "FACT",
        "w01",
        Some("parser-v2"),
        "the parser rejects trailing commas",
        "",
    ),
    (
        2,
        "OBSERVED",
        "w02",
        Some("parser-v2"),
        "parsing takes 3s on big files",
        "measured with hyperfine",
    ),
    (
        3,
        "FAIL",
        "W01",
        None,
        "merge conflict in lexer.rs",
        "rebase onto main failed",
    ),
    (
        4,
        "CLAIM",
        "w03",
        Some("lexer"),
        "claiming the lexer rewrite",
        "",
    ),
    (
        5,
        "PATCH_SUMMARY",
        "w02",
        Some("parser-v2"),
        "rewrote the parser error recovery",
        "conflict resolved by hand",
    ),
    (
        6,
        "FACT",
        "admin",
        None,
        "CI uses rust 1.85",
        "and clippy runs too",
    ),
    (
        7,
        "OBSERVED",
        "w03",
        Some("Parser-V2"),
        "tokenizer is slow",
        "see flamegraph",
    ),
    (
        8,
        "FAIL",
        "w04",
        Some("area:parser"),
        "conflict about merge order",
        "",
    ),
    (9, "CLAIM", "w01", None, "cats and dogs", "or not"),
    (10, "FACT", "w02", None, "config says \"quoted\" value", ""),
    (
        11,
        "OBSERVED",
        "w04",
        None,
        "endpoint http://x returns 500",
        "",
    ),
    (
        12,
        "FACT",
        "w03",
        Some("lexer"),
        "the lexer handles unicode identifiers",
        "parser untouched",
    ),
];

fn corpus() -> Connection {
    let db = Connection::open_in_memory().unwrap();
    db.execute_batch(
        "CREATE VIRTUAL TABLE board_fts USING fts5(text, detail, kind, author, label);",
    )
    .unwrap();
    for (rowid, kind, author, label, text, detail) in CORPUS {
        db.execute(
            "INSERT INTO board_fts(rowid, text, detail, kind, author, label) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                rowid,
                text,
                detail,
                kind_token(RecordKind::parse(kind).expect("known kind")),
                author.to_lowercase(),
                label.map(label_token).unwrap_or_default(),
            ],
        )
        .unwrap();
    }
    db
}

fn run(db: &Connection, fts: &str) -> Vec<i64> {
    let mut stmt = db
        .prepare("SELECT rowid FROM board_fts WHERE board_fts MATCH ?1 ORDER BY rowid")
        .unwrap();
    let rows = stmt
        .query_map([fts], |r| r.get::<_, i64>(0))
        .unwrap_or_else(|e| panic!("FTS5 rejected {fts:?}: {e}"));
    rows.collect::<Result<Vec<_>, _>>()
        .unwrap_or_else(|e| panic!("FTS5 rejected {fts:?}: {e}"))
}

fn grep(db: &Connection, query: &str) -> Vec<i64> {
    let q = parse(query).unwrap_or_else(|e| panic!("{query:?}: {e}"));
    run(db, &match_expression(&q))
}

#[test]
fn hand_checked_corpus() {
    let db = corpus();
    let cases: &[(&str, &[i64])] = &[
        // words search text and detail only
        ("parser", &[1, 5, 12]),
        ("fact", &[]),
        ("w01", &[]),
        ("x7061727365722d7632", &[]),
        // prefix
        ("pars*", &[1, 2, 5, 12]),
        ("rewr*", &[4, 5]),
        // phrase versus implicit AND
        ("\"merge conflict\"", &[3]),
        ("merge conflict", &[3, 8]),
        ("merge AND conflict", &[3, 8]),
        // filters
        ("kind:FACT", &[1, 6, 10, 12]),
        ("kind:patch_summary", &[5]),
        ("kind:fail OR kind:Observed", &[2, 3, 7, 8, 11]),
        ("author:W01", &[1, 3, 9]),
        ("label:parser-v2", &[1, 2, 5]),
        ("label:Parser-V2", &[7]),
        ("label:area:parser", &[8]),
        ("label:\"lexer\" author:w03", &[4, 12]),
        // NOT, minus, universe
        ("parser -kind:PATCH_SUMMARY", &[1, 12]),
        ("parser NOT kind:PATCH_SUMMARY", &[1, 12]),
        ("NOT kind:FACT", &[2, 3, 4, 5, 7, 8, 9, 11]),
        ("-conflict -kind:FACT", &[2, 4, 7, 9, 11]),
        ("NOT NOT kind:CLAIM", &[4, 9]),
        ("-pars* kind:FACT", &[6, 10]),
        ("-(parser OR lexer) kind:FACT", &[6, 10]),
        // chained binary NOTs subtract each (left-associative)
        ("parser -untouched -recovery", &[1]),
        // OR and precedence
        ("conflict OR kind:CLAIM", &[3, 4, 5, 8, 9]),
        ("lexer OR parser kind:FACT", &[1, 3, 4, 12]),
        ("(lexer OR parser) kind:FACT", &[1, 12]),
        ("lexer OR -kind:FACT", &[2, 3, 4, 5, 7, 8, 9, 11, 12]),
        // lowercase operators are words
        ("cats and dogs", &[9]),
        ("dogs not", &[9]),
        // quoting
        ("\"says \"\"quoted\"\" value\"", &[10]),
        ("\"x\"\" OR kind : \"\"fact\"", &[]),
        ("http://x", &[11]),
        ("1.85", &[6]),
        // a word with nothing to search for matches nothing
        ("...", &[]),
        ("parser -...", &[1, 5, 12]),
    ];
    let mut failures = Vec::new();
    for (query, expected) in cases {
        let got = grep(&db, query);
        if got != *expected {
            failures.push(format!(
                "{query:?} -> {} returned {got:?}, expected {expected:?}",
                match_expression(&parse(query).unwrap())
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn empty_and_or_vectors_run() {
    let db = corpus();
    assert_eq!(
        run(&db, &match_expression(&Query::And(vec![]))).len(),
        CORPUS.len()
    );
    assert!(run(&db, &match_expression(&Query::Or(vec![]))).is_empty());
}

// ----- a reference evaluator over the corpus, for generated queries ---------------------

/// Tokens as unicode61 makes them for ASCII text: runs of letters and digits, lowercased.
fn tokens(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
        .collect()
}

fn phrase_in(column: &str, phrase: &str, prefix: bool) -> bool {
    let hay = tokens(column);
    let needle = tokens(phrase);
    if needle.is_empty() {
        return false;
    }
    hay.windows(needle.len()).any(|w| {
        w.iter().zip(&needle).enumerate().all(|(i, (h, n))| {
            if prefix && i == needle.len() - 1 {
                h.starts_with(n.as_str())
            } else {
                h == n
            }
        })
    })
}

fn matches(q: &Query, row: &Row) -> bool {
    let (_, kind, author, label, text, detail) = *row;
    match q {
        Query::Word { text: w, prefix } => {
            phrase_in(text, w, *prefix) || phrase_in(detail, w, *prefix)
        }
        Query::Phrase(p) => phrase_in(text, p, false) || phrase_in(detail, p, false),
        Query::Kind(k) => RecordKind::parse(kind).ok() == Some(*k),
        Query::Author(a) => author.to_lowercase() == *a,
        Query::Label(l) => label == Some(l.as_str()),
        Query::And(cs) => cs.iter().all(|c| matches(c, row)),
        Query::Or(cs) => cs.iter().any(|c| matches(c, row)),
        Query::Not(inner) => !matches(inner, row),
    }
}

fn expected(q: &Query) -> Vec<i64> {
    CORPUS
        .iter()
        .filter(|row| matches(q, row))
        .map(|row| row.0)
        .collect()
}

/// Checks a query against FTS5 and the reference evaluator; returns a failure line.
fn check(db: &Connection, query: &str) -> Option<String> {
    let q = parse(query).unwrap_or_else(|e| panic!("{query:?}: {e}"));
    let fts = match_expression(&q);
    let mut stmt = db
        .prepare("SELECT rowid FROM board_fts WHERE board_fts MATCH ?1 ORDER BY rowid")
        .unwrap();
    let got = stmt
        .query_map([&fts], |r| r.get::<_, i64>(0))
        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>());
    match got {
        Err(e) => Some(format!("{query:?} -> {fts}: FTS5 error {e}")),
        Ok(got) if got != expected(&q) => Some(format!(
            "{query:?} -> {fts}: FTS5 returned {got:?}, reference {:?}",
            expected(&q)
        )),
        Ok(_) => None,
    }
}

#[test]
fn reference_evaluator_agrees_on_the_hand_checked_expectations() {
    // Keeps the reference honest: it must agree with a few hand-checked answers.
    assert_eq!(expected(&parse("pars*").unwrap()), vec![1, 2, 5, 12]);
    assert_eq!(expected(&parse("merge conflict").unwrap()), vec![3, 8]);
    assert_eq!(expected(&parse("\"merge conflict\"").unwrap()), vec![3]);
    assert_eq!(
        expected(&parse("NOT kind:FACT").unwrap()),
        vec![2, 3, 4, 5, 7, 8, 9, 11]
    );
}

#[test]
fn deepest_allowed_queries_are_accepted_by_fts5() {
    // Each template nests itself at S until the parser refuses (nesting or term limit);
    // the deepest accepted query must run in FTS5 and agree with the reference.
    let templates = [
        "a OR -(S)",
        "a -(S)",
        "-(a S)",
        "a (b OR S)",
        "(S) a",
        "(S OR a) b",
        "a OR -(b -(S))",
        "-(a OR -(b S))",
        "a OR (b -(S))",
        "a OR -(S) b",
        "parser OR lexer (S) -conflict",
        "a b OR -(c S) d",
        "-(a OR b) OR -(S) -c",
        "a b -(c OR -(S) -d)",
        "merge OR NOT (kind:FAIL OR S) author:w01",
    ];
    let db = corpus();
    let mut failures = Vec::new();
    for template in templates {
        let mut query = "conflict".to_string();
        loop {
            let next = template.replace('S', &query);
            if parse(&next).is_err() {
                break;
            }
            query = next;
        }
        assert!(
            query.matches('(').count() >= MAX_NESTING,
            "{template}: only reached {query}"
        );
        failures.extend(check(&db, &query));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A small deterministic generator (xorshift64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }
}

const WORDS: &[&str] = &[
    "parser", "pars*", "lexer", "lex*", "merge", "conflict", "the", "rewr*", "cats", "and", "or",
    "not", "dogs", "http://x", "1.85", "missing", "rust", "c*", "w01", "fact",
];
const PHRASES: &[&str] = &[
    "\"merge conflict\"",
    "\"the parser\"",
    "\"conflict about\"",
    "\"lexer rewrite\"",
    "\"nothing here\"",
];
const FILTERS: &[&str] = &[
    "kind:FACT",
    "kind:observed",
    "kind:Fail",
    "kind:CLAIM",
    "kind:PATCH_SUMMARY",
    "author:w01",
    "author:W02",
    "author:w03",
    "author:admin",
    "label:parser-v2",
    "label:Parser-V2",
    "label:lexer",
    "label:area:parser",
    "label:\"nope\"",
];

fn gen_leaf(rng: &mut Rng) -> String {
    match rng.next() % 5 {
        0 | 1 => rng.pick(WORDS).to_string(),
        2 => rng.pick(PHRASES).to_string(),
        _ => rng.pick(FILTERS).to_string(),
    }
}

fn gen_expr(rng: &mut Rng, depth: usize) -> String {
    let n = 1 + (rng.next() % 3) as usize;
    let mut out = String::new();
    for i in 0..n {
        if i > 0 {
            out.push_str(rng.pick(&[" ", " ", " AND ", " OR ", " OR "]));
        }
        out.push_str(rng.pick(&["", "", "", "-", "NOT "]));
        if depth < MAX_NESTING && rng.next() % 10 < 3 {
            out.push('(');
            out.push_str(&gen_expr(rng, depth + 1));
            out.push(')');
        } else {
            out.push_str(&gen_leaf(rng));
        }
    }
    out
}

#[test]
fn generated_queries_agree_with_the_reference() {
    let db = corpus();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut failures = Vec::new();
    let mut checked = 0;
    while checked < 3000 {
        let query = gen_expr(&mut rng, 0);
        match parse(&query) {
            Ok(_) => {
                failures.extend(check(&db, &query));
                checked += 1;
            }
            Err(e) if e.message.starts_with("query has") => {}
            Err(e) => panic!("generated {query:?} did not parse: {e}"),
        }
        if failures.len() >= 10 {
            break;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ----- the two stores against each other --------------------------------------------------

/// Rows beyond the ASCII corpus: case folding and diacritics as unicode61 does them,
/// letters of other scripts, symbols that split words, repeated words for phrases.
const UNICODE_ROWS: &[(&str, &str, Option<&str>, &str, &str)] = &[
    (
        "FACT",
        "w05",
        Some("ünïcode"),
        "Café naïve RÉSUMÉ",
        "über Straße",
    ),
    (
        "OBSERVED",
        "w05",
        None,
        "日本語のテキスト and 中文",
        "emoji 🎉 party_time",
    ),
    (
        "FAIL",
        "w06",
        Some("lexer"),
        "the the the parser parser",
        "x_y snake_case 42abc",
    ),
    (
        "CLAIM",
        "w06",
        None,
        "ΑΒΓ greek Ωmega",
        "multi\nline detail: parser tail",
    ),
];

/// Words the generator adds for the Unicode rows.
const UNICODE_WORDS: &[&str] = &[
    "cafe",
    "café",
    "CAFÉ",
    "naive",
    "resume*",
    "uber",
    "straße",
    "strasse",
    "日本語のテキスト",
    "日本*",
    "中文",
    "🎉",
    "party",
    "party_time",
    "snake*",
    "42abc",
    "αβγ",
    "ωmega",
    "\"the parser\"",
    "\"the the\"",
    "\"parser tail\"",
    "label:ünïcode",
    "author:w05",
    "\"x y\"",
];

async fn corpus_store(t: &common::TestStore) {
    t.add_workers(6, 0).await.unwrap();
    for (rowid, kind, author, label, text, detail) in CORPUS {
        let mut r = NewRecord::new(RecordKind::parse(kind).unwrap(), *text);
        r.label = label.map(str::to_string);
        r.detail = (!detail.is_empty()).then(|| detail.to_string());
        let got = t.append_record(author, r, 0, 3600).await.unwrap();
        assert_eq!(got.record.seq, *rowid, "the corpus is appended in order");
    }
    for (kind, author, label, text, detail) in UNICODE_ROWS {
        let mut r = NewRecord::new(RecordKind::parse(kind).unwrap(), *text);
        r.label = label.map(str::to_string);
        r.detail = Some(detail.to_string());
        t.append_record(author, r, 0, 3600).await.unwrap();
    }
}

async fn store_grep(t: &common::TestStore, q: &Query) -> Result<Vec<i64>, String> {
    let mut got: Vec<i64> = t
        .grep(q, None, 1000)
        .await
        .map_err(|e| e.to_string())?
        .iter()
        .map(|r| r.seq)
        .collect();
    got.sort();
    Ok(got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_stores_answer_every_query_alike() {
    let sqlite = common::TestStore::new(common::Kind::Sqlite).await;
    let postgres = common::TestStore::new(common::Kind::Postgres).await;
    corpus_store(&sqlite).await;
    corpus_store(&postgres).await;

    let mut queries: Vec<String> = Vec::new();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    while queries.len() < 1500 {
        let query = if rng.next().is_multiple_of(4) {
            // A Unicode word in a generated expression.
            format!("{} {}", rng.pick(UNICODE_WORDS), gen_expr(&mut rng, 1))
        } else {
            gen_expr(&mut rng, 0)
        };
        if parse(&query).is_ok() {
            queries.push(query);
        }
    }
    queries.extend(UNICODE_WORDS.iter().map(|w| w.to_string()));
    let mut failures = Vec::new();
    let mut nonempty = 0;
    for query in &queries {
        let q = parse(query).unwrap();
        let (a, b) = (
            store_grep(&sqlite, &q).await,
            store_grep(&postgres, &q).await,
        );
        if a != b {
            failures.push(format!("{query:?}: SQLite {a:?}, PostgreSQL {b:?}"));
        } else if let Ok(rows) = &a {
            nonempty += usize::from(!rows.is_empty());
            // On the ASCII corpus both must also agree with the reference evaluator.
            let ascii: Vec<i64> = rows
                .iter()
                .copied()
                .filter(|s| *s <= CORPUS.len() as i64)
                .collect();
            if query.is_ascii() && ascii != expected(&q) {
                failures.push(format!(
                    "{query:?}: stores {ascii:?}, reference {:?}",
                    expected(&q)
                ));
            }
        }
        if failures.len() >= 10 {
            break;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Guards the generator: most queries must find something.
    assert!(
        nonempty > queries.len() / 3,
        "only {nonempty} of {} queries found anything",
        queries.len()
    );
}
