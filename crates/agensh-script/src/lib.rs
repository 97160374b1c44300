//! The scripted agent: a deterministic Agent Client Protocol agent for tests and load runs,
//! never the default for real work (`agensh agent script --scenario FILE`).
//!
//! It is the mirror image of the `acp` adapter: it answers `initialize`, `session/new`
//! (taking the MCP server and its `Authorization` header from there), `session/load`,
//! `session/prompt` and `session/cancel` over newline-delimited JSON-RPC on stdin/stdout.
//! It acts only as an agent would: through the organization tools (an [`McpClient`]
//! against the MCP server it was given) and `git` in its working directory (the worker's
//! checkout). Its progress is kept in `<checkout>/.git/agensh-script/<session>.json`, so a
//! restarted agent that loads its session goes on after the step it was in.
//!
//! A scenario (TOML) lists the goal's parts and the steps to follow:
//!
//! ```toml
//! parts = ["p1", "p2"]              # each worker takes the first free part, in this order
//! [templates]
//! part = "def {part}():\n    return '{part}'\n"
//! test = "from parts.{part} import {part}\n"
//! [[step]]
//! action = "claim_free_part"        # claim, see overlaps, release and move on
//! wait = true                       # when none is free but some are undone: look again
//! [[step]]
//! action = "write_part"
//! [[step]]
//! action = "commit_push"
//! [[step]]
//! action = "open_and_merge_pr"
//! [[step]]
//! action = "end_turn"                # step_limit = true: as if cut off at a step limit
//! ```
//!
//! A worker can also pick up the organization's issues: `action = "take_issue"` lists the
//! open issues nobody has (`issue_list`), claims the oldest it can (`issue_claim`), writes a
//! file for it, commits and pushes `{worker}/issue-{issue}` and `ship`s it with
//! `closes #{issue}` in the summary (the PR's body), so the merge closes the issue.
//!
//! A test and load aid for workers' memory limits: `action = "allocate"` with `mib = N`
//! allocates N MiB, writes every page and holds them until the process ends, so an agent
//! over `run.worker_memory` is killed by the kernel in that step (and, restarted, goes on
//! after it).
//!
//! Each prompt runs the steps from where the last turn stopped up to and including the next
//! `end_turn`. When every part is taken (or every step done), later prompts only get an
//! answer. Templates may use `{part}`, `{worker}`, `{branch}`, `{pr}`, `{claim}`, `{turn}`.
//!
//! Every tool call is reported to the client as `tool_call`/`tool_call_update` updates, its
//! notices as an `agent_message_chunk`; with `AGENSH_SCRIPT_LOG` set, one JSON line per
//! tool call (and per permission answer, client request and turn end) is appended there.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use agensh_client::mcp::{McpClient, ToolResult};
use agensh_domain::{Error, Result};
use agensh_protocol::acp::{
    self, method, AgentCapabilities, CancelNotification, ContentChunk, Cost, HttpHeader,
    Implementation, InitializeResponse, LoadSessionRequest, McpCapabilities, McpServer,
    NewSessionRequest, NewSessionResponse, PermissionOption, PermissionOptionKind,
    PromptCapabilities, PromptRequest, PromptResponse, ProtocolVersion, RequestPermissionOutcome,
    RequestPermissionRequest, RequestPermissionResponse, SessionNotification, SessionUpdate,
    StopReason, ToolCall, ToolCallContent, ToolCallLocation, ToolCallStatus, ToolCallUpdate,
    ToolCallUpdateFields, ToolKind, UsageUpdate,
};
use agensh_protocol::framing::{decode_line, encode_line};
use agensh_protocol::jsonrpc::{code, ErrorObject, Message, Notification, Request, Response};
use agensh_workspace::git::Git;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;

/// The environment variable naming the JSON-lines log of tool calls.
pub const LOG_ENV: &str = "AGENSH_SCRIPT_LOG";

/// A scenario: the parts of the goal, file templates, and the steps. It serializes back to
/// the same TOML (agensh-testkit's scenario builder writes scenarios with it).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Parts of the goal; each worker tries them in this order and takes the first free one.
    #[serde(default)]
    pub parts: Vec<String>,
    /// Where a part's file goes (also the path its claim names).
    #[serde(default = "default_part_path")]
    pub part_path: String,
    /// Where a part's test goes.
    #[serde(default = "default_test_path")]
    pub test_path: String,
    #[serde(default)]
    pub templates: Templates,
    /// Per-turn usage to report (default: about one token per 4 characters in and out).
    #[serde(default)]
    pub usage: Option<UsageSpec>,
    #[serde(default, rename = "step")]
    pub steps: Vec<Step>,
}

fn default_part_path() -> String {
    "parts/{part}.py".into()
}

fn default_test_path() -> String {
    "tests/test_{part}.py".into()
}

/// File templates for `write_part`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Templates {
    pub part: Option<String>,
    pub test: Option<String>,
}

/// Fixed usage reported for every turn.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UsageSpec {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    /// Reported as the session's cumulative cost in a `usage_update`.
    #[serde(default)]
    pub cost_usd: f64,
}

