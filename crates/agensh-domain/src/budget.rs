//! Budgets: what a worker, and the whole organization, may spend on its model — tokens,
//! dollars, requests and hours — and the rules that say when a notice is due and when a
//! budget is spent (`[budget]`, raised while the organization runs with `agensh budget set`).
//!
//! No IO: the hub passes what was spent and the time.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Limits of one scope; 0 is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Prompt and generated tokens (cached prompt tokens included).
    pub tokens: u64,
    /// Dollars, at the upstreams' prices.
    pub cost_usd: f64,
    /// Model requests.
    pub requests: u64,
    /// Hours since the first model request.
    pub hours: f64,
}

/// `[budget]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetConfig {
    /// Every worker's own budget.
    pub worker: Limits,
    /// The whole organization's.
    pub organization: Limits,
    /// The share of a budget at which its worker (or everyone) gets a notice.
    pub notice_at: f64,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            worker: Limits::default(),
            organization: Limits::default(),
            notice_at: 0.8,
        }
    }
}

/// What one scope has spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spent {
    pub tokens: u64,
    pub cost_usd: f64,
    pub requests: u64,
    /// Unix ms of the first model request; 0: none yet.
    pub first_at: i64,
}

impl Spent {
    fn hours(&self, now: i64) -> f64 {
        if self.first_at == 0 {
            0.0
        } else {
            (now - self.first_at).max(0) as f64 / 3_600_000.0
        }
    }
}

/// One kind of budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    Tokens,
    Cost,
    Requests,
    Hours,
}

impl Dimension {
    pub const ALL: [Dimension; 4] = [
        Dimension::Tokens,
        Dimension::Cost,
        Dimension::Requests,
        Dimension::Hours,
    ];

    /// Its field in `[budget.worker]` and in `agensh budget set`.
    pub fn field(self) -> &'static str {
        match self {
            Dimension::Tokens => "tokens",
            Dimension::Cost => "cost_usd",
            Dimension::Requests => "requests",
            Dimension::Hours => "hours",
        }
    }

    /// `"token"`, `"cost"`, …: as in "its token budget".
    pub fn noun(self) -> &'static str {
        match self {
            Dimension::Tokens => "token",
            Dimension::Cost => "cost",
            Dimension::Requests => "request",
            Dimension::Hours => "time",
        }
    }

    /// `amount` in this dimension's unit, for people.
    pub fn amount(self, amount: f64) -> String {
        match self {
            Dimension::Tokens => format!("{} tokens", amount as u64),
            Dimension::Cost => format!("${amount:.2}"),
            Dimension::Requests => format!("{} requests", amount as u64),
            Dimension::Hours => format!("{amount:.2} h"),
        }
    }
}

/// How far one scope is into one budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Use {
    pub dimension: Dimension,
    pub spent: f64,
    pub limit: f64,
}

impl Use {
    /// "its token budget (81000 of 100000 tokens)".
    pub fn describe(&self) -> String {
        format!(
            "{} budget ({} of {})",
            self.dimension.noun(),
            self.dimension.amount(self.spent),
            self.dimension.amount(self.limit)
        )
    }
}

impl Limits {
    /// Each budget that is set, with what `spent` has used of it at `now`.
    pub fn uses(&self, spent: &Spent, now: i64) -> Vec<Use> {
        Dimension::ALL
            .into_iter()
            .filter_map(|d| {
                let (used, limit) = match d {
                    Dimension::Tokens => (spent.tokens as f64, self.tokens as f64),
                    Dimension::Cost => (spent.cost_usd, self.cost_usd),
                    Dimension::Requests => (spent.requests as f64, self.requests as f64),
                    Dimension::Hours => (spent.hours(now), self.hours),
                };
                (limit > 0.0).then_some(Use {
                    dimension: d,
                    spent: used,
                    limit,
                })
            })
            .collect()
    }

    /// The first budget `spent` has used up at `now`, if any.
    pub fn exhausted(&self, spent: &Spent, now: i64) -> Option<Use> {
        self.uses(spent, now)
            .into_iter()
            .find(|u| u.spent >= u.limit)
    }

    /// The budgets that `before` had used less than `share` of and `after` has not.
    pub fn crossed(&self, before: &Spent, after: &Spent, share: f64, now: i64) -> Vec<Use> {
        let was = self.uses(before, now);
        self.uses(after, now)
            .into_iter()
            .zip(was)
            .filter(|(a, b)| a.spent >= a.limit * share && b.spent < b.limit * share)
            .map(|(a, _)| a)
            .collect()
    }

    /// These limits with each field of `change` that is set (above 0) put in.
    pub fn with(&self, change: &LimitsChange) -> Limits {
        Limits {
            tokens: change.tokens.unwrap_or(self.tokens),
            cost_usd: change.cost_usd.unwrap_or(self.cost_usd),
            requests: change.requests.unwrap_or(self.requests),
            hours: change.hours.unwrap_or(self.hours),
        }
    }

    /// Checks that every limit is zero or more and finite.
    pub fn validate(&self, what: &str) -> Result<()> {
        if !self.cost_usd.is_finite()
            || self.cost_usd < 0.0
            || !self.hours.is_finite()
            || self.hours < 0.0
        {
            return Err(Error::invalid(
                "bad_budget",
                format!("{what}: cost_usd and hours must be zero (no limit) or more"),
            ));
        }
        Ok(())
    }
}

