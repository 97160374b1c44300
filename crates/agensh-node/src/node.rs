//! Running a machine's workers: checkouts, staggered activation, one turn loop each, and a
//! shared progress stream for the live view.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use agensh_client::Client;
use agensh_domain::prompt::WorkerPrompt;
use agensh_domain::size::MemorySize;
use agensh_domain::time::unix_ms;
use agensh_domain::worker::{WorkerProgress, WorkerStatus};
use agensh_domain::{Error, Result};
use agensh_process::Shutdown;
use agensh_workspace::git::NetworkJobs;
use agensh_workspace::remote::Remote;
use agensh_workspace::{checkout, Workspace};
use tokio::sync::mpsc;

use crate::adapters::acp::{AcpAgent, Permissions, PresetRun};
use crate::adapters::builtin::{BuiltinAgent, BuiltinConfig};
use crate::adapters::cpu::AgentCpu;
use crate::adapters::limits::AgentCgroup;
use crate::adapters::pi::PiAgent;
use crate::adapters::{Agent, AgentContext, Usage};
use crate::mcp_proxy::{McpProxy, ProxiedWorker};
use crate::turn::{run_worker, NodeLink, Progress, Recovery, WorkerPlan, WorkerSummary};
use agensh_domain::agents::Protocol;

/// Which agent drives the workers.
#[derive(Debug, Clone)]
pub enum AgentKind {
    /// The deterministic scripted agent (tests and load), from a scenario file.
    Script { scenario: PathBuf },
    /// Any Agent Client Protocol agent, started with this command line.
    Acp { command: Vec<String> },
    /// A preset (`claude`, `codex`, `copilot`, `gemini`): installed, configured and pointed
    /// at its model by agensh; started from `command` instead when not empty.
    Preset {
        run: PresetRun,
        command: Vec<String>,
    },
    /// The built-in agent over an OpenAI-compatible endpoint.
    Builtin(BuiltinConfig),
}

impl AgentKind {
    /// The agent for one worker, its processes in `cgroup` when the node has cgroups.
    pub fn build(
        &self,
        agensh: &std::path::Path,
        cpu: AgentCpu,
        permissions: Permissions,
        cgroup: Option<AgentCgroup>,
    ) -> Box<dyn Agent> {
        match self {
            AgentKind::Script { scenario } => Box::new(
                AcpAgent::new(
                    vec![
                        agensh.to_string_lossy().to_string(),
                        "agent".into(),
                        "script".into(),
                        "--scenario".into(),
                        scenario.to_string_lossy().to_string(),
                    ],
                    Vec::new(),
                )
                .with_cpu(cpu)
                .with_cgroup(cgroup),
            ),
            AgentKind::Acp { command } => Box::new(
                AcpAgent::new(command.clone(), Vec::new())
                    .with_cpu(cpu)
                    .with_cgroup(cgroup)
                    .with_permissions(permissions)
                    .contained(),
            ),
            AgentKind::Preset { run, command } => match run.preset.protocol {
                Protocol::Acp => Box::new(
                    AcpAgent::preset(run.clone(), command.clone())
                        .with_cpu(cpu)
                        .with_cgroup(cgroup)
                        .with_permissions(permissions),
                ),
                Protocol::PiRpc => Box::new(
                    PiAgent::new(run.clone(), command.clone())
                        .with_cpu(cpu)
                        .with_cgroup(cgroup),
                ),
            },
            // In-process; its commands run at the node's priority, as the local model
            // server does: below a busy model server they would hardly run at all.
            AgentKind::Builtin(config) => {
                Box::new(BuiltinAgent::new(config.clone()).with_cgroup(cgroup))
            }
        }
    }

    /// A few words for the operator: which agent, and on which model.
    pub fn describe(&self) -> String {
        match self {
            AgentKind::Script { .. } => "scripted agent".into(),
            AgentKind::Acp { command } => format!("ACP agent `{}`", command.join(" ")),
            AgentKind::Preset { run, command } => {
                let p = run.preset;
                let what = if command.is_empty() {
                    format!("{} ({} {})", p.name, p.package, p.version)
                } else {
                    format!("{} (`{}`)", p.name, command.join(" "))
                };
                let model = if run.endpoint.model.is_empty() {
                    "its default model".to_string()
                } else {
                    run.endpoint.model.clone()
                };
                let at = if run.gateway {
                    "the hub's model gateway".to_string()
                } else if run.endpoint.url.is_empty() {
                    "its vendor's service".to_string()
                } else {
                    run.endpoint.url.clone()
                };
                format!("{what} on {model} at {at}")
            }
            AgentKind::Builtin(c) if c.gateway => {
                format!("built-in agent on {} at the hub's model gateway", c.model)
            }
            AgentKind::Builtin(c) => format!("built-in agent on {} at {}", c.model, c.base_url),
        }
    }
}

