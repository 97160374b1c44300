//! What a run or a node starts, from its configuration: the agent of each worker (checked
//! before any starts: a preset installed, its key set, its model endpoint reachable), the
//! local model's server and how many workers it carries, the gateway's upstreams from the
//! one-upstream shorthand, and the [`NodePlan`] the node runs.
//!
//! The command line resolves the configuration and wires the hub; this module decides.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use agensh_domain::agents::Endpoint;
use agensh_domain::config::{AgentGroup, Config, Resolved, Source};
use agensh_domain::gateway::{group_upstream, Shorthand};
use agensh_domain::node::Registered;
use agensh_model::{ModelServer, Size};
use anyhow::{bail, Context, Result};

use crate::adapters::acp::PresetRun;
use crate::adapters::builtin::{BuiltinConfig, Mode, ToolStyle};
use crate::install;
use crate::node::{AgentKind, NodePlan, WorkerLimits};
use crate::turn::Recovery;

/// How many workers a run or node starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workers {
    /// As many as the user said (a flag, the environment or agensh.toml).
    Given(usize),
    /// Nobody said: on the local model, as many as its measured speed carries (at most
    /// [`AUTO_MOST_WORKERS`]); on any other agent or endpoint, this default.
    Default(usize),
}

impl Workers {
    fn count(self) -> usize {
        let (Workers::Given(n) | Workers::Default(n)) = self;
        n
    }
}

/// Most workers chosen for the local model when nobody set `run.workers`; its server gets
/// this many slots, and the measured speed picks how many of them are used.
pub const AUTO_MOST_WORKERS: usize = 8;

/// Where the run's hub is: in this process (`agensh run`, which then also routes the local
/// model through its gateway), or elsewhere (`agensh node`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HubAt {
    Here,
    Elsewhere,
}

/// The agents the workers run, how many workers, and the local model server when the
/// built-in agent runs on the local model (kept alive for the run; stopped when dropped).
pub struct Prepared {
    /// The agent of every worker in no group.
    pub agent: AgentKind,
    /// `run.agents`' groups and their agents.
    pub groups: Vec<(AgentGroup, AgentKind)>,
    pub server: Option<ModelServer>,
    pub workers: usize,
    /// The gateway's upstreams and routes from the one-upstream shorthand (`[model]`,
    /// `run.agents`' own endpoints, the local model, a vendor's key in the environment).
    pub shorthand: Vec<Shorthand>,
    /// What the user is told about the choices made (the local model's server and the
    /// worker count its speed carries), a line each.
    pub notes: Vec<String>,
}

/// Whether an environment variable is set to something.
pub fn env_set(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| !v.is_empty())
}

/// Resolves the run's agents, with every preset's model endpoint checked before any
/// agent starts; the agents that reach their model through the hub's gateway are told so.
/// `start_local` starts the local model's server (size, slots, context tokens per slot),
/// installing it the first time: the caller shows that as it likes.
pub async fn prepare<F, Fut>(
    config: &Config,
    dir: &Path,
    workers: Workers,
    hub: HubAt,
    start_local: F,
) -> Result<Prepared>
where
    F: FnOnce(Size, u32, u32) -> Fut,
    Fut: Future<Output = Result<ModelServer>>,
{
    let mut groups = group_kinds(config, dir)?;
    let mut notes = Vec::new();
    let (mut agent, server, n) = if matches!(config.run.agent.as_str(), "builtin" | "") {
        let (builtin, server, n) = builtin_config(config, workers, start_local, &mut notes).await?;
        (AgentKind::Builtin(builtin), server, n)
    } else {
        (agent_kind(config, dir)?, None, workers.count())
    };
    let local_url = match (&server, hub) {
        (Some(s), HubAt::Here) => Some(s.base_url()),
        _ => None,
    };
    let shorthand = if config.model.gateway {
        agensh_domain::gateway::shorthand(config, local_url.as_deref(), &env_set)
    } else {
        Vec::new()
    };
    let configured = !config.gateway.upstreams.is_empty();
    let main_routed = shorthand.iter().any(|s| s.workers == "all");
    set_gateway(
        &mut agent,
        config.model.gateway && (configured || main_routed),
    );
    for (i, (_, kind)) in groups.iter_mut().enumerate() {
        let routed = shorthand.iter().any(|s| s.name == group_upstream(i)) || main_routed;
        set_gateway(kind, config.model.gateway && (configured || routed));
    }
    for kind in std::iter::once(&agent).chain(groups.iter().map(|(_, k)| k)) {
        if let AgentKind::Preset { run, .. } = kind {
            reachable(&run.endpoint.url).await?;
        }
    }
    Ok(Prepared {
        agent,
        groups,
        server,
        workers: n,
        shorthand,
        notes,
    })
}

