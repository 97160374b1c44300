//! `agensh run DIR` (hub and node in one process, with a live view), `agensh node` (a
//! node against a hub by URL) and `agensh status` (the same snapshot from anywhere).

use std::collections::{BTreeMap, VecDeque};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use agensh_client::Client;
use agensh_domain::agents::Endpoint;
use agensh_domain::config::AgentGroup;
use agensh_domain::config::{Config, Source};
use agensh_domain::gateway::Shorthand;
use agensh_domain::worker::{WorkerInfo, WorkerStatus};
use agensh_hub::{state_dir, write_hub_info, HubInfo};
use agensh_model::ModelServer;
use agensh_node::adapters::acp::PresetRun;
use agensh_node::adapters::builtin::{BuiltinConfig, Mode, ToolStyle};
use agensh_node::install;
use agensh_node::node::{run_node, AgentKind, NodePlan, NodeSummary, WorkerLimits, WorkerLine};
use agensh_node::turn::Progress;
use agensh_node::turn::Recovery;
use agensh_process::{Shutdown, ShutdownTrigger};
use agensh_protocol::rest::ModelUsage;
use agensh_store::Store;
use anyhow::{bail, Context, Result};
use tokio::sync::mpsc;

use crate::cli::{Global, NodeArgs, RunArgs, StatusArgs};
use crate::cmd::config::{load, resolve};
use crate::cmd::hub::{raise_open_file_limit, refuse_if_running, stop_signal};
use crate::connect::client;
use crate::output::{json, now_ms, one_line};

/// How many workers a run or node starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workers {
    /// As many as the user said (a flag, the environment or agensh.toml).
    Given(usize),
    /// Nobody said: on the local model, as many as its measured speed carries (at most
    /// [`AUTO_MOST_WORKERS`]); on any other agent or endpoint, this default.
    Default(usize),
}

/// Most workers chosen for the local model when nobody set `run.workers`; its server gets
/// this many slots, and the measured speed picks how many of them are used.
const AUTO_MOST_WORKERS: usize = 8;

/// The agents the workers run, how many workers, and the local model server when the
/// built-in agent runs on the local model (kept alive for the run; stopped when dropped).
struct Prepared {
    /// The agent of every worker in no group.
    agent: AgentKind,
    /// `run.agents`' groups and their agents.
    groups: Vec<(AgentGroup, AgentKind)>,
    server: Option<ModelServer>,
    workers: usize,
    /// The gateway's upstreams and routes from the one-upstream shorthand (`[model]`,
    /// `run.agents`' own endpoints, the local model, a vendor's key in the environment).
    shorthand: Vec<Shorthand>,
}

/// Where the run's hub is: in this process (`agensh run`, which then also routes the local
/// model through its gateway), or elsewhere (`agensh node`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HubAt {
    Here,
    Elsewhere,
}

