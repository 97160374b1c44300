//! The real agent CLIs through their presets (`agensh run --agent NAME`), against the replay
//! model server on 127.0.0.1: each preset's worker runs a shell command in its checkout
//! (one that leaves a detached background job behind) and posts a board record over MCP;
//! the usage counted is what the replay server served; after the run no process of the
//! agent is left, the detached job included. A preset busy in a long command is
//! interrupted by a direct message that waited past `run.interrupt_after_secs`, and its next
//! model request carries the message.
//!
//! These need the CLIs installed (`agensh agents install`, a few hundred MB from the npm
//! registry), so a plain `cargo test` skips them; `scripts/test` installs them and runs
//! this tier with `--ignored`, inside a network namespace with loopback only where the
//! machine allows one.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::Value;

use common::{agensh, new_org, wait_until, Replay};

/// No `[[run.agents]]` groups: every worker runs the `--agent` preset.
const NO_GROUPS: &str = "";

/// The scenario: turn 1 runs a shell command (with a detached job that sleeps `SLEEP`
/// seconds, a number no other process uses) and posts a FACT; turn 2 (the deadline
/// notice) runs another command. Every answer's usage is fixed.
fn scenario(sleep: u32) -> String {
    let shell = |cmd: &str| {
        let q = toml_string(cmd);
        format!(
            r#"{{ any = [
    {{ name = "Bash", args = {{ command = {q}, description = "probe" }} }},
    {{ name = "run_shell_command", args = {{ command = {q}, description = "probe" }} }},
    {{ name = "exec_command", args = {{ cmd = {q} }} }},
    {{ name = "shell_command", args = {{ command = {q} }} }},
    {{ name = "shell", args = {{ command = ["bash", "-lc", {q}] }} }},
    {{ name = "bash", args = {{ command = {q}, description = "probe", mode = "sync", initial_wait = 10 }} }},
  ] }}"#
        )
    };
    let first = shell(&format!(
        "setsid sh -c 'sleep {sleep}' >/dev/null 2>&1 & echo hi > probe.txt; echo started"
    ));
    let second = shell("echo two >> probe.txt");
    format!(
        r#"side_text = "ok"
final_text = "Nothing more to do."

[[step]]
text = "Running a command."
tool_calls = [ {first} ]
usage = {{ input = 1000, output = 10, cached = 400 }}

[[step]]
text = "Posting a fact."
tool_calls = [ {{ name = "board_write", args = {{ kind = "FACT", text = "probe from the replay model" }} }} ]
usage = {{ input = 2000, output = 20, cached = 800 }}

[[step]]
text = "Turn one done."
usage = {{ input = 3000, output = 30, cached = 1200 }}

[[step]]
text = "Second turn."
tool_calls = [ {second} ]
usage = {{ input = 4000, output = 40, cached = 1600 }}

[[step]]
text = "Turn two done."
usage = {{ input = 5000, output = 50, cached = 2000 }}
"#
    )
}

fn toml_string(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// Processes whose environment carries a mark of the run `pid` (`AGENSH_AGENT_RUN=<worker>.<pid>.…`).
fn marked_by(pid: u32) -> Vec<String> {
    let needle = format!(".{pid}.");
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        let hit = env.split(|b| *b == 0).any(|v| {
            let v = String::from_utf8_lossy(v);
            v.starts_with("AGENSH_AGENT_RUN=") && v.contains(&needle)
        });
        if hit {
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            found.push(String::from_utf8_lossy(&cmd).replace('\0', " "));
        }
    }
    found
}

/// Processes whose command line holds `text`.
fn running(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(text) && !cmd.contains("agents-") {
            found.push(cmd);
        }
    }
    found
}

/// Sets `key = value` in the `[run]` table of the organization's agensh.toml.
fn set_run(dir: &Path, lines: &[(&str, &str)]) {
    let path = dir.join("agensh.toml");
    let mut text = std::fs::read_to_string(&path).unwrap();
    for (key, value) in lines {
        let prefix = format!("{key} = ");
        let line = format!("{key} = {value}");
        match text.lines().find(|l| l.starts_with(&prefix)) {
            Some(old) => text = text.replacen(old, &line, 1),
            None => text = text.replacen("[run]\n", &format!("[run]\n{line}\n"), 1),
        }
    }
    std::fs::write(path, text).unwrap();
}

/// What one `agensh run` of a preset showed.
struct Ran {
    summary: Value,
    replay: Replay,
    dir: PathBuf,
    _tmp: tempfile::TempDir,
}

