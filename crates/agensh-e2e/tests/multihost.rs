//! Several hosts (issue 17, "Tests"), made of network namespaces on one machine
//! (`agensh-netns`): PostgreSQL and `agensh hub --store postgres://…` in one, three
//! `agensh node --hub URL --node-token T` in three others, each with its own state
//! directory, reaching the hub only over the bridge's addresses. 3 × 16 scripted workers
//! finish a 48-part goal; one node is killed with `kill -9` in the middle and started
//! again. Every part merged into `main`, `git fsck` clean, no event shown twice to any
//! worker.
//!
//! Needs root and iproute2 (and PostgreSQL's server programs): without them it fails with
//! what to install. It is `--ignored` in `cargo test` and run by the multi-host tier of
//! scripts/test, which CI runs as root.

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agensh_netns::Testnet;
use agensh_testkit::pg::Postgres;
use agensh_testkit::scenario::{step, Scenario, Step};
use agensh_testkit::wait_until_blocking;
use serde_json::Value;
use support::agensh_bin;

const NODES: usize = 3;
const WORKERS: usize = 16;
const PARTS: usize = NODES * WORKERS;
const HUB_PORT: u16 = 7420;

/// `agensh` inside host `host`, with none of this process's agensh settings.
fn agensh_in(net: &Testnet, host: &str) -> Command {
    let mut c = net.command(host, agensh_bin());
    for v in [
        "AGENSH_TOKEN",
        "AGENSH_HUB",
        "AGENSH_DIR",
        "AGENSH_LISTEN",
        "AGENSH_NODE_TOKEN",
        "AGENSH_STORE",
    ] {
        c.env_remove(v);
    }
    c.stdin(Stdio::null());
    c
}

fn ok(out: std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(args)
        .output()
        .unwrap();
    ok(out, &format!("git {args:?}"))
}

