//! The `builtin` adapter: a small agent loop over any OpenAI-compatible chat endpoint
//! (`POST {base}/chat/completions`), with workspace tools (files and a shell in the
//! worker's checkout, [`workspace`]) and the organization tools from the hub's MCP server.
//!
//! Two calling styles ([`ToolStyle`]): `tools` sends OpenAI function definitions and runs
//! the `tool_calls` that come back; `json` sends no tools but a `response_format` JSON
//! schema with one branch per tool, so a constrained decoder (llama.cpp) makes even a 0.5B
//! model produce one valid action per reply. `auto` starts with tools and switches to json
//! for the session when the first reply is prose.
//!
//! A turn is a loop of requests until the model ends it (no tool call, or `end_turn`) or
//! `max_steps_per_turn` requests. The conversation is kept within the context window
//! ([`history`]); everything goes to `builtin.jsonl` in the state directory ([`log`]).

pub mod actions;
pub mod chat;
pub mod code;
pub mod content;
pub mod history;
pub mod log;
pub mod loops;
pub mod prompt;
pub mod workspace;

use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agensh_client::mcp::McpClient;
use agensh_domain::{Error, ErrorKind, Result};
use serde_json::{json, Value};

use self::actions::{Action, ToolSpec};
use self::chat::{ChatError, Endpoint, Reply};
use self::history::{cut_text, one_line, History};
use self::log::{Log, LOG_FILE};
use self::loops::{Loops, Verdict};
use self::workspace::{Output, Workspace};
use super::{Agent, AgentContext, TurnEvent, TurnOutcome, Usage};

/// How the model is asked to call tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ToolStyle {
    /// Tool calls; switch to JSON actions if the first reply of the session is prose.
    #[default]
    Auto,
    /// OpenAI tool calls (`tools`, `tool_choice: "auto"`).
    Tools,
    /// One JSON action per reply, constrained by a `response_format` JSON schema.
    Json,
}

impl FromStr for ToolStyle {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(ToolStyle::Auto),
            "tools" => Ok(ToolStyle::Tools),
            "json" => Ok(ToolStyle::Json),
            other => Err(Error::invalid(
                "unknown_tool_style",
                format!(
                    "unknown tool style {other:?}: use auto, tools (OpenAI tool calls) or json (JSON-schema actions, for small local models)"
                ),
            )),
        }
    }
}

impl std::fmt::Display for ToolStyle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ToolStyle::Auto => "auto",
            ToolStyle::Tools => "tools",
            ToolStyle::Json => "json",
        })
    }
}

/// How much the agent is shown: everything, or what a small local model can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Every tool, the full system prompt and worker prompt.
    #[default]
    Full,
    /// Small mode: a short system prompt and worker prompt, the few tools a part needs
    /// ([`actions::small_specs`]), the claimed part's files shown with the claim, and only
    /// FAIL records on the board (`ship` posts the PATCH_SUMMARY).
    Small,
}

impl Mode {
    /// The mode for the setting `model.mode` (`auto`, `small` or `full`); `auto` is small
    /// on the local model agensh serves itself (`local`) and full on any other endpoint.
    pub fn choose(setting: &str, local: bool) -> Result<Mode> {
        match setting.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Ok(if local { Mode::Small } else { Mode::Full }),
            "small" => Ok(Mode::Small),
            "full" => Ok(Mode::Full),
            other => Err(Error::invalid(
                "unknown_mode",
                format!("unknown model mode {other:?}: use auto (small on the local model), small or full"),
            )),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Full => "full",
            Mode::Small => "small",
        })
    }
}

/// The endpoint, the model and the limits of the built-in agent.
#[derive(Clone)]
pub struct BuiltinConfig {
    /// OpenAI-compatible base URL, e.g. `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    pub model: String,
    /// Sent as a bearer token; never logged.
    pub api_key: Option<String>,
    /// Reach the model through the hub's gateway (`{hub}/model/openai/v1`) with the
    /// worker's own token, instead of `base_url` with `api_key`.
    pub gateway: bool,
    pub style: ToolStyle,
    pub mode: Mode,
    /// The model's context window in tokens; the conversation is compacted near it.
    pub context_tokens: u32,
    pub max_reply_tokens: u32,
    /// Model requests per turn before the turn ends with stop reason `max_steps`.
    pub max_steps_per_turn: u32,
    /// Default timeout of a `run` command.
    pub command_timeout: Duration,
    /// Characters of one tool output shown to the model.
    pub output_cap: usize,
    pub temperature: f32,
    pub request_timeout: Duration,
}

impl Default for BuiltinConfig {
    fn default() -> Self {
        BuiltinConfig {
            base_url: "http://127.0.0.1:8080/v1".into(),
            model: "default".into(),
            api_key: None,
            gateway: false,
            style: ToolStyle::Auto,
            mode: Mode::Full,
            context_tokens: 8192,
            max_reply_tokens: 1024,
            max_steps_per_turn: 24,
            command_timeout: Duration::from_secs(120),
            output_cap: 6000,
            temperature: 0.2,
            request_timeout: Duration::from_secs(600),
        }
    }
}

impl std::fmt::Debug for BuiltinConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltinConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("gateway", &self.gateway)
            .field("style", &self.style)
            .field("mode", &self.mode)
            .field("context_tokens", &self.context_tokens)
            .field("max_reply_tokens", &self.max_reply_tokens)
            .field("max_steps_per_turn", &self.max_steps_per_turn)
            .field("command_timeout", &self.command_timeout)
            .field("output_cap", &self.output_cap)
            .field("temperature", &self.temperature)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

/// The built-in agent.
pub struct BuiltinAgent {
    cfg: BuiltinConfig,
    session: Option<Session>,
    /// Process groups of commands that may still run (shared with the workspace).
    groups: Option<Arc<Mutex<Vec<agensh_process::ProcessGroup>>>>,
    /// The worker's cgroup its commands run in, when the node has cgroups.
    cgroup: Option<crate::adapters::limits::AgentCgroup>,
}

