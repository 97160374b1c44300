//! `agensh run` end to end: real processes (the hub and node in one `agensh run`, one
//! scripted ACP agent process per worker), real git, real HTTP, real MCP.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::scenarios::{self, end_turn_only, say, ship_the_part, sleep, step, Scenario, Step};
use common::{
    agensh, bare, block_on, git, run_node, turn_log, wait_until, write_files, AgenshRun,
    HubProcess, OrgDir, RunProcess,
};
use serde_json::Value;

/// A seed project: a test runner that checks every part's test.
const SEED: [(&str, &str); 2] = [
    (
        "check.sh",
        "#!/bin/sh\nset -e\nn=0\nfor t in tests/test_*.py; do python3 \"$t\"; n=$((n+1)); done\necho \"$n part tests passed\"\n",
    ),
    ("README.md", "Eight independent parts.\n"),
];

/// A part's test: it imports the part and checks what it returns.
const PART_TEST: &str =
    "import sys\nsys.path.insert(0, '.')\nfrom parts.{part} import {part}\nassert {part}() == '{part}'\n";

/// An organization seeded with the project, with `[run]` settings replaced.
fn org(run: &[(&str, &str)]) -> OrgDir {
    let mut new = OrgDir::builder("implement parts p1..p8");
    for (path, text) in SEED {
        new = new.seed(path, text);
    }
    new.settings(run).init()
}

/// Starts `agensh run DIR --agent script --scenario S` with the scripted agents' log at
/// `script.jsonl` beside the organization, `workers` workers for `hours`.
fn start_run(org: &OrgDir, scenario: &Path, workers: usize, hours: &str) -> RunProcess {
    AgenshRun::script(&org.dir, scenario)
        .workers(workers)
        .hours(hours)
        .script_log(&org.beside("script.jsonl"))
        .spawn()
}

/// What the scripted agents logged.
fn script_log(org: &OrgDir) -> Vec<Value> {
    common::json_lines(&org.beside("script.jsonl"))
}

/// A directory that is no organization yet: the seed project in `seed/` and `toml` as its
/// agensh.toml.
fn write_example(dir: &Path, toml: &str) {
    write_files(&dir.join("seed"), &SEED);
    write_files(dir, &[("agensh.toml", toml)]);
}

/// Runs one scripted worker of `org` on `scenario` for `hours` (within a minute); the
/// run's summary.
fn one_worker(org: &OrgDir, scenario: &Scenario, hours: &str) -> Value {
    let s = org.scenario(scenario);
    start_run(org, &s, 1, hours).finish(Duration::from_secs(60))
}

/// The worker's turn log, without the `carrying` entries written as a prompt is handed
/// over (see [`turn_log`] for every entry).
fn turns(dir: &Path, worker: &str) -> Vec<Value> {
    turn_log(dir, worker)
        .into_iter()
        .filter(|l| l.get("carrying").is_none())
        .collect()
}

#[test]
fn eight_scripted_workers_build_eight_parts_and_main_passes_its_tests() {
    let org = org(&[("stagger_secs", "0.2")]);
    // The first two workers to hold a part wait for each other before writing it: nothing
    // is merged until both hold one, so the later of them tried the earlier's part first
    // and saw its claim, however fast the machine.
    let barrier = org.beside("barrier");
    let s = org.scenario(
        &scenarios::parts(&["p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8"], PART_TEST)
            .step(step::claim_free_part())
            .step(Step::Barrier {
                path: barrier.to_str().unwrap().to_string(),
                count: 2,
            })
            .steps(ship_the_part())
            .step(step::board_write(
                "PATCH_SUMMARY",
                "files=parts/{part}.py | idea=return the name | evidence=test passed",
            ))
            .step(step::release())
            .step(step::end_turn()),
    );
    let summary = start_run(&org, &s, 8, "0.008").finish(Duration::from_secs(120));
    assert_eq!(summary["prs_merged"], 8, "{summary}");
    assert!(
        summary["failed_workers"].as_array().unwrap().is_empty(),
        "{summary}"
    );

    // Every part claimed exactly once in the end: each worker merged a different part.
    let merged: Vec<String> = script_log(&org)
        .iter()
        .filter(|l| l["event"] == "turn_end" && l["turn"] == 1)
        .filter_map(|l| l["part"].as_str().map(str::to_string))
        .collect();
    let mut unique = merged.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 8, "parts per worker: {merged:?}");
    // At least one worker saw another's claim in its claim answer and moved on.
    let overlaps = script_log(&org)
        .iter()
        .filter(|l| l["tool"] == "claim" && l["text"].as_str().unwrap_or("").contains("overlap"))
        .count();
    assert!(overlaps > 0, "no worker ran into a claimed part");

    let main = org.beside("main");
    git(
        org.tmp(),
        &[
            "clone",
            "-q",
            org.bare().to_str().unwrap(),
            main.to_str().unwrap(),
        ],
    );
    for p in 1..=8 {
        assert!(
            main.join(format!("parts/p{p}.py")).exists(),
            "p{p} missing on main"
        );
    }
    let check = Command::new("sh")
        .arg("check.sh")
        .current_dir(&main)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(String::from_utf8_lossy(&check.stdout).contains("8 part tests passed"));
    org.assert_fsck_clean();
}

