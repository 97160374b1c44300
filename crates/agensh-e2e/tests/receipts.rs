//! Delivery receipts through the node's turn loop against a real hub: the events a prompt
//! carries are recorded presented (via prompt) as the turn starts — the urgent ones leave
//! the queue then, so no tool result of the turn repeats them — and acknowledged once the
//! turn has ended, with the worker's next poll. The agent is a stand-in whose turns end
//! when the test says, so each state is seen while it holds.

use std::time::Duration;

use agensh_client::Client;
use agensh_domain::event::kinds;
use agensh_domain::message::NewMessage;
use agensh_domain::receipt::{MessageStatus, ReceiptState, Via};
use agensh_node::adapters::{Agent, AgentContext, TurnOutcome, Usage};
use agensh_node::pump::EventPump;
use agensh_node::status::StatusReporter;
use agensh_node::turn::{run_worker, NodeLink, Recovery, WorkerPlan};
use agensh_process::ShutdownTrigger;
use agensh_testkit::{wait_until, Org};
use tokio::sync::mpsc;

/// An agent whose every turn hands its prompt to the test and ends when the test says.
struct Gated {
    prompts: mpsc::UnboundedSender<String>,
    ends: mpsc::UnboundedReceiver<()>,
}

#[async_trait::async_trait]
impl Agent for Gated {
    async fn start(&mut self, _: &AgentContext) -> agensh_domain::Result<()> {
        Ok(())
    }

    async fn turn(&mut self, prompt: &str) -> agensh_domain::Result<TurnOutcome> {
        let _ = self.prompts.send(prompt.to_string());
        self.ends.recv().await;
        Ok(TurnOutcome {
            stop_reason: "end_turn".into(),
            usage: Usage::not_reported(),
            events: Vec::new(),
            model_ms: 0,
            tools_ms: 0,
        })
    }

    async fn stop(&mut self) {}
}

fn msg(to: &str, text: &str) -> NewMessage {
    NewMessage {
        to: to.into(),
        text: text.into(),
        thread: None,
    }
}

async fn next_prompt(prompts: &mut mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(Duration::from_secs(20), prompts.recv())
        .await
        .expect("a turn starts within 20 s")
        .expect("the worker runs")
}

/// The one receipt of w01 in `status`.
fn of_w01(status: &MessageStatus) -> (ReceiptState, Option<Via>, Option<i64>, Option<i64>) {
    let r = status
        .receipts
        .iter()
        .find(|r| r.worker == "w01")
        .expect("w01 is a recipient");
    (r.state, r.via, r.presented_at, r.acknowledged_at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_carried_dm_is_presented_as_its_turn_starts_and_acknowledged_when_it_ends() {
    let org = Org::builder()
        .file("README.md", "hello\n")
        .workers(2)
        .start()
        .await;
    let w02 = org.client("w02");
    let (prompt_tx, mut prompts) = mpsc::unbounded_channel();
    let (end, ends) = mpsc::unbounded_channel();
    let plan = WorkerPlan {
        ctx: AgentContext {
            worker: "w01".into(),
            checkout: org.tmp.path().join("w01"),
            hub_url: org.url().to_string(),
            token: org.token("w01").to_string(),
            mcp_proxy: None,
            state_dir: org.tmp.path().join("state-w01"),
            agent_home: org.tmp.path().join("home-w01"),
            agensh: "agensh".into(),
            heartbeat: Default::default(),
        },
        launch_prompt: "launch".into(),
        idle_timeout: Duration::from_secs(600),
        park_idle: false,
        ends_at: None,
        notices_before_end: Vec::new(),
        log_dir: org.tmp.path().join("logs-w01"),
        recovery: Recovery {
            max_restarts: 0,
            backoff: Duration::ZERO,
            hang_after: None,
        },
    };
    let link = NodeLink {
        events: EventPump::start(Client::new(org.url(), "")),
        status: StatusReporter::start(Client::new(org.url(), "")),
    };
    let (stop, shutdown) = ShutdownTrigger::new();
    let (progress, _progress) = mpsc::unbounded_channel();
    let agent = Gated {
        prompts: prompt_tx,
        ends,
    };
    let worker = tokio::spawn(run_worker(
        plan,
        Box::new(agent),
        org.client("w01"),
        link,
        shutdown,
        progress,
    ));

    // During the launch turn a DM and a channel post arrive: stored, not shown.
    assert_eq!(next_prompt(&mut prompts).await, "launch");
    let dm = w02
        .send_message(&msg("w01", "can you review PR 3?"))
        .await
        .unwrap();
    let post = w02
        .send_message(&msg("#general", "main is green"))
        .await
        .unwrap();
    let dm_id = format!("M{}", dm.seq);
    let post_id = format!("M{}", post.seq);
    let status = w02.message_status(&dm_id).await.unwrap();
    assert_eq!(of_w01(&status), (ReceiptState::Stored, None, None, None));

    // The next turn carries both: presented via prompt before the agent sees it.
    end.send(()).unwrap();
    let prompt = next_prompt(&mut prompts).await;
    assert!(
        prompt.contains("DM from w02: can you review PR 3?") && prompt.contains("main is green"),
        "{prompt}"
    );
    for id in [&dm_id, &post_id] {
        let (state, via, presented, acked) = of_w01(&w02.message_status(id).await.unwrap());
        assert_eq!(
            (state, via, acked),
            (ReceiptState::Presented, Some(Via::Prompt), None),
            "{id} while the turn runs"
        );
        assert!(presented.is_some());
    }
    // The urgent DM left w01's queue with the prompt: no tool result of this turn shows it
    // again. The post waits for the turn's end.
    let pending = org.client("w01").events(0, 0).await.unwrap();
    assert!(
        pending.iter().all(|e| e.kind != kinds::DIRECT_MESSAGE),
        "{pending:?}"
    );
    assert!(pending.iter().any(|e| e.kind == kinds::CHANNEL_POST));

    // The turn ends: both acknowledged with the worker's next poll, their first
    // presentation kept.
    end.send(()).unwrap();
    for id in [&dm_id, &post_id] {
        wait_until(Duration::from_secs(10), "the acknowledgement", async || {
            of_w01(&w02.message_status(id).await.unwrap()).0 == ReceiptState::Acknowledged
        })
        .await;
        let (_, via, presented, acked) = of_w01(&w02.message_status(id).await.unwrap());
        assert_eq!(via, Some(Via::Prompt));
        assert!(acked >= presented, "{id}: {presented:?} then {acked:?}");
    }
    assert!(org.client("w01").events(0, 0).await.unwrap().is_empty());

    stop.fire();
    let summary = tokio::time::timeout(Duration::from_secs(20), worker)
        .await
        .expect("the worker stops")
        .unwrap()
        .unwrap();
    assert_eq!(summary.turns, 2);
    org.shutdown().await;
}
