//! End to end: issues opened by a person (seeded by `agensh init --issues`, and one opened
//! with `agensh issue open`) are seen by scripted workers in a real `agensh run` (the hub
//! and node in one process, one scripted ACP agent process per worker, real git, HTTP and
//! MCP), each claimed by one worker (`issue_claim`) and closed by that worker's merged PR,
//! whose body says `closes #N`.

mod common;

use std::time::Duration;

use common::scenarios::{step, Scenario, Step};
use common::{run_in, stderr, AgenshRun, OrgDir};
use serde_json::Value;

/// An organization seeded with two issues (one from `agensh init --issues`, one opened
/// with `agensh issue open`) and a scenario in which each worker takes one and ships it
/// with `closes #N`: (the organization, the scenario).
fn org_with_two_issues() -> (OrgDir, std::path::PathBuf) {
    let org = OrgDir::builder("close the issues")
        .seed("README.md", "A project with issues.\n")
        .issues(
            "[[issue]]\ntitle = \"Write the changelog\"\nbody = \"One line per release.\"\nlabels = [\"docs\"]\n",
        )
        .init();
    // A person opens a second one (no hub runs yet: the command serves the state itself).
    org.ok(&["issue", "open", "Add a LICENSE file", "--label", "legal"]);

    let scenario = org.scenario(
        &Scenario::new()
            .step(Step::TakeIssue {
                path: "issues/{issue}.txt".into(),
                text: "{worker} did: {issue_title}\n".into(),
                wait: false,
            })
            .step(step::end_turn()),
    );
    (org, scenario)
}

#[test]
fn issues_opened_by_a_person_are_claimed_and_closed_by_scripted_workers_merged_prs() {
    let (org, scenario) = org_with_two_issues();
    let dir = &org.dir;
    let log = org.beside("script.jsonl");
    let summary = AgenshRun::script(dir, &scenario)
        .workers(2)
        .hours("0.008")
        .script_log(&log)
        .spawn()
        .finish(Duration::from_secs(120));
    assert_eq!(summary["prs_merged"], 2, "{summary}");

    // Each worker listed the free issues and claimed one over MCP.
    let lines = common::json_lines(&log);
    let claimed: Vec<&Value> = lines
        .iter()
        .filter(|l| {
            l["tool"] == "issue_claim" && !l["text"].as_str().unwrap_or("").starts_with("refused")
        })
        .collect();
    assert_eq!(claimed.len(), 2, "{lines:?}");
    assert!(lines.iter().any(|l| l["tool"] == "issue_list"), "{lines:?}");

    // Both are closed now, each by the PR of the worker it was assigned to.
    let out = run_in(dir, &["issue", "list", "--state", "all", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 2, "{list:?}");
    let mut assignees = Vec::new();
    for issue in list {
        assert_eq!(issue["state"], "closed", "{issue}");
        assert_eq!(issue["author"], "admin", "{issue}");
        let by = issue["closed_by"].as_str().unwrap();
        let pr: i64 = by
            .strip_prefix("pr#")
            .unwrap_or_else(|| panic!("closed by {by}, not a PR"))
            .parse()
            .unwrap();
        let assignee = issue["assignee"].as_str().unwrap().to_string();
        let out = run_in(dir, &["pr", "view", &pr.to_string(), "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let pr: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(pr["state"], "merged", "{pr}");
        assert_eq!(pr["author"], assignee.as_str(), "{pr}");
        assert!(
            pr["body"]
                .as_str()
                .unwrap()
                .contains(&format!("closes #{}", issue["number"])),
            "{pr}"
        );
        assignees.push(assignee);
    }
    assignees.sort();
    assert_eq!(assignees, ["w01", "w02"], "each worker took one issue");

    // The work is on main.
    for n in [1, 2] {
        let shown = std::process::Command::new("git")
            .args(["--git-dir", org.bare().to_str().unwrap(), "show"])
            .arg(format!("main:issues/{n}.txt"))
            .output()
            .unwrap();
        assert!(shown.status.success(), "issues/{n}.txt is not on main");
        assert!(
            String::from_utf8_lossy(&shown.stdout).contains(" did: "),
            "{}",
            String::from_utf8_lossy(&shown.stdout)
        );
    }
}

#[test]
fn with_done_when_issues_the_merge_that_closes_the_last_issue_ends_the_run() {
    let (org, scenario) = org_with_two_issues();
    let started = std::time::Instant::now();
    let summary = AgenshRun::script(&org.dir, &scenario)
        .workers(2)
        // Six minutes if nothing ended it: the goal must.
        .hours("0.1")
        .args(["--done-when", "issues"])
        .spawn()
        .finish(Duration::from_secs(300));
    assert!(
        started.elapsed() < Duration::from_secs(150),
        "the run went on after its goal: {:?}",
        started.elapsed()
    );
    let goal = &summary["goal"];
    assert_eq!(goal["met"], true, "{summary}");
    assert_eq!(goal["conditions"][0], "issues", "{goal}");
    assert_eq!(
        goal["checks"][0]["detail"], "every issue is closed",
        "{goal}"
    );
    assert_eq!(summary["prs_merged"], 2, "{summary}");
    assert_eq!(
        goal["met_commit"].as_str().unwrap(),
        org.main_commit(),
        "the goal was met at main's last commit"
    );
}
