//! `agensh.toml`: the organization's configuration, with every default written out.
//!
//! Precedence: flags > environment (`AGENSH_*`) > this file > defaults, applied by
//! [`Config::resolve`], which also says where each value came from. No IO: the caller reads
//! the file and the environment and passes them in.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub organization: Organization,
    #[serde(default)]
    pub hub: HubConfig,
    #[serde(default)]
    pub board: BoardConfig,
    #[serde(default)]
    pub merge: MergeConfig,
    #[serde(default)]
    pub run: RunConfig,
    #[serde(default)]
    pub model: ModelConfig,
    #[serde(default)]
    pub gateway: crate::gateway::GatewayConfig,
    #[serde(default)]
    pub budget: crate::budget::BudgetConfig,
    #[serde(default)]
    pub limits: crate::limits::LimitsConfig,
}

/// The calling styles the built-in agent knows (`model.style`).
pub const TOOL_STYLES: [&str; 3] = ["auto", "tools", "json"];
/// The built-in agent's modes (`model.mode`): `auto` is small on the local model.
pub const MODEL_MODES: [&str; 3] = ["auto", "small", "full"];
/// The local model's sizes (`model.local_size`).
pub const LOCAL_SIZES: [&str; 2] = ["0.5b", "1.5b"];
/// How an ACP agent's permission requests are answered (`run.permissions`).
pub const PERMISSIONS: [&str; 3] = ["allow_once", "allow_always", "reject"];

/// `[model]`: the endpoint the built-in agent talks to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// An OpenAI-compatible base URL (`…/v1`); empty: the local model agensh installs and serves.
    pub url: String,
    /// The model name sent to the endpoint (empty: the local model's own name).
    pub name: String,
    /// The environment variable holding the endpoint's API key (empty: none is sent).
    pub api_key_env: String,
    /// How the agent calls tools: `auto`, `tools` (native tool_calls) or `json` (one
    /// schema-constrained action per reply).
    pub style: String,
    /// The context window per worker, in tokens; the conversation is compacted near it.
    pub context_tokens: u32,
    /// Longest reply per request, in tokens.
    pub max_reply_tokens: u32,
    /// Sampling temperature.
    pub temperature: f64,
    /// Model requests per turn before the turn ends.
    pub max_steps_per_turn: u32,
    /// Longest a shell command of the agent may run, in seconds.
    pub command_timeout_secs: u64,
    /// The local model's size when `url` is empty: `0.5b` or `1.5b`.
    pub local_size: String,
    /// How much the built-in agent is shown: `small` (a short prompt, the few tools a part
    /// needs), `full`, or `auto` (small on the local model, full on any other endpoint).
    pub mode: String,
    /// Agents reach their model through the hub's gateway (`/model/...`) with their worker's
    /// token; `false`: each agent talks to the endpoint itself, with the real key.
    pub gateway: bool,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            url: String::new(),
            name: String::new(),
            api_key_env: String::new(),
            style: "auto".into(),
            context_tokens: 8192,
            max_reply_tokens: 1024,
            temperature: 0.2,
            max_steps_per_turn: 24,
            command_timeout_secs: 120,
            local_size: "1.5b".into(),
            mode: "auto".into(),
            gateway: true,
        }
    }
}

impl ModelConfig {
    /// True when the built-in agent runs on the local model agensh serves itself.
    pub fn is_local(&self) -> bool {
        self.url.trim().is_empty()
    }
}

/// `[run]`: how a run drives its workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    /// Workers in the organization.
    pub workers: usize,
    /// The agent: `builtin` (the built-in agent over `[model]`), a preset (`claude`,
    /// `codex`, `copilot`, `gemini`: see [`crate::agents`]), `acp` (any ACP agent, see
    /// `agent_command`) or `script` (tests and load).
    pub agent: String,
    /// For `acp`: the command line that starts the agent. For a preset: a command of your
    /// own in place of the installed one (the preset's settings still apply).
    pub agent_command: Vec<String>,
    /// How an ACP agent's permission requests are answered: `allow_once` (the default),
    /// `allow_always` (some agents then write their own settings into the checkout) or
    /// `reject`.
    pub permissions: String,
    /// Groups of workers with an agent (and model) of their own; the others run `agent`.
    pub agents: Vec<AgentGroup>,
    /// For `script`: the scenario file.
    pub scenario: String,
    /// Length of the run in hours (0: no limit).
    pub hours: f64,
    /// Seconds between two workers' activation.
    pub stagger_secs: f64,
    /// Seconds without events after a turn before a continue prompt.
    pub idle_timeout_secs: u64,
    /// Deadline notices, in minutes before the end.
    pub notices_minutes: Vec<f64>,
    /// How agent processes share the CPU with the harness.
    pub agent_cpu: AgentCpu,
    /// The most memory one worker's agent (with everything it starts) may use, as a size
    /// (`"64GiB"`, `"512MiB"`; see [`crate::size`]); empty: no limit. Enforced by a cgroup
    /// per worker; a node that cannot make one refuses to start while this is set.
    pub worker_memory: String,
    /// How the workers' agents share the CPU among themselves: each worker's cgroup
    /// `cpu.weight` (1 to 10,000; 100 is an equal share). `agent_cpu` is how all agents
    /// together share it with the harness.
    pub worker_cpu_weight: u32,
    /// Restarts in a row of a failing agent before its worker is given up as dead.
    pub max_restarts: u32,
    /// Seconds before the first restart of a failed agent; doubled for each further
    /// failure in a row, up to 5 minutes.
    pub restart_backoff_secs: f64,
    /// Seconds an agent may go without a sign of life in the middle of a turn before it is
    /// taken as hung and restarted (0: never).
    pub hang_timeout_secs: u64,
    /// Seconds an urgent item for a worker in a turn (a direct message, a review of its PR,
    /// its PR that failed to merge, an urgent notice) may wait unseen before the node
    /// interrupts the turn and starts the next one with it (0: never interrupt). Board
    /// records and channel posts never interrupt.
    pub interrupt_after_secs: u64,
    /// Most git network operations (clone, fetch, push) a node on another host than the
    /// hub's runs at once; the others wait in line.
    pub git_jobs: usize,
    /// Go on after the goal is met (`organization.done_when`) until the run's end, as if
    /// it had no goal to meet.
    pub keep_going: bool,
    /// Park a worker whose turns change nothing: its continue prompts back off from 1 to
    /// 16 minutes and a board record no longer wakes it (any other event does).
    pub park_idle: bool,
}

/// One entry of `run.agents`: these workers run this agent, on this model.
///
/// ```toml
/// [[run.agents]]
/// workers = "w01-w04"        # a range, a list ("w01,w03") or one id
/// agent = "claude"
/// model = "claude-sonnet-4-5"
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentGroup {
    /// Which workers: `w01-w04`, `w01,w03,w07`, or one id.
    pub workers: String,
    /// Any value `run.agent` takes.
    pub agent: String,
    /// For `acp`, or a preset run from a command of your own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agent_command: Vec<String>,
    /// The model (else `model.name`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
    /// The endpoint (else `model.url`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model_url: String,
    /// The variable holding the endpoint's key (else `model.api_key_env`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_key_env: String,
}

impl AgentGroup {
    /// Whether the worker `id` is in this group. `w01-w04` covers the ids between the two
    /// ends with the same prefix, compared by number.
    pub fn covers(&self, id: &str) -> bool {
        crate::gateway::covers(&self.workers, id)
    }
}

/// How agent processes (ACP and scripted agents, and everything they start) share the CPU
/// with the harness (`run.agent_cpu`). A post to a channel wakes every worker at once; at
/// the harness's priority, hundreds of agents waking together delay the prompts to the
/// last workers by a tenth of a second and more on a small machine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentCpu {
    /// `SCHED_IDLE` (and nice 19): agents get every cycle the harness does not use, and
    /// the harness never waits for them. The default.
    #[default]
    Background,
    /// Nice 19: agents yield to the harness by weight only.
    Low,
    /// The harness's own priority.
    Normal,
}

