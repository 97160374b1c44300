//! The board's `grep` query language: parsed into a [`Query`] and compiled into one
//! SQLite FTS5 `MATCH` expression.
//!
//! # What a user types
//!
//! - words: `parser` matches in a record's text or detail; a trailing `*` searches by
//!   prefix (`pars*`);
//! - phrases: `"merge conflict"`; a `""` inside a phrase stands for one literal `"`;
//! - operators `AND`, `OR`, `NOT` (uppercase only: `and`, `or`, `not` are ordinary words)
//!   and parentheses; two terms side by side mean `AND`. `NOT` binds tighter than `AND`,
//!   which binds tighter than `OR`. A leading `-` on a term, filter or group is shorthand for
//!   `NOT` (`parser -kind:FAIL`);
//! - filters: `kind:FACT` (any case; one of FACT, OBSERVED, FAIL, CLAIM, PATCH_SUMMARY),
//!   `author:w01` (any case) and `label:parser-v2` (exact); a filter's value may be quoted
//!   (`label:"a b"`) and may not be empty. Any other `name:` prefix (`http://x`, `foo:bar`)
//!   is an ordinary word. Filter names may be written in any case (`KIND:fact`);
//! - at most [`MAX_QUERY_CHARS`] characters and [`MAX_TERMS`] terms (words, phrases and
//!   filters).
//!
//! # The FTS5 table this compiles for
//!
//! Columns, in order: `text`, `detail`, `kind`, `author`, `label`, default `unicode61`
//! tokenizer. `kind` holds [`kind_token`] of the record's kind, `author` the worker id in
//! lowercase and `label` [`label_token`] of the label (empty when there is none). The store
//! must use these two functions when it inserts rows so that filters match exactly.
//!
//! # Compilation
//!
//! Every piece of user text becomes an FTS5 string literal (`"..."`, inner `"` doubled), so
//! user text never turns into FTS5 syntax. Words and phrases are limited to the text and
//! detail columns (`{text detail} : "x"`, `{text detail} : "pars" *` for a prefix), filters
//! to their column (`kind : "fact"`). FTS5's `NOT` is binary, so a negated part is always
//! subtracted from something: from the positive parts of the same `AND`, or else from the
//! universe of all records, `kind : ("fact" OR "observed" OR "fail" OR "claim" OR
//! "patchsummary")`. Every operand is parenthesized so FTS5's precedence never matters.

use std::fmt;

/// Longest query, in characters.
pub const MAX_QUERY_CHARS: usize = 1000;
/// Most terms (words, phrases and filters) in one query.
pub const MAX_TERMS: usize = 64;
/// Deepest nesting of parentheses. SQLite's FTS5 query parser has a fixed stack of 100
/// entries and one level of the user's parentheses can cost up to 7 of them once compiled
/// (an operand after `OR`, inside the positive part of an `AND` with a `NOT`), so deeper
/// queries would fail inside SQLite with "fts5: parser stack overflow".
pub const MAX_NESTING: usize = 8;

/// Matches every record: the left operand of a `NOT` that has no positive part.
const UNIVERSE: &str = r#"kind : ("fact" OR "observed" OR "fail" OR "claim" OR "patchsummary")"#;

/// The kind tokens, in the order [`UNIVERSE`] lists them.
const KINDS: [&str; 5] = ["fact", "observed", "fail", "claim", "patchsummary"];

/// Restricts words and phrases to the free-text columns.
const TEXT_COLUMNS: &str = "{text detail}";

/// A parsed grep query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Query {
    /// A word in text or detail; `prefix` when it ended in `*` (which is not in `text`).
    Word { text: String, prefix: bool },
    /// A quoted phrase in text or detail.
    Phrase(String),
    /// `kind:...`, holding the kind's FTS5 token (see [`kind_token`]).
    Kind(&'static str),
    /// `author:...`, holding the worker id in lowercase.
    Author(String),
    /// `label:...`, holding the exact label (encoded by [`label_token`] when compiled).
    Label(String),
    /// All of these.
    And(Vec<Query>),
    /// Any of these.
    Or(Vec<Query>),
    /// Not this.
    Not(Box<Query>),
}

/// Why a query could not be parsed; the message says what is wrong and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct QueryError {
    pub message: String,
}

impl QueryError {
    fn new(message: impl Into<String>) -> Self {
        QueryError {
            message: message.into(),
        }
    }
}

/// The single FTS5 token stored in the `label` column for `label`: `x` followed by the
/// lowercase hex of its UTF-8 bytes (`"ab"` -> `"x6162"`). An empty label (no label) gives
/// the empty string.
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

/// The FTS5 token stored in the `kind` column for a kind name, case-insensitively:
/// FACT -> `fact`, OBSERVED -> `observed`, FAIL -> `fail`, CLAIM -> `claim`,
/// PATCH_SUMMARY (or PATCHSUMMARY) -> `patchsummary`. `None` for anything else.
pub fn kind_token(kind: &str) -> Option<&'static str> {
    let upper = kind.to_ascii_uppercase();
    match upper.as_str() {
        "FACT" => Some("fact"),
        "OBSERVED" => Some("observed"),
        "FAIL" => Some("fail"),
        "CLAIM" => Some("claim"),
        "PATCH_SUMMARY" | "PATCHSUMMARY" => Some("patchsummary"),
        _ => None,
    }
}

