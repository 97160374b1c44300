//! When the organization's goal is met (`organization.done_when`): the conditions, their
//! parser, and the state of the goal as the hub checks it.
//!
//! A condition is one line of text, `KIND` or `KIND: ARGUMENT`:
//! - `command: CMD` — `CMD` run with `sh -c` on `main`'s tree (a scratch checkout) after
//!   each move of `main`; exit 0 within `organization.done_timeout_secs` is met;
//! - `issues` — every issue of the organization is closed (and there is at least one);
//! - `score: X` — a kept ProgramBench score of `main` of at least `X` (0 to 1).
//!
//! The goal is met when every condition holds on the same commit of `main`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Longest shell command a `command:` condition may hold, in bytes.
pub const COMMAND_LIMIT: usize = 4_096;

/// One condition of `organization.done_when`.
#[derive(Debug, Clone, PartialEq)]
pub enum DoneWhen {
    /// A shell command that passes on `main`'s tree.
    Command(String),
    /// Every issue closed.
    Issues,
    /// A kept ProgramBench score at or above this (0 to 1).
    Score(f64),
}

impl DoneWhen {
    /// Reads one condition; `field` names it in the error (`organization.done_when[0]`).
    pub fn parse(text: &str, field: &str) -> Result<DoneWhen> {
        let (kind, arg) = match text.split_once(':') {
            Some((k, a)) => (k.trim(), Some(a.trim())),
            None => (text.trim(), None),
        };
        let bad = |why: String| Error::invalid("bad_config", format!("{field}: {why}"));
        match (kind, arg) {
            ("command", Some(cmd)) if !cmd.is_empty() => {
                if cmd.len() > COMMAND_LIMIT {
                    return Err(bad(format!(
                        "the command is {} bytes; the limit is {COMMAND_LIMIT} — put it in a script in the repository and run that",
                        cmd.len()
                    )));
                }
                if cmd.contains('\0') {
                    return Err(bad("the command holds a NUL byte".into()));
                }
                Ok(DoneWhen::Command(cmd.to_string()))
            }
            ("command", _) => Err(bad(
                "the command is empty — give the command that passes when the goal is met, e.g. \"command: python3 -m unittest\"".into(),
            )),
            ("issues", None) => Ok(DoneWhen::Issues),
            ("issues", Some(_)) => Err(bad(
                "\"issues\" takes no argument — write just \"issues\"".into(),
            )),
            ("score", Some(x)) => match x.parse::<f64>() {
                Ok(v) if (0.0..=1.0).contains(&v) => Ok(DoneWhen::Score(v)),
                Ok(v) => Err(bad(format!(
                    "the score threshold {v} is out of range — give a share between 0 and 1, e.g. \"score: 0.9\""
                ))),
                Err(_) => Err(bad(format!(
                    "\"{x}\" is not a number — give the score threshold as a share between 0 and 1, e.g. \"score: 0.9\""
                ))),
            },
            ("score", None) => Err(bad(
                "the score needs its threshold, e.g. \"score: 0.9\"".into(),
            )),
            (other, _) => Err(bad(format!(
                "unknown kind \"{other}\" — use \"command: CMD\", \"issues\" or \"score: X\" (X between 0 and 1)"
            ))),
        }
    }

    /// The condition's kind: `command`, `issues` or `score`.
    pub fn kind(&self) -> &'static str {
        match self {
            DoneWhen::Command(_) => "command",
            DoneWhen::Issues => "issues",
            DoneWhen::Score(_) => "score",
        }
    }
}

impl fmt::Display for DoneWhen {
    /// As it is written in agensh.toml.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DoneWhen::Command(c) => write!(f, "command: {c}"),
            DoneWhen::Issues => f.write_str("issues"),
            DoneWhen::Score(x) => write!(f, "score: {x}"),
        }
    }
}

/// Reads every condition of `organization.done_when`, naming the bad one by its index.
pub fn parse_all(conditions: &[String]) -> Result<Vec<DoneWhen>> {
    let many = conditions.len() > 1;
    conditions
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let field = if many {
                format!("organization.done_when[{i}]")
            } else {
                "organization.done_when".to_string()
            };
            DoneWhen::parse(c, &field)
        })
        .collect()
}

/// The last check of one condition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConditionCheck {
    /// The condition as written (`command: python3 -m unittest`).
    pub condition: String,
    pub met: bool,
    /// The commit of `main` it was checked on.
    pub commit: String,
    /// Unix ms the check ended.
    pub at: i64,
    /// How long it took, in ms.
    #[serde(default)]
    pub took_ms: u64,
    /// A command's exit code (none: killed by a signal, or not a command).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<i32>,
    /// A command cut at its timeout (it counts as not met).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
    /// What it found: a command's last output, the issues still open, the score.
    #[serde(default)]
    pub detail: String,
}