/// One step of a scenario.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// Claims the first part that is not done and not claimed (label `part-<name>`, paths
    /// `[part_path]`); on an overlap with an earlier live claim, releases it and tries the
    /// next. With every part taken, the turn ends and later prompts only get an answer —
    /// or, with `wait = true` while a part claimed by a peer (or whose claim failed) is not
    /// on `main` yet, the turn ends and the next prompt tries this step again (a claim
    /// whose holder failed lapses with its lease, and its part is free again).
    ClaimFreePart {
        #[serde(default)]
        lease_secs: Option<u64>,
        #[serde(default)]
        wait: bool,
    },
    /// Takes an issue: `issue_list` of the open issues nobody has, `issue_claim` of the
    /// oldest (the next when a peer took it first), writes `path` with `text` (templates that
    /// may also use `{issue}` and `{issue_title}`), commits and pushes
    /// `{worker}/issue-{issue}`, and `ship`s it with the summary `files=<path> | closes
    /// #<issue>`, so the merge closes the issue. With no free issue the turn goes on (with
    /// `wait = true` it ends and the next prompt looks again).
    TakeIssue {
        #[serde(default = "default_issue_path")]
        path: String,
        #[serde(default = "default_issue_text")]
        text: String,
        #[serde(default)]
        wait: bool,
    },
    /// Writes the part's file and test from the templates.
    WritePart,
    /// Writes (or appends to) one file.
    WriteFile {
        path: String,
        text: String,
        #[serde(default)]
        append: bool,
    },
    /// `git add -A`, commit (when anything changed), `git push origin HEAD:<branch>`.
    /// Branch default: `{worker}/part-{part}` with a part, else `{worker}/work`.
    CommitPush {
        #[serde(default)]
        message: Option<String>,
        #[serde(default)]
        branch: Option<String>,
    },
    /// `pr_open` for the pushed branch.
    OpenPr {
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        body: Option<String>,
    },
    /// `pr_merge`; on `merge_conflict`: `git pull origin main` (union merge), push, retry.
    MergePr {
        #[serde(default = "default_retries")]
        retries: u32,
    },
    /// `open_pr` then `merge_pr`.
    OpenAndMergePr {
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        body: Option<String>,
        #[serde(default = "default_retries")]
        retries: u32,
    },
    /// `board_write`; label default `part-{part}` when a part is held.
    BoardWrite {
        kind: String,
        text: String,
        #[serde(default)]
        label: Option<String>,
        #[serde(default)]
        detail: Option<String>,
    },
    /// `msg_dm`.
    MsgDm { to: String, text: String },
    /// `msg_post`; channel default `#general`.
    MsgPost {
        #[serde(default)]
        channel: Option<String>,
        text: String,
    },
    /// Releases the claim this agent holds.
    Release,
    /// Any tool with literal arguments (strings are templates).
    Call {
        tool: String,
        #[serde(default, skip_serializing_if = "Value::is_null")]
        args: Value,
    },
    /// Calls `tool` every `every_ms` for `for_ms`, recording any notices (to observe
    /// in-turn delivery); stops early at the first notice with `until_notice`.
    Poll {
        tool: String,
        #[serde(default, skip_serializing_if = "Value::is_null")]
        args: Value,
        #[serde(default = "default_every_ms")]
        every_ms: u64,
        for_ms: u64,
        #[serde(default)]
        until_notice: bool,
    },
    /// Waits.
    Sleep { ms: u64 },
    /// Waits until `count` agents have reached this step: appends the worker's id to the
    /// file `path` (a template, outside the organization, shared by the agents of one test)
    /// and waits until the file names `count` arrivals, or the turn is cancelled. For tests
    /// that need agents at one point at the same time, whatever the machine's speed.
    Barrier { path: String, count: usize },
    /// Says something (an `agent_message_chunk`).
    Say { text: String },
    /// Runs `git` with these arguments in the checkout.
    Git { args: Vec<String> },
    /// Asks the client `session/request_permission` for a tool call titled `title`.
    RequestPermission {
        #[serde(default = "default_permission_title")]
        title: String,
    },
    /// Sends the client an arbitrary request and records the answer (to test how a client
    /// answers what it does not offer).
    ClientRequest {
        method: String,
        #[serde(default, skip_serializing_if = "Value::is_null")]
        params: Value,
    },
    /// Allocates `mib` MiB, writes to every page and holds them until the process ends: a
    /// test and load aid for workers' memory limits (`run.worker_memory`) — an agent over
    /// its limit is killed by the kernel in this step.
    Allocate { mib: u64 },
    /// Exits the process with `code` at once, mid-turn (to test crash handling).
    Exit {
        #[serde(default)]
        code: i32,
    },
    /// Exits the process with `code` after `ms`, whatever it is doing then; the scenario
    /// goes on at once (to test an agent that dies between turns).
    ExitLater {
        ms: u64,
        #[serde(default)]
        code: i32,
    },
    /// Ends the turn; with `step_limit = true` as an agent that reached its step limit
    /// does (stop reason `max_turn_requests`), not done yet.
    EndTurn {
        #[serde(default)]
        step_limit: bool,
    },
}

fn default_issue_path() -> String {
    "issues/{issue}.txt".into()
}

fn default_issue_text() -> String {
    "Done: {issue_title}\n".into()
}

fn default_retries() -> u32 {
    3
}

fn default_every_ms() -> u64 {
    200
}

fn default_permission_title() -> String {
    "run a command".into()
}

impl Scenario {
    /// Reads and checks a scenario file.
    pub fn load(path: &Path) -> Result<Scenario> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::invalid(
                "bad_scenario",
                format!("cannot read the scenario {}: {e}", path.display()),
            )
        })?;
        Self::parse(&text).map_err(|e| {
            Error::invalid("bad_scenario", format!("{}: {}", path.display(), e.message))
        })
    }

    /// Parses and checks a scenario.
    pub fn parse(text: &str) -> Result<Scenario> {
        let s: Scenario = toml::from_str(text)
            .map_err(|e| Error::invalid("bad_scenario", format!("not a valid scenario: {e}")))?;
        for (i, step) in s.steps.iter().enumerate() {
            let n = i + 1;
            match step {
                Step::ClaimFreePart { .. } if s.parts.is_empty() => {
                    return Err(Error::invalid(
                        "bad_scenario",
                        format!("step {n} claims a part but the scenario lists no parts"),
                    ))
                }
                Step::WritePart if s.templates.part.is_none() => {
                    return Err(Error::invalid(
                        "bad_scenario",
                        format!("step {n} writes a part but [templates] has no `part`"),
                    ))
                }
                Step::Barrier { count: 0, .. } => {
                    return Err(Error::invalid(
                        "bad_scenario",
                        format!("step {n} is a barrier for 0 agents — give count of at least 1"),
                    ))
                }
                Step::Poll { every_ms: 0, .. } => {
                    return Err(Error::invalid(
                        "bad_scenario",
                        format!("step {n} polls every 0 ms — give every_ms of at least 1"),
                    ))
                }
                _ => {}
            }
        }
        Ok(s)
    }
}

/// Runs the scripted agent on this process's stdin and stdout until stdin ends.
pub async fn run_stdio(scenario_path: &Path) -> Result<()> {
    let scenario = Scenario::load(scenario_path)?;
    serve(scenario, tokio::io::stdin(), tokio::io::stdout()).await
}