#[test]
fn a_dm_reaches_a_busy_worker_inside_its_turn_and_a_channel_post_at_the_next_turn_once() {
    let org = org(&[("notices_minutes", "[0.001]")]);
    let dir = &org.dir;
    let s = org.scenario(
        &Scenario::new()
            .step(Step::Poll {
                tool: "workers".into(),
                args: Value::Null,
                every_ms: 200,
                for_ms: 6000,
                until_notice: false,
            })
            .step(step::end_turn()),
    );
    let run = start_run(&org, &s, 1, "0.004");
    wait_until(Duration::from_secs(30), "the first tool call", || {
        script_log(&org).iter().any(|l| l["event"] == "tool")
    });
    org.ok(&["msg", "send", "w01", "please look at PR 1"]);
    org.ok(&["msg", "send", "#general", "standup in five"]);
    run.finish(Duration::from_secs(60));

    let calls: Vec<Value> = script_log(&org)
        .into_iter()
        .filter(|l| l["event"] == "tool")
        .collect();
    let with_dm: Vec<&Value> = calls
        .iter()
        .filter(|l| {
            l["notices"]
                .as_str()
                .unwrap_or("")
                .contains("please look at PR 1")
        })
        .collect();
    assert_eq!(with_dm.len(), 1, "the DM is a notice exactly once");
    assert_eq!(with_dm[0]["turn"], 1, "inside the turn it was sent in");
    assert!(
        calls
            .iter()
            .all(|l| !l["notices"].as_str().unwrap_or("").contains("standup")),
        "a channel post is no notice"
    );

    let t = turns(dir, "w01");
    assert!(t.len() >= 2, "{t:?}");
    let prompts: Vec<&str> = t
        .iter()
        .map(|x| x["prompt"].as_str().unwrap_or(""))
        .collect();
    assert!(
        prompts[1].contains("standup in five"),
        "the next turn carries the post: {}",
        prompts[1]
    );
    assert_eq!(
        prompts
            .iter()
            .filter(|p| p.contains("standup in five"))
            .count(),
        1,
        "once"
    );
    assert!(
        !prompts[1].contains("please look at PR 1"),
        "the DM was delivered already"
    );
}

#[test]
fn an_idle_worker_gets_a_continue_prompt() {
    // Deadline notices out of the way: this run is shorter than their default lead.
    let org = org(&[("idle_timeout_secs", "2"), ("notices_minutes", "[0.001]")]);
    one_worker(&org, &end_turn_only(), "0.0025");
    let t = turns(&org.dir, "w01");
    assert!(t.len() >= 2, "{t:?}");
    let second = t[1]["prompt"].as_str().unwrap();
    assert!(
        second.contains("You have been idle for 2 seconds"),
        "{second}"
    );
    let gap = t[1]["started"].as_i64().unwrap() - t[0]["ended"].as_i64().unwrap();
    assert!(
        (1_500..6_000).contains(&gap),
        "continue prompt after the 2 s idle timeout, got {gap} ms"
    );
}

#[test]
fn a_turn_cut_off_at_its_step_limit_is_resumed_at_once_not_after_the_idle_timeout() {
    let org = org(&[("idle_timeout_secs", "600"), ("notices_minutes", "[0.001]")]);
    let scenario = Scenario::new()
        .step(Step::EndTurn { step_limit: true })
        .step(step::end_turn());
    one_worker(&org, &scenario, "0.0025");
    let t = turns(&org.dir, "w01");
    assert_eq!(t.len(), 2, "a normal end waits for the idle timeout: {t:?}");
    assert_eq!(t[0]["stop_reason"], "max_turn_requests");
    let second = t[1]["prompt"].as_str().unwrap();
    assert!(second.contains("reached its step limit"), "{second}");
    let gap = t[1]["started"].as_i64().unwrap() - t[0]["ended"].as_i64().unwrap();
    assert!(gap < 4_000, "resumed after {gap} ms");
}