/// The goal as the hub knows it: its conditions, each one's last check, and when it was met.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GoalStatus {
    /// `organization.done_when`; empty: the goal has no condition (the run goes on until
    /// its end).
    pub conditions: Vec<String>,
    /// One per condition, in the same order, once checked.
    #[serde(default)]
    pub checks: Vec<ConditionCheck>,
    /// Checks run so far (every condition counted each time).
    #[serde(default)]
    pub runs: u64,
    /// Unix ms the goal was met; none while it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub met_at: Option<i64>,
    /// The commit of `main` on which every condition held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub met_commit: Option<String>,
    /// What the run spent and how much of it after the work was done (filled in when
    /// the hub is asked, `GET /goal`; never stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub economy: Option<Economy>,
}

impl GoalStatus {
    /// Whether there is a goal to meet at all.
    pub fn defined(&self) -> bool {
        !self.conditions.is_empty()
    }

    pub fn met(&self) -> bool {
        self.met_at.is_some()
    }

    /// One line for people: `met at 1a2b3c4d5e (12m30s after the start)`, `not met: …`.
    pub fn line(&self) -> String {
        if !self.defined() {
            return "no goal condition (organization.done_when): the run goes on until its end"
                .into();
        }
        if let Some(commit) = &self.met_commit {
            return format!("met at {}", short(commit));
        }
        let failing: Vec<String> = self
            .checks
            .iter()
            .filter(|c| !c.met)
            .map(|c| c.condition.clone())
            .collect();
        match (self.checks.is_empty(), failing.is_empty()) {
            (true, _) => "not checked yet".into(),
            (false, true) => "not met".into(),
            (false, false) => format!("not met: {} failing", failing.join("; ")),
        }
    }
}

/// What the organization spent on its model, over some stretch of the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spend {
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
}

impl Spend {
    pub fn tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    /// `self` less `other`, never below zero.
    pub fn minus(&self, other: &Spend) -> Spend {
        Spend {
            requests: self.requests.saturating_sub(other.requests),
            input_tokens: self.input_tokens.saturating_sub(other.input_tokens),
            output_tokens: self.output_tokens.saturating_sub(other.output_tokens),
            cost_usd: (self.cost_usd - other.cost_usd).max(0.0),
        }
    }
}

/// From when spending counts as spent after the work was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DoneMark {
    /// The goal was met (`organization.done_when`).
    GoalMet,
    /// No goal was met: the last merge into `main`.
    LastMerge,
}

/// Cost per result: what the run spent, per merged PR, and how much of it after the work
/// was done (the goal met, else the last merge) — waste made visible.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Economy {
    pub total: Spend,
    /// Spent up to the mark.
    pub before: Spend,
    /// Spent at or after the mark.
    pub after: Spend,
    /// The mark `before` and `after` are split at; none: nothing merged and no goal met.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mark: Option<DoneMark>,
    /// Unix ms of the mark.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mark_at: Option<i64>,
    pub prs_merged: u64,
    /// Requests, tokens and dollars per merged PR (none when nothing merged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_merged_pr: Option<PerPr>,
    /// The share of the run's model requests made after the mark (0 to 1).
    pub share_after: f64,
}

/// [`Spend`] divided by the PRs merged.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PerPr {
    pub requests: f64,
    pub tokens: f64,
    pub cost_usd: f64,
}

impl Economy {
    /// The economy of a run that spent `total`, `after` of it at or after `mark` (at
    /// `mark_at`), and merged `prs_merged` PRs.
    pub fn of(
        total: Spend,
        after: Spend,
        mark: Option<(DoneMark, i64)>,
        prs_merged: u64,
    ) -> Economy {
        let after = if mark.is_some() {
            after
        } else {
            Spend::default()
        };
        let per_merged_pr = (prs_merged > 0).then(|| {
            let n = prs_merged as f64;
            PerPr {
                requests: total.requests as f64 / n,
                tokens: total.tokens() as f64 / n,
                cost_usd: total.cost_usd / n,
            }
        });
        let share_after = if total.requests == 0 {
            0.0
        } else {
            after.requests as f64 / total.requests as f64
        };
        Economy {
            before: total.minus(&after),
            total,
            after,
            mark: mark.map(|(m, _)| m),
            mark_at: mark.map(|(_, at)| at),
            prs_merged,
            per_merged_pr,
            share_after,
        }
    }

    /// One line for people: `132 model requests: 37 up to the goal, 95 after it (72%); …`.
    pub fn line(&self) -> String {
        let t = &self.total;
        let mut out = format!(
            "{} model request(s), {} tokens, ${:.4}",
            t.requests,
            t.tokens(),
            t.cost_usd
        );
        if let Some(mark) = self.mark {
            let what = match mark {
                DoneMark::GoalMet => "the goal was met",
                DoneMark::LastMerge => "the last merge",
            };
            out.push_str(&format!(
                "; after {what}: {} request(s) ({:.0}%), {} tokens, ${:.4}",
                self.after.requests,
                self.share_after * 100.0,
                self.after.tokens(),
                self.after.cost_usd
            ));
        }
        if let Some(p) = &self.per_merged_pr {
            out.push_str(&format!(
                "; per merged PR: {:.1} request(s), {:.0} tokens, ${:.4}",
                p.requests, p.tokens, p.cost_usd
            ));
        }
        out
    }
}

