//! One worker's turn loop (`run_worker`) against the test kit's hub, driven by a stand-in
//! agent whose turns end when the test says (or when they are interrupted), so each state
//! of a worker's news is seen while it holds.

use std::path::PathBuf;
use std::time::Duration;

use agensh_client::Client;
use agensh_domain::Result;
use agensh_node::adapters::{Agent, AgentContext, Interrupt, TurnOutcome, Usage};
use agensh_node::turn::{run_worker, NodeLink, Recovery, WorkerPlan, WorkerSummary};
use agensh_process::ShutdownTrigger;
use agensh_testkit::Org;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How a [`Gated`] turn is to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// `end_turn`.
    Done,
    /// An error (the agent failed: the loop restarts it).
    Fail,
}

/// An agent whose every turn hands its prompt to the test and ends when the test says, or
/// with stop reason `cancelled` as soon as the turn loop interrupts it.
pub struct Gated {
    prompts: mpsc::UnboundedSender<String>,
    ends: mpsc::UnboundedReceiver<End>,
    interrupt: Interrupt,
    starts: mpsc::UnboundedSender<()>,
}

/// The test's side of a [`Gated`] agent.
pub struct Gate {
    pub prompts: mpsc::UnboundedReceiver<String>,
    pub ends: mpsc::UnboundedSender<End>,
    /// One message per start of the agent (the first and each restart).
    pub starts: mpsc::UnboundedReceiver<()>,
}

impl Gated {
    pub fn new() -> (Gated, Gate) {
        let (prompt_tx, prompts) = mpsc::unbounded_channel();
        let (ends, end_rx) = mpsc::unbounded_channel();
        let (start_tx, starts) = mpsc::unbounded_channel();
        (
            Gated {
                prompts: prompt_tx,
                ends: end_rx,
                interrupt: Interrupt::default(),
                starts: start_tx,
            },
            Gate {
                prompts,
                ends,
                starts,
            },
        )
    }
}

#[async_trait::async_trait]
impl Agent for Gated {
    async fn start(&mut self, ctx: &AgentContext) -> Result<()> {
        self.interrupt = ctx.interrupt.clone();
        let _ = self.starts.send(());
        Ok(())
    }

    async fn turn(&mut self, prompt: &str) -> Result<TurnOutcome> {
        let _ = self.prompts.send(prompt.to_string());
        let stop_reason = tokio::select! {
            end = self.ends.recv() => match end {
                Some(End::Fail) => {
                    return Err(agensh_domain::Error::internal("the stand-in agent failed"))
                }
                _ => "end_turn",
            },
            _ = self.interrupt.raised() => "cancelled",
        };
        Ok(TurnOutcome {
            stop_reason: stop_reason.into(),
            usage: Usage::not_reported(),
            events: Vec::new(),
            model_ms: 0,
            tools_ms: 0,
        })
    }

    async fn stop(&mut self) {}
}

impl Gate {
    /// The next prompt, within 20 s.
    pub async fn next_prompt(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(20), self.prompts.recv())
            .await
            .expect("a turn starts within 20 s")
            .expect("the worker runs")
    }

    /// Ends the running turn.
    pub fn end(&self, how: End) {
        self.ends.send(how).expect("the agent runs");
    }
}

/// The plan of worker `id` of `org`: a long idle timeout, no parking, no restarts' wait,
/// interrupted after `interrupt_after` (none: never); its logs under `logs-<id>`.
pub fn plan(org: &Org, id: &str, interrupt_after: Option<Duration>) -> WorkerPlan {
    WorkerPlan {
        ctx: AgentContext {
            worker: id.into(),
            checkout: org.tmp.path().join(id),
            hub_url: org.url().to_string(),
            token: org.token(id).to_string(),
            mcp_proxy: None,
            state_dir: org.tmp.path().join(format!("state-{id}")),
            agent_home: org.tmp.path().join(format!("home-{id}")),
            agensh: "agensh".into(),
            heartbeat: Default::default(),
            interrupt: Default::default(),
        },
        launch_prompt: "launch".into(),
        idle_timeout: Duration::from_secs(600),
        park_idle: false,
        ends_at: None,
        notices_before_end: Vec::new(),
        log_dir: log_dir(org, id),
        recovery: Recovery {
            max_restarts: 3,
            backoff: Duration::from_millis(500),
            hang_after: None,
        },
        interrupt_after,
    }
}

/// Where [`plan`] logs `id`'s turns.
pub fn log_dir(org: &Org, id: &str) -> PathBuf {
    org.tmp.path().join(format!("logs-{id}"))
}

/// A running worker: its loop's task and what stops it.
pub struct Running {
    pub task: JoinHandle<Result<WorkerSummary>>,
    pub stop: ShutdownTrigger,
}

impl Running {
    /// Stops the worker and waits for its summary.
    pub async fn stop(self) -> WorkerSummary {
        self.stop.fire();
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("the worker stops within 20 s")
            .expect("the worker's task")
            .expect("the worker's loop")
    }
}

/// Runs `agent` for `plan`'s worker against `org`'s hub, as a node would.
pub fn spawn(org: &Org, plan: WorkerPlan, agent: Box<dyn Agent>) -> Running {
    let client = org.client(&plan.ctx.worker);
    let link = NodeLink::start(Client::new(org.url(), ""));
    let (stop, shutdown) = ShutdownTrigger::new();
    let (progress, mut progress_rx) = mpsc::unbounded_channel();
    // The live view's feed, drained.
    tokio::spawn(async move { while progress_rx.recv().await.is_some() {} });
    let task = tokio::spawn(run_worker(plan, agent, client, link, shutdown, progress));
    Running { task, stop }
}

/// An organization of two workers with w01 run by a [`Gated`] agent on its plan (interrupted
/// after `bound`, changed by `tweak`), started and in its launch turn; w02's client to send
/// it news.
pub async fn w01_in_its_launch_turn(
    bound: Option<Duration>,
    tweak: impl FnOnce(&mut WorkerPlan),
) -> (Org, Client, Gate, Running) {
    let org = Org::builder()
        .file("README.md", "hello\n")
        .workers(2)
        .start()
        .await;
    let w02 = org.client("w02");
    let (agent, mut gate) = Gated::new();
    let mut plan = plan(&org, "w01", bound);
    tweak(&mut plan);
    let running = spawn(&org, plan, Box::new(agent));
    gate.starts.recv().await.expect("the agent starts");
    assert_eq!(gate.next_prompt().await, "launch");
    (org, w02, gate, running)
}
