//! The real-model tier: `agensh run` with the built-in agent on the real local model
//! (Qwen2.5-Coder 0.5B served by agensh itself), two workers, a tiny goal, a short time
//! limit. It asserts what the harness guarantees — real turns, organization tools called,
//! work committed to each worker's branch, a clean end at the time limit — not the model's
//! skill.
//!
//! It needs the model installed (`agensh model install --size 0.5b`, about 480 MB) and a
//! few minutes of CPU, so it is ignored by a plain `cargo test`; `scripts/test` installs
//! the model and runs this tier with `--ignored`.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agensh_store::{SqliteStore, Store};
use common::{agensh, git};
use serde_json::Value;

/// The goal, in the shape small mode (the local model's default) teaches: claim a part,
/// write it, ship it. Small mode's board takes no OBSERVED record, so the part's claim is
/// each worker's board record.
const GOAL: &str = "A tiny warm-up: each worker has one part of its own, named after its \
worker id. (1) Claim your part with the claim tool (label: your worker id; paths: a file \
named after your worker id, like w07.txt for worker w07); (2) write that file with one line \
saying hello; (3) call ship with a short title; (4) end your turn.";

/// The organization tools small mode offers.
const ORG_TOOLS: [&str; 3] = ["claim", "ship", "board_write"];

/// Set on the run under test and inherited by everything it starts, so the processes it
/// leaves behind can be told apart from other model servers on the machine.
const MARK: &str = "AGENSH_LOCAL_MODEL_TIER_RUN";

/// Ids of the model server processes (python processes that load xllamacpp) started by the
/// run marked with `mark`.
fn model_servers(mark: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains("xllamacpp")
            && String::from_utf8_lossy(&environ).contains(&format!("{MARK}={mark}"))
        {
            found.push(pid);
        }
    }
    found
}

fn lines(path: &Path) -> Vec<Value> {
    common::json_lines(path)
}

