//! The ACP adapter against a real ACP agent — the scripted agent, `agensh agent script`,
//! as a separate process — and a real hub in-process with a seeded workspace: turns,
//! permission requests, requests the client does not offer, usage, stopping without
//! leaving processes behind, and agents that crash.

mod support;

use std::time::{Duration, Instant};

use agensh_node::adapters::acp::{AcpAgent, SESSION_FILE, STDERR_LOG};
use agensh_node::adapters::{Agent, TurnEvent};
use agensh_testkit::scenario::{step, Scenario, Step};
use serde_json::json;
use support::{entries, group_left_after_kill, live_group_members, tools_called, AgentOrg};

/// One part in one turn, with a permission request and a request the client does not
/// offer on the way.
fn one_part() -> String {
    Scenario::new()
        .parts(&["p1"])
        .templates(
            "def {part}():\n    return '{part}'\n",
            "from parts.{part} import {part}\n\ndef test_{part}():\n    assert {part}() == '{part}'\n",
        )
        .step(step::claim_free_part())
        .step(Step::RequestPermission {
            title: "git push".into(),
        })
        .step(Step::ClientRequest {
            method: "fs/read_text_file".into(),
            params: json!({"path": "README.md"}),
        })
        .step(step::write_part())
        .step(step::commit_push())
        .step(step::open_and_merge_pr())
        .step(step::board_write("PATCH_SUMMARY", "files=parts/{part}.py | idea=return the name | evidence=tests passed"))
        .step(step::release())
        .step(step::end_turn())
        .to_toml()
}

/// Only ends its turns.
fn idle() -> String {
    Scenario::new().step(step::end_turn()).to_toml()
}