/// Points a preset or the built-in agent at the hub's gateway.
fn set_gateway(kind: &mut AgentKind, on: bool) {
    match kind {
        AgentKind::Preset { run, .. } => run.gateway = on,
        AgentKind::Builtin(b) => b.gateway = on,
        _ => {}
    }
}

/// Checks that a model endpoint given by URL accepts connections, so a wrong port or a
/// server not started is said before any agent starts (agents retry quietly, or end their
/// turns as if they went well). The vendors' own services (no URL) are not checked.
async fn reachable(url: &str) -> Result<()> {
    if url.trim().is_empty() {
        return Ok(());
    }
    let parsed = reqwest::Url::parse(url.trim()).with_context(|| {
        format!("model.url \"{url}\" is not a URL — give it as http://HOST:PORT or https://HOST/v1")
    })?;
    let host = parsed
        .host_str()
        .with_context(|| format!("model.url \"{url}\" names no host"))?
        .to_string();
    let port = parsed.port_or_known_default().unwrap_or(80);
    let connect = tokio::net::TcpStream::connect((host.as_str(), port));
    match tokio::time::timeout(Duration::from_secs(5), connect).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => bail!(
            "the model endpoint {url} cannot be reached ({e}) — start its server, or fix model.url (--model-url)"
        ),
        Err(_) => bail!(
            "the model endpoint {url} did not accept a connection within 5 s — check the address and that nothing blocks it"
        ),
    }
}

/// The built-in agent's settings from `[model]`; on the local model, installs it the first
/// time and starts its server with one slot per worker — when nobody set the worker count,
/// measures the server and picks the count from its speed, said in `notes`.
async fn builtin_config<F, Fut>(
    config: &Config,
    workers: Workers,
    start_local: F,
    notes: &mut Vec<String>,
) -> Result<(BuiltinConfig, Option<ModelServer>, usize)>
where
    F: FnOnce(Size, u32, u32) -> Fut,
    Fut: Future<Output = Result<ModelServer>>,
{
    let m = &config.model;
    let style: ToolStyle = m.style.parse()?;
    let mut b = BuiltinConfig {
        base_url: chat_base(&m.url),
        model: m.name.clone(),
        api_key: None,
        style,
        mode: Mode::choose(&m.mode, m.is_local())?,
        context_tokens: m.context_tokens,
        max_reply_tokens: m.max_reply_tokens,
        max_steps_per_turn: m.max_steps_per_turn,
        command_timeout: Duration::from_secs(m.command_timeout_secs),
        temperature: m.temperature as f32,
        ..BuiltinConfig::default()
    };
    if !m.api_key_env.is_empty() {
        b.api_key = Some(std::env::var(&m.api_key_env).map_err(|_| {
            anyhow::anyhow!(
                "model.api_key_env names {} but it is not set — export {}=… or set model.api_key_env = \"\"",
                m.api_key_env,
                m.api_key_env
            )
        })?);
    }
    if !m.is_local() {
        if b.model.is_empty() {
            bail!("model.url is set but model.name is empty — say which model the endpoint should run (--model NAME)");
        }
        return Ok((b, None, workers.count()));
    }
    let size: Size = m.local_size.parse()?;
    let slots = match workers {
        Workers::Given(n) => n,
        Workers::Default(_) => AUTO_MOST_WORKERS,
    };
    let server = start_local(size, slots as u32, m.context_tokens).await?;
    notes.push(format!(
        "model server: {} thread(s) (the cores this process may use), {} MiB of prompt cache, {slots} slot(s)",
        server.threads(),
        server.prompt_cache_mib()
    ));
    let n = match workers {
        Workers::Given(n) => n,
        Workers::Default(fallback) => {
            match agensh_model::measure(&server.base_url(), server.model_name()).await {
                Ok(speed) => {
                    let chosen = agensh_model::workers_for(&speed, slots);
                    notes.push(format!("{} (--workers N sets it)", chosen.reason));
                    chosen.workers
                }
                Err(e) => {
                    notes.push(format!("{e}; running {fallback} worker(s)"));
                    fallback.min(slots)
                }
            }
        }
    };
    b.base_url = server.base_url();
    if b.model.is_empty() {
        b.model = server.model_name().to_string();
    }
    if b.style == ToolStyle::Auto {
        // Small local models answer native tool definitions in prose; schema-constrained
        // actions always parse.
        b.style = ToolStyle::Json;
    }
    Ok((b, Some(server), n))
}