#[test]
fn deadline_notices_arrive_at_their_configured_times() {
    // A 24 s run with notices 15 s and 6 s before the end.
    let org = org(&[
        ("notices_minutes", "[0.25, 0.1]"),
        ("idle_timeout_secs", "600"),
    ]);
    let s = org.scenario(&end_turn_only());
    let started = chrono_ms();
    start_run(&org, &s, 1, "0.00667").finish(Duration::from_secs(60));
    let t = turns(&org.dir, "w01");
    let notices: Vec<&Value> = t
        .iter()
        .filter(|x| x["prompt"].as_str().unwrap_or("").contains("Time check"))
        .collect();
    assert_eq!(notices.len(), 2, "{t:?}");
    let at = |v: &Value| v["started"].as_i64().unwrap() - started;
    assert!(
        (7_000..12_500).contains(&at(notices[0])),
        "first notice at {} ms",
        at(notices[0])
    );
    assert!(
        (16_000..21_500).contains(&at(notices[1])),
        "second notice at {} ms",
        at(notices[1])
    );
    assert!(notices[1]["prompt"]
        .as_str()
        .unwrap()
        .contains("Final integration"));
}

fn chrono_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Processes whose command line mentions `needle`.
fn processes_with(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            if String::from_utf8_lossy(&cmd).contains(needle) {
                found.push(pid);
            }
        }
    }
    found
}

#[test]
fn ctrl_c_stops_every_agent_and_leaves_a_consistent_store() {
    let org = org(&[("stagger_secs", "0")]);
    let s = org.scenario(
        &Scenario::new()
            .step(Step::Poll {
                tool: "board_read".into(),
                args: Value::Null,
                every_ms: 300,
                for_ms: 120000,
                until_notice: false,
            })
            .step(step::end_turn()),
    );
    let mut run = start_run(&org, &s, 3, "1");
    let needle = s.to_string_lossy().to_string();
    wait_until(Duration::from_secs(40), "three busy agents", || {
        processes_with(&needle).len() >= 3
    });
    run.signal("INT");
    run.finish(Duration::from_secs(30));
    wait_until(Duration::from_secs(5), "no agent process left", || {
        processes_with(&needle).is_empty()
    });

    let hub = HubProcess::start(&org.dir);
    let list = block_on(hub.admin().workers()).unwrap();
    assert_eq!(list.len(), 3);
    for w in list {
        assert_eq!(
            w.status.as_str(),
            "stopped",
            "{} left {}",
            w.id,
            w.status.as_str()
        );
    }
    drop(hub);
    org.assert_fsck_clean();
}

#[test]
fn a_node_runs_workers_against_a_hub_in_another_process() {
    let org = org(&[("notices_minutes", "[0.001]"), ("stagger_secs", "0")]);
    let hub = HubProcess::start(&org.dir);
    org.ok(&["workers", "add", "2"]);
    let s = org.scenario(&scenarios::two_parts_each_shipped(PART_TEST));
    run_node(&org.dir, &hub, 2, &s, "0.003");
    let stats = block_on(hub.admin().stats()).unwrap();
    assert_eq!(stats.prs_merged, 2);
    for w in block_on(hub.admin().workers()).unwrap() {
        assert_eq!(w.status.as_str(), "stopped");
        assert!(
            !turns(&org.dir, &w.id).is_empty(),
            "{} logged no turn",
            w.id
        );
    }
}

#[test]
fn a_directory_with_an_agensh_toml_and_a_seed_becomes_an_organization_on_its_first_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("example");
    write_example(
        &dir,
        "[organization]\ngoal = \"implement the parts\"\nseed = \"seed\"\n",
    );
    let s = tmp.path().join("scenario.toml");
    std::fs::write(&s, end_turn_only().to_toml()).unwrap();
    let run = || {
        AgenshRun::script(&dir, &s)
            .workers(1)
            .hours("0.001")
            .script_log(&tmp.path().join("script.jsonl"))
            .spawn()
            .finish(Duration::from_secs(60))
    };
    run();
    // main holds the seed's files; the worker's checkout is next to the configuration.
    let repo = bare(&dir);
    let files = git(&repo, &["ls-tree", "-r", "--name-only", "main"]);
    assert_eq!(files.lines().collect::<Vec<_>>(), ["README.md", "check.sh"]);
    assert!(dir.join("workers/w01/check.sh").exists());
    let main_before = git(&repo, &["rev-parse", "main"]);
    let turns_before = turns(&dir, "w01").len();
    assert!(turns_before >= 1);
    // A second run continues the same organization: nothing is seeded again.
    run();
    assert_eq!(git(&repo, &["rev-parse", "main"]), main_before);
    assert!(
        turns(&dir, "w01").len() > turns_before,
        "the second run ran no turn"
    );
}

