//! `agensh run` with the model gateway, end to end: real processes, the built-in agent
//! talking to the hub's `/model/openai/v1` with its worker's token, the hub to a replay
//! model server (`agensh model replay`) with the key it holds. The usage the run's summary
//! counts per worker is what the server served that worker; the server never sees a worker's
//! token; `[model] gateway = false` gives the agent the key and the endpoint itself.

mod common;

use std::path::Path;

use common::{
    agensh, new_org, run_summary, stderr, wait_until, AgenshRun, OrgDir, Replay, RunProcess,
};
use serde_json::Value;

const KEY_VAR: &str = "AGENSH_TEST_UPSTREAM_KEY";
const KEY: &str = "sk-upstream-for-the-gateway-test";

/// What every replay server of these tests answers.
const DONE: &str = "final_text = \"Done: nothing to do.\"\n";

/// `agensh run DIR` of built-in agents whose model is `replay`'s (`replay-model`).
fn builtin_run(dir: &Path, replay: &Replay) -> AgenshRun {
    AgenshRun::new(dir).args([
        "--agent",
        "builtin",
        "--model-url",
        &replay.url,
        "--model",
        "replay-model",
    ])
}

/// A short run of two built-in workers against a replay server, everything logged (model
/// request bodies included); its JSON summary, what it wrote on stderr and its directory.
fn run(gateway: bool) -> (Value, String, Replay, tempfile::TempDir) {
    let org = OrgDir::builder("Say done; this is a test of the model gateway.")
        .setting_in("run", "workers", "2")
        .setting_in("run", "hours", "0.004")
        .setting_in("run", "stagger_secs", "0.0")
        .setting_in("model", "gateway", &gateway.to_string())
        .init();
    let replay = Replay::start(org.tmp(), DONE);
    let out = builtin_run(&org.dir, &replay)
        .args(["--api-key-env", KEY_VAR, "--log-bodies"])
        .env(KEY_VAR, KEY)
        .env("AGENSH_LOG", "debug")
        .output();
    let stderr = stderr(&out);
    assert!(out.status.success(), "agensh run failed: {stderr}");
    (run_summary(&out), stderr, replay, org.tmp)
}

/// Every file under `dir`, as text.
fn texts_under(dir: &Path) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(texts_under(&p));
        } else if let Ok(bytes) = std::fs::read(&p) {
            out.push((p, String::from_utf8_lossy(&bytes).to_string()));
        }
    }
    out
}

