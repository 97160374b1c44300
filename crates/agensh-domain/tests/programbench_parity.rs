//! Our ProgramBench scores against the package's own functions (`programbench` 1.2.5:
//! `EvaluationResult.score`, `without_ignored`, `score_from_tests`, `score_instance`,
//! `aggregate`) on generated tasks and results — random branches (some ignored), ignored
//! tests, duplicates, names missing from and unknown to `tests.json`, every status, and
//! evaluations of exactly the active branches or of others: equal to the bit, every case.
//!
//! Needs a Python with the package installed, named by `AGENSH_PROGRAMBENCH_PYTHON`;
//! `scripts/test` makes that venv and runs this tier with `--ignored`.

use std::collections::{BTreeMap, BTreeSet};

use agensh_domain::programbench::{
    aggregate, eval_score, raw_score, score_from_tests, score_instance, test_results_map, Branch,
    Evaluation, IgnoredTest, Status, TestResult, TestsJson,
};
use serde_json::{json, Value};

/// A small deterministic generator (xorshift), so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

const STATUSES: [Status; 6] = [
    Status::Passed,
    Status::Skipped,
    Status::Failure,
    Status::Error,
    Status::SystemError,
    Status::NotRun,
];

/// One generated case: a task, an evaluation of it, and a set of names to strike out.
fn case(rng: &mut Rng) -> (TestsJson, Evaluation, BTreeSet<String>) {
    let mut tests = TestsJson::default();
    let n_branches = 1 + rng.below(4);
    let names: Vec<String> = (0..1 + rng.below(12))
        .map(|i| format!("tests.t.test_{i}"))
        .collect();
    let mut branch_ids = Vec::new();
    for b in 0..n_branches {
        let id = format!("{:012x}", rng.next() & 0xffff_ffff_ffff ^ b as u64);
        let listed: Vec<String> = names.iter().filter(|_| rng.chance(70)).cloned().collect();
        let ignored_tests = listed
            .iter()
            .filter(|_| rng.chance(20))
            .map(|n| IgnoredTest {
                name: n.clone(),
                reasons: vec![json!({ "id": "gold_flaky" })],
            })
            .collect();
        tests.branches.insert(
            id.clone(),
            Branch {
                ignored: rng.chance(15),
                ignore_reason: String::new(),
                tests: listed,
                ignored_tests,
            },
        );
        branch_ids.push(id);
    }
    let mut results = Vec::new();
    for _ in 0..rng.below(25) {
        let branch = if rng.chance(5) {
            String::new()
        } else {
            branch_ids[rng.below(branch_ids.len())].clone()
        };
        let name = if rng.chance(10) {
            format!("eval.tests.t.unknown_{}", rng.below(3))
        } else {
            names[rng.below(names.len())].clone()
        };
        results.push(TestResult {
            name,
            branch,
            status: STATUSES[rng.below(STATUSES.len())],
            extra: Default::default(),
        });
    }
    let test_branches = if rng.chance(60) {
        // Exactly the active ones, in another order.
        let mut a = tests.active_branches();
        a.reverse();
        a
    } else {
        branch_ids
            .iter()
            .filter(|_| rng.chance(60))
            .cloned()
            .collect()
    };
    let strike: BTreeSet<String> = results
        .iter()
        .filter(|_| rng.chance(10))
        .map(|r| r.full_name())
        .collect();
    let e = Evaluation {
        test_results: results,
        test_branches,
        error_code: None,
    };
    (tests, e, strike)
}

/// The package's functions on the cases, in a Python process.
const SCRIPT: &str = r#"
import json, struct, sys, tempfile, pathlib
# Floats go back as their bits: a JSON number is not always read back to the same float.
def bits(x):
    return struct.unpack("<Q", struct.pack("<d", float(x)))[0]