/// Serves the ACP agent side on `input`/`output` until `input` ends.
pub async fn serve<R, W>(scenario: Scenario, input: R, output: W) -> Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let shared = Arc::new(Shared {
        out: tokio::sync::Mutex::new(Box::new(output)),
        pending: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(1),
        scenario: Arc::new(scenario),
        log: std::env::var_os(LOG_ENV).map(PathBuf::from),
    });
    let mut sessions: HashMap<String, Arc<SessionSlot>> = HashMap::new();
    let mut tasks = tokio::task::JoinSet::new();
    let mut lines = BufReader::new(input).lines();
    while let Some(line) = lines
        .next_line()
        .await
        .map_err(|e| Error::internal(format!("cannot read stdin: {e}")))?
    {
        let msg = match decode_line::<Message>(&line) {
            Ok(Some(m)) => m,
            Ok(None) => continue,
            Err(e) => {
                tracing::debug!("the client wrote {e}");
                continue;
            }
        };
        match msg {
            Message::Response(r) => {
                // An answer to one of our requests.
                if let Some(n) = r.id.as_u64() {
                    let tx = shared.pending.lock().expect("pending lock").remove(&n);
                    if let Some(tx) = tx {
                        let _ = tx.send(r);
                    }
                }
            }
            Message::Request(r) if r.method == method::INITIALIZE => {
                let answer = InitializeResponse::new(ProtocolVersion::V1)
                    .agent_capabilities(
                        AgentCapabilities::new()
                            .load_session(true)
                            .prompt_capabilities(
                                PromptCapabilities::new()
                                    .image(false)
                                    .audio(false)
                                    .embedded_context(false),
                            )
                            .mcp_capabilities(McpCapabilities::new().http(true).sse(false)),
                    )
                    .agent_info(Implementation::new(
                        "agensh-script",
                        env!("CARGO_PKG_VERSION"),
                    ));
                shared.reply(Response::ok(r.id, answer)).await;
            }
            Message::Request(r) if r.method == method::SESSION_NEW => {
                let started = match r.params::<NewSessionRequest>() {
                    Ok(p) => new_session(p.cwd, &p.mcp_servers, None).await,
                    Err(e) => Err(e),
                };
                match started {
                    Ok(slot) => {
                        let sid = slot.id.clone();
                        sessions.insert(sid.clone(), Arc::new(slot));
                        let answer = NewSessionResponse::new(sid);
                        shared.reply(Response::ok(r.id, answer)).await;
                    }
                    Err(e) => shared.reply(Response::error(r.id, e)).await,
                }
            }
            Message::Request(r) if r.method == method::SESSION_LOAD => {
                let loaded = match r.params::<LoadSessionRequest>() {
                    Ok(p) => {
                        let id = p.session_id.0.to_string();
                        new_session(p.cwd, &p.mcp_servers, Some(&id)).await
                    }
                    Err(e) => Err(e),
                };
                match loaded {
                    Ok(slot) => {
                        sessions.insert(slot.id.clone(), Arc::new(slot));
                        shared.reply(Response::ok(r.id, json!({}))).await;
                    }
                    Err(e) => shared.reply(Response::error(r.id, e)).await,
                }
            }
            Message::Request(r) if r.method == method::SESSION_PROMPT => {
                let p = match r.params::<PromptRequest>() {
                    Ok(p) => p,
                    Err(e) => {
                        shared.reply(Response::error(r.id, e)).await;
                        continue;
                    }
                };
                let sid = p.session_id.0.to_string();
                let Some(slot) = sessions.get(&sid).cloned() else {
                    let unknown =
                        ErrorObject::new(code::INVALID_PARAMS, format!("unknown session {sid:?}"));
                    shared.reply(Response::error(r.id, unknown)).await;
                    continue;
                };
                let prompt = acp::text_of(&p.prompt);
                let sh = shared.clone();
                let id = r.id;
                tasks.spawn(async move {
                    let answer = run_prompt(&sh, &slot, &prompt).await;
                    sh.reply(Response::ok(id, answer)).await;
                });
            }
            Message::Notification(n) if n.method == method::SESSION_CANCEL => {
                if let Ok(c) = n.params::<CancelNotification>() {
                    if let Some(slot) = sessions.get(c.session_id.0.as_ref()) {
                        slot.cancel.store(true, Ordering::SeqCst);
                        slot.wake.notify_waiters();
                    }
                }
            }
            Message::Request(r) => {
                let unknown = ErrorObject::new(
                    code::METHOD_NOT_FOUND,
                    format!("method not found: {}", r.method),
                );
                shared.reply(Response::error(r.id, unknown)).await;
            }
            Message::Notification(_) => {}
        }
        // Reap finished prompts.
        while tasks.try_join_next().is_some() {}
    }
    // The client went away: cancel what runs and let it answer into the void.
    for slot in sessions.values() {
        slot.cancel.store(true, Ordering::SeqCst);
        slot.wake.notify_waiters();
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    Ok(())
}

/// What every session shares: the output, our outstanding requests, the scenario.
struct Shared {
    out: tokio::sync::Mutex<Box<dyn AsyncWrite + Unpin + Send>>,
    pending: Mutex<HashMap<u64, oneshot::Sender<Response>>>,
    next_id: AtomicU64,
    scenario: Arc<Scenario>,
    log: Option<PathBuf>,
}

impl Shared {
    async fn send(&self, msg: &Message) {
        let line = encode_line(msg);
        let mut out = self.out.lock().await;
        let _ = out.write_all(&line).await;
        let _ = out.flush().await;
    }

    async fn reply(&self, answer: Response) {
        self.send(&Message::Response(answer)).await;
    }

    async fn update(&self, session: &str, update: SessionUpdate) {
        let n = SessionNotification::new(session.to_string(), update);
        self.send(&Message::Notification(Notification::new(
            method::SESSION_UPDATE,
            n,
        )))
        .await;
    }

    /// Sends the client a request; its answer (result or error).
    async fn request(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> std::result::Result<Value, ErrorObject> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().expect("pending lock").insert(id, tx);
        self.send(&Message::Request(Request::new(id, method, params)))
            .await;
        match rx.await {
            Ok(r) => r.result,
            Err(_) => Err(ErrorObject::new(-1, "no answer")),
        }
    }

    /// Appends one JSON line to the script log, if there is one.
    fn log(&self, mut entry: Value) {
        let Some(path) = &self.log else { return };
        entry["t_ms"] = json!(now_ms());
        let mut line = entry.to_string();
        line.push('\n');
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
        if let Err(e) = written {
            tracing::warn!("cannot write the script log {}: {e}", path.display());
        }
    }
}

fn now_ms() -> i64 {
    agensh_domain::time::unix_ms(SystemTime::now())
}

/// A session: its fixed facts, a cancel flag, and the state a prompt works on.
struct SessionSlot {
    id: String,
    cancel: AtomicBool,
    /// Wakes a sleeping step when the turn is cancelled.
    wake: tokio::sync::Notify,
    state: tokio::sync::Mutex<State>,
}

/// What the agent remembers between turns.
struct State {
    session: String,
    cwd: PathBuf,
    worker: String,
    mcp_url: Option<String>,
    token: Option<String>,
    mcp: Option<McpClient>,
    /// The next step to run.
    cursor: usize,
    /// Nothing left to do: every part taken or every step run.
    idle: bool,
    part: Option<String>,
    claim: Option<String>,
    branch: Option<String>,
    pr: Option<i64>,
    /// The issue this agent took (`take_issue`).
    issue: Option<i64>,
    turns: u64,
    calls: u64,
    cost_total: f64,
    /// Where the progress above is kept, for `session/load` after a restart.
    state_file: Option<PathBuf>,
}

impl State {
    /// Keeps the progress for a later `session/load`.
    fn save(&self) {
        let Some(path) = &self.state_file else { return };
        let progress = json!({
            "cursor": self.cursor,
            "idle": self.idle,
            "part": self.part,
            "claim": self.claim,
            "branch": self.branch,
            "pr": self.pr,
            "issue": self.issue,
            "turns": self.turns,
            "calls": self.calls,
            "cost_total": self.cost_total,
        });
        let saved = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(path, progress.to_string()));
        if let Err(e) = saved {
            tracing::warn!("cannot keep the session state in {}: {e}", path.display());
        }
    }

    /// Takes back the progress a `save` kept.
    fn restore(&mut self, v: &Value) {
        let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        self.cursor = v.get("cursor").and_then(Value::as_u64).unwrap_or(0) as usize;
        self.idle = v.get("idle").and_then(Value::as_bool).unwrap_or(false);
        self.part = text("part");
        self.claim = text("claim");
        self.branch = text("branch");
        self.pr = v.get("pr").and_then(Value::as_i64);
        self.issue = v.get("issue").and_then(Value::as_i64);
        self.turns = v.get("turns").and_then(Value::as_u64).unwrap_or(0);
        self.calls = v.get("calls").and_then(Value::as_u64).unwrap_or(0);
        self.cost_total = v.get("cost_total").and_then(Value::as_f64).unwrap_or(0.0);
    }
}