/// How long one of the node's own requests (a status report, an acknowledgement, a poll)
/// keeps trying to reach a hub that is down; the loops around them try again after it.
const NODE_HUB_WAIT: Duration = Duration::from_secs(15);

/// Everything a node needs to run its workers.
#[derive(Debug, Clone)]
pub struct NodePlan {
    /// The organization directory: checkouts go to `workers/<id>/`, logs to `.agensh/logs/`.
    pub org_dir: PathBuf,
    pub hub_url: String,
    /// (worker id, token) of the workers this node runs.
    pub workers: Vec<(String, String)>,
    /// The agent of every worker not in a group of `groups`.
    pub agent: AgentKind,
    /// Groups of workers with an agent of their own (`run.agents`), the first that covers a
    /// worker wins.
    pub groups: Vec<(agensh_domain::config::AgentGroup, AgentKind)>,
    /// How ACP agents' permission requests are answered (`run.permissions`).
    pub permissions: Permissions,
    pub goal: String,
    /// The whole organization's size (for the prompt).
    pub organization_size: usize,
    pub stagger: Duration,
    pub idle_timeout: Duration,
    /// Workers whose turns change nothing are parked (`run.park_idle`; [`crate::parking`]).
    pub park_idle: bool,
    /// Urgent news unseen this long interrupts a worker's turn (`run.interrupt_after_secs`;
    /// none: never).
    pub interrupt_after: Option<Duration>,
    pub ends_at: Option<SystemTime>,
    pub notices_before_end: Vec<Duration>,
    pub pack: Vec<String>,
    /// The `agensh` binary (for the scripted agent).
    pub agensh: PathBuf,
    /// Each worker's agent's memory limit and CPU weight (`run.worker_memory`,
    /// `run.worker_cpu_weight`), enforced by a cgroup per worker.
    pub limits: WorkerLimits,
    /// How agent processes share the CPU with the node (`run.agent_cpu`).
    pub agent_cpu: AgentCpu,
    /// How a worker recovers when its agent fails (`run.max_restarts`,
    /// `run.restart_backoff_secs`).
    pub recovery: Recovery,
    /// A node on another host than the hub's: checkouts cloned and pushed over the hub's
    /// smart HTTP (`org_dir` is then the node's own state directory). `None`: the hub's
    /// bare repository is in `org_dir` and checkouts share its objects.
    pub remote: Option<Remote>,
}

impl NodePlan {
    /// The agent the worker `id` runs.
    pub fn agent_for(&self, id: &str) -> &AgentKind {
        self.groups
            .iter()
            .find(|(g, _)| g.covers(id))
            .map_or(&self.agent, |(_, k)| k)
    }
}

/// What the live view shows of one worker.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerLine {
    pub status: WorkerStatus,
    pub turns: u64,
    pub last_action: String,
    pub usage: Usage,
    /// The current step of its turn, while it is busy.
    pub progress: Option<WorkerProgress>,
}

/// The node's totals.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeSummary {
    pub workers: BTreeMap<String, std::result::Result<WorkerSummary, String>>,
}

impl NodeSummary {
    pub fn turns(&self) -> u64 {
        self.workers
            .values()
            .filter_map(|r| r.as_ref().ok())
            .map(|s| s.turns)
            .sum()
    }

    pub fn usage(&self) -> Usage {
        let mut u = Usage::default();
        for s in self.workers.values().filter_map(|r| r.as_ref().ok()) {
            u += s.usage;
        }
        u
    }

    /// The workers that failed, with their errors, in id order.
    pub fn failed(&self) -> Vec<(&String, &String)> {
        self.workers
            .iter()
            .filter_map(|(id, r)| r.as_ref().err().map(|e| (id, e)))
            .collect()
    }
}

