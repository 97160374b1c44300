//! The `pi` adapter: pi-coding-agent through its RPC mode, as the reference system drives
//! it — a second, thin adapter beside ACP.
//!
//! The wire is JSON lines over stdin and stdout, split on `\n` only: a command
//! `{"id","type":"prompt","message"}` is answered at once (`{"type":"response",...}`), then
//! the run streams events until `agent_end`. Each model request ends in a `message_end` of
//! the assistant with its usage (input without cache reads, which come apart); tool calls
//! are `tool_execution_start` / `_end`. pi has no MCP client: the organization's tools come
//! from an extension agensh writes into the worker's pi home (`agensh-tools.ts`), which
//! reads the MCP endpoint and the worker's token from `agensh-mcp.json` (mode 0600) and
//! registers every hub tool. Sessions live in the worker's home; a restart continues the
//! latest (`--continue`). The process is contained like an ACP agent's: its own process
//! group and a mark in its environment.

use std::path::PathBuf;
use std::process::Stdio;

use agensh_domain::agents::ENV_REMOVED;
use agensh_domain::{Error, ErrorKind, Result};
use agensh_process::{GroupChild, Mark, ProcessGroup};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::acp::{
    absolute, end_marked, exit_error, open_stderr_log, private_dir, write_private, PresetRun,
    HANDSHAKE_TIMEOUT, STOP_GRACE,
};
use super::cpu::AgentCpu;
use super::limits::{AgentCgroup, OomWatch};
use super::{Agent, AgentContext, Heartbeat, TurnEvent, TurnOutcome, Usage};

/// The extension that gives pi the organization's tools.
const TOOLS_EXTENSION: &str = include_str!("pi/agensh-tools.ts");

/// pi driven through its RPC mode.
pub struct PiAgent {
    run: PresetRun,
    /// A command of the user's own instead of the installed program.
    command: Vec<String>,
    cpu: AgentCpu,
    /// The worker's cgroup pi runs in, when the node has cgroups.
    cgroup: Option<AgentCgroup>,
    running: Option<Running>,
}

struct Running {
    child: Child,
    group: ProcessGroup,
    stdin: Option<ChildStdin>,
    /// Every line pi wrote, parsed; closed when its output ends.
    lines: mpsc::UnboundedReceiver<Value>,
    reader: JoinHandle<()>,
    mark: Mark,
    /// The kills by the worker's memory limit before this start.
    oom: Option<OomWatch>,
    stderr_log: PathBuf,
    what: String,
    heartbeat: Heartbeat,
    /// Raised to end the running turn: pi gets `abort`.
    interrupt: super::Interrupt,
    next_id: u64,
    in_turn: bool,
}

impl PiAgent {
    pub fn new(run: PresetRun, command: Vec<String>) -> Self {
        PiAgent {
            run,
            command,
            cpu: AgentCpu::default(),
            cgroup: None,
            running: None,
        }
    }

    /// The same agent started in the worker's cgroup (none: the node has no cgroups).
    pub fn with_cgroup(mut self, cgroup: Option<AgentCgroup>) -> Self {
        self.cgroup = cgroup;
        self
    }

    /// The same agent sharing the CPU with the node as `cpu` says.
    pub fn with_cpu(mut self, cpu: AgentCpu) -> Self {
        self.cpu = cpu;
        self
    }

    /// The processes still carrying this start's mark (for tests and benchmarks).
    pub fn marked_processes(&self) -> Vec<u32> {
        self.running
            .as_ref()
            .map(|r| r.mark.processes())
            .unwrap_or_default()
    }