/// Resolves the run's agents, with every preset's model endpoint checked before any
/// agent starts; the agents that reach their model through the hub's gateway are told so.
async fn prepare_agent(
    config: &Config,
    dir: &Path,
    workers: Workers,
    hub: HubAt,
) -> Result<Prepared> {
    let mut groups = group_kinds(config, dir)?;
    let (mut agent, server, n) = if matches!(config.run.agent.as_str(), "builtin" | "") {
        let (builtin, server, n) = builtin_config(config, workers).await?;
        (AgentKind::Builtin(builtin), server, n)
    } else {
        let (Workers::Given(n) | Workers::Default(n)) = workers;
        (agent_kind(config, dir)?, None, n)
    };
    let local_url = match (&server, hub) {
        (Some(s), HubAt::Here) => Some(s.base_url()),
        _ => None,
    };
    let shorthand = if config.model.gateway {
        gateway_shorthand(config, local_url.as_deref())
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

/// The name of the upstream of `run.agents[i]`'s own endpoint.
fn group_upstream(i: usize) -> String {
    format!("agents-{}", i + 1)
}

/// The gateway's upstreams from the one-upstream shorthand: each `run.agents` group with an
/// endpoint of its own, then `[model]` (or the local model at `local_url`) for every other
/// worker. A preset without an endpoint reaches its vendor's API through the gateway when
/// its key is in the environment (the hub holds it; the agent never sees it); without the
/// key the CLI signs in its own way, directly.
pub(crate) fn gateway_shorthand(config: &Config, local_url: Option<&str>) -> Vec<Shorthand> {
    let m = &config.model;
    let pick = |own: &str, shared: &str| if own.is_empty() { shared } else { own }.to_string();
    let mut out = Vec::new();
    for (i, g) in config.run.agents.iter().enumerate() {
        let url = pick(&g.model_url, &m.url);
        let key_env = pick(&g.api_key_env, &m.api_key_env);
        if let Some((url, key_env)) = upstream_of(&g.agent, &url, &key_env) {
            out.push(Shorthand {
                workers: g.workers.clone(),
                name: group_upstream(i),
                url,
                model: pick(&g.model, &m.name),
                api_key_env: key_env,
            });
        }
    }
    let builtin = matches!(config.run.agent.as_str(), "builtin" | "");
    let main = match local_url {
        Some(local) if builtin && m.is_local() => Some(("local", local.to_string(), String::new())),
        _ if builtin && m.is_local() => None,
        _ => upstream_of(&config.run.agent, &m.url, &m.api_key_env)
            .map(|(url, key)| ("model", url, key)),
    };
    if let Some((name, url, api_key_env)) = main {
        out.push(Shorthand {
            workers: "all".into(),
            name: name.into(),
            url,
            model: m.name.clone(),
            api_key_env,
        });
    }
    out
}

/// The upstream an agent's endpoint makes: its URL and key variable; or a preset's vendor
/// with the key the preset reads, when that key is set; or none.
fn upstream_of(agent: &str, url: &str, key_env: &str) -> Option<(String, String)> {
    if matches!(agent, "acp" | "script") {
        return None;
    }
    if !url.trim().is_empty() {
        return Some((url.trim().to_string(), key_env.to_string()));
    }
    let p = agensh_domain::agents::preset(agent)?;
    if p.vendor_url.is_empty() {
        return None;
    }
    let var = if key_env.is_empty() {
        p.key_var
    } else {
        key_env
    };
    std::env::var(var).ok().filter(|k| !k.is_empty())?;
    Some((p.vendor_url.to_string(), var.to_string()))
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
/// measures the server and picks the count from its speed, said in one line.
async fn builtin_config(
    config: &Config,
    workers: Workers,
) -> Result<(BuiltinConfig, Option<ModelServer>, usize)> {
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
        let (Workers::Given(n) | Workers::Default(n)) = workers;
        return Ok((b, None, n));
    }
    let size: agensh_model::Size = m.local_size.parse()?;
    let slots = match workers {
        Workers::Given(n) => n,
        Workers::Default(_) => AUTO_MOST_WORKERS,
    };
    let server = crate::cmd::model::start_local(size, slots as u32, m.context_tokens).await?;
    eprintln!(
        "model server: {} thread(s) (the cores this process may use), {} MiB of prompt cache, {slots} slot(s)",
        server.threads(),
        server.prompt_cache_mib()
    );
    let n = match workers {
        Workers::Given(n) => n,
        Workers::Default(fallback) => {
            match agensh_model::measure(&server.base_url(), server.model_name()).await {
                Ok(speed) => {
                    let chosen = agensh_model::workers_for(&speed, slots);
                    eprintln!("{} (--workers N sets it)", chosen.reason);
                    chosen.workers
                }
                Err(e) => {
                    eprintln!("{e}; running {fallback} worker(s)");
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
        name => {
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
            let pick = |own: &str, shared: &str| {
                if own.is_empty() { shared } else { own }.to_string()
            };
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
    }
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

fn plan(
    config: &Config,
    dir: &Path,
    hub_url: &str,
    workers: Vec<(String, String)>,
    size: usize,
    agent: AgentKind,
    groups: Vec<(AgentGroup, AgentKind)>,
) -> Result<NodePlan> {
    let ends_at = (config.run.hours > 0.0)
        .then(|| SystemTime::now() + Duration::from_secs_f64(config.run.hours * 3600.0));
    Ok(NodePlan {
        org_dir: std::path::absolute(dir)?,
        limits: WorkerLimits::from_run(&config.run)?,
        hub_url: hub_url.to_string(),
        workers,
        agent,
        groups,
        permissions: config.run.permissions.parse()?,
        goal: config.organization.goal.clone(),
        organization_size: size,
        stagger: Duration::from_secs_f64(config.run.stagger_secs),
        idle_timeout: Duration::from_secs(config.run.idle_timeout_secs),
        park_idle: config.run.park_idle,
        ends_at,
        notices_before_end: config
            .run
            .notices_minutes
            .iter()
            .map(|m| Duration::from_secs_f64(m * 60.0))
            .collect(),
        pack: read_pack(config, dir)?,
        agensh: std::env::current_exe()?,
        agent_cpu: config.run.agent_cpu,
        recovery: Recovery::from(&config.run),
        remote: None,
    })
}

/// The run's clock of a run that starts now and lasts `hours` (0: no limit).
pub(crate) fn run_clock_from_now(hours: f64) -> agensh_protocol::dashboard::RunClock {
    let ms = |t: SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    };
    let now = SystemTime::now();
    agensh_protocol::dashboard::RunClock {
        started_at: ms(now),
        ends_at: (hours > 0.0).then(|| ms(now + Duration::from_secs_f64(hours * 3600.0))),
    }
}

/// The task pack's fragments (`organization.pack`, relative to the organization directory).
pub(crate) fn read_pack(config: &Config, dir: &Path) -> Result<Vec<String>> {
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

/// The goal's first line, marked when there is more.
fn first_line(goal: &str) -> String {
    let goal = goal.trim();
    match goal.split_once('\n') {
        Some((first, _)) => format!("{}…", first.trim_end()),
        None => goal.to_string(),
    }
}

/// Shuts down on Ctrl-C or SIGTERM; the trigger stops the run from elsewhere too (its
/// goal met and the grace over).
fn stop_on_signal() -> Result<(Shutdown, Arc<ShutdownTrigger>)> {
    let signal = stop_signal()?;
    let (trigger, shutdown) = ShutdownTrigger::new();
    let trigger = Arc::new(trigger);
    let fire = trigger.clone();
    tokio::spawn(async move {
        signal.await;
        eprintln!("stopping: ending every agent and its processes…");
        fire.fire();
    });
    Ok((shutdown, trigger))
}

/// The address the hub of `agensh run` listens on: `listen` when it is free. When it is in
/// use (another organization's hub) and came from agensh.toml or the default, a free port
/// on the same host instead, said on stderr; a taken address given by a flag or the
/// environment is an error. Checked before the run creates anything.
fn hub_listen(listen: &str, source: &Source) -> Result<String> {
    let taken = match std::net::TcpListener::bind(listen) {
        Ok(_) => return Ok(listen.to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => e,
        Err(e) => bail!("cannot listen on {listen}: {e} — set hub.listen in agensh.toml or pass --listen HOST:PORT (port 0 picks a free one)"),
    };
    let given = match source {
        Source::Flag(flag) => Some(format!("the flag {flag}")),
        Source::Env(var) => Some(format!("the environment variable {var}")),
        Source::File | Source::Default => None,
    };
    if let Some(given) = given {
        bail!("cannot listen on {listen} ({taken}), given by {given}: another process (another organization's hub?) listens there — pick another port, or port 0 for a free one");
    }
    let host = listen
        .rsplit_once(':')
        .map_or(listen, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let free = std::net::TcpListener::bind((host, 0))
        .and_then(|l| l.local_addr())
        .with_context(|| format!("{listen} is in use and no other port on {host} is free"))?;
    eprintln!("{listen} is in use (another organization's hub?); this run's hub listens on {free} instead");
    Ok(free.to_string())
}

pub async fn run(g: &Global, a: RunArgs) -> Result<()> {
    run_with(g, a, None, true).await
}

/// What a task running beside an organization (`agensh bench programbench`'s checkpoints)
/// is given: the organization and its hub while they run, and how the run ended.
pub struct RunContext {
    pub store: Arc<dyn Store>,
    /// Ctrl-C or SIGTERM.
    pub stop: Shutdown,
    /// `Some(true)` once the workers are done (the deadline came, or they all ended),
    /// `Some(false)` when the run was stopped; `None` while it runs.
    pub ended: tokio::sync::watch::Receiver<Option<bool>>,
    /// What the workers run, as the run describes it.
    pub agent: String,
    /// The run's hub, as its admin (none after the run, when no hub serves).
    pub admin: Option<Client>,
    /// The goal's state once it is met (none before, and when the run has no goal).
    pub goal: tokio::sync::watch::Receiver<Option<agensh_domain::goal::GoalStatus>>,
}

/// A task run beside the organization; the run waits for it before it shuts the hub down.
pub type Sidecar = Box<
    dyn FnOnce(
            RunContext,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>> + Send>>
        + Send,
>;

/// `agensh run`, with `sidecar` started once the hub serves; `print` says whether the
/// run's own summary is printed (a caller with `--json` prints one document of its own).
pub async fn run_with(g: &Global, a: RunArgs, sidecar: Option<Sidecar>, print: bool) -> Result<()> {
    let dir = g.org_dir(&a.dir);
    let resolved = resolve(&dir, &a.flags.values())?;
    let source = |key: &str| {
        resolved
            .settings
            .iter()
            .find(|s| s.key == key)
            .map_or(Source::Default, |s| s.source.clone())
    };
    let (listen_source, workers_source) = (source("hub.listen"), source("run.workers"));
    let config = resolved.config;
    // Before anything is created: another run of this organization, a taken port, an
    // upstream's key not set.
    refuse_if_running(&dir)?;
    agensh_node::node::check_worker_limits(&WorkerLimits::from_run(&config.run)?)?;
    crate::cmd::hub::upstream_keys_set(&config)?;
    let listen = hub_listen(&config.hub.listen, &listen_source)?;
    raise_open_file_limit();
    if crate::cmd::init::create_state_if_missing(&dir, &config).await? {
        eprintln!(
            "created the organization's state in {}",
            agensh_hub::state_dir(&dir).display()
        );
    }
    let workers = match workers_source {
        Source::Default => Workers::Default(config.run.workers),
        _ => Workers::Given(config.run.workers),
    };
    let Prepared {
        agent,
        groups,
        server: model_server,
        workers: n,
        shorthand,
    } = prepare_agent(&config, &dir, workers, HubAt::Here).await?;
    let mut config = config;
    config.gateway = config.gateway.with_shorthand(&shorthand);
    config.gateway.validate()?;
    crate::cmd::hub::upstream_keys_set(&config)?;
    let started = Instant::now();
    let started_ms = now_ms();
    let store: Arc<dyn Store> =
        crate::cmd::hub::open_store(&state_dir(&dir), &config.hub.store).await?;
    if !config.run.keep_going {
        if let Some(g) = agensh_hub::goal::stored(&*store, &config).await? {
            if let (true, Some(commit)) = (g.met(), &g.met_commit) {
                eprintln!(
                    "the goal of this organization was met already, at {} ({}): nothing to do — --keep-going runs the workers anyway, or change organization.done_when",
                    agensh_domain::goal::short(commit),
                    g.conditions.join("; ")
                );
                return Ok(());
            }
        }
    }
    let repo = state_dir(&dir).join(agensh_workspace::REPO_DIR);
    let ws = agensh_workspace::Workspace::open(&repo)?;
    let hub =
        agensh_hub::start_with_workspace(store.clone(), Some(ws), config.clone(), &listen).await?;
    write_hub_info(
        &dir,
        &HubInfo {
            url: hub.url.clone(),
            admin_token: hub.admin_token.clone(),
            pid: std::process::id(),
        },
    )
    .context("cannot write .agensh/hub.json")?;
    let admin = Client::new(&hub.url, &hub.admin_token);
    let mut known = admin.workers().await?;
    if known.len() < n {
        admin.add_workers(n - known.len()).await?;
        known = admin.workers().await?;
    }
    let mut workers = Vec::with_capacity(n);
    for w in known.iter().take(n) {
        workers.push((w.id.clone(), admin.worker_token(&w.id).await?.token));
    }
    let plan = plan(&config, &dir, &hub.url, workers, n, agent, groups)?;
    // Nodes on other hosts joining this run get its task pack (and its end, from the clock
    // told below) when they register.
    hub.set_pack(plan.pack.clone());
    let clock = RunClock {
        started,
        ends_at: plan.ends_at,
        dashboard: format!("{}/", hub.url),
    };
    tell_dashboard(&admin, &clock).await;
    eprintln!(
        "running {n} worker(s) with the {} on \"{}\" — hub {}; Ctrl-C stops",
        plan.agent.describe(),
        first_line(&config.organization.goal),
        hub.url
    );
    let (stop, stopper) = stop_on_signal()?;
    let (ended_tx, ended) = tokio::sync::watch::channel(None);
    let side = sidecar.map(|f| {
        tokio::spawn(f(RunContext {
            store: store.clone(),
            stop: stop.clone(),
            ended,
            agent: plan.agent.describe(),
            admin: Some(admin.clone()),
            goal: hub.goal_met(),
        }))
    });
    let (tx, rx) = mpsc::unbounded_channel();
    let node = tokio::spawn(run_node(plan, stop.clone(), tx));
    let view = tokio::spawn(live_view(rx, store.clone(), clock, a.json));
    let goal_end = tokio::spawn(crate::cmd::goal::end_at_goal(
        hub.goal_met(),
        stopper,
        config.run.keep_going,
        started,
    ));
    let summary = node.await.context("the node stopped unexpectedly")??;
    goal_end.abort();
    let _ = view.await;
    let goal = hub.goal();
    // Stopped for the goal's sake (its grace over) is an end, not an interruption.
    let interrupted = stop.is_shutdown() && !goal.met();
    let _ = ended_tx.send(Some(!interrupted));
    if let Some(side) = side {
        side.await
            .context("the task beside the run stopped unexpectedly")??;
    }
    let stats = store.stats().await?;
    if let Some(server) = model_server {
        server.stop().await;
    }
    hub.shutdown().await;
    // After the hub: every request it answered is recorded by then.
    let gateway = per_worker(&store.model_usage(None).await?);
    let economy = agensh_hub::goal::economy(&*store, &goal).await?;
    let _ = std::fs::remove_file(state_dir(&dir).join(agensh_hub::HUB_JSON));
    if print {
        let run = RunEnd {
            elapsed: started.elapsed(),
            started_ms,
            goal: &goal,
            economy: &economy,
        };
        print_summary(&summary, &stats, &gateway, &run, a.json);
    }
    every_worker_failed(&summary)?;
    crate::cmd::goal::judge(&goal, interrupted)
}

/// How the run ended: its length, its goal and what it spent.
struct RunEnd<'a> {
    elapsed: Duration,
    /// Unix ms the run started.
    started_ms: i64,
    goal: &'a agensh_domain::goal::GoalStatus,
    economy: &'a agensh_domain::goal::Economy,
}

/// An error (exit 4) when every worker of the run failed: nothing was done, and a script
/// running `agensh run` must be able to tell that from a run that ended well.
fn every_worker_failed(summary: &NodeSummary) -> Result<()> {
    let failed = summary.failed();
    match failed.first() {
        Some((id, e)) if failed.len() == summary.workers.len() => bail!(
            "every worker failed ({n} of {n}); {id}: {e} — each worker's log is .agensh/logs/<id>/turns.jsonl",
            n = failed.len()
        ),
        _ => Ok(()),
    }
}

/// How long `agensh node` waits for a hub it cannot reach as it starts (a restart).
const NODE_START_HUB_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// A read the node makes as it starts, sent again while the hub cannot be reached, for up
/// to [`NODE_START_HUB_WAIT`]: a read changes nothing, so one whose connection broke after
/// it was sent (the hub killed meanwhile) is safe to send again too.
async fn read_at_start<T, F>(read: impl Fn() -> F) -> Result<T>
where
    F: std::future::Future<Output = agensh_domain::Result<T>>,
{
    let deadline = std::time::Instant::now() + NODE_START_HUB_WAIT;
    loop {
        match read().await {
            Err(e) if e.code == "unreachable" && std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            r => return Ok(r?),
        }
    }
}

/// The hub's client for `agensh node`. A node started while its hub restarts waits for it,
/// as the node's own requests do, instead of exiting (`agensh-bench faults` found one that
/// did): when `.agensh/hub.json` is there but its hub is not running (killed, not stopped:
/// a stopped hub removes it), until a hub writes it again; its first reads are
/// [`read_at_start`].
async fn node_client(g: &Global) -> Result<agensh_client::Client> {
    let deadline = std::time::Instant::now() + NODE_START_HUB_WAIT;
    let hub_json = agensh_hub::state_dir(&g.dir).join(agensh_hub::HUB_JSON);
    loop {
        match client(g) {
            Ok(c) => return Ok(c),
            Err(e) if !hub_json.exists() || std::time::Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
        }
    }
}

pub async fn node(g: &Global, a: NodeArgs) -> Result<()> {
    if let Some(token) = a.node_token.clone().filter(|t| !t.trim().is_empty()) {
        return remote_node(g, a, token.trim().to_string()).await;
    }
    let config = load(&g.dir, &a.values())?;
    raise_open_file_limit();
    let admin = node_client(g).await?;
    let known = read_at_start(|| admin.workers()).await?;
    let mut workers = Vec::new();
    for id in a
        .ids
        .iter()
        .cloned()
        .chain(known.iter().map(|w| w.id.clone()))
        .take(a.workers)
    {
        let token = read_at_start(|| admin.worker_token(&id)).await?.token;
        workers.push((id.clone(), token));
    }
    if workers.len() < a.workers {
        bail!(
            "the hub has {} worker(s); add more with `agensh workers add N` first",
            known.len()
        );
    }
    let Prepared {
        agent,
        groups,
        server: model_server,
        ..
    } = prepare_agent(&config, &g.dir, Workers::Given(a.workers), HubAt::Elsewhere).await?;
    let plan = plan(
        &config,
        &g.dir,
        admin.base(),
        workers,
        known.len(),
        agent,
        groups,
    )?;
    drive_node(plan, model_server).await
}

/// Runs a node's workers until the run ends or a signal stops it, printing each turn's
/// end on stderr.
async fn drive_node(plan: NodePlan, model_server: Option<ModelServer>) -> Result<()> {
    let (stop, _) = stop_on_signal()?;
    let (tx, rx) = mpsc::unbounded_channel();
    let node = tokio::spawn(run_node(plan, stop, tx));
    let printer = tokio::spawn(async move {
        let mut rx = rx;
        while let Some((id, p)) = rx.recv().await {
            if let Progress::Turn {
                turns, last_action, ..
            } = p
            {
                eprintln!("{id}: turn {turns} ended ({})", one_line(&last_action));
            }
        }
    });
    let summary = node.await??;
    let _ = printer.await;
    if let Some(server) = model_server {
        server.stop().await;
    }
    eprintln!("node done: {} turn(s)", summary.turns());
    Ok(())
}

/// `agensh node --hub URL --node-token T` (DESIGN §8): a node on another host than the
/// hub's. It registers with its node token and runs the workers the hub gives it (the same
/// ones every time it starts), with nothing of the hub's directory: checkouts are cloned
/// and pushed over the hub's git smart HTTP (`agensh_workspace::remote`), and checkouts,
/// agent homes, logs and token files live in `--dir`, the node's own state directory. A
/// node killed and started again with the same token and directory resumes its workers:
/// their checkouts, and their turn logs, which say which events their agents were shown.
async fn remote_node(g: &Global, a: NodeArgs, token: String) -> Result<()> {
    if !a.ids.is_empty() {
        bail!(crate::output::Usage(
            "--id does not go with --node-token: the hub gives a node its workers (the same ones each time it registers)".into()
        ));
    }
    let Some(hub_url) = g.hub.clone().filter(|h| !h.trim().is_empty()) else {
        bail!(crate::output::Usage(
            "a node with --node-token needs the hub's address: give --hub URL (or set AGENSH_HUB)"
                .into()
        ));
    };
    let hub_url = hub_url.trim().trim_end_matches('/').to_string();
    let dir = std::path::absolute(&g.dir)?;
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the node's directory {}", dir.display()))?;
    raise_open_file_limit();
    let node = Client::new(&hub_url, &token);
    let registered = read_at_start(|| node.register_node(a.workers)).await?;
    let resolved = remote_config(&dir, &registered.goal, &a.values())?;
    // The node's own `run.hours`, when someone set it (a flag, AGENSH_RUN_HOURS, its
    // agensh.toml), may end its workers before the run does; never after.
    let own_hours = resolved
        .settings
        .iter()
        .any(|s| s.key == "run.hours" && s.source != Source::Default);
    let mut config = resolved.config;
    if !config.organization.pack.is_empty() {
        eprintln!("organization.pack in the node's agensh.toml is not used: the task pack is the organization's, given by the hub");
        config.organization.pack.clear();
    }
    let Prepared {
        agent,
        groups,
        server: model_server,
        ..
    } = prepare_agent(&config, &dir, Workers::Given(a.workers), HubAt::Elsewhere).await?;
    let ids: Vec<String> = registered.workers.iter().map(|w| w.id.clone()).collect();
    let workers = registered
        .workers
        .into_iter()
        .map(|w| (w.id, w.token))
        .collect();
    let mut plan = plan(
        &config,
        &dir,
        &hub_url,
        workers,
        registered.organization_size,
        agent,
        groups,
    )?;
    // The organization's terms, as a node on the hub's host takes them from its
    // agensh.toml and its run: the goal, the task pack, the run's end (the same after a
    // restart: the hub's clock, not this node's start) and the notice times.
    plan.goal = registered.goal;
    plan.pack = registered.pack;
    plan.notices_before_end = registered
        .notices_minutes
        .iter()
        .filter(|m| m.is_finite() && **m > 0.0)
        .map(|m| Duration::from_secs_f64(m * 60.0))
        .collect();
    let run_end = registered
        .ends_at
        .map(|ms| std::time::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64));
    plan.ends_at = match (run_end, plan.ends_at.filter(|_| own_hours)) {
        (Some(run), Some(own)) => Some(run.min(own)),
        (run, own) => run.or(own),
    };
    plan.remote = Some(agensh_workspace::remote::Remote::new(
        &hub_url,
        dir.join(".agensh").join("credentials"),
        agensh_workspace::git::NetworkJobs::new(config.run.git_jobs),
    ));
    eprintln!(
        "node {}: {} ({}) against {hub_url}, state in {}; Ctrl-C stops",
        registered.node,
        ids.join(", "),
        plan.agent.describe(),
        dir.display()
    );
    drive_node(plan, model_server).await
}

/// A remote node's configuration: its directory's `agensh.toml` when it has one (its
/// `[run]` and `[model]`), else the defaults; flags and `AGENSH_*` over either. The goal,
/// the task pack, the run's end and the notice times come from the hub.
fn remote_config(
    dir: &Path,
    goal: &str,
    flags: &[agensh_domain::config::FlagValue],
) -> Result<agensh_domain::config::Resolved> {
    if dir.join(crate::cmd::config::CONFIG_FILE).exists() {
        return resolve(dir, flags);
    }
    // A JSON string is a TOML basic string, but for DEL, which TOML wants escaped.
    let goal = serde_json::to_string(goal)?.replace('\u{7f}', "\\u007F");
    let env: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("AGENSH_"))
        .collect();
    let text = format!("[organization]\ngoal = {goal}\n");
    Ok(Config::resolve(&text, &env, flags).map_err(crate::output::Local)?)
}

/// Most recent changes the live view keeps for its compact form.
const RECENT_CHANGES: usize = 64;
/// Off a terminal, each worker's steps are printed as lines only up to this many workers.
const STEP_LINES_UP_TO: usize = 32;

/// When the run started and when it ends, for the live view's first line.
#[derive(Debug, Clone)]
struct RunClock {
    started: Instant,
    ends_at: Option<SystemTime>,
    /// The dashboard's address (the hub's `/`).
    dashboard: String,
}

/// Gives the hub the run's clock (the dashboard's time left) and prints a one-time link
/// that logs a browser in to the dashboard. Neither stops the run when it fails.
async fn tell_dashboard(admin: &Client, clock: &RunClock) {
    let ms = |t: SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    };
    let started = SystemTime::now() - clock.started.elapsed();
    let run = agensh_protocol::dashboard::RunClock {
        started_at: ms(started),
        ends_at: clock.ends_at.map(ms),
    };
    if let Err(e) = admin.set_run_clock(&run).await {
        tracing::warn!("the hub did not take the run's clock: {e}");
    }
    match admin.dashboard_link().await {
        Ok(link) => eprintln!(
            "dashboard: {} — open this link once to log in (it works for 10 minutes; `agensh dashboard` makes another)",
            link.url
        ),
        Err(e) => tracing::warn!("no dashboard link: {e}"),
    }
}

/// The run as a whole at one moment, the live view's first line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RunLine {
    elapsed: Duration,
    /// None: the run has no time limit.
    left: Option<Duration>,
    merged: u64,
    open: u64,
    /// Unix ms now, to age each worker's step.
    now: i64,
}

impl RunLine {
    fn render(&self) -> String {
        let left = self.left.map_or("no time limit".to_string(), |l| {
            format!("{} left", clock(l))
        });
        format!(
            "elapsed {} · {left} · parts merged {} (PRs open {})",
            clock(self.elapsed),
            self.merged,
            self.open
        )
    }
}

/// `1h02m03s`, `4m05s`, `9s`.
pub(crate) fn clock(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, s) => format!("{h}h{m:02}m{s:02}s"),
    }
}

/// `950`, `12.3k`, `1.2M`.
pub(crate) fn count(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// Redraws the view (on a terminal) or prints changes (otherwise).
async fn live_view(
    mut rx: mpsc::UnboundedReceiver<(String, Progress)>,
    store: Arc<dyn Store>,
    run: RunClock,
    quiet: bool,
) {
    let mut lines: BTreeMap<String, WorkerLine> = BTreeMap::new();
    let mut recent: VecDeque<String> = VecDeque::with_capacity(RECENT_CHANGES);
    let tty = std::io::stderr().is_terminal() && !quiet;
    let term = console::Term::stderr();
    let mut drawn = 0usize;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            got = rx.recv() => match got {
                None => break,
                Some((id, p)) => {
                    let print_steps = !tty && !quiet && lines.len() <= STEP_LINES_UP_TO;
                    let line = lines.entry(id.clone()).or_insert(WorkerLine {
                        status: WorkerStatus::Starting, turns: 0, last_action: String::new(), usage: Default::default(), progress: None,
                    });
                    let change = match p {
                        Progress::Status(s) => {
                            line.status = s;
                            line.progress = None;
                            Some(format!("{id}: {}", s.as_str()))
                        }
                        Progress::Step(step) => {
                            if print_steps {
                                eprintln!("{id}: {} (turn tokens {})", one_line(&step.step), step.tokens);
                            }
                            line.progress = Some(step);
                            None
                        }
                        Progress::Turn { turns, last_action, usage } => {
                            line.turns = turns;
                            line.last_action = last_action.clone();
                            line.usage = usage;
                            line.progress = None;
                            let change = format!("{id}: turn {turns} ended ({last_action})");
                            if !tty && !quiet {
                                eprintln!("{}", one_line(&change));
                            }
                            Some(change)
                        }
                    };
                    if let Some(change) = change {
                        if recent.len() == RECENT_CHANGES {
                            recent.pop_front();
                        }
                        recent.push_back(change);
                    }
                }
            },
            _ = tick.tick() => {
                if tty {
                    let claims = store.list_workers(now_ms()).await.unwrap_or_default();
                    let stats = store.stats().await.unwrap_or_default();
                    let head = RunLine {
                        elapsed: run.started.elapsed(),
                        left: run.ends_at.map(|e| e.duration_since(SystemTime::now()).unwrap_or_default()),
                        merged: stats.prs_merged,
                        open: stats.prs_open,
                        now: now_ms(),
                    };
                    let (rows, cols) = term.size_checked().unwrap_or((24, 80));
                    let mut view = render_view(&head, &lines, &claims, &recent, (rows as usize).saturating_sub(1).max(2), cols as usize);
                    view.insert(1, truncate(&format!("dashboard {} (log in: agensh dashboard)", run.dashboard), cols as usize));
                    drawn = redraw(&view, drawn);
                }
            }
        }
    }
}

/// Moves up over the `drawn` lines of the last view, writes `view` and clears what is left
/// below it; returns how many lines it wrote.
pub(crate) fn redraw(view: &[String], drawn: usize) -> usize {
    let mut err = std::io::stderr().lock();
    if drawn > 0 {
        let _ = write!(err, "\x1b[{drawn}A");
    }
    for line in view {
        let _ = writeln!(err, "\x1b[2K{}", one_line(line));
    }
    let _ = write!(err, "\x1b[J");
    let _ = err.flush();
    view.len()
}

/// A worker's tokens: those of its finished turns and those of the turn it is in.
fn tokens_of(l: &WorkerLine) -> u64 {
    l.usage.input_tokens + l.usage.output_tokens + l.progress.as_ref().map_or(0, |p| p.tokens)
}

/// The live view for a terminal of `rows` × `cols`: the run's line (elapsed, time left,
/// parts merged), then a line per worker when they fit (one row stays free) — its current
/// step and for how long, its tokens and its last speed — else counts per state and the
/// most recent changes. No line is wider than `cols`, and never more than `rows - 1` lines.
fn render_view(
    head: &RunLine,
    lines: &BTreeMap<String, WorkerLine>,
    workers: &[WorkerInfo],
    recent: &VecDeque<String>,
    rows: usize,
    cols: usize,
) -> Vec<String> {
    let room = rows.saturating_sub(1).max(1);
    let mut view = vec![head.render()];
    if lines.len() < room {
        let claims: BTreeMap<&str, String> = workers
            .iter()
            .filter_map(|w| {
                w.claims.last().map(|c| {
                    let what = c.label.as_deref().unwrap_or(&c.text);
                    (w.id.as_str(), format!("{} {what}", c.id))
                })
            })
            .collect();
        view.extend(lines.iter().map(|(id, l)| {
            let claim = claims.get(id.as_str()).map_or("", String::as_str);
            let (step, speed) = match &l.progress {
                Some(p) => {
                    let secs = (head.now - p.since).max(0) as u64 / 1000;
                    (
                        format!("{} {}", p.step, clock(Duration::from_secs(secs))),
                        format!("{:.1} tok/s", p.tokens_per_sec),
                    )
                }
                None if l.last_action.is_empty() => (String::new(), String::new()),
                None => (format!("last {}", l.last_action), String::new()),
            };
            format!(
                "{id:<6} {:<8} turns {:<4} {:<40} tokens {:<6} {:<10} claim {}",
                l.status.as_str(),
                l.turns,
                truncate(&step, 40),
                count(tokens_of(l)),
                speed,
                truncate(claim, 28)
            )
        }));
    } else {
        let counts: Vec<String> = WorkerStatus::ALL
            .iter()
            .map(|s| {
                let n = lines.values().filter(|l| l.status == *s).count();
                format!("{n} {}", s.as_str())
            })
            .collect();
        let turns: u64 = lines.values().map(|l| l.turns).sum();
        let tokens: u64 = lines.values().map(tokens_of).sum();
        let claiming = workers.iter().filter(|w| !w.claims.is_empty()).count();
        view.push(format!(
            "{} workers: {} · {turns} turns · {claiming} with a claim · tokens {tokens}",
            lines.len(),
            counts.join(", ")
        ));
        view.push("most recent changes:".to_string());
        let shown = room.saturating_sub(view.len());
        let skip = recent.len().saturating_sub(shown);
        view.extend(recent.iter().skip(skip).map(|c| format!("  {c}")));
    }
    view.into_iter()
        .take(room)
        .map(|l| truncate(&l, cols.max(1)))
        .collect()
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n.saturating_sub(1)).chain(['…']).collect()
    }
}