/// The Chat Completions base of an endpoint URL: as given, or with `/v1` when it names a
/// host only (`http://127.0.0.1:8000` is `http://127.0.0.1:8000/v1`, as every preset takes it).
fn chat_base(url: &str) -> String {
    let url = url.trim().trim_end_matches('/');
    match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.path(), "" | "/") => format!("{url}/v1"),
        _ => url.to_string(),
    }
}

fn agent_kind(config: &Config, dir: &Path) -> Result<AgentKind> {
    let r = &config.run;
    let group = AgentGroup {
        workers: String::new(),
        agent: r.agent.clone(),
        agent_command: r.agent_command.clone(),
        ..AgentGroup::default()
    };
    group_kind(config, &group, dir)
}

/// The agent of a group of workers (`run.agents`), its model settings over `[model]`'s.
fn group_kind(config: &Config, g: &AgentGroup, dir: &Path) -> Result<AgentKind> {
    match g.agent.as_str() {
        "script" => {
            if config.run.scenario.is_empty() {
                bail!("the script agent needs a scenario: --scenario FILE (or run.scenario in agensh.toml)");
            }
            let path = PathBuf::from(&config.run.scenario);
            let path = if path.is_relative() && !path.exists() {
                dir.join(path)
            } else {
                path
            };
            Ok(AgentKind::Script {
                scenario: std::path::absolute(path)?,
            })
        }
        "acp" => {
            if g.agent_command.is_empty() {
                bail!("the acp agent needs its command: `agensh run --agent acp -- CMD ARGS…` or run.agent_command in agensh.toml, e.g. [\"gemini\", \"--acp\"]");
            }
            Ok(AgentKind::Acp {
                command: g.agent_command.clone(),
            })
        }
        "builtin" | "" => bail!(
            "run.agents: a group of workers on the built-in agent is not supported yet — make \"builtin\" run.agent and give the other agents groups"
        ),
        name => preset_kind(config, g, name),
    }
}

/// A preset agent (`claude`, `codex`, …): installed, with its key when one is named.
fn preset_kind(config: &Config, g: &AgentGroup, name: &str) -> Result<AgentKind> {
    let Some(preset) = agensh_domain::agents::preset(name) else {
        bail!(
            "unknown agent \"{name}\" — use one of {}",
            agensh_domain::agents::agent_names().join(", ")
        );
    };
    let data = agensh_model::data_dir()?;
    if g.agent_command.is_empty() && install::installed(&data, preset).is_none() {
        bail!(
            "{name} ({} {}) is not installed — install it with: {}",
            preset.package,
            preset.version,
            install::install_hint(&[name])
        );
    }
    let m = &config.model;
    let pick = |own: &str, shared: &str| if own.is_empty() { shared } else { own }.to_string();
    let key_env = pick(&g.api_key_env, &m.api_key_env);
    let api_key = if key_env.is_empty() {
        None
    } else {
        Some(std::env::var(&key_env).map_err(|_| {
            anyhow::anyhow!(
                "the {name} agent's key is read from {key_env}, which is not set — export {key_env}=… (or set model.api_key_env = \"\" to let {name} read {} itself)",
                preset.key_var
            )
        })?)
    };
    Ok(AgentKind::Preset {
        run: PresetRun {
            preset,
            prefix: install::prefix(&data, preset),
            endpoint: Endpoint {
                url: pick(&g.model_url, &m.url),
                model: pick(&g.model, &m.name),
                api_key,
            },
            gateway: false,
        },
        command: g.agent_command.clone(),
    })
}

/// The agents of `run.agents`' groups.
fn group_kinds(config: &Config, dir: &Path) -> Result<Vec<(AgentGroup, AgentKind)>> {
    config
        .run
        .agents
        .iter()
        .map(|g| Ok((g.clone(), group_kind(config, g, dir)?)))
        .collect()
}