/// Runs the workers of `plan` until the run ends or `stop` fires (or its trigger is dropped). Progress of every
/// worker goes to `progress` as `(worker id, Progress)`.
pub async fn run_node(
    plan: NodePlan,
    stop: Shutdown,
    progress: mpsc::UnboundedSender<(String, Progress)>,
) -> Result<NodeSummary> {
    let ws = match &plan.remote {
        Some(_) => None,
        None => Some(Workspace::open(&agensh_workspace_dir(&plan.org_dir))?),
    };
    // One event pump and one status reporter for all the node's workers. A hub that
    // restarts is waited for (polls and reports go again on their own, a little later).
    let shared = Client::new(&plan.hub_url, "").retrying(NODE_HUB_WAIT);
    let link = NodeLink::start(shared.clone());
    // One MCP proxy for all the node's workers: `ship` commits and pushes in the checkout.
    // A remote node's pushes wait for a slot of its git network operations too.
    let jobs = plan
        .remote
        .as_ref()
        .map_or_else(NetworkJobs::unlimited, |r| r.jobs.clone());
    let proxy = McpProxy::start_with_jobs(
        &plan.hub_url,
        plan.workers
            .iter()
            .map(|(id, token)| ProxiedWorker {
                id: id.clone(),
                token: token.clone(),
                checkout: checkout::checkout_dir(&plan.org_dir, id),
            })
            .collect(),
        jobs,
    )
    .await?;
    let mut set = tokio::task::JoinSet::new();
    // Dropped last: when every worker's loop has ended, what is left in their cgroups is
    // killed and the cgroups removed.
    let cgroups = open_cgroups(&plan)?;
    for (i, (id, token)) in plan.workers.iter().enumerate() {
        if i > 0 && !plan.stagger.is_zero() {
            let mut stop = stop.clone();
            tokio::select! {
                _ = tokio::time::sleep(plan.stagger) => {}
                _ = stop.wait() => break,
            }
        }
        let dir = checkout::checkout_dir(&plan.org_dir, id);
        match (&plan.remote, &ws) {
            (Some(remote), _) => remote.create(id, token, &dir).await?,
            (None, Some(ws)) => checkout::create(ws, id, &dir).await?,
            (None, None) => unreachable!("a local node opened its workspace"),
        };
        // What any preset's agent writes for itself in its checkout stays out of its PRs.
        let excludes: Vec<&str> = agensh_domain::agents::PRESETS
            .iter()
            .flat_map(|p| p.checkout_excludes.iter().copied())
            .collect();
        checkout::exclude(&dir, &excludes)?;
        let ctx = AgentContext {
            worker: id.clone(),
            checkout: dir.clone(),
            hub_url: plan.hub_url.clone(),
            token: token.clone(),
            mcp_proxy: Some(proxy.url().to_string()),
            state_dir: log_dir(&plan.org_dir, id),
            agent_home: agent_home(&plan.org_dir, id),
            agensh: plan.agensh.clone(),
            heartbeat: Default::default(),
            interrupt: Default::default(),
        };
        let deadline = plan
            .ends_at
            .map(|e| {
                format!(
                    "The run ends at {} (UTC).",
                    agensh_domain::time::rfc3339(unix_ms(e))
                )
            })
            .unwrap_or_default();
        let launch_prompt = WorkerPrompt {
            worker_id: id,
            worker_count: plan.organization_size,
            goal: &plan.goal,
            checkout: &dir.to_string_lossy(),
            branch: &checkout::work_branch(id),
            deadline: &deadline,
            pack: &plan.pack,
        }
        .render()?;
        let worker_plan = WorkerPlan {
            ctx,
            launch_prompt,
            idle_timeout: plan.idle_timeout,
            park_idle: plan.park_idle,
            ends_at: plan.ends_at,
            notices_before_end: plan.notices_before_end.clone(),
            log_dir: log_dir(&plan.org_dir, id),
            recovery: plan.recovery,
            interrupt_after: plan.interrupt_after,
        };
        std::fs::create_dir_all(&worker_plan.log_dir).map_err(|e| {
            Error::internal(format!(
                "cannot create {}: {e}",
                worker_plan.log_dir.display()
            ))
        })?;
        std::fs::write(
            worker_plan.log_dir.join("launch-prompt.md"),
            &worker_plan.launch_prompt,
        )
        .map_err(|e| Error::internal(format!("cannot store the launch prompt: {e}")))?;
        let kind = plan.agent_for(id);
        link.status.agent(id, kind.describe());
        let cgroup = match &cgroups {
            Some(c) => Some(std::sync::Arc::new(
                c.worker(id, plan.limits.for_cgroup())
                    .map_err(|e| Error::internal(format!("cannot make the cgroup of {id}: {e}")))?,
            )),
            None => None,
        };
        let agent = kind.build(&plan.agensh, plan.agent_cpu, plan.permissions, cgroup);
        let hub = shared.with_token(token);
        let (stop, progress, id, link) = (stop.clone(), progress.clone(), id.clone(), link.clone());
        set.spawn(async move {
            (
                id,
                run_worker(worker_plan, agent, hub, link, stop, progress).await,
            )
        });
    }
    let mut summary = NodeSummary::default();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((id, r)) => {
                summary.workers.insert(id, r.map_err(|e| e.message));
            }
            Err(e) => tracing::error!("a worker task failed: {e}"),
        }
    }
    drop(cgroups);
    Ok(summary)
}

/// The limits of each worker's agent (and everything it starts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerLimits {
    /// The most memory it may use; `None`: no limit.
    pub memory: Option<MemorySize>,
    /// Its cgroup `cpu.weight` next to the other workers (100: an equal share).
    pub cpu_weight: u32,
}

