//! Text that cannot fool people or agents: what a stored text may hold, how stored text is
//! shown, and the keys under which look-alike labels and paths compare equal.
//!
//! Every text a worker can store is checked here before it is stored, and refused (never
//! silently changed) when it holds a character that acts on a terminal or reorders what is
//! shown: a C0 or C1 control (Unicode category Cc: ESC starts terminal sequences that
//! retitle or clear a terminal, CR overwrites a line) or a bidirectional control (U+202A to
//! U+202E, U+2066 to U+2069, U+200E, U+200F, U+061C: they make text read differently from
//! how it is stored). Fields of many lines ([`Lines::Many`]: detail, message and PR bodies,
//! reviews, comments, notices) may keep line feeds, tabs and CR LF line ends; one-line
//! fields ([`Lines::One`]) none of them. A text of only invisible characters
//! ([`is_blank`]) counts as empty. Refusing, not replacing, keeps what is stored equal to
//! what was sent, and the error says what to remove.
//!
//! What was stored before these checks still reaches readers, so every place that shows
//! stored text to a person goes through [`escape`], which writes what the checks refuse as
//! `\u{1b}`.
//!
//! Labels and claimed paths are compared through [`label_key`] and [`path_key`]: NFKC, then
//! the confusables skeleton of Unicode Technical Standard #39, so `pаrser` with a Cyrillic
//! `а`, or `ｐａｒｓｅｒ` in full-width letters, meets `parser`.

use std::borrow::Cow;

use unicode_normalization::UnicodeNormalization;

use crate::error::{Error, Result};

/// What a field may hold besides one line of text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// One line: no control character at all (record text, titles, keys).
    One,
    /// Many lines: line feeds, tabs and CR LF line ends (bodies, details, messages).
    Many,
}

/// The advice of an error for a multi-line field that holds a control character.
pub const PLAIN_TEXT: &str = "remove terminal control sequences; plain text only";

/// Whether `c` is a bidirectional formatting control: embeddings and overrides
/// (U+202A–U+202E), isolates (U+2066–U+2069) and the marks U+200E, U+200F, U+061C.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// Whether `c` shows nothing: white space, a default-ignorable code point (zero-width
/// spaces and joiners, U+2060, U+FEFF, variation selectors, bidirectional marks, soft
/// hyphen, Hangul fillers, tags) or the blank Braille pattern.
pub fn is_invisible(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{034F}'
                | '\u{061C}'
                | '\u{115F}'..='\u{1160}'
                | '\u{17B4}'..='\u{17B5}'
                | '\u{180B}'..='\u{180F}'
                | '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{2800}'
                | '\u{3164}'
                | '\u{FE00}'..='\u{FE0F}'
                | '\u{FEFF}'
                | '\u{FFA0}'
                | '\u{FFF0}'..='\u{FFF8}'
                | '\u{1BCA0}'..='\u{1BCA3}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0000}'..='\u{E0FFF}'
        )
}

/// Whether `text` shows nothing at all (empty, or only [`is_invisible`] characters): such
/// a text is refused like an empty one.
pub fn is_blank(text: &str) -> bool {
    text.chars().all(is_invisible)
}

/// Whether `c`, followed by `next`, may not stand in a field of `lines`.
fn refused(c: char, next: Option<char>, lines: Lines) -> bool {
    if is_bidi_control(c) {
        return true;
    }
    if !c.is_control() {
        return false;
    }
    match lines {
        Lines::One => true,
        Lines::Many => !(c == '\n' || c == '\t' || (c == '\r' && next == Some('\n'))),
    }
}

/// The first character of `text` a field of `lines` may not hold, with its position
/// (counted in characters from 1).
pub fn first_refused(text: &str, lines: Lines) -> Option<(usize, char)> {
    let mut chars = text.chars().peekable();
    let mut at = 0;
    while let Some(c) = chars.next() {
        at += 1;
        if refused(c, chars.peek().copied(), lines) {
            return Some((at, c));
        }
    }
    None
}