/// Parses a grep query.
pub fn parse(input: &str) -> Result<Query, QueryError> {
    let n = input.chars().count();
    if n > MAX_QUERY_CHARS {
        return Err(QueryError::new(format!(
            "query is {n} characters long — shorten it to at most {MAX_QUERY_CHARS} characters"
        )));
    }
    let tokens = lex(input)?;
    if tokens.is_empty() {
        return Err(QueryError::new(
            "empty query — give at least one word, \"phrase\" or filter like kind:FACT",
        ));
    }
    let terms = tokens
        .iter()
        .filter(|t| matches!(t.tok, Tok::Term(_)))
        .count();
    if terms > MAX_TERMS {
        return Err(QueryError::new(format!(
            "query has {terms} terms — use at most {MAX_TERMS} words, phrases and filters"
        )));
    }
    let mut parser = Parser {
        toks: tokens,
        i: 0,
        depth: 0,
    };
    let query = parser.parse_or()?;
    if let Some(t) = parser.peek() {
        // parse_or stops only at the end or at a ")" it has no "(" for.
        return Err(QueryError::new(format!(
            "unbalanced parenthesis at character {} — remove this \")\" or open it with \"(\" before",
            t.pos
        )));
    }
    Ok(query)
}

impl Query {
    /// The FTS5 `MATCH` expression for this query (see the module documentation).
    pub fn to_fts5(&self) -> String {
        // A query about kinds alone (`NOT kind:FACT`, `kind:FAIL OR kind:CLAIM`) becomes the
        // list of kinds it matches: FTS5 answers that at once, while subtracting from the
        // universe walks every record of the subtracted kinds.
        if !matches!(self, Query::Kind(_)) {
            if let Some(kinds) = self.kind_set() {
                return kinds_expression(&kinds);
            }
        }
        match self {
            Query::Word { text, prefix } => {
                let star = if *prefix { " *" } else { "" };
                format!("{TEXT_COLUMNS} : {}{star}", fts5_string(text))
            }
            Query::Phrase(p) => format!("{TEXT_COLUMNS} : {}", fts5_string(p)),
            Query::Kind(k) => format!("kind : {}", fts5_string(k)),
            Query::Author(a) => format!("author : {}", fts5_string(&a.to_lowercase())),
            Query::Label(l) => format!("label : {}", fts5_string(&label_token(l))),
            Query::Not(inner) => format!("({UNIVERSE}) NOT ({})", inner.to_fts5()),
            Query::Or(children) => match children.as_slice() {
                [] => format!("({UNIVERSE}) NOT ({UNIVERSE})"),
                [only] => only.to_fts5(),
                _ => join_parenthesized(children.iter(), " OR "),
            },
            Query::And(children) => {
                if let [only] = children.as_slice() {
                    return only.to_fts5();
                }
                let (negatives, positives): (Vec<&Query>, Vec<&Query>) =
                    children.iter().partition(|c| matches!(c, Query::Not(_)));
                if negatives.is_empty() && !positives.is_empty() {
                    return join_parenthesized(positives.into_iter(), " AND ");
                }
                let mut out = match positives.as_slice() {
                    [] => format!("({UNIVERSE})"),
                    [only] => format!("({})", only.to_fts5()),
                    _ => format!("({})", join_parenthesized(positives.into_iter(), " AND ")),
                };
                for n in negatives {
                    if let Query::Not(inner) = n {
                        out.push_str(&format!(" NOT ({})", inner.to_fts5()));
                    }
                }
                out
            }
        }
    }
}

impl fmt::Display for Query {
    /// The query in the user language with explicit operators and every `AND`/`OR` group
    /// in parentheses, e.g. `(parser AND NOT kind:FAIL) OR lexer`. It parses back to an
    /// equal query unless that would need more than [`MAX_NESTING`] parentheses.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Query::Word { text, prefix } => {
                write!(f, "{text}{}", if *prefix { "*" } else { "" })
            }
            Query::Phrase(p) => write!(f, "\"{}\"", p.replace('"', "\"\"")),
            Query::Kind(k) => {
                let name = match *k {
                    "patchsummary" => "PATCH_SUMMARY".to_string(),
                    other => other.to_ascii_uppercase(),
                };
                write!(f, "kind:{name}")
            }
            Query::Author(a) => write!(f, "author:{}", filter_value(a)),
            Query::Label(l) => write!(f, "label:{}", filter_value(l)),
            Query::Not(inner) if is_group(inner) => write!(f, "NOT ({inner})"),
            Query::Not(inner) => write!(f, "NOT {inner}"),
            Query::And(children) | Query::Or(children) => {
                let op = if matches!(self, Query::And(_)) {
                    " AND "
                } else {
                    " OR "
                };
                for (i, c) in children.iter().enumerate() {
                    if i > 0 {
                        f.write_str(op)?;
                    }
                    if is_group(c) {
                        write!(f, "({c})")?;
                    } else {
                        write!(f, "{c}")?;
                    }
                }
                Ok(())
            }
        }
    }
}

fn is_group(q: &Query) -> bool {
    matches!(q, Query::And(_) | Query::Or(_))
}

/// A filter value as the user language writes it: bare when it can be, else quoted.
fn filter_value(v: &str) -> String {
    if v.is_empty() || v.chars().any(ends_word) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_string()
    }
}

