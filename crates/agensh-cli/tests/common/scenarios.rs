//! Scenarios of the scripted agent the CLI's tests share, made with the test kit's typed
//! builder ([`agensh_testkit::scenario`]).

pub use agensh_testkit::scenario::{step, Scenario, Step};

/// The part template of every parts scenario: a function that returns its own name.
pub const PART: &str = "def {part}():\n    return '{part}'\n";

/// A scenario over `parts`, each part written from [`PART`] with its test from `test`
/// (templates of `{part}`); no steps yet.
pub fn parts(parts: &[&str], test: &str) -> Scenario {
    Scenario::new().parts(parts).templates(PART, test)
}

/// Once a part is held: write it and its test, commit and push them, open a PR and merge it.
pub fn ship_the_part() -> [Step; 3] {
    [
        step::write_part(),
        step::commit_push(),
        step::open_and_merge_pr(),
    ]
}

/// A scenario whose every turn only ends it.
pub fn end_turn_only() -> Scenario {
    Scenario::new().step(step::end_turn())
}

/// `{ action = "say", text }`.
pub fn say(text: &str) -> Step {
    Step::Say {
        text: text.to_string(),
    }
}

/// `{ action = "sleep", ms }`.
pub fn sleep(ms: u64) -> Step {
    Step::Sleep { ms }
}

/// Parts `p1` and `p2` (tests from `test`): each worker claims a free one and ships it in
/// its first turn, then only ends its turns.
pub fn two_parts_each_shipped(test: &str) -> Scenario {
    parts(&["p1", "p2"], test)
        .step(step::claim_free_part())
        .steps(ship_the_part())
        .step(step::end_turn())
}