#[test]
fn the_built_in_agent_reaches_its_model_through_the_gateway_and_each_worker_is_counted() {
    let (summary, stderr, replay, tmp) = run(true);
    let requests = replay.requests();
    assert!(!requests.is_empty(), "the model was never asked: {summary}");
    // The log has every request, and bodies, but no key and no token anywhere: not on
    // stderr, not in the organization's logs.
    assert!(stderr.contains("model request"), "{stderr}");
    assert!(stderr.contains("request body"), "{stderr}");
    let dir = tmp.path().join("org");
    let mut secrets = vec![KEY.to_string()];
    for id in ["w01", "w02"] {
        let out = agensh()
            .args(["workers", "token", id, "--dir"])
            .arg(&dir)
            .output()
            .unwrap();
        let token = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(token.len() > 16, "no token for {id}");
        secrets.push(token);
    }
    let logs = texts_under(&dir.join(".agensh/logs"));
    assert!(!logs.is_empty());
    for secret in &secrets {
        assert!(!stderr.contains(secret.as_str()), "a secret is on stderr");
        for (path, text) in &logs {
            assert!(
                !text.contains(secret.as_str()),
                "a secret is in {}",
                path.display()
            );
        }
    }
    for id in ["w01", "w02"] {
        let mine: Vec<&Value> = requests.iter().filter(|q| q["worker"] == id).collect();
        assert!(!mine.is_empty(), "{id} never reached the model: {summary}");
        let served = |field: &str| {
            mine.iter()
                .map(|q| q["usage"][field].as_u64().unwrap_or(0))
                .sum::<u64>()
        };
        let w = summary["workers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["id"] == id)
            .unwrap_or_else(|| panic!("{id} is not in {summary}"));
        let g = &w["gateway"];
        assert_eq!(g["requests"].as_u64(), Some(mine.len() as u64), "{w}");
        assert_eq!(g["input_tokens"].as_u64(), Some(served("input")), "{w}");
        assert_eq!(g["output_tokens"].as_u64(), Some(served("output")), "{w}");
        assert_eq!(
            g["cached_input_tokens"].as_u64(),
            Some(served("cached")),
            "{w}"
        );
    }
    // Every request reached the server with the key the hub holds, none with a token.
    for q in &requests {
        assert_eq!(q["key"], KEY, "{q}");
        assert!(
            q["path"].as_str().unwrap().ends_with("/chat/completions"),
            "{q}"
        );
    }
    let total = &summary["gateway"];
    assert_eq!(total["requests"].as_u64(), Some(requests.len() as u64));
}

#[test]
fn without_the_gateway_the_agent_holds_the_key_and_nothing_is_counted_at_the_hub() {
    let (summary, _, replay, _tmp) = run(false);
    let requests = replay.requests();
    assert!(!requests.is_empty(), "the model was never asked: {summary}");
    for q in &requests {
        assert_eq!(q["key"], KEY, "{q}");
        assert!(q.get("worker").is_none(), "{q}");
    }
    assert_eq!(
        summary["gateway"]["requests"].as_u64(),
        Some(0),
        "{summary}"
    );
}

/// The lines of `worker`'s turn log.
fn log_of(dir: &Path, worker: &str) -> String {
    std::fs::read_to_string(dir.join(".agensh/logs").join(worker).join("turns.jsonl"))
        .unwrap_or_default()
}

/// An organization of `workers` built-in workers that ask their model again a second after
/// each turn, with one budget set: `(section, key, value)`.
fn busy_org(workers: usize, hours: &str, budget: (&str, &str, &str)) -> OrgDir {
    OrgDir::builder("Say done; this is a test of budgets.")
        .setting_in("run", "workers", &workers.to_string())
        .setting_in("run", "hours", hours)
        .setting_in("run", "stagger_secs", "0.0")
        .setting_in("run", "idle_timeout_secs", "1")
        .setting_in(budget.0, budget.1, budget.2)
        .init()
}

fn start(dir: &Path, replay: &Replay) -> RunProcess {
    builtin_run(dir, replay).spawn()
}

fn summary_of(run: RunProcess) -> Value {
    let out = run.output();
    assert!(out.status.success(), "agensh run failed: {}", stderr(&out));
    run_summary(&out)
}

fn gateway_requests(summary: &Value, id: &str) -> u64 {
    summary["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["id"] == id)
        .and_then(|w| w["gateway"]["requests"].as_u64())
        .unwrap_or_else(|| panic!("{id} is not in {summary}"))
}

#[test]
fn a_spent_budget_stops_its_worker_until_it_is_raised_while_the_run_goes_on() {
    let org = busy_org(2, "0.012", ("budget.worker", "requests", "2"));
    let dir = &org.dir;
    let replay = Replay::start(org.tmp(), DONE);
    let child = start(dir, &replay);
    let limit = std::time::Duration::from_secs(30);
    wait_until(limit, "w01 stopped by its budget", || {
        log_of(dir, "w01").contains("\"stopped\"")
    });
    let out = agensh()
        .args(["status", "--dir"])
        .arg(dir)
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(
        status.contains("w01 stopped: w01's request budget"),
        "{status}"
    );
    let out = agensh()
        .args([
            "budget",
            "set",
            "--worker",
            "w01",
            "--requests",
            "100",
            "--dir",
        ])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("w01") && shown.contains("/ 100"), "{shown}");
    wait_until(limit, "w01 going on", || {
        log_of(dir, "w01").contains("\"resumed\"")
    });
    let summary = summary_of(child);
    assert!(gateway_requests(&summary, "w01") > 2, "{summary}");
    assert_eq!(gateway_requests(&summary, "w02"), 2, "{summary}");
    assert!(log_of(dir, "w02").contains("\"stopped\""));
    assert_eq!(
        summary["failed_workers"],
        serde_json::json!([]),
        "{summary}"
    );
}

#[test]
fn the_organizations_budget_ends_the_run_with_its_summary() {
    let org = busy_org(2, "0.05", ("budget.organization", "requests", "4"));
    let dir = &org.dir;
    let replay = Replay::start(org.tmp(), DONE);
    let started = std::time::Instant::now();
    let summary = summary_of(start(dir, &replay));
    // The run was to last three minutes; the budget ended it.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "{summary}"
    );
    let total = summary["gateway"]["requests"].as_u64().unwrap();
    assert!((4..=6).contains(&total), "{summary}");
    for id in ["w01", "w02"] {
        assert!(log_of(dir, id).contains("\"organization\":true"), "{id}");
    }
}

#[test]
fn a_run_whose_upstream_key_is_not_set_stops_before_anything_starts() {
    let (_tmp, dir) = new_org("anything");
    let path = dir.join("agensh.toml");
    let text = std::fs::read_to_string(&path).unwrap()
        + "\n[[gateway.upstreams]]\nname = \"vendor\"\nurl = \"http://127.0.0.1:9/v1\"\napi_key_env = \"AGENSH_TEST_KEY_NOBODY_SETS\"\n";
    std::fs::write(&path, text).unwrap();
    let out = agensh()
        .arg("run")
        .arg(&dir)
        .args([
            "--agent",
            "builtin",
            "--model-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
        ])
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"vendor\" reads its key from AGENSH_TEST_KEY_NOBODY_SETS, which is not set"),
        "{err}"
    );
    assert!(!dir.join("workers").exists(), "no worker started");
    // The organization's state stays readable without the key.
    let out = agensh()
        .args(["status", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
