//! A node on another host (issue 17): `agensh hub` in one directory, `agensh node --hub URL
//! --node-token T` in another that has nothing of the hub's, scripted workers cloning and
//! pushing over the hub's git smart HTTP; the node killed with -9 in the middle of the run
//! and started again resumes its workers without showing any event twice.

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::scenarios::{self, end_turn_only, ship_the_part, sleep, step, Step};
use common::{agensh, block_on, turn_log, wait_until, write_files, HubProcess, OrgDir};
use serde_json::Value;

const PARTS: usize = 8;

/// An organization whose `main` has a README; the hub's side only (in `hub/`).
fn hub_org() -> OrgDir {
    OrgDir::builder("implement parts p1..p8")
        .named("hub")
        .seed("README.md", "Parts built by a remote node.\n")
        .init()
}

/// The hub's running process with a node issued to it (`nodes add NAME --workers N`): the
/// hub and the node's token.
fn hub_with_node(org: &OrgDir, name: &str, workers: usize) -> (HubProcess, String) {
    let hub = HubProcess::start(&org.dir);
    let token = org.ok(&["nodes", "add", name, "--workers", &workers.to_string()]);
    (hub, token.trim().to_string())
}

/// The node's own directory beside the hub's, with `toml` as its agensh.toml.
fn node_dir(org: &OrgDir, toml: &str) -> PathBuf {
    let dir = org.beside("node");
    write_files(&dir, &[("agensh.toml", toml)]);
    dir
}

/// Each worker takes a free part (a claim of 10 s, so one its agent lost in the kill lapses
/// soon), writes it, pushes it with its own git, merges it and lets its claim go, a turn a
/// part, until every part is merged; its second turn waits a little first, which is where
/// the node is killed.
fn scenario(org: &OrgDir) -> PathBuf {
    let parts: Vec<String> = (1..=PARTS).map(|p| format!("p{p}")).collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    let turn = || {
        let mut steps = vec![Step::ClaimFreePart {
            lease_secs: Some(10),
            wait: true,
        }];
        steps.extend(ship_the_part());
        steps.extend([step::release(), step::end_turn()]);
        steps
    };
    let mut s = scenarios::parts(&parts, "assert True\n")
        .steps(turn())
        .step(sleep(2500));
    for _ in 0..PARTS {
        s = s.steps(turn());
    }
    org.scenario(&s)
}

