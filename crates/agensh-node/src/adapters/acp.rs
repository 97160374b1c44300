//! The `acp` adapter: any Agent Client Protocol agent over stdio (`copilot --acp`,
//! `gemini --acp`, `claude-agent-acp`, `codex-acp`, `agensh agent script`, …).
//!
//! The wire is newline-delimited JSON-RPC 2.0 on the agent's stdin and stdout, every
//! message (de)serialized through the typed ACP structures of `agensh_protocol::acp`; an
//! update the schema does not know is skipped, never a failed turn. The adapter is the ACP
//! *client*: it runs `initialize`, then `session/new` (or `session/load` of the
//! session it stored, when the agent can load sessions) with the hub's MCP server and the
//! worker's token, and one `session/prompt` per turn. While a turn runs it collects the
//! agent's `session/update` notifications into [`TurnEvent`]s and answers the agent's
//! requests: `session/request_permission` from policy (allow), anything else "method not
//! found" (the adapter offers no file system or terminal; the agent uses its own).
//!
//! The agent runs in its own process group with the worker's checkout as working
//! directory, below the node in CPU priority ([`AcpAgent::with_cpu`], `run.agent_cpu`; its
//! children inherit it), so handing out prompts never waits for agents; its stderr goes to
//! `agent.stderr.log` in the adapter's state directory. Some
//! agents (codex-acp, gemini --acp) ignore the end of their input, so [`Agent::stop`]
//! closes stdin, waits briefly, then kills the whole process group.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agensh_domain::agents::{Endpoint, Launch, LaunchPlace, Preset, UsageReport, ENV_REMOVED};
use agensh_domain::{Error, ErrorKind, Result};
use agensh_process::{GroupChild, Mark, ProcessGroup};
use agensh_protocol::acp::{
    self, method, CancelNotification, ClientCapabilities, ContentBlock, EnvVariable,
    FileSystemCapabilities, HttpHeader, Implementation, InitializeRequest, InitializeResponse,
    LoadSessionRequest, McpServer, McpServerHttp, McpServerStdio, NewSessionRequest,
    NewSessionResponse, PermissionOptionKind, PromptRequest, PromptResponse, ProtocolVersion,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse,
    SelectedPermissionOutcome, SessionUpdate,
};
use agensh_protocol::framing::{decode_line, encode_line};
use agensh_protocol::jsonrpc::{code, ErrorObject, Id, Message, Notification, Request, Response};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::cpu::AgentCpu;
use super::limits::{AgentCgroup, OomWatch};
use super::{Agent, AgentContext, TurnEvent, TurnOutcome, Usage};

/// The ACP protocol version the adapter speaks.
pub const PROTOCOL_VERSION: ProtocolVersion = ProtocolVersion::V1;

/// The file in the state directory where the agent's stderr goes.
pub const STDERR_LOG: &str = "agent.stderr.log";

/// The file in the state directory that remembers the session, for `session/load`.
pub const SESSION_FILE: &str = "acp-session.json";

/// How long the agent may take to answer `initialize`, `session/new` or `session/load`
/// (agents started through npm can be slow to start).
pub(super) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(120);

/// How long `stop` waits for the agent to exit by itself before killing its group.
pub(super) const STOP_GRACE: Duration = Duration::from_secs(2);

/// How much of the stderr log an error quotes.
const STDERR_TAIL_BYTES: u64 = 2048;

/// The line that starts each run's output in the stderr log.
const LAUNCH_MARK: &str = "--- agensh: started";

/// An ACP agent driven over stdio.
pub struct AcpAgent {
    command: Vec<String>,
    env: Vec<(String, String)>,
    /// How the agent shares the CPU with the node.
    cpu: AgentCpu,
    /// The preset this agent is started from, if any: its home, settings and endpoint.
    preset: Option<PresetRun>,
    /// How the agent's permission requests are answered.
    permissions: Permissions,
    /// How the agent reports its usage.
    usage: UsageReport,
    /// Its input count leaves out prompt-cache reads and writes.
    cache_apart: bool,
    /// Whether every process the agent starts is found by a mark and ended with it.
    contain: bool,
    /// The worker's cgroup its processes run in, when the node has cgroups.
    cgroup: Option<AgentCgroup>,
    running: Option<Running>,
}

/// A preset started for one worker: where it is installed and which model it talks to.
#[derive(Debug, Clone)]
pub struct PresetRun {
    pub preset: &'static Preset,
    /// The install prefix (`<data>/agents/<name>/<version>`).
    pub prefix: PathBuf,
    pub endpoint: Endpoint,
    /// Reach the model through the hub's gateway with the worker's token: `endpoint`'s
    /// model is kept, its URL and key are the hub's and the worker's.
    pub gateway: bool,
}

impl PresetRun {
    /// The endpoint the worker of `ctx` talks to.
    pub fn endpoint_for(&self, ctx: &AgentContext) -> Endpoint {
        if !self.gateway {
            return self.endpoint.clone();
        }
        Endpoint {
            url: self.preset.api.gateway_base(&ctx.hub_url),
            model: self.endpoint.model.clone(),
            api_key: Some(ctx.token.clone()),
        }
    }
}

impl PresetRun {
    /// The preset started for the worker of `ctx`: its settings files written into the
    /// agent's home (readable by this user only), its command — `own` when not empty (a
    /// command of the user's), else its installed program, which must be there — and its
    /// environment. The answer's `files` are written already, so it holds none.
    pub(super) fn prepare(&self, ctx: &AgentContext, own: &[String]) -> Result<Launch> {
        let place = LaunchPlace {
            prefix: self.prefix.to_string_lossy().to_string(),
            home: absolute(&ctx.agent_home),
            arch: crate::install::arch(),
            root: agensh_process::resources::is_root(),
        };
        let mut launch = self.preset.launch(&place, &self.endpoint_for(ctx));
        private_dir(&ctx.agent_home)?;
        for (rel, text) in std::mem::take(&mut launch.files) {
            let path = ctx.agent_home.join(rel);
            if let Some(parent) = path.parent() {
                private_dir(parent)?;
            }
            write_private(&path, &text)?;
        }
        if !own.is_empty() {
            launch.command = own.to_vec();
        } else if !Path::new(&launch.command[0]).exists() {
            let p = self.preset;
            return Err(Error::invalid(
                "agent_not_installed",
                format!(
                    "{} {} is not installed (no {}) — run `agensh agents install {}`",
                    p.name, p.version, launch.command[0], p.name
                ),
            ));
        }
        Ok(launch)
    }
}

/// How the adapter answers `session/request_permission` (`run.permissions`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Permissions {
    /// Allow this once (the default): nothing is remembered by the agent.
    #[default]
    AllowOnce,
    /// Allow always (some agents write that into their settings in the checkout).
    AllowAlways,
    /// Reject.
    Reject,
}

