//! End to end: issues opened by a person (seeded by `agensh init --issues`, and one opened
//! with `agensh issue open`) are seen by scripted workers in a real `agensh run` (the hub
//! and node in one process, one scripted ACP agent process per worker, real git, HTTP and
//! MCP), each claimed by one worker (`issue_claim`) and closed by that worker's merged PR,
//! whose body says `closes #N`.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{agensh, run_in};
use serde_json::Value;

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Waits for `agensh run` to end and returns its JSON summary.
fn finish(child: Child, limit: Duration) -> Value {
    let started = Instant::now();
    let pid = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
    while !waiter.is_finished() {
        if started.elapsed() > limit {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("agensh run did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = waiter.join().unwrap();
    assert!(out.status.success(), "run failed: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "summary is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn log_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn issues_opened_by_a_person_are_claimed_and_closed_by_scripted_workers_merged_prs() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = tmp.path().join("src");
    std::fs::create_dir_all(&seed).unwrap();
    std::fs::write(seed.join("README.md"), "A project with issues.\n").unwrap();
    let issues = tmp.path().join("issues.toml");
    std::fs::write(
        &issues,
        "[[issue]]\ntitle = \"Write the changelog\"\nbody = \"One line per release.\"\nlabels = [\"docs\"]\n",
    )
    .unwrap();
    let dir = tmp.path().join("org");
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

    let scenario = tmp.path().join("scenario.toml");
    std::fs::write(
        &scenario,
        "[[step]]\naction = \"take_issue\"\npath = \"issues/{issue}.txt\"\ntext = \"{worker} did: {issue_title}\\n\"\n\
         [[step]]\naction = \"end_turn\"\n",
    )
    .unwrap();
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
    let lines = log_lines(&log);
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