    async fn launch(&mut self, ctx: &AgentContext) -> Result<Running> {
        let launch = self.run.prepare(ctx, &self.command)?;
        let agent_dir = ctx.agent_home.join(".pi").join("agent");
        private_dir(&agent_dir.join("extensions"))?;
        write_private(
            &agent_dir.join("extensions").join("agensh-tools.ts"),
            TOOLS_EXTENSION,
        )?;
        write_private(
            &agent_dir.join("agensh-mcp.json"),
            &json!({ "url": ctx.mcp_url(), "token": ctx.token }).to_string(),
        )?;
        let sessions = ctx.agent_home.join(".pi").join("sessions");
        private_dir(&sessions)?;
        let mut command = launch.command.clone();
        command.push("--session-dir".into());
        command.push(absolute(&sessions));
        if std::fs::read_dir(&sessions).is_ok_and(|mut d| d.next().is_some()) {
            command.push("--continue".into());
        }
        let what = command.join(" ");
        let (stderr_log, log) = open_stderr_log(&ctx.state_dir, &what)?;
        let mark = Mark::new(&ctx.worker);
        let (mark_var, mark_value) = mark.env();
        let mut cmd = tokio::process::Command::new(&command[0]);
        cmd.args(&command[1..])
            .current_dir(&ctx.checkout)
            .env_remove("AGENSH_PUSHER")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE");
        for var in ENV_REMOVED.iter().chain(&launch.env_removed) {
            cmd.env_remove(var);
        }
        cmd.env("AGENSH_WORKER", &ctx.worker)
            .env("AGENSH_HUB", &ctx.hub_url)
            .env(mark_var, mark_value)
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true);
        let oom = super::limits::attach(self.cgroup.as_ref(), &mut cmd, &what)?;
        let GroupChild { mut child, group } =
            agensh_process::group::spawn(&mut cmd, super::cpu::priority(self.cpu)).map_err(
                |e| {
                    Error::new(
                        ErrorKind::Internal,
                        "agent_not_started",
                        format!("cannot start pi `{what}`: {e}"),
                    )
                },
            )?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = mpsc::unbounded_channel();
        let beat = ctx.heartbeat.clone();
        let reader = tokio::spawn(async move {
            // `lines()` splits on `\n` only, as pi's protocol requires.
            let mut out = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = out.next_line().await {
                beat.beat();
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) => {
                        if tx.send(v).is_err() {
                            break;
                        }
                    }
                    Err(_) => tracing::debug!("pi wrote a line that is not JSON: {line:.200}"),
                }
            }
        });
        Ok(Running {
            child,
            group,
            stdin: Some(stdin),
            lines,
            reader,
            mark,
            oom,
            stderr_log,
            what,
            heartbeat: ctx.heartbeat.clone(),
            interrupt: ctx.interrupt.clone(),
            next_id: 1,
            in_turn: false,
        })
    }
}

impl Drop for PiAgent {
    fn drop(&mut self) {
        if let Some(r) = &self.running {
            r.group.kill();
            r.mark.kill_all();
        }
    }
}