impl std::str::FromStr for Permissions {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "allow_once" | "" => Ok(Permissions::AllowOnce),
            "allow_always" => Ok(Permissions::AllowAlways),
            "reject" => Ok(Permissions::Reject),
            other => Err(Error::invalid(
                "bad_config",
                format!(
                    "run.permissions \"{other}\" is not a policy — use allow_once, allow_always or reject"
                ),
            )),
        }
    }
}

/// The agent process and its session.
struct Running {
    child: Child,
    /// The process group (the agent's pid), killed as a whole on stop.
    group: ProcessGroup,
    conn: Arc<Conn>,
    /// Each `session/update`, typed; `None` for one the schema does not know.
    updates: mpsc::UnboundedReceiver<Option<SessionUpdate>>,
    reader: JoinHandle<()>,
    session_id: String,
    /// A prompt was sent and its answer not read (a turn running or abandoned).
    in_turn: bool,
    /// The cumulative session cost the agent last reported (`usage_update`).
    cost_seen: f64,
    /// The session's totals as the agent last reported them, for an agent that reports
    /// cumulative usage (a turn's usage is the difference).
    totals: Usage,
    /// The mark every process of this start carries, when contained.
    mark: Option<Mark>,
    /// The kills by the worker's memory limit before this start, when it has a cgroup.
    oom: Option<OomWatch>,
    /// Where the session is stored.
    session_file: PathBuf,
    stderr_log: PathBuf,
    what: String,
    /// Where each tool call the agent starts is reported as the turn's current step.
    heartbeat: super::Heartbeat,
    /// Raised to end the running turn: the agent gets `session/cancel`.
    interrupt: super::Interrupt,
}

/// The JSON-RPC connection: writes to stdin, answers routed by id.
struct Conn {
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    pending: Mutex<HashMap<u64, oneshot::Sender<RpcAnswer>>>,
    next_id: AtomicU64,
    /// stdout ended: the agent exited or closed it.
    closed: AtomicBool,
}

type RpcAnswer = std::result::Result<Value, RpcError>;

#[derive(Debug)]
enum RpcError {
    /// The agent answered with a JSON-RPC error (its `data` kept).
    Agent(ErrorObject),
    /// The agent's output ended before the answer.
    Closed,
}

impl AcpAgent {
    /// An agent started as `command` (program and arguments) with `env` added to the
    /// node's environment.
    pub fn new(command: Vec<String>, env: Vec<(String, String)>) -> Self {
        AcpAgent {
            command,
            env,
            cpu: AgentCpu::default(),
            preset: None,
            permissions: Permissions::default(),
            usage: UsageReport::default(),
            cache_apart: false,
            contain: false,
            cgroup: None,
            running: None,
        }
    }

    /// The agent of a preset: its settings, its home under the worker's, its usage style;
    /// started from `command` when not empty (a command of the user's own), else from its
    /// install prefix. Contained.
    pub fn preset(run: PresetRun, command: Vec<String>) -> Self {
        let mut a = AcpAgent::new(command, Vec::new());
        a.usage = run.preset.usage;
        a.cache_apart = run.preset.cache_apart;
        a.preset = Some(run);
        a.contain = true;
        a
    }

    /// The same agent answering permission requests by `p`.
    pub fn with_permissions(mut self, p: Permissions) -> Self {
        self.permissions = p;
        self
    }

    /// The same agent with every process it starts marked and ended with it, however it
    /// detaches ([`Mark`]).
    pub fn contained(mut self) -> Self {
        self.contain = true;
        self
    }

    /// The processes still carrying this start's mark (contained agents; for tests).
    pub fn marked_processes(&self) -> Vec<u32> {
        self.running
            .as_ref()
            .and_then(|r| r.mark.as_ref())
            .map(|m| m.processes())
            .unwrap_or_default()
    }

    /// The command and extra environment of this start: a preset's are computed for the
    /// worker, its files written into the agent's home (and left out of the answer).
    fn prepare(&self, ctx: &AgentContext) -> Result<Launch> {
        let Some(run) = &self.preset else {
            return Ok(Launch {
                command: self.command.clone(),
                env: self.env.clone(),
                files: Vec::new(),
                env_removed: Vec::new(),
            });
        };
        let launch = run.prepare(ctx, &self.command)?;
        let mut env = launch.env;
        env.extend(self.env.iter().cloned());
        Ok(Launch { env, ..launch })
    }

    /// The same agent started in the worker's cgroup `cgroup` (its memory limit and CPU
    /// weight; none: the node has no cgroups).
    pub fn with_cgroup(mut self, cgroup: Option<AgentCgroup>) -> Self {
        self.cgroup = cgroup;
        self
    }

    /// The same agent sharing the CPU with the node as `cpu` says (the default:
    /// [`AgentCpu::Background`]).
    pub fn with_cpu(mut self, cpu: AgentCpu) -> Self {
        self.cpu = cpu;
        self
    }

    /// The agent's process id while it runs (for tests and the live view).
    pub fn pid(&self) -> Option<u32> {
        self.running.as_ref().map(|r| r.group.id())
    }

    /// The current session id, once started.
    pub fn session_id(&self) -> Option<&str> {
        self.running.as_ref().map(|r| r.session_id.as_str())
    }

    async fn launch(&mut self, ctx: &AgentContext) -> Result<Running> {
        let Launch {
            command,
            env,
            env_removed,
            ..
        } = self.prepare(ctx)?;
        let (program, args) = command.split_first().ok_or_else(|| {
            Error::invalid(
                "no_agent_command",
                "the acp adapter needs a command to start the agent — set run.agent_command in agensh.toml, e.g. [\"gemini\", \"--acp\"]",
            )
        })?;
        let what = command.join(" ");
        let (stderr_log, log) = open_stderr_log(&ctx.state_dir, &what)?;
        let mut cmd = tokio::process::Command::new(program);
        // The worker's token reaches the agent only in its MCP server entry.
        cmd.args(args)
            .current_dir(&ctx.checkout)
            .env_remove("AGENSH_PUSHER")
            .env_remove("AGENSH_TOKEN")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env("AGENSH_WORKER", &ctx.worker)
            .env("AGENSH_HUB", &ctx.hub_url);
        if self.preset.is_some() {
            for var in ENV_REMOVED.iter().chain(&env_removed) {
                cmd.env_remove(var);
            }
        }
        let mark = self.contain.then(|| Mark::new(&ctx.worker));
        if let Some(m) = &mark {
            let (k, v) = m.env();
            cmd.env(k, v);
        }
        cmd.envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true);
        let oom = super::limits::attach(self.cgroup.as_ref(), &mut cmd, &what)?;
        let spawned = agensh_process::group::spawn(&mut cmd, super::cpu::priority(self.cpu));
        let GroupChild { mut child, group } = spawned.map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                "agent_not_started",
                format!(
                    "cannot start the agent `{what}` in {}: {e} — is it installed and on PATH?",
                    ctx.checkout.display()
                ),
            )
        })?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        let conn = Arc::new(Conn {
            stdin: tokio::sync::Mutex::new(Some(stdin)),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            closed: AtomicBool::new(false),
        });
        let (tx, updates) = mpsc::unbounded_channel();
        let reader = tokio::spawn(read_loop(
            stdout,
            conn.clone(),
            tx,
            ctx.heartbeat.clone(),
            self.permissions,
        ));
        Ok(Running {
            child,
            group,
            conn,
            updates,
            reader,
            session_id: String::new(),
            in_turn: false,
            cost_seen: 0.0,
            totals: Usage::default(),
            mark,
            oom,
            session_file: ctx.state_dir.join(SESSION_FILE),
            stderr_log,
            what,
            heartbeat: ctx.heartbeat.clone(),
            interrupt: ctx.interrupt.clone(),
        })
    }
}

