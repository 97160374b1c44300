//! End to end: issues opened by a person (seeded by `agensh init --issues`, and one opened
//! with `agensh issue open`) are seen by scripted workers in a real `agensh run` (the hub
//! and node in one process, one scripted ACP agent process per worker, real git, HTTP and
//! MCP), each claimed by one worker (`issue_claim`) and closed by that worker's merged PR,
//! whose body says `closes #N`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{agensh, finish, json_lines, run_in};
use serde_json::Value;

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// An organization seeded with two issues (one from `agensh init --issues`, one opened
/// with `agensh issue open`) and a scenario in which each worker takes one and ships it
/// with `closes #N`: (the organization's directory, the scenario).
fn org_with_two_issues(tmp: &Path) -> (PathBuf, PathBuf) {
    let seed = tmp.join("src");
    std::fs::create_dir_all(&seed).unwrap();
    std::fs::write(seed.join("README.md"), "A project with issues.\n").unwrap();
    let issues = tmp.join("issues.toml");
    std::fs::write(
        &issues,
        "[[issue]]\ntitle = \"Write the changelog\"\nbody = \"One line per release.\"\nlabels = [\"docs\"]\n",
    )
    .unwrap();
    let dir = tmp.join("org");
    let out = agensh()
        .args(["init", dir.to_str().unwrap(), "--goal", "close the issues"])
        .args(["--from", seed.to_str().unwrap(), "--issues"])
        .arg(&issues)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // A person opens a second one (no hub runs yet: the command serves the state itself).
    let out = run_in(
        &dir,
        &["issue", "open", "Add a LICENSE file", "--label", "legal"],
    );
    assert!(out.status.success(), "{}", stderr(&out));

    let scenario = tmp.join("scenario.toml");
    std::fs::write(
        &scenario,
        "[[step]]\naction = \"take_issue\"\npath = \"issues/{issue}.txt\"\ntext = \"{worker} did: {issue_title}\\n\"\n\
         [[step]]\naction = \"end_turn\"\n",
    )
    .unwrap();
    (dir, scenario)
}

#[test]
fn issues_opened_by_a_person_are_claimed_and_closed_by_scripted_workers_merged_prs() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, scenario) = org_with_two_issues(tmp.path());
    let log = tmp.path().join("script.jsonl");
    let run = agensh()
        .args([
            "run",
            dir.to_str().unwrap(),
            "--agent",
            "script",
            "--scenario",
        ])
        .arg(&scenario)
        .args(["--listen", "127.0.0.1:0", "--json", "--workers", "2"])
        .args(["--hours", "0.008"])
        .env("AGENSH_SCRIPT_LOG", &log)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("agensh run starts");
    let summary = finish(run, Duration::from_secs(120));
    assert_eq!(summary["prs_merged"], 2, "{summary}");

    // Each worker listed the free issues and claimed one over MCP.
    let lines = json_lines(&log);
    let claimed: Vec<&Value> = lines
        .iter()
        .filter(|l| {
            l["tool"] == "issue_claim" && !l["text"].as_str().unwrap_or("").starts_with("refused")
        })
        .collect();
    assert_eq!(claimed.len(), 2, "{lines:?}");
    assert!(lines.iter().any(|l| l["tool"] == "issue_list"), "{lines:?}");

    // Both are closed now, each by the PR of the worker it was assigned to.
    let out = run_in(&dir, &["issue", "list", "--state", "all", "--json"]);
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
        let out = run_in(&dir, &["pr", "view", &pr.to_string(), "--json"]);
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
    let repo = dir.join(".agensh/workspace.git");
    for n in [1, 2] {
        let shown = Command::new("git")
            .args(["--git-dir", repo.to_str().unwrap(), "show"])
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
    let tmp = tempfile::tempdir().unwrap();
    let (dir, scenario) = org_with_two_issues(tmp.path());
    let started = std::time::Instant::now();
    let run = agensh()
        .args([
            "run",
            dir.to_str().unwrap(),
            "--agent",
            "script",
            "--scenario",
        ])
        .arg(&scenario)
        .args(["--listen", "127.0.0.1:0", "--json", "--workers", "2"])
        // Six minutes if nothing ended it: the goal must.
        .args(["--hours", "0.1", "--done-when", "issues"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("agensh run starts");
    let summary = finish(run, Duration::from_secs(300));
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
    let main = Command::new("git")
        .args([
            "--git-dir",
            dir.join(".agensh/workspace.git").to_str().unwrap(),
        ])
        .args(["rev-parse", "main"])
        .output()
        .unwrap();
    assert_eq!(
        goal["met_commit"].as_str().unwrap(),
        String::from_utf8_lossy(&main.stdout).trim(),
        "the goal was met at main's last commit"
    );
}