/// The plan of a node on the hub's host running `workers` (id, token) of an organization
/// of `size` workers with the agents of `prepared`: its terms (goal, pack, end, notices)
/// from `config`.
pub fn plan(
    config: &Config,
    dir: &Path,
    hub_url: &str,
    workers: Vec<(String, String)>,
    size: usize,
    prepared: Prepared,
) -> Result<(NodePlan, Option<ModelServer>)> {
    let ends_at = (config.run.hours > 0.0)
        .then(|| SystemTime::now() + Duration::from_secs_f64(config.run.hours * 3600.0));
    let plan = NodePlan {
        org_dir: std::path::absolute(dir)?,
        limits: WorkerLimits::from_run(&config.run)?,
        hub_url: hub_url.to_string(),
        workers,
        agent: prepared.agent,
        groups: prepared.groups,
        permissions: config.run.permissions.parse()?,
        goal: config.organization.goal.clone(),
        organization_size: size,
        stagger: Duration::from_secs_f64(config.run.stagger_secs),
        idle_timeout: Duration::from_secs(config.run.idle_timeout_secs),
        park_idle: config.run.park_idle,
        interrupt_after: config.run.interrupt_after(),
        ends_at,
        notices_before_end: minutes(&config.run.notices_minutes),
        pack: read_pack(config, dir)?,
        agensh: std::env::current_exe()?,
        agent_cpu: config.run.agent_cpu,
        recovery: Recovery::from(&config.run),
        remote: None,
    };
    Ok((plan, prepared.server))
}

/// Notice times in minutes before the end as durations (the finite, positive ones).
fn minutes(m: &[f64]) -> Vec<Duration> {
    m.iter()
        .filter(|m| m.is_finite() && **m > 0.0)
        .map(|m| Duration::from_secs_f64(m * 60.0))
        .collect()
}

/// A node on another host takes the organization's terms from the hub as it registers:
/// the goal, the task pack, the notice times and the run's end (the hub's clock, the same
/// after a restart). Its own `run.hours`, when someone set it (`own_hours`), may end its
/// workers before the run does; never after.
pub fn take_terms(plan: &mut NodePlan, registered: &Registered, own_hours: bool) {
    plan.goal = registered.goal.clone();
    plan.pack = registered.pack.clone();
    plan.notices_before_end = minutes(&registered.notices_minutes);
    let run_end = registered
        .ends_at
        .map(|ms| std::time::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64));
    plan.ends_at = match (run_end, plan.ends_at.filter(|_| own_hours)) {
        (Some(run), Some(own)) => Some(run.min(own)),
        (run, own) => run.or(own),
    };
}

/// A node on another host: the configuration it runs with, from `resolved` (its own
/// agensh.toml when it has one, else the goal the hub gave it; flags and `AGENSH_*` over
/// either), whether its own `run.hours` was set (a flag, `AGENSH_RUN_HOURS`, its
/// agensh.toml: it may end its workers before the run does; never after), and a note when
/// its `organization.pack` is set but not used.
pub fn remote_config(resolved: Resolved) -> (Config, bool, Option<String>) {
    let own_hours = resolved
        .settings
        .iter()
        .any(|s| s.key == "run.hours" && s.source != Source::Default);
    let mut config = resolved.config;
    let mut note = None;
    if !config.organization.pack.is_empty() {
        note = Some("organization.pack in the node's agensh.toml is not used: the task pack is the organization's, given by the hub".to_string());
        config.organization.pack.clear();
    }
    (config, own_hours, note)
}

/// The agensh.toml of a node on another host that has none of its own: the goal the hub
/// gave it (a JSON string is a TOML basic string, but for DEL, which TOML wants escaped).
pub fn goal_toml(goal: &str) -> Result<String> {
    let goal = serde_json::to_string(goal)?.replace('\u{7f}', "\\u007F");
    Ok(format!("[organization]\ngoal = {goal}\n"))
}