impl Drop for AcpAgent {
    fn drop(&mut self) {
        if let Some(r) = &self.running {
            r.group.kill();
            if let Some(m) = &r.mark {
                m.kill_all();
            }
        }
    }
}

/// Creates `dir` (and its parents) readable by this user only.
pub(super) fn private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| Error::internal(format!("cannot create {}: {e}", dir.display())))
}

/// Writes `text` to `path`, readable by this user only.
pub(super) fn write_private(path: &Path, text: &str) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::internal(format!("cannot write {}: {e}", path.display())))?;
    std::io::Write::write_all(&mut f, text.as_bytes())
        .map_err(|e| Error::internal(format!("cannot write {}: {e}", path.display())))
}

#[async_trait::async_trait]
impl Agent for AcpAgent {
    async fn start(&mut self, ctx: &AgentContext) -> Result<()> {
        if self.running.is_some() {
            self.stop().await;
        }
        let mut r = self.launch(ctx).await?;
        match handshake(&mut r, ctx).await {
            Ok(()) => {
                self.running = Some(r);
                Ok(())
            }
            Err(e) => {
                shutdown(&mut r).await;
                Err(e)
            }
        }
    }

    async fn turn(&mut self, prompt: &str) -> Result<TurnOutcome> {
        let r = self.running.as_mut().ok_or_else(super::not_started)?;
        // Updates left over from an abandoned turn belong to no one.
        while r.updates.try_recv().is_ok() {}
        let params = PromptRequest::new(r.session_id.clone(), vec![acp::text(prompt)]);
        let answer = r.conn.request(method::SESSION_PROMPT, params).await;
        r.in_turn = true;
        let mut answer = match answer {
            Ok(rx) => rx,
            Err(RpcError::Closed) => return Err(r.exited("session/prompt").await),
            Err(e) => return Err(r.refused("session/prompt", e)),
        };
        let mut turn = TurnLog::default();
        let cost_before = r.cost_seen;
        let interrupt = r.interrupt.clone();
        let mut cancelled = false;
        let result = loop {
            tokio::select! {
                biased;
                Some(update) = r.updates.recv() => {
                    if let Some(step) = turn.update(update, &mut r.cost_seen) {
                        r.heartbeat.step(step);
                    }
                }
                a = &mut answer => break a.unwrap_or(Err(RpcError::Closed)),
                // Interrupted: the agent is asked to end the turn; it answers the prompt
                // with stop reason `cancelled` (the turn loop bounds the wait).
                _ = interrupt.raised(), if !cancelled => {
                    cancelled = true;
                    let cancel = CancelNotification::new(r.session_id.clone());
                    let _ = r.conn.notify(method::SESSION_CANCEL, cancel).await;
                }
            }
        };
        // Notifications the agent sent before its answer are queued already.
        while let Ok(update) = r.updates.try_recv() {
            turn.update(update, &mut r.cost_seen);
        }
        r.in_turn = false;
        let result = match result {
            Ok(v) => v,
            Err(RpcError::Closed) => return Err(r.exited("a turn").await),
            Err(e) => return Err(r.refused("session/prompt", e)),
        };
        let answer = acp::read_prompt_answer(result);
        let mut usage = turn_usage(self.usage, &answer.response, &mut r.totals);
        if self.cache_apart {
            usage.input_tokens += usage.cached_input_tokens + cache_writes(&answer.response);
        }
        if self.usage == UsageReport::Cumulative {
            store_session(&r.session_file, &r.session_id, &r.what, &r.totals);
        }
        if usage.cost_usd == 0.0 && r.cost_seen > cost_before {
            usage.cost_usd = r.cost_seen - cost_before;
        }
        // Signs that the model answered: counted usage, or (for an agent that counts none)
        // a `usage_update`, which agents send after each answer.
        let answered = if self.usage == UsageReport::None {
            turn.usage_updates > 0
        } else {
            usage.unreported_turns == 0 && usage.tokens() > 0
        };
        let outcome = TurnOutcome {
            stop_reason: answer.stop_reason,
            usage,
            events: turn.events,
            model_ms: 0,
            tools_ms: 0,
        };
        // A turn cut short by an interruption may end before any model answer.
        if self.preset.is_some() && !cancelled {
            if let Some(e) = no_model_answer(&r.what, &outcome, answered) {
                return Err(e);
            }
        }
        Ok(outcome)
    }

    async fn stop(&mut self) {
        if let Some(mut r) = self.running.take() {
            shutdown(&mut r).await;
        }
    }

    fn processes(&self) -> Vec<u32> {
        self.marked_processes()
    }

    async fn died(&mut self) -> Error {
        let Some(r) = self.running.as_mut() else {
            return std::future::pending().await;
        };
        // Cancel-safe: tokio's `Child::wait` keeps the status once it is known.
        let _ = r.child.wait().await;
        r.exited("the wait between turns").await
    }
}