#[test]
fn a_taken_port_is_avoided_before_anything_is_created() {
    let tmp = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tmp.path().join("example");
    write_example(
        &dir,
        &format!("[organization]\ngoal = \"g\"\nseed = \"seed\"\n[hub]\nlisten = \"{addr}\"\n"),
    );
    let s = tmp.path().join("scenario.toml");
    std::fs::write(&s, end_turn_only().to_toml()).unwrap();
    let run = |listen: &[&str]| {
        agensh()
            .args([
                "run",
                dir.to_str().unwrap(),
                "--agent",
                "script",
                "--scenario",
            ])
            .arg(&s)
            .args(["--workers", "1", "--hours", "0.001", "--json"])
            .args(listen)
            .env("AGENSH_SCRIPT_LOG", tmp.path().join("script.jsonl"))
            .output()
            .unwrap()
    };
    // Given on the command line: refused, and nothing is created.
    let out = run(&["--listen", &addr]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&addr) && err.contains("--listen"), "{err}");
    assert!(!dir.join(".agensh").exists(), "state was created: {err}");
    // From agensh.toml: another free port, said before the state is created.
    let out = run(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let said = err
        .find(&format!("{addr} is in use"))
        .unwrap_or_else(|| panic!("{err}"));
    let created = err.find("created the organization's state").unwrap();
    assert!(said < created, "{err}");
    assert!(
        err.contains("this run's hub listens on 127.0.0.1:"),
        "{err}"
    );
    drop(taken);
}

#[test]
fn a_missing_seed_is_named_and_nothing_half_made_is_left() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("example");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("agensh.toml"),
        "[organization]\ngoal = \"g\"\nseed = \"no-such-dir\"\n[run]\nagent = \"script\"\n",
    )
    .unwrap();
    let out = agensh()
        .args(["run", dir.to_str().unwrap(), "--scenario", "x.toml"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("organization.seed") && err.contains("no-such-dir"),
        "{err}"
    );
    assert!(
        !dir.join(".agensh").exists(),
        "a half-made .agensh was left"
    );
}

