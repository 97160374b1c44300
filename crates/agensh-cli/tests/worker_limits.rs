//! `run.worker_memory` end to end: a real `agensh run` whose scripted agent (a real
//! process) allocates past its worker's memory limit is killed by the kernel, reported as
//! killed by its memory limit, restarted by the recovery path, and the run still finishes.
//!
//! Needs cgroups the node may create (root, or a delegated cgroup): elsewhere the run
//! refuses to start and this test fails saying so — it never passes unseen.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agensh_process::cgroup::{CpuShare, NodeCgroups};
use agensh_store::Store;
use common::scenarios::{say, sleep, step, Scenario, Step};
use common::{block_on, run_summary, stderr, AgenshRun, OrgDir, RunProcess};
use serde_json::Value;

/// Kills and removes whatever the node's cgroups left, however the test ended (the node's
/// name is the one it uses: the organization and its workers).
struct CgroupGuard(String);

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        // Opening the same name removes what was left; dropping it removes the rest.
        drop(NodeCgroups::open(&self.0, CpuShare::EQUAL));
    }
}

/// Every cgroup directory named `name` under /sys/fs/cgroup, a few levels deep.
fn cgroup_dirs(name: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, name: &str, depth: usize, found: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if e.file_name().to_string_lossy() == name {
                found.push(e.path());
            } else if depth > 0 {
                walk(&e.path(), name, depth - 1, found);
            }
        }
    }
    let mut found = Vec::new();
    walk(Path::new("/sys/fs/cgroup"), name, 4, &mut found);
    found
}

/// Whether a worker's cgroup holds the memory limit file of the cgroup version this machine
/// has, where the run says which (`AGENSH_TEST_CGROUP_VERSION`: scripts/test on this machine,
/// scripts/cgroup-v2-vm in its guest; any cgroup directory passes elsewhere). On v1 the
/// worker has a directory in each controller's hierarchy; the memory one holds the limit.
fn has_limit_file(worker: &Path) -> bool {
    match std::env::var("AGENSH_TEST_CGROUP_VERSION").as_deref() {
        Ok("v2") => worker.join("memory.max").is_file(),
        Ok("v1") => worker.join("memory.limit_in_bytes").is_file(),
        Ok(other) => panic!("AGENSH_TEST_CGROUP_VERSION is v1 or v2, not {other:?}"),
        Err(_) => true,
    }
}

/// An organization with one worker whose agent may use `memory`, restarted quickly.
fn org(memory: &str) -> OrgDir {
    OrgDir::builder("stay within memory")
        .setting("worker_memory", &format!("\"{memory}\""))
        .settings(&[
            ("notices_minutes", "[0.001]"),
            ("idle_timeout_secs", "600"),
            ("max_restarts", "2"),
            ("restart_backoff_secs", "0.2"),
        ])
        .init()
}

/// The cgroup name the node gives the organization in `dir` with its one worker.
fn cgroup_hash(dir: &Path) -> String {
    let workers = vec![("w01".to_string(), String::new())];
    agensh_node::node::cgroup_name(&std::path::absolute(dir).unwrap(), &workers)
}

/// Starts `agensh run DIR` with the scripted agent on `scenario`, one worker, `hours`.
fn start_run(org: &OrgDir, scenario: &Scenario, hours: &str) -> RunProcess {
    AgenshRun::script(&org.dir, &org.scenario(scenario))
        .workers(1)
        .hours(hours)
        .spawn()
}

