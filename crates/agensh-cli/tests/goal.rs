//! `organization.done_when` end to end: a real `agensh run` (hub and node in one process,
//! one scripted ACP agent process per worker, real git) ends when its goal is met, says
//! what it took, and leaves the run going when it is not met.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::scenarios::{self, ship_the_part, step};
use common::{run_in, run_summary, turn_log, AgenshRun, OrgDir, RunProcess};
use serde_json::Value;

/// An organization seeded with a README, and the two-part scenario beside it: each worker
/// takes a free part, writes it, merges it and ends its turn; later prompts only get an
/// answer.
fn org() -> (OrgDir, PathBuf) {
    let org = OrgDir::builder("write parts p1 and p2")
        .seed("README.md", "Two parts.\n")
        // Continue prompts every 10 s: turns keep coming after the work is done, as they
        // do with a real agent, until the goal ends the run.
        .setting("idle_timeout_secs", "10")
        .init();
    let scenario = org.scenario(
        &scenarios::parts(&["p1", "p2"], "from parts.{part} import {part}\n")
            .step(step::claim_free_part())
            .steps(ship_the_part())
            .step(step::release())
            .step(step::end_turn()),
    );
    (org, scenario)
}

/// `agensh run DIR --agent script` with two workers and `extra`.
fn start(dir: &Path, scenario: &Path, extra: &[&str]) -> RunProcess {
    AgenshRun::script(dir, scenario)
        .workers(2)
        .args(extra)
        .spawn()
}

#[test]
fn a_run_ends_when_its_done_when_command_passes_on_main_and_says_so() {
    let (org, scenario) = org();
    let dir = &org.dir;
    let started = Instant::now();
    // Six minutes unless the goal ends it.
    let run = start(
        dir,
        &scenario,
        &[
            "--hours",
            "0.1",
            "--done-when",
            "command: test -f parts/p1.py && test -f parts/p2.py",
        ],
    );
    let summary = run.finish(Duration::from_secs(300));
    let took = started.elapsed();
    assert!(took < Duration::from_secs(150), "the run went on: {took:?}");
    let goal = &summary["goal"];
    assert_eq!(goal["met"], true, "{summary}");
    assert_eq!(goal["met_commit"].as_str().unwrap(), org.main_commit());
    assert_eq!(goal["checks"][0]["exit"], 0, "{goal}");
    assert!(goal["seconds_to_goal"].as_f64().unwrap() > 0.0, "{goal}");
    assert_eq!(goal["economy"]["prs_merged"], 2, "{goal}");
    assert_eq!(goal["economy"]["mark"], "goal_met", "{goal}");

    // No turn started after the goal was met (a second of slack for the clocks).
    let met_at = goal["seconds_to_goal"].as_f64().unwrap();
    let run_start = summary_start(dir);
    for w in ["w01", "w02"] {
        let log = turn_log(dir, w);
        for turn in log.iter().filter(|l| l.get("turn").is_some()) {
            let at = (turn["started"].as_i64().unwrap() - run_start) as f64 / 1000.0;
            assert!(
                at <= met_at + 1.0,
                "{w} started a turn {at:.1} s into the run, after the goal ({met_at:.1} s)"
            );
        }
        assert!(
            log.iter().any(|l| l["stopped"]
                .as_str()
                .is_some_and(|s| s.starts_with("the goal is met at"))),
            "{w} was not stopped by the goal: {log:?}"
        );
    }

    // The organization was told: a FACT on the board and a post in #general.
    let board = run_in(dir, &["board", "grep", "kind:FACT", "--json"]);
    assert!(String::from_utf8_lossy(&board.stdout).contains("goal met at"));
    let general = run_in(dir, &["msg", "read", "--all", "--json"]);
    assert!(String::from_utf8_lossy(&general.stdout).contains("Goal met at"));
}

/// When the run started: the first turn log entry's start, near enough for the check above.
fn summary_start(dir: &Path) -> i64 {
    ["w01", "w02"]
        .iter()
        .flat_map(|w| turn_log(dir, w))
        .filter_map(|l| l["started"].as_i64())
        .min()
        .expect("a turn was logged")
}

#[test]
fn a_check_that_hangs_is_cut_at_its_timeout_counts_as_not_met_and_the_run_goes_on_to_its_end() {
    let (org, scenario) = org();
    common::set_setting(&org.dir, "done_timeout_secs", "2");
    let started = Instant::now();
    let run = start(
        &org.dir,
        &scenario,
        &["--hours", "0.006", "--done-when", "command: sleep 600"],
    );
    let out = run.wait(Duration::from_secs(180));
    // The run lasted its 21.6 s: the goal never ended it.
    assert!(started.elapsed() > Duration::from_secs(20));
    assert_eq!(
        out.status.code(),
        Some(6),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("without meeting its goal"));
    let summary: Value = run_summary(&out);
    let check = &summary["goal"]["checks"][0];
    assert_eq!(summary["goal"]["met"], false, "{summary}");
    assert_eq!(check["timed_out"], true, "{check}");
    assert_eq!(check["met"], false, "{check}");
    assert!(
        check["took_ms"].as_u64().unwrap() < 10_000,
        "the check was not cut at its timeout: {check}"
    );
}

#[test]
fn bad_done_when_conditions_are_refused_at_start_naming_the_field() {
    let (org, scenario) = org();
    let dir = &org.dir;
    for (condition, says) in [
        ("tests: cargo test", "unknown kind \"tests\""),
        ("command:  ", "the command is empty"),
        ("score: 1.5", "between 0 and 1"),
    ] {
        let out = start(dir, &scenario, &["--done-when", condition]).wait(Duration::from_secs(30));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{condition}: {err}");
        // With --json the error is one JSON line.
        let err: Value = serde_json::from_str(err.trim()).expect("a JSON error");
        let err = err["error"]["message"].as_str().unwrap();
        assert!(err.contains("organization.done_when"), "{condition}: {err}");
        assert!(err.contains(says), "{condition}: {err}");
    }
    // Nothing was started: no worker has a turn log.
    assert!(!dir.join(".agensh/logs/w01").exists());
}