impl AgentCpu {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentCpu::Background => "background",
            AgentCpu::Low => "low",
            AgentCpu::Normal => "normal",
        }
    }
}

/// The cgroup `cpu.weight` of every worker unless `run.worker_cpu_weight` says otherwise:
/// the kernel's own default, an equal share.
pub const DEFAULT_CPU_WEIGHT: u32 = 100;

/// The least `run.worker_memory` may be: an agent runtime alone takes tens of MiB.
pub const MIN_WORKER_MEMORY: crate::size::MemorySize = crate::size::MemorySize::mib(16);

impl RunConfig {
    /// How long urgent news may wait unseen while a worker is in a turn before it
    /// interrupts the turn; none when `interrupt_after_secs` is 0 (never).
    pub fn interrupt_after(&self) -> Option<std::time::Duration> {
        (self.interrupt_after_secs > 0)
            .then(|| std::time::Duration::from_secs(self.interrupt_after_secs))
    }

    /// `worker_memory` read: the limit, or none when it is empty. The error says what is
    /// wrong and how to write it.
    pub fn worker_memory_limit(&self) -> Result<Option<crate::size::MemorySize>> {
        if self.worker_memory.trim().is_empty() {
            return Ok(None);
        }
        let size = crate::size::MemorySize::parse(&self.worker_memory).map_err(|e| {
            Error::invalid("bad_config", format!("agensh.toml: run.worker_memory: {e}"))
        })?;
        if size < MIN_WORKER_MEMORY {
            return Err(Error::invalid(
                "bad_config",
                format!(
                    "agensh.toml: run.worker_memory is {size}, too little for an agent — give at least {MIN_WORKER_MEMORY}, or \"\" for no limit"
                ),
            ));
        }
        Ok(Some(size))
    }
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            workers: 4,
            agent: "builtin".into(),
            agent_command: Vec::new(),
            permissions: "allow_once".into(),
            agents: Vec::new(),
            scenario: String::new(),
            hours: 6.0,
            stagger_secs: 2.0,
            idle_timeout_secs: 300,
            notices_minutes: vec![45.0, 5.0],
            agent_cpu: AgentCpu::Background,
            worker_memory: String::new(),
            worker_cpu_weight: DEFAULT_CPU_WEIGHT,
            max_restarts: 5,
            restart_backoff_secs: 5.0,
            hang_timeout_secs: 1800,
            interrupt_after_secs: 120,
            git_jobs: 8,
            keep_going: false,
            park_idle: true,
        }
    }
}

/// The longest `run.interrupt_after_secs`: a day.
pub const MAX_INTERRUPT_AFTER_SECS: u64 = 86_400;

/// Most gate runs at once (`merge.gate_jobs`).
pub const MAX_GATE_JOBS: usize = 256;

/// `[merge]`: how the hub merges pull requests into `main`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MergeConfig {
    /// A shell command run on the merged tree before `main` moves; empty for none.
    pub gate: String,
    /// Longest the gate may run, in seconds; past it the merge is refused.
    pub gate_timeout_secs: u64,
    /// Most gated merges folded into one chain and tested together (a failing chain is
    /// searched); 1 gates each merge alone.
    pub gate_batch: usize,
    /// Gate runs at once on a chain's prefixes; 0: as many as the hub's machine has cores.
    pub gate_jobs: usize,
    /// Approving reviews a PR needs before it may merge.
    pub required_approvals: u32,
}

impl Default for MergeConfig {
    fn default() -> Self {
        MergeConfig {
            gate: String::new(),
            gate_timeout_secs: 600,
            gate_batch: 32,
            gate_jobs: 0,
            required_approvals: 0,
        }
    }
}

/// `[organization]`: what the workers work toward.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Organization {
    pub goal: String,
    /// A directory (relative to agensh.toml) whose files seed `main` when `agensh run`
    /// creates the organization's state next to an agensh.toml that has none yet.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub seed: String,
    /// A task pack: Markdown files (relative to agensh.toml) appended to every worker's
    /// prompt, in order (`agensh bench programbench` writes ProgramBench's rules there).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pack: Vec<String>,
    /// When the goal is met (`crate::goal`): conditions such as `"command: python3 -m
    /// unittest"`, `"issues"` or `"score: 0.9"`, all of which must hold on one commit of
    /// `main`; a single string is one condition. Empty: the run goes on until its end.
    #[serde(default, deserialize_with = "one_or_many")]
    pub done_when: Vec<String>,
    /// Longest a `command:` condition may run, in seconds; past it, it counts as not met.
    #[serde(default = "default_done_timeout")]
    pub done_timeout_secs: u64,
}

fn default_done_timeout() -> u64 {
    600
}

/// A list of strings, or one string as a list of one.
fn one_or_many<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

/// `[hub]`: where and how the hub serves.
/// The most `hub.max_wait_secs` may be set to: no long-poll waits longer on any hub.
pub const MAX_WAIT_SECS: u64 = 3_600;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HubConfig {
    /// Address to listen on; loopback unless you mean to open it.
    pub listen: String,
    /// Where the hub keeps its state: empty for the embedded SQLite file
    /// (`.agensh/store.sqlite`), or a PostgreSQL URL (`postgres://…`) several hubs can share.
    pub store: String,
    /// Largest request body accepted, in bytes.
    pub body_limit: usize,
    /// Longest long-poll wait a client may ask for, in seconds.
    pub max_wait_secs: u64,
    /// Web origins (`https://host[:port]`) whose browser requests a hub listening beyond
    /// loopback accepts; a hub on loopback accepts loopback origins only.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_origins: Vec<String>,
    /// Most connections open at once; one more is answered 503 and closed.
    pub max_connections: usize,
    /// Seconds a client has to send a request's headers; also the longest a kept-alive
    /// connection may sit idle between two requests.
    pub header_timeout_secs: u64,
    /// Seconds a request body may stall (no byte arriving) before the request is cut off.
    pub body_timeout_secs: u64,
    /// Longest one request may take, in seconds; long-polls may take their `wait` on top,
    /// and git and the model gateway have their own.
    pub request_timeout_secs: u64,
    /// Most `git http-backend` processes at once; more requests wait in line.
    pub git_processes: usize,
    /// Longest one git request (a clone, fetch or push) may take, in seconds.
    pub git_timeout_secs: u64,
    /// Seconds an urgent direct message may wait without being shown to its worker before
    /// its sender is told (once per message, `msg.unseen`); 0: never.
    pub unseen_notice_secs: u64,
}

impl Default for HubConfig {
    fn default() -> Self {
        HubConfig {
            listen: "127.0.0.1:7420".into(),
            store: String::new(),
            body_limit: 65_536,
            max_wait_secs: 60,
            allowed_origins: Vec::new(),
            max_connections: 4_096,
            header_timeout_secs: 30,
            body_timeout_secs: 30,
            request_timeout_secs: 120,
            git_processes: 16,
            git_timeout_secs: 900,
            unseen_notice_secs: 180,
        }
    }
}

/// `url` with its password replaced by `***` (`postgres://agensh:***@db/agensh`), for
/// showing a store URL (`hub.store`) without its secret — the password of the user part and
/// a `password=` query parameter (`?password=***`); anything else unchanged.
pub fn redact_url_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rfind('@') {
        Some(at) => match authority[..at].split_once(':') {
            Some((user, _password)) => format!("{user}:***{}", &authority[at..]),
            None => authority.to_string(),
        },
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let (query, fragment) = query.split_at(query.find('#').unwrap_or(query.len()));
            let params: Vec<String> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => p.to_string(),
                })
                .collect();
            format!("{path}?{}{fragment}", params.join("&"))
        }
        None => tail.to_string(),
    };
    format!("{scheme}://{authority}{tail}")
}