static SESSIONS: AtomicU64 = AtomicU64::new(1);

/// A new session, or with `load` the stored session of that id.
async fn new_session(
    cwd: PathBuf,
    servers: &[McpServer],
    load: Option<&str>,
) -> std::result::Result<SessionSlot, ErrorObject> {
    // The server named agensh, else the first one over HTTP.
    fn endpoint(s: &McpServer) -> Option<(&str, &str, &Vec<HttpHeader>, bool)> {
        match s {
            McpServer::Http(h) => Some((h.name.as_str(), h.url.as_str(), &h.headers, true)),
            McpServer::Sse(h) => Some((h.name.as_str(), h.url.as_str(), &h.headers, false)),
            _ => None,
        }
    }
    let server = servers
        .iter()
        .filter_map(endpoint)
        .find(|(name, ..)| *name == "agensh")
        .or_else(|| servers.iter().filter_map(endpoint).find(|(.., http)| *http));
    let mcp_url = server.map(|(_, url, ..)| url.to_string());
    let token = server
        .and_then(|(_, _, headers, _)| {
            headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("authorization"))
        })
        .map(|h| {
            h.value
                .strip_prefix("Bearer ")
                .unwrap_or(&h.value)
                .to_string()
        });
    let worker = match std::env::var("AGENSH_WORKER") {
        Ok(w) if !w.is_empty() => w,
        _ => git_output(&cwd, &["config", "user.name"])
            .await
            .filter(|w| !w.is_empty())
            .unwrap_or_else(|| "agent".into()),
    };
    let id = match load {
        Some(id) => id.to_string(),
        None => format!(
            "script-{}-{}-{}",
            now_ms(),
            std::process::id(),
            SESSIONS.fetch_add(1, Ordering::Relaxed)
        ),
    };
    let safe = !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let state_file = match git_output(&cwd, &["rev-parse", "--absolute-git-dir"]).await {
        Some(dir) if safe => Some(
            Path::new(&dir)
                .join("agensh-script")
                .join(format!("{id}.json")),
        ),
        _ => None,
    };
    let mut state = State {
        session: id.clone(),
        cwd,
        worker,
        mcp_url,
        token,
        mcp: None,
        cursor: 0,
        idle: false,
        part: None,
        claim: None,
        branch: None,
        pr: None,
        issue: None,
        turns: 0,
        calls: 0,
        cost_total: 0.0,
        state_file,
    };
    if load.is_some() {
        let kept = state
            .state_file
            .as_ref()
            .and_then(|f| std::fs::read(f).ok())
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
        match kept {
            Some(v) => state.restore(&v),
            None => {
                return Err(ErrorObject::new(
                    code::NOT_FOUND,
                    format!("no session {id:?} is stored here"),
                ))
            }
        }
    } else {
        state.save();
    }
    Ok(SessionSlot {
        id,
        cancel: AtomicBool::new(false),
        wake: tokio::sync::Notify::new(),
        state: tokio::sync::Mutex::new(state),
    })
}

/// How a run of steps ended.
enum Flow {
    Next,
    EndTurn,
    /// End the turn as cut off at the step limit.
    StepLimit,
    /// Nothing left to do (every part taken): end the turn, idle from now on.
    Idle,
}

/// Runs one prompt: steps up to the next `end_turn`; the `session/prompt` answer.
async fn run_prompt(sh: &Shared, slot: &SessionSlot, prompt: &str) -> PromptResponse {
    let mut st = slot.state.lock().await;
    slot.cancel.store(false, Ordering::SeqCst);
    st.turns += 1;
    let mut t = Turn {
        sh,
        st: &mut st,
        cancel: &slot.cancel,
        wake: &slot.wake,
        out_chars: 0,
    };
    let stop_reason = t.run().await;
    let usage = match sh.scenario.usage {
        Some(u) => (u.input_tokens, u.output_tokens),
        None => (
            (prompt.chars().count() as u64).div_ceil(4),
            (t.out_chars as u64).div_ceil(4),
        ),
    };
    if let Some(u) = sh.scenario.usage.filter(|u| u.cost_usd > 0.0) {
        t.st.cost_total += u.cost_usd;
        let total = t.st.cost_total;
        let update = UsageUpdate::new(usage.0 + usage.1, 200_000).cost(Cost::new(total, "USD"));
        sh.update(&t.st.session, SessionUpdate::UsageUpdate(update))
            .await;
    }
    t.st.save();
    sh.log(json!({
        "event": "turn_end",
        "worker": t.st.worker,
        "session": t.st.session,
        "turn": t.st.turns,
        "stop_reason": acp::wire_name(&stop_reason),
        "part": t.st.part,
    }));
    PromptResponse::new(stop_reason).usage(acp::Usage::new(usage.0 + usage.1, usage.0, usage.1))
}

/// One turn's working context.
struct Turn<'a> {
    sh: &'a Shared,
    st: &'a mut State,
    cancel: &'a AtomicBool,
    wake: &'a tokio::sync::Notify,
    /// Characters the agent produced (for the usage estimate).
    out_chars: usize,
}