from programbench.eval.eval import EvaluationResult
from programbench.submission import score_from_tests, score_instance, aggregate, test_results_map
from programbench.utils.load_data import get_ignored_tests
cases = json.load(open(sys.argv[1]))
out = []
tmp = pathlib.Path(tempfile.mkdtemp())
kept_scores = {}
for i, c in enumerate(cases):
    path = tmp / f"{i}.eval.json"
    path.write_text(json.dumps(c["eval"]))
    result = EvaluationResult.model_validate_json(path.read_text())
    instance = {"branches": c["tests"]["branches"]}
    m = test_results_map(path, instance)
    kept = score_instance(path, instance)
    kept_scores[f"t{i}"] = kept
    out.append({
        "raw": bits(result.score),
        "eval": bits(result.without_ignored(get_ignored_tests(instance)).score),
        "map": m,
        "kept": bits(kept),
        "struck": bits(score_from_tests(m, set(c["strike"]))),
    })
h = aggregate(kept_scores, len(cases) + 7)
print(json.dumps({"cases": out, "headline": [bits(h.mean_score), bits(h.resolved_pct), bits(h.near_resolved_pct), h.n_instances_attempted, h.n_instances_total]}))
"#;

fn eval_json(e: &Evaluation) -> Value {
    json!({
        "test_results": e.test_results, "error_code": null, "error_details": null, "log": [],
        "solution_branch": "submission", "test_branches": e.test_branches,
        "test_branch_errors": {}, "executable_hash": null, "warnings": [],
    })
}

#[test]
#[ignore = "needs the programbench package: scripts/test installs it in a venv and runs this tier with --ignored"]
fn our_scores_are_the_package_s_to_the_bit() {
    let python = std::env::var("AGENSH_PROGRAMBENCH_PYTHON")
        .expect("AGENSH_PROGRAMBENCH_PYTHON names a Python with programbench 1.2.5 installed");
    let mut rng = Rng(0x5eed_1234_abcd_9876);
    let cases: Vec<_> = (0..400).map(|_| case(&mut rng)).collect();
    let input: Vec<Value> = cases
        .iter()
        .map(|(t, e, strike)| json!({ "tests": t, "eval": eval_json(e), "strike": strike }))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cases.json");
    std::fs::write(&file, serde_json::to_vec(&input).unwrap()).unwrap();
    let out = std::process::Command::new(&python)
        .args(["-c", SCRIPT])
        .arg(&file)
        .output()
        .expect("the package's Python runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut kept_scores = Vec::new();
    for (i, ((tests, e, strike), t)) in cases
        .iter()
        .zip(theirs["cases"].as_array().unwrap())
        .enumerate()
    {
        let f = |k: &str| f64::from_bits(t[k].as_u64().unwrap());
        assert_eq!(
            raw_score(&e.test_results).to_bits(),
            f("raw").to_bits(),
            "case {i}: raw"
        );
        assert_eq!(
            eval_score(&e.test_results, &tests.ignored_tests()).to_bits(),
            f("eval").to_bits(),
            "case {i}: eval"
        );
        let map = test_results_map(e, tests);
        let their_map: BTreeMap<String, bool> = serde_json::from_value(t["map"].clone()).unwrap();
        assert_eq!(map, their_map, "case {i}: the map");
        let kept = score_instance(e, tests);
        assert_eq!(kept.to_bits(), f("kept").to_bits(), "case {i}: kept");
        assert_eq!(
            score_from_tests(&map, strike).to_bits(),
            f("struck").to_bits(),
            "case {i}: struck out"
        );
        kept_scores.push(kept);
    }
    let h = aggregate(&kept_scores, cases.len() + 7).unwrap();
    let theirs = &theirs["headline"];
    let float = |i: usize| theirs[i].as_u64().unwrap();
    assert_eq!(
        (
            h.mean_score.to_bits(),
            h.resolved_pct.to_bits(),
            h.near_resolved_pct.to_bits()
        ),
        (float(0), float(1), float(2)),
        "the headline: ours {h:?}"
    );
    assert_eq!(
        (h.n_instances_attempted as u64, h.n_instances_total as u64),
        (theirs[3].as_u64().unwrap(), theirs[4].as_u64().unwrap())
    );
}