/// What `c` is, in an error message.
fn describe(c: char) -> &'static str {
    match c {
        '\u{1b}' => "an escape character",
        '\n' => "a line break",
        '\r' => "a carriage return",
        '\t' => "a tab",
        '\0' => "a NUL character",
        c if is_bidi_control(c) => "a bidirectional control character",
        _ => "a control character",
    }
}

/// Refuses `text` when it holds a character a field of `lines` may not hold. The error has
/// `code` and says `field contains an escape character (U+001B) at character 12 — advice`.
pub fn check(field: &str, text: &str, lines: Lines, code: &str, advice: &str) -> Result<()> {
    match first_refused(text, lines) {
        None => Ok(()),
        Some((at, c)) => Err(Error::invalid(
            code,
            format!(
                "{field} contains {} (U+{:04X}) at character {at} — {advice}",
                describe(c),
                c as u32
            ),
        )),
    }
}

/// Checks a long text of many lines (a PR's or an issue's body, a review, a comment): not
/// blank (`empty_text`, with `if_blank` as the advice), at most `limit` characters
/// (`text_too_long`), lines of plain text ([`check`], `control_chars`). `what` names it.
pub fn check_body(what: &str, body: &str, limit: usize, if_blank: &str) -> Result<()> {
    if is_blank(body) {
        return Err(Error::invalid(
            "empty_text",
            format!("the {what} is empty or only invisible characters — {if_blank}"),
        ));
    }
    let n = body.chars().count();
    if n > limit {
        return Err(Error::invalid(
            "text_too_long",
            format!("the {what} is {n} characters; the limit is {limit} — shorten it or put the rest in a file in the repository"),
        ));
    }
    check(
        &format!("the {what}"),
        body,
        Lines::Many,
        "control_chars",
        PLAIN_TEXT,
    )
}

/// `text` with every character a field of `lines` may not hold written visibly as
/// `\u{1b}`, for showing stored text (also text stored before the checks) to a person.
pub fn escape(text: &str, lines: Lines) -> Cow<'_, str> {
    if first_refused(text, lines).is_none() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if refused(c, chars.peek().copied(), lines) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `json` (JSON text) with every character a terminal could act on inside its strings
