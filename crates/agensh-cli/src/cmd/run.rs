//! `agensh run DIR` (hub and node in one process, with a live view), `agensh node` (a
//! node against a hub by URL) and `agensh status` (the same snapshot from anywhere).

use std::collections::{BTreeMap, VecDeque};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use agensh_client::Client;
use agensh_domain::config::Config;
use agensh_domain::worker::{WorkerInfo, WorkerStatus};
use agensh_hub::{state_dir, write_hub_info, HubInfo, STORE_FILE};
use agensh_model::ModelServer;
use agensh_node::adapters::builtin::{BuiltinConfig, Mode, ToolStyle};
use agensh_node::node::{run_node, AgentKind, NodePlan, NodeSummary, WorkerLine};
use agensh_node::turn::Progress;
use agensh_node::turn::Recovery;
use agensh_process::{Shutdown, ShutdownTrigger};
use agensh_store::{SqliteStore, Store};
use anyhow::{bail, Context, Result};
use tokio::sync::mpsc;

use crate::cli::{Global, NodeArgs, RunArgs, StatusArgs};
use crate::cmd::config::load;
use crate::cmd::hub::{raise_open_file_limit, stop_signal};
use crate::connect::client;
use crate::output::{json, now_ms};

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

pub async fn run(g: &Global, a: RunArgs) -> Result<()> {
    let dir = g.org_dir(&a.dir);
    let config = load(&dir, &a.flags.values())?;
    raise_open_file_limit();
    if crate::cmd::init::create_state_if_missing(&dir, &config).await? {
        eprintln!(
            "created the organization's state in {}",
            agensh_hub::state_dir(&dir).display()
        );
    }
    let (agent, model_server) = prepare_agent(&config, &dir, config.run.workers).await?;
    let started = Instant::now();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&state_dir(&dir).join(STORE_FILE))?);
    let repo = state_dir(&dir).join(agensh_workspace::REPO_DIR);
    let ws = agensh_workspace::Workspace::open(&repo)?;
    let listen = config.hub.listen.clone();
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
    let plan = plan(&config, &dir, &hub.url, workers, n, agent)?;
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
    let _ = std::fs::remove_file(state_dir(&dir).join(agensh_hub::HUB_JSON));
    print_summary(&summary, &stats, started.elapsed(), a.json);
    Ok(())
}

pub async fn node(g: &Global, a: NodeArgs) -> Result<()> {
    let config = load(&g.dir, &a.values())?;
    raise_open_file_limit();
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

/// Most recent changes the live view keeps for its compact form.
const RECENT_CHANGES: usize = 64;

/// Redraws the view (on a terminal) or prints changes (otherwise).
async fn live_view(
    mut rx: mpsc::UnboundedReceiver<(String, Progress)>,
    store: Arc<dyn Store>,
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
                    let line = lines.entry(id.clone()).or_insert(WorkerLine {
                        status: WorkerStatus::Starting, turns: 0, last_action: String::new(), usage: Default::default(),
                    });
                    let change = match p {
                        Progress::Status(s) => {
                            line.status = s;
                            format!("{id}: {}", s.as_str())
                        }
                        Progress::Turn { turns, last_action, usage } => {
                            line.turns = turns;
                            line.last_action = last_action.clone();
                            line.usage = usage;
                            let change = format!("{id}: turn {turns} ended ({last_action})");
                            if !tty && !quiet {
                                eprintln!("{change}");
                            }
                            change
                        }
                    };
                    if recent.len() == RECENT_CHANGES {
                        recent.pop_front();
                    }
                    recent.push_back(change);
                }
            },
            _ = tick.tick() => {
                if tty {
                    let claims = store.list_workers(now_ms()).await.unwrap_or_default();
                    let (rows, cols) = term.size_checked().unwrap_or((24, 80));
                    let view = render_view(&lines, &claims, &recent, rows as usize, cols as usize);
                    drawn = redraw(&view, drawn);
                }
            }
        }
    }
}

/// Moves up over the `drawn` lines of the last view, writes `view` and clears what is left
/// below it; returns how many lines it wrote.
fn redraw(view: &[String], drawn: usize) -> usize {
    let mut err = std::io::stderr().lock();
    if drawn > 0 {
        let _ = write!(err, "\x1b[{drawn}A");
    }
    for line in view {
        let _ = writeln!(err, "\x1b[2K{line}");
    }
    let _ = write!(err, "\x1b[J");
    let _ = err.flush();
    view.len()
}

