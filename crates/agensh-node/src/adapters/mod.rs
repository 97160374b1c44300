//! Adapters: one trait, one thin translation per kind of agent. The turn loop drives an
//! [`Agent`] without knowing which agent is behind it.

use std::path::PathBuf;

use agensh_domain::worker::WorkerProgress;
use agensh_domain::Result;
use serde::{Deserialize, Serialize};

pub mod acp;
pub mod builtin;
pub mod cpu;
pub mod limits;
pub mod pi;

/// What an agent gets to work with.
#[derive(Debug, Clone)]
pub struct AgentContext {
    pub worker: String,
    /// The worker's checkout, the agent's working directory.
    pub checkout: PathBuf,
    /// The hub's base URL.
    pub hub_url: String,
    /// The worker's token (for MCP and git over HTTP).
    pub token: String,
    /// The node's MCP proxy (`http://127.0.0.1:PORT/mcp`), when the node runs one; the
    /// agent's organization tools go through it.
    pub mcp_proxy: Option<String>,
    /// Where the adapter may keep files of its own (session state, agent logs).
    pub state_dir: PathBuf,
    /// The agent's own home (`.agensh/agents/<id>/`): a preset's HOME and settings files,
    /// never the user's and never inside the checkout.
    pub agent_home: PathBuf,
    /// The `agensh` binary (for the stdio MCP bridge of agents without HTTP MCP).
    pub agensh: PathBuf,
    /// Beaten by the adapter whenever the agent shows a sign of life or begins a step.
    pub heartbeat: Heartbeat,
    /// Raised by the turn loop to end the running turn early for urgent news; the adapter
    /// cancels the turn its own way ([`Agent::turn`]).
    pub interrupt: Interrupt,
}

/// A request to end the running turn early, for urgent news that waited too long
/// (`run.interrupt_after_secs`). Shared between the turn loop, which raises it, and the
/// adapter, which watches it during a turn: an ACP agent gets `session/cancel`, pi an
/// `abort`, the built-in agent stops its running command and ends the turn before its next
/// step. The turn then ends as the agent ends it (stop reason `cancelled`), its work kept.
#[derive(Debug, Clone, Default)]
pub struct Interrupt {
    inner: std::sync::Arc<(std::sync::atomic::AtomicBool, tokio::sync::Notify)>,
}

impl Interrupt {
    /// Asks the running turn to end.
    pub fn raise(&self) {
        self.inner
            .0
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.inner.1.notify_waiters();
    }

    /// Takes the request back (a new turn begins).
    pub fn clear(&self) {
        self.inner
            .0
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether the running turn was asked to end.
    pub fn is_raised(&self) -> bool {
        self.inner.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Resolves once the turn is asked to end (at once if it was). Cancel-safe.
    pub async fn raised(&self) {
        loop {
            let notified = self.inner.1.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_raised() {
                return;
            }
            notified.await;
        }
    }
}

/// When an agent last showed a sign of life (for the ACP adapter: a line on its output),
/// and what it is doing in its turn (a model request, a tool call), shared between its
/// adapter and the turn loop. The loop restarts an agent silent for longer than
/// `run.hang_timeout_secs` in the middle of a turn (agents that are
/// [`Agent::self_bounded`] need not beat it), and sends each step to the live view and the
/// hub ([`Heartbeat::watch`]).
#[derive(Debug, Clone)]
pub struct Heartbeat {
    last: std::sync::Arc<std::sync::atomic::AtomicI64>,
    progress: std::sync::Arc<tokio::sync::watch::Sender<Option<WorkerProgress>>>,
}

impl Default for Heartbeat {
    fn default() -> Self {
        Heartbeat {
            last: Default::default(),
            progress: std::sync::Arc::new(tokio::sync::watch::channel(None).0),
        }
    }
}

fn now_ms() -> i64 {
    agensh_domain::time::unix_ms(std::time::SystemTime::now())
}

impl Heartbeat {
    /// The agent is alive now.
    pub fn beat(&self) {
        self.last
            .store(now_ms(), std::sync::atomic::Ordering::Relaxed);
    }

    /// How long since the last beat (since the epoch when there was none).
    pub fn silent_for(&self) -> std::time::Duration {
        let last = self.last.load(std::sync::atomic::Ordering::Relaxed);
        std::time::Duration::from_millis(now_ms().saturating_sub(last).max(0) as u64)
    }

    /// The agent began `step` (e.g. `model request 3 (1,204 tokens in)`, `run: make test`):
    /// a sign of life, and what the live view shows until the next step.
    pub fn step(&self, step: impl Into<String>) {
        self.beat();
        let step = step.into();
        self.progress.send_modify(|p| {
            let (tokens, tokens_per_sec) = p
                .as_ref()
                .map_or((0, 0.0), |p| (p.tokens, p.tokens_per_sec));
            *p = Some(WorkerProgress {
                step,
                since: now_ms(),
                tokens,
                tokens_per_sec,
            });
        });
    }

    /// The turn has used `tokens` so far, and the last model reply came at `tokens_per_sec`.
    pub fn tokens(&self, tokens: u64, tokens_per_sec: f64) {
        self.beat();
        self.progress.send_modify(|p| {
            let p = p.get_or_insert_with(|| WorkerProgress {
                step: "model request".into(),
                since: now_ms(),
                tokens: 0,
                tokens_per_sec: 0.0,
            });
            p.tokens = tokens;
            p.tokens_per_sec = tokens_per_sec;
        });
    }

    /// Forgets the step (a turn begins or ended).
    pub fn clear(&self) {
        self.progress.send_replace(None);
    }

    /// A receiver that sees each change of the step.
    pub fn watch(&self) -> tokio::sync::watch::Receiver<Option<WorkerProgress>> {
        self.progress.subscribe()
    }
}

impl AgentContext {
    /// The MCP endpoint the agent's organization tools use: the node's proxy when there is
    /// one (it does `ship`'s commit and push in the checkout), else the hub's `/mcp`.
    pub fn mcp_url(&self) -> String {
        match &self.mcp_proxy {
            Some(url) => url.clone(),
            None => format!("{}/mcp", self.hub_url.trim_end_matches('/')),
        }
    }
}

/// Tokens and cost one turn (or many) used, as the agent's own stream reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    /// The part of `input_tokens` read from the provider's prompt cache.
    #[serde(default)]
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
    /// Turns whose agent reported no token counts (their tokens are not in the sums: shown
    /// as "not reported", never guessed).
    #[serde(default)]
    pub unreported_turns: u64,
}

impl Usage {
    /// The usage of a turn whose agent reported no counts.
    pub fn not_reported() -> Usage {
        Usage {
            unreported_turns: 1,
            ..Usage::default()
        }
    }

