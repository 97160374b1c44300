//! `agensh run DIR` (hub and node in one process, with a live view), `agensh node` (a
//! node against a hub by URL) and `agensh status` (the same snapshot from anywhere).

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use agensh_client::Client;
use agensh_domain::config::Config;
use agensh_domain::worker::{WorkerInfo, WorkerStatus};
use agensh_hub::{state_dir, write_hub_info, HubInfo, STORE_FILE};
use agensh_model::ModelServer;
use agensh_node::adapters::builtin::{BuiltinConfig, ToolStyle};
use agensh_node::node::{run_node, AgentKind, NodePlan, NodeSummary, WorkerLine};
use agensh_node::turn::Progress;
use agensh_node::turn::Recovery;
use agensh_process::{Shutdown, ShutdownTrigger};
use agensh_store::{SqliteStore, Store};
use anyhow::{bail, Context, Result};
use tokio::sync::mpsc;

use crate::cli::{Global, ModelFlags, NodeArgs, RunArgs, StatusArgs};
use crate::cmd::hub::{raise_open_file_limit, stop_signal};
use crate::cmd::init::load_config;
use crate::connect::client;
use crate::output::{json, now_ms};

/// Flags that override `[run]` and `[model]` in agensh.toml.
fn apply_overrides(
    config: &mut Config,
    workers: Option<usize>,
    agent: Option<String>,
    scenario: Option<PathBuf>,
    hours: Option<f64>,
    model: &ModelFlags,
) -> Result<()> {
    if let Some(u) = &model.model_url {
        config.model.url = u.clone();
    }
    if let Some(m) = &model.model {
        config.model.name = m.clone();
    }
    if let Some(k) = &model.api_key_env {
        config.model.api_key_env = k.clone();
    }
    if let Some(s) = &model.tool_style {
        config.model.style = s.clone();
    }
    if let Some(s) = &model.model_size {
        config.model.local_size = s.clone();
    }
    if let Some(n) = workers {
        config.run.workers = n;
    }
    if let Some(a) = agent {
        config.run.agent = a;
    }
    if let Some(s) = scenario {
        config.run.scenario = s.to_string_lossy().to_string();
    }
    if let Some(h) = hours {
        config.run.hours = h;
    }
    config.validate()?;
    Ok(())
}

/// The agent the workers run, and the local model server when the built-in agent runs on
/// the local model (kept alive for the run; stopped when dropped).
async fn prepare_agent(
    config: &Config,
    dir: &Path,
    local_workers: usize,
) -> Result<(AgentKind, Option<ModelServer>)> {
    if matches!(config.run.agent.as_str(), "builtin" | "") {
        let (builtin, server) = builtin_config(config, local_workers).await?;
        return Ok((AgentKind::Builtin(builtin), server));
    }
    Ok((agent_kind(config, dir)?, None))
}

/// The built-in agent's settings from `[model]`; on the local model, installs it the first
/// time and starts its server with one slot per worker.
async fn builtin_config(
    config: &Config,
    local_workers: usize,
) -> Result<(BuiltinConfig, Option<ModelServer>)> {
    let m = &config.model;
    let style: ToolStyle = m.style.parse()?;
    let mut b = BuiltinConfig {
        base_url: m.url.trim().trim_end_matches('/').to_string(),
        model: m.name.clone(),
        api_key: None,
        style,
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
        return Ok((b, None));
    }
    let size: agensh_model::Size = m.local_size.parse()?;
    let server =
        crate::cmd::model::start_local(size, local_workers as u32, m.context_tokens).await?;
    b.base_url = server.base_url();
    if b.model.is_empty() {
        b.model = server.model_name().to_string();
    }
    if b.style == ToolStyle::Auto {
        // Small local models answer native tool definitions in prose; schema-constrained
        // actions always parse.
        b.style = ToolStyle::Json;
    }
    Ok((b, Some(server)))
}

fn agent_kind(config: &Config, dir: &Path) -> Result<AgentKind> {
    match config.run.agent.as_str() {
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
            if config.run.agent_command.is_empty() {
                bail!("the acp agent needs run.agent_command in agensh.toml, e.g. [\"gemini\", \"--acp\"]");
            }
            Ok(AgentKind::Acp {
                command: config.run.agent_command.clone(),
            })
        }
        other => bail!("unknown agent \"{other}\" — use builtin, acp or script"),
    }
}

fn plan(
    config: &Config,
    dir: &Path,
    hub_url: &str,
    workers: Vec<(String, String)>,
    size: usize,
    agent: AgentKind,
) -> Result<NodePlan> {
    let ends_at = (config.run.hours > 0.0)
        .then(|| SystemTime::now() + Duration::from_secs_f64(config.run.hours * 3600.0));
    Ok(NodePlan {
        org_dir: std::path::absolute(dir)?,
        hub_url: hub_url.to_string(),
        workers,
        agent,
        goal: config.organization.goal.clone(),
        organization_size: size,
        stagger: Duration::from_secs_f64(config.run.stagger_secs),
        idle_timeout: Duration::from_secs(config.run.idle_timeout_secs),
        ends_at,
        notices_before_end: config
            .run
            .notices_minutes
            .iter()
            .map(|m| Duration::from_secs_f64(m * 60.0))
            .collect(),
        pack: Vec::new(),
        agensh: std::env::current_exe()?,
        agent_cpu: config.run.agent_cpu,
        recovery: Recovery::from(&config.run),
    })
}

