//! Parking end to end: a worker whose turns change nothing stops getting continue prompts
//! every `run.idle_timeout_secs`, shows `parked` with the reason, sleeps through board
//! records and wakes at once on a direct message or a new issue (a real `agensh run` with
//! one scripted ACP agent process).

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{agensh, finish, json_lines, new_org, run_in, set_setting, wait_until};
use serde_json::Value;

fn turns(dir: &std::path::Path) -> Vec<Value> {
    json_lines(&dir.join(".agensh/logs/w01/turns.jsonl"))
        .into_iter()
        .filter(|l| l.get("turn").is_some())
        .collect()
}

fn ok(dir: &std::path::Path, args: &[&str]) -> String {
    let out = run_in(dir, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_worker_whose_turns_change_nothing_is_parked_sleeps_through_board_records_and_wakes_on_news() {
    let (tmp, dir) = new_org("nothing to do");
    set_setting(&dir, "idle_timeout_secs", "2");
    let scenario = tmp.path().join("scenario.toml");
    std::fs::write(
        &scenario,
        "[[step]]\naction = \"say\"\ntext = \"looked around: nothing to claim\"\n[[step]]\naction = \"end_turn\"\n",
    )
    .unwrap();
    let run = agensh()
        .args([
            "run",
            dir.to_str().unwrap(),
            "--agent",
            "script",
            "--scenario",
        ])
        .arg(&scenario)
        .args(["--listen", "127.0.0.1:0", "--json", "--workers", "1"])
        .args(["--hours", "0.014"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("agensh run starts");

    // The launch turn and one continue prompt changed nothing: parked.
    wait_until(Duration::from_secs(30), "the worker parked", || {
        json_lines(&dir.join(".agensh/logs/w01/turns.jsonl"))
            .iter()
            .any(|l| l.get("parked").is_some())
    });
    assert_eq!(turns(&dir).len(), 2);
    wait_until(Duration::from_secs(5), "the parked status", || {
        let s: Value = serde_json::from_str(&ok(&dir, &["status", "--json"])).unwrap();
        s["workers"][0]["status"] == "parked"
    });
    let s: Value = serde_json::from_str(&ok(&dir, &["status", "--json"])).unwrap();
    let step = s["workers"][0]["progress"]["step"].as_str().unwrap_or("");
    assert!(
        step.starts_with("parked: its last 2 turns changed nothing"),
        "{s}"
    );

    // A board record does not wake it; its idle timeout (2 s) no longer brings a prompt.
    ok(&dir, &["board", "post", "FACT", "the build takes 40 s"]);
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        turns(&dir).len(),
        2,
        "woken by a board record or a continue prompt"
    );

    // A direct message wakes it at once, with the held record in the same prompt.
    ok(&dir, &["msg", "send", "w01", "please review PR 3"]);
    wait_until(Duration::from_secs(10), "a turn for the DM", || {
        turns(&dir).len() == 3
    });
    let prompt = turns(&dir)[2]["prompt"].as_str().unwrap().to_string();
    assert!(prompt.contains("please review PR 3"), "{prompt}");
    assert!(prompt.contains("the build takes 40 s"), "{prompt}");

    // So does a new issue.
    ok(&dir, &["issue", "open", "Add a changelog"]);
    wait_until(Duration::from_secs(10), "a turn for the issue", || {
        turns(&dir).len() == 4
    });
    let prompt = turns(&dir)[3]["prompt"].as_str().unwrap().to_string();
    assert!(prompt.contains("Add a changelog"), "{prompt}");

    finish(run, Duration::from_secs(90));
    // No continue prompt after it was parked: 2 turns before, 2 for the news.
    let all = turns(&dir);
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