/// One session: from `start` to `stop`.
struct Session {
    worker: String,
    mcp: Option<McpClient>,
    specs: Vec<ToolSpec>,
    /// The effective style is JSON actions.
    json: bool,
    /// Auto style, and no reply seen yet: a prose first reply switches to JSON.
    auto_pending: bool,
    /// Small mode ([`Mode::Small`]).
    small: bool,
    /// The hub offers `ship`.
    ship: bool,
    history: History,
    endpoint: Endpoint,
    log: Log,
    ws: Workspace,
    tools: Value,
    tools_chars: usize,
    schema: Value,
    /// Milliseconds spent in tools during the current turn.
    tools_ms: u64,
    /// Repeats and cycles of actions: small models loop.
    loops: Loops,
    /// The last action repeated itself or a cycle too often: the turn ends after this step.
    looping: bool,
    /// Where each model request and tool call is reported as the turn's current step.
    pulse: crate::adapters::Heartbeat,
    /// Raised when the turn is interrupted: the turn ends before its next step, a model
    /// request in flight is dropped and a running command stopped (by the workspace).
    interrupt: crate::adapters::Interrupt,
    /// The output of the last `run` when it failed, for small mode's code request.
    last_failure: Option<String>,
    /// The failed check run right after small mode's write, to become `last_failure`.
    failure_after_write: Option<String>,
    /// Small mode: the ids of the claims this session made and has not let go.
    held: Vec<String>,
    /// Tokens and time of requests made inside a tool (small mode's code request), added
    /// to the turn's after the step.
    side_usage: Usage,
    side_ms: u64,
}

impl BuiltinAgent {
    pub fn new(cfg: BuiltinConfig) -> Self {
        BuiltinAgent {
            cfg,
            session: None,
            groups: None,
            cgroup: None,
        }
    }

    /// The same agent with its commands started in the worker's cgroup (its memory limit;
    /// the agent itself runs inside the node).
    pub fn with_cgroup(mut self, cgroup: Option<crate::adapters::limits::AgentCgroup>) -> Self {
        self.cgroup = cgroup;
        self
    }

    pub fn config(&self) -> &BuiltinConfig {
        &self.cfg
    }
}

impl Drop for BuiltinAgent {
    fn drop(&mut self) {
        if let Some(g) = &self.groups {
            workspace::kill_groups(g);
        }
    }
}

#[async_trait::async_trait]
impl Agent for BuiltinAgent {
    async fn start(&mut self, ctx: &AgentContext) -> Result<()> {
        self.stop().await;
        let cfg = &self.cfg;
        std::fs::create_dir_all(&ctx.state_dir).map_err(|e| {
            Error::internal(format!("cannot create {}: {e}", ctx.state_dir.display()))
        })?;
        let mut log = Log::open(&ctx.state_dir.join(LOG_FILE));
        let env = vec![
            ("AGENSH_HUB".to_string(), ctx.hub_url.clone()),
            ("AGENSH_TOKEN".to_string(), ctx.token.clone()),
            ("AGENSH_WORKER".to_string(), ctx.worker.clone()),
        ];
        let ws = Workspace::new(&ctx.checkout, env, cfg.output_cap)
            .map_err(|e| {
                Error::new(
                    ErrorKind::Internal,
                    "no_checkout",
                    format!(
                        "the worker's checkout {} cannot be used: {e}",
                        ctx.checkout.display()
                    ),
                )
            })?
            .with_cgroup(self.cgroup.clone())
            .with_interrupt(ctx.interrupt.clone());
        let mcp = McpClient::connect(&ctx.mcp_url(), &ctx.token).await?;
        let mut specs = actions::workspace_specs();
        for t in mcp.list_tools().await? {
            if specs.iter().any(|s| s.name == t.name) || t.name == actions::END_TURN {
                tracing::warn!(
                    "the hub offers a tool named {} like a built-in tool; it is left out",
                    t.name
                );
                continue;
            }
            specs.push(actions::org_spec(&t));
        }
        let small = cfg.mode == Mode::Small;
        if small {
            specs = actions::small_specs(specs);
        }
        let ship = specs.iter().any(|s| s.org && s.name == "ship");
        let json = cfg.style == ToolStyle::Json;
        let system = system_prompt(&ctx.worker, &specs, json, small);
        // Full tool definitions unless they would take more than a quarter of the window.
        let mut tools = actions::openai_tools(&specs, false);
        let mut short_tools = false;
        if tools.to_string().chars().count() as f64 / 3.5 > cfg.context_tokens as f64 / 4.0 {
            tools = actions::openai_tools(&specs, true);
            short_tools = true;
        }
        let tools_chars = tools.to_string().chars().count();
        let schema = actions::action_schema(&specs);
        let (base_url, api_key) = if cfg.gateway {
            let base = agensh_domain::agents::ModelApi::OpenAiChat.gateway_base(&ctx.hub_url);
            (format!("{base}/v1"), Some(ctx.token.clone()))
        } else {
            (cfg.base_url.clone(), cfg.api_key.clone())
        };
        log.write(json!({
            "event": "start",
            "worker": ctx.worker,
            "endpoint": base_url,
            "model": cfg.model,
            "style": cfg.style.to_string(),
            "mode": cfg.mode.to_string(),
            "context_tokens": cfg.context_tokens,
            "tools": specs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            "system_prompt_chars": system.chars().count(),
            "system_prompt": system,
            "tools_chars": if json { 0 } else { tools_chars },
            "short_tool_definitions": short_tools,
        }));
        self.groups = Some(ws.groups());
        self.session = Some(Session {
            worker: ctx.worker.clone(),
            mcp: Some(mcp),
            history: History::new(system, cfg.context_tokens),
            endpoint: Endpoint::new(&base_url, api_key, cfg.request_timeout),
            specs,
            json,
            auto_pending: cfg.style == ToolStyle::Auto,
            small,
            ship,
            log,
            ws,
            tools,
            tools_chars,
            schema,
            tools_ms: 0,
            loops: Loops::default(),
            looping: false,
            pulse: ctx.heartbeat.clone(),
            interrupt: ctx.interrupt.clone(),
            last_failure: None,
            held: Vec::new(),
            failure_after_write: None,
            side_usage: Usage::default(),
            side_ms: 0,
        });
        Ok(())
    }

