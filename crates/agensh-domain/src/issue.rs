//! Issues: the organization's tracker of work to do, beside pull requests.
//!
//! An issue has a number (1, 2, 3, … never reused), a title, an optional body, labels and
//! at most one assignee. People (`admin`) and workers open them; a worker takes one by
//! assigning it to itself (`claim`); a merged pull request whose title or body says
//! `closes #N` closes issue N ([`closes_refs`]). The rules here are pure; the store keeps
//! the state and the hub decides who asks.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ids::{truncate_for_message, validate_worker_id, ADMIN};
use crate::text::{self, Lines};

/// Longest issue title, in characters.
pub const TITLE_LIMIT: usize = 200;
/// Longest issue body or comment, in characters.
pub const BODY_LIMIT: usize = 20_000;
/// Most labels on one issue.
pub const LABELS_LIMIT: usize = 10;
/// Longest label, in characters.
pub const LABEL_LIMIT: usize = 50;

/// Where an issue stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IssueState {
    Open,
    Closed,
}

impl IssueState {
    pub const ALL: [IssueState; 2] = [IssueState::Open, IssueState::Closed];

    pub fn as_str(self) -> &'static str {
        match self {
            IssueState::Open => "open",
            IssueState::Closed => "closed",
        }
    }

    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "open" => Ok(IssueState::Open),
            "closed" => Ok(IssueState::Closed),
            _ => Err(Error::invalid(
                "bad_state",
                format!(
                    "unknown issue state \"{}\" — use open, closed or all",
                    truncate_for_message(s)
                ),
            )),
        }
    }

    /// A list filter: `open`, `closed`, or `all` (`None`: both).
    pub fn parse_filter(s: &str) -> Result<Option<Self>> {
        if s == "all" {
            Ok(None)
        } else {
            IssueState::parse(s).map(Some)
        }
    }
}

/// An issue as someone opens it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewIssue {
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
}

impl NewIssue {
    /// Checks the title, body and labels.
    pub fn validate(&self) -> Result<()> {
        validate_title(&self.title)?;
        if let Some(b) = &self.body {
            validate_text("issue body", b)?;
        }
        validate_labels(&self.labels)
    }
}

/// Checks an issue title: 1 to [`TITLE_LIMIT`] characters of one plain line.
pub fn validate_title(title: &str) -> Result<()> {
    if text::is_blank(title) {
        return Err(Error::invalid(
            "empty_title",
            "the issue title is empty or only invisible characters — say in one line what is to be done",
        ));
    }
    let n = title.chars().count();
    if n > TITLE_LIMIT {
        return Err(Error::invalid(
            "title_too_long",
            format!("the issue title is {n} characters; the limit is {TITLE_LIMIT} — shorten it and put details in the body"),
        ));
    }
    text::check(
        "the issue title",
        title,
        Lines::One,
        "bad_title",
        "keep the title to one plain line and put details in the body",
    )
}

/// Checks an issue body or comment: not blank, at most [`BODY_LIMIT`] characters, lines of
/// plain text.
pub fn validate_text(what: &str, body: &str) -> Result<()> {
    text::check_body(
        what,
        body,
        BODY_LIMIT,
        "write what you mean, or leave it out",
    )
}

/// Checks one label: 1 to [`LABEL_LIMIT`] characters of one plain line, no comma (lists of
/// labels are written with commas), no space at either end.
pub fn validate_label(label: &str) -> Result<()> {
    if text::is_blank(label) {
        return Err(Error::invalid(
            "empty_label",
            "an issue label is empty or only invisible characters — name it, like bug or parser",
        ));
    }
    let n = label.chars().count();
    if n > LABEL_LIMIT {
        return Err(Error::invalid(
            "label_too_long",
            format!(
                "the issue label \"{}\" is {n} characters; the limit is {LABEL_LIMIT} — use a short name like bug or parser",
                truncate_for_message(label)
            ),
        ));
    }
    text::check(
        "an issue label",
        label,
        Lines::One,
        "bad_label",
        "use one plain line, like bug or good first issue",
    )?;
    if label.contains(',') || label.trim() != label {
        return Err(Error::invalid(
            "bad_label",
            format!(
                "the issue label \"{}\" has a comma or a space at an end — write each label on its own, like bug or good first issue",
                truncate_for_message(label)
            ),
        ));
    }
    Ok(())
}