#[test]
fn a_hosted_endpoint_needs_a_model_name_and_its_key_variable_set() {
    let (_tmp, dir) = common::new_org("g");
    let run = |extra: &[&str]| {
        let out = agensh()
            .args(["run", dir.to_str().unwrap(), "--agent", "builtin"])
            .args(["--model-url", "http://127.0.0.1:9/v1"])
            .args(extra)
            .env_remove("AGENSH_TEST_UNSET_KEY")
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(&[]);
    assert!(err.contains("--model NAME"), "{err}");
    let err = run(&["--model", "m", "--api-key-env", "AGENSH_TEST_UNSET_KEY"]);
    assert!(
        err.contains("AGENSH_TEST_UNSET_KEY") && err.contains("not set"),
        "{err}"
    );
    let err = run(&["--model", "m", "--tool-style", "xml"]);
    assert!(err.contains("auto, tools, json"), "{err}");
}

/// Runs one scripted worker of `org` on `steps` for `hours`; its turn log, once the run
/// ended with no failed worker.
fn run_one(org: &OrgDir, steps: impl IntoIterator<Item = Step>, hours: &str) -> Vec<Value> {
    let summary = one_worker(org, &Scenario::new().steps(steps), hours);
    assert_eq!(
        summary["failed_workers"],
        serde_json::json!([]),
        "{summary}"
    );
    turns(&org.dir, "w01")
}

/// Settings under which agents are restarted quickly (twice at most) and never prompted for
/// being idle, so the prompts a test sees come from restarts.
const RESTARTING: [(&str, &str); 4] = [
    ("notices_minutes", "[0.001]"),
    ("idle_timeout_secs", "600"),
    ("max_restarts", "2"),
    ("restart_backoff_secs", "0.2"),
];

#[test]
fn an_agent_that_crashes_is_restarted_and_goes_on_where_it_was() {
    let org = org(&RESTARTING);
    // The agent dies mid-turn; restarted, it loads its session and resumes after the exit.
    let t = run_one(
        &org,
        [
            say("before"),
            Step::Exit { code: 3 },
            step::board_write("FACT", "back after a restart"),
            step::end_turn(),
        ],
        "0.002",
    );
    let failed = t
        .iter()
        .position(|l| l.get("error").is_some())
        .unwrap_or_else(|| panic!("no failed turn logged: {t:?}"));
    let restart = &t[failed + 1];
    assert_eq!(restart["restart"], 1, "{t:?}");
    assert_eq!(restart["started"], true, "{t:?}");
    let after = &t[failed + 2];
    let prompt = after["prompt"].as_str().unwrap();
    assert!(prompt.contains("was restarted"), "{prompt}");
    assert!(
        prompt.contains("You are worker w01"),
        "the recap carries the prompt it failed on: {prompt}"
    );
    assert_eq!(after["stop_reason"], "end_turn", "{after}");
    assert!(
        after["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "board_write" && e["status"] == "completed"),
        "the restarted agent went on with the next step: {after}"
    );
}

#[test]
fn an_agent_that_dies_between_turns_is_restarted_at_once() {
    let org = org(&RESTARTING);
    // The agent ends its first turn and dies half a second later, while its worker waits
    // (for 600 s: no prompt would find it dead before the run ends).
    let t = run_one(
        &org,
        [Step::ExitLater { ms: 500, code: 7 }, step::end_turn()],
        "0.003",
    );
    let died = t
        .iter()
        .position(|l| l["phase"] == "between_turns")
        .unwrap_or_else(|| panic!("no death between turns logged: {t:?}"));
    let error = t[died]["error"].as_str().unwrap();
    assert!(error.contains("exited with status 7"), "{error}");
    let restart = &t[died + 1];
    assert_eq!(restart["restart"], 1, "{t:?}");
    assert_eq!(restart["started"], true, "{t:?}");
    // Restarted after its backoff, not at a later prompt.
    let after_ms = restart["at"].as_i64().unwrap() - t[died]["at"].as_i64().unwrap();
    assert!(after_ms < 5_000, "restarted {after_ms} ms after it died");
}

#[test]
fn an_agent_that_keeps_failing_makes_its_worker_dead_and_general_is_told() {
    let org = org(&[
        ("notices_minutes", "[0.001]"),
        ("agent", "\"acp\""),
        ("agent_command", "[\"sh\", \"-c\", \"exit 3\"]"),
        ("max_restarts", "2"),
        ("restart_backoff_secs", "0.1"),
    ]);
    let dir = &org.dir;
    let out = AgenshRun::new(dir).workers(1).hours("0.01").output();
    // Every worker failed: the run says so and exits 4 (a local failure), after its summary.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("every worker failed (1 of 1)"), "{stderr}");
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["failed_workers"][0]["id"], "w01", "{summary}");
    // Three starts: the first and two restarts, the second one twice as long after.
    let t = turns(dir, "w01");
    let restarts: Vec<&Value> = t.iter().filter(|l| l.get("restart").is_some()).collect();
    assert_eq!(restarts.len(), 2, "{t:?}");
    assert!(restarts.iter().all(|r| r["started"] == false), "{t:?}");

    let hub = HubProcess::start(dir);
    let workers = block_on(hub.admin().workers()).unwrap();
    assert_eq!(workers[0].status.as_str(), "dead");
    let general = block_on(hub.admin().message_history(&agensh_client::MessageFilter {
        with: Some("#general".into()),
        ..Default::default()
    }))
    .unwrap();
    let told = general
        .iter()
        .find(|m| m.from == "w01")
        .unwrap_or_else(|| panic!("#general was not told: {general:?}"));
    assert!(
        told.text.contains("failed 3 times in a row") && told.text.contains("claims"),
        "{}",
        told.text
    );
}

#[test]
fn a_hung_agent_is_restarted_after_the_hang_timeout() {
    let org = org(&[
        ("notices_minutes", "[0.001]"),
        ("idle_timeout_secs", "600"),
        ("max_restarts", "2"),
        ("restart_backoff_secs", "0.1"),
        ("hang_timeout_secs", "2"),
    ]);
    // A step that says nothing for a minute: the agent looks hung after 2 s.
    let scenario = Scenario::new().steps([
        sleep(60000),
        step::board_write("FACT", "awake again"),
        step::end_turn(),
    ]);
    let started = Instant::now();
    let summary = one_worker(&org, &scenario, "0.003");
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "the minute-long step was cut short"
    );
    assert_eq!(
        summary["failed_workers"],
        serde_json::json!([]),
        "{summary}"
    );
    let t = turns(&org.dir, "w01");
    let hung = t
        .iter()
        .find(|l| l.get("error").is_some())
        .unwrap_or_else(|| panic!("no hung turn logged: {t:?}"));
    assert!(
        hung["error"].as_str().unwrap().contains("no sign of life"),
        "{hung}"
    );
    let took = hung["ended"].as_i64().unwrap() - hung["started"].as_i64().unwrap();
    assert!((2_000..10_000).contains(&took), "hung after {took} ms");
    assert!(
        t.iter().any(|l| l["events"]
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e["name"] == "board_write"))),
        "the restarted agent went on after the step it hung in: {t:?}"
    );
}

