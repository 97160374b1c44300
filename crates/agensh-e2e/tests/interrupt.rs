//! Urgent news and a busy worker, through the node's turn loop against a real hub: news
//! that waits unseen past `run.interrupt_after_secs` interrupts the turn and leads the next
//! prompt; nothing else interrupts (no bound, board records, channel posts, news already
//! shown in a tool result); and news that arrives around a transition (a turn ending, the
//! agent restarting, the node restarting, the worker parked) is shown exactly once, in the
//! next prompt. The agent is a stand-in whose turns end when the test says or when it is
//! interrupted; then the built-in agent in a real command (against a replay endpoint) and
//! an ACP agent (the scripted agent, a process over stdio) in a long step are interrupted.

mod support;

use std::time::{Duration, Instant};

use agensh_client::mcp::McpClient;
use agensh_client::Client;
use agensh_domain::message::NewMessage;
use agensh_domain::receipt::{ReceiptState, Via};
use agensh_domain::record::{NewRecord, RecordKind};
use agensh_node::adapters::builtin::{BuiltinAgent, BuiltinConfig, ToolStyle};
use agensh_node::turn::WorkerPlan;
use agensh_testkit::scenario::{step, Scenario, Step};
use agensh_testkit::{wait_until, Org};
use serde_json::{json, Value};
use support::replay::{Replay, Reply};
use support::worker::{self, End, Gate, Gated};
use support::AgentOrg;

const BOUND: Duration = Duration::from_secs(1);

/// Sends `text` from `from` to `to` (a worker or a `#channel`); the message's id.
async fn send(from: &Client, to: &str, text: &str) -> String {
    let m = from
        .send_message(&NewMessage {
            to: to.into(),
            text: text.into(),
            thread: None,
        })
        .await
        .unwrap();
    format!("M{}", m.seq)
}

/// w01's receipt of message `id`: its state and how it was shown.
async fn receipt(sender: &Client, id: &str) -> (ReceiptState, Option<Via>) {
    let status = sender.message_status(id).await.unwrap();
    let r = status
        .receipts
        .iter()
        .find(|r| r.worker == "w01")
        .expect("w01 is a recipient");
    (r.state, r.via)
}

/// No prompt comes for `wait`: the turn runs on.
async fn no_prompt_for(gate: &mut Gate, wait: Duration) {
    if let Ok(p) = tokio::time::timeout(wait, gate.prompts.recv()).await {
        panic!("the turn was not to end, yet a prompt came: {p:?}");
    }
}