    /// Input and output tokens.
    pub fn tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, o: Usage) {
        self.input_tokens += o.input_tokens;
        self.cached_input_tokens += o.cached_input_tokens;
        self.output_tokens += o.output_tokens;
        self.cost_usd += o.cost_usd;
        self.unreported_turns += o.unreported_turns;
    }
}

/// Something that happened during a turn, for the turn log and the live view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TurnEvent {
    /// Text the agent said.
    Message { text: String },
    /// A tool the agent called, and how it ended. An ACP agent names a call by its title
    /// (`claim`, `git push origin HEAD`) and says its `kind` (`execute`, `edit`, `read`,
    /// `other` for the organization's tools); other agents by the tool, with no kind.
    ToolCall {
        name: String,
        status: String,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        kind: String,
    },
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnOutcome {
    /// The agent's reason (`end_turn`, `max_tokens`, `cancelled`, …).
    pub stop_reason: String,
    pub usage: Usage,
    pub events: Vec<TurnEvent>,
    /// Milliseconds the turn spent waiting for the model, where the adapter can tell (the
    /// built-in agent); 0 when it cannot.
    #[serde(default)]
    pub model_ms: u64,
    /// Milliseconds the turn spent in tools (commands, file tools, organization tools),
    /// where the adapter can tell.
    #[serde(default)]
    pub tools_ms: u64,
}

/// The error for a turn asked of an agent that was not started.
fn not_started() -> agensh_domain::Error {
    agensh_domain::Error::new(
        agensh_domain::ErrorKind::Conflict,
        "agent_not_started",
        "the agent is not running — start it before a turn",
    )
}

/// One kind of agent, driven turn by turn.
#[async_trait::async_trait]
pub trait Agent: Send {
    /// Starts the agent (its process and session) for the worker in `ctx`.
    async fn start(&mut self, ctx: &AgentContext) -> Result<()>;
    /// Runs one turn on `prompt`; returns when the agent ends the turn. When the context's
    /// [`Interrupt`] is raised during the turn, the adapter asks the agent to end it (the
    /// agent's own cancel) and returns as the agent ends it; the turn loop bounds the wait.
    async fn turn(&mut self, prompt: &str) -> Result<TurnOutcome>;
    /// Stops the agent and every process it started.
    async fn stop(&mut self);
    /// Resolves when the agent's process died between turns, with what is known of why;
    /// never for an agent with no process of its own (the default). The turn loop waits on
    /// it while the worker is idle, so a dead agent is restarted at once, not at the next
    /// prompt. Cancel-safe: dropped when the wait ends for another reason.
    async fn died(&mut self) -> agensh_domain::Error {
        std::future::pending().await
    }
    /// The processes the agent runs now, however they detached (those carrying its mark);
    /// none for an agent without processes of its own or not contained.
    fn processes(&self) -> Vec<u32> {
        Vec::new()
    }
    /// Whether the agent bounds every step of a turn by timeouts of its own (the built-in
    /// agent: model requests and commands), so the turn loop need not watch it for hangs.
    fn self_bounded(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::Interrupt;
    use std::time::Duration;

    #[tokio::test]
    async fn an_interrupt_wakes_the_turn_that_waits_for_it_until_taken_back() {
        let i = Interrupt::default();
        let waiter = tokio::spawn({
            let i = i.clone();
            async move { i.raised().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "not raised yet");
        i.raise();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the raise wakes it")
            .unwrap();
        // Raised: a new wait ends at once, until the next turn takes it back.
        assert!(i.is_raised());
        tokio::time::timeout(Duration::from_millis(100), i.raised())
            .await
            .expect("at once");
        i.clear();
        assert!(!i.is_raised());
        assert!(
            tokio::time::timeout(Duration::from_millis(50), i.raised())
                .await
                .is_err(),
            "cleared"
        );
    }
}