/// The goal's first line, marked when there is more.
fn first_line(goal: &str) -> String {
    let goal = goal.trim();
    match goal.split_once('\n') {
        Some((first, _)) => format!("{}…", first.trim_end()),
        None => goal.to_string(),
    }
}

/// Shuts down on Ctrl-C or SIGTERM.
fn stop_on_signal() -> Result<Shutdown> {
    let signal = stop_signal()?;
    let (trigger, shutdown) = ShutdownTrigger::new();
    tokio::spawn(async move {
        signal.await;
        eprintln!("stopping: ending every agent and its processes…");
        trigger.fire();
    });
    Ok(shutdown)
}

pub async fn run(a: RunArgs) -> Result<()> {
    let mut config = load_config(&a.dir)?;
    raise_open_file_limit();
    apply_overrides(
        &mut config,
        a.workers,
        a.agent,
        a.scenario,
        a.hours,
        &a.model,
    )?;
    if crate::cmd::init::create_state_if_missing(&a.dir, &config).await? {
        eprintln!(
            "created the organization's state in {}",
            agensh_hub::state_dir(&a.dir).display()
        );
    }
    let (agent, model_server) = prepare_agent(&config, &a.dir, config.run.workers).await?;
    let started = Instant::now();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&state_dir(&a.dir).join(STORE_FILE))?);
    let repo = state_dir(&a.dir).join(agensh_workspace::REPO_DIR);
    let ws = agensh_workspace::Workspace::open(&repo)?;
    let listen = a.listen.unwrap_or_else(|| config.hub.listen.clone());
    let hub =
        agensh_hub::start_with_workspace(store.clone(), Some(ws), config.clone(), &listen).await?;
    write_hub_info(
        &a.dir,
        &HubInfo {
            url: hub.url.clone(),
            admin_token: hub.admin_token.clone(),
            pid: std::process::id(),
        },
    )
    .context("cannot write .agensh/hub.json")?;
    let admin = Client::new(&hub.url, &hub.admin_token);
    let n = config.run.workers;
    let mut known = admin.workers().await?;
    if known.len() < n {
        admin.add_workers(n - known.len()).await?;
        known = admin.workers().await?;
    }
    let mut workers = Vec::with_capacity(n);
    for w in known.iter().take(n) {
        workers.push((w.id.clone(), admin.worker_token(&w.id).await?.token));
    }
    let plan = plan(&config, &a.dir, &hub.url, workers, n, agent)?;
    eprintln!(
        "running {n} worker(s) with the {} on \"{}\" — hub {}; Ctrl-C stops",
        plan.agent.describe(),
        first_line(&config.organization.goal),
        hub.url
    );
    let stop = stop_on_signal()?;
    let (tx, rx) = mpsc::unbounded_channel();
    let node = tokio::spawn(run_node(plan, stop.clone(), tx));
    let view = tokio::spawn(live_view(rx, store.clone(), a.json));
    let summary = node.await.context("the node stopped unexpectedly")??;
    let _ = view.await;
    let stats = store.stats().await?;
    if let Some(server) = model_server {
        server.stop().await;
    }
    hub.shutdown().await;
    let _ = std::fs::remove_file(state_dir(&a.dir).join(agensh_hub::HUB_JSON));
    print_summary(&summary, &stats, started.elapsed(), a.json);
    Ok(())
}