impl Turn<'_> {
    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }

    async fn run(&mut self) -> StopReason {
        let scenario = self.sh.scenario.clone();
        if self.st.idle || self.st.cursor >= scenario.steps.len() {
            self.st.idle = true;
            self.say("Nothing left for me to do.").await;
            return StopReason::EndTurn;
        }
        while self.st.cursor < scenario.steps.len() {
            if self.cancelled() {
                return StopReason::Cancelled;
            }
            let step = &scenario.steps[self.st.cursor];
            self.st.cursor += 1;
            // A crash inside this step resumes after it (a `session/load` skips it).
            self.st.save();
            match self.step(step).await {
                Flow::Next => {}
                Flow::EndTurn => break,
                Flow::StepLimit => return StopReason::MaxTurnRequests,
                Flow::Idle => {
                    self.st.idle = true;
                    self.st.cursor = scenario.steps.len();
                    break;
                }
            }
        }
        if self.cancelled() {
            return StopReason::Cancelled;
        }
        StopReason::EndTurn
    }

    async fn step(&mut self, step: &Step) -> Flow {
        match step {
            Step::ClaimFreePart { lease_secs, wait } => {
                return self.claim_free_part(*lease_secs, *wait).await
            }
            Step::TakeIssue { path, text, wait } => {
                return self.take_issue(path, text, *wait).await;
            }
            Step::WritePart => self.write_part().await,
            Step::WriteFile { path, text, append } => {
                let (path, text) = (self.fill(path), self.fill(text));
                self.write_file(&path, &text, *append).await;
            }
            Step::CommitPush { message, branch } => {
                self.commit_push(message.as_deref(), branch.as_deref())
                    .await;
            }
            Step::OpenPr { title, body } => {
                self.open_pr(title.as_deref(), body.as_deref()).await;
            }
            Step::MergePr { retries } => {
                self.merge_pr(*retries).await;
            }
            Step::OpenAndMergePr {
                title,
                body,
                retries,
            } => {
                if self.open_pr(title.as_deref(), body.as_deref()).await {
                    self.merge_pr(*retries).await;
                }
            }
            Step::BoardWrite {
                kind,
                text,
                label,
                detail,
            } => {
                let mut args = json!({ "kind": kind, "text": self.fill(text) });
                match label {
                    Some(l) => args["label"] = json!(self.fill(l)),
                    None => {
                        if let Some(p) = &self.st.part {
                            args["label"] = json!(format!("part-{p}"));
                        }
                    }
                }
                if let Some(d) = detail {
                    args["detail"] = json!(self.fill(d));
                }
                self.tool("board_write", args).await;
            }
            Step::MsgDm { to, text } => {
                let args = json!({ "to": self.fill(to), "text": self.fill(text) });
                self.tool("msg_dm", args).await;
            }
            Step::MsgPost { channel, text } => {
                let channel = channel.as_deref().unwrap_or("#general");
                let args = json!({ "channel": self.fill(channel), "text": self.fill(text) });
                self.tool("msg_post", args).await;
            }
            Step::Release => {
                if let Some(id) = self.st.claim.take() {
                    self.tool("release", json!({ "id": id })).await;
                }
            }
            Step::Call { tool, args } => {
                let args = self.fill_value(args);
                self.tool(tool, args).await;
            }
            Step::Poll {
                tool,
                args,
                every_ms,
                for_ms,
                until_notice,
            } => {
                let args = self.fill_value(args);
                let end = Instant::now() + Duration::from_millis(*for_ms);
                loop {
                    let r = self.tool(tool, args.clone()).await;
                    if (*until_notice && r.notices.is_some()) || self.cancelled() {
                        break;
                    }
                    let next = Instant::now() + Duration::from_millis(*every_ms);
                    if next >= end {
                        break;
                    }
                    self.sleep(Duration::from_millis(*every_ms)).await;
                }
            }
            Step::Sleep { ms } => self.sleep(Duration::from_millis(*ms)).await,
            Step::Barrier { path, count } => {
                let path = PathBuf::from(self.fill(path));
                if let Err(e) = arrive(&path, &self.st.worker) {
                    self.say(&format!("cannot reach the barrier {}: {e}", path.display()))
                        .await;
                    return Flow::EndTurn;
                }
                while arrivals(&path) < *count {
                    if self.cancelled() {
                        return Flow::EndTurn;
                    }
                    self.sleep(BARRIER_CHECK).await;
                }
            }
            Step::Say { text } => {
                let text = self.fill(text);
                self.say(&text).await;
            }
            Step::Git { args } => {
                let args: Vec<String> = args.iter().map(|a| self.fill(a)).collect();
                let refs: Vec<&str> = args.iter().map(String::as_str).collect();
                let _ = self.git(&refs).await;
            }
            Step::RequestPermission { title } => self.request_permission(title).await,
            Step::ClientRequest { method, params } => {
                let answer = self.sh.request(method, params.clone()).await;
                self.sh.log(json!({
                    "event": "client_request",
                    "worker": self.st.worker,
                    "session": self.st.session,
                    "method": method,
                    "result": answer.as_ref().ok(),
                    "error": answer.as_ref().err(),
                }));
                let text = match &answer {
                    Err(e) => format!("{method} failed: {}", json!(e)),
                    Ok(_) => format!("{method} answered"),
                };
                self.say(&text).await;
            }
            Step::Allocate { mib } => {
                let bytes = usize::try_from(mib.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
                // Every byte written, so every page is really the process's; kept to the end.
                let held = vec![1u8; bytes];
                std::hint::black_box(&held);
                self.say(&format!("holding {mib} MiB")).await;
                Box::leak(held.into_boxed_slice());
            }
            Step::Exit { code } => {
                self.sh.out.lock().await.flush().await.ok();
                std::process::exit(*code);
            }
            Step::ExitLater { ms, code } => {
                let (ms, code) = (*ms, *code);
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(ms));
                    std::process::exit(code);
                });
            }
            Step::EndTurn { step_limit: false } => return Flow::EndTurn,
            Step::EndTurn { step_limit: true } => return Flow::StepLimit,
        }
        Flow::Next
    }

    /// Sleeps, waking early on cancel (one timer, no polling: 1,024 sleeping agents cost
    /// no CPU).
    async fn sleep(&self, d: Duration) {
        let woken = self.wake.notified();
        tokio::pin!(woken);
        // Registered before the flag is read, so a cancel in between is not missed.
        woken.as_mut().enable();
        if self.cancelled() {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = woken => {}
        }
    }

    /// Replaces `{part}`, `{worker}`, `{branch}`, `{pr}`, `{claim}`, `{turn}`.
    fn fill(&self, t: &str) -> String {
        let pr = self.st.pr.map(|n| n.to_string()).unwrap_or_default();
        let turn = self.st.turns.to_string();
        t.replace("{part}", self.st.part.as_deref().unwrap_or(""))
            .replace("{worker}", &self.st.worker)
            .replace("{branch}", self.st.branch.as_deref().unwrap_or(""))
            .replace("{pr}", &pr)
            .replace("{claim}", self.st.claim.as_deref().unwrap_or(""))
            .replace("{turn}", &turn)
    }

    fn fill_value(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.fill(s)),
            Value::Array(a) => Value::Array(a.iter().map(|x| self.fill_value(x)).collect()),
            Value::Object(o) => Value::Object(
                o.iter()
                    .map(|(k, x)| (k.clone(), self.fill_value(x)))
                    .collect(),
            ),
            Value::Null => json!({}),
            other => other.clone(),
        }
    }

    async fn say(&mut self, text: &str) {
        self.out_chars += text.chars().count();
        self.sh
            .update(
                &self.st.session,
                SessionUpdate::AgentMessageChunk(ContentChunk::new(acp::text(text))),
            )
            .await;
    }

    fn next_call_id(&mut self) -> String {
        self.st.calls += 1;
        format!("call-{}", self.st.calls)
    }

    /// Calls an organization tool, reporting it to the client and the script log.
    async fn tool(&mut self, name: &str, args: Value) -> ToolResult {
        let call = self.next_call_id();
        self.out_chars += args.to_string().chars().count();
        self.sh
            .update(
                &self.st.session,
                SessionUpdate::ToolCall(
                    ToolCall::new(call.clone(), name)
                        .kind(ToolKind::Other)
                        .status(ToolCallStatus::InProgress)
                        .raw_input(args.clone()),
                ),
            )
            .await;
        let result = self.call_mcp(name, args.clone()).await;
        self.sh
            .update(
                &self.st.session,
                SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    call,
                    ToolCallUpdateFields::new()
                        .status(finished(!result.is_error))
                        .content(vec![ToolCallContent::from(acp::text(result.text.clone()))])
                        .raw_output(json!({
                            "text": result.text,
                            "isError": result.is_error,
                            "notices": result.notices,
                            "structured": result.structured,
                        })),
                )),
            )
            .await;
        self.sh.log(json!({
            "event": "tool",
            "worker": self.st.worker,
            "session": self.st.session,
            "turn": self.st.turns,
            "tool": name,
            "args": args,
            "is_error": result.is_error,
            "text": result.text,
            "notices": result.notices,
            "structured": result.structured,
        }));
        if let Some(n) = &result.notices {
            let n = n.clone();
            self.say(&n).await;
        }
        result
    }

    async fn call_mcp(&mut self, name: &str, args: Value) -> ToolResult {
        if self.st.mcp.is_none() {
            let (Some(url), Some(token)) = (self.st.mcp_url.clone(), self.st.token.clone()) else {
                return failed(
                    "no MCP server named agensh (type http, with an Authorization header) was given in session/new",
                );
            };
            match McpClient::connect(&url, &token).await {
                Ok(c) => self.st.mcp = Some(c),
                Err(e) => return failed(&e.message),
            }
        }
        let mcp = self.st.mcp.as_ref().expect("connected");
        match mcp.call_tool(name, args).await {
            Ok(r) => r,
            Err(e) => failed(&e.message),
        }
    }

    /// Runs git in the checkout, reported as an `execute` tool call; its output, or the
    /// error output when it fails.
    async fn git(&mut self, args: &[&str]) -> std::result::Result<String, String> {
        let call = self.next_call_id();
        let title = format!("git {}", args.join(" "));
        self.sh
            .update(
                &self.st.session,
                SessionUpdate::ToolCall(
                    ToolCall::new(call.clone(), title.clone())
                        .kind(ToolKind::Execute)
                        .status(ToolCallStatus::InProgress),
                ),
            )
            .await;
        let out = Git::worktree(&self.st.cwd)
            .as_worker(&self.st.worker)
            .output(args)
            .await;
        let (ok, text) = match out {
            Ok(o) => (o.success(), format!("{}{}", o.stdout, o.stderr)),
            Err(e) => (false, e.message),
        };
        self.sh
            .update(
                &self.st.session,
                SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    call,
                    ToolCallUpdateFields::new()
                        .status(finished(ok))
                        .content(vec![ToolCallContent::from(acp::text(text.clone()))]),
                )),
            )
            .await;
        if ok {
            Ok(text)
        } else {
            tracing::info!("{title} failed: {text}");
            Err(text)
        }
    }

    async fn claim_free_part(&mut self, lease_secs: Option<u64>, wait: bool) -> Flow {
        if self.st.part.is_some() && self.st.claim.is_some() {
            return Flow::Next; // still holding one
        }
        let scenario = self.sh.scenario.clone();
        let fetched = self
            .git(&["fetch", "--quiet", "origin", "main"])
            .await
            .is_ok();
        // A part not known to be done that could not be claimed now.
        let mut undone = false;
        for part in &scenario.parts {
            if self.cancelled() {
                return Flow::EndTurn;
            }
            let path = scenario.part_path.replace("{part}", part);
            if fetched
                && self
                    .git(&["cat-file", "-e", &format!("FETCH_HEAD:{path}")])
                    .await
                    .is_ok()
            {
                continue; // done already
            }
            let mut args = json!({
                "text": format!("part {part}"),
                "label": format!("part-{part}"),
                "paths": [&path],
            });
            if let Some(l) = lease_secs {
                args["lease_secs"] = json!(l);
            }
            let r = self.tool("claim", args).await;
            let Some(mine) = claim_id(&r).filter(|_| !r.is_error) else {
                undone = true;
                continue;
            };
            let earlier: Vec<String> = overlap_ids(&r)
                .into_iter()
                .filter(|o| match (seq_of(o), seq_of(&mine)) {
                    (Some(a), Some(b)) => a < b,
                    _ => true,
                })
                .collect();
            if earlier.is_empty() {
                // A peer may have merged it and let its claim go since the check above.
                if self
                    .git(&["fetch", "--quiet", "origin", "main"])
                    .await
                    .is_ok()
                    && self
                        .git(&["cat-file", "-e", &format!("FETCH_HEAD:{path}")])
                        .await
                        .is_ok()
                {
                    self.tool("release", json!({ "id": mine })).await;
                    continue;
                }
                self.st.part = Some(part.clone());
                self.st.claim = Some(mine);
                self.st.branch = None;
                self.st.pr = None;
                let msg = format!("I took part {part}.");
                self.say(&msg).await;
                return Flow::Next;
            }
            let msg = format!(
                "Part {part} is claimed already ({}); trying the next one.",
                earlier.join(", ")
            );
            self.say(&msg).await;
            self.tool("release", json!({ "id": mine })).await;
            undone = true;
        }
        if wait && (undone || !fetched) {
            self.say("Every free part is claimed, but not all are done; I will look again.")
                .await;
            // The next prompt runs this step again.
            self.st.cursor -= 1;
            return Flow::EndTurn;
        }
        self.say("Every part is taken; nothing for me to do.").await;
        Flow::Idle
    }

    async fn take_issue(&mut self, path: &str, text: &str, wait: bool) -> Flow {
        let r = self
            .tool("issue_list", json!({ "assignee": "none", "limit": 500 }))
            .await;
        if r.is_error {
            self.say("I cannot list the issues; I will end this turn.")
                .await;
            return Flow::EndTurn;
        }
        let mut free: Vec<(i64, String)> = r
            .structured
            .as_ref()
            .and_then(|s| s.get("issues"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|i| {
                Some((
                    i.get("number")?.as_i64()?,
                    i.get("title")?.as_str()?.to_string(),
                ))
            })
            .collect();
        free.sort();
        for (n, title) in free {
            if self.cancelled() {
                return Flow::EndTurn;
            }
            let c = self.tool("issue_claim", json!({ "number": n })).await;
            if c.is_error {
                continue; // a peer took it first
            }
            self.st.issue = Some(n);
            let fill = |t: &str| {
                self.fill(t)
                    .replace("{issue}", &n.to_string())
                    .replace("{issue_title}", &title)
            };
            let (path, text) = (fill(path), fill(text));
            let short: String = title.chars().take(180).collect();
            let name = format!("Issue #{n}: {short}");
            let branch = format!("{}/issue-{n}", self.st.worker);
            self.write_file(&path, &text, false).await;
            if !self.commit_push(Some(&name), Some(&branch)).await {
                self.say(&format!(
                    "I could not push {branch}; issue #{n} stays mine."
                ))
                .await;
                return Flow::EndTurn;
            }
            let summary = format!("files={path} | closes #{n}");
            let shipped = self
                .tool(
                    "ship",
                    json!({ "title": name, "summary": summary, "branch": branch }),
                )
                .await;
            if shipped.is_error {
                self.say(&format!("Shipping issue #{n} failed; it stays mine."))
                    .await;
            } else {
                self.st.pr = pr_number(&shipped);
                self.say(&format!("I shipped issue #{n}; its merge closes it."))
                    .await;
            }
            return Flow::Next;
        }
        if wait {
            self.say("No open issue is free now; I will look again.")
                .await;
            self.st.cursor -= 1;
            return Flow::EndTurn;
        }
        self.say("No open issue is free; nothing to take.").await;
        Flow::Next
    }

    async fn write_part(&mut self) {
        let Some(part) = self.st.part.clone() else {
            self.say("No part held: nothing to write.").await;
            return;
        };
        let scenario = self.sh.scenario.clone();
        let files = [
            (&scenario.part_path, &scenario.templates.part),
            (&scenario.test_path, &scenario.templates.test),
        ];
        for (path, template) in files {
            if let Some(t) = template {
                let path = path.replace("{part}", &part);
                let text = self.fill(t);
                self.write_file(&path, &text, false).await;
            }
        }
    }

    async fn write_file(&mut self, path: &str, text: &str, append: bool) {
        let call = self.next_call_id();
        let full = self.st.cwd.join(path);
        let title = format!("write {path}");
        self.sh
            .update(
                &self.st.session,
                SessionUpdate::ToolCall(
                    ToolCall::new(call.clone(), title)
                        .kind(ToolKind::Edit)
                        .status(ToolCallStatus::InProgress)
                        .locations(vec![ToolCallLocation::new(full.clone())]),
                ),
            )
            .await;
        self.out_chars += text.chars().count();
        let written = (|| -> std::io::Result<()> {
            if let Some(dir) = full.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .append(append)
                .truncate(!append)
                .open(&full)?;
            std::io::Write::write_all(&mut f, text.as_bytes())
        })();
        if let Err(e) = &written {
            tracing::warn!("cannot write {}: {e}", full.display());
        }
        self.sh
            .update(
                &self.st.session,
                SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    call,
                    ToolCallUpdateFields::new().status(finished(written.is_ok())),
                )),
            )
            .await;
    }

    async fn commit_push(&mut self, message: Option<&str>, branch: Option<&str>) -> bool {
        let branch = match branch {
            Some(b) => self.fill(b),
            None => match &self.st.part {
                Some(p) => format!("{}/part-{p}", self.st.worker),
                None => format!("{}/work", self.st.worker),
            },
        };
        self.st.branch = Some(branch.clone());
        let message = match message {
            Some(m) => self.fill(m),
            None => match &self.st.part {
                Some(p) => format!("Part {p}"),
                None => "Work".to_string(),
            },
        };
        if self.git(&["add", "-A"]).await.is_err() {
            return false;
        }
        let staged = self.git(&["diff", "--cached", "--quiet"]).await.is_err();
        if staged
            && self
                .git(&["commit", "--quiet", "-m", &message])
                .await
                .is_err()
        {
            return false;
        }
        self.push().await
    }

    async fn push(&mut self) -> bool {
        let Some(branch) = self.st.branch.clone() else {
            return false;
        };
        self.git(&[
            "push",
            "--quiet",
            "origin",
            &format!("HEAD:refs/heads/{branch}"),
        ])
        .await
        .is_ok()
    }

    async fn open_pr(&mut self, title: Option<&str>, body: Option<&str>) -> bool {
        let Some(branch) = self.st.branch.clone() else {
            self.say("Nothing pushed: no pull request to open.").await;
            return false;
        };
        let title = match title {
            Some(t) => self.fill(t),
            None => match &self.st.part {
                Some(p) => format!("Part {p}"),
                None => format!("Work of {}", self.st.worker),
            },
        };
        let mut args = json!({ "branch": branch, "title": title });
        if let Some(b) = body {
            args["body"] = json!(self.fill(b));
        }
        let r = self.tool("pr_open", args).await;
        if r.is_error {
            return false;
        }
        self.st.pr = pr_number(&r);
        self.st.pr.is_some()
    }

    async fn merge_pr(&mut self, retries: u32) -> bool {
        let Some(number) = self.st.pr else {
            self.say("No pull request to merge.").await;
            return false;
        };
        let mut attempts = 0;
        loop {
            let r = self.tool("pr_merge", json!({ "number": number })).await;
            if !r.is_error {
                return true;
            }
            if attempts >= retries || self.cancelled() {
                return false;
            }
            attempts += 1;
            if r.text.contains("merge_in_progress") || r.text.contains("being merged") {
                self.sleep(Duration::from_millis(200)).await;
                continue;
            }
            if !(r.text.contains("merge_conflict") || r.text.contains("conflicts with main")) {
                return false;
            }
            self.say("The merge conflicts with main; merging main into my branch.")
                .await;
            if !self.merge_main().await || !self.push().await {
                return false;
            }
        }
    }

    /// `git pull origin main`, settling conflicts by keeping both sides (union merge).
    async fn merge_main(&mut self) -> bool {
        let Ok(git_dir) = self.git(&["rev-parse", "--absolute-git-dir"]).await else {
            return false;
        };
        let attributes = Path::new(git_dir.trim()).join("agensh-union-attributes");
        if std::fs::write(&attributes, "* merge=union\n").is_err() {
            return false;
        }
        let attr = format!("core.attributesFile={}", attributes.display());
        let pulled = self
            .git(&[
                "-c",
                &attr,
                "-c",
                "pull.rebase=false",
                "pull",
                "--quiet",
                "--no-edit",
                "origin",
                "main",
            ])
            .await;
        if pulled.is_err() {
            let _ = self.git(&["merge", "--abort"]).await;
            return false;
        }
        true
    }

    async fn request_permission(&mut self, title: &str) {
        let call = self.next_call_id();
        let option = |id: &'static str, name: &str, kind| PermissionOption::new(id, name, kind);
        let request = RequestPermissionRequest::new(
            self.st.session.clone(),
            ToolCallUpdate::new(
                call,
                ToolCallUpdateFields::new()
                    .title(title.to_string())
                    .kind(ToolKind::Execute)
                    .status(ToolCallStatus::Pending),
            ),
            vec![
                option("allow-once", "Allow once", PermissionOptionKind::AllowOnce),
                option(
                    "allow-always",
                    "Always allow",
                    PermissionOptionKind::AllowAlways,
                ),
                option("reject-once", "Reject", PermissionOptionKind::RejectOnce),
            ],
        );
        let answer = self
            .sh
            .request(method::SESSION_REQUEST_PERMISSION, request)
            .await;
        let error = answer.as_ref().err().map(|e| json!(e));
        let (outcome, option) = match answer
            .ok()
            .and_then(|v| serde_json::from_value::<RequestPermissionResponse>(v).ok())
            .map(|r| r.outcome)
        {
            Some(RequestPermissionOutcome::Selected(s)) => {
                ("selected".to_string(), Some(s.option_id.0.to_string()))
            }
            Some(RequestPermissionOutcome::Cancelled) => ("cancelled".to_string(), None),
            _ => ("error".to_string(), None),
        };
        self.sh.log(json!({
            "event": "permission",
            "worker": self.st.worker,
            "session": self.st.session,
            "title": title,
            "outcome": outcome,
            "option": option,
            "error": error,
        }));
        let msg = match &option {
            Some(o) => format!("Permission for {title}: {outcome} ({o})."),
            None => format!("Permission for {title}: {outcome}."),
        };
        self.say(&msg).await;
    }
}

