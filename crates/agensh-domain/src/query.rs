//! The board's `grep` query language: parsed into a [`Query`], the syntax tree every store
//! translates into its own search dialect.
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
//! - filters: `kind:FACT` (a kind of [`RecordKind::ALL`] in any case, its underscores
//!   optional: `kind:patchsummary`), `author:w01` (any case) and `label:parser-v2` (exact);
//!   a filter's value may be quoted (`label:"a b"`) and may not be empty. Any other `name:`
//!   prefix (`http://x`, `foo:bar`) is an ordinary word. Filter names may be written in any
//!   case (`KIND:fact`);
//! - at most [`MAX_QUERY_CHARS`] characters, [`MAX_TERMS`] terms (words, phrases and
//!   filters) and [`MAX_NESTING`] levels of parentheses.
//!
//! # What a store makes of it
//!
//! A [`Query`] says what matches, not how to search: words and phrases match the text and
//! detail of a record, filters its kind, author (lowercase) or exact label, and `NOT` means
//! "every record but these". Each store translates the tree into its own dialect and keeps
//! user text out of that dialect's syntax.

use std::fmt;

use crate::record::RecordKind;

/// Longest query, in characters.
pub const MAX_QUERY_CHARS: usize = 1000;
/// Most terms (words, phrases and filters) in one query.
pub const MAX_TERMS: usize = 64;
/// Deepest nesting of parentheses. A store's search engine parses the translated query
/// with a bounded stack, and one level of the user's parentheses can cost several entries
/// of it; the SQLite store's translation documents its cost and is tested at this depth.
pub const MAX_NESTING: usize = 8;

/// A parsed grep query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Query {
    /// A word in text or detail; `prefix` when it ended in `*` (which is not in `text`).
    Word { text: String, prefix: bool },
    /// A quoted phrase in text or detail.
    Phrase(String),
    /// `kind:...`.
    Kind(RecordKind),
    /// `author:...`, holding the worker id in lowercase.
    Author(String),
    /// `label:...`, holding the exact label.
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

/// The kind a `kind:` filter names: a kind's name in any case, with or without its
/// underscores (`patch_summary`, `PATCHSUMMARY`). `None` for anything else.
fn filter_kind(value: &str) -> Option<RecordKind> {
    let wanted = value.to_ascii_uppercase();
    RecordKind::ALL
        .into_iter()
        .find(|k| k.as_str() == wanted || k.as_str().replace('_', "") == wanted)
}