/// `scheme://host[:port]` of a web origin, lower-cased, or why it is not one.
pub fn web_origin(text: &str) -> std::result::Result<String, String> {
    let t = text.trim().to_ascii_lowercase();
    let Some((scheme, rest)) = t.split_once("://") else {
        return Err(format!(
            "{text:?} is not a web origin — write it as https://host or http://host:port"
        ));
    };
    if scheme != "http" && scheme != "https" {
        return Err(format!(
            "{text:?} is not a web origin: only http and https — write it as https://host"
        ));
    }
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ']) {
        return Err(format!("{text:?} is not a web origin: an origin has a host and maybe a port, no path — write it as {scheme}://host[:port]"));
    }
    Ok(format!("{scheme}://{rest}"))
}

/// `[board]`: the shared context board.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BoardConfig {
    /// Most entries in the recent view.
    pub view_cap: usize,
    /// Default CLAIM lease, in seconds.
    pub claim_lease_secs: u64,
}

impl Default for BoardConfig {
    fn default() -> Self {
        BoardConfig {
            view_cap: crate::page::DEFAULT_VIEW_CAP,
            claim_lease_secs: 3_600,
        }
    }
}

impl Config {
    /// A configuration with `goal` and every default.
    pub fn with_goal(goal: &str) -> Self {
        Config {
            organization: Organization {
                goal: goal.to_string(),
                seed: String::new(),
                pack: Vec::new(),
                done_when: Vec::new(),
                done_timeout_secs: default_done_timeout(),
            },
            hub: HubConfig::default(),
            board: BoardConfig::default(),
            merge: MergeConfig::default(),
            run: RunConfig::default(),
            model: ModelConfig::default(),
            gateway: crate::gateway::GatewayConfig::default(),
            budget: crate::budget::BudgetConfig::default(),
            limits: crate::limits::LimitsConfig::default(),
        }
    }

    /// Parses `agensh.toml`; the error names the file's problem and how to fix it.
    pub fn parse(text: &str) -> Result<Self> {
        let c: Config = toml::from_str(text).map_err(|e| {
            Error::invalid(
                "bad_config",
                format!("agensh.toml is not valid: {e}— fix the line named above (`agensh init` writes a commented example)"),
            )
        })?;
        c.validate()?;
        Ok(c)
    }

    /// Checks values that parse but make no sense.
    pub fn validate(&self) -> Result<()> {
        if self.organization.goal.trim().is_empty() {
            return Err(Error::invalid(
                "bad_config",
                "agensh.toml: organization.goal is empty — say what the organization should build",
            ));
        }
        // The error names the field (organization.done_when): it may come from a flag too.
        crate::goal::parse_all(&self.organization.done_when)?;
        if self.organization.done_timeout_secs == 0 || self.organization.done_timeout_secs > 86_400
        {
            return Err(Error::invalid(
                "bad_config",
                "agensh.toml: organization.done_timeout_secs must be between 1 and 86400",
            ));
        }
        if self.board.view_cap == 0 || self.board.view_cap > crate::page::MAX_VIEW_CAP {
            return Err(Error::invalid(
                "bad_config",
                format!(
                    "agensh.toml: board.view_cap must be between 1 and {}",
                    crate::page::MAX_VIEW_CAP
                ),
            ));
        }
        crate::record::validate_lease(self.board.claim_lease_secs).map_err(|e| {
            Error::invalid(
                "bad_config",
                format!("agensh.toml: board.claim_lease_secs: {}", e.message),
            )
        })?;
        for o in &self.hub.allowed_origins {
            web_origin(o).map_err(|e| {
                Error::invalid(
                    "bad_config",
                    format!("agensh.toml: hub.allowed_origins: {e}"),
                )
            })?;
        }
        if self.hub.body_limit < 1024 || self.hub.body_limit > 64 << 20 {
            return Err(Error::invalid(
                "bad_config",
                "agensh.toml: hub.body_limit must be between 1024 and 67108864 bytes",
            ));
        }
        if self.merge.gate_timeout_secs == 0 || self.merge.gate_timeout_secs > 86_400 {
            return Err(Error::invalid(
                "bad_config",
                "agensh.toml: merge.gate_timeout_secs must be between 1 and 86400",
            ));
        }
        if !(1..=1024).contains(&self.merge.gate_batch) {
            return Err(Error::invalid(
                "bad_config",
                "agensh.toml: merge.gate_batch must be between 1 and 1024 (1 gates each merge alone)",
            ));
        }
        if self.merge.gate_jobs > MAX_GATE_JOBS {
            return Err(Error::invalid(
                "bad_config",
                format!("agensh.toml: merge.gate_jobs must be between 0 and {MAX_GATE_JOBS} (0: one per core of the hub's machine)"),
            ));
        }
        if self.merge.required_approvals > 100 {
            return Err(Error::invalid(
                "bad_config",
                "agensh.toml: merge.required_approvals must be between 0 and 100",
            ));
        }
        if self.run.workers == 0 || self.run.workers > crate::worker::ADD_LIMIT {
            return Err(Error::invalid(
                "bad_config",
                format!(
                    "agensh.toml: run.workers must be between 1 and {}",
                    crate::worker::ADD_LIMIT
                ),
            ));
        }
        if !(0.0..=24.0 * 30.0).contains(&self.run.hours)
            || !(0.0..=3600.0).contains(&self.run.stagger_secs)
        {
            return Err(Error::invalid(
                "bad_config",
                "agensh.toml: run.hours must be 0 to 720 and run.stagger_secs 0 to 3600",
            ));
        }
        if self.run.idle_timeout_secs == 0 || self.run.notices_minutes.iter().any(|m| *m <= 0.0) {
            return Err(Error::invalid(
                "bad_config",
                "agensh.toml: run.idle_timeout_secs and every run.notices_minutes must be positive",
            ));
        }
        if !(1..=256).contains(&self.run.git_jobs) {
            return Err(Error::invalid(
                "bad_config",
                format!(
                    "agensh.toml: run.git_jobs is {}; it must be between 1 and 256",
                    self.run.git_jobs
                ),
            ));
        }
        if self.run.max_restarts > 1_000 || !(0.0..=3600.0).contains(&self.run.restart_backoff_secs)
        {
            return Err(Error::invalid(
                "bad_config",
                "agensh.toml: run.max_restarts must be 0 to 1000 and run.restart_backoff_secs 0 to 3600",
            ));
        }
        if self.run.interrupt_after_secs > MAX_INTERRUPT_AFTER_SECS {
            return Err(Error::invalid(
                "bad_config",
                format!(
                    "agensh.toml: run.interrupt_after_secs is {}; it must be 0 (never interrupt) to {MAX_INTERRUPT_AFTER_SECS} (a day)",
                    self.run.interrupt_after_secs
                ),
            ));
        }
        self.run.worker_memory_limit()?;
        if !(1..=10_000).contains(&self.run.worker_cpu_weight) {
            return Err(Error::invalid(
                "bad_config",
                format!(
                    "agensh.toml: run.worker_cpu_weight is {}, it must be 1 to 10000 (a cgroup's cpu.weight; {DEFAULT_CPU_WEIGHT} is an equal share)",
                    self.run.worker_cpu_weight
                ),
            ));
        }
        let known = crate::agents::agent_names();
        if !self.run.agent.is_empty() && !known.contains(&self.run.agent.as_str()) {
            return Err(Error::invalid(
                "bad_config",
                format!(
                    "run.agent \"{}\" is not an agent agensh knows — use one of {}",
                    self.run.agent,
                    known.join(", ")
                ),
            ));
        }
        for (i, g) in self.run.agents.iter().enumerate() {
            if !known.contains(&g.agent.as_str()) {
                return Err(Error::invalid(
                    "bad_config",
                    format!(
                        "run.agents[{i}].agent \"{}\" is not an agent agensh knows — use one of {}",
                        g.agent,
                        known.join(", ")
                    ),
                ));
            }
            if g.workers.trim().is_empty() {
                return Err(Error::invalid(
                    "bad_config",
                    format!(
                        "run.agents[{i}].workers is empty — name its workers, e.g. \"w01-w04\""
                    ),
                ));
            }
        }
        if !PERMISSIONS.contains(&self.run.permissions.as_str()) {
            return Err(Error::invalid(
                "bad_config",
                format!(
                    "run.permissions \"{}\" is not a policy — use one of {}",
                    self.run.permissions,
                    PERMISSIONS.join(", ")
                ),
            ));
        }
        self.model.validate()?;
        self.gateway.validate()?;
        self.budget.validate()?;
        self.limits.validate()?;
        let hub_ranges: [(&str, u64, u64, u64); 7] = [
            (
                "max_connections",
                self.hub.max_connections as u64,
                16,
                1_000_000,
            ),
            (
                "header_timeout_secs",
                self.hub.header_timeout_secs,
                1,
                3_600,
            ),
            ("body_timeout_secs", self.hub.body_timeout_secs, 1, 3_600),
            (
                "request_timeout_secs",
                self.hub.request_timeout_secs,
                1,
                86_400,
            ),
            ("git_processes", self.hub.git_processes as u64, 1, 4_096),
            ("git_timeout_secs", self.hub.git_timeout_secs, 10, 86_400),
            ("unseen_notice_secs", self.hub.unseen_notice_secs, 0, 86_400),
        ];
        for (name, value, lo, hi) in hub_ranges {
            if !(lo..=hi).contains(&value) {
                return Err(Error::invalid(
                    "bad_config",
                    format!("agensh.toml: hub.{name} is {value}; it must be between {lo} and {hi}"),
                ));
            }
        }
        let store = &self.hub.store;
        if !store.is_empty()
            && !store.starts_with("postgres://")
            && !store.starts_with("postgresql://")
        {
            return Err(Error::invalid(
                "bad_config",
                "hub.store must be empty (the embedded SQLite file) or a PostgreSQL URL, postgres://USER:PASSWORD@HOST:PORT/DATABASE",
            ));
        }
        if self.hub.max_wait_secs == 0 || self.hub.max_wait_secs > MAX_WAIT_SECS {
            return Err(Error::invalid(
                "bad_config",
                format!("agensh.toml: hub.max_wait_secs must be between 1 and {MAX_WAIT_SECS}"),
            ));
        }
        Ok(())
    }