/// Checks a list of labels: each one ([`validate_label`]) and at most [`LABELS_LIMIT`]
/// different ones.
pub fn validate_labels(labels: &[String]) -> Result<()> {
    for l in labels {
        validate_label(l)?;
    }
    let distinct = distinct_labels(labels.iter().cloned()).len();
    if distinct > LABELS_LIMIT {
        return Err(too_many_labels(distinct));
    }
    Ok(())
}

/// The refusal of an issue with more than [`LABELS_LIMIT`] labels.
pub fn too_many_labels(n: usize) -> Error {
    Error::invalid(
        "too_many_labels",
        format!("an issue may have at most {LABELS_LIMIT} labels, and this would give it {n} — remove some first"),
    )
}

/// `labels` sorted, each once.
pub fn distinct_labels(labels: impl IntoIterator<Item = String>) -> Vec<String> {
    let set: std::collections::BTreeSet<String> = labels.into_iter().collect();
    set.into_iter().collect()
}

/// What the labels of an issue become: `current` with `add` added and `remove` taken away
/// (sorted, each once). Every label given is checked, and the result may have at most
/// [`LABELS_LIMIT`].
pub fn apply_labels(current: &[String], add: &[String], remove: &[String]) -> Result<Vec<String>> {
    if add.is_empty() && remove.is_empty() {
        return Err(Error::invalid(
            "no_labels",
            "name at least one label to add or remove",
        ));
    }
    validate_labels(add)?;
    for l in remove {
        validate_label(l)?;
    }
    let out = distinct_labels(
        current
            .iter()
            .chain(add)
            .filter(|l| !remove.contains(l))
            .cloned(),
    );
    if out.len() > LABELS_LIMIT {
        return Err(too_many_labels(out.len()));
    }
    Ok(out)
}

/// A comment on an issue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssueComment {
    pub id: i64,
    pub author: String,
    pub text: String,
    pub created_at: i64,
}

/// An issue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Issue {
    pub number: i64,
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// A worker id, or `admin`.
    pub author: String,
    pub state: IssueState,
    /// Sorted, each once.
    #[serde(default)]
    pub labels: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignee: Option<String>,
    /// How many comments it has.
    #[serde(default)]
    pub comment_count: u64,
    /// Oldest first; filled only when one issue is read whole.
    #[serde(default)]
    pub comments: Vec<IssueComment>,
    pub created_at: i64,
    pub updated_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_at: Option<i64>,
    /// Who closed it: a worker id, `admin`, or `pr#N` for a merged pull request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_by: Option<String>,
}

/// Who closed an issue when pull request `pr` merged: `pr#3`.
pub fn closed_by_pr(pr: i64) -> String {
    format!("pr#{pr}")
}

/// Checks that `actor` may set the assignee of an issue in `state`, now `current`, to
/// `new`: the admin (`admin_rights`) may assign anyone; a worker may assign only itself (a
/// claim) and unassign only itself. A closed issue is assigned to nobody new.
pub fn check_assign(
    number: i64,
    actor: &str,
    admin_rights: bool,
    state: IssueState,
    current: Option<&str>,
    new: Option<&str>,
) -> Result<()> {
    if let Some(w) = new {
        validate_worker_id(w)?;
        if state == IssueState::Closed {
            return Err(Error::conflict(
                "issue_closed",
                format!("issue #{number} is closed — reopen it before assigning it, or pick an open one"),
            ));
        }
    }
    if admin_rights {
        return Ok(());
    }
    match (current, new) {
        (_, Some(w)) if w != actor => Err(Error::forbidden(
            "not_yourself",
            format!("{actor} may assign issue #{number} only to itself (a claim), not to {w} — message {w} to suggest it"),
        )),
        (Some(c), Some(_)) if c != actor => Err(Error::conflict(
            "issue_assigned",
            format!("issue #{number} is assigned to {c} already — pick another issue, or ask {c} to unassign it"),
        )),
        (Some(c), None) if c != actor => Err(Error::forbidden(
            "not_your_issue",
            format!("issue #{number} is assigned to {c}, not to {actor}; only {c} or the admin may unassign it — message {c} instead"),
        )),
        _ => Ok(()),
    }
}