/// Parses a grep query.
pub fn parse(input: &str) -> Result<Query, QueryError> {
    let n = input.chars().count();
    if n > MAX_QUERY_CHARS {
        return Err(QueryError::new(format!(
            "query is {n} characters long — shorten it to at most {MAX_QUERY_CHARS} characters"
        )));
    }
    // A control character (a NUL, an escape) is no part of any word, and a store's own
    // parser would answer it with its own message.
    if let Some((i, c)) = input
        .chars()
        .enumerate()
        .find(|(_, c)| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
    {
        return Err(QueryError::new(format!(
            "the query holds the control character U+{:04X} at character {} — remove it; a query is words, \"phrases\" and filters like kind:FACT",
            c as u32,
            i + 1
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
    /// The exact set of kinds this query matches, in [`RecordKind::ALL`] order, when it is
    /// made of kind filters only (`NOT kind:FACT`, `kind:FAIL OR kind:CLAIM`); `None` when
    /// any other term takes part. A store can answer such a query from the kind alone.
    pub fn kind_set(&self) -> Option<Vec<RecordKind>> {
        let all = || RecordKind::ALL.to_vec();
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
            Query::Kind(k) => write!(f, "kind:{k}"),
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
        "kind" => match filter_kind(&value) {
            Some(kind) => Query::Kind(kind),
            None => {
                return Err(QueryError::new(format!(
                    "unknown kind \"{}\" — use one of {}",
                    shorten(&value),
                    RecordKind::names()
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
        assert_eq!(
            parse("-kind:FAIL").unwrap(),
            not(Query::Kind(RecordKind::Fail))
        );
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
    }

    #[test]
    fn kind_filter() {
        assert_eq!(parse("kind:FACT").unwrap(), Query::Kind(RecordKind::Fact));
        assert_eq!(
            parse("kind:PATCH_SUMMARY").unwrap(),
            Query::Kind(RecordKind::PatchSummary)
        );
        assert_eq!(
            parse("kind:patchsummary").unwrap(),
            Query::Kind(RecordKind::PatchSummary)
        );
    }

    #[test]
    fn kind_filter_is_case_insensitive() {
        for q in ["kind:fact", "kind:Fact", "KIND:FACT", "Kind:fAcT"] {
            assert_eq!(parse(q).unwrap(), Query::Kind(RecordKind::Fact), "{q}");
        }
    }

    #[test]
    fn author_filter_is_lowercased() {
        assert_eq!(parse("author:W01").unwrap(), Query::Author("w01".into()));
    }

    #[test]
    fn label_filter_is_exact_and_hex_encoded() {
        assert_eq!(
            parse("label:parser-v2").unwrap(),
            Query::Label("parser-v2".into())
        );
        // Case is kept: labels match exactly.
        assert_ne!(parse("label:AB"), parse("label:ab"));
    }

    #[test]
    fn label_filter_value_may_be_quoted() {
        assert_eq!(parse("label:\"a b\"").unwrap(), Query::Label("a b".into()));
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
        // The user tries to smuggle search syntax; it stays inside one phrase.
        let q = parse(r#""x"" OR kind : ""fact""#).unwrap();
        assert_eq!(q, p(r#"x" OR kind : "fact"#));
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
    }

    #[test]
    fn kind_filter_names() {
        assert_eq!(parse("kind:FACT").unwrap(), Query::Kind(RecordKind::Fact));
        assert_eq!(
            parse("kind:observed").unwrap(),
            Query::Kind(RecordKind::Observed)
        );
        assert_eq!(parse("kind:Fail").unwrap(), Query::Kind(RecordKind::Fail));
        assert_eq!(parse("kind:CLAIM").unwrap(), Query::Kind(RecordKind::Claim));
        for name in ["PATCH_SUMMARY", "patch_summary", "PATCHSUMMARY"] {
            assert_eq!(
                parse(&format!("kind:{name}")).unwrap(),
                Query::Kind(RecordKind::PatchSummary),
                "{name}"
            );
        }
        assert!(err("kind:PATCH-SUMMARY").starts_with("unknown kind \"PATCH-SUMMARY\""));
        assert!(err("kind:\"\"").starts_with("kind: at character 1 has no value"));
    }

    #[test]
    fn every_kind_is_a_filter() {
        for kind in RecordKind::ALL {
            assert_eq!(
                parse(&format!("kind:{kind}")).unwrap(),
                Query::Kind(kind),
                "{kind}"
            );
        }
    }

    #[test]
    fn kind_set_of_kind_only_queries() {
        let set = |q: &str| parse(q).unwrap().kind_set();
        assert_eq!(
            set("NOT kind:CLAIM"),
            Some(vec![
                RecordKind::Observed,
                RecordKind::Fact,
                RecordKind::Fail,
                RecordKind::PatchSummary
            ])
        );
        assert_eq!(
            set("kind:CLAIM OR kind:FAIL"),
            Some(vec![RecordKind::Fail, RecordKind::Claim])
        );
        assert_eq!(set("kind:FAIL kind:CLAIM"), Some(vec![]));
        assert_eq!(set("kind:FAIL parser"), None);
        assert_eq!(
            Query::And(vec![]).kind_set(),
            Some(RecordKind::ALL.to_vec())
        );
        assert_eq!(Query::Or(vec![]).kind_set(), Some(vec![]));
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
            "unknown kind \"FOO\" — use one of OBSERVED, FACT, FAIL, CLAIM, PATCH_SUMMARY"
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
    fn control_characters_are_refused_with_where_they_are() {
        assert_eq!(
            err("parser\0x"),
            "the query holds the control character U+0000 at character 7 — remove it; a query is words, \"phrases\" and filters like kind:FACT"
        );
        assert!(err("a \u{1b}[2J").contains("U+001B at character 3"));
        assert!(parse("tab\tand\nnewline").is_ok());
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