    /// The file `agensh init` writes: every setting with its default and a comment.
    pub fn template(&self) -> String {
        format!(
            "{}{}{}{}{}",
            self.template_main(),
            self.model.template(),
            self.gateway.template(),
            self.budget.template(),
            self.limits.template()
        )
    }

    fn template_main(&self) -> String {
        let goal = toml::Value::String(self.organization.goal.clone());
        let done_when = toml::Value::Array(
            self.organization
                .done_when
                .iter()
                .map(|c| toml::Value::String(c.clone()))
                .collect(),
        );
        let done_timeout = self.organization.done_timeout_secs;
        let listen = toml::Value::String(self.hub.listen.clone());
        let store = toml::Value::String(self.hub.store.clone());
        format!(
            r#"# agensh organization configuration.
# Precedence: command-line flags > environment (AGENSH_*) > this file > built-in defaults.

[organization]
# What every worker works toward. Each worker gets the same prompt but its ID.
goal = {goal}{seed}{pack}
# When the goal is met: conditions that must all hold on one commit of main. The run then
# ends (every worker stops at its turn's end) with what it took to get there.
#   "command: CMD"  CMD exits 0 on main's tree (run in a scratch checkout after each merge)
#   "issues"        every issue of the organization is closed
#   "score: X"      a kept ProgramBench score of at least X (0 to 1)
# Empty: no goal to meet; the run goes on until run.hours.
done_when = {done_when}
# Longest a "command:" condition may run, in seconds; past it, it counts as not met.
done_timeout_secs = {done_timeout}

[hub]
# Address the hub listens on. Keep loopback unless nodes on other hosts must reach it.
listen = {listen}
# Where the hub keeps its state: "" for the embedded SQLite file (.agensh/store.sqlite), or
# a PostgreSQL database several hubs can share, "postgres://USER:PASSWORD@HOST:5432/DB"
# (`agensh hub --store URL` and AGENSH_STORE override it).
store = {store}
# Largest request body the hub accepts, in bytes; larger ones get HTTP 413.
body_limit = {body_limit}
# Longest long-poll wait (`agensh events --wait`) a client may ask for, in seconds.
max_wait_secs = {max_wait}{origins}
# Most connections open at once; one more is answered 503 and closed.
max_connections = {max_connections}
# Seconds a client has to send a request's headers (also the longest a kept-alive
# connection may sit idle), and a request body may stall, before it is cut off.
header_timeout_secs = {header_timeout}
body_timeout_secs = {body_timeout}
# Longest one request may take, in seconds (long-polls: their wait on top).
request_timeout_secs = {request_timeout}
# git smart HTTP: most `git http-backend` processes at once (more wait in line), and the
# longest one clone, fetch or push may take, in seconds.
git_processes = {git_processes}
git_timeout_secs = {git_timeout}
# Seconds an urgent direct message may wait without being shown to its worker before its
# sender gets a notice saying so (once per message); 0: never.
unseen_notice_secs = {unseen_notice}

[board]
# Most entries in the board's recent view (`agensh board read --all`).
view_cap = {view_cap}
# Default lease of a CLAIM, in seconds; renew it while the work goes on.
claim_lease_secs = {lease}

[merge]
# A shell command run on the merged tree (in a scratch checkout) before main moves,
# e.g. "cargo test" or "make check". Empty: no gate. A failing gate refuses the merge.
gate = {gate}
# Longest the gate may run, in seconds.
gate_timeout_secs = {gate_timeout}
# Most merges tested together: gated merges waiting together are folded into a chain,
# gated on its last commit and on shorter prefixes at once, landed up to the longest that
# passed, and a failing merge is searched for until it is refused alone (1: each merge
# gated alone). The gate's AGENSH_GATE_BASE is main before the merges it tests.
gate_batch = {gate_batch}
# Gate runs at once, each in its own scratch checkout (0: one per core of the hub's
# machine; more pays off for a gate that waits rather than computes).
gate_jobs = {gate_jobs}
# Approving reviews a pull request needs before it may merge (0: none).
required_approvals = {approvals}

[run]
# Workers in the organization (`agensh run --workers N` overrides it).
workers = {workers}
# The agent: "builtin" (agensh's own agent over the [model] endpoint; the default),
# a real agent CLI: "claude", "codex", "copilot" or "gemini" (`agensh agents install`
# installs them; [model] url, name and api_key_env point them at a model), "acp" (any
# Agent Client Protocol agent, started with `agent_command`), or "script" (a
# deterministic agent for tests and load; needs `scenario`).
agent = {agent}
agent_command = {agent_command}
# How an agent's permission requests are answered: "allow_once", "allow_always" (some
# agents then write settings files into the checkout) or "reject".
permissions = {permissions}
# Groups of workers with an agent and model of their own (the others run `agent`):
# [[run.agents]]
# workers = "w01-w04"
# agent = "claude"
# model = "claude-sonnet-4-5"   # also model_url, api_key_env, agent_command
scenario = {scenario}
# Length of the run in hours (0: no limit).
hours = {hours}
# Seconds between two workers' activation, so many workers do not start on the same second.
stagger_secs = {stagger}
# Seconds without events after a turn before the worker gets a continue prompt.
idle_timeout_secs = {idle}
# Deadline notices, in minutes before the end of the run.
notices_minutes = {notices}
# How agent processes share the CPU with the harness: "background" (the default: agents
# run on every cycle the harness leaves, so prompts reach 1,024 workers without waiting for
# them), "low" (nice 19) or "normal" (the harness's own priority).
agent_cpu = "{agent_cpu}"
# The most memory one worker's agent, with everything it starts, may use: "64GiB",
# "512MiB" (binary units; "" = no limit). Each worker's agent runs in a cgroup of its own;
# an agent that goes over is killed by the kernel, reported as killed by its memory limit
# and restarted like any failed agent. The node needs cgroups it may create (root, or
# systemd's Delegate=yes, or a container with a writable cgroup) and refuses to start
# without them while this is set.
worker_memory = {worker_memory}
# How the workers' agents share the CPU among themselves (a cgroup's cpu.weight, 1 to
# 10000; 100 is an equal share). `agent_cpu` above is how they all together yield to the
# harness.
worker_cpu_weight = {worker_cpu_weight}
# An agent that fails (exits, or a turn errors) is restarted, its session restored where
# the agent can, else with a recap; the wait doubles after each failure in a row. After
# `max_restarts` failures in a row the worker is dead: its claims lapse and #general is told.
max_restarts = {max_restarts}
restart_backoff_secs = {restart_backoff}
# An agent that shows no sign of life (no output, no step) for this many seconds in the
# middle of a turn is taken as hung and restarted the same way (0: never).
hang_timeout_secs = {hang_timeout}
# An urgent item (a direct message, a review of the worker's PR, its PR that failed to
# merge, an urgent notice) that waits this many seconds unseen while its worker is in a
# turn interrupts the turn: the agent is cancelled and the next turn starts at once with
# the item (0: never). Board records and channel posts never interrupt.
interrupt_after_secs = {interrupt_after}
# A node on another host (`agensh node --node-token`): most git clones, fetches and pushes
# at once; the others wait in line.
git_jobs = {git_jobs}
# After the goal is met (organization.done_when), go on until the run's end instead of
# stopping every worker at its turn's end.
keep_going = {keep_going}
# A worker whose last two turns changed nothing (no edit, commit, record, message, PR or
# issue) is parked: its continue prompts wait 1, 2, 4, 8, then 16 minutes, and a board
# record no longer wakes it (any other event does). false: a continue prompt after every
# idle_timeout_secs.
park_idle = {park_idle}
"#,
            seed = if self.organization.seed.is_empty() {
                String::new()
            } else {
                format!(
                    "\n# Files that seed main when `agensh run` creates the organization here.\nseed = {}",
                    toml::Value::String(self.organization.seed.clone())
                )
            },
            pack = if self.organization.pack.is_empty() {
                String::new()
            } else {
                format!(
                    "\n# A task pack: Markdown files appended to every worker's prompt, in order.\npack = {}",
                    toml::Value::Array(
                        self.organization
                            .pack
                            .iter()
                            .map(|p| toml::Value::String(p.clone()))
                            .collect()
                    )
                )
            },
            origins = if self.hub.allowed_origins.is_empty() {
                String::new()
            } else {
                format!(
                    "\n# Web origins whose browser requests a hub beyond loopback accepts.\nallowed_origins = {}",
                    toml::Value::Array(
                        self.hub
                            .allowed_origins
                            .iter()
                            .map(|o| toml::Value::String(o.clone()))
                            .collect()
                    )
                )
            },
            body_limit = self.hub.body_limit,
            max_wait = self.hub.max_wait_secs,
            max_connections = self.hub.max_connections,
            header_timeout = self.hub.header_timeout_secs,
            body_timeout = self.hub.body_timeout_secs,
            request_timeout = self.hub.request_timeout_secs,
            git_processes = self.hub.git_processes,
            git_timeout = self.hub.git_timeout_secs,
            unseen_notice = self.hub.unseen_notice_secs,
            view_cap = self.board.view_cap,
            lease = self.board.claim_lease_secs,
            gate = toml::Value::String(self.merge.gate.clone()),
            gate_timeout = self.merge.gate_timeout_secs,
            gate_batch = self.merge.gate_batch,
            gate_jobs = self.merge.gate_jobs,
            approvals = self.merge.required_approvals,
            workers = self.run.workers,
            agent = toml::Value::String(self.run.agent.clone()),
            agent_command = toml::Value::Array(
                self.run
                    .agent_command
                    .iter()
                    .cloned()
                    .map(toml::Value::String)
                    .collect()
            ),
            permissions = toml::Value::String(self.run.permissions.clone()),
            scenario = toml::Value::String(self.run.scenario.clone()),
            hours = toml::Value::Float(self.run.hours),
            stagger = toml::Value::Float(self.run.stagger_secs),
            idle = self.run.idle_timeout_secs,
            agent_cpu = self.run.agent_cpu.as_str(),
            worker_memory = toml::Value::String(self.run.worker_memory.clone()),
            worker_cpu_weight = self.run.worker_cpu_weight,
            max_restarts = self.run.max_restarts,
            restart_backoff = toml::Value::Float(self.run.restart_backoff_secs),
            hang_timeout = self.run.hang_timeout_secs,
            interrupt_after = self.run.interrupt_after_secs,
            git_jobs = self.run.git_jobs,
            keep_going = self.run.keep_going,
            park_idle = self.run.park_idle,
            notices = toml::Value::Array(
                self.run
                    .notices_minutes
                    .iter()
                    .map(|m| toml::Value::Float(*m))
                    .collect()
            ),
        )
    }
}