/// An FTS5 string literal: `s` in double quotes with every inner `"` doubled.
fn fts5_string(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// The exact set of kinds `q` matches, when `q` is made of kind filters only.
impl Query {
    fn kind_set(&self) -> Option<Vec<&'static str>> {
        let all = || KINDS.to_vec();
        match self {
            Query::Kind(k) => Some(vec![*k]),
            Query::Not(inner) => {
                let inner = inner.kind_set()?;
                Some(all().into_iter().filter(|k| !inner.contains(k)).collect())
            }
            Query::Or(children) => {
                let mut set = Vec::new();
                for c in children {
                    set.extend(c.kind_set()?);
                }
                Some(all().into_iter().filter(|k| set.contains(k)).collect())
            }
            Query::And(children) => {
                let mut set = all();
                for c in children {
                    let s = c.kind_set()?;
                    set.retain(|k| s.contains(k));
                }
                Some(set)
            }
            _ => None,
        }
    }
}

/// Matches records of exactly `kinds` (nothing when empty).
fn kinds_expression(kinds: &[&str]) -> String {
    match kinds {
        [] => format!("({UNIVERSE}) NOT ({UNIVERSE})"),
        [only] => format!("kind : {}", fts5_string(only)),
        _ => format!(
            "kind : ({})",
            kinds
                .iter()
                .map(|k| fts5_string(k))
                .collect::<Vec<_>>()
                .join(" OR ")
        ),
    }
}

fn join_parenthesized<'a>(items: impl Iterator<Item = &'a Query>, op: &str) -> String {
    items
        .map(|q| format!("({})", q.to_fts5()))
        .collect::<Vec<_>>()
        .join(op)
}

/// `AND` of `items`, flattening nested `AND`s; one item stands for itself.
fn and_of(items: Vec<Query>) -> Query {
    let mut flat = Vec::with_capacity(items.len());
    for q in items {
        match q {
            Query::And(inner) => flat.extend(inner),
            other => flat.push(other),
        }
    }
    if flat.len() == 1 {
        flat.pop().unwrap_or(Query::And(Vec::new()))
    } else {
        Query::And(flat)
    }
}

/// `OR` of `items`, flattening nested `OR`s; one item stands for itself.
fn or_of(items: Vec<Query>) -> Query {
    let mut flat = Vec::with_capacity(items.len());
    for q in items {
        match q {
            Query::Or(inner) => flat.extend(inner),
            other => flat.push(other),
        }
    }
    if flat.len() == 1 {
        flat.pop().unwrap_or(Query::Or(Vec::new()))
    } else {
        Query::Or(flat)
    }
}

/// `NOT q`, cancelling a double negation.
fn not_of(q: Query) -> Query {
    match q {
        Query::Not(inner) => *inner,
        other => Query::Not(Box::new(other)),
    }
}

/// Shortens user text quoted back in an error message.
fn shorten(s: &str) -> String {
    const MAX: usize = 40;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(MAX).collect();
        out.push('…');
        out
    }
}

// ---------------------------------------------------------------------------------------
// Lexer
// ---------------------------------------------------------------------------------------

#[derive(Debug)]
enum Tok {
    /// A word, phrase or filter, already as a leaf of the tree.
    Term(Query),
    LParen,
    RParen,
    And,
    Or,
    Not,
    /// A `-` directly before a term, filter or group.
    Minus,
}

#[derive(Debug)]
struct Token {
    tok: Tok,
    /// 1-based character position in the input.
    pos: usize,
}

/// True for characters that end a bare word.
fn ends_word(c: char) -> bool {
    c.is_whitespace() || c == '(' || c == ')' || c == '"'
}

/// Reads a quoted string whose opening `"` is at `open`; `""` inside stands for one `"`.
/// Returns the content and the index just after the closing quote.
fn read_quoted(chars: &[char], open: usize) -> Result<(String, usize), QueryError> {
    let mut out = String::new();
    let mut i = open + 1;
    while i < chars.len() {
        if chars[i] == '"' {
            if chars.get(i + 1) == Some(&'"') {
                out.push('"');
                i += 2;
                continue;
            }
            return Ok((out, i + 1));
        }
        out.push(chars[i]);
        i += 1;
    }
    Err(QueryError::new(format!(
        "unterminated quote starting at character {} — close the phrase with \"",
        open + 1
    )))
}