/// The parts on the hub's `main`.
fn parts_on_main(repo: &Path) -> usize {
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(["ls-tree", "--name-only", "main", "parts/"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.ends_with(".py"))
        .count()
}

/// Each worker takes a free part (a claim of 10 s, so one its agent lost in the kill lapses
/// soon), writes it, pushes it with its own git, merges it and lets its claim go, a turn a
/// part, until every part is merged.
fn scenario(tmp: &Path) -> PathBuf {
    let parts: Vec<String> = (1..=PARTS).map(|p| format!("p{p}")).collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    let turn = [
        Step::ClaimFreePart {
            lease_secs: Some(10),
            wait: true,
        },
        step::write_part(),
        step::commit_push(),
        step::open_and_merge_pr(),
        step::release(),
        step::end_turn(),
    ];
    let text = Scenario::new()
        .parts(&parts)
        .templates("def {part}():\n    return '{part}'\n", "assert True\n")
        .steps((0..PARTS).flat_map(|_| turn.clone()))
        .to_toml();
    let path = tmp.join("scenario.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn turn_log(node_dir: &Path, worker: &str) -> Vec<Value> {
    std::fs::read_to_string(
        node_dir
            .join(".agensh/logs")
            .join(worker)
            .join("turns.jsonl"),
    )
    .unwrap_or_default()
    .lines()
    .filter_map(|l| serde_json::from_str(l).ok())
    .collect()
}

/// SIGTERM (the node's Ctrl-C), then its exit; the status.
fn terminate(mut child: Child, what: &str) -> std::process::ExitStatus {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let started = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what} did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
#[ignore = "needs root, iproute2 and PostgreSQL: the multi-host tier of scripts/test"]
fn three_nodes_on_other_hosts_finish_48_parts_on_postgres_one_killed_and_restarted() {
    if let Err(e) = agensh_netns::check() {
        panic!("the multi-host test cannot run here: {e}");
    }
    let started = Instant::now();
    let bin = agensh_bin();
    let tmp = tempfile::tempdir().unwrap();
    let hosts = ["hub", "n1", "n2", "n3"];
    // Everything is torn down after 15 minutes even if this test hangs.
    let mut net = Testnet::create("agmh", &hosts, Duration::from_secs(900))
        .unwrap_or_else(|e| panic!("cannot make the hosts: {e}"));
    let pg = Postgres::start_in(&mut net, "hub", false)
        .unwrap_or_else(|e| panic!("no PostgreSQL in the hub's host: {e}"));

    // The hub's host: the organization's directory, the store on PostgreSQL beside it.
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("tests")).unwrap();
    std::fs::write(src.join("README.md"), "Parts built by three hosts.\n").unwrap();
    let hub_dir = tmp.path().join("hub");
    let out = Command::new(&bin)
        .args(["init", hub_dir.to_str().unwrap(), "--goal"])
        .arg(format!("implement parts p1..p{PARTS}"))
        .args(["--from", src.to_str().unwrap()])
        .output()
        .unwrap();
    ok(out, "agensh init");
    let hub_addr = net.host("hub").addr;
    let hub_url = format!("http://{hub_addr}:{HUB_PORT}");
    let hub_log = std::fs::File::create(tmp.path().join("hub.log")).unwrap();
    let mut hub = agensh_in(&net, "hub")
        .args(["hub", hub_dir.to_str().unwrap()])
        .args(["--listen", &format!("{hub_addr}:{HUB_PORT}")])
        .args(["--store", &pg.url()])
        .env("AGENSH_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(hub_log)
        .spawn()
        .unwrap();
    wait_until_blocking(
        Duration::from_secs(60),
        "the hub's hub.json",
        || matches!(agensh_hub::read_hub_info(&hub_dir), Ok(i) if i.pid == hub.id()),
    );
    assert!(hub.try_wait().unwrap().is_none(), "the hub exited");

    // A node token per node host, issued on the hub's host.
    let s = scenario(tmp.path());
    let node_dirs: Vec<PathBuf> = (1..=NODES)
        .map(|n| tmp.path().join(format!("node{n}")))
        .collect();
    let mut tokens = Vec::new();
    for n in 1..=NODES {
        let out = agensh_in(&net, "hub")
            .args(["--dir", hub_dir.to_str().unwrap()])
            .args(["nodes", "add", &format!("n{n}"), "--workers"])
            .arg(WORKERS.to_string())
            .output()
            .unwrap();
        tokens.push(ok(out, "agensh nodes add"));
        let dir = &node_dirs[n - 1];
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(
            dir.join("agensh.toml"),
            "[organization]\ngoal = \"set by the hub\"\n[run]\nstagger_secs = 0.0\nidle_timeout_secs = 3\n",
        )
        .unwrap();
    }
    let start_node = |n: usize| -> Child {
        let dir = &node_dirs[n - 1];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("node.log"))
            .unwrap();
        agensh_in(&net, &format!("n{n}"))
            .current_dir(dir)
            .args(["--hub", &hub_url, "--dir", dir.to_str().unwrap()])
            .args([
                "node",
                "--workers",
                &WORKERS.to_string(),
                "--agent",
                "script",
            ])
            .args(["--scenario", s.to_str().unwrap()])
            .env("AGENSH_NODE_TOKEN", &tokens[n - 1])
            .env("AGENSH_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    };
    let mut nodes: Vec<Option<Child>> = (1..=NODES).map(|n| Some(start_node(n))).collect();
    let repo = hub_dir.join(".agensh/workspace.git");

    // In the middle of the run, node n2 is killed with -9 and started again.
    eprintln!("{:?}: hub and nodes started", started.elapsed());
    // In the middle of the run — a third of the parts merged, and at least half of node
    // n2's workers through a turn — n2 is killed with -9 and started again.
    let ran = |dir: &Path| -> Vec<String> {
        std::fs::read_dir(dir.join(".agensh/logs"))
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|id| !turn_log(dir, id).is_empty())
                    .collect()
            })
            .unwrap_or_default()
    };
    wait_until_blocking(
        Duration::from_secs(300),
        "a third of the parts merged and half of n2's workers through a turn",
        || parts_on_main(&repo) >= PARTS / 3 && ran(&node_dirs[1]).len() >= WORKERS / 2,
    );
    let mut n2 = nodes[1].take().unwrap();
    n2.kill().unwrap();
    n2.wait().unwrap();
    // The workers that logged something before the kill: each must be resumed.
    let n2_ran = ran(&node_dirs[1]);
    let at_kill = parts_on_main(&repo);
    assert!(
        at_kill < PARTS,
        "the kill came after the end: {at_kill} parts merged"
    );
    nodes[1] = Some(start_node(2));

    eprintln!(
        "{:?}: node n2 killed at {at_kill} parts and started again",
        started.elapsed()
    );
    // The node started again resumes every one of its workers (their turn logs say what
    // was shown before the kill, acknowledged at once, so nothing is shown twice).
    let resumed_by = Instant::now() + Duration::from_secs(120);
    loop {
        let waiting: Vec<&String> = n2_ran
            .iter()
            .filter(|id| {
                !turn_log(&node_dirs[1], id)
                    .iter()
                    .any(|t| t["restarted"] == true)
            })
            .collect();
        if waiting.is_empty() {
            break;
        }
        if Instant::now() > resumed_by {
            let log = std::fs::read_to_string(node_dirs[1].join("node.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            panic!(
                "node n2's workers {waiting:?} were not resumed within 120 s of its restart; its log ends:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    eprintln!("{:?}: node n2's workers resumed", started.elapsed());
    wait_until_blocking(Duration::from_secs(300), "every part merged", || {
        parts_on_main(&repo) >= PARTS
    });
    eprintln!("{:?}: every part merged", started.elapsed());
    for (i, node) in nodes.iter_mut().enumerate() {
        let status = terminate(node.take().unwrap(), &format!("node n{}", i + 1));
        let log = std::fs::read_to_string(node_dirs[i].join("node.log")).unwrap_or_default();
        assert!(status.success(), "node n{}: {status}\n{log}", i + 1);
    }

    // Every part on main, and the hub's repository is sound.
    let files = git(&repo, &["ls-tree", "-r", "--name-only", "main"]);
    for p in 1..=PARTS {
        assert!(files.contains(&format!("parts/p{p}.py")), "p{p}: {files}");
    }
    git(&repo, &["fsck", "--no-progress", "--full", "--strict"]);

    // Each node ran its own 16 workers from its own directory, nothing of the hub's there;
    // the restarted node's workers were resumed; no worker was shown an event twice.
    let mut ids = BTreeSet::new();
    for (i, dir) in node_dirs.iter().enumerate() {
        assert!(!dir.join(".agensh/workspace.git").exists());
        let workers: Vec<String> = std::fs::read_dir(dir.join(".agensh/logs"))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        assert_eq!(workers.len(), WORKERS, "node n{}: {workers:?}", i + 1);
        for id in workers {
            let log = turn_log(dir, &id);
            if i == 1 && n2_ran.contains(&id) {
                assert!(
                    log.iter().any(|t| t["restarted"] == true),
                    "{id}'s restart is logged: {log:?}"
                );
            }
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
            assert!(ids.insert(id.clone()), "{id} ran on two nodes");
        }
    }
    assert_eq!(ids.len(), PARTS);
    // The hub's store is the PostgreSQL server: its nodes and workers are there.
    let out = agensh_in(&net, "hub")
        .args([
            "--dir",
            hub_dir.to_str().unwrap(),
            "nodes",
            "list",
            "--json",
        ])
        .output()
        .unwrap();
    let listed: Value = serde_json::from_str(&ok(out, "agensh nodes list")).unwrap();
    let assigned: usize = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["assigned"].as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(assigned, PARTS, "{listed}");
    let _ = terminate(hub, "the hub");
    drop(net);
    eprintln!(
        "multi-host run: {PARTS} parts by {NODES} × {WORKERS} workers in {:?} (node n2 killed at {at_kill} parts)",
        started.elapsed()
    );
}