impl Default for WorkerLimits {
    /// No memory limit, an equal share of the CPU.
    fn default() -> Self {
        WorkerLimits {
            memory: None,
            cpu_weight: agensh_domain::config::DEFAULT_CPU_WEIGHT,
        }
    }
}

impl WorkerLimits {
    /// `run.worker_memory` and `run.worker_cpu_weight`.
    pub fn from_run(run: &agensh_domain::config::RunConfig) -> Result<WorkerLimits> {
        Ok(WorkerLimits {
            memory: run.worker_memory_limit()?,
            cpu_weight: run.worker_cpu_weight,
        })
    }
}

impl WorkerLimits {
    /// As the worker's cgroup takes them.
    fn for_cgroup(&self) -> agensh_process::cgroup::WorkerLimits {
        agensh_process::cgroup::WorkerLimits {
            memory: self.memory.map(MemorySize::as_bytes),
            cpu: agensh_process::cgroup::CpuShare {
                weight: self.cpu_weight,
                idle: false,
            },
        }
    }
}

/// The node's cgroups, where its workers' agents (the built-in agent's commands: the agent
/// itself runs inside the node) run with their limits; `None` when cgroups cannot be made
/// and no memory limit was asked (said once, with what to do). A
/// memory limit that cannot be enforced is an error: a limit silently not applied would
/// be worse.
fn open_cgroups(plan: &NodePlan) -> Result<Option<agensh_process::cgroup::NodeCgroups>> {
    // The built-in agent's commands run at the node's priority (below a busy local model
    // server they would hardly run at all), so a node of built-in agents only gives its
    // workers' group an equal share.
    let builtin_only = plan
        .workers
        .iter()
        .all(|(id, _)| matches!(plan.agent_for(id), AgentKind::Builtin(_)));
    let share = if builtin_only {
        agensh_process::cgroup::CpuShare::EQUAL
    } else {
        crate::adapters::cpu::group_share(plan.agent_cpu)
    };
    let name = cgroup_name(&plan.org_dir, &plan.workers);
    match agensh_process::cgroup::NodeCgroups::open(&name, share) {
        Ok(c) => {
            tracing::info!(
                "workers' agents run in cgroups ({}): memory limit {}, CPU weight {}",
                c.describe(),
                plan.limits
                    .memory
                    .map_or("none".to_string(), |m| m.to_string()),
                plan.limits.cpu_weight
            );
            Ok(Some(c))
        }
        Err(e) => match plan.limits.memory {
            Some(m) => Err(memory_not_enforceable(m, &e)),
            None => {
                tracing::warn!("workers' agents run without cgroups (no memory limit, run.worker_cpu_weight not applied, and many agents hold back the node's prompts more than in a group of their own): {e}");
                Ok(None)
            }
        },
    }
}

/// Refuses a memory limit (`limits.memory`) this machine cannot enforce, before anything
/// starts: the same refusal the node gives when it opens its cgroups, earlier. Without a
/// memory limit there is nothing to refuse (the node says so once when it starts).
pub fn check_worker_limits(limits: &WorkerLimits) -> Result<()> {
    let Some(m) = limits.memory else {
        return Ok(());
    };
    agensh_process::cgroup::check()
        .map(|_| ())
        .map_err(|e| memory_not_enforceable(m, &e))
}

/// The refusal of a memory limit `m` that cgroups cannot enforce here (`e`: why).
fn memory_not_enforceable(m: MemorySize, e: &agensh_process::cgroup::Unavailable) -> Error {
    Error::invalid(
        "worker_memory_not_enforceable",
        format!("run.worker_memory is {m}, but {e}; or set run.worker_memory = \"\" to run without a memory limit"),
    )
}

/// The name of this node's cgroups: the same for the same organization and workers, so a
/// node killed with -9 and started again finds (and removes) what it left, and two nodes
/// of one organization on one machine (different workers) never share one.
pub fn cgroup_name(org_dir: &std::path::Path, workers: &[(String, String)]) -> String {
    // FNV-1a: stable across builds, unlike the standard library's hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    eat(org_dir.as_os_str().as_encoded_bytes());
    for (id, _) in workers {
        eat(b"\0");
        eat(id.as_bytes());
    }
    format!("{h:016x}")
}

/// The bare repository of the organization at `org`.
pub fn agensh_workspace_dir(org: &std::path::Path) -> PathBuf {
    org.join(".agensh").join(agensh_workspace::REPO_DIR)
}

/// A worker's agent's own home: a preset's HOME and settings files.
pub fn agent_home(org: &std::path::Path, worker: &str) -> PathBuf {
    org.join(".agensh").join("agents").join(worker)
}

/// Where a worker's turns, prompts and agent logs go.
pub fn log_dir(org: &std::path::Path, worker: &str) -> PathBuf {
    org.join(".agensh").join("logs").join(worker)
}