fn lex(input: &str) -> Result<Vec<Token>, QueryError> {
    let chars: Vec<char> = input.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let pos = i + 1;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        match c {
            '(' => {
                out.push(Token {
                    tok: Tok::LParen,
                    pos,
                });
                i += 1;
            }
            ')' => {
                out.push(Token {
                    tok: Tok::RParen,
                    pos,
                });
                i += 1;
            }
            '"' => {
                let (text, next) = read_quoted(&chars, i)?;
                if text.trim().is_empty() {
                    return Err(QueryError::new(format!(
                        "empty phrase at character {pos} — put at least one word between the quotes"
                    )));
                }
                out.push(Token {
                    tok: Tok::Term(Query::Phrase(text)),
                    pos,
                });
                i = next;
            }
            '-' if chars.get(i + 1) != Some(&'-') => match chars.get(i + 1) {
                Some(&n) if !n.is_whitespace() && n != ')' => {
                    out.push(Token {
                        tok: Tok::Minus,
                        pos,
                    });
                    i += 1;
                }
                _ => {
                    return Err(QueryError::new(format!(
                        "\"-\" at character {pos} needs a term right after it, without a space — e.g. parser -kind:FAIL"
                    )));
                }
            },
            _ => {
                let start = i;
                while i < chars.len() && !ends_word(chars[i]) {
                    i += 1;
                }
                let bare: String = chars[start..i].iter().collect();
                if let Some(filter) = lex_filter(&bare, &chars, &mut i, pos)? {
                    out.push(Token {
                        tok: Tok::Term(filter),
                        pos,
                    });
                    continue;
                }
                let tok = match bare.as_str() {
                    "AND" => Tok::And,
                    "OR" => Tok::Or,
                    "NOT" => Tok::Not,
                    _ => {
                        let text = bare.trim_end_matches('*');
                        if text.is_empty() {
                            return Err(QueryError::new(format!(
                                "\"{bare}\" at character {pos} is not a word — put \"*\" right after a word for a prefix search, e.g. pars*"
                            )));
                        }
                        Tok::Term(Query::Word {
                            text: text.to_string(),
                            prefix: text.len() != bare.len(),
                        })
                    }
                };
                out.push(Token { tok, pos });
            }
        }
    }
    Ok(out)
}

/// If `bare` starts with a known filter name and a colon, reads the filter (its value may
/// continue as a quoted string at `chars[*i]`, which then advances `*i`).
fn lex_filter(
    bare: &str,
    chars: &[char],
    i: &mut usize,
    pos: usize,
) -> Result<Option<Query>, QueryError> {
    let Some((name, value)) = bare.split_once(':') else {
        return Ok(None);
    };
    let name = name.to_ascii_lowercase();
    let example = match name.as_str() {
        "kind" => "kind:FACT",
        "author" => "author:w01",
        "label" => "label:parser-v2",
        _ => return Ok(None),
    };
    let mut value = value.to_string();
    if value.is_empty() && chars.get(*i) == Some(&'"') {
        let (quoted, next) = read_quoted(chars, *i)?;
        value = quoted;
        *i = next;
    }
    if value.is_empty() {
        return Err(QueryError::new(format!(
            "{name}: at character {pos} has no value — write it right after the colon, e.g. {example}"
        )));
    }
    Ok(Some(match name.as_str() {
        "kind" => match kind_token(&value) {
            Some(token) => Query::Kind(token),
            None => {
                return Err(QueryError::new(format!(
                    "unknown kind \"{}\" — use one of FACT, OBSERVED, FAIL, CLAIM, PATCH_SUMMARY",
                    shorten(&value)
                )))
            }
        },
        "author" => Query::Author(value.to_lowercase()),
        _ => Query::Label(value),
    }))
}

// ---------------------------------------------------------------------------------------
// Parser: or := and (OR and)* ; and := unary (AND? unary)* ; unary := (NOT | -) unary | primary
// ---------------------------------------------------------------------------------------

struct Parser {
    toks: Vec<Token>,
    i: usize,
    depth: usize,
}

