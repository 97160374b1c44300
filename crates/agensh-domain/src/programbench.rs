//! ProgramBench's scores, computed the way its package (`programbench` 1.2.5) computes them,
//! to the last bit: the raw score of an evaluation, the score `programbench eval` shows, the
//! kept score of `score_instance`, and the headline of `aggregate` over many tasks (issue 14).
//!
//! The definitions, in our words:
//! - a result is *passed* only with status `passed`; every other status counts against;
//! - a result's full name is `branch/name` (or `name` without a branch);
//! - a task's *ignored tests* are the full names in every branch's `ignored_tests`; its
//!   *active branches* are those not `ignored`;
//! - **raw**: passed over every result, duplicates and ignored tests included (0 for none);
//! - **eval**: the same over the results whose full name is not ignored;
//! - **kept** (`score_instance`): the results of the active branches (all of them when the
//!   evaluation's branches are exactly the active ones), ignored ones left out, as a map from
//!   full name to passed — a name seen twice counts once, as its last result — then passed
//!   over the map's size;
//! - **aggregate** over `n_total` tasks (unattempted ones count 0): the mean rounded to 4
//!   places, the share resolved (≥ 1.0) and near-resolved (≥ 0.95) in percent rounded to 1,
//!   rounded as Python rounds (the exact binary value, ties to even).
//!
//! No IO: the evaluator reads the files and passes them in.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What a test came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Passed,
    Skipped,
    Failure,
    Error,
    SystemError,
    NotRun,
}

/// One test's result, as an evaluation writes it (`test_results` of `<task>.eval.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestResult {
    pub name: String,
    #[serde(default)]
    pub branch: String,
    pub status: Status,
    #[serde(default)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl TestResult {
    /// `branch/name`, or `name` without a branch.
    pub fn full_name(&self) -> String {
        if self.branch.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{}", self.branch, self.name)
        }
    }

    pub fn passed(&self) -> bool {
        self.status == Status::Passed
    }
}

/// An evaluation of one submission (the parts of `<task>.eval.json` that scores read).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    pub test_results: Vec<TestResult>,
    /// The branches it evaluated.
    #[serde(default)]
    pub test_branches: Vec<String>,
    #[serde(default)]
    pub error_code: Option<String>,
}

/// One test branch of a task (`tests.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Branch {
    #[serde(default)]
    pub ignored: bool,
    #[serde(default)]
    pub ignore_reason: String,
    /// The tests a submission is expected to report.
    #[serde(default)]
    pub tests: Vec<String>,
    #[serde(default)]
    pub ignored_tests: Vec<IgnoredTest>,
}

/// A test left out of every score (flaky, failing on the reference, …).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IgnoredTest {
    pub name: String,
    #[serde(default)]
    pub reasons: Vec<serde_json::Value>,
}

/// A task's `tests.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TestsJson {
    #[serde(default)]
    pub branches: BTreeMap<String, Branch>,
}

impl TestsJson {
    /// The branches that count: not `ignored`.
    pub fn active_branches(&self) -> Vec<String> {
        self.branches
            .iter()
            .filter(|(_, b)| !b.ignored)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Every ignored test's full name, over all branches.
    pub fn ignored_tests(&self) -> BTreeSet<String> {
        self.branches
            .iter()
            .flat_map(|(id, b)| {
                b.ignored_tests
                    .iter()
                    .map(move |t| format!("{id}/{}", t.name))
            })
            .collect()
    }
}

/// Passed over all of `results`; 0 when there are none.
pub fn raw_score<'a>(results: impl IntoIterator<Item = &'a TestResult>) -> f64 {
    let (mut passed, mut n) = (0usize, 0usize);
    for r in results {
        n += 1;
        passed += usize::from(r.passed());
    }
    if n == 0 {
        0.0
    } else {
        passed as f64 / n as f64
    }
}

/// The score `programbench eval` shows: the raw score without the ignored tests.
pub fn eval_score(results: &[TestResult], ignored: &BTreeSet<String>) -> f64 {
    raw_score(results.iter().filter(|r| !ignored.contains(&r.full_name())))
}

