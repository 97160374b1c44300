//! The goal of `agensh run` (`organization.done_when`) and the exit code of a run that
//! ended without meeting it (ending the run when it is met is `agensh_node::view`'s).

use agensh_domain::goal::GoalStatus;
use anyhow::Result;

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
