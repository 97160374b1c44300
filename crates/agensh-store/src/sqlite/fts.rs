//! The SQLite FTS5 dialect of the grep query language: the tokens the `records_fts` table
//! holds and the translation of a parsed [`Query`] into one `MATCH` expression.
//!
//! # The table
//!
//! Columns, in order: `text`, `detail`, `kind`, `author`, `label`, default `unicode61`
//! tokenizer. `kind` holds [`kind_token`] of the record's kind, `author` the worker id in
//! lowercase and `label` [`label_token`] of the label (empty when there is none). Rows are
//! inserted with these two functions so that filters match exactly.
//!
//! # The translation
//!
//! Every piece of user text becomes an FTS5 string literal (`"..."`, inner `"` doubled), so
//! user text never turns into FTS5 syntax. Words and phrases are limited to the text and
//! detail columns (`{text detail} : "x"`, `{text detail} : "pars" *` for a prefix), filters
//! to their column (`kind : "fact"`). FTS5's `NOT` is binary, so a negated part is always
//! subtracted from something: from the positive parts of the same `AND`, or else from the
//! universe of all records, `kind : ("observed" OR "fact" OR "fail" OR "claim" OR
//! "patchsummary")`. Every operand is parenthesized so FTS5's precedence never matters.
//!
//! SQLite's FTS5 query parser has a fixed stack of 100 entries and one level of the user's
//! parentheses costs up to 7 of them once translated (an operand after `OR`, inside the
//! positive part of an `AND` with a `NOT`), which is why the domain caps nesting at
//! [`MAX_NESTING`](agensh_domain::query::MAX_NESTING); deeper queries would fail inside
//! SQLite with "fts5: parser stack overflow".

use agensh_domain::query::Query;
use agensh_domain::record::RecordKind;

/// Restricts words and phrases to the free-text columns.
const TEXT_COLUMNS: &str = "{text detail}";

/// The single token stored in the `label` column for a label (`common::label_token`, which
/// the PostgreSQL store's search column holds too).
pub use crate::common::label_token;

/// The token stored in the `kind` column for `kind`: its name in lowercase without
/// underscores (`PATCH_SUMMARY` -> `patchsummary`), one unicode61 token.
pub fn kind_token(kind: RecordKind) -> &'static str {
    match kind {
        RecordKind::Observed => "observed",
        RecordKind::Fact => "fact",
        RecordKind::Fail => "fail",
        RecordKind::Claim => "claim",
        RecordKind::PatchSummary => "patchsummary",
    }
}

/// The FTS5 `MATCH` expression for `query` (see the module documentation).
pub fn match_expression(query: &Query) -> String {
    // A query about kinds alone (`NOT kind:FACT`, `kind:FAIL OR kind:CLAIM`) becomes the
    // list of kinds it matches: FTS5 answers that at once, while subtracting from the
    // universe walks every record of the subtracted kinds.
    if !matches!(query, Query::Kind(_)) {
        if let Some(kinds) = query.kind_set() {
            return kinds_expression(&kinds);
        }
    }
    match query {
        Query::Word { text, prefix } => {
            let star = if *prefix { " *" } else { "" };
            format!("{TEXT_COLUMNS} : {}{star}", fts5_string(text))
        }
        Query::Phrase(p) => format!("{TEXT_COLUMNS} : {}", fts5_string(p)),
        Query::Kind(k) => format!("kind : {}", fts5_string(kind_token(*k))),
        Query::Author(a) => format!("author : {}", fts5_string(&a.to_lowercase())),
        Query::Label(l) => format!("label : {}", fts5_string(&label_token(l))),
        Query::Not(inner) => format!("({}) NOT ({})", universe(), match_expression(inner)),
        Query::Or(children) => match children.as_slice() {
            [] => nothing(),
            [only] => match_expression(only),
            _ => join_parenthesized(children.iter(), " OR "),
        },
        Query::And(children) => {
            if let [only] = children.as_slice() {
                return match_expression(only);
            }
            let (negatives, positives): (Vec<&Query>, Vec<&Query>) =
                children.iter().partition(|c| matches!(c, Query::Not(_)));
            if negatives.is_empty() && !positives.is_empty() {
                return join_parenthesized(positives.into_iter(), " AND ");
            }
            let mut out = match positives.as_slice() {
                [] => format!("({})", universe()),
                [only] => format!("({})", match_expression(only)),
                _ => format!("({})", join_parenthesized(positives.into_iter(), " AND ")),
            };
            for n in negatives {
                if let Query::Not(inner) = n {
                    out.push_str(&format!(" NOT ({})", match_expression(inner)));
                }
            }
            out
        }
    }
}

/// Matches every record: the left operand of a `NOT` that has no positive part.
fn universe() -> String {
    kinds_expression(&RecordKind::ALL)
}

/// Matches no record.
fn nothing() -> String {
    let u = universe();
    format!("({u}) NOT ({u})")
}