/// `initialize`, then a session: loaded when the agent can and one is stored, else new.
async fn handshake(r: &mut Running, ctx: &AgentContext) -> Result<()> {
    let init = InitializeRequest::new(PROTOCOL_VERSION)
        .client_capabilities(
            ClientCapabilities::new()
                .fs(FileSystemCapabilities::new()
                    .read_text_file(false)
                    .write_text_file(false))
                .terminal(false),
        )
        .client_info(Implementation::new("agensh", env!("CARGO_PKG_VERSION")));
    let init = r.call(method::INITIALIZE, init).await?;
    // An answer the schema cannot read still started the agent: assume no capabilities.
    let init = serde_json::from_value::<InitializeResponse>(init)
        .inspect_err(|e| {
            tracing::info!(
                "the agent `{}` answered initialize in a shape the protocol schema does not know ({e}); assuming no capabilities",
                r.what
            )
        })
        .ok();
    let can_load = init
        .as_ref()
        .is_some_and(|i| i.agent_capabilities.load_session);
    let auth_methods: Vec<String> = init
        .iter()
        .flat_map(|i| &i.auth_methods)
        .map(|m| m.id().0.to_string())
        .collect();
    let cwd = PathBuf::from(absolute(&ctx.checkout));
    let http_mcp = init
        .as_ref()
        .is_some_and(|i| i.agent_capabilities.mcp_capabilities.http);
    let mcp = vec![mcp_server(ctx, http_mcp)];
    let session_file = r.session_file.clone();
    if can_load {
        if let Some((id, totals)) = stored_session(&session_file, &r.what) {
            let load = LoadSessionRequest::new(id.clone(), cwd.clone()).mcp_servers(mcp.clone());
            let loaded = r.call(method::SESSION_LOAD, load).await;
            // The agent replays the conversation as updates before it answers: not ours.
            while r.updates.try_recv().is_ok() {}
            match loaded {
                Ok(_) => {
                    r.session_id = id;
                    r.totals = totals;
                    return Ok(());
                }
                Err(e) if e.code == "agent_exited" => return Err(e),
                Err(e) => tracing::info!(
                    "the agent could not load session {id} ({}); starting a new one",
                    e.message
                ),
            }
        }
    }
    let created = r
        .call(
            method::SESSION_NEW,
            NewSessionRequest::new(cwd).mcp_servers(mcp),
        )
        .await
        .map_err(|e| {
            if auth_methods.is_empty() || e.code != "agent_refused" {
                return e;
            }
            Error::new(
                e.kind,
                &e.code,
                format!(
                    "{} — the agent may need authentication first (it offers: {}); give it its credentials: export the environment variables it reads for its key before `agensh run` (the agent inherits them), or log in with the agent's own command first",
                    e.message,
                    auth_methods.join(", ")
                ),
            )
        })?;
    let id = serde_json::from_value::<NewSessionResponse>(created)
        .map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                "agent_protocol",
                format!(
                    "the agent `{}` answered session/new without a usable sessionId ({e})",
                    r.what
                ),
            )
        })?
        .session_id
        .0
        .to_string();
    r.totals = Usage::default();
    store_session(&session_file, &id, &r.what, &r.totals);
    r.session_id = id;
    Ok(())
}

/// The hub's MCP server as the agent gets it: over HTTP with the worker's token in a
/// header where the agent advertises HTTP MCP, else `agensh mcp` (the stdio bridge) with
/// the token in the bridge's own environment.
fn mcp_server(ctx: &AgentContext, http: bool) -> McpServer {
    let url = ctx.mcp_url();
    if http {
        return McpServer::Http(
            McpServerHttp::new("agensh", url).headers(vec![HttpHeader::new(
                "Authorization",
                format!("Bearer {}", ctx.token),
            )]),
        );
    }
    // The bridge posts to `<hub>/mcp`: the node's proxy serves the same path.
    let base = url.strip_suffix("/mcp").unwrap_or(&url).to_string();
    McpServer::Stdio(
        McpServerStdio::new("agensh", ctx.agensh.clone())
            .args(vec!["mcp".to_string(), "--hub".to_string(), base])
            .env(vec![EnvVariable::new("AGENSH_TOKEN", ctx.token.clone())]),
    )
}

/// Remembers the session (and, for agents that report usage per session, its totals so
/// far) for `session/load` after a restart.
fn store_session(file: &Path, id: &str, what: &str, totals: &Usage) {
    let record = json!({ "sessionId": id, "command": what, "totals": totals });
    if let Err(e) = std::fs::write(file, record.to_string()) {
        tracing::warn!("cannot write {}: {e}", file.display());
    }
}

/// The session id stored for this agent command, if any, with the usage totals stored
/// with it.
fn stored_session(file: &Path, what: &str) -> Option<(String, Usage)> {
    let v: Value = serde_json::from_slice(&std::fs::read(file).ok()?).ok()?;
    if v.get("command").and_then(Value::as_str) != Some(what) {
        return None;
    }
    let totals = v
        .get("totals")
        .and_then(|t| serde_json::from_value(t.clone()).ok())
        .unwrap_or_default();
    v.get("sessionId")
        .and_then(Value::as_str)
        .map(|id| (id.to_string(), totals))
}

pub(super) fn absolute(p: &Path) -> String {
    std::path::absolute(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

/// Cancels a running turn, closes stdin, gives the agent a moment, then kills its group.
async fn shutdown(r: &mut Running) {
    // Every wait is bounded: an agent that stopped reading its input cannot hold us here.
    if r.in_turn && !r.conn.closed.load(Ordering::Relaxed) {
        let cancel = r.conn.notify(
            method::SESSION_CANCEL,
            CancelNotification::new(r.session_id.clone()),
        );
        let _ = tokio::time::timeout(STOP_GRACE, cancel).await;
    }
    if let Ok(mut stdin) = tokio::time::timeout(STOP_GRACE, r.conn.stdin.lock()).await {
        stdin.take();
    }
    let _ = tokio::time::timeout(STOP_GRACE, r.child.wait()).await;
    // The group may outlive its leader (a launcher's children, a shell tool's processes).
    r.group.kill();
    end_marked(r.mark.clone(), &format!("the agent `{}`", r.what)).await;
    let _ = tokio::time::timeout(STOP_GRACE, r.child.wait()).await;
    r.reader.abort();
    r.conn.fail_all();
}

/// Kills every process that carries the start's mark (those that left the group: a new
/// session, a double fork).
pub(super) async fn end_marked(mark: Option<Mark>, who: &str) {
    if let Some(mark) = mark {
        let killed = tokio::task::spawn_blocking(move || mark.kill_all())
            .await
            .unwrap_or(0);
        if killed > 0 {
            tracing::info!("ended {killed} process(es) {who} had started outside its group");
        }
    }
}

impl Running {
    /// A request with the handshake timeout; its answer.
    async fn call(&mut self, method: &str, params: impl Serialize) -> Result<Value> {
        let rx = match self.conn.request(method, params).await {
            Ok(rx) => rx,
            Err(RpcError::Closed) => return Err(self.exited(method).await),
            Err(e) => return Err(self.refused(method, e)),
        };
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, rx).await {
            Err(_) => Err(Error::new(
                ErrorKind::Internal,
                "agent_timeout",
                format!(
                    "the agent `{}` did not answer {method} within {} s — see {}",
                    self.what,
                    HANDSHAKE_TIMEOUT.as_secs(),
                    self.stderr_log.display()
                ),
            )),
            Ok(Err(_)) | Ok(Ok(Err(RpcError::Closed))) => Err(self.exited(method).await),
            Ok(Ok(Err(e))) => Err(self.refused(method, e)),
            Ok(Ok(Ok(v))) => Ok(v),
        }
    }

    fn refused(&self, method: &str, e: RpcError) -> Error {
        refusal(&self.what, method, e)
    }

    /// The error for an agent whose output ended during `during`: its exit status and the
    /// tail of its stderr log.
    async fn exited(&mut self, during: &str) -> Error {
        let who = format!("the agent `{}`", self.what);
        let (group, mark) = (self.group, self.mark.clone());
        let oom = self.oom.as_ref();
        exit_error(
            &mut self.child,
            group,
            mark,
            oom,
            &self.stderr_log,
            &who,
            during,
        )
        .await
    }
}

/// The error for an agent (`who`) whose output ended during `during`: its exit status and
/// the tail of its stderr log; whatever it left running is ended.
pub(super) async fn exit_error(
    child: &mut Child,
    group: ProcessGroup,
    mark: Option<Mark>,
    oom: Option<&OomWatch>,
    stderr_log: &Path,
    who: &str,
    during: &str,
) -> Error {
    use std::os::unix::process::ExitStatusExt;
    let status = tokio::time::timeout(STOP_GRACE, child.wait()).await;
    // SIGKILL (9) is what the kernel's OOM killer sends.
    let sigkill = matches!(&status, Ok(Ok(s)) if s.signal() == Some(9));
    let how = match status {
        Ok(Ok(s)) => describe_exit(s),
        Ok(Err(e)) => format!("stopped answering (its status is unknown: {e})"),
        Err(_) => "closed its output but is still running".to_string(),
    };
    group.kill();
    end_marked(mark, who).await;
    let tail = stderr_tail(stderr_log);
    let shown = if tail.trim().is_empty() {
        "It wrote nothing to stderr.".to_string()
    } else {
        format!(
            "Last lines of its stderr ({}):\n{}",
            stderr_log.display(),
            tail.trim_end()
        )
    };
    let note = match super::limits::memory_error(oom, sigkill, who, &how, during, &shown) {
        Ok(killed) => return killed,
        Err(note) => note.unwrap_or_default(),
    };
    Error::new(
        ErrorKind::Internal,
        "agent_exited",
        format!("{who} {how}{note} during {during}. {shown}"),
    )
}

/// Opens the agent's stderr log in `state_dir` for appending, with a line marking where
/// the run of `what` starts (errors quote only this run).
pub(super) fn open_stderr_log(state_dir: &Path, what: &str) -> Result<(PathBuf, std::fs::File)> {
    std::fs::create_dir_all(state_dir)
        .map_err(|e| Error::internal(format!("cannot create {}: {e}", state_dir.display())))?;
    let path = state_dir.join(STDERR_LOG);
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| Error::internal(format!("cannot open {}: {e}", path.display())))?;
    let _ = std::io::Write::write_all(
        &mut log,
        format!("{LAUNCH_MARK} `{what}` at unix ms {}\n", unix_ms()).as_bytes(),
    );
    Ok((path, log))
}

fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn describe_exit(s: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => format!("exited ({s})"),
    }
}

/// The last few lines of the stderr log.
fn stderr_tail(path: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(STDERR_TAIL_BYTES);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).to_string();
    let skip = if start > 0 { 1 } else { 0 }; // a cut first line
    let lines: Vec<&str> = text.lines().skip(skip).collect();
    // Only this run: what follows the last launch mark.
    let from = lines
        .iter()
        .rposition(|l| l.starts_with(LAUNCH_MARK))
        .map_or(0, |i| i + 1);
    let run = &lines[from..];
    run[run.len().saturating_sub(20)..].join("\n")
}

/// The error for a request the agent answered with a JSON-RPC error: its message with
/// what its `data` says (agents put the real cause there, under a generic "Internal error").
fn refusal(what: &str, method: &str, e: RpcError) -> Error {
    let detail = match e {
        RpcError::Agent(e) => e.to_string(),
        RpcError::Closed => "its output ended".to_string(),
    };
    Error::new(
        ErrorKind::Internal,
        "agent_refused",
        format!("the agent `{what}` refused {method}: {detail}"),
    )
}

impl Conn {
    async fn write(&self, msg: &Message) -> std::result::Result<(), RpcError> {
        let line = encode_line(msg);
        let mut stdin = self.stdin.lock().await;
        let Some(w) = stdin.as_mut() else {
            return Err(RpcError::Closed);
        };
        w.write_all(&line).await.map_err(|_| RpcError::Closed)?;
        w.flush().await.map_err(|_| RpcError::Closed)
    }

    /// Sends a request; the receiver gets its answer.
    async fn request(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> std::result::Result<oneshot::Receiver<RpcAnswer>, RpcError> {
        if self.closed.load(Ordering::Relaxed) {
            return Err(RpcError::Closed);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().expect("pending lock").insert(id, tx);
        let sent = self
            .write(&Message::Request(Request::new(id, method, params)))
            .await;
        if let Err(e) = sent {
            self.pending.lock().expect("pending lock").remove(&id);
            return Err(e);
        }
        Ok(rx)
    }

    async fn notify(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> std::result::Result<(), RpcError> {
        self.write(&Message::Notification(Notification::new(method, params)))
            .await
    }

    fn fail_all(&self) {
        self.closed.store(true, Ordering::Relaxed);
        for (_, tx) in self.pending.lock().expect("pending lock").drain() {
            let _ = tx.send(Err(RpcError::Closed));
        }
    }
}

/// Reads the agent's stdout: answers go to their requests, `session/update`s to the turn,
/// and the agent's own requests are answered here.
async fn read_loop(
    stdout: ChildStdout,
    conn: Arc<Conn>,
    updates: mpsc::UnboundedSender<Option<SessionUpdate>>,
    heartbeat: super::Heartbeat,
    permissions: Permissions,
) {
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        heartbeat.beat();
        let msg = match decode_line::<Message>(&line) {
            Ok(Some(m)) => m,
            Ok(None) => continue,
            Err(e) => {
                tracing::debug!("the agent wrote {e}");
                continue;
            }
        };
        match msg {
            Message::Request(r) if r.id != Id::Null => {
                let _ = conn
                    .write(&Message::Response(answer_request(&r, permissions)))
                    .await;
            }
            // A request with a null id cannot be answered: taken as a notification.
            Message::Request(Request { method, params, .. })
            | Message::Notification(Notification { method, params }) => {
                if method == method::SESSION_UPDATE {
                    let _ = updates.send(typed_update(params.as_ref()));
                }
            }
            Message::Response(r) => {
                let Some(id) = r.id.as_u64() else { continue };
                let tx = conn.pending.lock().expect("pending lock").remove(&id);
                if let Some(tx) = tx {
                    let _ = tx.send(r.result.map_err(RpcError::Agent));
                }
            }
        }
    }
    conn.fail_all();
}

/// The policy answer to a request from the agent.
fn answer_request(req: &Request, permissions: Permissions) -> Response {
    let id = req.id.clone();
    if req.method != method::SESSION_REQUEST_PERMISSION {
        return Response::error(
            id,
            ErrorObject::new(
                code::METHOD_NOT_FOUND,
                format!(
                    "method not found: {} (this client offers no file system or terminal; use your own tools)",
                    req.method
                ),
            ),
        );
    }
    match req.params::<RequestPermissionRequest>() {
        Ok(p) => Response::ok(id, permission_answer(&p, permissions)),
        Err(e) => {
            tracing::warn!(
                "the agent asked for permission in a shape the protocol schema does not know: {e}"
            );
            Response::error(id, e)
        }
    }
}

/// The option the policy picks: its own kind first, then the other of the same answer
/// (`allow_once` takes `allow_always` when that is all there is); with neither, the request
/// is cancelled.
pub fn permission_answer(
    request: &RequestPermissionRequest,
    policy: Permissions,
) -> RequestPermissionResponse {
    use PermissionOptionKind::{AllowAlways, AllowOnce, RejectAlways, RejectOnce};
    let pick = |kind: PermissionOptionKind| {
        request
            .options
            .iter()
            .find(|o| o.kind == kind)
            .map(|o| o.option_id.clone())
    };
    let (first, then) = match policy {
        Permissions::AllowOnce => (AllowOnce, AllowAlways),
        Permissions::AllowAlways => (AllowAlways, AllowOnce),
        Permissions::Reject => (RejectOnce, RejectAlways),
    };
    let outcome = match pick(first).or_else(|| pick(then)) {
        Some(id) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id)),
        None => RequestPermissionOutcome::Cancelled,
    };
    RequestPermissionResponse::new(outcome)
}