/// The first 10 characters of a commit id.
pub fn short(commit: &str) -> &str {
    &commit[..commit.len().min(10)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spend(requests: u64, tokens: u64, cost: f64) -> Spend {
        Spend {
            requests,
            input_tokens: tokens,
            output_tokens: 0,
            cost_usd: cost,
        }
    }

    #[test]
    fn economy_splits_at_the_mark_and_divides_by_merged_prs() {
        let e = Economy::of(
            spend(132, 1_000, 1.32),
            spend(95, 700, 0.95),
            Some((DoneMark::GoalMet, 7)),
            6,
        );
        assert_eq!(e.before, spend(37, 300, 1.32 - 0.95));
        assert!((e.share_after - 95.0 / 132.0).abs() < 1e-9);
        let p = e.per_merged_pr.unwrap();
        assert_eq!(p.requests, 22.0);
        assert!(
            e.line()
                .contains("after the goal was met: 95 request(s) (72%)"),
            "{}",
            e.line()
        );
    }

    #[test]
    fn economy_without_a_mark_spends_nothing_after_and_nothing_per_pr_without_merges() {
        let e = Economy::of(spend(10, 10, 0.0), spend(4, 4, 0.0), None, 0);
        assert_eq!(e.after, Spend::default());
        assert_eq!(e.share_after, 0.0);
        assert!(e.per_merged_pr.is_none());
    }

    fn parse(s: &str) -> Result<DoneWhen> {
        DoneWhen::parse(s, "organization.done_when")
    }

    #[test]
    fn reads_each_kind() {
        assert_eq!(
            parse("command: python3 -m unittest").unwrap(),
            DoneWhen::Command("python3 -m unittest".into())
        );
        assert_eq!(parse(" issues ").unwrap(), DoneWhen::Issues);
        assert_eq!(parse("score: 0.9").unwrap(), DoneWhen::Score(0.9));
        assert_eq!(parse("score:1").unwrap(), DoneWhen::Score(1.0));
    }

    #[test]
    fn a_command_keeps_its_colons() {
        let c = parse("command: sh -c 'echo a:b'").unwrap();
        assert_eq!(c, DoneWhen::Command("sh -c 'echo a:b'".into()));
        assert_eq!(c.to_string(), "command: sh -c 'echo a:b'");
    }

    #[test]
    fn an_unknown_kind_is_refused_naming_the_field_and_the_kinds() {
        let e = parse("tests: cargo test").unwrap_err();
        assert!(
            e.message.contains("organization.done_when"),
            "{}",
            e.message
        );
        assert!(
            e.message.contains("unknown kind \"tests\""),
            "{}",
            e.message
        );
        assert!(e.message.contains("command: CMD"), "{}", e.message);
    }

    #[test]
    fn an_empty_command_is_refused() {
        for text in ["command:", "command:   ", "command"] {
            let e = parse(text).unwrap_err();
            assert!(
                e.message.contains("the command is empty"),
                "{text}: {}",
                e.message
            );
        }
    }

    #[test]
    fn a_threshold_out_of_0_to_1_is_refused() {
        for text in ["score: 1.5", "score: -0.1", "score: NaN"] {
            let e = parse(text).unwrap_err();
            assert!(
                e.message.contains("between 0 and 1"),
                "{text}: {}",
                e.message
            );
        }
        assert!(parse("score: high")
            .unwrap_err()
            .message
            .contains("not a number"));
        assert!(parse("score").unwrap_err().message.contains("threshold"));
    }

    #[test]
    fn issues_takes_no_argument() {
        assert!(parse("issues: all")
            .unwrap_err()
            .message
            .contains("no argument"));
    }

    #[test]
    fn parse_all_names_the_bad_condition_by_its_index() {
        let e = parse_all(&["issues".into(), "score: 2".into()]).unwrap_err();
        assert!(
            e.message.starts_with("organization.done_when[1]:"),
            "{}",
            e.message
        );
    }

    #[test]
    fn the_status_line_says_what_fails() {
        let mut s = GoalStatus {
            conditions: vec!["issues".into()],
            ..GoalStatus::default()
        };
        assert_eq!(s.line(), "not checked yet");
        s.checks.push(ConditionCheck {
            condition: "issues".into(),
            met: false,
            commit: "c".repeat(40),
            at: 1,
            took_ms: 0,
            exit: None,
            timed_out: false,
            detail: "2 open".into(),
        });
        assert_eq!(s.line(), "not met: issues failing");
        s.met_commit = Some("0123456789abcdef".into());
        s.met_at = Some(2);
        assert_eq!(s.line(), "met at 0123456789");
    }
}