    async fn turn(&mut self, prompt: &str) -> Result<TurnOutcome> {
        let cfg = self.cfg.clone();
        let s = self.session.as_mut().ok_or_else(|| {
            Error::new(
                ErrorKind::Conflict,
                "agent_not_started",
                "the built-in agent is not started — start it before a turn",
            )
        })?;
        s.turn(&cfg, prompt).await
    }

    fn self_bounded(&self) -> bool {
        true
    }

    async fn stop(&mut self) {
        if let Some(mut s) = self.session.take() {
            s.ws.kill_all();
            // A turn cut off by the stop (the run's end, a restart) keeps its work: what it
            // left uncommitted is committed as at the end of a turn.
            if let Some(commit) =
                commit_leftovers(s.ws.root(), &s.worker, "when the agent stopped").await
            {
                s.log
                    .write(json!({ "event": "commit_at_stop", "result": commit }));
            }
            s.log.write(json!({ "event": "stop" }));
            // The MCP client goes with the session.
        }
        if let Some(g) = self.groups.take() {
            workspace::kill_groups(&g);
        }
    }
}

/// The system prompt for the mode.
/// The stop reason of a turn ended by an interruption (as ACP names it).
const CANCELLED: &str = "cancelled";

fn system_prompt(worker: &str, specs: &[ToolSpec], json: bool, small: bool) -> String {
    if small {
        prompt::small_system_prompt(worker, specs, json)
    } else {
        prompt::system_prompt(worker, specs, json)
    }
}

/// The labels of the PATCH_SUMMARY records in a `board_grep` answer, in order, once each:
/// each record's line ends with `#<label>` (then maybe `(+detail)`).
fn shipped_labels(answer: &str) -> Vec<String> {
    let mut labels: Vec<String> = Vec::new();
    for line in answer.lines().filter(|l| l.contains("/PATCH_SUMMARY ")) {
        let Some((_, tail)) = line.rsplit_once(" #") else {
            continue;
        };
        let label = tail.split_whitespace().next().unwrap_or("");
        if !label.is_empty() && !labels.iter().any(|l| l == label) {
            labels.push(label.to_string());
        }
    }
    labels
}