/// Runs `agents` (one preset name per worker, or a `[[run.agents]]` table) for a short run
/// against a replay server, and checks what every preset must do.
fn run_org(workers: usize, agent: &str, extra_toml: &str, sleep: u32) -> Ran {
    let (mut tmp, dir) = new_org("Follow the model's lead; this is a test of the agent presets.");
    // AGENSH_KEEP_TEST_DIR=1 keeps the organization (logs, agent homes, checkouts).
    if std::env::var_os("AGENSH_KEEP_TEST_DIR").is_some() {
        tmp.disable_cleanup(true);
        eprintln!("keeping {}", tmp.path().display());
    }
    set_run(
        &dir,
        &[
            ("workers", &workers.to_string()),
            ("hours", "0.025"),
            ("stagger_secs", "0.0"),
            ("notices_minutes", "[0.5]"),
        ],
    );
    if !extra_toml.is_empty() {
        let path = dir.join("agensh.toml");
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(extra_toml);
        std::fs::write(path, text).unwrap();
    }
    let replay = Replay::start(tmp.path(), &scenario(sleep));
    let child = agensh()
        .arg("run")
        .arg(&dir)
        .args([
            "--agent",
            agent,
            "--model-url",
            &replay.url,
            "--model",
            "replay-model",
        ])
        .args(["--listen", "127.0.0.1:0", "--json"])
        .env("AGENSH_TEST_KEY_A", "key-a")
        .env("AGENSH_TEST_KEY_B", "key-b")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("agensh run starts");
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "agensh run failed: {stderr}");
    let summary: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON summary ({e}): {stderr}"));
    assert_eq!(
        summary["failed_workers"],
        serde_json::json!([]),
        "{summary}\n{stderr}"
    );
    // Nothing the agents started is left, the detached job included.
    let left = marked_by(pid);
    assert!(left.is_empty(), "processes left after the run: {left:?}");
    let sleeping = running(&format!("sleep {sleep}"));
    assert!(
        sleeping.is_empty(),
        "the detached job is left: {sleeping:?}"
    );
    Ran {
        summary,
        replay,
        dir,
        _tmp: tmp,
    }
}

/// The worker `id` ran the shell command in its checkout and posted its FACT as itself
/// (the hub's answer, which names the author, reached the model).
fn check_worker_acted(r: &Ran, id: &str) {
    let probe = r.dir.join("workers").join(id).join("probe.txt");
    let text = std::fs::read_to_string(&probe)
        .unwrap_or_else(|e| panic!("{id} ran no shell command ({e}): {}", r.summary));
    assert!(text.starts_with("hi\n"), "{text:?}");
    let posted = format!("[{id}/FACT");
    let seen = r
        .replay
        .requests()
        .iter()
        .any(|q| q["body"].to_string().contains(&posted));
    assert!(seen, "no model request shows the hub's answer `{posted} …`");
    // Nothing the agent wrote for itself is in the checkout's git status.
    let status = std::process::Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=all"])
        .current_dir(r.dir.join("workers").join(id))
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&status.stdout);
    for line in status.lines() {
        assert!(
            line.ends_with("probe.txt"),
            "{id}'s checkout holds files of the agent's own: {status}"
        );
    }
}