/// An FTS5 string literal: `s` in double quotes with every inner `"` doubled.
fn fts5_string(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// Matches records of exactly `kinds` (nothing when empty).
fn kinds_expression(kinds: &[RecordKind]) -> String {
    match kinds {
        [] => nothing(),
        [only] => format!("kind : {}", fts5_string(kind_token(*only))),
        _ => format!(
            "kind : ({})",
            kinds
                .iter()
                .map(|k| fts5_string(kind_token(*k)))
                .collect::<Vec<_>>()
                .join(" OR ")
        ),
    }
}

fn join_parenthesized<'a>(items: impl Iterator<Item = &'a Query>, op: &str) -> String {
    items
        .map(|q| format!("({})", match_expression(q)))
        .collect::<Vec<_>>()
        .join(op)
}

#[cfg(test)]
mod tests {
    use agensh_domain::query::parse;

    use super::*;

    fn fts(input: &str) -> String {
        match_expression(&parse(input).unwrap())
    }

    fn p(text: &str) -> Query {
        Query::Phrase(text.to_string())
    }

    const U: &str = r#"(kind : ("observed" OR "fact" OR "fail" OR "claim" OR "patchsummary"))"#;

    #[test]
    fn phrase() {
        assert_eq!(
            fts("\"merge conflict\""),
            r#"{text detail} : "merge conflict""#
        );
    }

    #[test]
    fn prefix_word() {
        assert_eq!(fts("pars*"), r#"{text detail} : "pars" *"#);
    }

    #[test]
    fn double_negation_cancels() {
        assert_eq!(fts("NOT NOT a"), r#"{text detail} : "a""#);
    }

    #[test]
    fn kind_filter() {
        assert_eq!(fts("kind:FACT"), r#"kind : "fact""#);
    }

    #[test]
    fn author_filter_is_lowercased() {
        assert_eq!(fts("author:W01"), r#"author : "w01""#);
    }

    #[test]
    fn label_filter_is_exact_and_hex_encoded() {
        assert_eq!(fts("label:ab"), r#"label : "x6162""#);
        // Case is kept: labels match exactly.
        assert_ne!(fts("label:AB"), fts("label:ab"));
    }

    #[test]
    fn label_filter_value_may_be_quoted() {
        assert_eq!(fts("label:\"a b\""), r#"label : "x612062""#);
    }

    #[test]
    fn quote_inside_phrase_cannot_break_out() {
        // The user tries to smuggle FTS5 syntax; it stays inside one string literal.
        let q = parse(r#""x"" OR kind : ""fact""#).unwrap();
        assert_eq!(
            match_expression(&q),
            r#"{text detail} : "x"" OR kind : ""fact""#
        );
        // Built directly, too.
        assert_eq!(
            match_expression(&p(r#"a" OR "b"#)),
            r#"{text detail} : "a"" OR ""b""#
        );
        assert_eq!(
            match_expression(&Query::Label("\"".into())),
            r#"label : "x22""#
        );
    }

    #[test]
    fn fts5_syntax_in_words_stays_quoted() {
        assert_eq!(fts("col:x"), r#"{text detail} : "col:x""#);
        assert_eq!(fts("NEAR"), r#"{text detail} : "NEAR""#);
        assert_eq!(fts("^start"), r#"{text detail} : "^start""#);
        assert_eq!(fts("a+b"), r#"{text detail} : "a+b""#);
    }

    #[test]
    fn unknown_prefix_is_a_word() {
        assert_eq!(fts("foo:bar"), r#"{text detail} : "foo:bar""#);
    }

    #[test]
    fn universe_lists_every_kind() {
        for kind in RecordKind::ALL {
            let token = kind_token(kind);
            assert!(universe().contains(&format!("\"{token}\"")), "{kind}");
        }
    }

    #[test]
    fn kind_token_names() {
        assert_eq!(kind_token(RecordKind::Fact), "fact");
        assert_eq!(kind_token(RecordKind::Observed), "observed");
        assert_eq!(kind_token(RecordKind::Fail), "fail");
        assert_eq!(kind_token(RecordKind::Claim), "claim");
        assert_eq!(kind_token(RecordKind::PatchSummary), "patchsummary");
        // One kind, one token, whichever spelling of the kind the filter used.
        assert_eq!(fts("kind:PATCH_SUMMARY"), r#"kind : "patchsummary""#);
        assert_eq!(fts("kind:patch_summary"), r#"kind : "patchsummary""#);
        assert_eq!(fts("kind:PATCHSUMMARY"), r#"kind : "patchsummary""#);
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
            r#"kind : ("observed" OR "fact" OR "fail" OR "patchsummary")"#
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
        assert_eq!(format!("({})", match_expression(&Query::And(vec![]))), U);
        assert_eq!(match_expression(&Query::Or(vec![])), format!("{U} NOT {U}"));
    }
}