/// A change of budgets (`PUT /api/v1/budget`): the fields given are set, 0 removes a limit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsChange {
    /// One worker's budget; none: the organization's (`organization: true`) or every
    /// worker's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// The organization's budget instead of a worker's.
    #[serde(default)]
    pub organization: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hours: Option<f64>,
}

impl LimitsChange {
    /// Checks the change names one scope and at least one limit, each zero or more.
    pub fn validate(&self) -> Result<()> {
        if self.organization && self.worker.is_some() {
            return Err(Error::invalid(
                "bad_budget",
                "a budget change is for one worker or for the organization, not both",
            ));
        }
        if self.tokens.is_none()
            && self.cost_usd.is_none()
            && self.requests.is_none()
            && self.hours.is_none()
        {
            return Err(Error::invalid(
                "bad_budget",
                "the change sets no budget — give tokens, cost_usd, requests or hours (0: no limit)",
            ));
        }
        Limits::default().with(self).validate("the budget change")
    }
}

impl BudgetConfig {
    /// Checks the values of `[budget]`.
    pub fn validate(&self) -> Result<()> {
        self.worker.validate("agensh.toml: budget.worker")?;
        self.organization
            .validate("agensh.toml: budget.organization")?;
        if !(0.0..1.0).contains(&self.notice_at) || self.notice_at <= 0.0 {
            return Err(Error::invalid(
                "bad_config",
                "agensh.toml: budget.notice_at must be above 0 and below 1 (0.8: at 80%)",
            ));
        }
        Ok(())
    }

    /// The commented `[budget]` section of the template.
    pub fn template(&self) -> String {
        let limits = |l: &Limits| {
            format!(
                "tokens = {}\ncost_usd = {}\nrequests = {}\nhours = {}\n",
                l.tokens,
                toml::Value::Float(l.cost_usd),
                l.requests,
                toml::Value::Float(l.hours)
            )
        };
        format!(
            r#"
[budget]
# What workers may spend on their model, counted by the gateway (0: no limit). At
# notice_at of a budget its worker (or everyone) gets a notice; when one is spent, the
# gateway refuses the worker's requests, and the worker stops — its claims released,
# #general told — until the budget is raised (`agensh budget set`); when the
# organization's is spent, every worker stops and the run ends.
notice_at = {notice}

[budget.worker]
# Each worker's own: tokens (prompt and generated), dollars, model requests, and hours
# since its first model request.
{worker}
[budget.organization]
# The whole organization's, over every worker.
{org}"#,
            notice = toml::Value::Float(self.notice_at),
            worker = limits(&self.worker),
            org = limits(&self.organization),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3_600_000;

    #[test]
    fn a_budget_is_spent_at_its_limit_and_unset_ones_never_are() {
        let l = Limits {
            tokens: 1000,
            hours: 2.0,
            ..Limits::default()
        };
        let mut s = Spent {
            tokens: 999,
            first_at: 1,
            ..Spent::default()
        };
        assert_eq!(l.exhausted(&s, H), None);
        s.tokens = 1000;
        let u = l.exhausted(&s, H).unwrap();
        assert_eq!(u.dimension, Dimension::Tokens);
        assert_eq!(u.describe(), "token budget (1000 tokens of 1000 tokens)");
        s.tokens = 0;
        assert_eq!(
            l.exhausted(&s, 2 * H + 1).unwrap().dimension,
            Dimension::Hours
        );
        // Requests and cost have no limit: any amount is fine.
        s.requests = u64::MAX;
        s.cost_usd = 1e9;
        assert_eq!(l.exhausted(&s, H), None);
    }

    #[test]
    fn a_notice_is_due_once_when_a_share_is_crossed() {
        let l = Limits {
            tokens: 1000,
            cost_usd: 10.0,
            ..Limits::default()
        };
        let before = Spent {
            tokens: 700,
            cost_usd: 1.0,
            ..Spent::default()
        };
        let after = Spent {
            tokens: 850,
            cost_usd: 2.0,
            ..Spent::default()
        };
        let crossed = l.crossed(&before, &after, 0.8, 0);
        assert_eq!(crossed.len(), 1);
        assert_eq!(crossed[0].dimension, Dimension::Tokens);
        assert!(l.crossed(&after, &after, 0.8, 0).is_empty());
    }

    #[test]
    fn a_change_sets_only_what_it_names() {
        let l = Limits {
            tokens: 10,
            requests: 5,
            ..Limits::default()
        };
        let c = LimitsChange {
            tokens: Some(0),
            cost_usd: Some(2.5),
            ..LimitsChange::default()
        };
        c.validate().unwrap();
        assert_eq!(
            l.with(&c),
            Limits {
                tokens: 0,
                cost_usd: 2.5,
                requests: 5,
                hours: 0.0
            }
        );
        assert!(LimitsChange::default().validate().is_err());
        let both = LimitsChange {
            worker: Some("w01".into()),
            organization: true,
            tokens: Some(1),
            ..LimitsChange::default()
        };
        assert!(both.validate().unwrap_err().message.contains("not both"));
        let negative = LimitsChange {
            hours: Some(-1.0),
            ..LimitsChange::default()
        };
        assert!(negative.validate().is_err());
    }
}