/// The plan of a node on another host registered as `registered` at `hub_url`: the
/// workers the hub gave it, the organization's terms ([`take_terms`]), checkouts cloned and
/// pushed over the hub's git smart HTTP with its state in `dir`; and the line that says
/// what it runs.
pub fn remote_plan(
    config: &Config,
    dir: &Path,
    hub_url: &str,
    registered: &Registered,
    own_hours: bool,
    prepared: Prepared,
) -> Result<(NodePlan, Option<ModelServer>, String)> {
    let ids: Vec<String> = registered.workers.iter().map(|w| w.id.clone()).collect();
    let workers = registered
        .workers
        .iter()
        .map(|w| (w.id.clone(), w.token.clone()))
        .collect();
    let (mut plan, model_server) = plan(
        config,
        dir,
        hub_url,
        workers,
        registered.organization_size,
        prepared,
    )?;
    take_terms(&mut plan, registered, own_hours);
    plan.remote = Some(agensh_workspace::remote::Remote::new(
        hub_url,
        dir.join(".agensh").join("credentials"),
        agensh_workspace::git::NetworkJobs::new(config.run.git_jobs),
    ));
    let line = format!(
        "node {}: {} ({}) against {hub_url}, state in {}; Ctrl-C stops",
        registered.node,
        ids.join(", "),
        plan.agent.describe(),
        dir.display()
    );
    Ok((plan, model_server, line))
}

/// The task pack's fragments (`organization.pack`, relative to the organization directory).
pub fn read_pack(config: &Config, dir: &Path) -> Result<Vec<String>> {
    config
        .organization
        .pack
        .iter()
        .map(|p| {
            let path = dir.join(p);
            std::fs::read_to_string(&path).with_context(|| {
                format!(
                    "organization.pack names {}, which cannot be read — fix the path in agensh.toml",
                    path.display()
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_node_without_its_own_toml_takes_the_hubs_goal() {
        let text = goal_toml("make \"it\" pass\n\u{7f}").unwrap();
        let resolved =
            Config::resolve(&text, &Default::default(), &[]).expect("a valid agensh.toml");
        assert_eq!(
            resolved.config.organization.goal,
            "make \"it\" pass\n\u{7f}"
        );
        let (config, own_hours, note) = remote_config(resolved);
        assert!(!own_hours && note.is_none());
        assert_eq!(config.organization.goal, "make \"it\" pass\n\u{7f}");
    }

    #[test]
    fn a_host_only_endpoint_gets_v1_and_any_other_is_kept() {
        assert_eq!(
            chat_base("http://127.0.0.1:8000"),
            "http://127.0.0.1:8000/v1"
        );
        assert_eq!(
            chat_base("http://127.0.0.1:8000/"),
            "http://127.0.0.1:8000/v1"
        );
        assert_eq!(chat_base("https://h/v1/"), "https://h/v1");
        assert_eq!(chat_base("https://h/api/openai"), "https://h/api/openai");
    }

    #[test]
    fn a_remote_node_ends_with_the_run_or_before_it_never_after() {
        let config = Config::with_goal("g");
        let dir = std::env::temp_dir();
        let prepared = Prepared {
            agent: AgentKind::Acp {
                command: vec!["true".into()],
            },
            groups: Vec::new(),
            server: None,
            workers: 1,
            shorthand: Vec::new(),
            notes: Vec::new(),
        };
        let (mut plan, _) = plan(&config, &dir, "http://h", Vec::new(), 1, prepared).unwrap();
        let now = SystemTime::now();
        let run_end = now + Duration::from_secs(3600);
        plan.ends_at = Some(now + Duration::from_secs(60));
        let registered = |ends: SystemTime| agensh_domain::node::Registered {
            node: "n1".into(),
            workers: Vec::new(),
            goal: "g".into(),
            organization_size: 1,
            pack: Vec::new(),
            ends_at: Some(
                ends.duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as i64,
            ),
            notices_minutes: vec![5.0, f64::NAN, -1.0],
        };
        let mut own = plan.clone();
        take_terms(&mut own, &registered(run_end), true);
        assert_eq!(own.ends_at, Some(now + Duration::from_secs(60)));
        assert_eq!(own.goal, "g");
        assert_eq!(own.notices_before_end, vec![Duration::from_secs(300)]);
        take_terms(&mut plan, &registered(run_end), false);
        let ends = plan.ends_at.unwrap();
        let off = ends
            .duration_since(run_end)
            .unwrap_or_else(|e| e.duration());
        assert!(off < Duration::from_millis(1), "{off:?}");
    }
}