impl ModelConfig {
    /// Checks the values of `[model]`.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::invalid("bad_config", format!("agensh.toml: {m}")));
        if !TOOL_STYLES.contains(&self.style.as_str()) {
            return bad(format!(
                "model.style \"{}\" — use one of {}",
                self.style,
                TOOL_STYLES.join(", ")
            ));
        }
        if !LOCAL_SIZES.contains(&self.local_size.as_str()) {
            return bad(format!(
                "model.local_size \"{}\" — use one of {}",
                self.local_size,
                LOCAL_SIZES.join(", ")
            ));
        }
        if !MODEL_MODES.contains(&self.mode.as_str()) {
            return bad(format!(
                "model.mode \"{}\" — use one of {}",
                self.mode,
                MODEL_MODES.join(", ")
            ));
        }
        let url = self.url.trim();
        if !(url.is_empty() || url.starts_with("http://") || url.starts_with("https://")) {
            return bad(format!(
                "model.url \"{url}\" is not an http(s) URL — give the endpoint's base, e.g. http://127.0.0.1:8000/v1"
            ));
        }
        if !(1024..=2_000_000).contains(&self.context_tokens) {
            return bad("model.context_tokens must be between 1024 and 2000000".into());
        }
        if self.max_reply_tokens == 0 || self.max_reply_tokens >= self.context_tokens {
            return bad(
                "model.max_reply_tokens must be positive and below model.context_tokens".into(),
            );
        }
        if !(0.0..=2.0).contains(&self.temperature) {
            return bad("model.temperature must be between 0 and 2".into());
        }
        if !(1..=1000).contains(&self.max_steps_per_turn) {
            return bad("model.max_steps_per_turn must be between 1 and 1000".into());
        }
        if !(1..=86_400).contains(&self.command_timeout_secs) {
            return bad("model.command_timeout_secs must be between 1 and 86400".into());
        }
        Ok(())
    }

    fn template(&self) -> String {
        format!(
            r#"
[model]
# The built-in agent's endpoint: any OpenAI-compatible base URL (a hosted API, vLLM,
# llama.cpp, Ollama — e.g. "http://127.0.0.1:8000/v1"). Empty: the local model, which
# `agensh run` installs on first use (`agensh model install`) and serves itself.
url = {url}
# The model name sent to the endpoint (empty: the local model's own name).
name = {name}
# The environment variable that holds the endpoint's API key (empty: no key is sent).
api_key_env = {key}
# How the agent calls tools: "auto", "tools" (native tool_calls) or "json" (one
# schema-constrained action per reply; what small local models need).
style = {style}
# Context window per worker, in tokens; the conversation is compacted near it.
context_tokens = {ctx}
# Longest reply per request, in tokens.
max_reply_tokens = {reply}
# Sampling temperature.
temperature = {temp}
# Model requests per turn before the turn ends and pending events are delivered.
max_steps_per_turn = {steps}
# Longest one shell command of the agent may run, in seconds (its process group is killed).
command_timeout_secs = {cmd}
# The local model's size when url is empty: "0.5b" (faster) or "1.5b" (better).
local_size = {size}
# How much the built-in agent is shown: "small" (a short prompt, the few tools a part
# needs, the claimed files shown with the claim, no chatter on the board), "full", or
# "auto" (small on the local model, full on any other endpoint).
mode = {mode}
# Agents reach the model through the hub's gateway with their own agensh token (usage
# counted per worker, the real key kept at the hub); false: each agent gets the real key
# and talks to the endpoint itself.
gateway = {gateway}
"#,
            url = toml::Value::String(self.url.clone()),
            name = toml::Value::String(self.name.clone()),
            key = toml::Value::String(self.api_key_env.clone()),
            style = toml::Value::String(self.style.clone()),
            ctx = self.context_tokens,
            reply = self.max_reply_tokens,
            temp = toml::Value::Float(self.temperature),
            steps = self.max_steps_per_turn,
            cmd = self.command_timeout_secs,
            size = toml::Value::String(self.local_size.clone()),
            mode = toml::Value::String(self.mode.clone()),
            gateway = self.gateway,
        )
    }
}