/// The live view for a terminal of `rows` × `cols`: a line per worker when they fit (one
/// row stays free), else counts per state and the most recent changes. No line is wider
/// than `cols`, and never more than `rows - 1` lines.
fn render_view(
    lines: &BTreeMap<String, WorkerLine>,
    workers: &[WorkerInfo],
    recent: &VecDeque<String>,
    rows: usize,
    cols: usize,
) -> Vec<String> {
    let room = rows.saturating_sub(1).max(1);
    let view: Vec<String> = if lines.len() <= room {
        let claims: BTreeMap<&str, String> = workers
            .iter()
            .filter_map(|w| {
                w.claims.last().map(|c| {
                    let what = c.label.as_deref().unwrap_or(&c.text);
                    (w.id.as_str(), format!("{} {what}", c.id))
                })
            })
            .collect();
        lines
            .iter()
            .map(|(id, l)| {
                let claim = claims.get(id.as_str()).map_or("", String::as_str);
                format!(
                    "{id:<6} {:<8} turns {:<4} last {:<14} claim {:<28} tokens {}",
                    l.status.as_str(),
                    l.turns,
                    truncate(&l.last_action, 14),
                    truncate(claim, 28),
                    l.usage.input_tokens + l.usage.output_tokens
                )
            })
            .collect()
    } else {
        let counts: Vec<String> = WorkerStatus::ALL
            .iter()
            .map(|s| {
                let n = lines.values().filter(|l| l.status == *s).count();
                format!("{n} {}", s.as_str())
            })
            .collect();
        let turns: u64 = lines.values().map(|l| l.turns).sum();
        let tokens: u64 = lines
            .values()
            .map(|l| l.usage.input_tokens + l.usage.output_tokens)
            .sum();
        let claiming = workers.iter().filter(|w| !w.claims.is_empty()).count();
        let mut view = vec![
            format!(
                "{} workers: {} · {turns} turns · {claiming} with a claim · tokens {tokens}",
                lines.len(),
                counts.join(", ")
            ),
            "most recent changes:".to_string(),
        ];
        let shown = room.saturating_sub(view.len());
        let skip = recent.len().saturating_sub(shown);
        view.extend(recent.iter().skip(skip).map(|c| format!("  {c}")));
        view
    };
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
    outln!(
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
        outln!("{id} failed: {e}");
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
    outln!("{:<8} {:<9} {:<12} CLAIM", "WORKER", "STATUS", "ACTIVE");
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
        outln!(
            "{:<8} {:<9} {:<12} {}",
            w.id,
            w.status.as_str(),
            active,
            claim
        );
    }
    outln!(
        "PRs: {} open, {} merged, {} closed · board: {} records · messages: {}",
        stats.prs_open,
        stats.prs_merged,
        stats.prs_closed,
        stats.records,
        stats.messages
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workers(n: usize) -> BTreeMap<String, WorkerLine> {
        (0..n)
            .map(|i| {
                let status = WorkerStatus::ALL[i % 3];
                let line = WorkerLine {
                    status,
                    turns: 2,
                    last_action: "board_write".into(),
                    usage: Default::default(),
                };
                (format!("w{:04}", i + 1), line)
            })
            .collect()
    }

    #[test]
    fn a_thousand_workers_become_counts_and_recent_changes() {
        let lines = workers(1_024);
        let recent: VecDeque<String> = (0..RECENT_CHANGES)
            .map(|i| format!("w{:04}: turn 2 ended (board_write)", i + 1))
            .collect();
        let view = render_view(&lines, &[], &recent, 40, 100);
        assert_eq!(view.len(), 39, "{view:#?}");
        assert!(
            view[0].starts_with("1024 workers: 342 starting, 341 busy, 341 idle, 0 stalled"),
            "{}",
            view[0]
        );
        assert!(view[0].contains("2048 turns"), "{}", view[0]);
        assert_eq!(view[1], "most recent changes:");
        assert_eq!(
            view[38],
            format!("  w{:04}: turn 2 ended (board_write)", RECENT_CHANGES)
        );
        assert!(view.iter().all(|l| l.chars().count() <= 100));
    }

    #[test]
    fn workers_that_fit_get_a_line_each() {
        let lines = workers(5);
        let view = render_view(&lines, &[], &VecDeque::new(), 40, 200);
        assert_eq!(view.len(), 5);
        assert!(
            view[0].starts_with("w0001  starting turns 2"),
            "{}",
            view[0]
        );
        assert_eq!(render_view(&lines, &[], &VecDeque::new(), 6, 200).len(), 5);
        assert_eq!(render_view(&lines, &[], &VecDeque::new(), 5, 200)[0], {
            "5 workers: 2 starting, 2 busy, 1 idle, 0 stalled, 0 stopped, 0 dead · 10 turns · 0 with a claim · tokens 0"
        });
    }

    #[test]
    fn a_narrow_terminal_cuts_lines() {
        let view = render_view(&workers(3), &[], &VecDeque::new(), 40, 20);
        assert!(view.iter().all(|l| l.chars().count() == 20), "{view:#?}");
        assert!(view[0].ends_with('…'));
    }
}