/// A `session/update`'s update in the schema's structure; `None` (logged) for one the schema
/// does not know, which the turn skips.
fn typed_update(params: Option<&Value>) -> Option<SessionUpdate> {
    match acp::read_update(params) {
        Ok(n) => Some(n.update),
        Err(e) => {
            tracing::debug!(
                "skipping a session/update the protocol schema does not know ({e}): {:.200}",
                params.map(|p| p.to_string()).unwrap_or_default()
            );
            None
        }
    }
}

/// Events of one turn, built from `session/update` notifications.
#[derive(Default)]
struct TurnLog {
    events: Vec<TurnEvent>,
    /// Tool call id → index of its event.
    calls: HashMap<String, usize>,
    /// The last event is a message still receiving chunks.
    open_message: bool,
    /// `usage_update`s received (an agent sends one after each model answer).
    usage_updates: u64,
}

impl TurnLog {
    /// Notes one update (`None`: one the schema does not know, which only ends the message
    /// being received); returns the title of a tool call it starts, the turn's new current
    /// step.
    fn update(&mut self, update: Option<SessionUpdate>, cost_seen: &mut f64) -> Option<String> {
        let Some(update) = update else {
            self.open_message = false;
            return None;
        };
        match update {
            SessionUpdate::AgentMessageChunk(chunk) => {
                let ContentBlock::Text(t) = chunk.content else {
                    return None;
                };
                if t.text.is_empty() {
                    return None;
                }
                if self.open_message {
                    if let Some(TurnEvent::Message { text }) = self.events.last_mut() {
                        text.push_str(&t.text);
                        return None;
                    }
                }
                self.events.push(TurnEvent::Message { text: t.text });
                self.open_message = true;
            }
            SessionUpdate::ToolCall(call) => {
                self.open_message = false;
                self.calls
                    .insert(call.tool_call_id.0.to_string(), self.events.len());
                self.events.push(TurnEvent::ToolCall {
                    name: call.title.clone(),
                    status: acp::wire_name(&call.status),
                    kind: acp::wire_name(&call.kind),
                });
                return Some(call.title);
            }
            SessionUpdate::ToolCallUpdate(u) => {
                self.open_message = false;
                let id = u.tool_call_id.0.to_string();
                let status = u.fields.status.as_ref().map(acp::wire_name);
                let kind = u.fields.kind.as_ref().map(acp::wire_name);
                let title = u.fields.title;
                match self.calls.get(&id) {
                    Some(&i) => {
                        if let Some(TurnEvent::ToolCall {
                            name,
                            status: s,
                            kind: k,
                        }) = self.events.get_mut(i)
                        {
                            if let Some(st) = status {
                                *s = st;
                            }
                            if let Some(t) = title {
                                *name = t;
                            }
                            if let Some(kind) = kind {
                                *k = kind;
                            }
                        }
                    }
                    None => {
                        self.calls.insert(id, self.events.len());
                        self.events.push(TurnEvent::ToolCall {
                            name: title.unwrap_or_else(|| "tool".to_string()),
                            status: status.unwrap_or_else(|| "pending".to_string()),
                            kind: kind.unwrap_or_default(),
                        });
                    }
                }
            }
            SessionUpdate::UsageUpdate(u) => {
                self.usage_updates += 1;
                if let Some(c) = u.cost {
                    *cost_seen = c.amount;
                }
            }
            _ => self.open_message = false,
        }
        None
    }
}

/// A turn's usage from the `session/prompt` answer, read as the agent reports it; `totals`
/// carries a cumulative reporter's session totals from turn to turn.
fn turn_usage(report: UsageReport, answer: &PromptResponse, totals: &mut Usage) -> Usage {
    let Some(reported) = reported_usage(report, answer) else {
        return Usage::not_reported();
    };
    if report != UsageReport::Cumulative {
        return reported;
    }
    // A total below the last one is a new session (the agent lost the old): all of it is
    // this turn's.
    let fresh = reported.input_tokens < totals.input_tokens
        || reported.output_tokens < totals.output_tokens;
    let before = if fresh { Usage::default() } else { *totals };
    *totals = reported;
    Usage {
        input_tokens: reported.input_tokens - before.input_tokens,
        cached_input_tokens: reported
            .cached_input_tokens
            .saturating_sub(before.cached_input_tokens),
        output_tokens: reported.output_tokens - before.output_tokens,
        cost_usd: (reported.cost_usd - before.cost_usd).max(0.0),
        unreported_turns: 0,
    }
}

