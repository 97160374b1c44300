//! Pull requests on the shared repository, and the rules for branch names.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ids::truncate_for_message;
use crate::text::{self, Lines};

/// The branch every pull request merges into.
pub const BASE: &str = "main";
/// Longest PR title, in characters.
pub const TITLE_LIMIT: usize = 200;
/// Longest PR body, review or comment, in characters (so it fits the hub's default
/// 64 KiB request limit even in 4-byte characters).
pub const BODY_LIMIT: usize = 10_000;
/// Longest branch name, in bytes.
pub const BRANCH_LIMIT: usize = 200;

/// Where a pull request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrState {
    Open,
    Merged,
    Closed,
}

impl PrState {
    pub fn as_str(self) -> &'static str {
        match self {
            PrState::Open => "open",
            PrState::Merged => "merged",
            PrState::Closed => "closed",
        }
    }

    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "open" => Ok(PrState::Open),
            "merged" => Ok(PrState::Merged),
            "closed" => Ok(PrState::Closed),
            _ => Err(Error::invalid(
                "bad_state",
                format!(
                    "unknown PR state \"{}\" — use open, merged or closed",
                    truncate_for_message(s)
                ),
            )),
        }
    }
}

/// A reviewer's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Approve,
    RequestChanges,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Approve => "approve",
            Verdict::RequestChanges => "request_changes",
        }
    }

    /// Parses `approve`, `request_changes` or `request-changes`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "approve" => Ok(Verdict::Approve),
            "request_changes" | "request-changes" => Ok(Verdict::RequestChanges),
            _ => Err(Error::invalid(
                "bad_verdict",
                format!(
                    "unknown review verdict \"{}\" — use approve or request-changes",
                    truncate_for_message(s)
                ),
            )),
        }
    }
}

/// A pull request as a worker opens it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewPr {
    /// A branch in the author's namespace, e.g. `w03/parser`.
    pub branch: String,
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

impl NewPr {
    /// Checks the title and body, and that `author` may open a PR from the branch.
    pub fn validate(&self, author: &str) -> Result<()> {
        validate_branch(&self.branch)?;
        check_namespace(author, &self.branch, "open a PR from")?;
        if text::is_blank(&self.title) {
            return Err(Error::invalid(
                "empty_title",
                "the PR title is empty or only invisible characters — say in one line what the change does",
            ));
        }
        let n = self.title.chars().count();
        if n > TITLE_LIMIT {
            return Err(Error::invalid(
                "title_too_long",
                format!("the PR title is {n} characters; the limit is {TITLE_LIMIT} — shorten it and put details in the body"),
            ));
        }
        text::check(
            "the PR title",
            &self.title,
            Lines::One,
            "bad_title",
            "keep the title to one plain line and put details in the body",
        )?;
        if let Some(b) = &self.body {
            validate_text("PR body", b)?;
        }
        Ok(())
    }
}

/// Checks a PR body, review or comment text: not empty nor only invisible characters, at
/// most [`BODY_LIMIT`] characters, lines of plain text ([`text::check`]).
pub fn validate_text(what: &str, body: &str) -> Result<()> {
    text::check_body(what, body, BODY_LIMIT, "write what you mean")
}

/// Checks a branch name the way git does, and more strictly: printable ASCII, no `..`,
/// no `@{`, no `refs/` prefix, no leading `-`, no empty, `.`-leading or `.lock` part.
pub fn validate_branch(name: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::invalid(
            "bad_branch",
            format!(
                "branch \"{}\" {why} — use a name like w03/parser-errors (letters, digits, - _ . /)",
                truncate_for_message(name)
            ),
        ))
    };
    if name.is_empty() {
        return bad("is empty");
    }
    if name.len() > BRANCH_LIMIT {
        return bad("is longer than 200 characters");
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "-_./".contains(*c)))
    {
        return bad(&format!("contains {c:?}"));
    }
    if name.starts_with('-') {
        return bad("starts with -");
    }
    if name.starts_with("refs/") || name == "HEAD" {
        return bad("is a ref path, not a branch name");
    }
    if name.contains("..") {
        return bad("contains ..");
    }
    if name.ends_with('/') || name.ends_with('.') {
        return bad("ends with / or .");
    }
    for part in name.split('/') {
        if part.is_empty() {
            return bad("has an empty part (//)");
        }
        if part.starts_with('.') {
            return bad("has a part starting with .");
        }
        if part.ends_with(".lock") {
            return bad("has a part ending in .lock");
        }
    }
    Ok(())
}

/// Whether `branch` lies in `worker`'s namespace (`<worker>/...`).
pub fn in_namespace(worker: &str, branch: &str) -> bool {
    branch
        .strip_prefix(worker)
        .is_some_and(|rest| rest.starts_with('/') && rest.len() > 1)
}

