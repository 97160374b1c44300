//! The goal of `agensh run` (`organization.done_when`): ending the run when it is met,
//! and what the summary says of it — time to goal and what was spent before and after.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agensh_domain::goal::{short, Economy, GoalStatus};
use agensh_process::ShutdownTrigger;
use anyhow::Result;

/// Longest the run waits, once its goal is met, for turns still running to end on their
/// own (each worker stops at its turn's end) before it stops them.
pub const GOAL_GRACE: Duration = Duration::from_secs(60);

/// Waits for the goal to be met, says so, and — unless `keep_going` — stops the turns
/// still running [`GOAL_GRACE`] later.
pub async fn end_at_goal(
    mut met: tokio::sync::watch::Receiver<Option<GoalStatus>>,
    stopper: Arc<ShutdownTrigger>,
    keep_going: bool,
    started: Instant,
) {
    let Ok(status) = met.wait_for(Option::is_some).await.map(|s| s.clone()) else {
        return;
    };
    let commit = status.and_then(|s| s.met_commit).unwrap_or_default();
    let next = if keep_going {
        "the run goes on (--keep-going)"
    } else {
        "every worker stops at the end of its turn"
    };
    eprintln!(
        "goal met at {} after {}: {next}",
        short(&commit),
        crate::view::clock(started.elapsed())
    );
    if keep_going {
        return;
    }
    tokio::time::sleep(GOAL_GRACE).await;
    eprintln!(
        "turns still running {} s after the goal was met are stopped",
        GOAL_GRACE.as_secs()
    );
    stopper.fire();
}

/// The goal's lines of the run's summary.
pub fn summary_lines(goal: &GoalStatus, economy: &Economy, started_ms: i64) -> Vec<String> {
    let mut out = Vec::new();
    if goal.defined() {
        match (goal.met_at, &goal.met_commit) {
            (Some(at), Some(commit)) => out.push(format!(
                "goal met at {} after {} ({})",
                short(commit),
                crate::view::clock(Duration::from_millis((at - started_ms).max(0) as u64)),
                goal.conditions.join("; ")
            )),
            _ => out.push(format!("goal not met: {}", goal.line())),
        }
    }
    out.push(format!("cost: {}", economy.line()));
    out
}

/// The goal and the economy in the run's `--json` summary.
pub fn summary_json(goal: &GoalStatus, economy: &Economy, started_ms: i64) -> serde_json::Value {
    serde_json::json!({
        "conditions": goal.conditions,
        "met": goal.met(),
        "met_commit": goal.met_commit,
        "seconds_to_goal": goal.met_at.map(|at| (at - started_ms).max(0) as f64 / 1000.0),
        "checks": goal.checks,
        "economy": economy,
    })
}

/// The run ended by itself (its time was up, or every worker stopped) without meeting
/// the goal it was given.
#[derive(Debug)]
pub struct GoalNotMet(pub String);

impl std::fmt::Display for GoalNotMet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GoalNotMet {}

/// An error (exit 6, `crate::output::Exit::GoalNotMet`) when the run had a goal, ended by itself and did
/// not meet it; a run stopped by Ctrl-C is not judged.
pub fn judge(goal: &GoalStatus, stopped: bool) -> Result<()> {
    if !goal.defined() || goal.met() || stopped {
        return Ok(());
    }
    Err(GoalNotMet(format!(
        "the run ended without meeting its goal ({}) — `agensh run` again continues it; `agensh status` shows each condition's last check",
        goal.line()
    ))
    .into())
}