/// The results of `active` branches: all of them when the evaluation ran exactly those
/// branches (in any order), else those whose branch is active.
pub fn for_branches<'a>(e: &'a Evaluation, active: &[String]) -> Vec<&'a TestResult> {
    let mut ran = e.test_branches.clone();
    ran.sort();
    let mut want = active.to_vec();
    want.sort();
    if ran == want {
        return e.test_results.iter().collect();
    }
    e.test_results
        .iter()
        .filter(|r| active.contains(&r.branch))
        .collect()
}

/// Full name → passed over the active branches' results, ignored tests left out; a name
/// seen twice keeps its last result.
pub fn test_results_map(e: &Evaluation, tests: &TestsJson) -> BTreeMap<String, bool> {
    let ignored = tests.ignored_tests();
    let mut map = BTreeMap::new();
    for r in for_branches(e, &tests.active_branches()) {
        let name = r.full_name();
        if !ignored.contains(&name) {
            map.insert(name, r.passed());
        }
    }
    map
}

/// Passed over the tests of `map` not in `ignore`; 0 when none are left.
pub fn score_from_tests(map: &BTreeMap<String, bool>, ignore: &BTreeSet<String>) -> f64 {
    let (mut passed, mut n) = (0usize, 0usize);
    for (name, ok) in map {
        if !ignore.contains(name) {
            n += 1;
            passed += usize::from(*ok);
        }
    }
    if n == 0 {
        0.0
    } else {
        passed as f64 / n as f64
    }
}

/// The kept score of one evaluation (ProgramBench's `score_instance`).
pub fn score_instance(e: &Evaluation, tests: &TestsJson) -> f64 {
    score_from_tests(&test_results_map(e, tests), &BTreeSet::new())
}

/// A score counts as resolved at this, and near-resolved at the next.
pub const RESOLVED: f64 = 1.0;
pub const NEAR_RESOLVED: f64 = 0.95;

/// The headline over many tasks.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Headline {
    pub mean_score: f64,
    pub resolved_pct: f64,
    pub near_resolved_pct: f64,
    pub n_instances_attempted: usize,
    pub n_instances_total: usize,
}

/// ProgramBench's `aggregate`: `scores` of the tasks attempted, over `n_total` tasks.
pub fn aggregate(scores: &[f64], n_total: usize) -> Result<Headline> {
    if scores.is_empty() {
        return Err(Error::invalid(
            "no_scores",
            "no scored tasks to aggregate — score at least one",
        ));
    }
    let total = n_total as f64;
    let sum: f64 = scores.iter().sum();
    let count = |at: f64| scores.iter().filter(|s| **s >= at).count() as f64;
    Ok(Headline {
        mean_score: py_round(sum / total, 4),
        resolved_pct: py_round(100.0 * count(RESOLVED) / total, 1),
        near_resolved_pct: py_round(100.0 * count(NEAR_RESOLVED) / total, 1),
        n_instances_attempted: scores.len(),
        n_instances_total: n_total,
    })
}

/// The plain mean over the tasks attempted (not ProgramBench's headline, which divides by
/// every task of the benchmark): 0 for none.
pub fn mean_attempted(scores: &[f64]) -> f64 {
    if scores.is_empty() {
        0.0
    } else {
        scores.iter().sum::<f64>() / scores.len() as f64
    }
}