fn tool_status<'a>(events: &'a [TurnEvent], tool: &str) -> Vec<&'a str> {
    events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::ToolCall { name, status, .. } if name == tool => Some(status.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_runs_the_scenario_answers_permissions_and_ends_with_end_turn() {
    let org = support::start(1).await;
    let w = org.id(0);
    let ctx = org.context(&w).await;
    let mut agent = org.script_agent(&org.scenario("one", &one_part()));
    agent.start(&ctx).await.expect("the scripted agent starts");
    assert!(agent.session_id().is_some_and(|s| !s.is_empty()));
    assert!(
        ctx.state_dir.join(SESSION_FILE).exists(),
        "the session is stored for a later session/load"
    );

    let out = agent
        .turn("Your goal: the parts. Go.")
        .await
        .expect("a turn");
    assert_eq!(out.stop_reason, "end_turn");
    assert!(
        out.usage.input_tokens > 0 && out.usage.output_tokens > 0,
        "{:?}",
        out.usage
    );
    // Each tool call is one event, updated in place to its final status.
    assert_eq!(tool_status(&out.events, "claim"), ["completed"]);
    assert_eq!(tool_status(&out.events, "pr_open"), ["completed"]);
    assert_eq!(tool_status(&out.events, "pr_merge"), ["completed"]);
    assert_eq!(tool_status(&out.events, "board_write"), ["completed"]);
    assert_eq!(tool_status(&out.events, "release"), ["completed"]);
    assert!(
        out.events
            .iter()
            .any(|e| matches!(e, TurnEvent::ToolCall { name, status, .. } if name.starts_with("git push") && status == "completed")),
        "{:?}",
        out.events
    );
    assert!(out
        .events
        .iter()
        .any(|e| matches!(e, TurnEvent::Message { text } if text.contains("I took part p1"))));

    // The work landed: main has the part and its test.
    let files = org.files_on_main().await;
    assert!(files.contains("parts/p1.py"), "{files:?}");
    assert!(files.contains("tests/test_p1.py"), "{files:?}");
    assert_eq!(
        org.on_main("parts/p1.py").await.as_deref(),
        Some("def p1():\n    return 'p1'")
    );

    // The permission request got the policy answer (the default, allow once: an agent told
    // "always" may remember it in files of its own); the request the client does not offer
    // got "method not found".
    let log = org.log_entries();
    let perm = entries(&log, "permission", &w);
    assert_eq!(perm.len(), 1, "{log:?}");
    assert_eq!(perm[0]["outcome"], "selected");
    assert_eq!(perm[0]["option"], "allow-once");
    let req = entries(&log, "client_request", &w);
    assert_eq!(req.len(), 1, "{log:?}");
    assert_eq!(req[0]["error"]["code"], json!(-32601));
    assert_eq!(
        tools_called(&log, &w),
        ["claim", "pr_open", "pr_merge", "board_write", "release"]
    );

    // A later prompt only gets an answer.
    let again = agent.turn("continue").await.expect("a second turn");
    assert_eq!(again.stop_reason, "end_turn");
    assert!(again
        .events
        .iter()
        .all(|e| matches!(e, TurnEvent::Message { .. })));
    assert_eq!(tools_called(&org.log_entries(), &w).len(), 5);

    let pid = agent.pid().expect("running");
    agent.stop().await;
    assert!(agent.pid().is_none());
    assert_eq!(
        group_left_after_kill(pid).await,
        [],
        "the agent's group is gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_mid_turn_cancels_and_leaves_no_process_behind() {
    let org = support::start(1).await;
    let w = org.id(0);
    let ctx = org.context(&w).await;
    let scenario = org.scenario(
        "slow",
        &Scenario::new()
            .step(Step::Say {
                text: "thinking".into(),
            })
            .step(Step::Sleep { ms: 60000 })
            .step(step::end_turn())
            .to_toml(),
    );
    // A launcher that leaves a child of its own in the group (as npm launchers do), and
    // an agent that would sleep a minute inside its turn.
    let bin = support::agensh_bin();
    let mut agent = AcpAgent::new(
        vec![
            "sh".into(),
            "-c".into(),
            format!(
                "sleep 300 & exec '{}' agent script --scenario '{}'",
                bin.display(),
                scenario.display()
            ),
        ],
        vec![],
    );
    agent.start(&ctx).await.expect("starts");
    let pid = agent.pid().unwrap();
    assert!(
        live_group_members(pid).len() >= 2,
        "the agent and its child run: {:?}",
        live_group_members(pid)
    );
    // The node gives up on the turn (a deadline, a budget): the turn future is dropped.
    let turn = tokio::time::timeout(Duration::from_millis(500), agent.turn("go")).await;
    assert!(turn.is_err(), "the turn is still running");
    let started = Instant::now();
    agent.stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stop took {:?}",
        started.elapsed()
    );
    assert_eq!(
        group_left_after_kill(pid).await,
        [],
        "no process of the agent's group is left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_ignores_the_end_of_its_input_is_killed() {
    let org = support::start(1).await;
    let w = org.id(0);
    let ctx = org.context(&w).await;
    let scenario = org.scenario("idle", &idle());
    // Answers like the scripted agent, but keeps running after stdin ends (like
    // codex-acp and gemini --acp): the shell waits for a sleep after the agent exits.
    let mut agent = AcpAgent::new(
        vec![
            "sh".into(),
            "-c".into(),
            format!(
                "trap '' HUP TERM; '{}' agent script --scenario '{}'; sleep 300",
                support::agensh_bin().display(),
                scenario.display()
            ),
        ],
        vec![],
    );
    agent.start(&ctx).await.expect("starts");
    assert_eq!(agent.turn("go").await.unwrap().stop_reason, "end_turn");
    let pid = agent.pid().unwrap();
    let started = Instant::now();
    agent.stop().await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(5),
        "stop waits its grace period, then kills: {took:?}"
    );
    assert_eq!(group_left_after_kill(pid).await, []);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_exits_at_once_gives_a_clear_error() {
    let org = support::start(1).await;
    let w = org.id(0);
    let ctx = org.context(&w).await;

    let mut agent = AcpAgent::new(vec!["sh".into(), "-c".into(), "exit 3".into()], vec![]);
    let e = agent.start(&ctx).await.expect_err("the agent exits");
    assert_eq!(e.code, "agent_exited", "{e:?}");
    assert!(e.message.contains("exited with status 3"), "{}", e.message);
    assert!(e.message.contains("sh -c exit 3"), "{}", e.message);
    assert!(agent.pid().is_none());

    let mut agent = AcpAgent::new(
        vec![
            "sh".into(),
            "-c".into(),
            "echo 'error: no API key configured' >&2; exit 4".into(),
        ],
        vec![],
    );
    let e = agent.start(&ctx).await.expect_err("the agent exits");
    assert!(e.message.contains("exited with status 4"), "{}", e.message);
    assert!(
        e.message.contains("error: no API key configured"),
        "the error quotes the agent's stderr: {}",
        e.message
    );
    assert!(e.message.contains(STDERR_LOG), "{}", e.message);
    // Only this run's output is quoted, and the log keeps every run's.
    let e = agent.start(&ctx).await.expect_err("the agent exits again");
    let quoted = e.message.split("Last lines").nth(1).unwrap_or_default();
    assert_eq!(
        quoted.matches("error: no API key configured").count(),
        1,
        "{}",
        e.message
    );
    let log = std::fs::read_to_string(ctx.state_dir.join(STDERR_LOG)).unwrap();
    assert_eq!(
        log.lines()
            .filter(|l| *l == "error: no API key configured")
            .count(),
        2,
        "{log}"
    );

    let mut agent = AcpAgent::new(vec!["/nonexistent/agent".into()], vec![]);
    let e = agent.start(&ctx).await.expect_err("no such program");
    assert_eq!(e.code, "agent_not_started", "{e:?}");
    assert!(e.message.contains("/nonexistent/agent"), "{}", e.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_crashes_mid_turn_gives_its_exit_status() {
    let org = support::start(1).await;
    let w = org.id(0);
    let ctx = org.context(&w).await;
    let scenario = org.scenario(
        "crash",
        &Scenario::new()
            .step(Step::Say {
                text: "about to fail".into(),
            })
            .step(Step::Exit { code: 7 })
            .to_toml(),
    );
    let mut agent = org.script_agent(&scenario);
    agent.start(&ctx).await.expect("starts");
    let pid = agent.pid().unwrap();
    let e = agent.turn("go").await.expect_err("the agent crashes");
    assert_eq!(e.code, "agent_exited", "{e:?}");
    assert!(e.message.contains("exited with status 7"), "{}", e.message);
    assert!(e.message.contains("during a turn"), "{}", e.message);
    agent.stop().await;
    assert_eq!(group_left_after_kill(pid).await, []);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_loads_its_session_and_goes_on() {
    let org = support::start(1).await;
    let w = org.id(0);
    let ctx = org.context(&w).await;
    let scenario = org.scenario(
        "resume",
        &Scenario::new()
            .parts(&["p1"])
            .step(step::claim_free_part())
            .step(step::end_turn())
            .step(Step::Exit { code: 9 })
            .step(Step::Say {
                text: "resumed with {part}".into(),
            })
            .step(step::release())
            .step(step::end_turn())
            .to_toml(),
    );
    let mut agent = org.script_agent(&scenario);
    agent.start(&ctx).await.unwrap();
    let session = agent.session_id().unwrap().to_string();
    assert_eq!(agent.turn("go").await.unwrap().stop_reason, "end_turn");
    let e = agent.turn("continue").await.expect_err("the agent crashes");
    assert!(e.message.contains("exited with status 9"), "{}", e.message);

    // Restarted, the agent loads the stored session: same id, and it goes on after the
    // step it crashed in, still holding its part and claim.
    agent.start(&ctx).await.expect("restarts");
    assert_eq!(agent.session_id(), Some(session.as_str()));
    let out = agent.turn("continue").await.unwrap();
    assert_eq!(out.stop_reason, "end_turn");
    assert!(
        out.events
            .iter()
            .any(|e| matches!(e, TurnEvent::Message { text } if text == "resumed with p1")),
        "{:?}",
        out.events
    );
    assert_eq!(tool_status(&out.events, "release"), ["completed"]);
    assert!(org
        .client(&w)
        .workers()
        .await
        .unwrap()
        .iter()
        .all(|w| w.claims.is_empty()));

    // A stored session the agent does not know any more: a new session instead.
    let file = ctx.state_dir.join(SESSION_FILE);
    let mut stored: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    stored["sessionId"] = json!("script-gone");
    std::fs::write(&file, stored.to_string()).unwrap();
    agent.start(&ctx).await.expect("restarts");
    assert_ne!(agent.session_id(), Some(session.as_str()));
    agent.stop().await;
}

/// Field `n` of `/proc/<pid>/stat` (1-based, as in proc(5)).
fn stat_field(pid: u32, n: usize) -> i64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields from the 3rd on follow the name in parentheses.
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    after_name
        .split_whitespace()
        .nth(n - 3)
        .unwrap()
        .parse()
        .unwrap()
}

/// (niceness, scheduling policy) of process or thread `pid`.
fn priority(pid: u32) -> (i64, i64) {
    (stat_field(pid, 19), stat_field(pid, 41))
}

const SCHED_OTHER: i64 = 0;
const SCHED_IDLE: i64 = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_runs_below_the_node_in_cpu_priority_and_its_threads_too() {
    use agensh_node::adapters::cpu::AgentCpu;
    let org = support::start(1).await;
    let w = org.id(0);
    let ctx = org.context(&w).await;
    let scenario = org.scenario("cpu", &idle());
    let ours = priority(std::process::id());
    assert_eq!(ours.1, SCHED_OTHER, "the test runs as a normal process");

    let mut agent = org.script_agent(&scenario);
    agent.start(&ctx).await.expect("the scripted agent starts");
    let pid = agent.pid().unwrap();
    assert_eq!(priority(pid), (19, SCHED_IDLE), "the default: background");
    // Every thread of the agent has it (threads and children inherit it).
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let tid: u32 = task.unwrap().file_name().to_str().unwrap().parse().unwrap();
        assert_eq!(priority(tid), (19, SCHED_IDLE));
    }
    agent.stop().await;

    let mut agent = org.script_agent(&scenario).with_cpu(AgentCpu::Low);
    agent.start(&ctx).await.expect("the scripted agent starts");
    assert_eq!(priority(agent.pid().unwrap()), (19, SCHED_OTHER));
    agent.stop().await;

    let mut agent = org.script_agent(&scenario).with_cpu(AgentCpu::Normal);
    agent.start(&ctx).await.expect("the scripted agent starts");
    assert_eq!(
        priority(agent.pid().unwrap()),
        ours,
        "the node's own priority"
    );
    agent.stop().await;
}

/// Processes whose command line holds `text`.
fn running(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(text) {
                found.push(cmd);
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contained_agent_takes_its_detached_jobs_with_it_at_stop() {
    let org = support::start(1).await;
    let w = org.id(0);
    let ctx = org.context(&w).await;
    let scenario = org.scenario("idle", &idle());
    // The agent's launcher leaves a job in a session of its own (as Claude Code's and
    // Copilot's shell tools do), then becomes the agent.
    let launcher = format!(
        "setsid sh -c 'sleep 7321' </dev/null >/dev/null 2>&1 & exec '{}' agent script --scenario '{}'",
        support::agensh_bin().display(),
        scenario.display()
    );
    let mut agent = AcpAgent::new(vec!["sh".into(), "-c".into(), launcher], Vec::new()).contained();
    agent.start(&ctx).await.expect("starts");
    let deadline = Instant::now() + Duration::from_secs(10);
    while running("sleep 7321").is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!running("sleep 7321").is_empty(), "the detached job runs");
    assert!(
        agent.marked_processes().len() >= 2,
        "the agent and its job carry the mark"
    );
    agent.stop().await;
    assert_eq!(
        running("sleep 7321"),
        Vec::<String>::new(),
        "the job ended with its agent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workers_token_reaches_an_acp_agent_only_in_its_mcp_entry() {
    let org = support::start(1).await;
    let w = org.id(0);
    let ctx = org.context(&w).await;
    let scenario = org.scenario("idle", &idle());
    let env_file = org.dir().join("agent-env.txt");
    let launcher = format!(
        "env > '{}'; exec '{}' agent script --scenario '{}'",
        env_file.display(),
        support::agensh_bin().display(),
        scenario.display()
    );
    let mut agent = AcpAgent::new(vec!["sh".into(), "-c".into(), launcher], Vec::new())
        .with_cpu(Default::default());
    // Even when the node itself has it.
    std::env::set_var("AGENSH_TOKEN", &ctx.token);
    agent.start(&ctx).await.expect("starts");
    std::env::remove_var("AGENSH_TOKEN");
    let out = agent.turn("go").await.expect("a turn");
    assert_eq!(out.stop_reason, "end_turn");
    agent.stop().await;
    let env = std::fs::read_to_string(&env_file).unwrap();
    assert!(env.contains(&format!("AGENSH_WORKER={w}")), "{env}");
    assert!(
        !env.contains(&ctx.token),
        "the token is in the agent's environment"
    );
}