/// The gateway's usage summed per worker over its models (the key `""` holds the whole
/// organization's).
fn per_worker(rows: &[ModelUsage]) -> BTreeMap<String, ModelUsage> {
    let mut out: BTreeMap<String, ModelUsage> = BTreeMap::new();
    for r in rows {
        for key in [r.worker.as_str(), ""] {
            let t = out.entry(key.to_string()).or_insert_with(|| ModelUsage {
                worker: key.to_string(),
                ..ModelUsage::default()
            });
            t.requests += r.requests;
            t.input_tokens += r.input_tokens;
            t.cached_input_tokens += r.cached_input_tokens;
            t.output_tokens += r.output_tokens;
            t.cost_usd += r.cost_usd;
            if !t.model.split(", ").any(|m| m == r.model) {
                if !t.model.is_empty() {
                    t.model.push_str(", ");
                }
                t.model.push_str(&r.model);
            }
        }
    }
    out
}

/// Usage counted by the gateway, as JSON.
fn gateway_json(u: Option<&ModelUsage>) -> serde_json::Value {
    let u = u.cloned().unwrap_or_default();
    serde_json::json!({
        "requests": u.requests, "input_tokens": u.input_tokens,
        "cached_input_tokens": u.cached_input_tokens, "output_tokens": u.output_tokens,
        "cost_usd": u.cost_usd,
    })
}

