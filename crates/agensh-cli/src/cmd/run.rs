//! `agensh run DIR`: the hub and a node in one process, with a live view
//! ([`agensh_node::view`]).
//! What the workers run is decided by [`agensh_node::setup`]; this wires it to the hub.

use std::sync::Arc;
use std::time::Instant;

use agensh_client::Client;
use agensh_domain::config::Source;
use agensh_hub::org::{self, refuse_if_running, upstream_keys_set};
use agensh_hub::state_dir;
use agensh_node::node::{run_node, WorkerLimits};
use agensh_node::setup::{self, HubAt, Workers};
use agensh_node::view;
use agensh_process::{Shutdown, ShutdownTrigger};
use agensh_store::Store;
use anyhow::{Context, Result};
use tokio::sync::mpsc;

use crate::cli::{Global, RunArgs};
use crate::cmd::config::resolve;
use crate::cmd::hub::{raise_open_file_limit, stop_signal};
use crate::output::{json, lines, now_ms};

/// Shuts down on Ctrl-C or SIGTERM; the trigger stops the run from elsewhere too (its
/// goal met and the grace over).
pub(crate) fn stop_on_signal() -> Result<(Shutdown, Arc<ShutdownTrigger>)> {
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
    upstream_keys_set(&config)?;
    let (listen, note) = org::hub_listen(&config.hub.listen, &listen_source)?;
    note.into_iter().for_each(|n| eprintln!("{n}"));
    raise_open_file_limit();
    if org::create_state_if_missing(&dir, &config).await? {
        eprintln!(
            "created the organization's state in {}",
            agensh_hub::state_dir(&dir).display()
        );
    }
    let workers = match workers_source {
        Source::Default => Workers::Default(config.run.workers),
        _ => Workers::Given(config.run.workers),
    };
    let prepared = setup::prepare(
        &config,
        &dir,
        workers,
        HubAt::Here,
        crate::cmd::model::start_local,
    )
    .await?;
    for note in &prepared.notes {
        eprintln!("{note}");
    }
    let n = prepared.workers;
    let mut config = config;
    config.gateway = config.gateway.with_shorthand(&prepared.shorthand);
    config.gateway.validate()?;
    upstream_keys_set(&config)?;
    let started = Instant::now();
    let started_ms = now_ms();
    let store = org::open_store(&state_dir(&dir), &config.hub.store).await?;
    if let Some(line) = org::met_already(&*store, &config).await? {
        eprintln!("{line}");
        return Ok(());
    }
    let repo = state_dir(&dir).join(agensh_workspace::REPO_DIR);
    let ws = agensh_workspace::Workspace::open(&repo)?;
    let hub =
        agensh_hub::start_with_workspace(store.clone(), Some(ws), config.clone(), &listen).await?;
    org::announce(&dir, &hub)?;
    let admin = Client::new(&hub.url, &hub.admin_token);
    let workers = admin.first_workers(n).await?;
    let (plan, model_server) = setup::plan(&config, &dir, &hub.url, workers, n, prepared)?;
    // Nodes on other hosts joining this run get its task pack (and its end, from the clock
    // told below) when they register.
    hub.set_pack(plan.pack.clone());
    let clock = view::RunClock {
        started,
        ends_at: plan.ends_at,
        dashboard: format!("{}/", hub.url),
    };
    view::tell_dashboard(&admin, &clock).await;
    let goal = &config.organization.goal;
    eprintln!(
        "{}",
        view::running(n, &plan.agent.describe(), goal, &hub.url)
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
    let read = {
        let store = store.clone();
        move || {
            let store = store.clone();
            async move {
                let workers = store.list_workers(now_ms()).await.unwrap_or_default();
                (workers, store.stats().await.unwrap_or_default())
            }
        }
    };
    let view = tokio::spawn(view::live_view(rx, read, clock, a.json));
    let goal_end = tokio::spawn(view::end_at_goal(
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
    let gateway = agensh_client::show::per_worker(&store.model_usage(None).await?);
    let economy = agensh_hub::goal::economy(&*store, &goal).await?;
    org::retire(&dir);
    if print {
        let run = view::RunEnd {
            elapsed: started.elapsed(),
            started_ms,
            goal: &goal,
            economy: &economy,
        };
        if a.json {
            json(&view::summary_json(&summary, &stats, &gateway, &run));
        } else {
            lines(view::summary_lines(&summary, &stats, &gateway, &run));
        }
    }
    view::every_worker_failed(&summary)?;
    crate::cmd::goal::judge(&goal, interrupted)
}