/// `x` rounded to `digits` places as Python's `round` does: the exact binary value, ties to
/// even (so 0.03125 is 0.0312 and 2.675, just below in binary, is 2.67).
pub fn py_round(x: f64, digits: usize) -> f64 {
    if !x.is_finite() {
        return x;
    }
    // Formatting with a precision rounds the exact decimal expansion, ties to even.
    format!("{x:.digits$}").parse().unwrap_or(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(branch: &str, name: &str, status: Status) -> TestResult {
        TestResult {
            name: name.into(),
            branch: branch.into(),
            status,
            extra: Default::default(),
        }
    }

    fn task(ignored: &[&str]) -> TestsJson {
        let mut t = TestsJson::default();
        t.branches.insert(
            "b".into(),
            Branch {
                tests: vec!["m.a".into(), "m.x".into(), "m.ig".into(), "m.b".into()],
                ignored_tests: ignored
                    .iter()
                    .map(|n| IgnoredTest {
                        name: n.to_string(),
                        reasons: Vec::new(),
                    })
                    .collect(),
                ..Branch::default()
            },
        );
        t
    }

    #[test]
    fn the_three_scores_differ_as_programbench_s_do() {
        // The case the package itself scores 0.4, 0.25 and 0.0.
        let results = vec![
            r("b", "m.a", Status::Passed),
            r("b", "m.x", Status::Failure),
            r("b", "m.ig", Status::Passed),
            r("b", "m.a", Status::Failure),
            r("b", "m.b", Status::NotRun),
        ];
        let t = task(&["m.ig"]);
        let e = Evaluation {
            test_results: results.clone(),
            test_branches: vec!["b".into()],
            error_code: None,
        };
        assert_eq!(raw_score(&results), 0.4);
        assert_eq!(eval_score(&results, &t.ignored_tests()), 0.25);
        assert_eq!(score_instance(&e, &t), 0.0);
    }

    #[test]
    fn results_of_other_branches_drop_out_unless_the_evaluation_ran_exactly_the_active_ones() {
        let mut t = task(&[]);
        t.branches.insert(
            "old".into(),
            Branch {
                ignored: true,
                ..Branch::default()
            },
        );
        let results = vec![
            r("b", "m.a", Status::Passed),
            r("old", "m.z", Status::Failure),
        ];
        let mut e = Evaluation {
            test_results: results,
            test_branches: vec!["b".into(), "old".into()],
            error_code: None,
        };
        assert_eq!(score_instance(&e, &t), 1.0);
        // Ran exactly the active branch: every result stays, whatever its branch says.
        e.test_branches = vec!["b".into()];
        assert_eq!(score_instance(&e, &t), 0.5);
    }

    #[test]
    fn nothing_to_score_is_zero_not_a_division_by_zero() {
        assert_eq!(raw_score(&[]), 0.0);
        assert_eq!(score_from_tests(&BTreeMap::new(), &BTreeSet::new()), 0.0);
        let all_ignored = BTreeMap::from([("b/t".to_string(), true)]);
        let ignore = BTreeSet::from(["b/t".to_string()]);
        assert_eq!(score_from_tests(&all_ignored, &ignore), 0.0);
    }

    #[test]
    fn rounding_is_python_s() {
        assert_eq!(py_round(0.03125, 4), 0.0312);
        assert_eq!(py_round(0.125, 2), 0.12);
        assert_eq!(py_round(2.675, 2), 2.67);
        assert_eq!(py_round(0.5, 0), 0.0);
        assert_eq!(py_round(1.5, 0), 2.0);
        assert_eq!(py_round(2.5, 0), 2.0);
    }

    #[test]
    fn aggregate_counts_unattempted_tasks_as_zero() {
        // The package's own numbers for these scores over 200 tasks.
        let h = aggregate(&[1.0, 0.96, 0.5], 200).unwrap();
        assert_eq!(
            (h.mean_score, h.resolved_pct, h.near_resolved_pct),
            (0.0123, 0.5, 1.0)
        );
        assert_eq!((h.n_instances_attempted, h.n_instances_total), (3, 200));
        assert!(aggregate(&[], 200).is_err());
    }

    #[test]
    fn the_mean_over_attempted_tasks_ignores_the_rest() {
        assert_eq!(mean_attempted(&[1.0, 0.5]), 0.75);
        assert_eq!(mean_attempted(&[]), 0.0);
    }

    #[test]
    fn an_eval_json_of_the_package_reads() {
        let text = r#"{"test_results":[{"name":"tests.t.test_a","branch":"33128f6b8600","status":"not_run","extra":{"error_code":"missing_from_junit_xml"}},
            {"name":"eval.tests.t.test_a","branch":"33128f6b8600","status":"passed","extra":{"time":0.002}}],
            "error_code":null,"log":[],"solution_branch":"submission","test_branches":["33128f6b8600"],
            "test_branch_errors":{},"executable_hash":"ab","warnings":[]}"#;
        let e: Evaluation = serde_json::from_str(text).unwrap();
        assert_eq!(raw_score(&e.test_results), 0.5);
        let tests: TestsJson = serde_json::from_str(
            r#"{"branches":{"33128f6b8600":{"ignored":false,"ignore_reason":"","tests":["tests.t.test_a"],"ignored_tests":[]}}}"#,
        )
        .unwrap();
        assert_eq!(score_instance(&e, &tests), 0.5);
    }
}