/// Lines of w01's turn log.
fn turn_log(org: &Org) -> Vec<Value> {
    std::fs::read_to_string(worker::log_dir(org, "w01").join("turns.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// w01 run by a stand-in agent, and w02 to send it news.
struct Scene {
    org: Org,
    w02: Client,
    gate: Gate,
    running: Option<worker::Running>,
    bound: Option<Duration>,
}

impl Scene {
    /// w01 interrupted after `bound` (none: never), its plan changed by `tweak`, in its
    /// launch turn.
    async fn start(bound: Option<Duration>, tweak: impl FnOnce(&mut WorkerPlan)) -> Scene {
        let (org, w02, gate, running) = worker::w01_in_its_launch_turn(bound, tweak).await;
        Scene {
            org,
            w02,
            gate,
            running: Some(running),
            bound,
        }
    }

    /// Stops w01's node, waits for `meanwhile`, then starts w01 again on the same logs with
    /// a new stand-in agent.
    async fn restart_node<T>(&mut self, meanwhile: impl std::future::Future<Output = T>) -> T {
        if let Some(r) = self.running.take() {
            r.stop().await;
        }
        let out = meanwhile.await;
        let (agent, gate) = Gated::new();
        let plan = worker::plan(&self.org, "w01", self.bound);
        self.running = Some(worker::spawn(&self.org, plan, Box::new(agent)));
        self.gate = gate;
        out
    }

    /// A DM from w02 to w01; its id.
    async fn dm(&self, text: &str) -> String {
        send(&self.w02, "w01", text).await
    }

    /// Ends the running turn and makes w01 take a new prompt (a channel post wakes it);
    /// returns that prompt.
    async fn another_prompt(&mut self, n: usize) -> String {
        self.gate.end(End::Done);
        send(&self.w02, "#general", &format!("ping {n}")).await;
        self.gate.next_prompt().await
    }

    /// DM `id` (saying `text`) is in `prompt` once, presented `via`, and not in the prompt
    /// after.
    async fn shown_once(&mut self, id: &str, text: &str, prompt: &str, via: Via) {
        let line = format!("DM from w02: {text}");
        assert_eq!(prompt.matches(&line).count(), 1, "{prompt}");
        assert_eq!(
            receipt(&self.w02, id).await,
            (ReceiptState::Presented, Some(via))
        );
        let later = self.another_prompt(1).await;
        assert!(!later.contains(text), "{later}");
    }

    async fn finish(mut self) {
        if let Some(r) = self.running.take() {
            r.stop().await;
        }
        self.org.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dm_unseen_past_the_bound_interrupts_the_turn_and_leads_the_next_prompt() {
    let mut t = Scene::start(Some(BOUND), |_| {}).await;
    let sent = Instant::now();
    let dm = t.dm("stop: main is broken").await;
    let prompt = t.gate.next_prompt().await;
    let waited = sent.elapsed();
    assert!(prompt.contains("was interrupted"), "{prompt}");
    // Seen past the bound, and within it plus the watch's period and the turn's end.
    assert!(waited >= BOUND, "interrupted after {waited:?}");
    assert!(waited < BOUND + Duration::from_secs(5), "{waited:?}");
    // The interrupted turn ended as the agent ended it, and the log says why.
    let log = turn_log(&t.org);
    assert!(
        log.iter()
            .any(|l| l["turn"] == 1 && l["stop_reason"] == "cancelled"),
        "{log:?}"
    );
    assert!(log.iter().any(|l| l["interrupted"].is_array()), "{log:?}");
    t.shown_once(&dm, "stop: main is broken", &prompt, Via::Interruption)
        .await;
    wait_until(Duration::from_secs(10), "the acknowledgement", async || {
        receipt(&t.w02, &dm).await.0 == ReceiptState::Acknowledged
    })
    .await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_bound_a_dm_waits_for_the_turns_end() {
    let mut t = Scene::start(None, |_| {}).await;
    let dm = t.dm("are you there?").await;
    no_prompt_for(&mut t.gate, BOUND * 3).await;
    assert_eq!(receipt(&t.w02, &dm).await, (ReceiptState::Stored, None));
    t.gate.end(End::Done);
    let prompt = t.gate.next_prompt().await;
    assert!(!prompt.contains("was interrupted"), "{prompt}");
    t.shown_once(&dm, "are you there?", &prompt, Via::Prompt)
        .await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn board_records_and_channel_posts_never_interrupt() {
    let mut t = Scene::start(Some(BOUND), |_| {}).await;
    let fact = NewRecord::new(RecordKind::Fact, "the build takes ten minutes".to_string());
    t.w02.post_record(&fact).await.unwrap();
    send(&t.w02, "#general", "main is green").await;
    no_prompt_for(&mut t.gate, BOUND * 3).await;
    t.gate.end(End::Done);
    let prompt = t.gate.next_prompt().await;
    assert!(
        prompt.contains("main is green") && prompt.contains("the build takes ten minutes"),
        "{prompt}"
    );
    assert!(!prompt.contains("was interrupted"), "{prompt}");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn news_shown_in_a_tool_result_does_not_interrupt() {
    // Long enough for the tool call below to come first.
    let bound = Duration::from_secs(3);
    let mut t = Scene::start(Some(bound), |_| {}).await;
    let dm = t.dm("PR 4 needs your review").await;
    // The busy agent calls an organization tool: the DM is in the result's notices.
    let mcp = McpClient::connect(&format!("{}/mcp", t.org.url()), t.org.token("w01"))
        .await
        .unwrap();
    let result = mcp.call_tool("board_read", json!({})).await.unwrap();
    let notices = result.notices.unwrap_or_default();
    assert!(notices.contains("PR 4 needs your review"), "{notices}");
    assert_eq!(receipt(&t.w02, &dm).await.1, Some(Via::ToolResult));
    no_prompt_for(&mut t.gate, bound * 2).await;
    // Nor is it shown again at the turn's end.
    let later = t.another_prompt(1).await;
    assert!(!later.contains("PR 4 needs your review"), "{later}");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn news_arriving_as_a_turn_ends_is_shown_once_in_the_next_prompt() {
    let mut t = Scene::start(None, |_| {}).await;
    for n in 0..5 {
        // The DM and the turn's end race; before the boundary's poll or after it, the DM
        // is in the next prompt.
        let text = format!("race {n}");
        let (dm, ()) = tokio::join!(t.dm(&text), async { t.gate.end(End::Done) });
        let prompt = t.gate.next_prompt().await;
        t.shown_once(&dm, &text, &prompt, Via::Prompt).await;
    }
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn news_arriving_while_the_agent_restarts_is_in_its_first_prompt_after() {
    let mut t = Scene::start(None, |_| {}).await;
    // The agent fails; while the loop waits to restart it, a DM comes.
    t.gate.end(End::Fail);
    let dm = t.dm("use the new API").await;
    t.gate.starts.recv().await.unwrap();
    let prompt = t.gate.next_prompt().await;
    assert!(prompt.contains("was restarted"), "{prompt}");
    t.shown_once(&dm, "use the new API", &prompt, Via::Prompt)
        .await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn news_arriving_while_the_node_is_down_is_in_the_restarted_workers_first_prompt() {
    let mut t = Scene::start(None, |_| {}).await;
    t.gate.end(End::Done);
    wait_until(
        Duration::from_secs(10),
        "the first turn's log",
        async || turn_log(&t.org).iter().any(|l| l["turn"] == 1),
    )
    .await;
    // The node stops; while it is down a DM comes; it starts again on the same logs.
    let w02 = t.w02.clone();
    let dm = t.restart_node(send(&w02, "w01", "where are you?")).await;
    let prompt = t.gate.next_prompt().await;
    assert!(
        prompt.starts_with("launch") && prompt.contains("node running you was restarted"),
        "{prompt}"
    );
    t.shown_once(&dm, "where are you?", &prompt, Via::Prompt)
        .await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_worker_is_woken_by_news_and_shown_it_once() {
    let mut t = Scene::start(Some(BOUND), |p| {
        p.park_idle = true;
        p.idle_timeout = Duration::from_millis(300);
    })
    .await;
    // Turns that change nothing, until the worker is parked.
    let parked_at = Instant::now();
    while !turn_log(&t.org).iter().any(|l| l["parked"].is_string()) {
        assert!(
            parked_at.elapsed() < Duration::from_secs(20),
            "never parked"
        );
        t.gate.end(End::Done);
        let _ = tokio::time::timeout(Duration::from_secs(2), t.gate.prompts.recv()).await;
    }
    // Parked: its next continue prompt is a minute away. A DM wakes it.
    let sent = Instant::now();
    let dm = t.dm("wake up, PR 2 failed").await;
    let prompt = t.gate.next_prompt().await;
    assert!(sent.elapsed() < Duration::from_secs(10));
    t.shown_once(&dm, "wake up, PR 2 failed", &prompt, Via::Prompt)
        .await;
    t.finish().await;
}

/// The text of a chat request's last message.
fn last_text(request: &Value) -> String {
    let messages = request["messages"].as_array().expect("messages");
    messages.last().expect("a message")["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builtin_agent_is_interrupted_mid_command_and_its_next_request_carries_the_dm() {
    let org = support::start(2).await;
    let w02 = org.client("w02");
    let replay = Replay::start().await;
    // A ten-minute command; after it, nothing scripted (each turn then just ends).
    replay.push([Reply::tool(
        "run",
        json!({ "command": "echo $$ > fg.txt; sleep 600", "timeout_secs": 900 }),
    )]);
    let cfg = BuiltinConfig {
        base_url: replay.base_url.clone(),
        model: "replay-model".into(),
        style: ToolStyle::Tools,
        command_timeout: Duration::from_secs(900),
        ..BuiltinConfig::default()
    };
    let mut plan = worker::plan(&org, "w01", Some(BOUND));
    plan.ctx = org.context("w01").await;
    let fg = plan.ctx.checkout.join("fg.txt");
    let running = worker::spawn(&org, plan, Box::new(BuiltinAgent::new(cfg)));
    wait_until(Duration::from_secs(20), "the command runs", async || {
        std::fs::read_to_string(&fg).is_ok_and(|s| s.ends_with('\n'))
    })
    .await;
    let pgid: u32 = std::fs::read_to_string(&fg)
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    let sent = Instant::now();
    let dm = send(&w02, "w01", "stop the build, main moved").await;
    wait_until(
        Duration::from_secs(30),
        "the next turn's request",
        async || replay.requests().len() >= 2,
    )
    .await;
    let waited = sent.elapsed();
    assert!(waited < BOUND + Duration::from_secs(15), "{waited:?}");
    let next = &replay.requests()[1];
    let prompt = last_text(next);
    assert!(
        prompt.contains("was interrupted") && prompt.contains("stop the build, main moved"),
        "{prompt}"
    );
    // The command's result in the history says it was stopped, and its group is gone.
    let stopped = next["messages"].as_array().unwrap().iter().any(|m| {
        m["role"] == "tool"
            && m["content"]
                .as_str()
                .is_some_and(|c| c.contains("interrupted for urgent news"))
    });
    assert!(stopped, "{next}");
    assert_eq!(support::group_left_after_kill(pgid).await, vec![]);
    assert_eq!(receipt(&w02, &dm).await.1, Some(Via::Interruption));
    running.stop().await;
    org.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agent_gets_session_cancel_and_its_next_prompt_carries_the_dm() {
    let org = support::start(2).await;
    let w02 = org.client("w02");
    // Ten minutes in one step, then the turn's end.
    let scenario = Scenario::new()
        .step(Step::Sleep { ms: 600_000 })
        .step(step::end_turn());
    let path = org.scenario("long", &scenario.to_toml());
    let mut plan = worker::plan(&org, "w01", Some(BOUND));
    plan.ctx = org.context("w01").await;
    let running = worker::spawn(&org, plan, Box::new(org.script_agent(&path)));
    // The launch turn is asleep in its step.
    wait_until(Duration::from_secs(20), "the agent's session", async || {
        org.client("w01").workers().await.is_ok_and(|s| {
            s.iter()
                .any(|w| w.id == "w01" && w.status == agensh_domain::worker::WorkerStatus::Busy)
        })
    })
    .await;
    let sent = Instant::now();
    let dm = send(&w02, "w01", "hand over p1").await;
    wait_until(
        Duration::from_secs(30),
        "the interrupted turn's end",
        async || turn_log(&org).iter().any(|l| l["turn"] == 2),
    )
    .await;
    let waited = sent.elapsed();
    assert!(waited < BOUND + Duration::from_secs(15), "{waited:?}");
    let log = turn_log(&org);
    let first = log.iter().find(|l| l["turn"] == 1).unwrap();
    assert_eq!(first["stop_reason"], "cancelled", "{first}");
    let second = log.iter().find(|l| l["turn"] == 2).unwrap();
    let prompt = second["prompt"].as_str().unwrap();
    assert!(
        prompt.contains("was interrupted") && prompt.contains("DM from w02: hand over p1"),
        "{prompt}"
    );
    assert_eq!(receipt(&w02, &dm).await.1, Some(Via::Interruption));
    running.stop().await;
    org.shutdown().await;
}