/// The worker's counted usage. Every request reached the replay server through the hub's
/// gateway, for this worker, with the upstream's key `key` (empty: none), never the
/// worker's token; the gateway counted exactly what the server served the worker; and the
/// agent's own report (when it makes one) counts the requests of its turns exactly.
fn check_usage(r: &Ran, id: &str, key: &str, reported: bool) {
    let w = r.summary["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["id"] == id)
        .unwrap_or_else(|| panic!("{id} is not in the summary: {}", r.summary));
    let turns = w["turns"].as_u64().unwrap();
    assert!(turns >= 1, "{w}");
    let mine: Vec<Value> = r
        .replay
        .requests()
        .into_iter()
        .filter(|q| q["worker"] == id)
        .collect();
    assert!(!mine.is_empty(), "the replay server served {id} nothing");
    for q in &mine {
        assert_eq!(
            q["key"], key,
            "{id}'s request reached the server with another key: {q}"
        );
    }
    let sum = |tools_only: bool, field: &str| {
        mine.iter()
            .filter(|q| !tools_only || q["tools"].as_array().is_some_and(|t| !t.is_empty()))
            .map(|q| q["usage"][field].as_u64().unwrap_or(0))
            .sum::<u64>()
    };
    let g = &w["gateway"];
    assert_eq!(
        (
            g["requests"].as_u64(),
            g["input_tokens"].as_u64(),
            g["output_tokens"].as_u64()
        ),
        (
            Some(mine.len() as u64),
            Some(sum(false, "input")),
            Some(sum(false, "output"))
        ),
        "the gateway counted {w}"
    );
    if !reported {
        assert_eq!(w["turns_without_usage"].as_u64(), Some(turns), "{w}");
        assert_eq!(w["input_tokens"].as_u64(), Some(0), "{w}");
        return;
    }
    // Requests without tools (titles, summaries) are the CLI's own; agents report the
    // tokens of their turns.
    let (input, output) = (sum(true, "input"), sum(true, "output"));
    assert_eq!(
        (w["input_tokens"].as_u64(), w["output_tokens"].as_u64()),
        (Some(input), Some(output)),
        "counted {w} against served in {input} out {output}"
    );
    assert_eq!(w["turns_without_usage"].as_u64(), Some(0), "{w}");
}

#[test]
#[ignore = "needs the agent CLIs: scripts/test installs them (agensh agents install) and runs this tier with --ignored"]
fn claude_runs_shell_and_board_tools_and_leaves_nothing() {
    let r = run_org(1, "claude", NO_GROUPS, 7311);
    check_worker_acted(&r, "w01");
    check_usage(&r, "w01", "", true);
}

#[test]
#[ignore = "needs the agent CLIs: scripts/test installs them (agensh agents install) and runs this tier with --ignored"]
fn codex_runs_shell_and_board_tools_and_leaves_nothing() {
    let r = run_org(1, "codex", NO_GROUPS, 7312);
    check_worker_acted(&r, "w01");
    check_usage(&r, "w01", "", false);
}

#[test]
#[ignore = "needs the agent CLIs: scripts/test installs them (agensh agents install) and runs this tier with --ignored"]
fn copilot_runs_shell_and_board_tools_and_leaves_nothing() {
    let r = run_org(1, "copilot", NO_GROUPS, 7313);
    check_worker_acted(&r, "w01");
    check_usage(&r, "w01", "", true);
}

#[test]
#[ignore = "needs the agent CLIs: scripts/test installs them (agensh agents install) and runs this tier with --ignored"]
fn gemini_runs_shell_and_board_tools_and_leaves_nothing() {
    let r = run_org(1, "gemini", NO_GROUPS, 7314);
    check_worker_acted(&r, "w01");
    check_usage(&r, "w01", "", true);
}

#[test]
#[ignore = "needs the agent CLIs: scripts/test installs them (agensh agents install) and runs this tier with --ignored"]
fn pi_through_its_rpc_mode_runs_shell_and_board_tools_and_leaves_nothing() {
    let r = run_org(1, "pi", NO_GROUPS, 7316);
    check_worker_acted(&r, "w01");
    check_usage(&r, "w01", "", true);
}

#[test]
#[ignore = "needs the agent CLIs: scripts/test installs them (agensh agents install) and runs this tier with --ignored"]
fn a_mixed_organization_runs_two_presets_side_by_side() {
    let groups = r#"
[[run.agents]]
workers = "w01"
agent = "gemini"
api_key_env = "AGENSH_TEST_KEY_A"

[[run.agents]]
workers = "w02"
agent = "copilot"
api_key_env = "AGENSH_TEST_KEY_B"
"#;
    let r = run_org(2, "gemini", groups, 7315);
    check_worker_acted(&r, "w01");
    check_worker_acted(&r, "w02");
    check_usage(&r, "w01", "key-a", true);
    check_usage(&r, "w02", "key-b", true);
}

#[test]
#[ignore = "needs the agent CLIs: scripts/test installs them (agensh agents install) and runs this tier with --ignored"]
fn a_model_endpoint_that_cannot_be_reached_is_said_before_any_agent_starts() {
    let (_tmp, dir) = new_org("anything");
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/v1");
    let out = agensh()
        .arg("run")
        .arg(&dir)
        .args([
            "--agent",
            "claude",
            "--model-url",
            &url,
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("the model endpoint {url} cannot be reached")),
        "{err}"
    );
    assert!(!dir.join("workers").exists(), "no worker started");
}

#[test]
#[ignore = "needs the agent CLIs: scripts/test installs them (agensh agents install) and runs this tier with --ignored"]
fn a_model_key_refused_is_a_failed_turn_with_the_cause() {
    let (tmp, dir) = new_org("anything");
    set_run(
        &dir,
        &[
            ("workers", "2"),
            ("hours", "0.01"),
            ("stagger_secs", "0.0"),
            ("restart_backoff_secs", "30.0"),
        ],
    );
    let groups = "\n[[run.agents]]\nworkers = \"w01\"\nagent = \"claude\"\n\n[[run.agents]]\nworkers = \"w02\"\nagent = \"copilot\"\n";
    let path = dir.join("agensh.toml");
    let text = std::fs::read_to_string(&path).unwrap() + groups;
    std::fs::write(&path, text).unwrap();
    // The server takes only its own key.
    let replay = Replay::start(
        tmp.path(),
        &format!("keys = [\"the-right-key\"]\n{}", scenario(7317)),
    );
    let out = agensh()
        .arg("run")
        .arg(&dir)
        .args(["--model-url", &replay.url, "--model", "replay-model"])
        .args([
            "--api-key-env",
            "AGENSH_TEST_WRONG_KEY",
            "--listen",
            "127.0.0.1:0",
            "--json",
        ])
        .env("AGENSH_TEST_WRONG_KEY", "a-wrong-key")
        // Claude Code retries a refused request for minutes by default.
        .env("CLAUDE_CODE_MAX_RETRIES", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Claude answers the prompt with an error; Copilot ends its turn saying it retried:
    // either way the turn failed, with the cause.
    for id in ["w01", "w02"] {
        let log = std::fs::read_to_string(dir.join(".agensh/logs").join(id).join("turns.jsonl"))
            .unwrap_or_default();
        let failed: Vec<Value> = log
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|t| t.get("error").is_some())
            .collect();
        assert!(
            failed.iter().any(|t| {
                let e = t["error"].as_str().unwrap();
                e.contains("refused session/prompt") || e.contains("got no answer from its model")
            }),
            "{id}: no failed turn with its cause: {failed:?}\n{stderr}"
        );
    }
}

/// Claude Code busy in a ten-minute command; an operator's DM waits past the bound (3 s):
/// the node sends `session/cancel`, the command stops, and the next model request carries
/// the message and says the turn was interrupted.
#[test]
#[ignore = "needs the agent CLIs: scripts/test installs them (agensh agents install) and runs this tier with --ignored"]
fn claude_busy_in_a_long_command_is_interrupted_and_its_next_request_carries_the_dm() {
    let (tmp, dir) = new_org("Follow the model's lead; this is a test of interruption.");
    set_run(
        &dir,
        &[
            ("workers", "1"),
            ("hours", "0.05"),
            ("stagger_secs", "0.0"),
            ("notices_minutes", "[]"),
            ("interrupt_after_secs", "3"),
        ],
    );
    let long = r#"{ name = "Bash", args = { command = "sleep 617", description = "build", timeout = 600000 } }"#;
    let replay = Replay::start(
        tmp.path(),
        &format!(
            "side_text = \"ok\"\nfinal_text = \"Done.\"\n\n[[step]]\ntext = \"Building.\"\ntool_calls = [ {long} ]\n"
        ),
    );
    let mut child = agensh()
        .arg("run")
        .arg(&dir)
        .args(["--agent", "claude", "--model-url", &replay.url])
        .args([
            "--model",
            "replay-model",
            "--listen",
            "127.0.0.1:0",
            "--json",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("agensh run starts");
    wait_until(
        std::time::Duration::from_secs(120),
        "the long command runs",
        || !running("sleep 617").is_empty(),
    );
    let sent = std::time::Instant::now();
    let out = agensh()
        .current_dir(&dir)
        .args(["msg", "send", "w01", "[dm-617] stop the build, main moved"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until(
        std::time::Duration::from_secs(60),
        "a model request carrying the DM",
        || {
            replay
                .requests()
                .iter()
                .any(|r| r["body"].to_string().contains("[dm-617]"))
        },
    );
    let waited = sent.elapsed();
    let carrying = replay
        .requests()
        .into_iter()
        .find(|r| r["body"].to_string().contains("[dm-617]"))
        .unwrap();
    assert!(
        carrying["body"].to_string().contains("was interrupted"),
        "{carrying}"
    );
    assert!(
        waited < std::time::Duration::from_secs(3 + 15),
        "{waited:?}"
    );
    // Claude Code stops the command it was running.
    wait_until(
        std::time::Duration::from_secs(10),
        "the command stopped",
        || running("sleep 617").is_empty(),
    );
    agensh_process::group::terminate_process(child.id());
    let _ = child.wait();
}