/// The environment variables that set a configuration key: `(variable, key)`.
pub const ENV_KEYS: [(&str, &str); 3] = [
    ("AGENSH_LISTEN", "hub.listen"),
    ("AGENSH_STORE", "hub.store"),
    ("AGENSH_MODEL_URL", "model.url"),
];

/// Where a setting's value came from, weakest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "from", content = "name")]
pub enum Source {
    /// Nothing set it: agensh's default.
    Default,
    /// `agensh.toml`.
    File,
    /// This environment variable.
    Env(String),
    /// This command-line flag.
    Flag(String),
}

/// A setting given on the command line: the key it sets, the flag that set it, and its
/// value as text (parsed to the key's type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlagValue {
    /// The dotted key, e.g. `run.workers`.
    pub key: &'static str,
    /// The flag as typed, e.g. `--workers`.
    pub flag: &'static str,
    pub value: String,
}

/// One effective setting: its dotted key, its value and where the value came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Setting {
    pub key: String,
    pub value: toml::Value,
    pub source: Source,
}

/// The effective configuration, and where each of its values came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// The configuration, validated.
    pub config: Config,
    /// Every key of `config` (dotted, e.g. `run.workers`), sorted.
    pub settings: Vec<Setting>,
}

impl Resolved {
    /// Replaces what must not be shown in the settings (`agensh config` prints them): a
    /// store URL's password. `config` keeps the real values.
    pub fn redact_secrets(&mut self) {
        for s in self.settings.iter_mut().filter(|s| s.key == "hub.store") {
            if let toml::Value::String(url) = &s.value {
                s.value = toml::Value::String(redact_url_password(url));
            }
        }
    }
}

impl Config {
    /// The configuration from `agensh.toml`'s text, then the `AGENSH_*` variables of `env`
    /// ([`ENV_KEYS`]), then `flags`, each stronger than the one before; validated, with the
    /// source of every value.
    pub fn resolve(
        file: &str,
        env: &BTreeMap<String, String>,
        flags: &[FlagValue],
    ) -> Result<Resolved> {
        let from_file = Config::parse(file)?;
        let file_table: toml::Table = toml::from_str(file)
            .map_err(|e| Error::invalid("bad_config", format!("agensh.toml is not valid: {e}")))?;
        let mut table = toml::Table::try_from(&from_file)
            .map_err(|e| Error::internal(format!("the configuration does not serialize: {e}")))?;
        let mut sources = BTreeMap::new();
        for key in leaf_keys(&table) {
            let source = if lookup(&file_table, &key).is_some() {
                Source::File
            } else {
                Source::Default
            };
            sources.insert(key, source);
        }
        let from_env = ENV_KEYS.iter().filter_map(|(var, key)| {
            env.get(*var)
                .filter(|v| !v.is_empty())
                .map(|v| (*key, v.as_str(), Source::Env(var.to_string())))
        });
        let from_flags = flags
            .iter()
            .map(|f| (f.key, f.value.as_str(), Source::Flag(f.flag.to_string())));
        for (key, text, source) in from_env.collect::<Vec<_>>().into_iter().chain(from_flags) {
            let slot = lookup_mut(&mut table, key)
                .ok_or_else(|| Error::internal(format!("{key} is not a configuration key")))?;
            *slot = typed_like(slot, text).ok_or_else(|| {
                Error::invalid(
                    "bad_config",
                    format!(
                        "{} sets {key} to \"{text}\", which is not {}",
                        describe(&source),
                        kind_of(slot)
                    ),
                )
            })?;
            sources.insert(key.to_string(), source);
        }
        let config: Config = toml::Value::Table(table.clone()).try_into().map_err(|e| {
            Error::invalid("bad_config", format!("the configuration is not valid: {e}"))
        })?;
        config.validate()?;
        let settings = leaf_keys(&table)
            .into_iter()
            .map(|key| Setting {
                value: lookup(&table, &key).cloned().expect("a leaf key"),
                source: sources.remove(&key).unwrap_or(Source::Default),
                key,
            })
            .collect();
        Ok(Resolved { config, settings })
    }
}

/// Dotted keys of every value that is not a table, depth first.
fn leaf_keys(table: &toml::Table) -> Vec<String> {
    let mut keys = Vec::new();
    for (k, v) in table {
        match v {
            toml::Value::Table(t) => {
                keys.extend(leaf_keys(t).into_iter().map(|s| format!("{k}.{s}")))
            }
            _ => keys.push(k.clone()),
        }
    }
    keys
}

fn lookup<'a>(table: &'a toml::Table, key: &str) -> Option<&'a toml::Value> {
    let (first, rest) = key
        .split_once('.')
        .map_or((key, None), |(a, b)| (a, Some(b)));
    match (table.get(first)?, rest) {
        (v, None) => Some(v),
        (toml::Value::Table(t), Some(rest)) => lookup(t, rest),
        _ => None,
    }
}

fn lookup_mut<'a>(table: &'a mut toml::Table, key: &str) -> Option<&'a mut toml::Value> {
    let (first, rest) = key
        .split_once('.')
        .map_or((key, None), |(a, b)| (a, Some(b)));
    match (table.get_mut(first)?, rest) {
        (v, None) => Some(v),
        (toml::Value::Table(t), Some(rest)) => lookup_mut(t, rest),
        _ => None,
    }
}

/// `text` as a value of the same type as `like`.
fn typed_like(like: &toml::Value, text: &str) -> Option<toml::Value> {
    Some(match like {
        toml::Value::String(_) => toml::Value::String(text.to_string()),
        toml::Value::Integer(_) => toml::Value::Integer(text.trim().parse().ok()?),
        toml::Value::Float(_) => toml::Value::Float(text.trim().parse().ok()?),
        toml::Value::Boolean(_) => toml::Value::Boolean(text.trim().parse().ok()?),
        // A list comes as a TOML array (`["gemini", "--acp"]`).
        toml::Value::Array(_) => toml::from_str::<toml::Table>(&format!("v = {text}"))
            .ok()?
            .remove("v")
            .filter(toml::Value::is_array)?,
        _ => return None,
    })
}

fn kind_of(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::Integer(_) => "a whole number",
        toml::Value::Float(_) => "a number",
        toml::Value::Boolean(_) => "true or false",
        toml::Value::Array(_) => "a list",
        _ => "a value of the right type",
    }
}