const OR_NEEDS_BOTH: &str = "OR needs a term on both sides — e.g. parser OR lexer";
const AND_NEEDS_BOTH: &str = "AND needs a term on both sides — e.g. parser AND lexer";
const NOT_NEEDS_TERM: &str = "NOT needs a term after it — e.g. parser NOT kind:FAIL";

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.toks.get(self.i)
    }

    /// True when the next token can begin an operand of AND/OR.
    fn at_operand(&self) -> bool {
        matches!(
            self.peek().map(|t| &t.tok),
            Some(Tok::Term(_) | Tok::LParen | Tok::Not | Tok::Minus)
        )
    }

    fn parse_or(&mut self) -> Result<Query, QueryError> {
        let mut items = vec![self.parse_and()?];
        while matches!(self.peek().map(|t| &t.tok), Some(Tok::Or)) {
            self.i += 1;
            if !self.at_operand() {
                return Err(QueryError::new(OR_NEEDS_BOTH));
            }
            items.push(self.parse_and()?);
        }
        Ok(or_of(items))
    }

    fn parse_and(&mut self) -> Result<Query, QueryError> {
        let mut items = vec![self.parse_unary()?];
        loop {
            match self.peek().map(|t| &t.tok) {
                Some(Tok::And) => {
                    self.i += 1;
                    if !self.at_operand() {
                        return Err(QueryError::new(AND_NEEDS_BOTH));
                    }
                }
                Some(Tok::Term(_) | Tok::LParen | Tok::Not | Tok::Minus) => {}
                _ => break,
            }
            items.push(self.parse_unary()?);
        }
        Ok(and_of(items))
    }

    fn parse_unary(&mut self) -> Result<Query, QueryError> {
        let Some(t) = self.toks.get(self.i) else {
            // Callers check for an operand first; this is a safety net.
            return Err(QueryError::new(
                "the query ends too early — finish it with a word, \"phrase\" or filter",
            ));
        };
        let pos = t.pos;
        match &t.tok {
            Tok::Not | Tok::Minus => {
                let is_not = matches!(t.tok, Tok::Not);
                self.i += 1;
                if !self.at_operand() {
                    return Err(QueryError::new(if is_not {
                        NOT_NEEDS_TERM.to_string()
                    } else {
                        format!(
                            "\"-\" at character {pos} needs a term right after it — e.g. parser -kind:FAIL"
                        )
                    }));
                }
                Ok(not_of(self.parse_unary()?))
            }
            Tok::Term(q) => {
                let q = q.clone();
                self.i += 1;
                Ok(q)
            }
            Tok::LParen => {
                self.depth += 1;
                if self.depth > MAX_NESTING {
                    return Err(QueryError::new(format!(
                        "parentheses nest more than {MAX_NESTING} deep at character {pos} — flatten the query"
                    )));
                }
                self.i += 1;
                if matches!(self.peek().map(|t| &t.tok), Some(Tok::RParen)) {
                    return Err(QueryError::new(format!(
                        "empty parentheses at character {pos} — put a term inside, e.g. (parser OR lexer)"
                    )));
                }
                let inner = self.parse_or()?;
                match self.peek().map(|t| &t.tok) {
                    Some(Tok::RParen) => {
                        self.i += 1;
                        self.depth -= 1;
                        Ok(inner)
                    }
                    _ => Err(QueryError::new(format!(
                        "unbalanced parenthesis at character {pos} — close every \"(\" with \")\""
                    ))),
                }
            }
            Tok::RParen => Err(QueryError::new(format!(
                "unbalanced parenthesis at character {pos} — remove this \")\" or open it with \"(\" before"
            ))),
            Tok::And => Err(QueryError::new(AND_NEEDS_BOTH)),
            Tok::Or => Err(QueryError::new(OR_NEEDS_BOTH)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(text: &str) -> Query {
        Query::Word {
            text: text.to_string(),
            prefix: false,
        }
    }

    fn p(text: &str) -> Query {
        Query::Phrase(text.to_string())
    }

    fn not(q: Query) -> Query {
        Query::Not(Box::new(q))
    }

    fn err(input: &str) -> String {
        match parse(input) {
            Ok(q) => panic!("{input:?} parsed as {q:?}, expected an error"),
            Err(e) => e.to_string(),
        }
    }

    fn fts(input: &str) -> String {
        parse(input).unwrap().to_fts5()
    }

    const U: &str = r#"(kind : ("fact" OR "observed" OR "fail" OR "claim" OR "patchsummary"))"#;

    #[test]
    fn single_word() {
        assert_eq!(parse("parser").unwrap(), w("parser"));
    }

    #[test]
    fn implicit_and() {
        assert_eq!(
            parse("parser lexer").unwrap(),
            Query::And(vec![w("parser"), w("lexer")])
        );
        assert_eq!(parse("parser lexer"), parse("parser AND lexer"));
    }

    #[test]
    fn or_binds_looser_than_and() {
        assert_eq!(
            parse("a b OR c").unwrap(),
            Query::Or(vec![Query::And(vec![w("a"), w("b")]), w("c")])
        );
        assert_eq!(
            parse("a OR b AND c").unwrap(),
            Query::Or(vec![w("a"), Query::And(vec![w("b"), w("c")])])
        );
    }

    #[test]
    fn not_binds_tighter_than_and() {
        assert_eq!(
            parse("a NOT b c").unwrap(),
            Query::And(vec![w("a"), not(w("b")), w("c")])
        );
        assert_eq!(
            parse("NOT a OR b").unwrap(),
            Query::Or(vec![not(w("a")), w("b")])
        );
    }

    #[test]
    fn parentheses_group() {
        assert_eq!(
            parse("(a OR b) c").unwrap(),
            Query::And(vec![Query::Or(vec![w("a"), w("b")]), w("c")])
        );
        assert_eq!(parse("((a))").unwrap(), w("a"));
    }

    #[test]
    fn nested_same_operators_flatten() {
        assert_eq!(
            parse("a (b c) OR (d OR e)").unwrap(),
            Query::Or(vec![
                Query::And(vec![w("a"), w("b"), w("c")]),
                w("d"),
                w("e")
            ])
        );
    }

    #[test]
    fn phrase() {
        assert_eq!(parse("\"merge conflict\"").unwrap(), p("merge conflict"));
        assert_eq!(
            fts("\"merge conflict\""),
            r#"{text detail} : "merge conflict""#
        );
    }

    #[test]
    fn prefix_word() {
        assert_eq!(
            parse("pars*").unwrap(),
            Query::Word {
                text: "pars".into(),
                prefix: true
            }
        );
        assert_eq!(fts("pars*"), r#"{text detail} : "pars" *"#);
    }

    #[test]
    fn star_inside_word_is_not_prefix() {
        assert_eq!(parse("a*b").unwrap(), w("a*b"));
    }

    #[test]
    fn minus_is_not_shorthand() {
        assert_eq!(
            parse("parser -lexer").unwrap(),
            Query::And(vec![w("parser"), not(w("lexer"))])
        );
        assert_eq!(parse("parser -lexer"), parse("parser NOT lexer"));
        assert_eq!(parse("-kind:FAIL").unwrap(), not(Query::Kind("fail")));
        assert_eq!(parse("-\"a b\"").unwrap(), not(p("a b")));
        assert_eq!(
            parse("-(a OR b)").unwrap(),
            not(Query::Or(vec![w("a"), w("b")]))
        );
    }

    #[test]
    fn minus_inside_word_is_part_of_it() {
        assert_eq!(parse("parser-v2").unwrap(), w("parser-v2"));
        assert_eq!(parse("--verbose").unwrap(), w("--verbose"));
    }

    #[test]
    fn double_negation_cancels() {
        assert_eq!(parse("NOT NOT a").unwrap(), w("a"));
        assert_eq!(parse("NOT -a").unwrap(), w("a"));
        assert_eq!(fts("NOT NOT a"), r#"{text detail} : "a""#);
    }

    #[test]
    fn kind_filter() {
        assert_eq!(parse("kind:FACT").unwrap(), Query::Kind("fact"));
        assert_eq!(fts("kind:FACT"), r#"kind : "fact""#);
        assert_eq!(
            parse("kind:PATCH_SUMMARY").unwrap(),
            Query::Kind("patchsummary")
        );
        assert_eq!(
            parse("kind:patchsummary").unwrap(),
            Query::Kind("patchsummary")
        );
    }

    #[test]
    fn kind_filter_is_case_insensitive() {
        for q in ["kind:fact", "kind:Fact", "KIND:FACT", "Kind:fAcT"] {
            assert_eq!(parse(q).unwrap(), Query::Kind("fact"), "{q}");
        }
    }

    #[test]
    fn author_filter_is_lowercased() {
        assert_eq!(parse("author:W01").unwrap(), Query::Author("w01".into()));
        assert_eq!(fts("author:W01"), r#"author : "w01""#);
    }

    #[test]
    fn label_filter_is_exact_and_hex_encoded() {
        assert_eq!(
            parse("label:parser-v2").unwrap(),
            Query::Label("parser-v2".into())
        );
        assert_eq!(fts("label:ab"), r#"label : "x6162""#);
        // Case is kept: labels match exactly.
        assert_ne!(fts("label:AB"), fts("label:ab"));
    }

    #[test]
    fn label_filter_value_may_be_quoted() {
        assert_eq!(parse("label:\"a b\"").unwrap(), Query::Label("a b".into()));
        assert_eq!(fts("label:\"a b\""), r#"label : "x612062""#);
    }

    #[test]
    fn label_value_may_contain_colons() {
        assert_eq!(
            parse("label:area:parser").unwrap(),
            Query::Label("area:parser".into())
        );
    }

    #[test]
    fn filter_inside_parentheses() {
        assert_eq!(
            parse("(label:x OR author:w02)").unwrap(),
            Query::Or(vec![Query::Label("x".into()), Query::Author("w02".into())])
        );
    }

    #[test]
    fn lowercase_operators_are_words() {
        assert_eq!(
            parse("cats and dogs").unwrap(),
            Query::And(vec![w("cats"), w("and"), w("dogs")])
        );
        assert_eq!(
            parse("a or not b").unwrap(),
            Query::And(vec![w("a"), w("or"), w("not"), w("b")])
        );
    }

    #[test]
    fn doubled_quote_inside_phrase_is_a_literal_quote() {
        assert_eq!(parse(r#""say ""hi"" now""#).unwrap(), p(r#"say "hi" now"#));
    }

    #[test]
    fn quote_inside_phrase_cannot_break_out() {
        // The user tries to smuggle FTS5 syntax; it stays inside one string literal.
        let q = parse(r#""x"" OR kind : ""fact""#).unwrap();
        assert_eq!(q, p(r#"x" OR kind : "fact"#));
        assert_eq!(q.to_fts5(), r#"{text detail} : "x"" OR kind : ""fact""#);
        // Built directly, too.
        assert_eq!(
            p(r#"a" OR "b"#).to_fts5(),
            r#"{text detail} : "a"" OR ""b""#
        );
        assert_eq!(Query::Label("\"".into()).to_fts5(), r#"label : "x22""#);
    }

    #[test]
    fn fts5_syntax_in_words_stays_quoted() {
        assert_eq!(fts("col:x"), r#"{text detail} : "col:x""#);
        assert_eq!(fts("NEAR"), r#"{text detail} : "NEAR""#);
        assert_eq!(fts("^start"), r#"{text detail} : "^start""#);
        assert_eq!(fts("a+b"), r#"{text detail} : "a+b""#);
    }

    #[test]
    fn quote_ends_a_word() {
        assert_eq!(
            parse("foo\"bar baz\"").unwrap(),
            Query::And(vec![w("foo"), p("bar baz")])
        );
    }

    #[test]
    fn unknown_prefix_is_a_word() {
        assert_eq!(parse("http://x").unwrap(), w("http://x"));
        assert_eq!(parse("foo:bar").unwrap(), w("foo:bar"));
        assert_eq!(fts("foo:bar"), r#"{text detail} : "foo:bar""#);
    }

    #[test]
    fn label_token_encoding() {
        assert_eq!(label_token("ab"), "x6162");
        assert_eq!(label_token("parser-v2"), "x7061727365722d7632");
        assert_eq!(label_token("é"), "xc3a9");
        assert_eq!(label_token(""), "");
    }

    #[test]
    fn universe_lists_every_kind() {
        for name in ["FACT", "OBSERVED", "FAIL", "CLAIM", "PATCH_SUMMARY"] {
            let token = kind_token(name).unwrap();
            assert!(UNIVERSE.contains(&format!("\"{token}\"")), "{name}");
        }
    }

    #[test]
    fn kind_token_names() {
        assert_eq!(kind_token("FACT"), Some("fact"));
        assert_eq!(kind_token("observed"), Some("observed"));
        assert_eq!(kind_token("Fail"), Some("fail"));
        assert_eq!(kind_token("CLAIM"), Some("claim"));
        assert_eq!(kind_token("PATCH_SUMMARY"), Some("patchsummary"));
        assert_eq!(kind_token("patch_summary"), Some("patchsummary"));
        assert_eq!(kind_token("PATCHSUMMARY"), Some("patchsummary"));
        assert_eq!(kind_token("PATCH-SUMMARY"), None);
        assert_eq!(kind_token(""), None);
    }

    // ----- exact FTS5 output -------------------------------------------------------------

    #[test]
    fn fts5_word() {
        assert_eq!(fts("parser"), r#"{text detail} : "parser""#);
    }

    #[test]
    fn fts5_and_of_positives() {
        assert_eq!(
            fts("parser kind:FACT"),
            r#"({text detail} : "parser") AND (kind : "fact")"#
        );
    }

    #[test]
    fn fts5_or() {
        assert_eq!(
            fts("a OR author:w01"),
            r#"({text detail} : "a") OR (author : "w01")"#
        );
    }

    #[test]
    fn fts5_and_with_negatives_uses_binary_not() {
        assert_eq!(
            fts("a b -c NOT kind:FAIL"),
            r#"(({text detail} : "a") AND ({text detail} : "b")) NOT ({text detail} : "c") NOT (kind : "fail")"#
        );
        assert_eq!(
            fts("parser NOT kind:FAIL"),
            r#"({text detail} : "parser") NOT (kind : "fail")"#
        );
    }

    #[test]
    fn fts5_lone_not_uses_universe() {
        assert_eq!(
            fts("NOT parser"),
            format!(r#"{U} NOT ({{text detail}} : "parser")"#)
        );
    }

    #[test]
    fn fts5_kind_only_queries_become_the_list_of_matching_kinds() {
        assert_eq!(
            fts("NOT kind:CLAIM"),
            r#"kind : ("fact" OR "observed" OR "fail" OR "patchsummary")"#
        );
        assert_eq!(
            fts("kind:FAIL OR kind:CLAIM"),
            r#"kind : ("fail" OR "claim")"#
        );
        assert_eq!(fts("kind:FAIL kind:CLAIM"), format!("{U} NOT {U}"));
        assert_eq!(
            fts("-kind:FACT -kind:OBSERVED -kind:FAIL -kind:CLAIM"),
            r#"kind : "patchsummary""#
        );
    }

    #[test]
    fn fts5_and_of_only_negatives_uses_universe() {
        assert_eq!(
            fts("-a -b"),
            format!(r#"{U} NOT ({{text detail}} : "a") NOT ({{text detail}} : "b")"#)
        );
    }

    #[test]
    fn fts5_not_inside_or_uses_universe() {
        assert_eq!(
            fts("a OR -b"),
            format!(r#"({{text detail}} : "a") OR ({U} NOT ({{text detail}} : "b"))"#)
        );
    }

    #[test]
    fn fts5_nested_groups_are_parenthesized() {
        assert_eq!(
            fts("(a OR b) -(c d) label:ab"),
            r#"((({text detail} : "a") OR ({text detail} : "b")) AND (label : "x6162")) NOT (({text detail} : "c") AND ({text detail} : "d"))"#
        );
    }

    #[test]
    fn fts5_empty_vectors_are_total() {
        assert_eq!(Query::And(vec![]).to_fts5(), UNIVERSE);
        assert_eq!(Query::Or(vec![]).to_fts5(), format!("{U} NOT {U}"));
    }

    #[test]
    fn display_is_explicit() {
        assert_eq!(
            parse("parser -kind:fail OR --verbose label:\"a b\"")
                .unwrap()
                .to_string(),
            "(parser AND NOT kind:FAIL) OR (--verbose AND label:\"a b\")"
        );
    }

    #[test]
    fn display_parses_back() {
        for input in [
            "a b OR -c",
            "(a OR b) kind:PATCH_SUMMARY author:W01 label:\"x y\"",
            "\"say \"\"hi\"\"\" pars*",
            "NOT (a OR NOT b)",
            "--verbose -x -(y z)",
        ] {
            let q = parse(input).unwrap();
            assert_eq!(parse(&q.to_string()).unwrap(), q, "{input} -> {q}");
        }
    }

    // ----- errors ------------------------------------------------------------------------

    #[test]
    fn error_empty_query() {
        assert_eq!(
            err(""),
            "empty query — give at least one word, \"phrase\" or filter like kind:FACT"
        );
        assert!(err("   \t ").starts_with("empty query"));
    }

    #[test]
    fn error_unclosed_parenthesis() {
        assert_eq!(
            err("parser AND (lexer"),
            "unbalanced parenthesis at character 12 — close every \"(\" with \")\""
        );
    }

    #[test]
    fn error_extra_closing_parenthesis() {
        let e = err("a b)");
        assert!(
            e.starts_with("unbalanced parenthesis at character 4 — "),
            "{e}"
        );
        assert!(e.contains("remove this \")\""), "{e}");
        assert!(err(")").starts_with("unbalanced parenthesis at character 1"));
    }

    #[test]
    fn error_empty_parentheses() {
        let e = err("a ()");
        assert!(e.starts_with("empty parentheses at character 3 — "), "{e}");
    }

    #[test]
    fn error_unterminated_quote() {
        assert_eq!(
            err("ab \"merge"),
            "unterminated quote starting at character 4 — close the phrase with \""
        );
        assert!(err("label:\"a b").starts_with("unterminated quote starting at character 7"));
    }

    #[test]
    fn error_empty_phrase() {
        assert!(err("\"\"").starts_with("empty phrase at character 1 — "));
        assert!(err("a \"  \"").starts_with("empty phrase at character 3 — "));
    }

    #[test]
    fn error_not_without_term() {
        let msg = "NOT needs a term after it — e.g. parser NOT kind:FAIL";
        assert_eq!(err("parser NOT"), msg);
        assert_eq!(err("NOT"), msg);
        assert_eq!(err("(a NOT)"), msg);
        assert_eq!(err("a NOT OR b"), msg);
    }

    #[test]
    fn error_minus_without_term() {
        let e = err("parser - lexer");
        assert!(e.starts_with("\"-\" at character 8 needs a term"), "{e}");
        assert!(e.contains("e.g. parser -kind:FAIL"), "{e}");
        assert!(err("a -").starts_with("\"-\" at character 3"));
        assert!(err("(a -)").starts_with("\"-\" at character 4"));
        assert!(err("-AND a").starts_with("\"-\" at character 1"));
    }

    #[test]
    fn error_or_without_both_sides() {
        let msg = "OR needs a term on both sides — e.g. parser OR lexer";
        assert_eq!(err("a OR"), msg);
        assert_eq!(err("OR a"), msg);
        assert_eq!(err("a OR OR b"), msg);
        assert_eq!(err("(a OR) b"), msg);
    }

    #[test]
    fn error_and_without_both_sides() {
        let msg = "AND needs a term on both sides — e.g. parser AND lexer";
        assert_eq!(err("a AND"), msg);
        assert_eq!(err("AND a"), msg);
        assert_eq!(err("a AND OR b"), msg);
    }

    #[test]
    fn error_unknown_kind() {
        assert_eq!(
            err("kind:FOO"),
            "unknown kind \"FOO\" — use one of FACT, OBSERVED, FAIL, CLAIM, PATCH_SUMMARY"
        );
        assert!(err("kind:\"fact x\"").starts_with("unknown kind \"fact x\""));
    }

    #[test]
    fn error_empty_filter_value() {
        let e = err("kind:");
        assert!(e.starts_with("kind: at character 1 has no value — "), "{e}");
        assert!(e.contains("e.g. kind:FACT"), "{e}");
        assert!(err("a author: b").starts_with("author: at character 3 has no value"));
        assert!(err("(label:)").starts_with("label: at character 2 has no value"));
        assert!(err("label:\"\"").starts_with("label: at character 1 has no value"));
    }

    #[test]
    fn error_lone_star() {
        let e = err("a *");
        assert!(
            e.starts_with("\"*\" at character 3 is not a word — "),
            "{e}"
        );
        assert!(e.contains("e.g. pars*"), "{e}");
    }

    #[test]
    fn error_query_too_long() {
        let ok = "a".repeat(MAX_QUERY_CHARS);
        assert!(parse(&ok).is_ok());
        let e = err(&"a".repeat(MAX_QUERY_CHARS + 1));
        assert_eq!(
            e,
            "query is 1001 characters long — shorten it to at most 1000 characters"
        );
        // Characters, not bytes.
        assert!(parse(&"é".repeat(MAX_QUERY_CHARS)).is_ok());
    }

    #[test]
    fn error_term_limit() {
        let words = |n: usize| (0..n).map(|i| format!("w{i}")).collect::<Vec<_>>();
        assert!(parse(&words(MAX_TERMS).join(" ")).is_ok());
        assert_eq!(
            err(&words(MAX_TERMS + 1).join(" ")),
            "query has 65 terms — use at most 64 words, phrases and filters"
        );
        // Operators and parentheses are not terms; filters and phrases are.
        let mut mixed = words(MAX_TERMS - 2).join(" OR ");
        mixed.push_str(" (kind:FACT \"a b\") NOT NOT");
        assert!(err(&mixed).starts_with("NOT needs a term"));
        let mut over = words(MAX_TERMS).join(" AND ");
        over.push_str(" label:x");
        assert!(err(&over).starts_with("query has 65 terms"));
    }

    #[test]
    fn error_nesting_too_deep() {
        let ok = format!("{}a{}", "(".repeat(MAX_NESTING), ")".repeat(MAX_NESTING));
        assert_eq!(parse(&ok).unwrap(), w("a"));
        let deep = format!(
            "{}a{}",
            "(".repeat(MAX_NESTING + 1),
            ")".repeat(MAX_NESTING + 1)
        );
        assert!(
            err(&deep).starts_with("parentheses nest more than 8 deep at character 9 — "),
            "{}",
            err(&deep)
        );
    }

    #[test]
    fn errors_say_what_to_do() {
        for input in [
            "", "(a", "a)", "()", "\"a", "\"\"", "NOT", "a -", "a OR", "a AND", "kind:FOO",
            "kind:", "*",
        ] {
            let e = err(input);
            assert!(e.contains(" — "), "{input:?}: {e}");
        }
    }
}