#[test]
fn a_preset_not_installed_is_named_with_the_command_that_installs_it() {
    let (_tmp, dir) = common::new_org("anything");
    let data = tempfile::tempdir().unwrap();
    let out = agensh()
        .arg("run")
        .arg(&dir)
        .args(["--agent", "gemini", "--listen", "127.0.0.1:0"])
        .env("AGENSH_DATA_DIR", data.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "a local failure");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "gemini (@google/gemini-cli 0.61.0) is not installed — install it with: agensh agents install gemini"
        ),
        "{err}"
    );
    assert!(
        !dir.join("workers").exists(),
        "nothing started before the check"
    );
}

#[test]
fn an_agent_agensh_does_not_know_lists_the_ones_it_does() {
    let (_tmp, dir) = common::new_org("anything");
    let out = agensh()
        .arg("run")
        .arg(&dir)
        .args(["--agent", "claud"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is not an agent agensh knows — use one of builtin, acp, script, claude, codex, copilot, gemini, pi"),
        "{err}"
    );
}

#[test]
fn a_run_killed_mid_turn_and_started_again_never_shows_an_event_twice() {
    let org = org(&RESTARTING);
    let dir = &org.dir;
    // Turn 1 ends at once; turn 2 (woken by a message) is slow, and is where the kill lands.
    let s = org.scenario(&Scenario::new().steps([
        say("ready"),
        step::end_turn(),
        sleep(3000),
        step::end_turn(),
    ]));
    let run = start_run(&org, &s, 1, "1");
    wait_until(Duration::from_secs(60), "the first turn ends", || {
        turns(dir, "w01").iter().any(|t| t["turn"] == 1)
    });
    // A channel post: a normal event, acknowledged only after the turn that carries it.
    org.ok(&["msg", "send", "#general", "wake up: a message to read"]);
    wait_until(
        Duration::from_secs(30),
        "the message is handed to the agent",
        || {
            turn_log(dir, "w01")
                .iter()
                .any(|t| t.get("carrying").is_some())
        },
    );
    // kill -9 of hub and node together, in the middle of the turn that carries the event.
    run.kill_9();
    let before = turn_log(dir, "w01");
    let shown: Vec<i64> = before
        .iter()
        .filter_map(|t| t["carrying"].as_array())
        .flatten()
        .filter_map(Value::as_i64)
        .collect();
    assert!(!shown.is_empty(), "{before:?}");

    start_run(&org, &s, 1, "0.003").finish(Duration::from_secs(90));
    let after: Vec<Value> = turn_log(dir, "w01")
        .into_iter()
        .skip(before.len())
        .collect();
    let restarted = after
        .iter()
        .find(|t| t["restarted"] == true)
        .unwrap_or_else(|| panic!("the restart is logged: {after:?}"));
    let acked: Vec<i64> = restarted["acked_shown"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_i64)
        .collect();
    for seq in &shown {
        assert!(
            acked.contains(seq),
            "{seq} is acknowledged at the restart: {restarted}"
        );
        assert!(
            !after.iter().any(|t| t["carrying"]
                .as_array()
                .is_some_and(|c| c.contains(&Value::from(*seq)))),
            "event {seq} was shown again after the restart: {after:?}"
        );
    }
    let first = after
        .iter()
        .find_map(|t| t["prompt"].as_str())
        .expect("a turn after the restart");
    assert!(
        first.contains("The node running you was restarted"),
        "{first}"
    );
}