/// The id of the claim a `claim` answer made ("claimed G7 [...]"), or "".
fn claim_id(answer: &str) -> String {
    answer
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("claimed "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or("")
        .to_string()
}

/// Brings main's latest code into the checkout before a new part: what is left is
/// committed, a merge or rebase half done is given up, and `origin/main` is merged with
/// main's side taken where they conflict. The sentence for the model.
async fn sync_with_main(checkout: &std::path::Path, worker: &str) -> String {
    let git = agensh_workspace::git::Git::worktree(checkout);
    if agensh_workspace::ship::operation_in_progress(&checkout.join(".git")) {
        let _ = git.run(["merge", "--abort"]).await;
        let _ = git.run(["rebase", "--abort"]).await;
    }
    let _ = commit_leftovers(checkout, worker, "before main was merged in").await;
    if let Err(e) = git.run(["fetch", "-q", "origin"]).await {
        return format!(
            "Could not fetch main ({}); your checkout is as it was.",
            e.message
        );
    }
    match git
        .run(["merge", "-q", "--no-edit", "-X", "theirs", "origin/main"])
        .await
    {
        Ok(_) => "Your checkout has main's latest code.".to_string(),
        Err(e) => {
            let _ = git.run(["merge", "--abort"]).await;
            format!(
                "Could not bring main's latest code into your checkout ({}); it is as it was.",
                one_line(&e.message, 200)
            )
        }
    }
}

/// Work is never left uncommitted between turns: changes in the checkout are committed to
/// the worker's branch (not pushed), unless a merge or rebase is half done — at the end of
/// a turn, when the agent stops and before main is merged in; `when` says which, in the
/// commit message and the answer. Returns what happened, or `None` when there was nothing
/// to commit.
async fn commit_leftovers(checkout: &std::path::Path, worker: &str, when: &str) -> Option<String> {
    let git = agensh_workspace::git::Git::worktree(checkout);
    let status = git.run(["status", "--porcelain"]).await;
    match status {
        Ok(s) if s.trim().is_empty() => return None,
        Ok(_) => {}
        Err(e) => return Some(format!("could not read git status: {}", e.message)),
    }
    if agensh_workspace::ship::operation_in_progress(&checkout.join(".git")) {
        return Some("left changes uncommitted: a merge or rebase is in progress".into());
    }
    if let Err(e) = git.run(["add", "-A"]).await {
        return Some(format!("could not stage changes: {}", e.message));
    }
    let message = format!("{worker}: work in progress, committed {when}");
    match git
        .run(["commit", "-q", "--no-verify", "-m", &message])
        .await
    {
        Ok(_) => Some(format!("committed the checkout's changes {when}")),
        Err(e) => Some(format!("could not commit: {}", e.message)),
    }
}

impl Session {
    async fn turn(&mut self, cfg: &BuiltinConfig, prompt: &str) -> Result<TurnOutcome> {
        let started = Instant::now();
        let shortened = self
            .small
            .then(|| prompt::small_worker_prompt(prompt, &self.worker, self.ship))
            .flatten();
        if let Some(short) = &shortened {
            self.log.write(json!({
                "event": "small_worker_prompt",
                "prompt_chars": prompt.chars().count(),
                "small_chars": short.chars().count(),
            }));
        }
        let prompt = shortened.as_deref().unwrap_or(prompt);
        self.history.begin_turn(prompt);
        self.log.write(json!({
            "event": "turn_start",
            "prompt_chars": prompt.chars().count(),
            "messages": self.history.len(),
        }));
        let mut usage = Usage::default();
        let mut events = Vec::new();
        let mut steps = 0u32;
        let mut model_ms = 0u64;
        self.tools_ms = 0;
        let mut hard_compacted = false;
        let interrupt = self.interrupt.clone();
        let stop_reason = loop {
            if interrupt.is_raised() {
                self.log
                    .write(json!({ "event": "interrupted", "step": steps }));
                break CANCELLED.to_string();
            }
            if steps >= cfg.max_steps_per_turn {
                break "max_steps".to_string();
            }
            self.fit_context(cfg, false);
            let body = self.request_body(cfg);
            let sent = self.history.len();
            let estimate = self.history.estimate(self.extra_chars());
            self.log.write(json!({
                "event": "request",
                "step": steps + 1,
                "style": if self.json { "json" } else { "tools" },
                "messages": sent,
                "chars": self.history.chars(),
                "estimated_tokens": estimate,
            }));
            self.pulse.step(format!(
                "model request {} ({estimate} tokens in)",
                steps + 1
            ));
            let asked = Instant::now();
            let reply = tokio::select! {
                r = self.endpoint.complete(&body) => r,
                // The request is dropped: the turn ends before it is answered.
                _ = interrupt.raised() => continue,
            };
            let reply = match reply {
                Ok(r) => r,
                Err(ChatError::ContextFull(msg)) if self.auto_pending && !self.json => {
                    self.log
                        .write(json!({ "event": "context_full", "answer": msg }));
                    self.switch_to_json("the tool definitions do not fit the context window");
                    continue;
                }
                Err(ChatError::ContextFull(msg)) if !hard_compacted => {
                    hard_compacted = true;
                    self.log
                        .write(json!({ "event": "context_full", "answer": msg }));
                    self.fit_context(cfg, true);
                    continue;
                }
                Err(ChatError::ContextFull(msg)) => {
                    let e = Error::new(
                        ErrorKind::Internal,
                        "model_context_full",
                        format!(
                            "the model endpoint {} says the prompt does not fit its context even after compaction ({msg}) — set context_tokens to the context one request gets on the server (with llama.cpp: n_ctx divided by the parallel slots), raise the server's context, or use style json (no tool definitions in the prompt)",
                            self.endpoint.url()
                        ),
                    );
                    self.log
                        .write(json!({ "event": "error", "message": e.message }));
                    return Err(e);
                }
                Err(ChatError::Failed(e)) => {
                    self.log
                        .write(json!({ "event": "error", "message": e.message }));
                    return Err(e);
                }
            };
            steps += 1;
            model_ms += asked.elapsed().as_millis() as u64;
            usage.input_tokens += reply.prompt_tokens.unwrap_or(0);
            usage.output_tokens += reply.completion_tokens;
            let per_sec = reply.completion_tokens as f64 / asked.elapsed().as_secs_f64().max(1e-3);
            self.pulse
                .tokens(usage.input_tokens + usage.output_tokens, per_sec);
            self.history.set_baseline(reply.prompt_tokens, sent);
            self.log.write(json!({
                "event": "reply",
                "ms": asked.elapsed().as_millis() as u64,
                "content": reply.content,
                "tool_calls": reply.tool_calls.iter().map(|c| json!({ "id": c.id, "name": c.name, "arguments": c.arguments })).collect::<Vec<_>>(),
                "finish_reason": reply.finish_reason,
                "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": reply.completion_tokens,
            }));
            let done = if self.json {
                self.json_step(cfg, reply, &mut events).await
            } else {
                if reply.tool_calls.is_empty() && self.auto_pending {
                    // A prose first reply: this endpoint does not do tool calls. Redo the
                    // request with JSON actions, for the rest of the session.
                    self.switch_to_json("the first reply had no tool calls");
                    steps -= 1;
                    continue;
                }
                self.auto_pending = false;
                self.tools_step(cfg, reply, &mut events).await
            };
            usage += std::mem::take(&mut self.side_usage);
            model_ms += std::mem::take(&mut self.side_ms);
            if let Some(reason) = done {
                break reason;
            }
        };
        if let Some(commit) =
            commit_leftovers(self.ws.root(), &self.worker, "at the end of the turn").await
        {
            self.log
                .write(json!({ "event": "commit_at_turn_end", "result": commit }));
            events.push(TurnEvent::Message {
                text: format!("agensh: {commit}"),
            });
        }
        let outcome = TurnOutcome {
            stop_reason,
            usage,
            events,
            model_ms,
            tools_ms: self.tools_ms,
        };
        self.log.write(json!({
            "event": "turn_end",
            "stop_reason": outcome.stop_reason,
            "steps": steps,
            "usage": outcome.usage,
            "ms": started.elapsed().as_millis() as u64,
        }));
        Ok(outcome)
    }

    /// Continues the session with JSON actions (auto style).
    fn switch_to_json(&mut self, why: &str) {
        self.auto_pending = false;
        self.json = true;
        self.history
            .set_system(system_prompt(&self.worker, &self.specs, true, self.small));
        self.log
            .write(json!({ "event": "style_switch", "to": "json", "why": why }));
    }

    /// Whether small mode's board takes the record `args` would post.
    fn board_takes(&self, args: &Value) -> bool {
        let kind = args.get("kind").and_then(Value::as_str).unwrap_or("");
        actions::small_board_kinds(self.ship)
            .iter()
            .any(|k| k.eq_ignore_ascii_case(kind.trim()))
    }

    /// Characters the request adds besides the messages.
    fn extra_chars(&self) -> usize {
        if self.json {
            0
        } else {
            self.tools_chars
        }
    }

    fn request_body(&self, cfg: &BuiltinConfig) -> Value {
        let mut body = json!({
            "model": cfg.model,
            "messages": self.history.messages(),
            "max_tokens": cfg.max_reply_tokens,
            "temperature": cfg.temperature,
            "stream": false,
        });
        if self.json {
            body["response_format"] = json!({
                "type": "json_schema",
                "json_schema": { "name": "action", "schema": self.schema },
            });
        } else {
            body["tools"] = self.tools.clone();
            body["tool_choice"] = json!("auto");
        }
        body
    }

    /// Compacts the conversation when the next prompt would come near the window; `hard`
    /// after the endpoint said it does not fit: keep one exchange, cut its results.
    fn fit_context(&mut self, cfg: &BuiltinConfig, hard: bool) {
        let window = cfg.context_tokens as u64;
        let threshold = (window * 3 / 4)
            .min(window.saturating_sub(cfg.max_reply_tokens as u64))
            .max(window / 4);
        let extra = self.extra_chars();
        let before = self.history.estimate(extra);
        if hard {
            self.history.compact(1, Some(cfg.output_cap / 4));
            self.log.write(json!({
                "event": "compact",
                "hard": true,
                "before_tokens": before,
                "after_tokens": self.history.estimate(extra),
            }));
            return;
        }
        if self.auto_pending && !self.json && self.history.len() <= 2 && before > threshold {
            self.switch_to_json("the tool definitions do not fit the context window");
            return self.fit_context(cfg, false);
        }
        let mut keep = 3usize;
        while self.history.estimate(extra) > threshold {
            let est = self.history.estimate(extra);
            let cap = (keep == 0).then_some(cfg.output_cap / 4);
            if self.history.compact(keep, cap) {
                self.log.write(json!({
                    "event": "compact",
                    "keep_exchanges": keep,
                    "before_tokens": est,
                    "after_tokens": self.history.estimate(extra),
                    "threshold": threshold,
                }));
            }
            if keep == 0 {
                break;
            }
            keep -= 1;
        }
    }

    /// A reply in tools style; the stop reason when it ends the turn.
    async fn tools_step(
        &mut self,
        cfg: &BuiltinConfig,
        reply: Reply,
        events: &mut Vec<TurnEvent>,
    ) -> Option<String> {
        let text = reply.content.trim().to_string();
        if !text.is_empty() {
            events.push(TurnEvent::Message { text: text.clone() });
        }
        if reply.tool_calls.is_empty() {
            let line = (!text.is_empty()).then(|| format!("you said: {}", one_line(&text, 120)));
            self.history.push_assistant(
                json!({ "role": "assistant", "content": reply.content }),
                line,
            );
            return Some(if reply.finish_reason == "length" {
                "max_tokens".to_string()
            } else {
                "end_turn".to_string()
            });
        }
        let calls: Vec<Value> = reply
            .tool_calls
            .iter()
            .map(|c| {
                json!({
                    "id": c.id,
                    "type": "function",
                    "function": { "name": c.name, "arguments": c.arguments },
                })
            })
            .collect();
        let content = if reply.content.is_empty() {
            Value::Null
        } else {
            Value::String(reply.content.clone())
        };
        self.history.push_assistant(
            json!({ "role": "assistant", "content": content, "tool_calls": calls }),
            None,
        );
        for call in reply.tool_calls {
            let args = parse_arguments(&call.arguments);
            let (out, line) = self.execute(cfg, &call.name, args).await;
            events.push(tool_event(&call.name, &out));
            self.history.push_result(
                json!({ "role": "tool", "tool_call_id": call.id, "content": out.text }),
                line,
            );
        }
        self.stuck()
    }

    /// A reply in JSON style; the stop reason when it ends the turn.
    async fn json_step(
        &mut self,
        cfg: &BuiltinConfig,
        reply: Reply,
        events: &mut Vec<TurnEvent>,
    ) -> Option<String> {
        self.history.push_assistant(
            json!({ "role": "assistant", "content": reply.content }),
            None,
        );
        let specs = &self.specs;
        let known = |n: &str| specs.iter().any(|s| s.name == n);
        match actions::parse_action(&reply.content, &known) {
            Ok(Action::EndTurn { summary }) => {
                if !summary.trim().is_empty() {
                    events.push(TurnEvent::Message {
                        text: summary.trim().to_string(),
                    });
                }
                Some("end_turn".to_string())
            }
            Ok(Action::Tool { name, args }) => {
                let (out, line) = self.execute(cfg, &name, Ok(args)).await;
                events.push(tool_event(&name, &out));
                self.history.push_result(
                    json!({ "role": "user", "content": format!("result of {name}:\n{}", out.text) }),
                    line,
                );
                self.stuck()
            }
            Err(e) => {
                let mut text = format!("error: {e}");
                if reply.finish_reason == "length" {
                    text.push_str(". Your reply was cut at the token limit: make it shorter (e.g. write a small file, then add to it with edit_file)");
                }
                self.log
                    .write(json!({ "event": "invalid_action", "error": text }));
                self.history.push_result(
                    json!({ "role": "user", "content": text }),
                    "an invalid action (answered with an error)".to_string(),
                );
                None
            }
        }
    }

    /// Ends the turn when the agent has repeated itself, or a cycle of actions, too often.
    fn stuck(&mut self) -> Option<String> {
        if !self.looping {
            return None;
        }
        self.log.write(json!({ "event": "repeating" }));
        self.looping = false;
        self.loops.reset();
        Some("repeating".to_string())
    }

    /// Runs one tool; its output (cut to the cap) and its line for a recap.
    async fn execute(
        &mut self,
        cfg: &BuiltinConfig,
        name: &str,
        args: std::result::Result<Value, String>,
    ) -> (Output, String) {
        let started = Instant::now();
        let given = args.clone().unwrap_or(Value::Null);
        self.pulse.step(step_of(name, &given));
        let key = match &args {
            Ok(v) => format!("{name} {v}"),
            Err(e) => format!("{name} {e}"),
        };
        let out = match args {
            // The rest of a reply's calls once the turn was interrupted.
            _ if self.interrupt.is_raised() => Output::error(format!(
                "{name} was not run: the turn was interrupted for urgent news"
            )),
            Err(e) => Output::error(format!(
                "the arguments of {name} are not valid JSON ({e}); send a JSON object"
            )),
            Ok(args) => self.dispatch(cfg, name, &args).await,
        };
        let mut out = Output {
            text: cut_text(&out.text, cfg.output_cap),
            ok: out.ok,
        };
        if self.small && name == "claim" && out.ok {
            out = self.take_part(&given, out).await;
        }
        if self.small && name == "ship" && out.ok {
            self.held.clear();
        }
        match name {
            "run" => self.last_failure = (!out.ok).then(|| out.text.clone()),
            "write_file" if out.ok => self.last_failure = self.failure_after_write.take(),
            _ => {}
        }
        let line = history::recap_line(name, &given, out.ok, &out.text);
        match self.loops.push(name, key, &out.text) {
            Verdict::Fine => {}
            Verdict::Warn(note) => out.text.push_str(&format!("\n\n{note}")),
            Verdict::End(note) => {
                out.text.push_str(&format!("\n\n{note}"));
                self.looping = true;
            }
        }
        let ms = started.elapsed().as_millis() as u64;
        self.tools_ms += ms;
        self.log.write(json!({
            "event": "tool",
            "name": name,
            "ok": out.ok,
            "ms": ms,
            "result_chars": out.text.chars().count(),
            "result": one_line(&out.text, 300),
        }));
        (out, line)
    }

    async fn dispatch(&mut self, cfg: &BuiltinConfig, name: &str, args: &Value) -> Output {
        let args = match args {
            Value::Object(_) => args.clone(),
            Value::Null => json!({}),
            _ => {
                return Output::error(format!(
                "the arguments of {name} must be a JSON object, like {{\"path\": \"README.md\"}}"
            ))
            }
        };
        let args = if self.small && matches!(name, "claim" | "board_write" | "ship") {
            actions::small_label(args)
        } else {
            args
        };
        let bad = |detail: String| -> Output {
            let sig = self
                .specs
                .iter()
                .find(|s| s.name == name)
                .map(actions::signature)
                .unwrap_or_default();
            Output::error(format!(
                "bad arguments for {name}: {detail}; expected {sig}"
            ))
        };
        macro_rules! arg {
            (str $k:literal) => {
                match str_arg(&args, $k) {
                    Ok(v) => v,
                    Err(e) => return bad(e),
                }
            };
            (opt_str $k:literal) => {
                match opt_str_arg(&args, $k) {
                    Ok(v) => v,
                    Err(e) => return bad(e),
                }
            };
            (opt_u64 $k:literal) => {
                match opt_u64_arg(&args, $k) {
                    Ok(v) => v,
                    Err(e) => return bad(e),
                }
            };
        }
        match name {
            "list_files" => {
                let path = arg!(opt_str "path");
                self.ws.list_files(path)
            }
            "read_file" => {
                let path = arg!(str "path");
                let offset = arg!(opt_u64 "offset_line");
                let max = arg!(opt_u64 "max_lines");
                self.ws.read_file(path, offset, max)
            }
            "write_file" => {
                let path = arg!(str "path");
                if self.small && args.get("content").is_none_or(Value::is_null) {
                    return self.write_from_code(cfg, path).await;
                }
                let content = arg!(str "content");
                self.ws.write_file(path, content)
            }
            "edit_file" => {
                let path = arg!(str "path");
                let old = arg!(str "old");
                let new = arg!(str "new");
                self.ws.edit_file(path, old, new)
            }
            "run" => {
                let command = arg!(str "command");
                // Small models often write 0 for "no particular timeout".
                let timeout = arg!(opt_u64 "timeout_secs")
                    .filter(|&s| s > 0)
                    .map(|s| Duration::from_secs(s.min(workspace::MAX_COMMAND_SECS)))
                    .unwrap_or(cfg.command_timeout);
                let mut out = match content::unittest_dotted(command).filter(|_| self.small) {
                    Some(dotted) => {
                        let mut out = self.ws.run(&dotted, timeout).await;
                        out.text.push_str(&format!(
                            "\n\n(ran as: {dotted} — unittest takes module names with dots)"
                        ));
                        out
                    }
                    None => self.ws.run(command, timeout).await,
                };
                if self.small && self.ship && out.ok {
                    out.text.push_str(
                        "\n\nIf these are your part's tests and they pass, call ship now.",
                    );
                }
                out
            }
            "claim" if self.small => self.claim_part(actions::small_claim(args)).await,
            "board_write" if self.small && self.board_takes(&args) => {
                let args = actions::small_record(args);
                self.call_org(name, args).await
            }
            "board_write" if self.small && !self.board_takes(&args) => {
                Output::error(format!(
                    "in small mode the board takes only {} records; nothing was posted. {} — go on with your part",
                    actions::small_board_kinds(self.ship).join(" and "),
                    if self.ship {
                        "Post a FAIL when an approach did not work; ship posts the PATCH_SUMMARY"
                    } else {
                        "Post a FAIL when an approach did not work, a PATCH_SUMMARY after a merge"
                    }
                ))
            }
            _ if self.specs.iter().any(|s| s.org && s.name == name) => {
                self.call_org(name, args).await
            }
            _ => {
                let names: Vec<&str> = self.specs.iter().map(|s| s.name.as_str()).collect();
                Output::error(format!(
                    "unknown tool {name:?}; the tools are: {}",
                    names.join(", ")
                ))
            }
        }
    }
}

impl Session {
    /// Calls an organization tool over MCP; its answer with the notices that came with it.
    async fn call_org(&self, name: &str, args: Value) -> Output {
        let Some(mcp) = &self.mcp else {
            return Output::error("the organization tools are not connected");
        };
        match mcp.call_tool(name, args).await {
            Ok(r) => {
                let mut text = r.text;
                if let Some(n) = r.notices {
                    if !text.is_empty() {
                        text.push_str("\n\n");
                    }
                    text.push_str(&n);
                }
                if text.is_empty() {
                    text = "(no output)".into();
                }
                Output { text, ok: !r.is_error }
            }
            Err(e) => Output::error(format!(
                "the organization tool {name} could not be called: {} — try again later or work on without it",
                e.message
            )),
        }
    }

    /// Small mode, before a claim: a part already shipped (a PATCH_SUMMARY with its label)
    /// is not claimed again; the answer lists what is shipped so far, so the model can pick
    /// what is left or see that nothing is. Otherwise the claim is made.
    async fn claim_part(&mut self, args: Value) -> Output {
        let label = args
            .get("label")
            .and_then(Value::as_str)
            .map(str::trim)
            .unwrap_or("")
            .to_string();
        if !label.is_empty() {
            let found = self
                .call_org("board_grep", json!({ "query": "kind:PATCH_SUMMARY" }))
                .await;
            let shipped = if found.ok {
                shipped_labels(&found.text)
            } else {
                Vec::new()
            };
            if shipped.iter().any(|l| l.eq_ignore_ascii_case(&label)) {
                self.log.write(json!({
                    "event": "claim_shipped_already",
                    "label": label,
                    "shipped": shipped,
                }));
                return Output::error(format!(
                    "the part {label} was shipped already; nothing was claimed. Shipped so far: {}. Claim a part that is not in that list; if every part is shipped, end your turn.",
                    shipped.join(", ")
                ));
            }
        }
        self.call_org("claim", args).await
    }

    /// Small mode, after a claim was made: one part at a time, started from main's latest
    /// code. A claim that collides with another worker's is released at once with "claim a
    /// different part".
    /// Otherwise the claims held before are let go, main is merged into the checkout (main
    /// wins where they conflict: a small model cannot settle a merge, and a branch left
    /// conflicting refused every later ship), and the part's files are named.
    async fn take_part(&mut self, given: &Value, claimed: Output) -> Output {
        if claimed.text.contains("OVERLAP") {
            return self.yield_claim(claimed).await;
        }
        let id = claim_id(&claimed.text);
        let mut out = claimed;
        for old in std::mem::take(&mut self.held) {
            if old != id {
                let r = self.call_org("release", json!({ "id": old })).await;
                self.log
                    .write(json!({ "event": "claim_let_go", "claim": old, "ok": r.ok }));
            }
        }
        if !id.is_empty() {
            self.held.push(id);
        }
        let synced = sync_with_main(self.ws.root(), &self.worker).await;
        self.log
            .write(json!({ "event": "sync_with_main", "result": synced }));
        out.text.push_str(&format!("\n\n{synced}"));
        let paths: Vec<String> = given
            .get("paths")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let files = self.ws.part_files(&paths);
        if !files.is_empty() {
            out.text.push('\n');
            out.text.push_str(&files);
        }
        out
    }

    /// Small mode: a claim that collides with another worker's live claim is released at
    /// once, and the answer says to take a different part. The later claim yields, so two
    /// workers who chose the same part at the same time do not both work on it.
    async fn yield_claim(&mut self, claimed: Output) -> Output {
        let id = claim_id(&claimed.text);
        let holders: Vec<&str> = claimed
            .text
            .lines()
            .skip_while(|l| !l.starts_with("OVERLAP"))
            .skip(1)
            .map_while(|l| l.strip_prefix("- "))
            .collect();
        let released = if id.is_empty() {
            Output::error("the claim's id is not in its answer")
        } else {
            self.call_org("release", json!({ "id": id })).await
        };
        self.log.write(json!({
            "event": "claim_yielded",
            "claim": id,
            "released": released.ok,
            "overlaps": holders,
        }));
        if !released.ok {
            return claimed;
        }
        Output::error(format!(
            "another worker already holds this part, so your claim {id} was released:\n{}\nClaim a different part: another label and other files.",
            holders
                .iter()
                .map(|h| format!("- {h}"))
                .collect::<Vec<_>>()
                .join("\n")
        ))
    }

    /// Small mode's `write_file` without content: asks the model for the file's whole text
    /// in a request of its own ([`code`]) and writes what its code block holds.
    async fn write_from_code(&mut self, cfg: &BuiltinConfig, path: &str) -> Output {
        let src = match self.ws.code_sources(path, cfg.output_cap) {
            Ok(s) => s,
            Err(e) => return Output::error(e),
        };
        let user = code::request(
            path,
            src.current.as_deref(),
            &src.tests,
            self.last_failure.as_deref(),
        );
        let body = json!({
            "model": cfg.model,
            "messages": [
                { "role": "system", "content": code::SYSTEM },
                { "role": "user", "content": user },
            ],
            "max_tokens": cfg.max_reply_tokens,
            "temperature": cfg.temperature,
            "stream": false,
        });
        self.pulse
            .step(format!("model request: the code of {}", one_line(path, 60)));
        let asked = Instant::now();
        let reply = match self.endpoint.complete(&body).await {
            Ok(r) => r,
            Err(ChatError::ContextFull(msg)) => {
                return Output::error(format!(
                    "the request for the text of {path} does not fit the model's context ({msg}); nothing was written — make the file smaller or split it in two"
                ))
            }
            Err(ChatError::Failed(e)) => {
                return Output::error(format!(
                    "the request for the text of {path} failed: {}; nothing was written — call write_file again",
                    e.message
                ))
            }
        };
        let ms = asked.elapsed().as_millis() as u64;
        self.side_ms += ms;
        self.side_usage.input_tokens += reply.prompt_tokens.unwrap_or(0);
        self.side_usage.output_tokens += reply.completion_tokens;
        self.log.write(json!({
            "event": "code_reply",
            "path": path,
            "ms": ms,
            "request_chars": user.chars().count(),
            "content": reply.content,
            "finish_reason": reply.finish_reason,
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
        }));
        match code::extract(&reply.content, path, reply.finish_reason == "length") {
            Ok(text) => {
                let mut out = self.ws.write_file(path, &text);
                if !out.ok {
                    return out;
                }
                out.text.push_str("; it holds the code block you sent.");
                // The check that always comes next, done now: one model request less.
                let Some(command) = code::test_command(&src.tests) else {
                    out.text.push_str(" Next, run its tests.");
                    return out;
                };
                self.pulse.step(format!("run: {}", one_line(&command, 60)));
                let ran = self.ws.run(&command, cfg.command_timeout).await;
                self.log.write(json!({
                    "event": "checked_after_write",
                    "command": command,
                    "ok": ran.ok,
                    "result": one_line(&ran.text, 300),
                }));
                let next = match (ran.ok, self.ship) {
                    (true, true) => "They pass: call ship now.",
                    (true, false) => "They pass: share the part now.",
                    (false, _) => "They fail: call write_file again to fix the file; you will be shown this failure.",
                };
                out.text.push_str(&format!(
                    " Its tests ran ({command}):\n{}\n\n{next}",
                    ran.text
                ));
                self.failure_after_write = (!ran.ok).then_some(ran.text);
                out
            }
            Err(e) => Output::error(e),
        }
    }
}

fn tool_event(name: &str, out: &Output) -> TurnEvent {
    TurnEvent::ToolCall {
        name: name.to_string(),
        status: if out.ok { "ok" } else { "error" }.to_string(),
        kind: String::new(),
    }
}

/// Tool-call arguments as the model wrote them; empty means none.
/// A tool call as the live view shows it (for people, never for the model): the tool and
/// what it works on — the path, the command, the label or the title.
fn step_of(name: &str, args: &Value) -> String {
    ["path", "command", "label", "title"]
        .iter()
        .find_map(|k| args.get(*k).and_then(Value::as_str))
        .map_or_else(
            || name.to_string(),
            |what| format!("{name}: {}", one_line(what, 60)),
        )
}

fn parse_arguments(text: &str) -> std::result::Result<Value, String> {
    if text.trim().is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_str(text).map_err(|e| e.to_string())
}

fn str_arg<'a>(args: &'a Value, key: &str) -> std::result::Result<&'a str, String> {
    match args.get(key) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(format!("\"{key}\" is missing")),
        Some(other) => Err(format!("\"{key}\" must be a string, not {other}")),
    }
}

