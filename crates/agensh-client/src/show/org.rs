//! The organization as a whole: `agensh status`, `workers list`, `nodes list`, `budget`,
//! and the goal's lines of a run's summary.

use std::collections::BTreeMap;
use std::time::Duration;

use agensh_domain::budget::{Dimension, Limits, Spent};
use agensh_domain::goal::{short, Economy, GoalStatus};
use agensh_domain::node::NodeInfo;
use agensh_domain::text::{escape, Lines};
use agensh_domain::time::age;
use agensh_domain::worker::WorkerInfo;
use agensh_protocol::rest::{BudgetView, ModelUsage, Stats};

use super::{clock, count, gateway_text, per_worker};

/// `agensh status`: the goal and each condition not met, the cost, a line per worker (its
/// status, last activity, step, tokens, model use and claim), the agents, the stopped
/// workers, the counts and the gateway's usage.
pub fn status(
    workers: &[WorkerInfo],
    stats: &Stats,
    usage: &[ModelUsage],
    goal: &GoalStatus,
    now: i64,
) -> Vec<String> {
    let mut out = Vec::new();
    if goal.defined() {
        out.push(format!(
            "goal ({}): {}",
            goal.conditions.join("; "),
            goal.line()
        ));
        for check in goal.checks.iter().filter(|c| !c.met) {
            let last = check.detail.trim().lines().last().unwrap_or("");
            out.push(format!(
                "  {} on {}: {}",
                check.condition,
                short(&check.commit),
                escape(last, Lines::One)
            ));
        }
    }
    if let Some(e) = &goal.economy {
        out.push(format!("cost: {}", e.line()));
    }
    let used = per_worker(usage);
    out.push(format!(
        "{:<8} {:<9} {:<12} {:<44} {:<18} {:<20} CLAIM",
        "WORKER", "STATUS", "ACTIVE", "STEP", "TURN TOKENS", "MODEL USE"
    ));
    for w in workers {
        let active = age_or_never(w.last_activity, now);
        let claim = w
            .claims
            .last()
            .map(|r| format!("{} {}", r.id, r.label.as_deref().unwrap_or(&r.text)))
            .unwrap_or_default();
        let (step, tokens) = match &w.progress {
            Some(p) => (
                format!(
                    "{} for {}",
                    p.step,
                    clock(Duration::from_millis((now - p.since).max(0) as u64))
                ),
                format!("{} {:.1} tok/s", count(p.tokens), p.tokens_per_sec),
            ),
            None => ("-".into(), "-".into()),
        };
        let model_use = used.get(&w.id).map_or("-".to_string(), |u| {
            format!(
                "{} ${:.2}",
                count(u.input_tokens + u.output_tokens),
                u.cost_usd
            )
        });
        out.push(format!(
            "{:<8} {:<9} {:<12} {:<44} {:<18} {:<20} {}",
            w.id,
            w.status.as_str(),
            active,
            agensh_domain::turn::clip(&step, 44),
            tokens,
            model_use,
            claim
        ));
    }
    // Which agent each worker runs, one line per agent (and model).
    let mut agents: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for w in workers {
        if let Some(a) = &w.agent {
            agents.entry(a).or_default().push(&w.id);
        }
    }
    for (agent, ids) in agents {
        out.push(format!("agent {agent}: {}", ids.join(", ")));
    }
    for w in workers {
        if let Some(why) = &w.stopped_for {
            out.push(format!("{} stopped: {why}", w.id));
        }
    }
    out.push(format!(
        "PRs: {} open, {} merged, {} closed · board: {} records · messages: {}",
        stats.prs_open, stats.prs_merged, stats.prs_closed, stats.records, stats.messages
    ));
    if let Some(g) = used.get("") {
        out.push(gateway_text(g));
    }
    out
}

/// How long ago `then` was (`+5m`), or `never`.
fn age_or_never(then: Option<i64>, now: i64) -> String {
    then.map_or_else(|| "never".into(), |t| age(t, now))
}

/// `workers list`: status, last activity and live claims of each worker.
pub fn workers(workers: &[WorkerInfo], now: i64) -> Vec<String> {
    let mut out = vec![format!(
        "{:<8} {:<9} {:<14} CLAIMS",
        "ID", "STATUS", "LAST ACTIVITY"
    )];
    for w in workers {
        let last = age_or_never(w.last_activity, now);
        let claims: Vec<String> = w
            .claims
            .iter()
            .map(|r| match &r.label {
                Some(l) => format!("{} #{l}", r.id),
                None => r.id.clone(),
            })
            .collect();
        out.push(format!(
            "{:<8} {:<9} {:<14} {}",
            w.id,
            w.status.as_str(),
            last,
            claims.join(", ")
        ));
    }
    out
}

/// `nodes list`: each node's worker count, last registration and workers.
pub fn nodes(nodes: &[NodeInfo], now: i64) -> Vec<String> {
    let mut out = vec![format!(
        "{:<24} {:>7} {:<14} ASSIGNED",
        "NAME", "WORKERS", "REGISTERED"
    )];
    for n in nodes {
        let seen = age_or_never(n.registered_at, now);
        out.push(format!(
            "{:<24} {:>7} {:<14} {}",
            n.name,
            n.workers,
            seen,
            n.assigned.join(",")
        ));
    }
    out
}