/// The status a finished tool call reports.
fn finished(ok: bool) -> ToolCallStatus {
    if ok {
        ToolCallStatus::Completed
    } else {
        ToolCallStatus::Failed
    }
}

fn failed(message: &str) -> ToolResult {
    ToolResult {
        text: message.to_string(),
        is_error: true,
        notices: None,
        structured: None,
    }
}

/// The trimmed output of git in `dir`, or `None` when it fails.
async fn git_output(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Git::worktree(dir).output(args).await.ok()?;
    out.success().then(|| out.stdout.trim().to_string())
}

/// The record id (`G12`) a claim answered with.
fn claim_id(r: &ToolResult) -> Option<String> {
    if let Some(s) = &r.structured {
        for p in ["/record/id", "/id", "/claim/id"] {
            if let Some(id) = s.pointer(p).and_then(Value::as_str) {
                return Some(id.to_string());
            }
        }
    }
    record_ids(&r.text).into_iter().next()
}

/// How often an agent at a barrier looks whether the others have arrived.
const BARRIER_CHECK: Duration = Duration::from_millis(20);

/// Notes at the barrier file `path` that `worker` arrived (one line, appended at once).
fn arrive(path: &Path, worker: &str) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(format!("{worker}\n").as_bytes())
}

/// How many arrivals the barrier file `path` names (none while it does not exist).
fn arrivals(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

/// The ids of the overlapping claims a claim answer reports.
fn overlap_ids(r: &ToolResult) -> Vec<String> {
    // The hub answers a claim with `{record, overlaps}`; no `overlaps` means none.
    if let Some(s) = r.structured.as_ref().filter(|s| s.get("record").is_some()) {
        return s
            .get("overlaps")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|o| o.get("id").and_then(Value::as_str).map(str::to_string))
            .collect();
    }
    let mine = claim_id(r);
    r.text
        .lines()
        .filter(|l| l.to_ascii_lowercase().contains("overlap"))
        .flat_map(record_ids)
        .filter(|id| Some(id) != mine.as_ref())
        .collect()
}