pub async fn node(g: &Global, a: NodeArgs) -> Result<()> {
    let mut config = load_config(&g.dir)?;
    raise_open_file_limit();
    apply_overrides(
        &mut config,
        Some(a.workers),
        a.agent,
        a.scenario,
        a.hours,
        &a.model,
    )?;
    let admin = client(g)?;
    let known = admin.workers().await?;
    let mut workers = Vec::new();
    for id in a
        .ids
        .iter()
        .cloned()
        .chain(known.iter().map(|w| w.id.clone()))
        .take(a.workers)
    {
        workers.push((id.clone(), admin.worker_token(&id).await?.token));
    }
    if workers.len() < a.workers {
        bail!(
            "the hub has {} worker(s); add more with `agensh workers add N` first",
            known.len()
        );
    }
    let (agent, model_server) = prepare_agent(&config, &g.dir, a.workers).await?;
    let plan = plan(&config, &g.dir, admin.base(), workers, known.len(), agent)?;
    let stop = stop_on_signal()?;
    let (tx, rx) = mpsc::unbounded_channel();
    let node = tokio::spawn(run_node(plan, stop, tx));
    let printer = tokio::spawn(async move {
        let mut rx = rx;
        while let Some((id, p)) = rx.recv().await {
            if let Progress::Turn {
                turns, last_action, ..
            } = p
            {
                eprintln!("{id}: turn {turns} ended ({last_action})");
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

/// Redraws one line per worker (on a terminal) or prints changes (otherwise).
async fn live_view(
    mut rx: mpsc::UnboundedReceiver<(String, Progress)>,
    store: Arc<dyn Store>,
    quiet: bool,
) {
    let mut lines: BTreeMap<String, WorkerLine> = BTreeMap::new();
    let tty = std::io::stderr().is_terminal() && !quiet;
    let mut drawn = 0usize;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            got = rx.recv() => match got {
                None => break,
                Some((id, p)) => {
                    let line = lines.entry(id.clone()).or_insert(WorkerLine {
                        status: WorkerStatus::Starting, turns: 0, last_action: String::new(), usage: Default::default(),
                    });
                    match p {
                        Progress::Status(s) => line.status = s,
                        Progress::Turn { turns, last_action, usage } => {
                            line.turns = turns;
                            line.last_action = last_action.clone();
                            line.usage = usage;
                            if !tty && !quiet {
                                eprintln!("{id}: turn {turns} ended ({last_action})");
                            }
                        }
                    }
                }
            },
            _ = tick.tick() => {
                if tty {
                    let claims = store.list_workers(now_ms()).await.unwrap_or_default();
                    drawn = redraw(&lines, &claims, drawn);
                }
            }
        }
    }
}

fn redraw(lines: &BTreeMap<String, WorkerLine>, workers: &[WorkerInfo], drawn: usize) -> usize {
    let mut err = std::io::stderr().lock();
    if drawn > 0 {
        let _ = write!(err, "\x1b[{drawn}A");
    }
    let mut n = 0;
    for (id, l) in lines {
        let claim = workers
            .iter()
            .find(|w| &w.id == id)
            .and_then(|w| w.claims.last())
            .map(|c| format!("{} {}", c.id, c.label.as_deref().unwrap_or(&c.text)))
            .unwrap_or_default();
        let _ = writeln!(
            err,
            "\x1b[2K{id:<6} {:<8} turns {:<4} last {:<14} claim {:<28} tokens {}",
            l.status.as_str(),
            l.turns,
            truncate(&l.last_action, 14),
            truncate(&claim, 28),
            l.usage.input_tokens + l.usage.output_tokens
        );
        n += 1;
    }
    let _ = err.flush();
    n
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n.saturating_sub(1)).chain(['…']).collect()
    }
}

fn print_summary(
    summary: &NodeSummary,
    stats: &agensh_store::Stats,
    elapsed: Duration,
    as_json: bool,
) {
    let usage = summary.usage();
    let failed: Vec<(&String, &String)> = summary
        .workers
        .iter()
        .filter_map(|(id, r)| r.as_ref().err().map(|e| (id, e)))
        .collect();
    if as_json {
        json(&serde_json::json!({
            "seconds": elapsed.as_secs_f64(),
            "turns": summary.turns(),
            "prs_merged": stats.prs_merged, "prs_open": stats.prs_open,
            "records": stats.records, "messages": stats.messages,
            "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens, "cost_usd": usage.cost_usd,
            "failed_workers": failed.iter().map(|(id, e)| serde_json::json!({"id": id, "error": e})).collect::<Vec<_>>(),
        }));
        return;
    }
    println!(
        "done in {:.0} s: {} turn(s) by {} worker(s); PRs merged {} (open {}); {} board record(s); {} message(s); tokens in {} out {}; cost ${:.4}",
        elapsed.as_secs_f64(),
        summary.turns(),
        summary.workers.len(),
        stats.prs_merged,
        stats.prs_open,
        stats.records,
        stats.messages,
        usage.input_tokens,
        usage.output_tokens,
        usage.cost_usd
    );
    for (id, e) in failed {
        println!("{id} failed: {e}");
    }
}

pub async fn status(g: &Global, a: StatusArgs) -> Result<()> {
    let c = client(g)?;
    let workers = c.workers().await?;
    let stats = c.stats().await?;
    if a.json {
        json(&serde_json::json!({ "workers": workers, "stats": stats }));
        return Ok(());
    }
    let now = now_ms();
    println!("{:<8} {:<9} {:<12} CLAIM", "WORKER", "STATUS", "ACTIVE");
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
        println!(
            "{:<8} {:<9} {:<12} {}",
            w.id,
            w.status.as_str(),
            active,
            claim
        );
    }
    println!(
        "PRs: {} open, {} merged, {} closed · board: {} records · messages: {}",
        stats.prs_open, stats.prs_merged, stats.prs_closed, stats.records, stats.messages
    );
    Ok(())
}
