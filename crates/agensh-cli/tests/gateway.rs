//! `agensh run` with the model gateway, end to end: real processes, the built-in agent
//! talking to the hub's `/model/openai/v1` with its worker's token, the hub to a replay
//! model server (`agensh model replay`) with the key it holds. The usage the run's summary
//! counts per worker is what the server served that worker; the server never sees a worker's
//! token; `[model] gateway = false` gives the agent the key and the endpoint itself.

mod common;

use std::path::Path;
use std::process::Stdio;

use common::{agensh, new_org, Replay};
use serde_json::Value;

const KEY_VAR: &str = "AGENSH_TEST_UPSTREAM_KEY";
const KEY: &str = "sk-upstream-for-the-gateway-test";

/// Sets `key = value` in the `[section]` table of the organization's agensh.toml.
fn set(dir: &Path, section: &str, key: &str, value: &str) {
    let path = dir.join("agensh.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let at = text.find(&format!("[{section}]\n")).expect("the section");
    let line = text[at..]
        .find(&format!("\n{key} = "))
        .map(|i| at + i + 1)
        .expect("the key");
    let end = line + text[line..].find('\n').unwrap();
    let mut text = text;
    text.replace_range(line..end, &format!("{key} = {value}"));
    std::fs::write(path, text).unwrap();
}

/// A short run of two built-in workers against a replay server; its JSON summary.
fn run(gateway: bool) -> (Value, Replay, tempfile::TempDir) {
    let (tmp, dir) = new_org("Say done; this is a test of the model gateway.");
    set(&dir, "run", "workers", "2");
    set(&dir, "run", "hours", "0.004");
    set(&dir, "run", "stagger_secs", "0.0");
    set(&dir, "model", "gateway", &gateway.to_string());
    let replay = Replay::start(tmp.path(), "final_text = \"Done: nothing to do.\"\n");
    let out = agensh()
        .arg("run")
        .arg(&dir)
        .args(["--agent", "builtin", "--model-url", &replay.url])
        .args(["--model", "replay-model", "--api-key-env", KEY_VAR])
        .args(["--listen", "127.0.0.1:0", "--json"])
        .env(KEY_VAR, KEY)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("agensh run runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "agensh run failed: {stderr}");
    let summary: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON summary ({e}): {stderr}"));
    (summary, replay, tmp)
}

#[test]
fn the_built_in_agent_reaches_its_model_through_the_gateway_and_each_worker_is_counted() {
    let (summary, replay, _tmp) = run(true);
    let requests = replay.requests();
    assert!(!requests.is_empty(), "the model was never asked: {summary}");
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
    let (summary, replay, _tmp) = run(false);
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