fn start_node(node_dir: &Path, hub: &HubProcess, token: &str, s: &Path, hours: &str) -> Child {
    agensh()
        .current_dir(node_dir)
        .args(["--hub", &hub.info.url, "--dir", node_dir.to_str().unwrap()])
        .args(["node", "--workers", "4", "--agent", "script"])
        .args(["--scenario", s.to_str().unwrap(), "--hours", hours])
        .env("AGENSH_NODE_TOKEN", token)
        .env("AGENSH_SCRIPT_LOG", node_dir.join("script.jsonl"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("agensh node starts")
}

fn git(dir: &Path, args: &[&str]) -> String {
    common::git(dir, args).trim().to_string()
}

#[test]
fn a_node_on_another_host_works_over_http_only_and_resumes_after_kill_9() {
    let org = hub_org();
    let hub_dir = &org.dir;
    let (hub, token) = hub_with_node(&org, "host-b", 4);
    assert!(token.starts_with("agn_"), "{token}");

    // The node's own directory: a few [run] settings, nothing of the hub's.
    let node_dir = node_dir(
        &org,
        "[organization]\ngoal = \"set by the hub\"\n[run]\nstagger_secs = 0.0\nidle_timeout_secs = 3\nnotices_minutes = [0.001]\n",
    );
    let s = scenario(&org);
    let merged = || block_on(hub.admin().stats()).unwrap().prs_merged;

    let mut first = start_node(&node_dir, &hub, &token, &s, "1");
    wait_until(Duration::from_secs(120), "half the parts merged", || {
        merged() >= (PARTS / 2) as u64
    });
    // Some prompt of the second turns handed over: the kill lands in the middle of a turn.
    wait_until(Duration::from_secs(60), "a second turn starts", || {
        (1..=4).any(|i| {
            turn_log(&node_dir, &format!("w{i:02}"))
                .iter()
                .filter(|t| t.get("carrying").is_some())
                .count()
                >= 2
        })
    });
    first.kill().unwrap();
    first.wait().unwrap();
    let before = merged();
    assert!(
        before < PARTS as u64,
        "the kill came after the end: {before}"
    );

    // Nothing of the hub's on this side, and no token where an agent's git shows it.
    assert!(!node_dir.join(".agensh/workspace.git").exists());
    assert!(
        !hub_dir.join("workers").exists(),
        "checkouts on the hub's side"
    );
    for i in 1..=4 {
        let id = format!("w{i:02}");
        let checkout = node_dir.join("workers").join(&id);
        let origin = git(&checkout, &["remote", "get-url", "origin"]);
        assert_eq!(origin, format!("{}/git/workspace.git", hub.info.url));
        let remotes = git(&checkout, &["remote", "-v"]);
        let config = std::fs::read_to_string(checkout.join(".git/config")).unwrap();
        let file = node_dir.join(".agensh/credentials").join(&id);
        let worker_token = std::fs::read_to_string(&file).unwrap();
        assert!(worker_token.starts_with("agw_"));
        assert!(!remotes.contains(&worker_token) && !config.contains(&worker_token));
        assert!(!config.contains(&token) && !remotes.contains("agw_"));
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}", file.display());
        assert_eq!(
            git(&checkout, &["branch", "--show-current"]),
            format!("{id}/work")
        );
    }

    // Started again with the same token and directory: the same workers go on.
    let again = start_node(&node_dir, &hub, &token, &s, "0.02");
    let started = Instant::now();
    let out = again.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the node failed after {:?}: {}",
        started.elapsed(),
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains(&token) && !stderr.contains("agw_"),
        "a token in the node's output: {stderr}"
    );
    // Every part merged. A worker killed between its merge and the note of it in its
    // script's progress merges its part's branch once more when it goes on: at least once,
    // never lost.
    let prs = block_on(hub.admin().list_prs(Some("merged"), None, Some(100))).unwrap();
    let titles: Vec<&str> = prs.iter().map(|p| p.title.as_str()).collect();
    assert!(prs.len() >= PARTS, "{titles:?}: {stderr}");

    for i in 1..=4 {
        let id = format!("w{i:02}");
        let log = turn_log(&node_dir, &id);
        assert!(
            log.iter().any(|t| t["restarted"] == true),
            "{id}'s restart is logged: {log:?}"
        );
        // No event is shown twice: every seq is carried by one prompt at most.
        let mut seen = BTreeSet::new();
        for seq in log
            .iter()
            .filter_map(|t| t["carrying"].as_array())
            .flatten()
            .filter_map(Value::as_i64)
        {
            assert!(
                seen.insert(seq),
                "{id} was shown event {seq} twice: {log:?}"
            );
        }
    }

    // main has every part, and the hub's repository is sound.
    let files = org.bare_git(&["ls-tree", "-r", "--name-only", "main"]);
    for p in 1..=PARTS {
        assert!(
            files.contains(&format!("parts/p{p}.py")),
            "p{p}: {files}\nmerged: {titles:?}\nscript: {}",
            std::fs::read_to_string(node_dir.join("script.jsonl")).unwrap_or_default()
        );
    }
    org.assert_fsck_clean();
    // The workers are the node's, none made on the side.
    let workers = block_on(hub.admin().workers()).unwrap();
    assert_eq!(workers.len(), 4);
    let nodes = block_on(hub.admin().nodes()).unwrap();
    assert_eq!(nodes[0].assigned, ["w01", "w02", "w03", "w04"]);
}

/// The line of a launch prompt that gives the run's end.
fn end_line(prompt: &str) -> String {
    prompt
        .lines()
        .find(|l| l.contains("The run ends at"))
        .unwrap_or_else(|| panic!("no end in the launch prompt:\n{prompt}"))
        .to_string()
}