/// Every `G<digits>` token in `text`, in order.
fn record_ids(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| w.len() > 1 && w.starts_with('G') && w[1..].bytes().all(|b| b.is_ascii_digit()))
        .map(str::to_string)
        .collect()
}

fn seq_of(id: &str) -> Option<i64> {
    id.strip_prefix('G')?.parse().ok()
}

/// The number of the PR a `pr_open` answered with.
fn pr_number(r: &ToolResult) -> Option<i64> {
    if let Some(s) = &r.structured {
        for p in ["/number", "/pr/number"] {
            if let Some(n) = s.pointer(p).and_then(Value::as_i64) {
                return Some(n);
            }
        }
    }
    let i = r.text.find('#')?;
    let digits: String = r.text[i + 1..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
parts = ["p1", "p2", "p3"]
[templates]
part = "def {part}():\n    return '{part}'\n"
test = "from parts.{part} import {part}\n"
[[step]]
action = "claim_free_part"
[[step]]
action = "write_part"
[[step]]
action = "commit_push"
[[step]]
action = "open_and_merge_pr"
[[step]]
action = "board_write"
kind = "PATCH_SUMMARY"
text = "files=parts/{part}.py | idea=... | evidence=tests passed"
[[step]]
action = "release"
[[step]]
action = "poll"
tool = "board_read"
every_ms = 200
for_ms = 2000
[[step]]
action = "call"
tool = "msg_dm"
args = { to = "w02", text = "hello from {worker}" }
[[step]]
action = "end_turn"
"#;

    #[test]
    fn take_issue_has_defaults_and_takes_templates() {
        let s = Scenario::parse("[[step]]\naction = \"take_issue\"\n").unwrap();
        match &s.steps[0] {
            Step::TakeIssue { path, text, wait } => {
                assert_eq!(path, "issues/{issue}.txt");
                assert_eq!(text, "Done: {issue_title}\n");
                assert!(!wait);
            }
            other => panic!("{other:?}"),
        }
        let s = Scenario::parse(
            "[[step]]\naction = \"take_issue\"\npath = \"fix/{issue}.md\"\nwait = true\n",
        )
        .unwrap();
        assert!(
            matches!(&s.steps[0], Step::TakeIssue { wait: true, path, .. } if path == "fix/{issue}.md")
        );
        let e = Scenario::parse("[[step]]\naction = \"take_issue\"\nlabel = \"x\"\n").unwrap_err();
        assert_eq!(e.code, "bad_scenario");
    }

    #[test]
    fn the_example_scenario_parses() {
        let s = Scenario::parse(EXAMPLE).unwrap();
        assert_eq!(s.parts, ["p1", "p2", "p3"]);
        assert_eq!(s.steps.len(), 9);
        assert!(matches!(
            s.steps[0],
            Step::ClaimFreePart {
                lease_secs: None,
                wait: false,
            }
        ));
        assert!(matches!(
            s.steps[6],
            Step::Poll {
                every_ms: 200,
                for_ms: 2000,
                ..
            }
        ));
        match &s.steps[7] {
            Step::Call { tool, args } => {
                assert_eq!(tool, "msg_dm");
                assert_eq!(args["to"], json!("w02"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_barrier_counts_each_arrival_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("barrier");
        assert_eq!(arrivals(&path), 0);
        arrive(&path, "w01").unwrap();
        arrive(&path, "w02").unwrap();
        assert_eq!(arrivals(&path), 2);
        let s = Scenario::parse("[[step]]\naction = \"barrier\"\npath = \"/tmp/b\"\ncount = 2\n")
            .unwrap();
        assert!(matches!(&s.steps[0], Step::Barrier { count: 2, .. }));
    }

    #[test]
    fn mistakes_are_named() {
        let e = Scenario::parse("[[step]]\naction = \"fly\"\n").unwrap_err();
        assert!(e.message.contains("fly"), "{}", e.message);
        let e = Scenario::parse("[[step]]\naction = \"sleep\"\nms = 1\nextra = 2\n").unwrap_err();
        assert!(e.message.contains("extra"), "{}", e.message);
        let e = Scenario::parse("[[step]]\naction = \"claim_free_part\"\n").unwrap_err();
        assert!(e.message.contains("no parts"), "{}", e.message);
        let e = Scenario::parse("[[step]]\naction = \"barrier\"\npath = \"b\"\ncount = 0\n")
            .unwrap_err();
        assert!(e.message.contains("count of at least 1"), "{}", e.message);
    }

    #[test]
    fn ids_and_numbers_are_read_from_text_or_structure() {
        let r = ToolResult {
            text: "claimed G12 part p1\noverlap: G7 by w01 (part-p1)".into(),
            ..Default::default()
        };
        assert_eq!(claim_id(&r).as_deref(), Some("G12"));
        assert_eq!(overlap_ids(&r), ["G7"]);
        let r = ToolResult {
            structured: Some(json!({ "record": { "id": "G3" }, "overlaps": [{ "id": "G2" }] })),
            ..Default::default()
        };
        assert_eq!(claim_id(&r).as_deref(), Some("G3"));
        assert_eq!(overlap_ids(&r), ["G2"]);
        let r = ToolResult {
            text: "opened PR #14 from w01/part-p1".into(),
            ..Default::default()
        };
        assert_eq!(pr_number(&r), Some(14));
    }
}