/// Usage counted by the gateway, in words.
fn gateway_text(u: &ModelUsage) -> String {
    format!(
        "{} model request(s) through the gateway: tokens in {} (cached {}) out {}; cost ${:.4}",
        u.requests, u.input_tokens, u.cached_input_tokens, u.output_tokens, u.cost_usd
    )
}

fn print_summary(
    summary: &NodeSummary,
    stats: &agensh_store::Stats,
    gateway: &BTreeMap<String, ModelUsage>,
    run: &RunEnd<'_>,
    as_json: bool,
) {
    let elapsed = run.elapsed;
    let usage = summary.usage();
    let failed = summary.failed();
    if as_json {
        let workers: Vec<_> = summary
            .workers
            .iter()
            .filter_map(|(id, r)| r.as_ref().ok().map(|w| (id, w)))
            .map(|(id, w)| {
                serde_json::json!({
                    "id": id, "turns": w.turns,
                    "input_tokens": w.usage.input_tokens,
                    "cached_input_tokens": w.usage.cached_input_tokens,
                    "output_tokens": w.usage.output_tokens,
                    "cost_usd": w.usage.cost_usd,
                    "turns_without_usage": w.usage.unreported_turns,
                    "restarts": w.restarts,
                    "memory_kills": w.memory_kills,
                    "gateway": gateway_json(gateway.get(id.as_str())),
                })
            })
            .collect();
        json(&serde_json::json!({
            "seconds": elapsed.as_secs_f64(),
            "turns": summary.turns(),
            "prs_merged": stats.prs_merged, "prs_open": stats.prs_open,
            "records": stats.records, "messages": stats.messages,
            "input_tokens": usage.input_tokens, "cached_input_tokens": usage.cached_input_tokens,
            "output_tokens": usage.output_tokens, "cost_usd": usage.cost_usd,
            "turns_without_usage": usage.unreported_turns,
            "gateway": gateway_json(gateway.get("")),
            "workers": workers,
            "failed_workers": failed.iter().map(|(id, e)| serde_json::json!({"id": id, "error": e})).collect::<Vec<_>>(),
            "goal": crate::cmd::goal::summary_json(run.goal, run.economy, run.started_ms),
        }));
        return;
    }
    outln!(
        "done in {:.0} s: {} turn(s) by {} worker(s); PRs merged {} (open {}); {} board record(s); {} message(s); {}",
        elapsed.as_secs_f64(),
        summary.turns(),
        summary.workers.len(),
        stats.prs_merged,
        stats.prs_open,
        stats.records,
        stats.messages,
        usage_text(&usage, summary.turns())
    );
    if let Some(g) = gateway.get("") {
        outln!("{}", gateway_text(g));
    }
    for line in crate::cmd::goal::summary_lines(run.goal, run.economy, run.started_ms) {
        outln!("{line}");
    }
    for (id, w) in summary.workers.iter() {
        if let Some(w) = w.as_ref().ok().filter(|w| w.memory_kills > 0) {
            outln!(
                "{id}: its agent was killed by its memory limit (run.worker_memory) {} time(s) and restarted",
                w.memory_kills
            );
        }
    }
    for (id, e) in failed {
        outln!("{id} failed: {e}");
    }
}