/// One budget: spent of limit, or spent alone when there is no limit.
fn cell(d: Dimension, limits: &Limits, spent: &Spent, now: i64) -> String {
    let (used, limit) = match d {
        Dimension::Tokens => (spent.tokens as f64, limits.tokens as f64),
        Dimension::Cost => (spent.cost_usd, limits.cost_usd),
        Dimension::Requests => (spent.requests as f64, limits.requests as f64),
        Dimension::Hours => (
            if spent.first_at == 0 {
                0.0
            } else {
                (now - spent.first_at).max(0) as f64 / 3_600_000.0
            },
            limits.hours,
        ),
    };
    let short = |x: f64| match d {
        Dimension::Cost => format!("${x:.2}"),
        Dimension::Hours => format!("{x:.2}h"),
        _ => count(x as u64),
    };
    if limit > 0.0 {
        format!("{} / {}", short(used), short(limit))
    } else {
        short(used)
    }
}

/// `agensh budget`: the organization's budget and each worker's, spent of limit.
pub fn budget(v: &BudgetView) -> Vec<String> {
    let now = v.at;
    let mut out = vec![format!(
        "{:<14} {:<18} {:<18} {:<16} {:<14} STOPPED",
        "SCOPE", "TOKENS", "COST", "REQUESTS", "HOURS"
    )];
    let line = |scope: &str, limits: &Limits, spent: &Spent, stopped: Option<&str>| {
        let cells: Vec<String> = Dimension::ALL
            .iter()
            .map(|d| cell(*d, limits, spent, now))
            .collect();
        format!(
            "{:<14} {:<18} {:<18} {:<16} {:<14} {}",
            scope,
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            stopped.unwrap_or("-")
        )
    };
    out.push(line(
        "organization",
        &v.organization,
        &v.organization_spent,
        v.organization_stopped_for.as_deref(),
    ));
    for w in &v.workers {
        out.push(line(
            &w.worker,
            &w.limits,
            &w.spent,
            w.stopped_for.as_deref(),
        ));
    }
    out.push(format!(
        "a notice goes out at {:.0}% of a budget; no limit shows the amount spent alone",
        v.notice_at * 100.0
    ));
    out
}

/// The goal's lines of a run's summary: met (where, after how long) or not, and the cost.
pub fn goal_summary(goal: &GoalStatus, economy: &Economy, started_ms: i64) -> Vec<String> {
    let mut out = Vec::new();
    if goal.defined() {
        match (goal.met_at, &goal.met_commit) {
            (Some(at), Some(commit)) => out.push(format!(
                "goal met at {} after {} ({})",
                short(commit),
                clock(Duration::from_millis((at - started_ms).max(0) as u64)),
                goal.conditions.join("; ")
            )),
            _ => out.push(format!("goal not met: {}", goal.line())),
        }
    }
    out.push(format!("cost: {}", economy.line()));
    out
}

/// The goal and the economy in a run's `--json` summary.
pub fn goal_summary_json(
    goal: &GoalStatus,
    economy: &Economy,
    started_ms: i64,
) -> serde_json::Value {
    serde_json::json!({
        "conditions": goal.conditions,
        "met": goal.met(),
        "met_commit": goal.met_commit,
        "seconds_to_goal": goal.met_at.map(|at| (at - started_ms).max(0) as f64 / 1000.0),
        "checks": goal.checks,
        "economy": economy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agensh_domain::worker::{WorkerProgress, WorkerStatus};

    const NOW: i64 = 1_796_040_000_000;

    fn worker(id: &str, progress: Option<WorkerProgress>) -> WorkerInfo {
        WorkerInfo {
            id: id.into(),
            status: WorkerStatus::Busy,
            progress,
            agent: Some("builtin on qwen".into()),
            stopped_for: None,
            claims: Vec::new(),
            last_activity: Some(NOW - 3_000),
            created_at: 0,
        }
    }

    #[test]
    fn a_status_has_a_line_per_worker_the_agents_and_the_counts() {
        let busy = WorkerProgress {
            step: "model request 3".into(),
            since: NOW - 42_000,
            tokens: 2_000,
            tokens_per_sec: 9.54,
        };
        let workers = [worker("w01", Some(busy)), worker("w02", None)];
        let usage = [ModelUsage {
            worker: "w01".into(),
            model: "qwen".into(),
            requests: 2,
            input_tokens: 1_500,
            output_tokens: 100,
            cost_usd: 0.5,
            ..ModelUsage::default()
        }];
        let lines = status(
            &workers,
            &Stats::default(),
            &usage,
            &GoalStatus::default(),
            NOW,
        );
        assert!(
            lines[0].starts_with("WORKER   STATUS    ACTIVE"),
            "{lines:#?}"
        );
        assert!(
            lines[1].starts_with("w01      busy      +3s          model request 3 for 42s"),
            "{}",
            lines[1]
        );
        assert!(
            lines[1].contains("2.0k 9.5 tok/s     1.6k $0.50"),
            "{}",
            lines[1]
        );
        assert!(lines[2].contains(" -    "), "{}", lines[2]);
        assert_eq!(lines[3], "agent builtin on qwen: w01, w02");
        assert_eq!(
            lines[4],
            "PRs: 0 open, 0 merged, 0 closed · board: 0 records · messages: 0"
        );
        assert!(lines[5].starts_with("2 model request(s) through the gateway"));
    }

    #[test]
    fn a_budget_shows_spent_of_limit_or_spent_alone() {
        let v = BudgetView {
            at: NOW,
            notice_at: 0.8,
            organization: Limits {
                tokens: 1_000_000,
                ..Limits::default()
            },
            organization_spent: Spent {
                tokens: 12_300,
                cost_usd: 1.5,
                requests: 7,
                first_at: NOW - 5_400_000,
            },
            organization_stopped_for: None,
            every_worker: Limits::default(),
            workers: Vec::new(),
        };
        assert_eq!(
            budget(&v),
            [
                "SCOPE          TOKENS             COST               REQUESTS         HOURS          STOPPED",
                "organization   12.3k / 1.0M       $1.50              7                1.50h          -",
                "a notice goes out at 80% of a budget; no limit shows the amount spent alone",
            ]
        );
    }
}
