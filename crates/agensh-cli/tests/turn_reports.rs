//! The node reports each finished turn to the hub, and the hub serves them: scripted
//! workers run by a real `agensh node` against a real `agensh hub` process, then
//! `GET /api/v1/workers/w01/turns` has their turns — prompts, tool calls, the events each
//! prompt carried — matching the node's own turn log.

mod common;

use common::scenarios::two_parts_each_shipped;
use common::{block_on, finished_turns, run_node, HubProcess, OrgDir};
use serde_json::Value;

#[test]
fn a_nodes_turns_reach_the_hub_with_their_prompts_tool_calls_and_events() {
    let org = OrgDir::builder("implement parts p1 and p2")
        .settings(&[("notices_minutes", "[0.001]"), ("stagger_secs", "0")])
        .init();
    let hub = HubProcess::start(&org.dir);
    org.ok(&["workers", "add", "2"]);
    let scenario = org.scenario(&two_parts_each_shipped("assert True\n"));
    // Two workers for about five seconds: each claims, writes, pushes and merges its part
    // in its first turn, and is then told of the other's work in the next.
    run_node(&org.dir, &hub, 2, &scenario, "0.0015");

    // As the dashboard reads them: plain HTTP with the admin token, newest first.
    let get = |path: &str| -> Value {
        block_on(async {
            let r = reqwest::Client::new()
                .get(format!("{}{path}", hub.info.url))
                .bearer_auth(&hub.info.admin_token)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 200);
            r.json().await.unwrap()
        })
    };
    let turns = get("/api/v1/workers/w01/turns?limit=50");
    let turns = turns.as_array().expect("an array of turns");
    assert!(
        turns.len() >= 2,
        "w01 reported {} turns: {turns:?}",
        turns.len()
    );
    let numbers: Vec<u64> = turns.iter().map(|t| t["turn"].as_u64().unwrap()).collect();
    let mut newest_first = numbers.clone();
    newest_first.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(numbers, newest_first, "newest first");

    // Every finished turn of the node's log is at the hub, as the log has it.
    let logged = finished_turns(&org.dir, "w01");
    assert_eq!(
        logged.len(),
        turns.len(),
        "one report per logged turn: {numbers:?}"
    );
    for entry in &logged {
        let n = entry["turn"].as_u64().unwrap();
        let t = turns
            .iter()
            .find(|t| t["turn"] == n)
            .unwrap_or_else(|| panic!("turn {n} not at the hub"));
        assert_eq!(t["prompt"], entry["prompt"], "turn {n}'s prompt");
        assert_eq!(t["stop_reason"], entry["stop_reason"]);
        assert_eq!(t["started_at"], entry["started"]);
        let carried: Vec<i64> = entry["carried"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["seq"].as_i64().unwrap())
            .collect();
        let events: Vec<i64> = t["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_i64().unwrap())
            .collect();
        assert_eq!(events, carried, "turn {n}'s events");
        assert_eq!(t["restarts"], 0);
    }

    // The first turn: the launch prompt, and the tools of the scenario in order.
    let first = turns.iter().find(|t| t["turn"] == 1).expect("turn 1");
    assert!(
        first["prompt"].as_str().unwrap().contains("w01"),
        "{}",
        first["prompt"]
    );
    assert_eq!(first["events"], serde_json::json!([]));
    let calls: Vec<(&str, &str, &str)> = first["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["title"].as_str().unwrap(),
                c["status"].as_str().unwrap(),
            )
        })
        .collect();
    let names: Vec<&str> = calls.iter().map(|c| c.0).collect();
    let at = |name: &str| {
        names
            .iter()
            .position(|n| *n == name)
            .unwrap_or_else(|| panic!("no {name} in {calls:?}"))
    };
    assert!(at("claim") < at("pr_merge"), "{calls:?}");
    assert!(
        calls
            .iter()
            .any(|(n, t, s)| *n == "execute" && t.starts_with("git push") && *s == "completed"),
        "the push, named by its kind and titled: {calls:?}"
    );
    assert!(
        calls
            .iter()
            .filter(|c| c.0 == "pr_merge")
            .all(|c| c.2 == "completed"),
        "{calls:?}"
    );
    // The last action is the last call as the agent titled it.
    let (name, title, _) = calls.last().expect("tool calls");
    let last = if title.is_empty() { name } else { title };
    assert_eq!(first["last_action"], *last, "{calls:?}");

    // A later turn carried the other worker's news: its events were delivered.
    let told = turns
        .iter()
        .find(|t| !t["events"].as_array().unwrap().is_empty())
        .unwrap_or_else(|| panic!("no turn of w01 carried events: {turns:?}"));
    assert!(
        told["prompt"]
            .as_str()
            .unwrap()
            .starts_with("While you were working"),
        "{}",
        told["prompt"]
    );
    // w02's turns are its own.
    let w02 = get("/api/v1/workers/w02/turns");
    assert!(!w02.as_array().unwrap().is_empty());
}