/// Tokens and cost as counted, and how many turns' agents reported none (never guessed).
fn usage_text(u: &agensh_node::adapters::Usage, turns: u64) -> String {
    if turns > 0 && u.unreported_turns >= turns {
        return "tokens not reported by the agent".into();
    }
    let mut t = format!(
        "tokens in {} (cached {}) out {}; cost ${:.4}",
        u.input_tokens, u.cached_input_tokens, u.output_tokens, u.cost_usd
    );
    if u.unreported_turns > 0 {
        t.push_str(&format!(
            " ({} turn(s) without usage from the agent, not counted)",
            u.unreported_turns
        ));
    }
    t
}

pub async fn status(g: &Global, a: StatusArgs) -> Result<()> {
    let conn = crate::connect::connect(g).await?;
    let c = &conn.client;
    let (workers, stats, usage) = (c.workers().await, c.stats().await, c.usage().await);
    let goal = c.goal().await;
    conn.close().await;
    let (workers, stats, usage, goal) = (workers?, stats?, usage?, goal?);
    if a.json {
        json(
            &serde_json::json!({ "workers": workers, "stats": stats, "usage": usage, "goal": goal }),
        );
        return Ok(());
    }
    if goal.defined() {
        outln!("goal ({}): {}", goal.conditions.join("; "), goal.line());
        for check in goal.checks.iter().filter(|c| !c.met) {
            let last = check.detail.trim().lines().last().unwrap_or("");
            outln!(
                "  {} on {}: {}",
                check.condition,
                agensh_domain::goal::short(&check.commit),
                one_line(last)
            );
        }
    }
    if let Some(e) = &goal.economy {
        outln!("cost: {}", e.line());
    }
    let used = per_worker(&usage);
    let now = now_ms();
    outln!(
        "{:<8} {:<9} {:<12} {:<44} {:<18} {:<20} CLAIM",
        "WORKER",
        "STATUS",
        "ACTIVE",
        "STEP",
        "TURN TOKENS",
        "MODEL USE"
    );
    for w in &workers {
        let active = w
            .last_activity
            .map(|t| agensh_domain::time::age(t, now))
            .unwrap_or_else(|| "never".into());
        let claim = w
            .claims
            .last()
            .map(|r| format!("{} {}", r.id, r.label.as_deref().unwrap_or(&r.text)))
            .unwrap_or_default();
        let (step, tokens) = match &w.progress {
            Some(p) => (
                format!(
                    "{} for {}",
                    p.step,
                    clock(Duration::from_millis((now - p.since).max(0) as u64))
                ),
                format!("{} {:.1} tok/s", count(p.tokens), p.tokens_per_sec),
            ),
            None => ("-".into(), "-".into()),
        };
        let model_use = used.get(&w.id).map_or("-".to_string(), |u| {
            format!(
                "{} ${:.2}",
                count(u.input_tokens + u.output_tokens),
                u.cost_usd
            )
        });
        outln!(
            "{:<8} {:<9} {:<12} {:<44} {:<18} {:<20} {}",
            w.id,
            w.status.as_str(),
            active,
            truncate(&step, 44),
            tokens,
            model_use,
            claim
        );
    }
    // Which agent each worker runs, one line per agent (and model).
    let mut agents: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for w in &workers {
        if let Some(a) = &w.agent {
            agents.entry(a).or_default().push(&w.id);
        }
    }
    for (agent, ids) in agents {
        outln!("agent {agent}: {}", ids.join(", "));
    }
    for w in &workers {
        if let Some(why) = &w.stopped_for {
            outln!("{} stopped: {why}", w.id);
        }
    }
    outln!(
        "PRs: {} open, {} merged, {} closed · board: {} records · messages: {}",
        stats.prs_open,
        stats.prs_merged,
        stats.prs_closed,
        stats.records,
        stats.messages
    );
    if let Some(g) = used.get("") {
        outln!("{}", gateway_text(g));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_only_endpoint_gets_v1_and_any_other_is_kept() {
        assert_eq!(
            chat_base("http://127.0.0.1:8000/"),
            "http://127.0.0.1:8000/v1"
        );
        assert_eq!(
            chat_base("http://127.0.0.1:8000/v1"),
            "http://127.0.0.1:8000/v1"
        );
        assert_eq!(
            chat_base("https://example.test/v1beta/openai"),
            "https://example.test/v1beta/openai"
        );
    }

    fn workers(n: usize) -> BTreeMap<String, WorkerLine> {
        (0..n)
            .map(|i| {
                let status = WorkerStatus::ALL[i % 3];
                let line = WorkerLine {
                    status,
                    turns: 2,
                    last_action: "board_write".into(),
                    usage: Default::default(),
                    progress: None,
                };
                (format!("w{:04}", i + 1), line)
            })
            .collect()
    }

    const NOW: i64 = 1_700_000_000_000;

    fn head() -> RunLine {
        RunLine {
            elapsed: Duration::from_secs(250),
            left: Some(Duration::from_secs(950)),
            merged: 1,
            open: 2,
            now: NOW,
        }
    }

    #[test]
    fn a_thousand_workers_become_counts_and_recent_changes() {
        let lines = workers(1_024);
        let recent: VecDeque<String> = (0..RECENT_CHANGES)
            .map(|i| format!("w{:04}: turn 2 ended (board_write)", i + 1))
            .collect();
        let view = render_view(&head(), &lines, &[], &recent, 40, 100);
        assert_eq!(view.len(), 39, "{view:#?}");
        assert!(
            view[1]
                .starts_with("1024 workers: 342 starting, 341 busy, 341 idle, 0 parked, 0 stalled"),
            "{}",
            view[1]
        );
        assert!(view[1].contains("2048 turns"), "{}", view[1]);
        assert_eq!(view[2], "most recent changes:");
        assert_eq!(
            view[38],
            format!("  w{:04}: turn 2 ended (board_write)", RECENT_CHANGES)
        );
        assert!(view.iter().all(|l| l.chars().count() <= 100));
    }

    #[test]
    fn workers_that_fit_get_a_line_each() {
        let lines = workers(5);
        let view = render_view(&head(), &lines, &[], &VecDeque::new(), 40, 200);
        assert_eq!(view.len(), 6);
        assert!(
            view[1].starts_with("w0001  starting turns 2"),
            "{}",
            view[1]
        );
        assert_eq!(
            render_view(&head(), &lines, &[], &VecDeque::new(), 7, 200).len(),
            6
        );
        assert_eq!(
            render_view(&head(), &lines, &[], &VecDeque::new(), 6, 200)[1],
            {
                "5 workers: 2 starting, 2 busy, 1 idle, 0 parked, 0 stalled, 0 stopped, 0 dead · 10 turns · 0 with a claim · tokens 0"
            }
        );
    }

    #[test]
    fn a_narrow_terminal_cuts_lines() {
        let view = render_view(&head(), &workers(3), &[], &VecDeque::new(), 40, 20);
        assert!(view.iter().all(|l| l.chars().count() == 20), "{view:#?}");
        assert!(view[1].ends_with('…'));
    }

    #[test]
    fn the_first_line_has_the_time_and_the_parts_merged() {
        let view = render_view(&head(), &workers(2), &[], &VecDeque::new(), 40, 200);
        assert_eq!(
            view[0],
            "elapsed 4m10s · 15m50s left · parts merged 1 (PRs open 2)"
        );
        let endless = RunLine {
            left: None,
            elapsed: Duration::from_secs(3_725),
            ..head()
        };
        assert_eq!(
            render_view(&endless, &workers(2), &[], &VecDeque::new(), 40, 200)[0],
            "elapsed 1h02m05s · no time limit · parts merged 1 (PRs open 2)"
        );
    }

    #[test]
    fn a_busy_worker_shows_its_step_for_how_long_its_tokens_and_speed() {
        let mut lines = workers(2);
        let busy = lines.get_mut("w0002").unwrap();
        busy.usage.input_tokens = 10_000;
        busy.usage.output_tokens = 300;
        busy.progress = Some(agensh_domain::worker::WorkerProgress {
            step: "model request 3 (1204 tokens in)".into(),
            since: NOW - 42_000,
            tokens: 2_000,
            tokens_per_sec: 9.54,
        });
        let view = render_view(&head(), &lines, &[], &VecDeque::new(), 40, 200);
        let line = &view[2];
        assert!(
            line.starts_with("w0002  busy     turns 2    model request 3 (1204 tokens in) 42s"),
            "{line}"
        );
        assert!(line.contains("tokens 12.3k  9.5 tok/s"), "{line}");
        // A worker between turns shows what it did last.
        assert!(view[1].contains("last board_write"), "{}", view[1]);
        // The compact form counts the tokens of the turns in progress too.
        let compact = render_view(&head(), &lines, &[], &VecDeque::new(), 3, 200);
        assert!(compact[1].ends_with("tokens 12300"), "{}", compact[1]);
    }

    #[test]
    fn a_taken_default_port_is_traded_for_a_free_one_and_a_given_one_refused() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let got = hub_listen(&addr, &Source::Default).unwrap();
        assert_ne!(got, addr);
        assert!(got.starts_with("127.0.0.1:"), "{got}");
        std::net::TcpListener::bind(&got).expect("the port it took is free");
        assert_ne!(hub_listen(&addr, &Source::File).unwrap(), addr);
        let e = hub_listen(&addr, &Source::Flag("--listen".into()))
            .unwrap_err()
            .to_string();
        assert!(e.contains(&addr) && e.contains("the flag --listen"), "{e}");
        // A free address is kept as it is.
        drop(taken);
        assert_eq!(hub_listen(&addr, &Source::Default).unwrap(), addr);
    }
}