fn describe(source: &Source) -> String {
    match source {
        Source::Env(v) => format!("the environment variable {v}"),
        Source::Flag(f) => format!("the flag {f}"),
        Source::File => "agensh.toml".into(),
        Source::Default => "the default".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_url_is_shown_without_its_password() {
        assert_eq!(
            redact_url_password("postgres://agensh:s3cr@t@db:5432/agensh?sslmode=disable"),
            "postgres://agensh:***@db:5432/agensh?sslmode=disable"
        );
        assert_eq!(
            redact_url_password("postgres://agensh@db/agensh?sslmode=disable&password=s3cret#x"),
            "postgres://agensh@db/agensh?sslmode=disable&password=***#x"
        );
        for same in [
            "postgres://agensh@db/agensh",
            "postgres://agensh@db/agensh?sslmode=disable",
            "postgres://db/x@y",
            "",
            "not a url",
        ] {
            assert_eq!(redact_url_password(same), same);
        }
        let mut r = Config::resolve(
            "[organization]\ngoal = \"x\"\n[hub]\nstore = \"postgres://a:pw@db/o\"\n",
            &BTreeMap::new(),
            &[],
        )
        .unwrap();
        r.redact_secrets();
        let shown = r.settings.iter().find(|s| s.key == "hub.store").unwrap();
        assert_eq!(shown.value.as_str(), Some("postgres://a:***@db/o"));
        assert_eq!(r.config.hub.store, "postgres://a:pw@db/o");
    }

    #[test]
    fn agent_groups_parse_and_cover_ranges_and_lists() {
        let c = Config::parse(
            "[organization]\ngoal = \"x\"\n[run]\nagent = \"gemini\"\n[[run.agents]]\nworkers = \"w01-w04\"\nagent = \"claude\"\nmodel = \"m\"\n[[run.agents]]\nworkers = \"w05, w07\"\nagent = \"codex\"\n",
        )
        .expect("parses");
        let [a, b] = &c.run.agents[..] else {
            panic!("two groups")
        };
        assert!(a.covers("w01") && a.covers("w04") && !a.covers("w05"));
        assert!(!a.covers("x02") && !a.covers("w0004x"));
        assert!(b.covers("w05") && b.covers("w07") && !b.covers("w06"));
        let e = Config::parse(
            "[organization]\ngoal = \"x\"\n[[run.agents]]\nworkers = \"w01\"\nagent = \"claudia\"\n",
        )
        .unwrap_err();
        assert!(e.message.contains("run.agents[0].agent"), "{}", e.message);
        let e = Config::parse("[organization]\ngoal = \"x\"\n[run]\npermissions = \"yes\"\n")
            .unwrap_err();
        assert!(
            e.message.contains("allow_once, allow_always, reject"),
            "{}",
            e.message
        );
    }

    fn source_of(r: &Resolved, key: &str) -> Source {
        r.settings
            .iter()
            .find(|s| s.key == key)
            .expect(key)
            .source
            .clone()
    }

    #[test]
    fn resolve_says_where_each_value_came_from() {
        let file = "[organization]\ngoal = \"x\"\n[board]\nview_cap = 50\n[hub]\nlisten = \"127.0.0.1:1\"\n";
        let env = BTreeMap::from([
            ("AGENSH_LISTEN".to_string(), "127.0.0.1:2".to_string()),
            (
                "AGENSH_MODEL_URL".to_string(),
                "http://m:8000/v1".to_string(),
            ),
        ]);
        let flags = [
            FlagValue {
                key: "model.url",
                flag: "--model-url",
                value: "http://f:9/v1".into(),
            },
            FlagValue {
                key: "run.workers",
                flag: "--workers",
                value: "16".into(),
            },
        ];
        let r = Config::resolve(file, &env, &flags).unwrap();
        assert_eq!(r.config.board.view_cap, 50);
        assert_eq!(source_of(&r, "board.view_cap"), Source::File);
        assert_eq!(r.config.hub.listen, "127.0.0.1:2");
        assert_eq!(
            source_of(&r, "hub.listen"),
            Source::Env("AGENSH_LISTEN".into())
        );
        assert_eq!(r.config.model.url, "http://f:9/v1");
        assert_eq!(
            source_of(&r, "model.url"),
            Source::Flag("--model-url".into())
        );
        assert_eq!(r.config.run.workers, 16);
        assert_eq!(
            source_of(&r, "run.workers"),
            Source::Flag("--workers".into())
        );
        assert_eq!(source_of(&r, "run.hours"), Source::Default);
        assert_eq!(source_of(&r, "organization.goal"), Source::File);
    }

    #[test]
    fn the_store_is_the_embedded_file_unless_a_postgres_url_is_given() {
        let file = Config::with_goal("g").template();
        let r = Config::resolve(&file, &BTreeMap::new(), &[]).unwrap();
        assert_eq!(r.config.hub.store, "", "the default is the SQLite file");
        let env = BTreeMap::from([("AGENSH_STORE".to_string(), "postgres://a@h/e".to_string())]);
        let r = Config::resolve(&file, &env, &[]).unwrap();
        assert_eq!(r.config.hub.store, "postgres://a@h/e");
        assert_eq!(
            source_of(&r, "hub.store"),
            Source::Env("AGENSH_STORE".into())
        );
        let flag = [FlagValue {
            key: "hub.store",
            flag: "--store",
            value: "postgresql://b@h/f".into(),
        }];
        let r = Config::resolve(&file, &env, &flag).unwrap();
        assert_eq!(r.config.hub.store, "postgresql://b@h/f");
        assert_eq!(source_of(&r, "hub.store"), Source::Flag("--store".into()));
        let bad = file.replace("store = \"\"", "store = \"mysql://x\"");
        assert_ne!(bad, file);
        let e = Config::resolve(&bad, &BTreeMap::new(), &[]).unwrap_err();
        assert!(
            e.message
                .contains("postgres://USER:PASSWORD@HOST:PORT/DATABASE"),
            "{}",
            e.message
        );
    }

    #[test]
    fn resolve_without_env_or_flags_is_the_file() {
        let c = Config::with_goal("g");
        let r = Config::resolve(&c.template(), &BTreeMap::new(), &[]).unwrap();
        assert_eq!(r.config, c);
        let keys: Vec<&str> = r.settings.iter().map(|s| s.key.as_str()).collect();
        assert!(
            keys.contains(&"run.agent_command") && keys.contains(&"model.local_size"),
            "{keys:?}"
        );
    }

    #[test]
    fn resolve_refuses_a_value_of_the_wrong_type_naming_its_source() {
        let flags = [FlagValue {
            key: "run.workers",
            flag: "--workers",
            value: "many".into(),
        }];
        let e = Config::resolve("[organization]\ngoal = \"x\"\n", &BTreeMap::new(), &flags)
            .unwrap_err();
        assert_eq!(
            e.message,
            "the flag --workers sets run.workers to \"many\", which is not a whole number"
        );
        let flags = [FlagValue {
            key: "model.style",
            flag: "--tool-style",
            value: "xml".into(),
        }];
        let e = Config::resolve("[organization]\ngoal = \"x\"\n", &BTreeMap::new(), &flags)
            .unwrap_err();
        assert!(e.message.contains("auto, tools, json"), "{}", e.message);
    }

    #[test]
    fn template_parses_back_to_the_same_configuration() {
        let c = Config::with_goal("build a \"calculator\"\nwith tests");
        assert_eq!(Config::parse(&c.template()).unwrap(), c);
    }

    #[test]
    fn a_seed_and_a_hosted_model_parse_back_too() {
        let mut c = Config::with_goal("g");
        c.organization.seed = "seed".into();
        c.model.url = "https://example.invalid/v1".into();
        c.model.style = "tools".into();
        assert_eq!(Config::parse(&c.template()).unwrap(), c);
    }

    #[test]
    fn allowed_origins_parse_back_and_must_be_origins() {
        let mut c = Config::with_goal("g");
        c.hub.allowed_origins = vec!["https://dash.example.com".into()];
        assert_eq!(Config::parse(&c.template()).unwrap(), c);
        c.hub.allowed_origins = vec!["https://dash.example.com/path".into()];
        let e = c.validate().unwrap_err();
        assert!(e.message.contains("no path"), "{}", e.message);
        assert_eq!(
            web_origin("HTTP://Hub.LAN:7420/").unwrap(),
            "http://hub.lan:7420"
        );
        assert!(web_origin("ftp://x").is_err());
        assert!(web_origin("hub.lan").is_err());
    }

    #[test]
    fn a_task_pack_parses_back() {
        let mut c = Config::with_goal("g");
        c.organization.pack = vec!["bench/programbench.md".into(), "more.md".into()];
        assert_eq!(Config::parse(&c.template()).unwrap(), c);
    }

    #[test]
    fn done_when_parses_back_and_takes_one_string_as_one_condition() {
        let mut c = Config::with_goal("g");
        c.organization.done_when = vec!["command: python3 -m unittest".into(), "issues".into()];
        c.run.keep_going = true;
        assert_eq!(Config::parse(&c.template()).unwrap(), c);
        let one =
            Config::parse("[organization]\ngoal = \"x\"\ndone_when = \"command: make check\"\n")
                .unwrap();
        assert_eq!(one.organization.done_when, ["command: make check"]);
        assert_eq!(one.organization.done_timeout_secs, 600);
    }

    #[test]
    fn a_bad_done_when_in_agensh_toml_is_refused_naming_the_field() {
        let e =
            Config::parse("[organization]\ngoal = \"x\"\ndone_when = [\"issues\", \"score: 7\"]\n")
                .unwrap_err();
        assert!(
            e.message
                .starts_with("organization.done_when[1]: the score threshold 7"),
            "{}",
            e.message
        );
        let e = Config::parse(
            "[organization]\ngoal = \"x\"\ndone_when = \"issues\"\ndone_timeout_secs = 0\n",
        )
        .unwrap_err();
        assert!(e.message.contains("done_timeout_secs"), "{}", e.message);
    }

    #[test]
    fn the_interrupt_bound_is_two_minutes_by_default_zero_turns_it_off_and_a_day_at_most() {
        let default = Config::with_goal("g");
        assert_eq!(
            default.run.interrupt_after(),
            Some(std::time::Duration::from_secs(120))
        );
        let off = Config::parse("[organization]\ngoal = \"x\"\n[run]\ninterrupt_after_secs = 0\n")
            .unwrap();
        assert_eq!(off.run.interrupt_after(), None);
        let e =
            Config::parse("[organization]\ngoal = \"x\"\n[run]\ninterrupt_after_secs = 100000\n")
                .unwrap_err();
        assert!(
            e.message.contains("run.interrupt_after_secs is 100000")
                && e.message.contains("0 (never interrupt)"),
            "{}",
            e.message
        );
        // The template written for `agensh init` says it and reads back.
        let c = Config::with_goal("g");
        let back = Config::parse(&c.template()).unwrap();
        assert_eq!(back.run.interrupt_after_secs, 120);
        assert!(c.template().contains("interrupt_after_secs = 120"));
    }

    #[test]
    fn bad_model_settings_say_what_is_allowed() {
        let e =
            Config::parse("[organization]\ngoal = \"x\"\n[model]\nstyle = \"xml\"\n").unwrap_err();
        assert!(e.message.contains("auto, tools, json"), "{}", e.message);
        let e = Config::parse("[organization]\ngoal = \"x\"\n[model]\nurl = \"localhost:8000\"\n")
            .unwrap_err();
        assert!(e.message.contains("http"), "{}", e.message);
        let e =
            Config::parse("[organization]\ngoal = \"x\"\n[run]\nagent = \"claud\"\n").unwrap_err();
        assert!(e.message.contains("builtin, acp, script"), "{}", e.message);
    }

    #[test]
    fn the_model_mode_is_auto_by_default_and_checked() {
        let c = Config::with_goal("g");
        assert_eq!(c.model.mode, "auto");
        assert!(c.template().contains("\nmode = \"auto\"\n"));
        let mut small = c.clone();
        small.model.mode = "small".into();
        assert_eq!(Config::parse(&small.template()).unwrap(), small);
        let e =
            Config::parse("[organization]\ngoal = \"x\"\n[model]\nmode = \"tiny\"\n").unwrap_err();
        assert!(
            e.message
                .contains("model.mode \"tiny\" — use one of auto, small, full"),
            "{}",
            e.message
        );
        let r = Config::resolve("[organization]\ngoal = \"x\"\n", &BTreeMap::new(), &[]).unwrap();
        assert!(r
            .settings
            .iter()
            .any(|s| s.key == "model.mode" && s.source == Source::Default));
    }

    #[test]
    fn agent_cpu_is_one_of_three_and_defaults_to_background() {
        let c = Config::parse("[organization]\ngoal = \"x\"\n").unwrap();
        assert_eq!(c.run.agent_cpu, AgentCpu::Background);
        let mut c = Config::with_goal("g");
        c.run.agent_cpu = AgentCpu::Low;
        assert_eq!(Config::parse(&c.template()).unwrap(), c);
        let e = Config::parse("[organization]\ngoal = \"x\"\n[run]\nagent_cpu = \"idle\"\n")
            .unwrap_err();
        assert!(
            e.message.contains("background") && e.message.contains("normal"),
            "{}",
            e.message
        );
    }

    #[test]
    fn missing_sections_take_their_defaults() {
        let c = Config::parse("[organization]\ngoal = \"x\"\n").unwrap();
        assert_eq!(c.board.view_cap, 2_000);
        assert_eq!(c.board.claim_lease_secs, 3_600);
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let e =
            Config::parse("[organization]\ngoal = \"x\"\n[board]\nview_capp = 3\n").unwrap_err();
        assert!(e.message.contains("view_capp"), "{}", e.message);
    }

    #[test]
    fn worker_limits_default_to_none_and_an_equal_share_and_are_checked() {
        let c = Config::parse("[organization]\ngoal = \"x\"\n").unwrap();
        assert_eq!(c.run.worker_memory_limit().unwrap(), None);
        assert_eq!(c.run.worker_cpu_weight, 100);
        let mut c = Config::with_goal("g");
        c.run.worker_memory = "64GiB".into();
        c.run.worker_cpu_weight = 250;
        let back = Config::parse(&c.template()).unwrap();
        assert_eq!(back, c);
        assert_eq!(
            back.run.worker_memory_limit().unwrap().unwrap().as_bytes(),
            64 << 30
        );
        let parse = |run: &str| {
            Config::parse(&format!("[organization]\ngoal = \"x\"\n[run]\n{run}\n"))
                .unwrap_err()
                .message
        };
        let e = parse("worker_memory = \"64GB\"");
        assert!(
            e.contains("run.worker_memory") && e.contains("64GiB"),
            "{e}"
        );
        let e = parse("worker_memory = \"1MiB\"");
        assert!(e.contains("at least 16 MiB"), "{e}");
        let e = parse("worker_cpu_weight = 0");
        assert!(e.contains("1 to 10000"), "{e}");
        assert!(parse("worker_cpu_weight = 10001").contains("worker_cpu_weight"));
        let flags = [FlagValue {
            key: "run.worker_memory",
            flag: "--worker-memory",
            value: "512MiB".into(),
        }];
        let r =
            Config::resolve("[organization]\ngoal = \"x\"\n", &BTreeMap::new(), &flags).unwrap();
        assert_eq!(
            r.config
                .run
                .worker_memory_limit()
                .unwrap()
                .unwrap()
                .to_string(),
            "512 MiB"
        );
    }

    #[test]
    fn out_of_range_values_are_rejected() {
        let e = Config::parse("[organization]\ngoal = \"x\"\n[board]\nview_cap = 0\n").unwrap_err();
        assert!(e.message.contains("view_cap"));
        let e = Config::parse("[organization]\ngoal = \"x\"\n[run]\nrestart_backoff_secs = -1.0\n")
            .unwrap_err();
        assert!(e.message.contains("restart_backoff_secs"), "{}", e.message);
    }
}