#[async_trait::async_trait]
impl Agent for PiAgent {
    async fn start(&mut self, ctx: &AgentContext) -> Result<()> {
        if self.running.is_some() {
            self.stop().await;
        }
        let mut r = self.launch(ctx).await?;
        // Ready when it answers a command: its extensions (the organization's tools) are
        // loaded before pi reads its input.
        let ready = match tokio::time::timeout(HANDSHAKE_TIMEOUT, r.command("get_state", json!({})))
            .await
        {
            Ok(answer) => answer,
            Err(_) => Err(Error::new(
                ErrorKind::Internal,
                "agent_timeout",
                format!(
                    "pi did not answer within {} s — see {}",
                    HANDSHAKE_TIMEOUT.as_secs(),
                    r.stderr_log.display()
                ),
            )),
        };
        match ready {
            Ok(_) => {
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
        // Lines of an abandoned turn belong to no one.
        while r.lines.try_recv().is_ok() {}
        r.command("prompt", json!({ "message": prompt })).await?;
        r.in_turn = true;
        let mut turn = PiTurn::default();
        let interrupt = r.interrupt.clone();
        let mut aborted = false;
        loop {
            // Interrupted: pi aborts the turn (its running tool too) and ends it.
            let line = tokio::select! {
                line = r.lines.recv() => Some(line),
                _ = interrupt.raised(), if !aborted => None,
            };
            let Some(line) = line else {
                aborted = true;
                if r.send(json!({ "type": "abort" })).await.is_err() {
                    r.in_turn = false;
                    return Err(r.exited("a turn").await);
                }
                continue;
            };
            let Some(event) = line else {
                r.in_turn = false;
                return Err(r.exited("a turn").await);
            };
            if let Some(step) = turn.event(&event) {
                r.heartbeat.step(step);
            }
            if event["type"] == "agent_end" {
                break;
            }
        }
        r.in_turn = false;
        turn.finish()
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
        let _ = r.child.wait().await;
        r.exited("the wait between turns").await
    }
}

/// Aborts a running turn, closes stdin (pi exits at its end), then kills its group and
/// everything that carries its mark.
async fn shutdown(r: &mut Running) {
    if r.in_turn {
        let _ = tokio::time::timeout(STOP_GRACE, r.send(json!({ "type": "abort" }))).await;
    }
    r.stdin.take();
    let _ = tokio::time::timeout(STOP_GRACE, r.child.wait()).await;
    r.group.kill();
    end_marked(Some(r.mark.clone()), &format!("pi `{}`", r.what)).await;
    let _ = tokio::time::timeout(STOP_GRACE, r.child.wait()).await;
    r.reader.abort();
}

impl Running {
    async fn send(&mut self, msg: Value) -> std::io::Result<()> {
        let Some(w) = self.stdin.as_mut() else {
            return Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        };
        let mut line = msg.to_string().into_bytes();
        line.push(b'\n');
        w.write_all(&line).await?;
        w.flush().await
    }

    /// Sends the command `kind` and waits for its response; the response's `data`.
    async fn command(&mut self, kind: &str, fields: Value) -> Result<Value> {
        let id = format!("agensh-{}", self.next_id);
        self.next_id += 1;
        let mut msg = json!({ "id": id, "type": kind });
        if let (Some(m), Value::Object(f)) = (msg.as_object_mut(), fields) {
            m.extend(f);
        }
        if self.send(msg).await.is_err() {
            return Err(self.exited(kind).await);
        }
        loop {
            let Some(line) = self.lines.recv().await else {
                return Err(self.exited(kind).await);
            };
            if line["type"] == "response" && line["id"] == id.as_str() {
                if line["success"] == true {
                    return Ok(line["data"].clone());
                }
                return Err(Error::new(
                    ErrorKind::Internal,
                    "agent_refused",
                    format!(
                        "pi refused {kind}: {}",
                        line["error"].as_str().unwrap_or("no reason given")
                    ),
                ));
            }
        }
    }

    async fn exited(&mut self, during: &str) -> Error {
        let who = format!("pi `{}`", self.what);
        let (group, mark) = (self.group, Some(self.mark.clone()));
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

/// One prompt's events, gathered into a turn.
#[derive(Default)]
struct PiTurn {
    events: Vec<TurnEvent>,
    usage: Usage,
    /// The last model request's stop reason and error message.
    stop: Option<(String, Option<String>)>,
    /// The last event is a message still receiving deltas.
    open_message: bool,
    /// Tool call id → index of its event.
    calls: std::collections::HashMap<String, usize>,
    requests: u64,
}

impl PiTurn {
    /// Notes one event; the title of a tool call it starts (the turn's new step).
    fn event(&mut self, e: &Value) -> Option<String> {
        match e["type"].as_str()? {
            "message_update" => {
                let delta = &e["assistantMessageEvent"];
                if delta["type"] == "text_delta" {
                    let text = delta["delta"].as_str().unwrap_or_default();
                    if let (true, Some(TurnEvent::Message { text: t })) =
                        (self.open_message, self.events.last_mut())
                    {
                        t.push_str(text);
                    } else if !text.is_empty() {
                        self.events.push(TurnEvent::Message { text: text.into() });
                        self.open_message = true;
                    }
                }
            }
            "message_end" if e["message"]["role"] == "assistant" => {
                self.open_message = false;
                let m = &e["message"];
                let u = &m["usage"];
                let n = |k: &str| u[k].as_u64().unwrap_or(0);
                if u.is_object() {
                    self.requests += 1;
                    // pi counts cache reads and writes apart from the input.
                    self.usage.input_tokens += n("input") + n("cacheRead") + n("cacheWrite");
                    self.usage.cached_input_tokens += n("cacheRead");
                    self.usage.output_tokens += n("output");
                    self.usage.cost_usd += u["cost"]["total"].as_f64().unwrap_or(0.0);
                }
                self.stop = Some((
                    m["stopReason"].as_str().unwrap_or("stop").to_string(),
                    m["errorMessage"].as_str().map(str::to_string),
                ));
            }
            "tool_execution_start" => {
                self.open_message = false;
                let name = e["toolName"].as_str().unwrap_or("tool").to_string();
                let id = e["toolCallId"].as_str().unwrap_or_default().to_string();
                self.calls.insert(id, self.events.len());
                self.events.push(TurnEvent::ToolCall {
                    name: name.clone(),
                    status: "in_progress".into(),
                    kind: String::new(),
                });
                return Some(name);
            }
            "tool_execution_end" => {
                let id = e["toolCallId"].as_str().unwrap_or_default();
                let status = if e["isError"] == true {
                    "failed"
                } else {
                    "completed"
                };
                if let Some(TurnEvent::ToolCall { status: s, .. }) =
                    self.calls.get(id).and_then(|&i| self.events.get_mut(i))
                {
                    *s = status.into();
                }
            }
            _ => {}
        }
        None
    }

    /// The outcome; a turn whose last model request failed (the endpoint unreachable, the
    /// key refused) is a failed turn with pi's message.
    fn finish(self) -> Result<TurnOutcome> {
        let (reason, error) = self.stop.unwrap_or(("stop".into(), None));
        let stop_reason = match reason.as_str() {
            "stop" | "toolUse" => "end_turn".to_string(),
            "length" => "max_tokens".to_string(),
            "aborted" => "cancelled".to_string(),
            "error" => {
                return Err(Error::new(
                    ErrorKind::Internal,
                    "model_failed",
                    format!(
                        "pi's model request failed: {}",
                        error.unwrap_or_else(|| "no message".into())
                    ),
                ))
            }
            other => other.to_string(),
        };
        let usage = if self.requests == 0 {
            Usage::not_reported()
        } else {
            self.usage
        };
        Ok(TurnOutcome {
            stop_reason,
            usage,
            events: self.events,
            model_ms: 0,
            tools_ms: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn_of(lines: &[Value]) -> Result<TurnOutcome> {
        let mut t = PiTurn::default();
        for l in lines {
            t.event(l);
        }
        t.finish()
    }

    #[test]
    fn a_prompts_events_make_one_turn_with_its_usage() {
        let end = |usage: Value, stop: &str| json!({ "type": "message_end", "message": { "role": "assistant", "usage": usage, "stopReason": stop } });
        let out = turn_of(&[
            json!({ "type": "message_end", "message": { "role": "user" } }),
            json!({ "type": "message_update", "assistantMessageEvent": { "type": "text_delta", "delta": "Run" } }),
            json!({ "type": "message_update", "assistantMessageEvent": { "type": "text_delta", "delta": "ning." } }),
            end(json!({ "input": 600, "output": 10, "cacheRead": 400, "cacheWrite": 0, "cost": { "total": 0.002 } }), "toolUse"),
            json!({ "type": "tool_execution_start", "toolCallId": "c1", "toolName": "bash" }),
            json!({ "type": "tool_execution_end", "toolCallId": "c1", "isError": false }),
            json!({ "type": "tool_execution_start", "toolCallId": "c2", "toolName": "board_write" }),
            json!({ "type": "tool_execution_end", "toolCallId": "c2", "isError": true }),
            end(json!({ "input": 1200, "output": 20, "cacheRead": 800, "cacheWrite": 0 }), "stop"),
        ])
        .unwrap();
        assert_eq!(out.stop_reason, "end_turn");
        assert_eq!(
            (
                out.usage.input_tokens,
                out.usage.cached_input_tokens,
                out.usage.output_tokens
            ),
            (3000, 1200, 30)
        );
        assert_eq!(
            out.events,
            vec![
                TurnEvent::Message {
                    text: "Running.".into()
                },
                TurnEvent::ToolCall {
                    name: "bash".into(),
                    status: "completed".into(),
                    kind: String::new(),
                },
                TurnEvent::ToolCall {
                    name: "board_write".into(),
                    status: "failed".into(),
                    kind: String::new(),
                },
            ]
        );
    }

    #[test]
    fn a_failed_model_request_is_a_failed_turn_with_the_cause() {
        let e = turn_of(&[json!({ "type": "message_end", "message": { "role": "assistant", "usage": { "input": 0, "output": 0 }, "stopReason": "error", "errorMessage": "Connection error." } })])
            .unwrap_err();
        assert_eq!(e.message, "pi's model request failed: Connection error.");
    }

    #[test]
    fn no_model_request_is_not_reported_usage() {
        let out = turn_of(&[json!({ "type": "agent_end" })]).unwrap();
        assert_eq!(out.usage, Usage::not_reported());
    }
}