/// (DEL, the C1 controls and bidirectional controls, which JSON lets stand raw) written as
/// a JSON escape (`\u202e`): the same JSON value, safe to print.
pub fn escape_json(json: &str) -> Cow<'_, str> {
    if first_refused(json, Lines::Many).is_none() {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 8);
    let mut chars = json.chars().peekable();
    while let Some(c) = chars.next() {
        if refused(c, chars.peek().copied(), Lines::Many) {
            // Every refused character is in the Basic Multilingual Plane: one \uXXXX.
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// The key under which labels that look alike are equal: NFKC, then the UTS #39
/// confusables skeleton (`pаrser` with a Cyrillic `а`, `ｐａｒｓｅｒ` and `parser` share one).
/// Compare labels with it; store and show the label as written.
pub fn label_key(label: &str) -> String {
    unicode_security::skeleton(&label.nfkc().collect::<String>()).collect()
}

/// The key under which claimed paths that look alike are equal: [`label_key`] of the path
/// without trailing slashes.
pub fn path_key(path: &str) -> String {
    label_key(path).trim_end_matches('/').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_escape_in_a_multi_line_field_is_refused_with_its_position() {
        let e = check(
            "detail",
            "see output \u{1b}]0;pwned\u{7}",
            Lines::Many,
            "control_chars",
            PLAIN_TEXT,
        )
        .unwrap_err();
        assert_eq!(e.code, "control_chars");
        assert_eq!(
            e.message,
            "detail contains an escape character (U+001B) at character 12 — remove terminal control sequences; plain text only"
        );
    }

    #[test]
    fn multi_line_fields_keep_line_feeds_tabs_and_crlf() {
        assert_eq!(first_refused("a\n\tb\r\nc", Lines::Many), None);
        assert_eq!(first_refused("a\rb", Lines::Many), Some((2, '\r')));
        assert_eq!(first_refused("a\u{7f}", Lines::Many), Some((2, '\u{7f}')));
        assert_eq!(first_refused("a\u{9b}2J", Lines::Many), Some((2, '\u{9b}')));
        assert_eq!(first_refused("a\nb", Lines::One), Some((2, '\n')));
        assert_eq!(first_refused("a\tb", Lines::One), Some((2, '\t')));
    }

    #[test]
    fn bidi_controls_are_refused_everywhere() {
        for c in [
            '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}', '\u{2066}', '\u{2067}',
            '\u{2068}', '\u{2069}', '\u{200E}', '\u{200F}', '\u{061C}',
        ] {
            let text = format!("fn main() {c}");
            for lines in [Lines::One, Lines::Many] {
                assert_eq!(first_refused(&text, lines), Some((11, c)), "{c:?}");
            }
        }
        let e = check(
            "message",
            "ok \u{202E}txt.exe",
            Lines::Many,
            "control_chars",
            PLAIN_TEXT,
        )
        .unwrap_err();
        assert!(
            e.message.starts_with(
                "message contains a bidirectional control character (U+202E) at character 4"
            ),
            "{}",
            e.message
        );
    }

    #[test]
    fn text_of_only_invisible_characters_is_blank() {
        for t in [
            "",
            " \t\n",
            "\u{200B}\u{200C}\u{200D}",
            "\u{2060}\u{FEFF}",
            "\u{FE0F}\u{200E}",
            "\u{3000}\u{00A0}\u{2800}",
            "\u{E0041}",
        ] {
            assert!(is_blank(t), "{t:?}");
        }
        for t in ["x", "\u{200B}x", "é", "日本語", "👍🏽"] {
            assert!(!is_blank(t), "{t:?}");
        }
    }

    #[test]
    fn plain_non_english_text_passes() {
        for t in [
            "café crème",
            "日本語のテキスト",
            "مرحبا بالعالم",
            "שלום עולם",
            "नमस्ते",
            "👨‍👩‍👧 family emoji with joiners",
            "می‌خواهم",
        ] {
            assert_eq!(first_refused(t, Lines::One), None, "{t}");
            assert!(!is_blank(t), "{t}");
        }
    }

    #[test]
    fn escape_shows_what_the_checks_refuse_and_leaves_the_rest() {
        assert_eq!(escape("plain café", Lines::One), "plain café");
        assert!(matches!(escape("plain", Lines::One), Cow::Borrowed(_)));
        assert_eq!(
            escape("a\u{1b}[2Jb\u{202E}c", Lines::Many),
            "a\\u{1b}[2Jb\\u{202e}c"
        );
        assert_eq!(
            escape("a\nb\tc\r\nd\re", Lines::Many),
            "a\nb\tc\r\nd\\u{d}e"
        );
        assert_eq!(escape("a\nb", Lines::One), "a\\u{a}b");
    }

    #[test]
    fn escaped_json_is_the_same_value_with_nothing_raw() {
        let value = serde_json::json!({ "text": "a\u{1b}b\u{9b}c\u{202E}d\u{7f}", "n": 1 });
        let raw = serde_json::to_string_pretty(&value).unwrap();
        let safe = escape_json(&raw);
        assert_eq!(first_refused(&safe, Lines::Many), None, "{safe}");
        assert!(safe.contains("\\u202e"), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, value);
    }

    #[test]
    fn look_alike_labels_share_a_key() {
        assert_eq!(label_key("p\u{0430}rser"), label_key("parser"));
        assert_eq!(label_key("ｐａｒｓｅｒ"), label_key("parser"));
        assert_eq!(label_key("pa\u{200B}rser"), label_key("parser"));
        assert_ne!(label_key("parser"), label_key("lexer"));
        assert_ne!(label_key("café"), label_key("cafe"));
        assert_eq!(label_key("café"), label_key("cafe\u{301}"));
    }

    #[test]
    fn look_alike_paths_share_a_key() {
        assert_eq!(path_key("src/p\u{0430}rser.rs"), path_key("src/parser.rs"));
        assert_eq!(path_key("ｓｒｃ/"), path_key("src"));
        assert_ne!(path_key("src/a.rs"), path_key("src/b.rs"));
    }
}