fn opt_str_arg<'a>(args: &'a Value, key: &str) -> std::result::Result<Option<&'a str>, String> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(format!("\"{key}\" must be a string, not {other}")),
    }
}

fn opt_u64_arg(args: &Value, key: &str) -> std::result::Result<Option<u64>, String> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
            .map(Some)
            .ok_or_else(|| format!("\"{key}\" must be a whole number ≥ 0")),
        Some(Value::String(s)) => s
            .trim()
            .parse::<u64>()
            .map(Some)
            .map_err(|_| format!("\"{key}\" must be a whole number, not {s:?}")),
        Some(other) => Err(format!("\"{key}\" must be a whole number, not {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_builtin_agent_is_exempt_from_the_hang_watch() {
        assert!(BuiltinAgent::new(BuiltinConfig::default()).self_bounded());
        let acp = crate::adapters::acp::AcpAgent::new(vec!["true".into()], Vec::new());
        assert!(!acp.self_bounded());
    }

    #[test]
    fn tool_style_parses_and_says_what_is_valid() {
        assert_eq!("auto".parse::<ToolStyle>().unwrap(), ToolStyle::Auto);
        assert_eq!("Tools".parse::<ToolStyle>().unwrap(), ToolStyle::Tools);
        assert_eq!("json".parse::<ToolStyle>().unwrap(), ToolStyle::Json);
        let e = "grammar".parse::<ToolStyle>().unwrap_err();
        assert!(e.message.contains("auto, tools"), "{}", e.message);
        assert_eq!(ToolStyle::Json.to_string(), "json");
    }

    #[test]
    fn shipped_labels_come_from_patch_summary_lines() {
        let answer = "3 match\nG9 [w02/PATCH_SUMMARY +2m] stats: implement #stats\nG4 [w01/PATCH_SUMMARY +5m] primes done #primes (+detail)\nG2 [w01/FAIL +6m] x #leap\nG1 [w01/PATCH_SUMMARY +7m] again #primes";
        assert_eq!(shipped_labels(answer), ["stats", "primes"]);
        assert!(shipped_labels("no records match").is_empty());
    }

    #[test]
    fn the_mode_is_small_on_the_local_model_unless_set() {
        assert_eq!(Mode::choose("auto", true).unwrap(), Mode::Small);
        assert_eq!(Mode::choose("auto", false).unwrap(), Mode::Full);
        assert_eq!(Mode::choose("full", true).unwrap(), Mode::Full);
        assert_eq!(Mode::choose("Small", false).unwrap(), Mode::Small);
        let e = Mode::choose("tiny", true).unwrap_err();
        assert!(
            e.message
                .contains("auto (small on the local model), small or full"),
            "{}",
            e.message
        );
        assert_eq!(BuiltinConfig::default().mode, Mode::Full);
    }

    #[test]
    fn the_config_debug_hides_the_key() {
        let cfg = BuiltinConfig {
            api_key: Some("sk-very-secret".into()),
            ..BuiltinConfig::default()
        };
        let d = format!("{cfg:?}");
        assert!(!d.contains("sk-very-secret") && d.contains("<set>"), "{d}");
        assert_eq!(cfg.context_tokens, 8192);
        assert_eq!(cfg.max_steps_per_turn, 24);
    }

    #[test]
    fn arguments_are_read_leniently() {
        let a = json!({ "n": "12", "m": 3, "s": "x", "bad": [1] });
        assert_eq!(opt_u64_arg(&a, "n"), Ok(Some(12)));
        assert_eq!(opt_u64_arg(&a, "m"), Ok(Some(3)));
        assert_eq!(opt_u64_arg(&a, "none"), Ok(None));
        assert!(opt_u64_arg(&a, "s").is_err());
        assert_eq!(str_arg(&a, "s"), Ok("x"));
        assert_eq!(str_arg(&a, "x"), Err("\"x\" is missing".to_string()));
        assert!(str_arg(&a, "bad").unwrap_err().contains("must be a string"));
        assert_eq!(parse_arguments(""), Ok(json!({})));
        assert!(parse_arguments("{").is_err());
    }
}