#[test]
fn an_agent_over_its_memory_limit_is_reported_as_killed_by_it_restarted_and_the_run_finishes() {
    let org = org("128MiB");
    let dir = &org.dir;
    let name = format!("agensh-{}", cgroup_hash(dir));
    let _guard = CgroupGuard(name.trim_start_matches("agensh-").to_string());
    let run = start_run(
        &org,
        &Scenario::new().steps([
            say("before"),
            Step::Allocate { mib: 512 },
            step::board_write("FACT", "back after the memory limit"),
            step::end_turn(),
        ]),
        "0.003",
    );

    // While it runs, the worker's cgroup is there.
    let mut seen = false;
    let out = run.wait_watching(Duration::from_secs(90), Duration::from_millis(50), || {
        seen |= cgroup_dirs(&name)
            .iter()
            .any(|d| d.join("workers/w01").is_dir() && has_limit_file(&d.join("workers/w01")));
    });
    let stderr = stderr(&out);
    assert!(
        !stderr.contains("cannot create cgroups"),
        "this test needs cgroups the node may create (run it as root or in a delegated cgroup): {stderr}"
    );
    assert!(out.status.success(), "run failed: {stderr}");
    assert!(
        seen,
        "no cgroup {name}/workers/w01 (with its memory limit file) while the run went on"
    );
    let summary = run_summary(&out);
    assert_eq!(
        summary["failed_workers"],
        serde_json::json!([]),
        "{summary}"
    );
    let w = &summary["workers"][0];
    assert_eq!(w["memory_kills"], 1, "{summary}");
    assert!(w["restarts"].as_u64().unwrap() >= 1, "{summary}");

    // The turn log says what killed it, then the restart, then the work goes on.
    let t: Vec<Value> = org
        .turn_log("w01")
        .into_iter()
        .filter(|l| l.get("carrying").is_none())
        .collect();
    let killed = t
        .iter()
        .position(|l| l.get("error").is_some())
        .unwrap_or_else(|| panic!("no failed turn logged: {t:?}"));
    let error = t[killed]["error"].as_str().unwrap();
    assert!(
        error.starts_with("agent killed by its memory limit (128 MiB)"),
        "{error}"
    );
    assert_eq!(t[killed]["memory_limit"], true, "{:?}", t[killed]);
    let restart = &t[killed + 1];
    assert_eq!(restart["restart"], 1, "{t:?}");
    assert_eq!(restart["started"], true, "{t:?}");
    let after = &t[killed + 2];
    assert!(
        after["prompt"]
            .as_str()
            .unwrap()
            .contains("agent killed by its memory limit"),
        "the restart prompt says why: {after}"
    );
    assert!(
        after["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "board_write" && e["status"] == "completed"),
        "the restarted agent went on after the allocation: {after}"
    );

    // The hub's turn reports carry the count (the dashboard reads them).
    let reports = block_on(org.store().turns("w01", None, 10)).unwrap();
    let newest = reports.first().expect("a turn report at the hub");
    assert_eq!(
        (newest.memory_kills, newest.restarts >= 1),
        (1, true),
        "{newest:?}"
    );

    // Nothing is left behind once the node has ended.
    assert_eq!(cgroup_dirs(&name), Vec::<PathBuf>::new());
}

#[test]
fn a_node_killed_with_kill_9_leaves_cgroups_its_next_start_removes() {
    let org = org("256MiB");
    let hash = cgroup_hash(&org.dir);
    let name = format!("agensh-{hash}");
    let _guard = CgroupGuard(hash);
    let scenario = Scenario::new().step(sleep(600000));

    // The first node is killed while its worker's agent runs in its cgroup.
    let mut first = start_run(&org, &scenario, "1");
    let started = Instant::now();
    let agent_in_cgroup = || {
        cgroup_dirs(&name).iter().any(|d| {
            std::fs::read_to_string(d.join("workers/w01/cgroup.procs"))
                .is_ok_and(|p| !p.trim().is_empty())
        })
    };
    while !agent_in_cgroup() {
        if started.elapsed() > Duration::from_secs(60) || first.try_wait().is_some() {
            let out = first.kill_9_with_output();
            panic!(
                "the agent never ran in {name}/workers/w01: {}",
                stderr(&out)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    first.kill_9(); // SIGKILL: nothing of the node runs after it
    let left = cgroup_dirs(&name);
    assert!(
        left.iter().any(|d| d.join("workers/w01").is_dir()),
        "a node killed with -9 cannot remove its cgroups: {left:?}"
    );

    // Started again over the same organization and workers, it takes the place over,
    // runs, and leaves nothing when it ends.
    let out = start_run(&org, &scenario, "0.001").output();
    let stderr = stderr(&out);
    assert!(out.status.success(), "the second run failed: {stderr}");
    assert!(
        !stderr.contains("could not remove the leftover cgroup"),
        "{stderr}"
    );
    assert_eq!(cgroup_dirs(&name), Vec::<PathBuf>::new());
}

#[test]
fn a_memory_limit_that_cannot_be_enforced_refuses_the_run_before_anything_starts() {
    // An unprivileged user cannot create cgroups here; this test needs root to become one.
    assert!(
        agensh_process::resources::is_root(),
        "this test needs root, to run agensh as an unprivileged user (nobody)"
    );
    let tmp = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let as_nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "env"])
            .arg(format!("HOME={}", tmp.path().display()))
            .arg(env!("CARGO_BIN_EXE_agensh"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("setpriv runs")
    };
    let dir = tmp.path().join("org");
    let out = as_nobody(&["init", dir.to_str().unwrap(), "--goal", "x"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = dir.join("agensh.toml");
    let toml = std::fs::read_to_string(&path)
        .unwrap()
        .replace("\nworker_memory = \"\"\n", "\nworker_memory = \"512MiB\"\n");
    std::fs::write(&path, toml).unwrap();
    let scenario = tmp.path().join("scenario.toml");
    std::fs::write(&scenario, "[[step]]\naction = \"end_turn\"\n").unwrap();
    std::fs::set_permissions(&scenario, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = as_nobody(&[
        "run",
        dir.to_str().unwrap(),
        "--agent",
        "script",
        "--scenario",
        scenario.to_str().unwrap(),
        "--workers",
        "1",
        "--listen",
        "127.0.0.1:0",
    ]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(
        stderr.contains("run.worker_memory is 512 MiB, but cannot create cgroups")
            && stderr.contains("Delegate=yes")
            && stderr.contains("run.worker_memory = \"\""),
        "{stderr}"
    );
    // Refused before the hub started: no dashboard link, no worker started.
    assert!(
        !format!("{stdout}{stderr}").contains("dashboard:"),
        "{stdout}{stderr}"
    );
    assert!(!dir.join(".agensh/logs/w01").exists());
}