/// Checks that `actor` may close or reopen `issue` (`action`: "close" or "reopen"): its
/// author, its assignee, or the admin.
pub fn check_close(issue: &Issue, actor: &str, admin_rights: bool, action: &str) -> Result<()> {
    let (want, code, advice) = match action {
        "reopen" => (IssueState::Closed, "issue_open", "it is open already"),
        _ => (IssueState::Open, "issue_closed", "it is closed already"),
    };
    if issue.state != want {
        return Err(Error::conflict(
            code,
            format!(
                "issue #{} cannot {action}: {advice} — list the issues to see their states",
                issue.number
            ),
        ));
    }
    if admin_rights
        || actor == ADMIN
        || actor == issue.author
        || issue.assignee.as_deref() == Some(actor)
    {
        return Ok(());
    }
    Err(Error::forbidden(
        "not_your_issue",
        format!(
            "only the author ({}), the assignee or the admin may {action} issue #{} — comment on it instead",
            issue.author, issue.number
        ),
    ))
}

/// The words that close an issue when a merged pull request says `WORD #N`.
const CLOSING_WORDS: [&str; 9] = [
    "close", "closes", "closed", "fix", "fixes", "fixed", "resolve", "resolves", "resolved",
];

/// Whether byte `b` is part of a word (ASCII letters, digits, `_`, and any byte of a
/// non-ASCII character).
fn wordy(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

/// The issue numbers `text` closes, GitHub-like: `closes #N`, `close #N`, `closed #N`,
/// `fixes #N`, `fix #N`, `fixed #N`, `resolves #N`, `resolve #N`, `resolved #N`, in any
/// case, the word standing alone, then a colon and/or blanks, then `#` and the number.
/// Each number once, in the order they first appear.
pub fn closes_refs(text: &str) -> Vec<i64> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if (i > 0 && wordy(b[i - 1])) || !b[i].is_ascii_alphabetic() {
            i += 1;
            continue;
        }
        let mut end = i;
        while end < b.len() && b[end].is_ascii_alphabetic() {
            end += 1;
        }
        let word = &text[i..end];
        i = end;
        if (end < b.len() && wordy(b[end]))
            || !CLOSING_WORDS.iter().any(|w| w.eq_ignore_ascii_case(word))
        {
            continue;
        }
        let mut j = end;
        if j < b.len() && b[j] == b':' {
            j += 1;
        }
        while j < b.len() && (b[j] == b' ' || b[j] == b'\t') {
            j += 1;
        }
        if j == end || j >= b.len() || b[j] != b'#' {
            continue;
        }
        let start = j + 1;
        let mut k = start;
        while k < b.len() && b[k].is_ascii_digit() {
            k += 1;
        }
        if k == start || k - start > 18 || (k < b.len() && wordy(b[k])) {
            continue;
        }
        if let Ok(n) = text[start..k].parse::<i64>() {
            if n > 0 && !out.contains(&n) {
                out.push(n);
            }
        }
        i = k;
    }
    out
}

/// The format of a file of issues to seed an organization with (`agensh init --issues`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeedFormat {
    /// `[[issue]]` tables with `title`, `body` and `labels`.
    Toml,
    /// An array of objects with `title`, `body` and `labels`.
    Json,
}

/// One issue of a seed file, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SeedIssue {
    title: String,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    labels: Vec<String>,
}

/// A TOML seed file: `[[issue]]` tables.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SeedToml {
    #[serde(default)]
    issue: Vec<SeedIssue>,
}

/// Reads and checks the issues of a seed file's `text`: every entry is checked, and the
/// first bad one is named by its place (from 1) and title, so nothing is created from a bad
/// file. A file with no issue is refused too.
pub fn parse_seed(text: &str, format: SeedFormat) -> Result<Vec<NewIssue>> {
    let bad = |why: String| Error::invalid("bad_issues_file", why);
    let entries: Vec<SeedIssue> = match format {
        SeedFormat::Toml => {
            toml::from_str::<SeedToml>(text)
                .map_err(|e| {
                    bad(format!(
                        "it is not TOML of [[issue]] tables with title, body and labels: {}",
                        e.to_string().trim_end()
                    ))
                })?
                .issue
        }
        SeedFormat::Json => serde_json::from_str(text).map_err(|e| {
            bad(format!(
                "it is not a JSON array of objects with title, body and labels: {e}"
            ))
        })?,
    };
    if entries.is_empty() {
        return Err(bad(match format {
            SeedFormat::Toml => {
                "it has no [[issue]] table — add one per issue, each with a title".to_string()
            }
            SeedFormat::Json => {
                "its array is empty — add one object per issue, each with a title".to_string()
            }
        }));
    }
    let mut out = Vec::with_capacity(entries.len());
    for (i, e) in entries.into_iter().enumerate() {
        let issue = NewIssue {
            title: e.title,
            body: e.body,
            labels: e.labels,
        };
        issue.validate().map_err(|err| {
            bad(format!(
                "issue {} (\"{}\"): {}",
                i + 1,
                truncate_for_message(&issue.title),
                err.message
            ))
        })?;
        out.push(issue);
    }
    Ok(out)
}