/// Fails unless `branch` is in `worker`'s namespace; `action` names what was refused.
pub fn check_namespace(worker: &str, branch: &str, action: &str) -> Result<()> {
    if in_namespace(worker, branch) {
        Ok(())
    } else {
        Err(Error::forbidden(
            "outside_namespace",
            format!(
                "{worker} may only {action} branches under {worker}/ (e.g. {worker}/work), not \"{}\"",
                truncate_for_message(branch)
            ),
        ))
    }
}

/// A review of a pull request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Review {
    pub id: i64,
    pub author: String,
    pub verdict: Verdict,
    pub text: String,
    pub created_at: i64,
    /// The commit of the PR's branch that was reviewed: an approval counts only while the
    /// branch is still there (a push after it voids it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// A comment on a pull request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comment {
    pub id: i64,
    pub author: String,
    pub text: String,
    pub created_at: i64,
}

/// A pull request with its reviews and comments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullRequest {
    pub number: i64,
    pub author: String,
    pub branch: String,
    pub base: String,
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    pub state: PrState,
    pub created_at: i64,
    pub updated_at: i64,
    /// Who merged or closed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_by: Option<String>,
    /// The merge commit on `main`, once merged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge_commit: Option<String>,
    #[serde(default)]
    pub reviews: Vec<Review>,
    #[serde(default)]
    pub comments: Vec<Comment>,
    /// Where it is in the merge queue, while a merge of it waits there (never stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueuePlace>,
}

/// A waiting merge's place in the merge queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuePlace {
    /// 1 lands first.
    pub place: usize,
    /// The gated chain it is folded into; none while it waits behind it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
    /// The gate run whose verdict it waits for; none between rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_run: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_branch_names_are_accepted() {
        for b in ["w01/work", "w01/parser-v2", "w12/a/b_c.d"] {
            assert!(validate_branch(b).is_ok(), "{b}");
        }
    }

    #[test]
    fn git_tricks_in_branch_names_are_rejected() {
        for b in [
            "",
            "w01/../main",
            "refs/heads/main",
            "-w01/x",
            "w01//x",
            "w01/x.lock",
            "w01/.x",
            "w01/x/",
            "w01/x.",
            "w01/a b",
            "w01/a~1",
            "w01/a^",
            "w01/a:b",
            "w01/a@{1}",
            "w01/a\u{7}",
            "HEAD",
            "w01/ü",
        ] {
            assert_eq!(validate_branch(b).unwrap_err().code, "bad_branch", "{b:?}");
        }
    }

    #[test]
    fn namespace_is_the_worker_id_and_a_slash() {
        assert!(in_namespace("w01", "w01/work"));
        assert!(!in_namespace("w01", "w01"));
        assert!(!in_namespace("w01", "w01/"));
        assert!(!in_namespace("w01", "w011/work"));
        assert!(!in_namespace("w01", "main"));
    }

    #[test]
    fn a_pr_from_another_workers_branch_is_refused() {
        let pr = NewPr {
            branch: "w02/work".into(),
            title: "x".into(),
            body: None,
        };
        let e = pr.validate("w01").unwrap_err();
        assert_eq!(e.code, "outside_namespace");
        assert!(e
            .message
            .contains("w01 may only open a PR from branches under w01/"));
    }

    fn pr(title: &str, body: Option<&str>) -> NewPr {
        NewPr {
            branch: "w01/work".into(),
            title: title.into(),
            body: body.map(str::to_string),
        }
    }

    #[test]
    fn an_escape_in_a_pr_body_is_refused() {
        let e = pr(
            "Fix the parser",
            Some("done.\n\u{1b}[2J\u{1b}]0;owned\u{7}"),
        )
        .validate("w01")
        .unwrap_err();
        assert_eq!(e.code, "control_chars");
        assert_eq!(
            e.message,
            "the PR body contains an escape character (U+001B) at character 7 — remove terminal control sequences; plain text only"
        );
    }

    #[test]
    fn pr_titles_are_one_plain_visible_line() {
        assert_eq!(
            pr("a\u{202E}b", None).validate("w01").unwrap_err().code,
            "bad_title"
        );
        assert_eq!(
            pr("\u{200B}\u{2060}", None)
                .validate("w01")
                .unwrap_err()
                .code,
            "empty_title"
        );
        assert!(pr("Gère les accents — 日本語", Some("a\r\nb\n\tc"))
            .validate("w01")
            .is_ok());
    }

    #[test]
    fn reviews_and_comments_refuse_controls_and_invisible_only_text() {
        assert_eq!(
            validate_text("review", "ok\u{9b}2J").unwrap_err().code,
            "control_chars"
        );
        assert_eq!(
            validate_text("comment", "\u{FEFF}\u{FE0F}")
                .unwrap_err()
                .code,
            "empty_text"
        );
        assert!(validate_text("review", "LGTM\n- naming ok").is_ok());
    }

    #[test]
    fn verdicts_accept_both_spellings() {
        assert_eq!(
            Verdict::parse("request-changes").unwrap(),
            Verdict::RequestChanges
        );
        assert_eq!(
            Verdict::parse("request_changes").unwrap(),
            Verdict::RequestChanges
        );
        assert!(Verdict::parse("lgtm").is_err());
    }
}