/// A turn that ended by itself with no sign of a model answer (`answered`: usage counted,
/// or a `usage_update`) and no tool call got no answer from its model (the endpoint
/// unreachable, the key refused: some agents retry, say so in their text and end the turn
/// as if it went well). That turn is a failure, with what the agent said as its cause.
fn no_model_answer(what: &str, out: &TurnOutcome, answered: bool) -> Option<Error> {
    let silent = !answered;
    let acted = out
        .events
        .iter()
        .any(|e| matches!(e, TurnEvent::ToolCall { .. }));
    if out.stop_reason != "end_turn" || !silent || acted {
        return None;
    }
    let said: String = out
        .events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::Message { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ");
    let said = said.trim();
    let said = if said.is_empty() {
        "nothing".to_string()
    } else if said.chars().count() > 300 {
        format!("\"{}…\"", said.chars().take(300).collect::<String>())
    } else {
        format!("\"{said}\"")
    };
    Some(Error::new(
        ErrorKind::Internal,
        "model_failed",
        format!(
            "the agent `{what}` got no answer from its model this turn (no usage, no tool call); it said {said} — check the model endpoint and its key"
        ),
    ))
}

/// Prompt-cache writes in the answer's typed `usage` (0 when not reported).
fn cache_writes(answer: &PromptResponse) -> u64 {
    answer
        .usage
        .as_ref()
        .and_then(|u| u.cached_write_tokens)
        .unwrap_or(0)
}

/// The counts in a `session/prompt` answer, where the agent puts them: `usage` (the ACP
/// draft, typed), `_meta.usage` (shaped as each agent likes: camelCase or snake_case, a
/// cost as a number or `cost.amount`), or `_meta.quota.token_count` (gemini). `None` when
/// the answer holds no counts.
fn reported_usage(report: UsageReport, answer: &PromptResponse) -> Option<Usage> {
    if report == UsageReport::None {
        return None;
    }
    let meta = answer.meta.as_ref();
    let meta_usage = meta.and_then(|m| m.get("usage")).filter(|v| v.is_object());
    let cost_usd = meta_usage
        .and_then(|u| {
            ["costUsd", "cost_usd", "totalCostUsd", "total_cost_usd"]
                .iter()
                .find_map(|n| u.get(*n).and_then(Value::as_f64))
                .or_else(|| u.pointer("/cost/amount").and_then(Value::as_f64))
        })
        .unwrap_or(0.0);
    if let Some(u) = &answer.usage {
        return Some(Usage {
            input_tokens: u.input_tokens,
            cached_input_tokens: u.cached_read_tokens.unwrap_or(0),
            output_tokens: u.output_tokens,
            cost_usd,
            unreported_turns: 0,
        });
    }
    let quota = meta
        .and_then(|m| m.get("quota"))
        .and_then(|q| q.get("token_count"))
        .filter(|v| v.is_object());
    let counts = meta_usage.or(quota)?;
    let read = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| counts.get(*n).and_then(Value::as_u64))
    };
    let input = read(&["inputTokens", "input_tokens", "promptTokenCount"]);
    let output = read(&["outputTokens", "output_tokens", "candidatesTokenCount"]);
    if input.is_none() && output.is_none() {
        return None;
    }
    Some(Usage {
        input_tokens: input.unwrap_or(0),
        cached_input_tokens: read(&[
            "cachedReadTokens",
            "cached_read_tokens",
            "cachedInputTokens",
            "cached_input_tokens",
            "cachedContentTokenCount",
        ])
        .unwrap_or(0),
        output_tokens: output.unwrap_or(0),
        cost_usd,
        unreported_turns: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_follow_the_policy() {
        let opts = |kinds: &[&str], policy: Permissions| {
            let request: RequestPermissionRequest = serde_json::from_value(json!({
                "sessionId": "s",
                "toolCall": { "toolCallId": "c1", "title": "git push" },
                "options": kinds.iter().map(|k| json!({ "optionId": format!("o-{k}"), "name": k, "kind": k })).collect::<Vec<_>>(),
            }))
            .expect("a permission request");
            serde_json::to_value(permission_answer(&request, policy)).expect("serializes")
        };
        let chosen = |id: &str| json!({ "outcome": { "outcome": "selected", "optionId": id } });
        let all = ["reject_once", "reject_always", "allow_once", "allow_always"];
        let mut policy = Permissions::AllowOnce;
        assert_eq!(opts(&all, policy), chosen("o-allow_once"));
        assert_eq!(
            opts(&["reject_once", "allow_always"], policy),
            chosen("o-allow_always")
        );
        assert_eq!(
            opts(&["reject_once"], policy),
            json!({ "outcome": { "outcome": "cancelled" } })
        );
        policy = Permissions::AllowAlways;
        assert_eq!(opts(&all, policy), chosen("o-allow_always"));
        assert_eq!(opts(&["allow_once"], policy), chosen("o-allow_once"));
        policy = Permissions::Reject;
        assert_eq!(opts(&all, policy), chosen("o-reject_once"));
        assert_eq!(
            opts(&["reject_always", "allow_once"], policy),
            chosen("o-reject_always")
        );
        assert_eq!(
            opts(&["allow_once"], policy),
            json!({ "outcome": { "outcome": "cancelled" } })
        );
    }

    #[test]
    fn unknown_requests_are_method_not_found() {
        let r = answer_request(
            &Request::new(1u64, method::FS_READ_TEXT_FILE, json!({})),
            Permissions::AllowOnce,
        );
        assert_eq!(r.result.unwrap_err().code, code::METHOD_NOT_FOUND);
    }

    #[test]
    fn a_malformed_permission_request_is_invalid_params() {
        let r = answer_request(
            &Request::new(
                2u64,
                method::SESSION_REQUEST_PERMISSION,
                json!({ "options": [] }),
            ),
            Permissions::AllowOnce,
        );
        assert_eq!(r.id, Id::Number(2));
        assert_eq!(r.result.unwrap_err().code, code::INVALID_PARAMS);
    }

    #[test]
    fn a_refusal_shows_what_the_error_data_says() {
        let e = ErrorObject::new(code::INTERNAL_ERROR, "Internal error")
            .with_data(json!({ "details": "process exited with code 1" }));
        let err = refusal("claude-agent-acp", "session/prompt", RpcError::Agent(e));
        assert_eq!(err.code, "agent_refused");
        assert_eq!(
            err.message,
            "the agent `claude-agent-acp` refused session/prompt: Internal error: process exited with code 1 (JSON-RPC error -32603)"
        );
    }

    #[test]
    fn unknown_updates_are_skipped_and_end_the_message() {
        let mut log = TurnLog::default();
        let mut cost = 0.0;
        let chunk = |t: &str| json!({ "sessionId": "s", "update": { "sessionUpdate": "agent_message_chunk", "content": { "type": "text", "text": t } } });
        log.update(typed_update(Some(&chunk("a"))), &mut cost);
        let unknown = typed_update(Some(
            &json!({ "sessionId": "s", "update": { "sessionUpdate": "a_future_kind", "x": 1 } }),
        ));
        assert!(unknown.is_none());
        log.update(unknown, &mut cost);
        log.update(typed_update(Some(&chunk("b"))), &mut cost);
        assert_eq!(
            log.events,
            vec![
                TurnEvent::Message { text: "a".into() },
                TurnEvent::Message { text: "b".into() },
            ]
        );
    }

    #[test]
    fn chunks_join_and_tool_calls_update_in_place() {
        let mut log = TurnLog::default();
        let mut cost = 0.0;
        let up = |u: Value| json!({ "sessionId": "s", "update": u });
        for u in [
            json!({ "sessionUpdate": "agent_message_chunk", "content": { "type": "text", "text": "Hel" } }),
            json!({ "sessionUpdate": "agent_message_chunk", "content": { "type": "text", "text": "lo" } }),
            json!({ "sessionUpdate": "tool_call", "toolCallId": "c1", "title": "claim", "status": "in_progress" }),
            json!({ "sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed" }),
            json!({ "sessionUpdate": "tool_call", "toolCallId": "c2", "title": "git push", "kind": "execute", "status": "in_progress" }),
            json!({ "sessionUpdate": "tool_call_update", "toolCallId": "c2", "title": "git push origin HEAD", "status": "failed" }),
            json!({ "sessionUpdate": "tool_call_update", "toolCallId": "c3", "kind": "edit", "title": "src/a.rs" }),
            json!({ "sessionUpdate": "agent_message_chunk", "content": { "type": "text", "text": "done" } }),
            json!({ "sessionUpdate": "usage_update", "used": 10, "size": 100, "cost": { "amount": 0.25, "currency": "USD" } }),
        ] {
            log.update(typed_update(Some(&up(u))), &mut cost);
        }
        assert_eq!(
            log.events,
            vec![
                TurnEvent::Message {
                    text: "Hello".into()
                },
                TurnEvent::ToolCall {
                    name: "claim".into(),
                    status: "completed".into(),
                    kind: "other".into(),
                },
                TurnEvent::ToolCall {
                    name: "git push origin HEAD".into(),
                    status: "failed".into(),
                    kind: "execute".into(),
                },
                TurnEvent::ToolCall {
                    name: "src/a.rs".into(),
                    status: "pending".into(),
                    kind: "edit".into(),
                },
                TurnEvent::Message {
                    text: "done".into()
                },
            ]
        );
        assert_eq!(cost, 0.25);
    }

    #[test]
    fn a_tool_call_that_starts_is_the_turns_step() {
        let mut log = TurnLog::default();
        let mut cost = 0.0;
        let up = |u: Value| json!({ "sessionId": "s", "update": u });
        let started = log.update(
            typed_update(Some(&up(json!({ "sessionUpdate": "tool_call", "toolCallId": "c1", "title": "run: make test", "status": "in_progress" })))),
            &mut cost,
        );
        assert_eq!(started.as_deref(), Some("run: make test"));
        let chunk = json!({ "sessionUpdate": "agent_message_chunk", "content": { "type": "text", "text": "ok" } });
        assert_eq!(log.update(typed_update(Some(&up(chunk))), &mut cost), None);
    }

    #[test]
    fn a_turn_without_usage_or_tool_calls_got_no_model_answer() {
        let out = |usage: Usage, events: Vec<TurnEvent>| TurnOutcome {
            stop_reason: "end_turn".into(),
            usage,
            events,
            model_ms: 0,
            tools_ms: 0,
        };
        let said = TurnEvent::Message {
            text: "Info: Response was interrupted due to a server error. Retrying...".into(),
        };
        let e = no_model_answer(
            "copilot",
            &out(Usage::not_reported(), vec![said.clone()]),
            false,
        )
        .expect("a failed turn");
        assert_eq!(e.code, "model_failed");
        assert!(
            e.message
                .contains("it said \"Info: Response was interrupted"),
            "{}",
            e.message
        );
        let counted = Usage::default();
        assert!(no_model_answer("copilot", &out(counted, vec![said]), true).is_none());
        let tool = TurnEvent::ToolCall {
            name: "claim".into(),
            status: "completed".into(),
            kind: "other".into(),
        };
        assert!(
            no_model_answer("copilot", &out(Usage::not_reported(), vec![tool]), false).is_none()
        );
    }

    #[test]
    fn the_mcp_server_is_http_where_advertised_else_the_stdio_bridge() {
        let ctx = AgentContext {
            worker: "w01".into(),
            checkout: "/org/workers/w01".into(),
            hub_url: "http://127.0.0.1:7420".into(),
            token: "agw_secret".into(),
            mcp_proxy: Some("http://127.0.0.1:9000/mcp".into()),
            state_dir: "/org/.agensh/logs/w01".into(),
            agent_home: "/org/.agensh/agents/w01".into(),
            agensh: "/bin/agensh".into(),
            heartbeat: Default::default(),
            interrupt: Default::default(),
        };
        let http = serde_json::to_value(mcp_server(&ctx, true)).unwrap();
        assert_eq!(http["type"], "http");
        assert_eq!(http["url"], "http://127.0.0.1:9000/mcp");
        assert_eq!(http["headers"][0]["value"], "Bearer agw_secret");
        let stdio = serde_json::to_value(mcp_server(&ctx, false)).unwrap();
        assert_eq!(stdio["command"], "/bin/agensh");
        assert_eq!(
            stdio["args"],
            json!(["mcp", "--hub", "http://127.0.0.1:9000"])
        );
        assert_eq!(
            stdio["env"],
            json!([{ "name": "AGENSH_TOKEN", "value": "agw_secret" }])
        );
    }

    fn usage(report: UsageReport, v: Value, totals: &mut Usage) -> Usage {
        turn_usage(report, &acp::read_prompt_answer(v).response, totals)
    }

    #[test]
    fn usage_is_read_from_the_draft_field_or_meta() {
        let t = &mut Usage::default();
        let per_turn = UsageReport::PerTurn;
        let u = usage(
            per_turn,
            json!({ "stopReason": "end_turn", "usage": { "inputTokens": 12, "outputTokens": 3, "totalTokens": 15, "cachedReadTokens": 8 } }),
            t,
        );
        assert_eq!(
            (u.input_tokens, u.cached_input_tokens, u.output_tokens),
            (12, 8, 3)
        );
        let u = usage(
            per_turn,
            json!({ "stopReason": "end_turn", "_meta": { "usage": { "input_tokens": 5, "output_tokens": 6, "cost_usd": 0.5 } } }),
            t,
        );
        assert_eq!((u.input_tokens, u.output_tokens, u.cost_usd), (5, 6, 0.5));
        let u = usage(
            per_turn,
            json!({ "stopReason": "paused", "usage": { "inputTokens": 4, "outputTokens": 1, "totalTokens": 5 }, "_meta": { "usage": { "cost": { "amount": 0.125 } } } }),
            t,
        );
        assert_eq!((u.input_tokens, u.output_tokens, u.cost_usd), (4, 1, 0.125));
    }

    #[test]
    fn an_answer_without_counts_is_not_reported_not_zero() {
        let t = &mut Usage::default();
        let u = usage(UsageReport::PerTurn, json!({ "stopReason": "end_turn" }), t);
        assert_eq!(u, Usage::not_reported());
        let counted = json!({ "stopReason": "end_turn", "usage": { "inputTokens": 4, "outputTokens": 1, "totalTokens": 5 } });
        assert_eq!(usage(UsageReport::None, counted, t), Usage::not_reported());
    }

    #[test]
    fn cumulative_usage_is_counted_once() {
        let t = &mut Usage::default();
        let total = |i: u64, o: u64| json!({ "stopReason": "end_turn", "usage": { "inputTokens": i, "outputTokens": o, "totalTokens": i + o } });
        let mut sum = Usage::default();
        for (i, o) in [(30, 3), (60, 6), (90, 9)] {
            sum += usage(UsageReport::Cumulative, total(i, o), t);
        }
        assert_eq!((sum.input_tokens, sum.output_tokens), (90, 9));
        // A smaller total is a new session: all of it is the turn's.
        let u = usage(UsageReport::Cumulative, total(10, 1), t);
        assert_eq!((u.input_tokens, u.output_tokens), (10, 1));
    }

    #[test]
    fn gemini_counts_are_read_from_meta_quota() {
        let t = &mut Usage::default();
        let u = usage(
            UsageReport::MetaQuota,
            json!({ "stopReason": "end_turn", "_meta": { "quota": { "token_count": { "input_tokens": 1500, "output_tokens": 20 } } } }),
            t,
        );
        assert_eq!(
            (u.input_tokens, u.output_tokens, u.unreported_turns),
            (1500, 20, 0)
        );
    }
}
