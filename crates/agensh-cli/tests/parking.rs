//! Parking end to end: a worker whose turns change nothing stops getting continue prompts
//! every `run.idle_timeout_secs`, shows `parked` with the reason, sleeps through board
//! records and wakes at once on a direct message or a new issue (a real `agensh run` with
//! one scripted ACP agent process).

mod common;

use std::time::Duration;

use common::scenarios::{say, step, Scenario};
use common::{finished_turns, ok_in as ok, turn_log, wait_until, AgenshRun, OrgDir};
use serde_json::Value;

fn turns(dir: &std::path::Path) -> Vec<Value> {
    finished_turns(dir, "w01")
}

#[test]
fn a_worker_whose_turns_change_nothing_is_parked_sleeps_through_board_records_and_wakes_on_news() {
    let org = OrgDir::builder("nothing to do")
        .setting("idle_timeout_secs", "2")
        .init();
    let dir = &org.dir;
    let scenario = org.scenario(
        &Scenario::new()
            .step(say("looked around: nothing to claim"))
            .step(step::end_turn()),
    );
    let run = AgenshRun::script(dir, &scenario)
        .workers(1)
        .hours("0.014")
        .spawn();

    // The launch turn and one continue prompt changed nothing: parked.
    wait_until(Duration::from_secs(30), "the worker parked", || {
        turn_log(dir, "w01")
            .iter()
            .any(|l| l.get("parked").is_some())
    });
    assert_eq!(turns(dir).len(), 2);
    wait_until(Duration::from_secs(5), "the parked status", || {
        let s: Value = serde_json::from_str(&ok(dir, &["status", "--json"])).unwrap();
        s["workers"][0]["status"] == "parked"
    });
    let s: Value = serde_json::from_str(&ok(dir, &["status", "--json"])).unwrap();
    let step = s["workers"][0]["progress"]["step"].as_str().unwrap_or("");
    assert!(
        step.starts_with("parked: its last 2 turns changed nothing"),
        "{s}"
    );

    // A board record does not wake it; its idle timeout (2 s) no longer brings a prompt.
    ok(dir, &["board", "post", "FACT", "the build takes 40 s"]);
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        turns(dir).len(),
        2,
        "woken by a board record or a continue prompt"
    );

    // A direct message wakes it at once, with the held record in the same prompt.
    ok(dir, &["msg", "send", "w01", "please review PR 3"]);
    wait_until(Duration::from_secs(10), "a turn for the DM", || {
        turns(dir).len() == 3
    });
    let prompt = turns(dir)[2]["prompt"].as_str().unwrap().to_string();
    assert!(prompt.contains("please review PR 3"), "{prompt}");
    assert!(prompt.contains("the build takes 40 s"), "{prompt}");

    // So does a new issue.
    ok(dir, &["issue", "open", "Add a changelog"]);
    wait_until(Duration::from_secs(10), "a turn for the issue", || {
        turns(dir).len() == 4
    });
    let prompt = turns(dir)[3]["prompt"].as_str().unwrap().to_string();
    assert!(prompt.contains("Add a changelog"), "{prompt}");

    run.finish(Duration::from_secs(90));
    // No continue prompt after it was parked: 2 turns before, 2 for the news.
    let all = turns(dir);
    assert_eq!(all.len(), 4, "{all:?}");
    for t in &all[2..] {
        assert!(
            t["prompt"]
                .as_str()
                .unwrap()
                .starts_with("While you were working"),
            "{t}"
        );
    }
}