#[test]
#[ignore = "needs the local model: scripts/test installs it and runs this tier with --ignored"]
fn two_workers_on_the_local_model_take_real_turns_and_stop_at_the_time_limit() {
    let mut tmp = tempfile::tempdir().unwrap();
    // AGENSH_KEEP_TEST_DIR=1 keeps the organization (logs, store, checkouts) to read after.
    if std::env::var_os("AGENSH_KEEP_TEST_DIR").is_some() {
        tmp.disable_cleanup(true);
        eprintln!("keeping {}", tmp.path().display());
    }
    let dir = tmp.path().join("org");
    std::fs::create_dir_all(tmp.path().join("seed")).unwrap();
    std::fs::write(tmp.path().join("seed/README.md"), "A warm-up repository.\n").unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("agensh.toml"),
        format!(
            "[organization]\ngoal = {goal}\nseed = \"../seed\"\n\n\
             [run]\nworkers = 2\nagent = \"builtin\"\nhours = 0.06\nstagger_secs = 1.0\n\
             idle_timeout_secs = 15\nnotices_minutes = [1.0]\n\n\
             [model]\nlocal_size = \"0.5b\"\ntemperature = 0.0\nmax_steps_per_turn = 8\n\
             context_tokens = 6144\nmax_reply_tokens = 400\ncommand_timeout_secs = 30\n",
            goal = toml_string(GOAL)
        ),
    )
    .unwrap();
    let mark = format!(
        "{}-{}",
        std::process::id(),
        agensh_domain::time::unix_ms(std::time::SystemTime::now())
    );

    let started = Instant::now();
    let child = agensh()
        .args([
            "run",
            dir.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--json",
        ])
        .env(MARK, &mark)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("agensh run starts");
    let pid = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
    // 3.6 minutes of run, plus installing nothing (done before), starting the server and
    // the last turn finishing.
    let limit = Duration::from_secs(600);
    // The run's own model server is seen while it runs (so finding none at the end means
    // it was stopped, not that the search misses it).
    let mut seen_server = false;
    let mut last_look = Instant::now();
    while !waiter.is_finished() {
        if started.elapsed() > limit {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("agensh run did not end within {limit:?}");
        }
        if !seen_server && last_look.elapsed() > Duration::from_secs(2) {
            seen_server = !model_servers(&mark).is_empty();
            last_look = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(seen_server, "the run's model server was never seen");
    let out = waiter.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "run failed: {stderr}");
    let summary: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("summary is not JSON ({e}): {stderr}"));
    assert!(
        summary["failed_workers"].as_array().unwrap().is_empty(),
        "{summary}"
    );
    // The run lasted about its time limit (0.06 h = 216 s): it neither ended early nor
    // overran by more than one turn's worth.
    let secs = summary["seconds"].as_f64().unwrap();
    assert!((200.0..500.0).contains(&secs), "the run took {secs} s");
    // Usage counted from the endpoint.
    assert!(
        summary["input_tokens"].as_u64().unwrap() > 1000,
        "{summary}"
    );
    assert!(summary["output_tokens"].as_u64().unwrap() > 10, "{summary}");

    let workers = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let store = SqliteStore::open(&dir.join(".agensh/store.sqlite")).unwrap();
        store.list_workers(0).await.unwrap()
    });
    assert_eq!(workers.len(), 2);
    // The board, read directly (the hub has stopped with the run).
    let authors = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async { board_authors(&dir).await });
    for w in &workers {
        // Real turns, logged with the model's usage.
        let turns = lines(&dir.join(".agensh/logs").join(&w.id).join("turns.jsonl"));
        assert!(!turns.is_empty(), "{} ran no turn", w.id);
        // Every worker stopped at the end.
        assert_eq!(w.status.as_str(), "stopped", "{}", w.id);
        // What follows holds whatever the model chose to do (it must not depend on its
        // luck): what it did is printed, and each of its actions must have had the effect
        // the harness promises.
        let log = lines(&dir.join(".agensh/logs").join(&w.id).join("builtin.jsonl"));
        let offered: Vec<&str> = log
            .iter()
            .find(|l| l["event"] == "start")
            .and_then(|l| l["tools"].as_array())
            .map(|t| t.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for tool in ["claim", "ship", "board_write", "write_file", "run"] {
            assert!(
                offered.contains(&tool),
                "{} was not offered {tool}: {offered:?}",
                w.id
            );
        }
        let calls: Vec<(&str, bool, &str)> = log
            .iter()
            .filter(|l| l["event"] == "tool")
            .map(|l| {
                (
                    l["name"].as_str().unwrap_or(""),
                    l["ok"].as_bool().unwrap_or(false),
                    l["result"].as_str().unwrap_or(""),
                )
            })
            .collect();
        eprintln!(
            "{}: {} tool call(s): {:?}",
            w.id,
            calls.len(),
            calls
                .iter()
                .map(|(n, ok, _)| format!("{n}{}", if *ok { "" } else { " (refused)" }))
                .collect::<Vec<_>>()
        );
        // Every organization tool call reached the hub and was answered by it.
        for (name, _, result) in calls.iter().filter(|(n, _, _)| ORG_TOOLS.contains(n)) {
            for broken in [
                "not connected",
                "unreachable",
                "cannot reach",
                "connection refused",
            ] {
                assert!(
                    !result.contains(broken),
                    "{}'s {name} did not reach the hub: {result}",
                    w.id
                );
            }
        }
        // An organization tool call the hub took is on the board under the worker's id.
        if calls.iter().any(|(n, ok, _)| *ok && ORG_TOOLS.contains(n)) {
            assert!(
                authors.contains(&w.id),
                "{}'s organization tool calls succeeded but the board has no record by it (authors: {authors:?})",
                w.id
            );
        }
        // A file the model wrote is committed by the worker, at the end of its turn or by
        // ship: on its branch, or merged into main (then the branch is not ahead of it).
        if calls.iter().any(|(n, ok, _)| *ok && *n == "write_file") {
            let checkout = dir.join("workers").join(&w.id);
            let mine = git(
                &checkout,
                &[
                    "log",
                    "--all",
                    &format!("--author=^{} <", w.id),
                    "--format=%h",
                ],
            );
            assert!(
                !mine.trim().is_empty(),
                "{} wrote a file but committed nothing (branch {})",
                w.id,
                git(&checkout, &["branch", "--show-current"])
            );
        }
    }
    // No model server and no agent process is left behind.
    std::thread::sleep(Duration::from_secs(1));
    let left = model_servers(&mark);
    assert!(left.is_empty(), "model server processes left: {left:?}");
}

/// Authors of every board record in the organization's store.
async fn board_authors(dir: &Path) -> Vec<String> {
    let store = SqliteStore::open(&dir.join(".agensh/store.sqlite")).unwrap();
    let mut authors = Vec::new();
    for kind in ["OBSERVED", "FACT", "FAIL", "CLAIM", "PATCH_SUMMARY"] {
        let q = agensh_domain::query::parse(&format!("kind:{kind}")).unwrap();
        for r in store.grep(&q, None, 1000).await.unwrap() {
            authors.push(r.author.clone());
        }
    }
    authors.sort();
    authors.dedup();
    authors
}

fn toml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}