/// Parses an issue number as people and models write it: `3` or `#3`.
pub fn parse_number(s: &str) -> Result<i64> {
    crate::ids::parse_number(s.trim()).ok_or_else(|| {
        Error::invalid(
            "bad_issue_number",
            format!(
                "\"{}\" is not an issue number — use the number the issue list shows, like 3",
                truncate_for_message(s)
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_closing_word_in_any_case_closes() {
        for w in CLOSING_WORDS {
            assert_eq!(closes_refs(&format!("{w} #4")), vec![4], "{w}");
            assert_eq!(
                closes_refs(&format!("{} #4", w.to_uppercase())),
                vec![4],
                "{w}"
            );
        }
        assert_eq!(closes_refs("Fixes: #12"), vec![12]);
        assert_eq!(closes_refs("RESOLVED:#7."), vec![7]);
        assert_eq!(
            closes_refs("closes\t#2, fixes #3 and closes #2"),
            vec![2, 3]
        );
        assert_eq!(
            closes_refs("Parser done.\n\nCloses #10\nfix #11"),
            vec![10, 11]
        );
        assert_eq!(closes_refs("(fixes #5)"), vec![5]);
    }

    #[test]
    fn other_words_and_shapes_do_not_close() {
        for t in [
            "discloses #3",
            "prefix #3",
            "closes 3",
            "closes #",
            "closes #0",
            "closes#3",
            "closes #3abc",
            "closes #12_",
            "closesx #3",
            "see #3",
            "closing #3",
            "closes\n#3",
            "closes ##3",
            "éfixes #3",
            "closes #9999999999999999999",
        ] {
            assert!(closes_refs(t).is_empty(), "{t:?}: {:?}", closes_refs(t));
        }
    }

    #[test]
    fn titles_bodies_and_labels_are_checked_with_advice() {
        let ok = NewIssue {
            title: "Parser loses line numbers".into(),
            body: Some("Steps:\n\t1. parse\r\n2. look".into()),
            labels: vec!["bug".into(), "good first issue".into()],
        };
        assert!(ok.validate().is_ok());
        let code = |i: NewIssue| i.validate().unwrap_err().code;
        assert_eq!(
            code(NewIssue {
                title: "\u{200b}".into(),
                ..ok.clone()
            }),
            "empty_title"
        );
        assert_eq!(
            code(NewIssue {
                title: "two\nlines".into(),
                ..ok.clone()
            }),
            "bad_title"
        );
        let e = NewIssue {
            title: "x".repeat(TITLE_LIMIT + 1),
            ..ok.clone()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.code, "title_too_long");
        assert!(e.message.contains("the limit is 200"), "{}", e.message);
        assert_eq!(
            code(NewIssue {
                body: Some("x".repeat(BODY_LIMIT + 1)),
                ..ok.clone()
            }),
            "text_too_long"
        );
        assert_eq!(
            code(NewIssue {
                body: Some("a\u{1b}[2J".into()),
                ..ok.clone()
            }),
            "control_chars"
        );
        assert_eq!(
            code(NewIssue {
                labels: vec!["x".repeat(LABEL_LIMIT + 1)],
                ..ok.clone()
            }),
            "label_too_long"
        );
        for bad in ["a,b", " lead", "tab\there"] {
            assert_eq!(
                code(NewIssue {
                    labels: vec![bad.into()],
                    ..ok.clone()
                }),
                "bad_label",
                "{bad:?}"
            );
        }
        let e = NewIssue {
            labels: (0..=LABELS_LIMIT).map(|i| format!("l{i}")).collect(),
            ..ok.clone()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.code, "too_many_labels");
        assert!(e.message.contains("at most 10"), "{}", e.message);
        // The same label twice counts once.
        assert!(NewIssue {
            labels: vec!["a".into(); 12],
            ..ok
        }
        .validate()
        .is_ok());
    }

    #[test]
    fn labels_are_added_and_removed_as_a_sorted_set() {
        let cur = vec!["bug".to_string(), "parser".to_string()];
        assert_eq!(
            apply_labels(&cur, &["api".into(), "bug".into()], &["parser".into()]).unwrap(),
            vec!["api", "bug"]
        );
        assert_eq!(apply_labels(&cur, &[], &[]).unwrap_err().code, "no_labels");
        let many: Vec<String> = (0..9).map(|i| format!("l{i}")).collect();
        assert_eq!(
            apply_labels(&cur, &many, &[]).unwrap_err().code,
            "too_many_labels"
        );
    }

    #[test]
    fn workers_assign_only_themselves_and_the_admin_anyone() {
        use IssueState::*;
        let ok = |actor, admin, cur, new| check_assign(1, actor, admin, Open, cur, new);
        assert!(ok("w01", false, None, Some("w01")).is_ok());
        assert!(ok("w01", false, Some("w01"), Some("w01")).is_ok());
        assert!(ok("w01", false, Some("w01"), None).is_ok());
        assert!(ok("admin", true, Some("w02"), Some("w03")).is_ok());
        assert!(ok("w01", true, Some("w02"), None).is_ok());
        assert_eq!(
            ok("w01", false, None, Some("w02")).unwrap_err().code,
            "not_yourself"
        );
        assert_eq!(
            ok("w01", false, Some("w02"), Some("w01")).unwrap_err().code,
            "issue_assigned"
        );
        assert_eq!(
            ok("w01", false, Some("w02"), None).unwrap_err().code,
            "not_your_issue"
        );
        assert_eq!(
            ok("admin", true, None, Some("admin")).unwrap_err().code,
            "bad_worker_id"
        );
        assert_eq!(
            check_assign(1, "w01", false, Closed, None, Some("w01"))
                .unwrap_err()
                .code,
            "issue_closed"
        );
    }

    #[test]
    fn seed_files_are_toml_or_json_and_a_bad_entry_is_named() {
        let toml = "[[issue]]\ntitle = \"Parser\"\nbody = \"line 1\\nline 2\"\nlabels = [\"p1\"]\n\n[[issue]]\ntitle = \"Docs\"\n";
        let got = parse_seed(toml, SeedFormat::Toml).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].body.as_deref(), Some("line 1\nline 2"));
        assert_eq!(got[0].labels, ["p1"]);
        let json = r#"[{"title":"Parser","labels":["p1"]},{"title":"Docs","body":"b"}]"#;
        assert_eq!(parse_seed(json, SeedFormat::Json).unwrap().len(), 2);
        let e = parse_seed(
            "[[issue]]\ntitle = \"ok\"\n[[issue]]\ntitle = \"\"\n",
            SeedFormat::Toml,
        )
        .unwrap_err();
        assert_eq!(e.code, "bad_issues_file");
        assert!(
            e.message
                .starts_with("issue 2 (\"\"): the issue title is empty"),
            "{}",
            e.message
        );
        let e = parse_seed(
            "[[issue]]\ntitle = \"x\"\ntitel = \"y\"\n",
            SeedFormat::Toml,
        )
        .unwrap_err();
        assert!(e.message.contains("titel"), "{}", e.message);
        assert!(parse_seed("", SeedFormat::Toml)
            .unwrap_err()
            .message
            .contains("no [[issue]] table"));
        assert!(parse_seed("{}", SeedFormat::Json)
            .unwrap_err()
            .message
            .starts_with("it is not a JSON array"));
    }

    #[test]
    fn numbers_take_a_hash() {
        assert_eq!(parse_number("#3").unwrap(), 3);
        assert_eq!(parse_number("12").unwrap(), 12);
        for bad in ["", "#", "0", "-1", "x", "99999999999999999999"] {
            assert_eq!(parse_number(bad).unwrap_err().code, "bad_issue_number");
        }
        assert_eq!(IssueState::parse_filter("all").unwrap(), None);
        assert_eq!(
            IssueState::parse_filter("closed").unwrap(),
            Some(IssueState::Closed)
        );
        assert_eq!(IssueState::parse("done").unwrap_err().code, "bad_state");
    }
}