/// What a node on the hub's host takes from the organization's agensh.toml and its run —
/// the task pack, the run's end, the deadline notices — a node on another host gets from
/// the hub: its own agensh.toml names none of them, its workers' prompts carry the pack,
/// they are told the end is near when the organization says, and they stop at the run's
/// end, which a node killed and started again keeps (it is the hub's clock, not the
/// node's start plus its own `run.hours`).
#[test]
fn a_node_on_another_host_gets_the_task_pack_and_the_runs_end_from_the_hub() {
    let org = hub_org();
    let hub_dir = &org.dir;
    std::fs::write(
        hub_dir.join("pack.md"),
        "PACK-7f3e: every part carries a docstring.\n",
    )
    .unwrap();
    let toml = std::fs::read_to_string(hub_dir.join("agensh.toml")).unwrap();
    let toml = toml
        .replacen(
            "goal = \"implement parts p1..p8\"",
            "goal = \"implement parts p1..p8\"\npack = [\"pack.md\"]",
            1,
        )
        .replacen("hours = 6.0", "hours = 0.01", 1)
        .replacen(
            "notices_minutes = [45.0, 5.0]",
            "notices_minutes = [0.3]",
            1,
        );
    assert!(toml.contains("pack.md") && toml.contains("hours = 0.01") && toml.contains("[0.3]"));
    std::fs::write(hub_dir.join("agensh.toml"), toml).unwrap();
    // The run lasts 36 s from the hub's start; its notice comes 18 s before the end.
    let hub_started = Instant::now();
    let (hub, token) = hub_with_node(&org, "host-c", 1);

    // The node's own directory says nothing of a pack, an end or notices.
    let node_dir = node_dir(
        &org,
        "[organization]\ngoal = \"set by the hub\"\n[run]\nstagger_secs = 0.0\nidle_timeout_secs = 600\n",
    );
    let s = org.beside("idle.toml");
    std::fs::write(&s, end_turn_only().to_toml()).unwrap();
    let start = || {
        agensh()
            .current_dir(&node_dir)
            .args(["--hub", &hub.info.url, "--dir", node_dir.to_str().unwrap()])
            .args(["node", "--workers", "1", "--agent", "script"])
            .args(["--scenario", s.to_str().unwrap()])
            .env("AGENSH_NODE_TOKEN", &token)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("agensh node starts")
    };
    let launch = node_dir.join(".agensh/logs/w01/launch-prompt.md");
    let mut first = start();
    wait_until(Duration::from_secs(30), "the first turn", || {
        turn_log(&node_dir, "w01")
            .iter()
            .any(|t| t.get("stop_reason").is_some())
    });
    let prompt = std::fs::read_to_string(&launch).unwrap();
    assert!(prompt.contains("PACK-7f3e"), "no task pack:\n{prompt}");
    let end = end_line(&prompt);
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(
        hub_started.elapsed() < Duration::from_secs(16),
        "the node took too long to start for the notice to come after its restart"
    );

    // Killed and started again: the same end, the pack again; it stops at the run's end.
    let again = start();
    let out = again.wait_with_output().unwrap();
    let ended = hub_started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let prompt = std::fs::read_to_string(&launch).unwrap();
    assert!(
        prompt.contains("PACK-7f3e"),
        "no task pack after the restart:\n{prompt}"
    );
    assert_eq!(
        end_line(&prompt),
        end,
        "the run's end moved with the restart"
    );
    assert!(
        ended >= Duration::from_secs(34) && ended < Duration::from_secs(90),
        "the node stopped {ended:?} after the hub started, not at the run's end (36 s): {stderr}"
    );
    let log = turn_log(&node_dir, "w01");
    let notices: Vec<&Value> = log
        .iter()
        .filter(|t| {
            t["prompt"]
                .as_str()
                .is_some_and(|p| p.contains("Time check, worker w01"))
        })
        .collect();
    assert_eq!(notices.len(), 1, "one deadline notice: {log:?}");
}

#[test]
fn nodes_are_issued_listed_and_revoked_from_the_command_line() {
    let org = hub_org();
    let hub_dir = &org.dir;
    let hub = HubProcess::start(hub_dir);
    let run = |args: &[&str]| {
        let out = agensh().current_dir(hub_dir).args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, out, err) = run(&["nodes", "add", "gpu-1", "--workers", "2", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let issued: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(issued["name"], "gpu-1");
    let token = issued["token"].as_str().unwrap().to_string();
    let (code, _, err) = run(&["nodes", "add", "gpu-1", "--workers", "2"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("exists already"), "{err}");

    // The node registers; the operator sees it and its workers, never its token.
    let node = agensh_client::Client::new(&hub.info.url, &token);
    block_on(node.register_node(2)).unwrap();
    let (code, out, _) = run(&["nodes", "list"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("gpu-1") && out.contains("w01,w02"), "{out}");
    assert!(!out.contains(&token));
    let (_, out, _) = run(&["nodes", "list", "--json"]);
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed[0]["assigned"], serde_json::json!(["w01", "w02"]));

    let (code, out, err) = run(&["nodes", "revoke", "gpu-1"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.lines().collect::<Vec<_>>(), ["w01", "w02"]);
    assert!(err.contains("no longer work"), "{err}");
    let e = block_on(node.register_node(2)).unwrap_err();
    assert_eq!(e.code, "unauthorized");

    // A node token without the hub's address is a usage error that says what to give.
    let out = agensh()
        .current_dir(org.tmp())
        .args(["node", "--workers", "1", "--node-token", &token])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--hub URL"), "{err}");
    assert!(!err.contains(&token), "{err}");
}
