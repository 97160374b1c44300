//! Scenarios of the scripted agent (`agensh agent script --scenario FILE`), built in Rust
//! and written as the TOML it reads:
//!
//! ```
//! use agensh_testkit::scenario::{step, Scenario, Step};
//!
//! let toml = Scenario::new()
//!     .parts(&["p1"])
//!     .step(step::claim_free_part())
//!     .step(Step::Say { text: "working on {part}".into() })
//!     .step(step::end_turn())
//!     .to_toml();
//! assert!(toml.contains("claim_free_part"));
//! ```
//!
//! The steps are the agent's own [`Step`]s, so a scenario cannot name a step or a field the
//! agent does not know; [`Scenario::to_toml`] parses what it wrote with the agent's parser,
//! so it cannot write one the agent refuses. [`step`] makes common steps with the agent's
//! defaults.

pub use agensh_script::Step;

/// A scenario being built: no parts, the default paths, no templates, no steps.
#[derive(Debug, Clone)]
pub struct Scenario(agensh_script::Scenario);

impl Default for Scenario {
    fn default() -> Self {
        Scenario::new()
    }
}

impl Scenario {
    pub fn new() -> Scenario {
        Scenario(agensh_script::Scenario::parse("").expect("the empty scenario parses"))
    }

    /// The parts of the goal, in the order workers try them.
    pub fn parts(mut self, parts: &[&str]) -> Self {
        self.0.parts = parts.iter().map(|p| p.to_string()).collect();
        self
    }

    /// Where a part's file goes (a template; the default `parts/{part}.py`).
    pub fn part_path(mut self, path: &str) -> Self {
        self.0.part_path = path.to_string();
        self
    }

    /// Where a part's test goes (a template; the default `tests/test_{part}.py`).
    pub fn test_path(mut self, path: &str) -> Self {
        self.0.test_path = path.to_string();
        self
    }

    /// The templates `write_part` writes a part's file and its test from.
    pub fn templates(mut self, part: &str, test: &str) -> Self {
        self.0.templates.part = Some(part.to_string());
        self.0.templates.test = Some(test.to_string());
        self
    }

    /// One more step.
    pub fn step(mut self, step: Step) -> Self {
        self.0.steps.push(step);
        self
    }

    /// More steps, in order.
    pub fn steps(mut self, steps: impl IntoIterator<Item = Step>) -> Self {
        self.0.steps.extend(steps);
        self
    }

    /// The scenario file's text; panics when the agent would refuse it.
    pub fn to_toml(&self) -> String {
        let text = toml::to_string(&self.0).expect("a scenario serializes");
        if let Err(e) = agensh_script::Scenario::parse(&text) {
            panic!(
                "the scripted agent refuses this scenario: {}\n{text}",
                e.message
            );
        }
        text
    }
}

/// Steps with the scripted agent's defaults for every field not given (a step with other
/// values is written as the [`Step`] itself).
pub mod step {
    use super::Step;

    /// `action = "<action>"` and nothing else, read by the agent's own parser.
    fn with_defaults(action: &str) -> Step {
        toml::from_str(&format!("action = {action:?}"))
            .unwrap_or_else(|e| panic!("{action} is not a step with defaults only: {e}"))
    }

    /// Claims the first free part (no lease of its own; no waiting when none is free).
    pub fn claim_free_part() -> Step {
        with_defaults("claim_free_part")
    }

    /// Writes the part's file and its test from the templates.
    pub fn write_part() -> Step {
        Step::WritePart
    }

    /// Commits everything and pushes to the default branch.
    pub fn commit_push() -> Step {
        with_defaults("commit_push")
    }

    /// Opens a PR for the pushed branch and merges it.
    pub fn open_and_merge_pr() -> Step {
        with_defaults("open_and_merge_pr")
    }

    /// `board_write` of a `kind` record with `text` (label: the held part's; no detail).
    pub fn board_write(kind: &str, text: &str) -> Step {
        Step::BoardWrite {
            kind: kind.to_string(),
            text: text.to_string(),
            label: None,
            detail: None,
        }
    }

    /// Releases the claim the agent holds.
    pub fn release() -> Step {
        Step::Release
    }

    /// Ends the turn (not at a step limit).
    pub fn end_turn() -> Step {
        with_defaults("end_turn")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_kind_of_field_is_written_so_that_the_agent_reads_it_back() {
        let built = Scenario::new()
            .parts(&["a", "b"])
            .part_path("parts/{part}.sh")
            .test_path("tests/{part}.sh")
            .templates("echo '{part}'\n", "sh parts/{part}.sh\n")
            .step(step::claim_free_part())
            .step(Step::ClaimFreePart {
                lease_secs: Some(10),
                wait: true,
            })
            .steps([step::write_part(), step::commit_push()])
            .step(step::open_and_merge_pr())
            .step(Step::Call {
                tool: "ship".into(),
                args: json!({"title": "Add {part}", "n": 2}),
            })
            .step(Step::Call {
                tool: "workers".into(),
                args: serde_json::Value::Null,
            })
            .step(step::release())
            .step(Step::EndTurn { step_limit: true });
        let text = built.to_toml();
        let read = agensh_script::Scenario::parse(&text).unwrap();
        assert_eq!(read.parts, ["a", "b"]);
        assert_eq!(read.part_path, "parts/{part}.sh");
        assert_eq!(read.templates.test.as_deref(), Some("sh parts/{part}.sh\n"));
        assert_eq!(read.steps.len(), 9);
        assert!(matches!(
            read.steps[0],
            Step::ClaimFreePart {
                lease_secs: None,
                wait: false
            }
        ));
        assert!(matches!(
            read.steps[1],
            Step::ClaimFreePart {
                lease_secs: Some(10),
                wait: true
            }
        ));
        assert!(matches!(
            read.steps[4],
            Step::OpenAndMergePr { retries: 3, .. }
        ));
        assert!(
            matches!(&read.steps[5], Step::Call { args, .. } if args["title"] == "Add {part}" && args["n"] == 2)
        );
        assert!(matches!(&read.steps[6], Step::Call { args, .. } if args.is_null()));
        assert!(matches!(read.steps[8], Step::EndTurn { step_limit: true }));
    }

    #[test]
    #[should_panic(expected = "the scripted agent refuses this scenario")]
    fn a_scenario_the_agent_would_refuse_is_never_written() {
        Scenario::new().step(step::claim_free_part()).to_toml();
    }
}
